//! Many OS processes, each with its own connection pool, against one PostgreSQL database:
//!
//! - contention: processes (four tasks each, sharing the store's group commit) race `claim` on
//!   shared jobs and `claim_next` on a shared queue while the driver kills some of them with
//!   SIGKILL and starts others; every acknowledged
//!   (job, fence) is unique, the acknowledged leases of a job never overlap in time (each one
//!   starts at or after the previous one's `until`), and each job has at most one acknowledged
//!   result, which is the stored one;
//! - linearizability: the histories of processes (some killed mid-call, so their last call's
//!   answer is lost) are checked with the shared checker against the sequential contract.
//!
//! A `harness = false` test: the same binary is the driver and, re-executed with
//! `LEASE_PG_ROLE=contend` or `history`, each process.

use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_domain::{Fence, JobId, JobResult, LeaseTerm, Owner, QueueName, Timestamp};
use lease_ports::LeaseStore;
use lease_ports::history::log::{answer_text, call_text, read_history};
use lease_ports::history::{Answer, Rng, check_linearizable, perform, random_call};
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

const SHARED_JOBS: u64 = 4;
const QUEUED_JOBS: usize = 300;
const CONTENDERS: usize = 6;
const HISTORY_PROCESSES: usize = 4;
const HISTORY_CALLS: usize = 200;
/// One logical tick of the history callers' `now`, in nanoseconds of the shared wall clock.
const TICK_NS: u128 = 4_000_000;

fn wall() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

fn log_file(name: &str) -> impl FnMut(String) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(Path::new(&env("LEASE_PG_LOGS")).join(name))
        .unwrap();
    move |line: String| file.write_all(format!("{line}\n").as_bytes()).unwrap()
}

async fn open() -> PgLeaseStore {
    let options = PgOptions {
        pool_size: 3,
        ..PgOptions::default()
    };
    PgLeaseStore::open(&env("LEASE_PG_URL"), options)
        .await
        .unwrap()
}

/// One contending process: [`CONTENDERS`] tasks sharing one store, so that their claims share
/// group commit's batches and a kill lands in a batch of several.
async fn contend() {
    let store = open().await;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| tokio::spawn(contend_as(store.clone(), t)))
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Contending tasks per process.
const TASKS: u64 = 4;

/// One contending task: until its deadline, claims shared jobs by id and leases from the
/// shared queue, completing some and letting others expire; logs every acknowledged lease and
/// completion as one line.
async fn contend_as(store: PgLeaseStore, t: u64) {
    let deadline: f64 = env("LEASE_PG_DEADLINE").parse().unwrap();
    let me = Owner::new(format!("p{}-{t}", std::process::id())).unwrap();
    let mut note = log_file(me.as_str());
    let mut rng = Rng::new(u64::from(std::process::id()) * TASKS + t);
    let queue = QueueName::new("q").unwrap();
    let mut n = 0_u64;
    while wall() < deadline {
        n += 1;
        let ttl = 0.005 + f64::from(u32::try_from(rng.below(20)).unwrap()) / 1000.0;
        let now = wall();
        let term = LeaseTerm::new(now, ttl).unwrap();
        let leases: Vec<(JobId, Fence)> = if rng.below(2) == 0 {
            let job = JobId::new(format!("shared-{}", rng.below(SHARED_JOBS))).unwrap();
            match store.claim(&job, &me, term).await {
                Ok(Ok(fence)) => vec![(job, fence)],
                _ => Vec::new(),
            }
        } else {
            match store.claim_next(&queue, &me, term, 2).await {
                Ok(leases) => leases.into_iter().map(|l| (l.job, l.fence)).collect(),
                Err(_) => Vec::new(),
            }
        };
        for (job, fence) in leases {
            note(format!(
                "lease {job} {fence} {now} {} {me}",
                term.until().get()
            ));
            if rng.below(3) == 0 {
                // Left to expire, as a worker that stalled or died would.
                continue;
            }
            let result = JobResult::new(format!("{me}:{fence}:{n}")).unwrap();
            let at = Timestamp::new(wall()).unwrap();
            if let Ok(Ok(())) = store.complete(&job, &me, fence, at, &result).await {
                note(format!("done {job} {fence} {}", result.as_str()));
            }
        }
    }
}

/// One history process: random seed-contract calls on shared jobs, each logged before it is
/// made and after it returns, so a kill leaves an invocation without a return.
async fn history() {
    let store = open().await;
    let start: u128 = env("LEASE_PG_START").parse().unwrap();
    let me = Owner::new(format!("h{}", std::process::id())).unwrap();
    let mut note = log_file(me.as_str());
    let mut rng = Rng::new(u64::from(std::process::id()) * 104_729);
    let mut granted: Vec<Vec<Fence>> = vec![Vec::new(); 3];
    for seq in 0..HISTORY_CALLS {
        let j = usize::try_from(rng.below(3)).unwrap();
        let job = JobId::new(format!("job-{j}")).unwrap();
        let tick = u32::try_from(wall_ns().saturating_sub(start) / TICK_NS).unwrap();
        let call = random_call(&mut rng, &me, &granted[j], tick);
        note(format!(
            "I {me}/{seq} {} {job} {}",
            wall_ns(),
            call_text(&call)
        ));
        let answer = perform(&store, &job, &call).await.ok();
        let returned = wall_ns();
        if let Some(answer) = answer {
            note(format!("A {me}/{seq} {returned} {}", answer_text(answer)));
            if let Answer::Claimed(Some(fence)) = answer {
                granted[j].push(fence);
            }
        }
    }
}

fn spawn(role: &str, url: &str, logs: &Path, extra: (&str, String)) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env("LEASE_PG_ROLE", role)
        .env("LEASE_PG_URL", url)
        .env("LEASE_PG_LOGS", logs)
        .env(extra.0, extra.1)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Kills a random running child now and then and starts a replacement; returns the kills.
fn kill_some(children: &mut [Child], rounds: usize, restart: &dyn Fn() -> Child) -> usize {
    let mut rng = Rng::new(7);
    let mut kills = 0;
    for _ in 0..rounds {
        std::thread::sleep(Duration::from_millis(50 + rng.below(150)));
        let i = usize::try_from(rng.below(children.len() as u64)).unwrap();
        if children[i].try_wait().unwrap().is_none() {
            children[i].kill().unwrap();
            kills += 1;
        }
        children[i].wait().unwrap();
        children[i] = restart();
    }
    kills
}

struct Lease {
    fence: u64,
    now: f64,
    until: f64,
    owner: String,
}

fn contention(runtime: &tokio::runtime::Runtime) -> String {
    let db = ScratchDatabase::create();
    let dir = tempfile::tempdir().unwrap();
    let logs: PathBuf = dir.path().to_owned();
    let store = runtime
        .block_on(PgLeaseStore::init(db.url(), PgOptions::default()))
        .unwrap();
    runtime.block_on(async {
        for j in 0..SHARED_JOBS {
            store
                .enqueue(&JobId::new(format!("shared-{j}")).unwrap())
                .await
                .unwrap();
        }
        let spec = lease_domain::EnqueueSpec {
            queue: QueueName::new("q").unwrap(),
            max_attempts: Some(1000),
            ..lease_domain::EnqueueSpec::default()
        };
        for j in 0..QUEUED_JOBS {
            store
                .enqueue_with(&JobId::new(format!("queued-{j}")).unwrap(), &spec)
                .await
                .unwrap();
        }
    });
    let deadline = wall() + 4.0;
    let start = || {
        spawn(
            "contend",
            db.url(),
            &logs,
            ("LEASE_PG_DEADLINE", deadline.to_string()),
        )
    };
    let mut children: Vec<Child> = (0..CONTENDERS).map(|_| start()).collect();
    let kills = kill_some(&mut children, 8, &start);
    for child in &mut children {
        let status = child.wait().unwrap();
        assert!(status.success(), "a contending process failed: {status}");
    }
    let mut leases: BTreeMap<String, Vec<Lease>> = BTreeMap::new();
    let mut results: HashMap<String, Vec<String>> = HashMap::new();
    for entry in std::fs::read_dir(&logs).unwrap() {
        for line in std::fs::read_to_string(entry.unwrap().path())
            .unwrap()
            .lines()
        {
            match line.split(' ').collect::<Vec<_>>().as_slice() {
                ["lease", job, fence, now, until, owner] => {
                    leases.entry((*job).to_owned()).or_default().push(Lease {
                        fence: fence.parse().unwrap(),
                        now: now.parse().unwrap(),
                        until: until.parse().unwrap(),
                        owner: (*owner).to_owned(),
                    })
                }
                ["done", job, _, result] => results
                    .entry((*job).to_owned())
                    .or_default()
                    .push((*result).to_owned()),
                _ => panic!("unreadable line {line:?}"),
            }
        }
    }
    let mut total = 0;
    for (job, list) in &mut leases {
        list.sort_by_key(|l| l.fence);
        total += list.len();
        for pair in list.windows(2) {
            assert!(
                pair[0].fence < pair[1].fence,
                "job {job}: fence {} acknowledged twice",
                pair[0].fence
            );
            assert!(
                pair[1].now >= pair[0].until,
                "job {job}: {} leased fence {} at {} while {}'s fence {} was live until {}",
                pair[1].owner,
                pair[1].fence,
                pair[1].now,
                pair[0].owner,
                pair[0].fence,
                pair[0].until
            );
        }
    }
    let stored = runtime.block_on(async {
        let mut stored = HashMap::new();
        for job in results.keys() {
            let state = store
                .state(&JobId::new(job.clone()).unwrap())
                .await
                .unwrap()
                .unwrap();
            stored.insert(job.clone(), state.result);
        }
        stored
    });
    for (job, acked) in &results {
        assert_eq!(
            acked.len(),
            1,
            "job {job} has several acknowledged results: {acked:?}"
        );
        assert_eq!(
            stored[job].as_deref(),
            Some(acked[0].as_str()),
            "job {job}: acknowledged result lost"
        );
    }
    assert!(total > 100, "only {total} leases");
    format!(
        "{total} leases on {} jobs and {} results from {} processes ({kills} killed with SIGKILL): one holder at a time",
        leases.len(),
        results.len(),
        CONTENDERS + 8
    )
}

fn linearizable(runtime: &tokio::runtime::Runtime) -> String {
    let db = ScratchDatabase::create();
    let dir = tempfile::tempdir().unwrap();
    let logs: PathBuf = dir.path().to_owned();
    runtime
        .block_on(PgLeaseStore::init(db.url(), PgOptions::default()))
        .unwrap();
    let start = wall_ns();
    let spawn_one = || {
        spawn(
            "history",
            db.url(),
            &logs,
            ("LEASE_PG_START", start.to_string()),
        )
    };
    let mut children: Vec<Child> = (0..HISTORY_PROCESSES).map(|_| spawn_one()).collect();
    let kills = kill_some(&mut children, 6, &spawn_one);
    for child in &mut children {
        assert!(child.wait().unwrap().success(), "a history process failed");
    }
    let history = read_history(&logs);
    let unreturned = history.iter().filter(|e| e.answer.is_none()).count();
    assert!(
        history.len() >= HISTORY_PROCESSES * HISTORY_CALLS,
        "only {} calls",
        history.len()
    );
    let jobs = check_linearizable(&history).unwrap_or_else(|v| panic!("{v}"));
    format!(
        "{} calls ({kills} processes killed mid-run, {unreturned} answers lost) on {jobs} jobs: linearizable",
        history.len()
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match std::env::var("LEASE_PG_ROLE").as_deref() {
        Ok("contend") => return runtime.block_on(contend()),
        Ok("history") => return runtime.block_on(history()),
        _ => {}
    }
    type Check = (&'static str, fn(&tokio::runtime::Runtime) -> String);
    let checks: [Check; 2] = [
        (
            "processes_contending_with_kills_get_one_holder_per_job_at_a_time",
            contention,
        ),
        (
            "histories_of_killed_processes_are_linearizable",
            linearizable,
        ),
    ];
    let mut failed = 0;
    for (name, check) in checks {
        match std::panic::catch_unwind(|| check(&runtime)) {
            Ok(summary) => println!("test {name} ... ok ({summary})"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{} passed, {failed} failed", checks.len() - failed);
    if failed > 0 {
        std::process::exit(1);
    }
}
