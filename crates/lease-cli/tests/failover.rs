//! Fences across the store's own failover and restores (issue 53): a real primary and a real
//! streaming standby (clusters of the test's own, `common/cluster.rs`), asynchronous and
//! synchronous; the primary is killed with SIGKILL while workers hold, renew and write to
//! fenced resources (a SQL guard in another database, a directory guard), the standby is
//! promoted, and the workers carry on through a multi-host URL while the stale holders keep
//! writing. Checked from the stores' and the guards' own data: no fence handed out twice for a
//! job, no stale write admitted by a guard, every fence after the promotion above every fence
//! before it; with synchronous replication, no acknowledged completion lost. The same for a
//! point-in-time restore.

use crate::cluster;
use crate::reaped as support_reaped;
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cluster::{Place, Replication, Server};
use lease_domain::{
    EnqueueSpec, Epoch, Fence, JobId, JobResult, LeaseTerm, Owner, QueueName, Timestamp,
};
use lease_guard::Admission;
use lease_guard::dir::DirGuard;
use lease_guard::value::{GuardKey, PutOptions, ValueGuard};
use lease_ports::transfer::Transfer;
use lease_ports::{LeaseStore, StoreError};
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

/// One failover at a time: each test makes two clusters.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs_f64()
}

fn id(name: &str) -> JobId {
    JobId::new(name).expect("a job id")
}

fn owner(name: &str) -> Owner {
    Owner::new(name).expect("an owner")
}

/// How long a lease lasts: long enough to renew through a slow moment, short enough that the
/// test waits for it to expire.
const TTL: f64 = 3.0;

fn term() -> LeaseTerm {
    LeaseTerm::new(now(), TTL).expect("a term")
}

/// The fenced resources every holder writes to, with what they admitted.
struct Resources {
    /// A database on the machine's PostgreSQL with the SQL guard (`res.admit_fence`) and a
    /// table of every admitted write, made in the guard's transaction.
    _db: ScratchDatabase,
    sql: tokio_postgres::Client,
    dir: DirGuard,
    _files: tempfile::TempDir,
}

/// What one write to both resources came to.
#[derive(Debug, Default, Clone, Copy)]
struct Written {
    sql: bool,
    dir: bool,
}

impl Resources {
    async fn new() -> Self {
        let db = ScratchDatabase::create();
        let sql = db.client().await.expect("the resource database answers");
        lease_postgres::guard::install(&sql, "res")
            .await
            .expect("the SQL guard installs");
        sql.batch_execute(
            "CREATE TABLE res.writes (seq bigserial PRIMARY KEY, key text NOT NULL, \
             fence bigint NOT NULL, holder text NOT NULL)",
        )
        .await
        .expect("the table of writes");
        let files = tempfile::tempdir().expect("a directory");
        let dir = DirGuard::open(files.path()).expect("the directory guard opens");
        Self {
            _db: db,
            sql,
            dir,
            _files: files,
        }
    }

    /// `holder` (of `job` under `fence`) writes to both resources: the SQL guard admits the
    /// fence and records the write in one transaction; the directory guard writes a file.
    async fn write(&self, job: &JobId, fence: Fence, holder: &str) -> Written {
        let statement = format!(
            "SELECT res.admit_fence('{job}', {fence}); \
             INSERT INTO res.writes (key, fence, holder) VALUES ('{job}', {fence}, '{holder}');"
        );
        // One simple query: one implicit transaction, so a refused fence records nothing.
        let sql = self.sql.batch_execute(&statement).await.is_ok();
        let key = GuardKey::new(job.as_str()).expect("a file key");
        let value = format!("{holder} {fence}");
        let dir: Admission = self
            .dir
            .put(&key, value.as_bytes(), fence, &PutOptions::default())
            .await
            .expect("the directory answers");
        let dir = dir.is_ok();
        Written { sql, dir }
    }

    /// Every admitted write of the SQL guard, in the order it admitted them.
    async fn sql_writes(&self) -> Vec<(String, i64, String)> {
        self.sql
            .query(
                "SELECT key, fence, holder FROM res.writes ORDER BY seq",
                &[],
            )
            .await
            .expect("the writes read")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// The directory guard's value of `job` (holder and fence) and the fence it keeps.
    async fn dir_value(&self, job: &JobId) -> Option<(String, Fence)> {
        let key = GuardKey::new(job.as_str()).expect("a file key");
        self.dir
            .get(&key)
            .await
            .expect("the directory answers")
            .map(|g| (String::from_utf8_lossy(&g.value).into_owned(), g.fence))
    }
}

/// An acknowledged claim: the job, its fence and who got it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Claimed {
    job: JobId,
    fence: Fence,
    holder: String,
}

impl Claimed {
    /// The holder completes its job with `result`, now.
    async fn complete(
        &self,
        store: &dyn Transfer,
        result: &str,
    ) -> Result<lease_ports::WriteOutcome, StoreError> {
        store
            .complete(
                &self.job,
                &owner(&self.holder),
                self.fence,
                Timestamp::new(now()).expect("a time"),
                &JobResult::new(result).expect("a result"),
            )
            .await
    }
}

/// Calls `call` until the store answers (through a failover, the multi-host URL reaches the
/// new primary once it takes writes).
async fn until_answered<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match call().await {
            Ok(value) => return value,
            Err(e) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{what}: the store never answered: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The store on a multi-host URL: whichever of the two servers takes writes.
async fn store_on(servers: &[&Server]) -> Arc<PgLeaseStore> {
    let hosts: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let url = format!(
        "postgres://postgres@{}/jobs?target_session_attrs=read-write&connect_timeout=2",
        hosts.join(",")
    );
    let options = PgOptions {
        pool_size: 4,
        wait_timeout: Duration::from_secs(5),
        ..PgOptions::default()
    };
    Arc::new(
        PgLeaseStore::init(&url, options)
            .await
            .expect("the store opens on the primary"),
    )
}

const JOBS: [&str; 8] = ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"];

/// What the workers did before and after the store lost part of its history, and the
/// resources they wrote to.
struct Story {
    resources: Resources,
    queue: QueueName,
    /// Every claim acknowledged before the loss: the holders that go stale.
    holders: Vec<Claimed>,
    /// Every claim acknowledged after it.
    fresh: Vec<Claimed>,
}

impl Story {
    /// Enqueues [`JOBS`] in queue `q`.
    async fn new(store: &dyn Transfer) -> Self {
        let queue = QueueName::new("q").expect("a queue");
        let spec = EnqueueSpec {
            queue: queue.clone(),
            max_attempts: Some(10),
            ..EnqueueSpec::default()
        };
        for job in JOBS {
            assert!(store.enqueue_with(&id(job), &spec).await.expect("enqueue"));
        }
        assert_eq!(store.epoch().await.expect("the epoch"), Epoch::ZERO);
        Self {
            resources: Resources::new().await,
            queue,
            holders: Vec::new(),
            fresh: Vec::new(),
        }
    }

    /// An old worker claims `job` by id and writes to the resources.
    async fn claim_before(&mut self, store: &dyn Transfer, job: &str) {
        let holder = format!("old-{job}");
        let fence = store
            .claim(&id(job), &owner(&holder), term())
            .await
            .expect("the primary answers")
            .expect("the claim is granted");
        let held = Claimed {
            job: id(job),
            fence,
            holder,
        };
        let written = self.resources.write(&held.job, fence, &held.holder).await;
        assert!(
            written.sql && written.dir,
            "{held:?}: the first write is admitted"
        );
        self.holders.push(held);
    }

    /// The restored store knows the first `kept` claims, and none of those after them.
    async fn lost_the_claims_after(&self, store: &dyn Transfer, kept: usize) {
        for (i, held) in self.holders.iter().enumerate() {
            let stored = store
                .state(&held.job)
                .await
                .expect("the state reads")
                .expect("the job exists");
            assert_eq!(
                stored.fence == 0,
                i >= kept,
                "{held:?}: restored as {stored:?}"
            );
        }
    }

    /// The old holders stall (a pause, a partition) until their leases are over; new workers
    /// then claim every job that is not done, through `store` once it answers, and write.
    async fn claim_after(&mut self, store: &dyn Transfer) {
        tokio::time::sleep(Duration::from_secs_f64(TTL + 0.5)).await;
        let new = owner("new");
        let leases = until_answered("the claim after the loss", || {
            store.claim_next(&self.queue, &new, term(), JOBS.len())
        })
        .await;
        self.fresh = leases
            .iter()
            .map(|l| Claimed {
                job: l.job.clone(),
                fence: l.fence,
                holder: format!("new-{}", l.job),
            })
            .collect();
        self.fresh.sort();
        for held in &self.fresh {
            let written = self
                .resources
                .write(&held.job, held.fence, &held.holder)
                .await;
            assert!(
                written.sql && written.dir,
                "{held:?}: the new holder's write is admitted"
            );
        }
    }

    /// The stale holders wake up and keep writing, to the resources and to the store; checks
    /// every outcome from the store's and the guards' own data: no fence handed out twice for a
    /// job, every fence after the loss above every fence before it and in the store's `epoch`,
    /// and no stale write admitted by a guard.
    async fn stale_holders_write_and_are_refused(&self, store: &dyn Transfer, epoch: Epoch) {
        let mut refused_at_sql = 0;
        let mut refused_at_dir = 0;
        for held in &self.holders {
            let written = self
                .resources
                .write(&held.job, held.fence, &held.holder)
                .await;
            refused_at_sql += usize::from(!written.sql);
            refused_at_dir += usize::from(!written.dir);
            let completed = held
                .complete(store, "stale")
                .await
                .expect("the store answers");
            assert!(
                completed.is_err(),
                "{held:?}: a stale completion is refused"
            );
        }
        // 1. No fence handed out twice for a job.
        let mut by_fence: BTreeMap<(JobId, Fence), BTreeSet<String>> = BTreeMap::new();
        for c in self.holders.iter().chain(&self.fresh) {
            by_fence
                .entry((c.job.clone(), c.fence))
                .or_default()
                .insert(c.holder.clone());
        }
        for ((job, fence), who) in &by_fence {
            assert_eq!(
                who.len(),
                1,
                "job {job}: fence {fence} was handed to {who:?}"
            );
        }
        // 2. Every fence after the loss is above every fence before it, and in the epoch; the
        // store holds it.
        let lowest_after = self
            .fresh
            .iter()
            .map(|c| c.fence)
            .min()
            .expect("claims after");
        let highest_before = self
            .holders
            .iter()
            .map(|c| c.fence)
            .max()
            .expect("claims before");
        assert!(
            lowest_after > highest_before,
            "fence {lowest_after} after the loss, {highest_before} before"
        );
        for held in &self.fresh {
            assert_eq!(held.fence.epoch(), epoch, "{held:?} in the store's epoch");
            let stored = store
                .state(&held.job)
                .await
                .expect("the state reads")
                .expect("the job exists");
            assert_eq!(
                stored.fence,
                held.fence.get(),
                "{held:?}: the store holds it"
            );
        }
        // 3. No stale write admitted by a guard: at each key the SQL guard admitted rising
        // fences, never one fence from two holders; each stale holder of a job claimed again
        // was refused at both guards, and the directory keeps the new holder's write.
        let mut seen: BTreeMap<String, (i64, String)> = BTreeMap::new();
        for (key, fence, holder) in self.resources.sql_writes().await {
            if let Some((last, by)) = seen.get(&key) {
                assert!(fence >= *last, "{key}: fence {fence} admitted after {last}");
                assert!(
                    fence > *last || holder == *by,
                    "{key}: fence {fence} admitted from {by} and from {holder}"
                );
            }
            seen.insert(key, (fence, holder));
        }
        let claimed_again = self.fresh.len();
        assert_eq!(
            refused_at_sql, claimed_again,
            "stale holders refused at the SQL guard"
        );
        assert_eq!(
            refused_at_dir, claimed_again,
            "stale holders refused at the directory"
        );
        for held in &self.fresh {
            assert_eq!(
                self.resources.dir_value(&held.job).await,
                Some((format!("{} {}", held.holder, held.fence), held.fence)),
                "{held:?}: the directory keeps the new holder's write"
            );
        }
    }
}

async fn failover(replication: Replication) {
    let _one = ONE_AT_A_TIME.lock().await;
    let place = Place::new();
    let mut primary = Server::primary(&place, None);
    primary.sql("CREATE DATABASE jobs");
    let standby = Server::standby(&place, &primary, replication);
    let store = store_on(&[&primary, &standby]).await;
    let mut story = Story::new(store.as_ref()).await;
    standby.wait_replayed(&primary.lsn());
    // Before the failover: the old workers claim every job, some while the standby still
    // receives (a*), the others after a lagging asynchronous standby stopped receiving (b*).
    for (i, job) in JOBS.iter().enumerate() {
        if i == 4 {
            standby.wait_replayed(&primary.lsn());
            if replication == Replication::Asynchronous {
                standby.cut_off();
            }
        }
        story.claim_before(store.as_ref(), job).await;
    }
    // The holder of a0 finishes it: an acknowledged completion (which an asynchronous
    // failover may lose; a synchronous one may not).
    let a0 = story.holders[0].clone();
    a0.complete(store.as_ref(), "a0 by old")
        .await
        .expect("the primary answers")
        .expect("the completion is granted");

    // The old holders renew while the primary dies and the standby is promoted.
    let renewing = {
        let store = store.clone();
        let holders = story.holders[1..].to_vec();
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for _ in 0..4 {
                for held in &holders {
                    outcomes.push(
                        store
                            .renew(&held.job, &owner(&held.holder), held.fence, term())
                            .await,
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            outcomes
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    primary.kill();
    standby.promote();
    assert_eq!(
        standby.timeline(),
        2,
        "the promotion started a new timeline"
    );
    // A renewal in flight answers that nothing was applied or that it may have been; one after
    // the promotion reaches the new primary.
    for renewal in renewing.await.expect("the renewals ran") {
        assert!(
            matches!(
                renewal,
                Ok(_) | Err(StoreError::Unavailable(_) | StoreError::Indeterminate(_))
            ),
            "a renewal through the failover: {renewal:?}"
        );
    }
    let epoch = until_answered("the epoch", || store.epoch()).await;
    assert_eq!(
        epoch,
        Epoch::new(1).expect("an epoch"),
        "the epoch follows the timeline"
    );
    story.claim_after(store.as_ref()).await;
    let a0_done = store
        .state(&a0.job)
        .await
        .expect("the state reads")
        .expect("a0 exists")
        .done;
    assert_eq!(
        story.fresh.len(),
        JOBS.len() - usize::from(a0_done),
        "every job not done is claimed again: {:?}",
        story.fresh
    );
    story
        .stale_holders_write_and_are_refused(store.as_ref(), epoch)
        .await;
    // With synchronous replication, no acknowledged completion is lost.
    if replication == Replication::Synchronous {
        assert!(
            a0_done,
            "the acknowledged completion of a0 survived the failover"
        );
        let state = store
            .state(&a0.job)
            .await
            .expect("the state reads")
            .expect("a0 exists");
        assert_eq!(state.result.as_deref(), Some("a0 by old"));
    }
}

/// A point-in-time restore: the server is recovered from a base backup and its archived WAL
/// up to a point between two sets of claims, which it ends on a new timeline; the claims after
/// that point are lost, and no fence they handed out is handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_point_in_time_restore_never_hands_a_fence_out_twice() {
    let _one = ONE_AT_A_TIME.lock().await;
    let place = Place::new();
    let archive = place.directory("archive");
    let mut primary = Server::primary(&place, Some(&archive));
    primary.sql("CREATE DATABASE jobs");
    let store = store_on(&[&primary]).await;
    let mut story = Story::new(store.as_ref()).await;
    let base = cluster::base_backup(&place, &primary);
    for job in &JOBS[..4] {
        story.claim_before(store.as_ref(), job).await;
    }
    let point = primary.lsn();
    for job in &JOBS[4..] {
        story.claim_before(store.as_ref(), job).await;
    }
    primary.archive_all(&archive);
    primary.kill();
    drop(store);
    let restored = cluster::restore_to(&place, &base, &archive, &point);
    let timeline = restored.timeline();
    assert!(timeline >= 2, "the restore ended on a new timeline");
    let store = store_on(&[&restored]).await;
    let epoch = store.epoch().await.expect("the epoch");
    assert_eq!(u64::from(epoch.get()), u64::from(timeline - 1));
    story.lost_the_claims_after(store.as_ref(), 4).await;
    story.claim_after(store.as_ref()).await;
    assert_eq!(story.fresh.len(), JOBS.len());
    story
        .stale_holders_write_and_are_refused(store.as_ref(), epoch)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_failover_never_hands_a_fence_out_twice() {
    failover(Replication::Asynchronous).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_failover_loses_no_acknowledged_completion_and_no_fence() {
    failover(Replication::Synchronous).await;
}

/// `lease backup` while the store serves, more claims, then `lease restore` of the backup: the
/// claims after the backup are lost with the rest of its history, and no fence they handed out
/// is handed out again; the stale holders' writes are refused at the store and at the guards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_restore_never_hands_a_fence_out_twice() {
    let (dir, db) = support::fresh_db();
    let backup = dir.path().join("backup.db");
    let cli = |args: &[&str]| {
        let out = support::lease(&db, args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    let store = Arc::new(lease_sqlite::SqliteLeaseStore::open(&db).expect("the store opens"));
    let mut story = Story::new(store.as_ref()).await;
    for job in &JOBS[..4] {
        story.claim_before(store.as_ref(), job).await;
    }
    let backup_text = backup.to_string_lossy().into_owned();
    assert_eq!(cli(&["backup", "--to", &backup_text, "--json"])["epoch"], 0);
    for job in &JOBS[4..] {
        story.claim_before(store.as_ref(), job).await;
    }
    // The store is restored under the open store's feet: it sees the restored one.
    let restored = cli(&["restore", "--from", &backup_text, "--json"]);
    assert_eq!(
        (
            &restored["epoch"],
            &restored["backup_epoch"],
            &restored["replaced_epoch"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(0),
            &serde_json::json!(0)
        )
    );
    let epoch = store.epoch().await.expect("the epoch");
    assert_eq!(epoch, Epoch::new(1).expect("an epoch"));
    assert_eq!(cli(&["epoch", "--json"])["epoch"], 1);
    story.lost_the_claims_after(store.as_ref(), 4).await;
    story.claim_after(store.as_ref()).await;
    assert_eq!(story.fresh.len(), JOBS.len());
    story
        .stale_holders_write_and_are_refused(store.as_ref(), epoch)
        .await;
    // A second restore of the same backup goes one epoch higher still.
    assert_eq!(
        cli(&["restore", "--from", &backup_text, "--json"])["epoch"],
        2
    );
    assert_eq!(cli(&["epoch", "--raise", "--json"])["epoch"], 3);
}

/// `lease serve` and `lease work` on a multi-host URL reach whichever server takes writes: the
/// worker finishes jobs enqueued after the primary died, and the server answers and hands out
/// fences in the new epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_serve_and_lease_work_carry_on_through_a_failover_on_a_multi_host_url() {
    use std::process::Command;
    let _one = ONE_AT_A_TIME.lock().await;
    let place = Place::new();
    let mut primary = Server::primary(&place, None);
    primary.sql("CREATE DATABASE jobs");
    let standby = Server::standby(&place, &primary, Replication::Synchronous);
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/jobs?target_session_attrs=read-write\
         &connect_timeout=2",
        primary.port, standby.port
    );
    let db = std::path::Path::new(&url);
    let cli = |args: &[&str]| support::lease(db, args);
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    ok(cli(&["init"]));
    for job in ["w1", "w2", "w3"] {
        ok(cli(&["enqueue", job, "--queue", "q"]));
    }
    let key = support::key_secret(db, "ci", "worker");
    let server = support::Server::start(db, &[], &[]);
    let worker = Command::new(env!("CARGO_BIN_EXE_lease"))
        .args([
            "--db", &url, "work", "--queue", "q", "--owner", "w", "--ttl", "3",
        ])
        .args([
            "--max-jobs",
            "6",
            "--json",
            "--",
            "sh",
            "-c",
            "cat >/dev/null; echo ok",
        ])
        .env_remove("LEASE_DB")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(support_reaped::Reaped::new)
        .expect("lease work starts");
    let done = |job: &str| {
        let out = cli(&["state", job, "--json"]);
        out.status.success()
            && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .is_ok_and(|v| v["done"] == true)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !["w1", "w2", "w3"].iter().all(|j| done(j)) {
        assert!(
            std::time::Instant::now() < deadline,
            "lease work never finished w1-w3"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    primary.kill();
    standby.promote();
    // Enqueued through the same URL, which now reaches the promoted standby.
    for job in ["w4", "w5", "w6"] {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !cli(&["enqueue", job, "--queue", "q"]).status.success() {
            assert!(
                std::time::Instant::now() < deadline,
                "{job} was never enqueued"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut worker = worker;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while worker.try_wait().expect("the worker's status").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "lease work never finished six jobs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = worker.wait_with_output().expect("lease work exits");
    assert!(
        out.status.success(),
        "lease work exits 0 after its six jobs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for job in ["w4", "w5", "w6"] {
        assert!(done(job), "{job} done by the worker after the failover");
    }
    // The server answers through the new primary, and hands out fences in the new epoch.
    ok(cli(&["enqueue", "s1", "--queue", "s"]));
    let auth = format!("Bearer {key}");
    let headers = [("Authorization", auth.as_str())];
    let body = serde_json::json!({"ttl": 10, "owner": "ci/a"}).to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let lease = loop {
        if let Some((200, answer)) =
            support::try_call(&server.addr, "POST", "/v1/queues/s/claims", &headers, &body)
        {
            break answer["leases"][0].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never answered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(lease["id"], "s1", "{lease}");
    let fence = Fence::new(lease["fence"].as_u64().expect("a fence")).expect("a fence");
    assert_eq!(fence, Epoch::new(1).expect("an epoch").first_fence());
    assert_eq!(server.call("GET", "/v1/stats", &headers, "").0, 200);
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "{log}");
}
