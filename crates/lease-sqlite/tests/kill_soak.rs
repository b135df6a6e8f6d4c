//! Kill soak: writer processes loop claim / renew / complete / release on a few shared jobs and
//! log every acknowledged outcome; a driver `kill -9`s them at random moments and restarts them;
//! a replayer keeps sending old fences and stale completions. Then a checker proves that no fence
//! was acknowledged twice, no acknowledged write was lost, no stale write was accepted, and the
//! database is intact.
//!
//! A second check records the histories of writer processes (some of them killed mid-call) and
//! checks them for linearizability against the sequential contract.
//!
//! This is a `harness = false` test: the same binary is the driver and, re-executed with
//! `LEASE_SOAK_ROLE=writer` or `history`, each writer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lease_domain::{Fence, JobId, JobResult, LeaseTerm, Owner, Timestamp};
use lease_ports::history::log::{answer_text, call_text, read_history};
use lease_ports::history::{Answer, Call, Rng, check_linearizable, random_call};
use lease_sqlite::{SqliteLeaseStore, SqliteOptions};

const SLOTS: u64 = 3;
const WRITERS: usize = 4;
const WRITER_THREADS: u64 = 3;
const MIN_KILLS: usize = 100;
const SOAK: Duration = Duration::from_secs(12);
const HARD_LIMIT: Duration = Duration::from_secs(60);

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// One writer process: runs until killed or until its deadline passes.
fn writer() {
    let db = PathBuf::from(env("LEASE_SOAK_DB"));
    let options = SqliteOptions {
        create: false,
        ..SqliteOptions::default()
    };
    let store = SqliteLeaseStore::open_with(&db, options).unwrap();
    // Several threads per process, so group commit batches their writes and kills land mid-batch.
    std::thread::scope(|scope| {
        for thread in 0..WRITER_THREADS {
            let store = &store;
            scope.spawn(move || writer_thread(store, thread));
        }
    });
}

/// A writer's owner name and its log, in `LEASE_SOAK_LOGS`; each line is one write call, so a
/// kill never leaves half a line.
fn writer_log(name: &str) -> (Owner, impl FnMut(String) + use<>) {
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(Path::new(&env("LEASE_SOAK_LOGS")).join(name))
        .unwrap();
    let note = move |line: String| log.write_all(format!("{line}\n").as_bytes()).unwrap();
    (Owner::new(name).unwrap(), note)
}

fn writer_thread(store: &SqliteLeaseStore, thread: u64) {
    let deadline: f64 = env("LEASE_SOAK_DEADLINE").parse().unwrap();
    let (me, mut note) = writer_log(&format!(
        "w{}-{}-t{thread}",
        env("LEASE_SOAK_ID"),
        std::process::id()
    ));
    let store = store.blocking();
    let mut rng = Rng::new(u64::from(std::process::id()) * 7919 + thread);
    let mut generation = [0_u32; 3];
    let mut counter = 0_u64;
    while unix_now() < deadline {
        let slot = usize::try_from(rng.below(SLOTS)).unwrap();
        let job = JobId::new(format!("s{slot}-g{}", generation[slot])).unwrap();
        match store.state(&job) {
            Ok(None) => {
                let _ = store.enqueue(&job);
                continue;
            }
            Ok(Some(s)) if s.done => {
                generation[slot] += 1;
                continue;
            }
            Ok(Some(_)) => {}
            Err(e) => {
                note(format!("error {e}"));
                continue;
            }
        }
        let ttl = 0.002 + f64::from(u32::try_from(rng.below(30)).unwrap()) / 1000.0;
        let Ok(Ok(fence)) = store.claim(&job, &me, LeaseTerm::new(unix_now(), ttl).unwrap()) else {
            continue;
        };
        note(format!("claim {job} {fence} {me}"));
        counter += 1;
        let action = rng.below(4);
        if action == 3 {
            // Stall past the lease now and then, as the stale worker of the story does.
            std::thread::sleep(Duration::from_millis(rng.below(40)));
        }
        match action {
            0 | 3 => {
                let result = JobResult::new(format!("{me}:{fence}:{counter}")).unwrap();
                let now = Timestamp::new(unix_now()).unwrap();
                if let Ok(Ok(())) = store.complete(&job, &me, fence, now, &result) {
                    note(format!("complete {job} {fence} {me} {}", result.as_str()));
                }
            }
            1 => {
                let term = LeaseTerm::new(unix_now(), ttl).unwrap();
                if let Ok(Ok(())) = store.renew(&job, &me, fence, term) {
                    note(format!("renew {job} {fence} {me}"));
                }
            }
            _ => {
                if let Ok(Ok(())) = store.release(&job, &me, fence) {
                    note(format!("release {job} {fence} {me}"));
                }
            }
        }
    }
}

/// Every acknowledged outcome the writers logged.
#[derive(Default)]
struct Acks {
    /// (job, fence) -> owner, for each acknowledged claim; a second ack of the same pair is a violation.
    claims: BTreeMap<(String, u64), String>,
    duplicate_claims: Vec<String>,
    /// job -> (fence, owner, result) of acknowledged completions.
    completions: HashMap<String, Vec<(u64, String, String)>>,
    /// (job, fence) of acknowledged renewals and releases.
    writes: Vec<(String, u64)>,
    errors: usize,
}

fn read_acks(logs: &Path) -> Acks {
    let mut acks = Acks::default();
    for entry in std::fs::read_dir(logs).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["claim", job, fence, owner] => {
                    let key = ((*job).to_owned(), fence.parse().unwrap());
                    if acks.claims.insert(key, (*owner).to_owned()).is_some() {
                        acks.duplicate_claims.push(line.to_owned());
                    }
                }
                ["complete", job, fence, owner, result] => acks
                    .completions
                    .entry((*job).to_owned())
                    .or_default()
                    .push((
                        fence.parse().unwrap(),
                        (*owner).to_owned(),
                        (*result).to_owned(),
                    )),
                ["renew" | "release", job, fence, _] => {
                    acks.writes
                        .push(((*job).to_owned(), fence.parse().unwrap()));
                }
                ["error", ..] => acks.errors += 1,
                _ => panic!("unreadable log line {line:?}"),
            }
        }
    }
    acks
}

/// Sends writes with fences that a later acknowledged claim has made stale; counts any accepted.
fn replay_stale(
    db: &Path,
    logs: &Path,
    stop: &AtomicBool,
    sent: &AtomicUsize,
    accepted: &AtomicUsize,
) {
    let store = SqliteLeaseStore::open_existing(db).unwrap();
    let store = store.blocking();
    let mut rng = Rng::new(42);
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        let acks = read_acks(logs);
        let mut latest: HashMap<&str, u64> = HashMap::new();
        for (job, fence) in acks.claims.keys() {
            let top = latest.entry(job.as_str()).or_default();
            *top = (*top).max(*fence);
        }
        let stale: Vec<_> = acks
            .claims
            .iter()
            .filter(|((job, fence), _)| *fence < latest[job.as_str()])
            .collect();
        for _ in 0..10 {
            if stale.is_empty() {
                break;
            }
            let ((job, fence), owner) =
                stale[usize::try_from(rng.below(stale.len() as u64)).unwrap()];
            let (job, owner, fence) = (
                JobId::new(job.clone()).unwrap(),
                Owner::new(owner.clone()).unwrap(),
                Fence::new(*fence).unwrap(),
            );
            let now = unix_now();
            let result = JobResult::new("stale").unwrap();
            let outcomes = [
                store
                    .complete(&job, &owner, fence, Timestamp::new(now).unwrap(), &result)
                    .map(|o| o.is_ok()),
                store
                    .renew(&job, &owner, fence, LeaseTerm::new(now, 1.0).unwrap())
                    .map(|o| o.is_ok()),
                store.release(&job, &owner, fence).map(|o| o.is_ok()),
            ];
            for outcome in outcomes {
                sent.fetch_add(1, Ordering::SeqCst);
                if matches!(outcome, Ok(true)) {
                    accepted.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
}

fn spawn_writer(id: usize, db: &Path, logs: &Path, deadline: f64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env("LEASE_SOAK_ROLE", "writer")
        .env("LEASE_SOAK_ID", id.to_string())
        .env("LEASE_SOAK_DB", db)
        .env("LEASE_SOAK_LOGS", logs)
        .env("LEASE_SOAK_DEADLINE", deadline.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn kill_soak() -> String {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("soak.db");
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    lease_sqlite::init_db(&db).unwrap();
    let started = Instant::now();
    let deadline = unix_now() + HARD_LIMIT.as_secs_f64();
    let mut writers: Vec<Child> = (0..WRITERS)
        .map(|i| spawn_writer(i, &db, &logs, deadline))
        .collect();
    let (stop, sent, accepted) = (
        AtomicBool::new(false),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let mut kills = 0;
    std::thread::scope(|scope| {
        scope.spawn(|| replay_stale(&db, &logs, &stop, &sent, &accepted));
        let mut rng = Rng::new(7);
        while (started.elapsed() < SOAK || kills < MIN_KILLS) && started.elapsed() < HARD_LIMIT {
            std::thread::sleep(Duration::from_millis(5 + rng.below(60)));
            let i = usize::try_from(rng.below(WRITERS as u64)).unwrap();
            writers[i].kill().unwrap();
            writers[i].wait().unwrap();
            kills += 1;
            writers[i] = spawn_writer(i, &db, &logs, deadline);
        }
        for writer in &mut writers {
            writer.kill().unwrap();
            writer.wait().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
    });

    let acks = read_acks(&logs);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    let mut stored: HashMap<String, (i64, Option<String>, Option<String>, bool)> = HashMap::new();
    let mut stmt = conn
        .prepare("SELECT id, fence, owner, result, done FROM jobs")
        .unwrap();
    for row in stmt
        .query_map([], |r| {
            Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        })
        .unwrap()
    {
        let (id, row) = row.unwrap();
        stored.insert(id, row);
    }

    let mut violations = Vec::new();
    violations.extend(
        acks.duplicate_claims
            .iter()
            .map(|l| format!("fence acknowledged twice: {l}")),
    );
    for (job, fence) in acks.claims.keys() {
        let top = stored.get(job).map_or(-1, |s| s.0);
        if i64::try_from(*fence).unwrap() > top {
            violations.push(format!(
                "job {job}: acknowledged fence {fence} > stored fence {top}"
            ));
        }
    }
    for (job, fence) in &acks.writes {
        let top = stored.get(job).map_or(-1, |s| s.0);
        if i64::try_from(*fence).unwrap() > top {
            violations.push(format!(
                "job {job}: acknowledged write with fence {fence} > stored fence {top}"
            ));
        }
    }
    for (job, done) in &acks.completions {
        if done.len() != 1 {
            violations.push(format!(
                "job {job}: {} completions acknowledged",
                done.len()
            ));
        }
        let (fence, owner, result) = &done[0];
        let expected = (
            i64::try_from(*fence).unwrap(),
            Some(owner.clone()),
            Some(result.clone()),
            true,
        );
        if stored.get(job) != Some(&expected) {
            violations.push(format!(
                "job {job}: acknowledged completion {expected:?} but stored {:?}",
                stored.get(job)
            ));
        }
    }
    if accepted.load(Ordering::SeqCst) > 0 {
        violations.push(format!(
            "{} stale writes accepted",
            accepted.load(Ordering::SeqCst)
        ));
    }
    if integrity != "ok" {
        violations.push(format!("integrity_check: {integrity}"));
    }
    assert!(kills >= MIN_KILLS, "only {kills} kills");
    assert!(
        acks.claims.len() > 100,
        "only {} claims acknowledged: the soak did too little",
        acks.claims.len()
    );
    assert!(!acks.completions.is_empty(), "no completion acknowledged");
    assert!(sent.load(Ordering::SeqCst) > 0, "the replayer sent nothing");
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
    let jobs: HashSet<&String> = acks.claims.keys().map(|(job, _)| job).collect();
    format!(
        "{kills} kills in {:.1} s; {} claims, {} completions, {} renewals/releases acknowledged on {} jobs; \
         {} stale writes replayed, 0 accepted; {} writer errors; integrity ok",
        started.elapsed().as_secs_f64(),
        acks.claims.len(),
        acks.completions.len(),
        acks.writes.len(),
        jobs.len(),
        sent.load(Ordering::SeqCst),
        acks.errors,
    )
}

const HISTORY_PROCESSES: usize = 4;
const HISTORY_CALLS: usize = 300;
const HISTORY_JOBS: u64 = 3;
/// One logical tick of the callers' `now`, in nanoseconds of the shared wall clock.
const TICK_NS: u128 = 4_000_000;

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn perform_blocking(
    store: &lease_sqlite::Blocking<'_>,
    job: &JobId,
    call: &Call,
) -> Option<Answer> {
    Some(match call {
        Call::Enqueue => Answer::Enqueued(store.enqueue(job).ok()?),
        Call::Claim(o, t) => Answer::Claimed(store.claim(job, o, *t).ok()?.ok()),
        Call::Renew(o, f, t) => Answer::Wrote(store.renew(job, o, *f, *t).ok()?.is_ok()),
        Call::Complete(o, f, now, r) => {
            Answer::Wrote(store.complete(job, o, *f, *now, r).ok()?.is_ok())
        }
        Call::Release(o, f) => Answer::Wrote(store.release(job, o, *f).ok()?.is_ok()),
        other => panic!("random_call never makes {other:?}"),
    })
}

/// One history writer: random calls on shared jobs, each logged before it is made and after it
/// returns, so a kill leaves an invocation without a return.
fn history_writer() {
    let db = PathBuf::from(env("LEASE_SOAK_DB"));
    let start: u128 = env("LEASE_SOAK_START").parse().unwrap();
    let (me, mut note) = writer_log(&format!("h{}-{}", env("LEASE_SOAK_ID"), std::process::id()));
    let store = SqliteLeaseStore::open_existing(&db).unwrap();
    let store = store.blocking();
    let mut rng = Rng::new(u64::from(std::process::id()) * 104_729);
    let mut granted: Vec<Vec<Fence>> = vec![Vec::new(); 3];
    for seq in 0..HISTORY_CALLS {
        let j = usize::try_from(rng.below(HISTORY_JOBS)).unwrap();
        let job = JobId::new(format!("job-{j}")).unwrap();
        let tick = u32::try_from(wall_ns().saturating_sub(start) / TICK_NS).unwrap();
        let call = random_call(&mut rng, &me, &granted[j], tick);
        note(format!(
            "I {me}/{seq} {} {job} {}",
            wall_ns(),
            call_text(&call)
        ));
        let answer = perform_blocking(&store, &job, &call);
        let returned = wall_ns();
        if let Some(answer) = answer {
            note(format!("A {me}/{seq} {returned} {}", answer_text(answer)));
            if let Answer::Claimed(Some(fence)) = answer {
                granted[j].push(fence);
            }
        }
    }
}

fn linearizable_across_killed_processes() -> String {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("history.db");
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    lease_sqlite::init_db(&db).unwrap();
    let start = wall_ns();
    let spawn = |id: usize| {
        Command::new(std::env::current_exe().unwrap())
            .env("LEASE_SOAK_ROLE", "history")
            .env("LEASE_SOAK_ID", id.to_string())
            .env("LEASE_SOAK_DB", &db)
            .env("LEASE_SOAK_LOGS", &logs)
            .env("LEASE_SOAK_START", start.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut children: Vec<Child> = (0..HISTORY_PROCESSES).map(spawn).collect();
    let mut rng = Rng::new(99);
    let (mut kills, mut spawned) = (0, HISTORY_PROCESSES);
    for _ in 0..12 {
        std::thread::sleep(Duration::from_millis(2 + rng.below(20)));
        let i = usize::try_from(rng.below(HISTORY_PROCESSES as u64)).unwrap();
        if children[i].try_wait().unwrap().is_none() {
            children[i].kill().unwrap();
            kills += 1;
        }
        children[i].wait().unwrap();
        children[i] = spawn(spawned);
        spawned += 1;
    }
    for child in &mut children {
        assert!(child.wait().unwrap().success(), "a history writer failed");
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
        "{} calls from {spawned} processes ({kills} killed mid-run, {unreturned} calls never returned) on {jobs} jobs: linearizable",
        history.len(),
    )
}

fn main() {
    match std::env::var("LEASE_SOAK_ROLE").as_deref() {
        Ok("writer") => return writer(),
        Ok("history") => return history_writer(),
        _ => {}
    }
    type Check = (&'static str, fn() -> String);
    let checks: [Check; 2] = [
        ("kill_soak_keeps_every_fence_guarantee", kill_soak),
        (
            "histories_of_killed_processes_are_linearizable",
            linearizable_across_killed_processes,
        ),
    ];
    let mut failed = 0;
    for (name, check) in checks {
        match std::panic::catch_unwind(check) {
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
