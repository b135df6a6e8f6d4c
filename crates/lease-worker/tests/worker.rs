//! The worker runtime against real stores: a stalled worker is stopped and its late result never
//! lands, killed workers leave every job completed exactly once, failures retry then
//! dead-letter, cancel stops a handler, a panic fails one job, and shutdown drains then releases.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use lease_domain::{
    Backoff, EnqueueSpec, Fence, JobId, JobResult, Owner, QueueName, Retry, Status, Timestamp, Ttl,
};
use lease_ports::control::Control;
use lease_ports::decorate::{Call, Decorated, Hooks};
use lease_ports::memory::MemoryLeaseStore;
use lease_ports::{Applied, Command, LeaseStore, Outcome, StoreError};
use lease_worker::{
    CancellationToken, Clock, HandlerResult, JobContext, JobOutcome, JobReport, ManualClock,
    SystemClock, Worker, WorkerConfig,
};

/// Hooks in front of a store: they can cut one owner off from renewing (a partition, or a
/// stalled process whose heartbeats never arrive), leave every renewal unanswered (a store
/// locked by another process), make `claim_next` fail, and they count renewals and the
/// completions the store accepted.
#[derive(Default)]
struct Watch {
    cut_off: Mutex<Option<Owner>>,
    hang_renewals: AtomicBool,
    hang_give_backs: AtomicBool,
    slow_completions: AtomicBool,
    complete_error: AtomicBool,
    claim_error: Mutex<Option<fn() -> StoreError>>,
    renewals: AtomicUsize,
    empty_claims: AtomicUsize,
    completed: Mutex<HashMap<JobId, Vec<Owner>>>,
    complete_calls: Mutex<Vec<Owner>>,
    /// Completions under way now, and the most ever under way at once.
    completing: AtomicUsize,
    most_completing: AtomicUsize,
}

/// A store watched by [`Watch`].
type Watched = Decorated<dyn LeaseStore, Watch>;

fn watched(inner: Arc<dyn LeaseStore>) -> Arc<Watched> {
    Arc::new(Decorated::with(inner, Watch::default()))
}

#[async_trait]
impl Hooks for Watch {
    /// The job and owner of a completion, to note once the store accepted it.
    type Ticket = Option<(JobId, Owner)>;

    async fn before(&self, call: &Call<'_>) -> Result<Self::Ticket, StoreError> {
        match *call {
            Call::Apply {
                command: Command::Renew(owner, _, _),
                ..
            } => {
                self.renewals.fetch_add(1, Ordering::SeqCst);
                if self.cut_off.lock().unwrap().as_ref() == Some(owner) {
                    return Err(StoreError::Unavailable("partitioned".into()));
                }
                if self.hang_renewals.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                Ok(None)
            }
            Call::Apply {
                job,
                command: Command::Complete(owner, _, _, _),
                then,
            } => {
                self.complete_calls.lock().unwrap().push(owner.clone());
                if self.complete_error.load(Ordering::SeqCst) {
                    return Err(StoreError::Unavailable("the store went away".into()));
                }
                let now = self.completing.fetch_add(1, Ordering::SeqCst) + 1;
                self.most_completing.fetch_max(now, Ordering::SeqCst);
                if then.is_some() && self.slow_completions.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Ok(Some((job.clone(), owner.clone())))
            }
            Call::Apply {
                command: Command::GiveBack(..),
                ..
            } => {
                if self.hang_give_backs.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                Ok(None)
            }
            Call::ClaimNext(claim) => {
                if let Some(error) = *self.claim_error.lock().unwrap() {
                    return Err(error());
                }
                if claim.limit == 0 {
                    self.empty_claims.fetch_add(1, Ordering::SeqCst);
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    fn after(&self, ticket: Self::Ticket, answer: Result<&dyn Any, &StoreError>, _: Duration) {
        let accepted = answer
            .ok()
            .and_then(|a| a.downcast_ref::<Applied>())
            .is_some_and(|a| a.outcome == Outcome::Wrote(Ok(())));
        if ticket.is_some() {
            self.completing.fetch_sub(1, Ordering::SeqCst);
        }
        if let (Some((job, owner)), true) = (ticket, accepted) {
            self.completed
                .lock()
                .unwrap()
                .entry(job)
                .or_default()
                .push(owner);
        }
    }
}

fn job(id: &str) -> JobId {
    JobId::new(id).unwrap()
}

fn owner(name: &str) -> Owner {
    Owner::new(name).unwrap()
}

fn config(name: &str, ttl: f64) -> WorkerConfig {
    let mut config = WorkerConfig::new(QueueName::default(), owner(name), Ttl::new(ttl).unwrap());
    config.idle_poll = Duration::from_millis(20);
    config.cancel_grace = Duration::from_millis(500);
    config
}

fn collect(reports: &Arc<Mutex<Vec<JobReport>>>) -> impl Fn(&JobReport) + Send + Sync + 'static {
    let reports = Arc::clone(reports);
    move |report| reports.lock().unwrap().push(report.clone())
}

async fn record(store: &dyn LeaseStore, id: &str) -> lease_domain::Job {
    store.record(&job(id)).await.unwrap().unwrap().job
}

/// A watched SQLite store in `dir` holding `jobs` jobs `j00`.. of 100 attempts each.
async fn many_attempts_store(dir: &tempfile::TempDir, jobs: usize) -> Arc<Watched> {
    let sqlite = lease_sqlite::SqliteLeaseStore::open(dir.path().join("work.db")).unwrap();
    let store = watched(Arc::new(sqlite));
    let spec = EnqueueSpec {
        max_attempts: Some(100),
        ..EnqueueSpec::default()
    };
    for i in 0..jobs {
        let id = job(&format!("j{i:02}"));
        store.enqueue_with(&id, &spec).await.unwrap();
    }
    store
}

/// Every job `j00`.. of `jobs` is done with a result, and the store accepted one completion
/// of each at most. (A completion whose caller was killed may commit without being heard; the
/// store, not the callers' tallies, says what happened.)
async fn each_done_once(store: &Arc<Watched>, jobs: usize) {
    for i in 0..jobs {
        let stored = record(store.as_ref(), &format!("j{i:02}")).await;
        assert!(stored.done, "j{i:02} is not done");
        assert!(stored.result.is_some() && stored.result_fence.is_some());
    }
    let completed = store.hooks().completed.lock().unwrap();
    assert!(completed.len() <= jobs);
    assert!(
        completed.values().all(|owners| owners.len() == 1),
        "a job was completed twice: {completed:?}"
    );
}

/// Starts a worker on `store` whose handler counts its start in `started`, then runs until
/// its token is cancelled and fails; the run, and the token that shuts the worker down.
fn run_until_shutdown(
    store: Arc<dyn LeaseStore>,
    config: WorkerConfig,
    started: &Arc<AtomicUsize>,
) -> (
    tokio::task::JoinHandle<Result<lease_worker::Summary, StoreError>>,
    CancellationToken,
) {
    let started = Arc::clone(started);
    let worker = Worker::new(
        store,
        move |ctx: JobContext| {
            started.fetch_add(1, Ordering::SeqCst);
            async move {
                ctx.cancel.cancelled().await;
                Err::<String, _>("stopped".into())
            }
        },
        config,
    );
    let shutdown = CancellationToken::new();
    (tokio::spawn(worker.run(shutdown.clone())), shutdown)
}

/// How many jobs of `ids` are leased.
async fn held(store: &dyn LeaseStore, ids: &[&str]) -> usize {
    let mut held = 0;
    for id in ids {
        held += usize::from(record(store, id).await.owner.is_some());
    }
    held
}

/// Waits (a bounded number of short sleeps) until every job of `ids` is leased; answers how
/// many are.
async fn until_held(store: &dyn LeaseStore, ids: &[&str]) -> usize {
    for _ in 0..200 {
        if held(store, ids).await == ids.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held(store, ids).await
}

/// A handler that waits until its token is cancelled, notes that it was, then answers `answer`
/// (which the runtime must never report).
fn waits_for_cancel(
    flag: &Arc<AtomicBool>,
    answer: &'static str,
) -> impl Fn(JobContext) -> BoxFuture<'static, HandlerResult> + Send + Sync + 'static {
    let flag = Arc::clone(flag);
    move |ctx: JobContext| {
        let flag = Arc::clone(&flag);
        Box::pin(async move {
            ctx.cancel.cancelled().await;
            flag.store(true, Ordering::SeqCst);
            Ok::<_, String>(answer.to_owned())
        })
    }
}

/// Waits (a bounded number of short sleeps) until `check` holds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// The stale-worker story with the runtime: A's heartbeats stop reaching the store, so A stops
/// its handler before its lease can run out and never reports; B takes the job over and
/// completes it; A's late result is refused by the store too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_cannot_renew_stops_its_handler_and_its_late_result_never_lands() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    store.enqueue(&job("j")).await.unwrap();
    *store.hooks().cut_off.lock().unwrap() = Some(owner("A"));
    let a_saw_cancel = Arc::new(AtomicBool::new(false));
    let a_reports = Arc::new(Mutex::new(Vec::new()));
    let mut a_config = config("A", 0.6);
    a_config.max_jobs = Some(1);
    let a = Worker::new(
        store.clone(),
        waits_for_cancel(&a_saw_cancel, "late, from A"),
        a_config,
    )
    .on_report(collect(&a_reports));
    let a = tokio::spawn(a.run(CancellationToken::new()));
    eventually("A holds the job", || {
        a_reports.lock().unwrap().is_empty() && store.hooks().completed.lock().unwrap().is_empty()
    })
    .await;
    let summary = a.await.unwrap().unwrap();
    assert_eq!(summary.lost, 1);
    assert!(
        a_saw_cancel.load(Ordering::SeqCst),
        "A's handler was never told to stop"
    );
    assert!(
        matches!(&a_reports.lock().unwrap()[0].outcome, JobOutcome::Lost(why) if why.contains("could not be renewed")),
        "{:?}",
        a_reports.lock().unwrap()
    );

    let mut b_config = config("B", 5.0);
    b_config.exit_when_empty = true;
    let b = Worker::new(
        store.clone(),
        |ctx: JobContext| async move { Ok::<_, String>(format!("from B with fence {}", ctx.fence)) },
        b_config,
    );
    // A's lease (0.6 s) has run out by the time B looks, since A gave up before it ended.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.run(CancellationToken::new()).await.unwrap().completed, 1);
    let stored = record(store.as_ref(), "j").await;
    assert_eq!(stored.result.as_deref(), Some("from B with fence 2"));
    assert_eq!(stored.result_fence, Some(Fence::new(2).unwrap()));
    assert_eq!(
        *store.hooks().complete_calls.lock().unwrap(),
        [owner("B")],
        "A reported a result"
    );
    let late = store
        .complete(
            &job("j"),
            &owner("A"),
            Fence::new(1).unwrap(),
            Timestamp::new(1e12).unwrap(),
            &JobResult::new("late").unwrap(),
        )
        .await
        .unwrap();
    assert!(late.is_err(), "the store accepted A's late result");
}

/// Workers are killed at random while they run many jobs; the survivors rescue the expired
/// leases, and every job ends completed exactly once (one accepted result each), none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_at_random_leave_every_job_completed_exactly_once() {
    const JOBS: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    let store = many_attempts_store(&dir, JOBS).await;
    let spawn_worker = |n: usize| {
        let mut config = config(&format!("w{n}"), 0.4);
        config.concurrency = 3;
        config.exit_when_empty = true;
        let worker = Worker::new(
            store.clone(),
            move |ctx: JobContext| async move {
                let pause = 5 + (ctx.fence.get() % 3) * 10;
                tokio::time::sleep(Duration::from_millis(pause)).await;
                Ok::<_, String>(format!("{} done by w{n}", ctx.job))
            },
            config,
        );
        tokio::spawn(worker.run(CancellationToken::new()))
    };
    let mut workers: Vec<_> = (0..4).map(spawn_worker).collect();
    let mut killed = 0;
    let mut seed = 0x2545_F491_u64;
    for next in 4..16 {
        tokio::time::sleep(Duration::from_millis(40)).await;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let victim = usize::try_from(seed % 4).unwrap();
        workers[victim].abort();
        killed += 1;
        workers[victim] = spawn_worker(next);
    }
    for worker in workers {
        let _ = worker.await;
    }
    // Whatever the killed workers left is rescued once their leases expire.
    let mut last = config("finisher", 0.4);
    last.concurrency = 4;
    last.exit_when_empty = true;
    tokio::time::sleep(Duration::from_millis(500)).await;
    Worker::new(
        store.clone(),
        |ctx: JobContext| async move { Ok::<_, String>(format!("{} done late", ctx.job)) },
        last,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert!(killed >= 10);
    each_done_once(&store, JOBS).await;
}

/// A handler that always fails is retried after its backoff until its attempts run out, then
/// the job is dead with the error kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_with_backoff_then_dead_lettered() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let spec = EnqueueSpec {
        max_attempts: Some(3),
        ..EnqueueSpec::default()
    };
    store.enqueue_with(&job("j"), &spec).await.unwrap();
    let reports = Arc::new(Mutex::new(Vec::new()));
    let mut config = config("w", 5.0);
    config.max_jobs = Some(3);
    config.retry = Retry::Backoff(Backoff::new(0.05, 2.0, 1.0, 0.0).unwrap());
    let summary =
        Worker::new(
            Arc::clone(&store),
            |ctx: JobContext| async move {
                Err::<String, _>(format!("boom on attempt {}", ctx.attempt))
            },
            config,
        )
        .on_report(collect(&reports))
        .run(CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(summary.failed, 3);
    let statuses: Vec<(u32, Status)> = reports
        .lock()
        .unwrap()
        .iter()
        .map(|r| match &r.outcome {
            JobOutcome::Failed(failed) => (r.attempt, failed.status),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        statuses,
        [
            (1, Status::Pending),
            (2, Status::Pending),
            (3, Status::Dead)
        ]
    );
    let stored = record(store.as_ref(), "j").await;
    assert_eq!(stored.error.as_deref(), Some("boom on attempt 3"));
    assert_eq!(
        stored.status_at(Timestamp::new(1e12).unwrap()),
        Status::Dead
    );
}

/// Cancelling a running job stops its handler at the next heartbeat, and nothing is written
/// for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_running_job_stops_its_handler() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    store.enqueue(&job("j")).await.unwrap();
    let stopped = Arc::new(AtomicBool::new(false));
    let reports = Arc::new(Mutex::new(Vec::new()));
    let mut config = config("w", 0.6);
    config.max_jobs = Some(1);
    let worker = Worker::new(store.clone(), waits_for_cancel(&stopped, "ignored"), config)
        .on_report(collect(&reports));
    let running = tokio::spawn(worker.run(CancellationToken::new()));
    for _ in 0..500 {
        if record(store.as_ref(), "j").await.owner.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let now = Timestamp::new(SystemClock.now()).unwrap();
    assert_eq!(store.cancel(&job("j"), now).await.unwrap(), Ok(()));
    running.await.unwrap().unwrap();
    assert!(stopped.load(Ordering::SeqCst));
    assert!(
        matches!(&reports.lock().unwrap()[0].outcome, JobOutcome::Lost(why) if why.contains("cancelled")),
        "{:?}",
        reports.lock().unwrap()
    );
    assert!(store.hooks().complete_calls.lock().unwrap().is_empty());
    let stored = record(store.as_ref(), "j").await;
    assert_eq!(
        (stored.result.clone(), stored.status_at(now)),
        (None, Status::Cancelled)
    );
}

/// A handler that panics fails its own job; the worker goes on with the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_fails_its_job_and_the_worker_goes_on() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    store.enqueue(&job("bad")).await.unwrap();
    store.enqueue(&job("good")).await.unwrap();
    let mut config = config("w", 5.0);
    config.max_jobs = Some(2);
    config.retry = Retry::No;
    let summary = Worker::new(
        Arc::clone(&store),
        |ctx: JobContext| async move {
            assert!(
                ctx.job.as_str() != "bad",
                "this handler cannot take bad jobs"
            );
            Ok::<_, String>("fine".into())
        },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!((summary.failed, summary.completed), (1, 1));
    let bad = record(store.as_ref(), "bad").await;
    assert!(
        bad.error
            .as_deref()
            .is_some_and(|e| e == "the handler panicked: this handler cannot take bad jobs"),
        "{:?}",
        bad.error
    );
    assert_eq!(
        record(store.as_ref(), "good").await.result.as_deref(),
        Some("fine")
    );
}

/// Shutdown stops claiming, lets running jobs finish until the drain deadline, then cancels the
/// rest and releases their leases (fence kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_running_jobs_then_releases_the_rest() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    for id in ["quick", "stuck", "waiting"] {
        store.enqueue(&job(id)).await.unwrap();
    }
    let mut config = config("w", 5.0);
    config.concurrency = 2;
    config.drain = Duration::from_millis(300);
    let shutdown = CancellationToken::new();
    let worker = Worker::new(
        Arc::clone(&store),
        |ctx: JobContext| async move {
            if ctx.job.as_str() == "stuck" {
                ctx.cancel.cancelled().await;
                return Err::<String, _>("stopped".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok("quick result".into())
        },
        config,
    );
    let running = tokio::spawn(worker.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(30)).await;
    shutdown.cancel();
    let summary = running.await.unwrap().unwrap();
    assert_eq!((summary.completed, summary.released), (1, 1));
    let stuck = record(store.as_ref(), "stuck").await;
    assert_eq!(
        (stuck.owner, stuck.fence.get(), stuck.done),
        (None, 1, false)
    );
    let waiting = record(store.as_ref(), "waiting").await;
    assert_eq!(waiting.fence.get(), 0, "a job was claimed after shutdown");
}

/// The manual clock drives sleeps: a worker's idle poll ends only when the clock passes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_clock_ends_sleeps_only_when_advanced() {
    let clock = Arc::new(ManualClock::new(100.0));
    let sleeper = tokio::spawn(clock.sleep(5.0));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!sleeper.is_finished());
    clock.advance(4.9);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!sleeper.is_finished());
    clock.advance(0.1);
    sleeper.await.unwrap();
    assert_eq!(clock.now(), 105.0);

    // A worker on it claims with the clock's time.
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    store.enqueue(&job("j")).await.unwrap();
    let mut config = config("w", 10.0);
    config.max_jobs = Some(1);
    Worker::new(
        Arc::clone(&store),
        |_ctx: JobContext| async { Ok::<_, String>("r".into()) },
        config,
    )
    .with_clock(clock)
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!(record(store.as_ref(), "j").await.until.get(), 115.0);
}

/// A finishing job's completion and the claim of the next job for its slot share one
/// transaction (one commit): with one worker running one job at a time, nearly every commit
/// carries both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_and_the_next_claim_share_one_commit() {
    const JOBS: u64 = 20;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = lease_sqlite::SqliteLeaseStore::open(dir.path().join("pairs.db")).unwrap();
    for i in 0..JOBS {
        sqlite
            .blocking()
            .enqueue(&job(&format!("j{i:02}")))
            .unwrap();
    }
    let before = sqlite.group_commit_stats().unwrap();
    let mut config = config("w", 30.0);
    config.exit_when_empty = true;
    // No lease held ahead: each completion claims the slot's own next job.
    config.prefetch = Some(0);
    let summary = Worker::new(
        Arc::new(sqlite.clone()),
        |ctx: JobContext| async move { Ok::<_, String>(ctx.job.to_string()) },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!(summary.completed, usize::try_from(JOBS).unwrap());
    let after = sqlite.group_commit_stats().unwrap();
    let shared = after.batches_of_many - before.batches_of_many;
    assert!(
        shared >= JOBS - 1,
        "only {shared} commits carried a completion and a claim"
    );
    assert!(
        after.batches - before.batches <= JOBS + 2,
        "{before:?} {after:?}"
    );
}

/// A store that never answers a renewal (its write lock held by another process, say) cannot
/// keep a job running past its lease: by the worker's own clock, the handler is told to stop
/// before the lease ends, and nothing is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_never_answers_a_renewal_cannot_keep_a_job_past_its_lease() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    store.enqueue(&job("j")).await.unwrap();
    store.hooks().hang_renewals.store(true, Ordering::SeqCst);
    let clock = Arc::new(ManualClock::new(1000.0));
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let reports = Arc::new(Mutex::new(Vec::new()));
    let mut config = config("A", 3.0);
    config.max_jobs = Some(1);
    let worker = Worker::new(store.clone(), waits_for_cancel(&saw_cancel, "late"), config)
        .with_clock(clock.clone())
        .on_report(collect(&reports));
    let run = tokio::spawn(worker.run(CancellationToken::new()));
    for _ in 0..500 {
        if record(store.as_ref(), "j").await.owner.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let until = record(store.as_ref(), "j").await.until.get();
    assert_eq!(until, 1003.0);
    // The first renewal (due at 1001) never comes back; until just before the lease ends
    // (1003 less the margin of 0.3 s) the handler goes on.
    for step in [1.0, 1.0, 0.5] {
        clock.advance(step);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !saw_cancel.load(Ordering::SeqCst),
            "stopped early, at {}",
            clock.now()
        );
    }
    assert!(
        store.hooks().renewals.load(Ordering::SeqCst) >= 1,
        "no renewal was tried"
    );
    clock.advance(0.25);
    assert!(clock.now() < until);
    eventually("the handler is told to stop before its lease ends", || {
        saw_cancel.load(Ordering::SeqCst)
    })
    .await;
    let summary = run.await.unwrap().unwrap();
    assert_eq!(summary.lost, 1);
    assert!(
        matches!(&reports.lock().unwrap()[0].outcome, JobOutcome::Lost(why) if why.contains("did not answer")),
        "{:?}",
        reports.lock().unwrap()
    );
    assert!(store.hooks().complete_calls.lock().unwrap().is_empty());
}

/// A huge ttl is renewed at most hourly, not in a loop: over a short job, no renewal at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_ttl_does_not_turn_the_heartbeat_into_a_loop() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    store.enqueue(&job("j")).await.unwrap();
    let mut config = config("A", 1e20);
    config.exit_when_empty = true;
    let worker = Worker::new(
        store.clone(),
        |_ctx: JobContext| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, String>("done".to_owned())
        },
        config,
    );
    assert_eq!(
        worker
            .run(CancellationToken::new())
            .await
            .unwrap()
            .completed,
        1
    );
    assert_eq!(store.hooks().renewals.load(Ordering::SeqCst), 0);
    assert_eq!(
        lease_worker::renew_interval(Ttl::new(1e20).unwrap(), 1.0 / 3.0),
        3600.0
    );
    assert_eq!(
        lease_worker::renew_interval(Ttl::new(0.001).unwrap(), 1.0 / 3.0),
        0.05
    );
    assert_eq!(
        lease_worker::renew_interval(Ttl::new(30.0).unwrap(), f64::NAN),
        10.0
    );
}

/// A store error is an error: with `exit_when_empty` even an unreachable store ends the run
/// with its error (it cannot tell that nothing is due), and corrupt data or a skewed clock end
/// any run, instead of being waited out as an empty queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_errors_end_the_run_instead_of_looking_like_an_empty_queue() {
    let cases: [(fn() -> StoreError, bool); 3] = [
        (|| StoreError::Unavailable("locked".into()), true),
        (|| StoreError::Corrupt("stored queue: empty".into()), true),
        (|| StoreError::Corrupt("stored queue: empty".into()), false),
    ];
    for (error, exit_when_empty) in cases {
        let store = watched(Arc::new(MemoryLeaseStore::new()));
        *store.hooks().claim_error.lock().unwrap() = Some(error);
        let mut config = config("A", 5.0);
        config.exit_when_empty = exit_when_empty;
        let worker = Worker::new(
            store.clone(),
            |_ctx: JobContext| async move { Ok::<_, String>("done".to_owned()) },
            config,
        );
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            worker.run(CancellationToken::new()),
        )
        .await
        .expect("the run ended");
        let err = outcome.expect_err("a store error is an error");
        assert_eq!(err.to_string(), error().to_string());
    }
}

/// A slot that got its next lease from the completion's commit while the worker began to stop
/// gives that lease back unrun: the handler never sees the second job, whose lease is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_lease_claimed_as_the_worker_stops_is_released_not_run() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    for id in ["first", "second"] {
        store.enqueue(&job(id)).await.unwrap();
    }
    store.hooks().slow_completions.store(true, Ordering::SeqCst);
    let shutdown = CancellationToken::new();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let (shutdown, ran) = (shutdown.clone(), Arc::clone(&ran));
        move |ctx: JobContext| {
            let (shutdown, ran) = (shutdown.clone(), Arc::clone(&ran));
            async move {
                ran.lock().unwrap().push(ctx.job.as_str().to_owned());
                // Stop the worker while this job's completion (and the next claim) is under
                // way: the store takes 300 ms to answer it.
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    shutdown.cancel();
                });
                Ok::<_, String>("done".to_owned())
            }
        }
    };
    let reports = Arc::new(Mutex::new(Vec::new()));
    let worker =
        Worker::new(store.clone(), handler, config("A", 30.0)).on_report(collect(&reports));
    let summary = worker.run(shutdown).await.unwrap();
    assert_eq!(*ran.lock().unwrap(), ["first"], "the second job was run");
    assert_eq!(summary.completed, 1);
    let second = record(store.as_ref(), "second").await;
    assert_eq!(
        second.fence,
        Fence::new(1).unwrap(),
        "the second job was leased"
    );
    assert_eq!(second.owner, None, "the lease was not given back");
    assert_eq!(second.result, None);
}

/// One slot whose jobs are short keeps running the leases it holds ahead while its earlier
/// completions commit, more than one at a time (so they can share a commit), and each job is
/// reported once, completed, after its completion was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slot_runs_on_while_several_of_its_completions_commit() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    let ids: Vec<String> = (0..24).map(|i| format!("j{i:02}")).collect();
    for id in &ids {
        store.enqueue(&job(id)).await.unwrap();
    }
    // Each completion with the claim it carries takes 300 ms to answer.
    store.hooks().slow_completions.store(true, Ordering::SeqCst);
    let mut config = config("A", 30.0);
    config.exit_when_empty = true;
    let reports = Arc::new(Mutex::new(Vec::new()));
    let summary = Worker::new(
        store.clone(),
        |_ctx: JobContext| async move { Ok::<_, String>("done".to_owned()) },
        config,
    )
    .on_report(collect(&reports))
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!(summary.completed, ids.len(), "{summary:?}");
    let most = store.hooks().most_completing.load(Ordering::SeqCst);
    assert!(
        most > 2,
        "completions of the one slot under way at once: at most {most}"
    );
    let mut reported: Vec<String> = reports
        .lock()
        .unwrap()
        .iter()
        .inspect(|r| assert!(matches!(r.outcome, JobOutcome::Completed), "{r:?}"))
        .map(|r| r.job.as_str().to_owned())
        .collect();
    reported.sort();
    assert_eq!(reported, ids, "each job reported once");
    let completed = store.hooks().completed.lock().unwrap().clone();
    assert!(
        ids.iter()
            .all(|id| completed.get(&job(id)).map(Vec::len) == Some(1)),
        "each job completed once: {completed:?}"
    );
}

/// A result the store could not take is counted as unreported, not as completed or lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_the_store_cannot_take_is_counted_as_unreported() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    store.enqueue(&job("j")).await.unwrap();
    store.hooks().complete_error.store(true, Ordering::SeqCst);
    let mut config = config("A", 30.0);
    config.max_jobs = Some(1);
    let reports = Arc::new(Mutex::new(Vec::new()));
    let worker = Worker::new(
        store.clone(),
        |_ctx: JobContext| async move { Ok::<_, String>("done".to_owned()) },
        config,
    )
    .on_report(collect(&reports));
    let summary = worker.run(CancellationToken::new()).await.unwrap();
    assert_eq!(
        (summary.unreported, summary.completed, summary.lost),
        (1, 0, 0)
    );
    assert!(
        matches!(&reports.lock().unwrap()[0].outcome, JobOutcome::Unreported(why) if why.contains("went away")),
        "{:?}",
        reports.lock().unwrap()
    );
}

#[test]
fn the_renewal_interval_is_the_ttl_times_the_fraction_within_its_bounds() {
    let ttl = |t: f64| Ttl::new(t).unwrap();
    assert_eq!(lease_worker::renew_interval(ttl(30.0), 0.5), 15.0);
    assert_eq!(lease_worker::renew_interval(ttl(30.0), 1.0 / 3.0), 10.0);
    assert_eq!(lease_worker::stop_margin(ttl(3.0)), 0.3);
    assert_eq!(lease_worker::stop_margin(ttl(300.0)), 2.0);
}

/// A worker whose slots are all busy asks the store for nothing (a claim of no job would
/// still be a transaction), and it shows its configuration when debugged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_no_free_slot_does_not_call_the_store_to_claim() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    for id in ["a", "b"] {
        store.enqueue(&job(id)).await.unwrap();
    }
    let mut config = config("A", 30.0);
    config.exit_when_empty = true;
    let worker = Worker::new(
        store.clone(),
        |_ctx: JobContext| async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<_, String>("done".to_owned())
        },
        config,
    );
    let shown = format!("{worker:?}");
    assert!(
        shown.contains("Worker") && shown.contains("concurrency: 1"),
        "{shown}"
    );
    assert_eq!(
        worker
            .run(CancellationToken::new())
            .await
            .unwrap()
            .completed,
        2
    );
    assert_eq!(store.hooks().empty_claims.load(Ordering::SeqCst), 0);
}

/// A report says how long its job ran, by the worker's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_carries_how_long_the_job_ran_by_the_workers_clock() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    store.enqueue(&job("j")).await.unwrap();
    let clock = Arc::new(ManualClock::new(1000.0));
    let release = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let release = Arc::clone(&release);
        move |_ctx: JobContext| {
            let release = Arc::clone(&release);
            async move {
                release.notified().await;
                Ok::<_, String>("done".to_owned())
            }
        }
    };
    let mut config = config("A", 30.0);
    config.max_jobs = Some(1);
    let reports = Arc::new(Mutex::new(Vec::new()));
    let worker = Worker::new(store.clone(), handler, config)
        .with_clock(clock.clone())
        .on_report(collect(&reports));
    let run = tokio::spawn(worker.run(CancellationToken::new()));
    for _ in 0..500 {
        if record(store.as_ref(), "j").await.owner.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    clock.advance(2.5);
    tokio::time::sleep(Duration::from_millis(50)).await;
    release.notify_one();
    assert_eq!(run.await.unwrap().unwrap().completed, 1);
    assert_eq!(reports.lock().unwrap()[0].seconds, 2.5);
}

/// Without `exit_when_empty`, an unreachable store is waited out: once it answers again, the
/// worker takes the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_is_waited_out_without_exit_when_empty() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    store.enqueue(&job("j")).await.unwrap();
    *store.hooks().claim_error.lock().unwrap() =
        Some(|| StoreError::Unavailable("restarting".into()));
    let mut config = config("A", 30.0);
    config.max_jobs = Some(1);
    let worker = Worker::new(
        store.clone(),
        |_ctx: JobContext| async move { Ok::<_, String>("done".to_owned()) },
        config,
    );
    let run = tokio::spawn(worker.run(CancellationToken::new()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !run.is_finished(),
        "the worker gave up on a store that was restarting"
    );
    *store.hooks().claim_error.lock().unwrap() = None;
    let summary = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the worker took the job once the store answered")
        .unwrap()
        .unwrap();
    assert_eq!(summary.completed, 1);
}

/// A job that runs past its timeout is told to stop and failed "timed out", its lease held
/// throughout (renewals go on): the error is stored and the job retried by the store's rules.
/// A job without a timeout on the same worker runs as long as it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_timeout_is_stopped_and_failed_timed_out_whatever_its_lease() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    let timed = EnqueueSpec {
        timeout: Some(Ttl::new(0.3).unwrap()),
        max_attempts: Some(2),
        ..EnqueueSpec::default()
    };
    store.enqueue_with(&job("slow"), &timed).await.unwrap();
    let stopped = Arc::new(AtomicBool::new(false));
    let reports = Arc::new(Mutex::new(Vec::new()));
    // Renewed every 0.05 s: the lease is never what stops the job.
    let mut slow_config = config("w", 0.15);
    slow_config.max_jobs = Some(1);
    let summary = Worker::new(
        store.clone(),
        waits_for_cancel(&stopped, "too late"),
        slow_config,
    )
    .on_report(collect(&reports))
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!(summary.failed, 1, "{:?}", reports.lock().unwrap());
    assert!(
        stopped.load(Ordering::SeqCst),
        "the handler was never told to stop"
    );
    assert!(
        store.hooks().renewals.load(Ordering::SeqCst) >= 2,
        "the lease was renewed meanwhile"
    );
    let report = reports.lock().unwrap()[0].clone();
    assert!(report.seconds >= 0.3, "stopped after {} s", report.seconds);
    let stored = record(store.as_ref(), "slow").await;
    assert_eq!(stored.error.as_deref(), Some(lease_worker::TIMED_OUT));
    assert_eq!(stored.result, None);
    assert_eq!(
        stored.status_at(Timestamp::new(SystemClock.now()).unwrap()),
        Status::Pending,
        "a timed-out attempt is retried while attempts remain"
    );
    assert!(store.hooks().complete_calls.lock().unwrap().is_empty());

    store.enqueue(&job("free")).await.unwrap();
    let mut free_config = config("w", 0.15);
    free_config.max_jobs = Some(1);
    free_config.queue = QueueName::default();
    let summary = Worker::new(
        store.clone(),
        |ctx: JobContext| async move {
            assert_eq!(ctx.timeout, None);
            tokio::time::sleep(Duration::from_millis(450)).await;
            Ok::<_, String>("took its time".to_owned())
        },
        free_config,
    )
    .run(CancellationToken::new())
    .await;
    // The retried "slow" job is not due yet (backoff), so the worker takes "free".
    assert_eq!(summary.unwrap().completed, 1);
    assert_eq!(
        record(store.as_ref(), "free").await.result.as_deref(),
        Some("took its time")
    );
}

/// A handler's progress is stored under its fence and renews the lease; once the lease is
/// another's, the old holder's report is refused and the new holder's stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reports_are_stored_under_the_fence_and_a_stale_one_is_refused() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    store.enqueue(&job("p")).await.unwrap();
    let kept: Arc<Mutex<Option<lease_worker::Progress>>> = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&kept);
    let reader = Arc::clone(&store);
    let mut config = config("w", 5.0);
    config.max_jobs = Some(1);
    let summary = Worker::new(
        Arc::clone(&store),
        move |ctx: JobContext| {
            let (seen, reader) = (Arc::clone(&seen), Arc::clone(&reader));
            async move {
                let before = record(reader.as_ref(), "p").await.until;
                assert!(matches!(ctx.progress.report("1 of 2").await, Ok(Ok(()))));
                let stored = record(reader.as_ref(), "p").await;
                assert_eq!(stored.progress.as_deref(), Some("1 of 2"));
                assert!(stored.until >= before, "the report renewed the lease");
                let long = "x".repeat(lease_domain::ProgressText::MAX_BYTES + 1);
                assert!(matches!(
                    ctx.progress.report(&long).await,
                    Err(StoreError::InvalidInput(_))
                ));
                *seen.lock().unwrap() = Some(ctx.progress.clone());
                Ok::<_, String>("done".to_owned())
            }
        },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!(summary.completed, 1);
    // Run again under a new lease (a re-run): the first lease's report is refused.
    let rerun = EnqueueSpec {
        replace_finished: true,
        ..EnqueueSpec::default()
    };
    assert!(store.enqueue_with(&job("p"), &rerun).await.unwrap());
    let now = lease_domain::LeaseTerm::new(SystemClock.now(), 5.0).unwrap();
    let leases = store
        .claim_next(&QueueName::default(), &owner("w"), now, 1)
        .await
        .unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(
        record(store.as_ref(), "p").await.progress,
        None,
        "a claim clears it"
    );
    let stale = kept.lock().unwrap().clone().unwrap();
    assert!(stale.report("from the old lease").await.unwrap().is_err());
    assert_eq!(record(store.as_ref(), "p").await.progress, None);
}

/// A handler holds its job's group (`JobContext::hold_group_for`, as after an upstream's 429):
/// the group is paused by the worker's clock from then, its other job waits while the rest of
/// the queue runs; once the lease is another's, the old context's hold is refused and changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_holds_its_group_under_its_fence_and_a_stale_hold_is_refused() {
    let store = Arc::new(MemoryLeaseStore::new());
    let grouped = |g: &str| EnqueueSpec {
        group: Some(lease_domain::GroupKey::new(g).unwrap()),
        ..EnqueueSpec::default()
    };
    for (id, g) in [
        ("m1", "merchant-9"),
        ("m2", "merchant-9"),
        ("o1", "merchant-1"),
    ] {
        assert!(store.enqueue_with(&job(id), &grouped(g)).await.unwrap());
    }
    let kept: Arc<Mutex<Option<JobContext>>> = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&kept);
    let mut config = config("w", 5.0);
    config.max_jobs = Some(2);
    let lease_store: Arc<dyn LeaseStore> = store.clone();
    let summary = Worker::new(
        lease_store,
        move |ctx: JobContext| {
            let seen = Arc::clone(&seen);
            async move {
                if ctx.job.as_str() == "m1" {
                    assert!(matches!(ctx.hold_group_for(3600.0).await, Ok(Ok(()))));
                    *seen.lock().unwrap() = Some(ctx.clone());
                }
                Ok::<_, String>("done".to_owned())
            }
        },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!(summary.completed, 2);
    let settings = store.settings_of(&QueueName::default()).await.unwrap();
    let until = settings.paused_groups[&lease_domain::GroupKey::new("merchant-9").unwrap()]
        .expect("held until a time");
    assert!(until.get() > SystemClock.now() + 3000.0);
    assert_eq!(
        record(store.as_ref(), "m2").await.status_at(until),
        Status::Pending
    );
    assert!(record(store.as_ref(), "o1").await.done);
    // Resumed, and m1 run again under a new lease: the old context's hold is refused.
    store
        .change_queue(
            &QueueName::default(),
            lease_domain::QueueChange::ResumeGroup(
                lease_domain::GroupKey::new("merchant-9").unwrap(),
            ),
        )
        .await
        .unwrap();
    let rerun = EnqueueSpec {
        replace_finished: true,
        ..grouped("merchant-9")
    };
    assert!(store.enqueue_with(&job("m1"), &rerun).await.unwrap());
    let now = lease_domain::LeaseTerm::new(SystemClock.now(), 5.0).unwrap();
    assert_eq!(
        store
            .claim_next(&QueueName::default(), &owner("w"), now, 1)
            .await
            .unwrap()
            .len(),
        1
    );
    let stale = kept.lock().unwrap().clone().unwrap();
    assert!(stale.hold_group_for(60.0).await.unwrap().is_err());
    assert!(
        store
            .settings_of(&QueueName::default())
            .await
            .unwrap()
            .is_default(),
        "a stale hold paused the group"
    );
}

/// A handler reads its parents' results through its context, in the order named, and a child
/// runs only after every parent completed; a job without parents reads none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_reads_its_parents_results_and_runs_after_them() {
    let store = Arc::new(MemoryLeaseStore::new());
    let batch = [
        (
            job("sum"),
            EnqueueSpec {
                after: vec![job("left"), job("right")],
                ..EnqueueSpec::default()
            },
        ),
        (job("left"), EnqueueSpec::default()),
        (job("right"), EnqueueSpec::default()),
    ];
    store.enqueue_many(&batch).await.unwrap();
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&order);
    let mut config = config("w", 5.0);
    config.max_jobs = Some(3);
    let lease_store: Arc<dyn LeaseStore> = store.clone();
    let summary = Worker::new(
        lease_store,
        move |ctx: JobContext| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(ctx.job.as_str().to_owned());
                let parents = ctx.parents().await.map_err(|e| e.to_string())?;
                if ctx.job.as_str() != "sum" {
                    assert!(parents.is_empty());
                    return Ok(format!("{}-result", ctx.job));
                }
                let shown: Vec<(&str, Status, Option<&str>)> = parents
                    .iter()
                    .map(|p| (p.id.as_str(), p.status, p.result.as_deref()))
                    .collect();
                assert_eq!(
                    shown,
                    [
                        ("left", Status::Done, Some("left-result")),
                        ("right", Status::Done, Some("right-result")),
                    ]
                );
                Ok::<_, String>("summed".to_owned())
            }
        },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!(summary.completed, 3);
    assert_eq!(
        order.lock().unwrap().last().map(String::as_str),
        Some("sum")
    );
    assert_eq!(
        record(store.as_ref(), "sum").await.result.as_deref(),
        Some("summed")
    );
}

/// A retried job resumes where its failed attempt stopped: a step it kept returns the kept
/// value without running again, a step that failed runs again, and the job's checkpoints
/// are what the steps returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_job_resumes_after_the_steps_its_last_attempt_kept() {
    let store = Arc::new(MemoryLeaseStore::new());
    store.enqueue(&job("etl")).await.unwrap();
    let runs: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&runs);
    let mut config = config("w", 5.0);
    config.max_jobs = Some(2);
    config.retry = Retry::Backoff(Backoff::new(0.05, 2.0, 1.0, 0.0).unwrap());
    let lease_store: Arc<dyn LeaseStore> = store.clone();
    let summary = Worker::new(
        lease_store,
        move |ctx: JobContext| {
            let seen = Arc::clone(&seen);
            async move {
                let note =
                    |step: &str| seen.lock().unwrap().push(format!("{step}@{}", ctx.attempt));
                let rows = ctx
                    .step("extract", || async {
                        note("extract");
                        Ok(format!("rows from attempt {}", ctx.attempt))
                    })
                    .await?;
                let loaded = ctx
                    .step("load", || async {
                        note("load");
                        if ctx.attempt == 1 {
                            Err("the warehouse is down".to_owned())
                        } else {
                            Ok(format!("loaded {rows}"))
                        }
                    })
                    .await?;
                Ok(loaded)
            }
        },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!((summary.failed, summary.completed), (1, 1));
    assert_eq!(
        *runs.lock().unwrap(),
        ["extract@1", "load@1", "load@2"],
        "the kept step ran once"
    );
    assert_eq!(
        record(store.as_ref(), "etl").await.result.as_deref(),
        Some("loaded rows from attempt 1")
    );
    let kept: Vec<(String, String, u64)> = store
        .checkpoints(&job("etl"))
        .await
        .unwrap()
        .into_iter()
        .map(|c| {
            (
                c.name.as_str().to_owned(),
                c.value.as_str().to_owned(),
                c.fence.get(),
            )
        })
        .collect();
    assert_eq!(
        kept,
        [
            ("extract".to_owned(), "rows from attempt 1".to_owned(), 1),
            (
                "load".to_owned(),
                "loaded rows from attempt 1".to_owned(),
                2
            ),
        ]
    );
}

/// With prefetch, killed workers still leave every job completed exactly once: the leases they
/// held ahead are real leases, rescued once they expire like the running ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetching_workers_killed_at_random_leave_every_job_completed_exactly_once() {
    const JOBS: usize = 80;
    let dir = tempfile::tempdir().unwrap();
    let store = many_attempts_store(&dir, JOBS).await;
    let spawn_worker = |n: usize| {
        let mut config = config(&format!("w{n}"), 0.4);
        config.concurrency = 2;
        config.prefetch = Some(4);
        config.prefetch_while_under = Duration::MAX;
        config.exit_when_empty = true;
        let worker = Worker::new(
            store.clone(),
            move |ctx: JobContext| async move {
                tokio::time::sleep(Duration::from_millis(5 + (ctx.fence.get() % 3) * 5)).await;
                Ok::<_, String>(format!("{} done by w{n}", ctx.job))
            },
            config,
        );
        tokio::spawn(worker.run(CancellationToken::new()))
    };
    let mut workers: Vec<_> = (0..3).map(spawn_worker).collect();
    for (k, next) in (3..9).enumerate() {
        tokio::time::sleep(Duration::from_millis(40)).await;
        let victim = k % 3;
        workers[victim].abort();
        workers[victim] = spawn_worker(next);
    }
    for worker in workers {
        let _ = worker.await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut last = config("finisher", 0.4);
    last.concurrency = 3;
    last.prefetch = Some(3);
    last.prefetch_while_under = Duration::MAX;
    last.exit_when_empty = true;
    Worker::new(
        store.clone(),
        |ctx: JobContext| async move { Ok::<_, String>(format!("{} done late", ctx.job)) },
        last,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    each_done_once(&store, JOBS).await;
}

/// A lease claimed ahead is renewed while it waits for a slot, so it runs under the fence it
/// was claimed with, however long the job before it took (here five of its ttls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_claimed_ahead_is_renewed_while_it_waits_and_runs_under_its_fence() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    for id in ["a-slow", "b-next"] {
        store.enqueue(&job(id)).await.unwrap();
    }
    let mut config = config("w", 0.3);
    config.prefetch = Some(1);
    config.prefetch_while_under = Duration::MAX;
    config.exit_when_empty = true;
    let reports = Arc::new(Mutex::new(Vec::new()));
    let summary = Worker::new(
        Arc::clone(&store),
        |ctx: JobContext| async move {
            if ctx.job.as_str() == "a-slow" {
                tokio::time::sleep(Duration::from_millis(1500)).await;
            }
            Ok::<_, String>(format!("{} under {}", ctx.job, ctx.fence))
        },
        config,
    )
    .on_report(collect(&reports))
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!((summary.completed, summary.lost), (2, 0), "{reports:?}");
    let next = record(store.as_ref(), "b-next").await;
    assert_eq!(
        (next.done, next.fence.get(), next.result.as_deref()),
        (true, 1, Some("b-next under 1")),
        "the lease claimed ahead ran under its first fence"
    );
}

/// A lease held ahead whose renewal the store cannot answer is tried again after a pause, not
/// at once in a loop: a store that is down is not flooded with renewals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_whose_renewal_fails_is_retried_after_a_pause_not_in_a_loop() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    for id in ["a-slow", "b-next"] {
        store.enqueue(&job(id)).await.unwrap();
    }
    *store.hooks().cut_off.lock().unwrap() = Some(owner("w"));
    let mut config = config("w", 1.0);
    config.prefetch = Some(1);
    config.prefetch_while_under = Duration::MAX;
    config.exit_when_empty = true;
    let summary = Worker::new(
        store.clone(),
        |ctx: JobContext| async move {
            if ctx.job.as_str() == "a-slow" {
                tokio::time::sleep(Duration::from_millis(600)).await;
            }
            Ok::<_, String>(ctx.job.to_string())
        },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!(summary.completed, 2);
    let renewals = store.hooks().renewals.load(Ordering::SeqCst);
    assert!(
        (2..50).contains(&renewals),
        "{renewals} renewals in 0.6 s: the held lease's failed renewal was retried in a loop"
    );
}

/// A store that never answers the renewal of a held lease cannot hold up the worker's
/// shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_of_a_held_lease_that_never_returns_cannot_hold_up_the_shutdown() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    for id in ["a-running", "b-held"] {
        store.enqueue(&job(id)).await.unwrap();
    }
    store.hooks().hang_renewals.store(true, Ordering::SeqCst);
    let mut config = config("w", 0.6);
    config.prefetch = Some(1);
    config.prefetch_while_under = Duration::MAX;
    config.drain = Duration::from_millis(100);
    let (running, shutdown) = run_until_shutdown(store.clone(), config, &Arc::default());
    // The held lease's renewal is due after a third of the ttl, and never answered.
    eventually("a renewal was asked", || {
        store.hooks().renewals.load(Ordering::SeqCst) > 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(3), running).await;
    assert!(
        stopped.is_ok(),
        "the shutdown waited on a renewal the store never answered"
    );
}

/// A store that never answers the give-back of the leases held ahead holds up the shutdown
/// for the drain at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_that_never_returns_holds_up_the_shutdown_for_the_drain_at_most() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    for id in ["a", "b", "c"] {
        store.enqueue(&job(id)).await.unwrap();
    }
    store.hooks().hang_give_backs.store(true, Ordering::SeqCst);
    let mut config = config("w", 30.0);
    config.prefetch = Some(2);
    config.prefetch_while_under = Duration::MAX;
    config.drain = Duration::from_millis(200);
    let (running, shutdown) = run_until_shutdown(store.clone(), config, &Arc::default());
    assert_eq!(until_held(store.as_ref(), &["a", "b", "c"]).await, 3);
    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(3), running).await;
    assert!(
        stopped.is_ok(),
        "the shutdown waited on give-backs the store never answered"
    );
}

/// At shutdown the leases claimed ahead are released unrun, and their jobs can be claimed at
/// once by another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_claimed_ahead_are_released_at_shutdown() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    for id in ["a", "b", "c", "d"] {
        store.enqueue(&job(id)).await.unwrap();
    }
    let mut config = config("w", 30.0);
    config.prefetch = Some(3);
    config.prefetch_while_under = Duration::MAX;
    config.drain = Duration::from_millis(200);
    let started = Arc::new(AtomicUsize::new(0));
    let (running, shutdown) = run_until_shutdown(Arc::clone(&store), config, &started);
    let ids = ["a", "b", "c", "d"];
    assert_eq!(
        until_held(store.as_ref(), &ids).await,
        4,
        "one job runs and three are held ahead"
    );
    assert_eq!(started.load(Ordering::SeqCst), 1, "one slot runs one job");
    shutdown.cancel();
    let summary = running.await.unwrap().unwrap();
    assert_eq!(summary.released, 1);
    assert_eq!(
        held(store.as_ref(), &ids).await,
        0,
        "every lease was given back"
    );
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "nothing held ahead was run"
    );
}

/// A lease held ahead and given back at shutdown hands back its attempt: a job of one attempt
/// held by a worker that stopped is not buried, and the next worker runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_held_ahead_on_its_last_attempt_runs_after_its_worker_stops() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let once = EnqueueSpec {
        max_attempts: Some(1),
        ..EnqueueSpec::default()
    };
    for id in ["a", "b"] {
        store.enqueue_with(&job(id), &once).await.unwrap();
    }
    let mut first = config("w1", 30.0);
    first.prefetch = Some(1);
    first.prefetch_while_under = Duration::MAX;
    first.drain = Duration::from_millis(100);
    let (running, shutdown) = run_until_shutdown(Arc::clone(&store), first, &Arc::default());
    assert_eq!(until_held(store.as_ref(), &["a", "b"]).await, 2);
    shutdown.cancel();
    running.await.unwrap().unwrap();
    let mut second = config("w2", 30.0);
    second.exit_when_empty = true;
    let summary = Worker::new(
        Arc::clone(&store),
        |ctx: JobContext| async move { Ok::<_, String>(ctx.job.to_string()) },
        second,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    // The job that ran under the first worker was released after it started: its one
    // attempt is spent, so it is buried; the one held ahead never started and runs now.
    assert_eq!(summary.completed, 1);
    let done: Vec<bool> = futures::future::join_all(
        ["a", "b"].map(|id| async { record(store.as_ref(), id).await.done }),
    )
    .await;
    assert_eq!(done.iter().filter(|d| **d).count(), 1, "{done:?}");
}

/// With prefetch, a slot starts its next job while the last one's completion commits: a
/// completion that takes 300 ms does not hold up the job after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_runs_its_next_job_while_the_last_completion_commits() {
    let store = watched(Arc::new(MemoryLeaseStore::new()));
    for id in ["a", "b", "c"] {
        store.enqueue(&job(id)).await.unwrap();
    }
    store.hooks().slow_completions.store(true, Ordering::SeqCst);
    let mut config = config("w", 30.0);
    config.prefetch = Some(2);
    config.prefetch_while_under = Duration::MAX;
    config.exit_when_empty = true;
    let starts = Arc::new(Mutex::new(Vec::new()));
    let summary = {
        let starts = Arc::clone(&starts);
        Worker::new(
            store.clone(),
            move |ctx: JobContext| {
                starts.lock().unwrap().push(std::time::Instant::now());
                async move { Ok::<_, String>(ctx.job.to_string()) }
            },
            config,
        )
        .run(CancellationToken::new())
        .await
        .unwrap()
    };
    assert_eq!(summary.completed, 3);
    let starts = starts.lock().unwrap();
    assert_eq!(starts.len(), 3);
    assert!(
        starts[1] - starts[0] < Duration::from_millis(200),
        "the second job waited for the first one's completion: {:?}",
        starts[1] - starts[0]
    );
}

/// A store holding job `sealed`, its payload sealed under `keys` (one attempt), and job
/// `plain` with a plain payload.
async fn sealed_store(keys: &lease_seal::Keyring) -> Arc<dyn LeaseStore> {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let sealed = keys.seal_payload("sealed", b"alice@example.com").unwrap();
    for (id, bytes) in [("sealed", sealed), ("plain", b"as it is".to_vec())] {
        let spec = EnqueueSpec {
            max_attempts: Some(1),
            payload: Some(lease_domain::Payload::new(bytes, 1 << 20).unwrap()),
            ..EnqueueSpec::default()
        };
        store.enqueue_with(&job(id), &spec).await.unwrap();
    }
    store
}

/// Runs a worker with `keys` over `store` until it is empty; the payloads its handler saw.
async fn payloads_seen(
    store: Arc<dyn LeaseStore>,
    keys: Option<lease_seal::Keyring>,
) -> HashMap<String, Vec<u8>> {
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let into = Arc::clone(&seen);
    let mut config = config("w", 30.0);
    config.exit_when_empty = true;
    config.keys = keys.map(Arc::new);
    Worker::new(
        store,
        move |ctx: JobContext| {
            into.lock()
                .unwrap()
                .insert(ctx.job.as_str().to_owned(), ctx.payload.unwrap_or_default());
            async move { Ok::<_, String>("done".to_owned()) }
        },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    seen.lock().unwrap().clone()
}

#[tokio::test]
async fn a_sealed_payload_reaches_the_handler_opened() {
    let keys = lease_seal::Keyring::single(&("A".repeat(43) + "=")).unwrap();
    let store = sealed_store(&keys).await;
    let seen = payloads_seen(Arc::clone(&store), Some(keys)).await;
    assert_eq!(seen["sealed"], b"alice@example.com");
    assert_eq!(seen["plain"], b"as it is");
    assert!(record(store.as_ref(), "sealed").await.done);
}

#[tokio::test]
async fn a_sealed_payload_without_its_key_fails_the_job_naming_the_key_and_the_handler_never_runs()
{
    let keys =
        lease_seal::Keyring::parse(&format!("k2026={}\n", "A".repeat(43) + "="), "test").unwrap();
    let store = sealed_store(&keys).await;
    let seen = payloads_seen(Arc::clone(&store), None).await;
    assert!(!seen.contains_key("sealed"), "the handler never saw it");
    assert_eq!(seen["plain"], b"as it is", "a plain payload still runs");
    let stored = record(store.as_ref(), "sealed").await;
    assert!(!stored.done);
    assert_eq!(
        stored.status_at(Timestamp::new(1e12).unwrap()),
        Status::Dead
    );
    let error = stored.error.unwrap();
    assert!(
        error.contains("key k2026") && error.contains("job sealed"),
        "{error}"
    );
    assert!(!error.contains("alice"), "{error}");
}

#[tokio::test]
async fn with_seal_results_a_result_is_stored_sealed_for_its_job_and_opens_to_what_the_handler_returned()
 {
    let keys =
        lease_seal::Keyring::parse(&format!("r1={}\n", "A".repeat(43) + "="), "test").unwrap();
    let store = sealed_store(&keys).await;
    let mut config = config("w", 30.0);
    config.exit_when_empty = true;
    config.keys = Some(Arc::new(keys));
    config.seal_results = true;
    let keys = Arc::clone(config.keys.as_ref().unwrap());
    Worker::new(
        Arc::clone(&store),
        |ctx: JobContext| async move { Ok::<_, String>(format!("report for {}", ctx.job)) },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    for id in ["sealed", "plain"] {
        let stored = record(store.as_ref(), id).await.result.unwrap();
        assert_eq!(lease_domain::sealed_result(&stored).unwrap().key, "r1");
        assert!(!stored.contains("report"), "{stored}");
        assert_eq!(
            lease_seal::open_result(Some(&keys), true, id, &stored).unwrap(),
            format!("report for {id}")
        );
    }
}

/// A worker that seals results seals its attempts' progress and checkpoints too, each bound
/// to its job (and a checkpoint to its step): none is stored in the clear, a later attempt
/// reads its checkpoints opened (so `step` resumes), and a long progress text is cut to what
/// fits once sealed instead of being refused.
#[tokio::test]
async fn with_seal_results_progress_and_checkpoints_are_stored_sealed_and_read_back_opened() {
    let keys =
        lease_seal::Keyring::parse(&format!("r1={}\n", "A".repeat(43) + "="), "test").unwrap();
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let spec = EnqueueSpec {
        max_attempts: Some(2),
        ..EnqueueSpec::default()
    };
    store.enqueue_with(&job("s"), &spec).await.unwrap();
    let mut config = config("w", 30.0);
    config.max_jobs = Some(2);
    config.idle_poll = Duration::from_millis(10);
    config.keys = Some(Arc::new(keys));
    config.seal_results = true;
    config.retry = Retry::Backoff(Backoff::new(0.01, 1.0, 0.01, 0.0).unwrap());
    let keys = Arc::clone(config.keys.as_ref().unwrap());
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&ran);
    Worker::new(
        Arc::clone(&store),
        move |ctx: JobContext| {
            let seen = Arc::clone(&seen);
            async move {
                let fetched = ctx
                    .step("fetch", || async {
                        Ok(format!("secret rows of attempt {}", ctx.attempt))
                    })
                    .await?;
                seen.lock().unwrap().push(fetched);
                ctx.progress
                    .report(&format!("secret progress {}", "x".repeat(1000)))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("{e:?}"))?;
                if ctx.attempt == 1 {
                    return Err("first attempt fails".to_owned());
                }
                Ok("done".to_owned())
            }
        },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    // The second attempt resumed from the first one's step, read back opened.
    assert_eq!(
        *ran.lock().unwrap(),
        ["secret rows of attempt 1", "secret rows of attempt 1"]
    );
    let kept = store.checkpoints(&job("s")).await.unwrap();
    let value = kept[0].value.as_str();
    assert!(
        value.starts_with("lease-sealed:v1:r1:") && !value.contains("secret"),
        "{value}"
    );
    assert_eq!(
        lease_seal::open_checkpoint(Some(&keys), true, "s", "fetch", value).unwrap(),
        "secret rows of attempt 1"
    );
    // Bound to its step: it does not open as another one.
    assert!(lease_seal::open_checkpoint(Some(&keys), true, "s", "parse", value).is_err());
    let progress = record(store.as_ref(), "s").await.progress.unwrap();
    assert!(progress.len() <= lease_seal::SEALED_PROGRESS_MAX);
    assert!(!progress.contains("secret"), "{progress}");
    let opened = lease_seal::open_progress(Some(&keys), true, "s", &progress).unwrap();
    assert!(opened.starts_with("secret progress xxx"), "{opened}");
    assert_eq!(opened.len(), keys.progress_room());
}

#[tokio::test]
async fn with_seal_results_and_no_key_a_result_is_never_stored_in_the_clear() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let spec = EnqueueSpec {
        max_attempts: Some(1),
        ..EnqueueSpec::default()
    };
    store.enqueue_with(&job("j"), &spec).await.unwrap();
    let mut config = config("w", 30.0);
    config.exit_when_empty = true;
    config.seal_results = true;
    Worker::new(
        Arc::clone(&store),
        |_: JobContext| async move { Ok::<_, String>("secret result".to_owned()) },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    let stored = record(store.as_ref(), "j").await;
    assert_eq!(stored.result, None);
    let error = stored.error.unwrap();
    assert!(error.contains("no key is given"), "{error}");
    assert!(!error.contains("secret"), "{error}");
}

/// With a trace join, each attempt of a job enqueued in a trace is joined with the job's
/// context and its attempt number (child, then links, as `lease-otel` does with them), and a
/// job without one is not joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_is_joined_to_the_trace_its_job_was_enqueued_in() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let trace = lease_domain::TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        None,
    )
    .unwrap();
    let traced = EnqueueSpec {
        max_attempts: Some(2),
        trace: Some(trace.clone()),
        ..EnqueueSpec::default()
    };
    store.enqueue_with(&job("traced"), &traced).await.unwrap();
    store.enqueue(&job("plain")).await.unwrap();
    let joined = Arc::new(Mutex::new(Vec::new()));
    let mut config = config("w", 5.0);
    config.max_jobs = Some(3);
    config.retry = Retry::Backoff(Backoff::new(0.01, 1.0, 0.01, 0.0).unwrap());
    let seen = Arc::clone(&joined);
    config.trace = Some(lease_worker::TraceJoin(Arc::new(
        move |_: &tracing::Span, trace: &lease_domain::TraceContext, how: lease_worker::Join| {
            seen.lock()
                .unwrap()
                .push((trace.traceparent().to_owned(), how));
        },
    )));
    let summary = Worker::new(
        Arc::clone(&store),
        |ctx: JobContext| async move {
            if ctx.job.as_str() == "traced" && ctx.attempt == 1 {
                Err::<String, _>("first attempt fails".to_owned())
            } else {
                Ok(String::new())
            }
        },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!((summary.completed, summary.failed), (2, 1));
    let joined = joined.lock().unwrap().clone();
    // Exactly the traced job's two attempts were joined, in order, with its context: the
    // first as its child, the retry as a link.
    assert_eq!(
        joined,
        [
            (trace.traceparent().to_owned(), lease_worker::Join::Child),
            (trace.traceparent().to_owned(), lease_worker::Join::Link)
        ]
    );
}

/// How many jobs of `ids` are leased and not finished.
async fn open_leases(store: &dyn LeaseStore, ids: &[String]) -> usize {
    let mut open = 0;
    for id in ids {
        let job = record(store, id).await;
        open += usize::from(job.owner.is_some() && job.finished().is_none());
    }
    open
}

/// A worker with its defaults over jobs that each take `each`: at every job's start, how many
/// of the queue's jobs were leased and unfinished.
async fn leases_seen_at_each_start(n: usize, each: Duration) -> Vec<usize> {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryLeaseStore::new());
    let ids: Arc<Vec<String>> = Arc::new((0..n).map(|i| format!("j{i:02}")).collect());
    for id in ids.iter() {
        store.enqueue(&job(id)).await.unwrap();
    }
    let mut config = config("w", 30.0);
    config.exit_when_empty = true;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (noted, watched, all) = (Arc::clone(&seen), Arc::clone(&store), Arc::clone(&ids));
    let summary = Worker::new(
        Arc::clone(&store),
        move |_ctx: JobContext| {
            let (noted, watched, all) =
                (Arc::clone(&noted), Arc::clone(&watched), Arc::clone(&all));
            async move {
                let open = open_leases(watched.as_ref(), &all).await;
                noted.lock().unwrap().push(open);
                tokio::time::sleep(each).await;
                Ok::<_, String>("r".into())
            }
        },
        config,
    )
    .run(CancellationToken::new())
    .await
    .unwrap();
    assert_eq!(summary.completed, n, "every job is completed");
    seen.lock().unwrap().clone()
}

/// By default a worker holds no lease ahead of jobs that run longer than
/// `DEFAULT_PREFETCH_WHILE_UNDER`: each job starts with its own lease the only one held, so a
/// second worker could take the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_worker_holds_no_lease_ahead_of_long_jobs() {
    let long = lease_worker::DEFAULT_PREFETCH_WHILE_UNDER * 2;
    let seen = leases_seen_at_each_start(4, long).await;
    assert_eq!(seen, vec![1, 1, 1, 1], "leases held at each job's start");
}

/// By default a worker whose jobs are short holds leases ahead, as many as its slots run in
/// `DEFAULT_AHEAD_WINDOW`, so a slot starts its next job without waiting for a commit. At a
/// job's start the worker (one slot, jobs of at least 2 ms, so at most ten ahead) holds its
/// lease, those held ahead, and the leases of the jobs whose completions still commit (as many
/// at most as are held ahead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_worker_holds_leases_ahead_of_short_jobs() {
    let each = Duration::from_millis(2);
    let seen = leases_seen_at_each_start(30, each).await;
    assert_eq!(
        seen[0], 1,
        "nothing is held ahead before a job has finished"
    );
    let most = seen.iter().copied().max().unwrap_or(0);
    let ahead = lease_worker::DEFAULT_AHEAD_WINDOW.as_millis() / each.as_millis();
    assert!(
        most > 2 && most <= 1 + 2 * usize::try_from(ahead).unwrap(),
        "leases held ahead of short jobs: {seen:?}"
    );
}
