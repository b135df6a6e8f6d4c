//! Group commit on PostgreSQL: concurrent queue-loop writes of one store share a statement and
//! a commit, and each caller still gets its own answer, as the domain decides it: every job is
//! done once, under the fence it was leased with; a batch's writes with tokens keep each
//! lease's own; a write `step` declines inside a batch is decided alone and the queue's limit
//! holds; a batch whose connection is lost while it runs tells every caller the write may have
//! committed, never that it was accepted (and nothing of it is stored); so do holders'
//! completions, failures and releases without a claim. Concurrent renewals
//! share a transaction too, each decided alone (a refusal recorded in the audit trail), and a
//! lost batch of them is told so. Concurrent enqueues share a transaction, each caller told
//! whether its job was new, and one the server refuses fails alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lease_domain::{
    ErrorText, Fence, JobId, JobResult, LeaseTerm, Owner, QueueName, Retry, TokenDigest,
};
use lease_ports::{ClaimNext, LeaseStore, StoreError};
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

fn owner(s: &str) -> Owner {
    Owner::new(s).unwrap()
}

fn term(now: f64, ttl: f64) -> LeaseTerm {
    LeaseTerm::new(now, ttl).unwrap()
}

async fn store(db: &ScratchDatabase, options: PgOptions) -> Arc<PgLeaseStore> {
    Arc::new(PgLeaseStore::init(db.url(), options).await.unwrap())
}

/// `n` pending jobs `{queue}-0..` of `queue`.
fn fill(db: &ScratchDatabase, queue: &str, n: usize) {
    db.execute(&format!(
        "INSERT INTO lease.jobs(id, queue) SELECT '{queue}-' || g, '{queue}' \
         FROM generate_series(0, {}) g",
        n - 1
    ))
    .unwrap();
}

/// One worker of the queue loop: claims, then completes each job with the next claim, until
/// nothing is due; answers the jobs it completed with the fence of each.
async fn queue_loop(store: Arc<PgLeaseStore>, queue: QueueName, me: Owner) -> Vec<(JobId, u64)> {
    let mut done = Vec::new();
    let mut leases = store
        .claim_next(&queue, &me, term(1.0, 600.0), 1)
        .await
        .unwrap();
    while let Some(lease) = leases.pop() {
        let result = JobResult::new(format!("by {me}")).unwrap();
        let (outcome, next) = store
            .complete_and_claim_next(
                &lease.job,
                &me,
                lease.fence,
                &result,
                &queue,
                term(2.0, 600.0),
                1,
            )
            .await
            .unwrap();
        assert!(outcome.is_ok(), "{}: {outcome:?}", lease.job);
        done.push((lease.job, lease.fence.get()));
        leases = next.unwrap();
    }
    done
}

/// `workers` queue loops over queue `q` at once; every job each completed, with its fence,
/// checked to be completed once.
async fn loops(store: &Arc<PgLeaseStore>, workers: usize) -> HashMap<JobId, u64> {
    let queue = QueueName::new("q").unwrap();
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let me = owner(&format!("w{w}"));
            tokio::spawn(queue_loop(Arc::clone(store), queue.clone(), me))
        })
        .collect();
    let mut done = HashMap::new();
    for task in tasks {
        for (job, fence) in task.await.unwrap() {
            assert!(
                done.insert(job.clone(), fence).is_none(),
                "{job} was completed twice"
            );
        }
    }
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_queue_loops_share_commits_and_every_job_is_done_once_under_its_fence() {
    let db = ScratchDatabase::create();
    let store = store(
        &db,
        PgOptions {
            pool_size: 8,
            ..PgOptions::default()
        },
    )
    .await;
    fill(&db, "q", 400);
    let done = loops(&store, 32).await;
    assert_eq!(done.len(), 400, "every job is completed");
    for (job, fence) in &done {
        let stored = store.record(job).await.unwrap().unwrap().job;
        assert!(stored.done, "{job}");
        assert_eq!(
            stored.result_fence.map(|f| f.get()),
            Some(*fence),
            "{job} is done under the fence it was leased with"
        );
    }
    let stats = store.group_commit_stats().unwrap();
    assert!(
        stats.batches_of_many > 0,
        "concurrent writes shared batches: {stats:?}"
    );
    assert!(
        stats.batches < stats.writes,
        "fewer commits than writes: {stats:?}"
    );
    assert_eq!(
        stats.writes,
        400 + 32,
        "every claim and completion went through batches: {stats:?}"
    );
}

/// Holds every job of `queue` ({queue}-0..{n}) as `me`, one lease each; answers their fences.
async fn hold_all(store: &PgLeaseStore, queue: &str, me: &Owner, n: usize) -> Vec<(JobId, Fence)> {
    let leases = store
        .claim_next(&QueueName::new(queue).unwrap(), me, term(1.0, 600.0), n)
        .await
        .unwrap();
    assert_eq!(leases.len(), n);
    leases.into_iter().map(|l| (l.job, l.fence)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_failures_releases_and_completions_share_commits_and_each_is_decided_alone() {
    let db = ScratchDatabase::create();
    let store = store(&db, PgOptions::default()).await;
    fill(&db, "q", 60);
    let me = owner("w");
    let held = hold_all(&store, "q", &me, 60).await;
    let before = store.group_commit_stats().unwrap();
    let at = lease_domain::Timestamp::new(2.0).unwrap();
    let tasks: Vec<_> = held
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, (job, fence))| {
            let (store, me) = (Arc::clone(&store), me.clone());
            tokio::spawn(async move {
                let error = ErrorText::new("boom").unwrap();
                let result = JobResult::new("ok").unwrap();
                match i % 4 {
                    0 => store
                        .fail(&job, &me, fence, at, &error, Retry::default())
                        .await
                        .map(|o| o.map(|_| ())),
                    1 => store.release(&job, &me, fence).await,
                    2 => store.complete(&job, &me, fence, at, &result).await,
                    // A write under a fence the job never had is refused, alone.
                    _ => {
                        let stale = Fence::new(fence.get() + 7).unwrap();
                        store.complete(&job, &me, stale, at, &result).await
                    }
                }
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let outcome = task.await.unwrap().unwrap();
        assert_eq!(outcome.is_ok(), i % 4 != 3, "write {i}: {outcome:?}");
    }
    assert_shared(&store, before, 60);
    for (i, (job, fence)) in held.iter().enumerate() {
        let stored = store.record(job).await.unwrap().unwrap().job;
        match i % 4 {
            0 => assert!(
                !stored.done && stored.owner.is_none() && stored.error.is_some(),
                "{job} failed back to pending: {stored:?}"
            ),
            1 => assert!(
                !stored.done && stored.owner.is_none() && stored.error.is_none(),
                "{job} released: {stored:?}"
            ),
            2 => assert_eq!(stored.result_fence, Some(*fence), "{job} done"),
            _ => assert!(
                !stored.done && stored.owner.as_ref() == Some(&me),
                "{job} still held after the refused write: {stored:?}"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_failures_whose_connection_is_lost_tells_its_callers_the_write_may_have_committed()
 {
    let db = ScratchDatabase::create();
    let store = store(&db, PgOptions::default()).await;
    fill(&db, "q", 24);
    let me = owner("w");
    let held = hold_all(&store, "q", &me, 24).await;
    // Every failed row takes a while, so the batch is still running when its backend ends.
    slow_updates(&db, "NEW.error IS NOT NULL");
    let at = lease_domain::Timestamp::new(2.0).unwrap();
    let tasks: Vec<_> = held
        .iter()
        .cloned()
        .map(|(job, fence)| {
            let (store, me) = (Arc::clone(&store), me.clone());
            tokio::spawn(async move {
                let error = ErrorText::new("boom").unwrap();
                store.fail(&job, &me, fence, at, &error, Retry::No).await
            })
        })
        .collect();
    let killer = kill_a_batch(&db).await;
    let mut failed = 0;
    for outcome in acknowledged(tasks).await {
        assert!(outcome.is_ok(), "{outcome:?}");
        failed += 1;
    }
    db.execute("DROP TRIGGER slow ON lease.jobs").unwrap();
    // Nothing of the lost batch committed: only the failures acknowledged are stored.
    let dead: i64 = killer
        .query_one(
            "SELECT count(*) FROM lease.jobs WHERE error IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        usize::try_from(dead).unwrap(),
        failed,
        "only acknowledged failures are stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_it_runs_each_write_alone() {
    let db = ScratchDatabase::create();
    let store = store(
        &db,
        PgOptions {
            max_batch: 1,
            ..PgOptions::default()
        },
    )
    .await;
    assert_eq!(store.group_commit_stats(), None);
    fill(&db, "q", 20);
    let done = loops(&store, 4).await.len();
    assert_eq!(done, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_write_of_a_batch_keeps_its_own_lease_tokens() {
    let db = ScratchDatabase::create();
    let store = store(&db, PgOptions::default()).await;
    fill(&db, "t", 64);
    let queue = QueueName::new("t").unwrap();
    let tasks: Vec<_> = (0..16u8)
        .map(|w| {
            let (store, queue) = (Arc::clone(&store), queue.clone());
            tokio::spawn(async move {
                let mut claim =
                    ClaimNext::new(&queue, &owner(&format!("w{w}")), term(1.0, 60.0), 3);
                claim.tokens = (0..3u8)
                    .map(|k| TokenDigest::new([w * 3 + k + 1; 32]))
                    .collect();
                let leases = store.claim_next_with(&claim).await.unwrap();
                (claim.tokens, leases)
            })
        })
        .collect();
    let mut leased = 0;
    for task in tasks {
        let (tokens, leases) = task.await.unwrap();
        assert_eq!(leases.len(), 3);
        for (lease, token) in leases.iter().zip(&tokens) {
            let stored = store.record(&lease.job).await.unwrap().unwrap().job;
            assert_eq!(
                stored.token.as_ref(),
                Some(token),
                "{} keeps its own token",
                lease.job
            );
            leased += 1;
        }
    }
    assert_eq!(leased, 48);
    assert!(store.group_commit_stats().unwrap().batches_of_many > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_declined_in_a_batch_is_decided_alone_and_the_queues_limit_holds() {
    let db = ScratchDatabase::create();
    let store = store(&db, PgOptions::default()).await;
    fill(&db, "limited", 50);
    fill(&db, "plain", 50);
    let limited = QueueName::new("limited").unwrap();
    lease_ports::control::Control::change_queue(
        store.as_ref(),
        &limited,
        lease_domain::QueueChange::Concurrency(lease_domain::Concurrency::new(3)),
    )
    .await
    .unwrap();
    let plain = QueueName::new("plain").unwrap();
    let tasks: Vec<_> = (0..24)
        .map(|w| {
            let store = Arc::clone(&store);
            let queue = if w % 2 == 0 {
                limited.clone()
            } else {
                plain.clone()
            };
            tokio::spawn(async move {
                let leases = store
                    .claim_next(&queue, &owner(&format!("w{w}")), term(1.0, 60.0), 2)
                    .await
                    .unwrap();
                (queue, leases.len())
            })
        })
        .collect();
    let mut counts: HashMap<QueueName, usize> = HashMap::new();
    for task in tasks {
        let (queue, n) = task.await.unwrap();
        *counts.entry(queue).or_default() += n;
    }
    assert_eq!(
        counts[&limited], 3,
        "the queue's limit of three live leases holds"
    );
    assert_eq!(
        counts[&plain], 24,
        "the plain queue's claims are all answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_connection_is_lost_tells_every_caller_the_write_may_have_committed() {
    let db = ScratchDatabase::create();
    let store = store(&db, PgOptions::default()).await;
    fill(&db, "q", 64);
    // Every leased row takes a while, so the batch is still running when its backend ends.
    slow_updates(&db, "NEW.owner IS NOT NULL");
    let queue = QueueName::new("q").unwrap();
    let tasks: Vec<_> = (0..12)
        .map(|w| {
            let (store, queue) = (Arc::clone(&store), queue.clone());
            tokio::spawn(async move {
                store
                    .claim_next(&queue, &owner(&format!("w{w}")), term(1.0, 60.0), 1)
                    .await
            })
        })
        .collect();
    let killer = kill_a_batch(&db).await;
    let leased: usize = acknowledged(tasks).await.iter().map(Vec::len).sum();
    db.execute("DROP TRIGGER slow ON lease.jobs").unwrap();
    // Nothing of the lost batch committed: only the leases acknowledged are held.
    let held: i64 = killer
        .query_one(
            "SELECT count(*) FROM lease.jobs WHERE owner IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        usize::try_from(held).unwrap(),
        leased,
        "only acknowledged leases are held"
    );
    // The store goes on: the next claim gets a job.
    let next = store
        .claim_next(&queue, &owner("after"), term(2.0, 60.0), 1)
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
}

/// Makes every update of a job's row matching `when` take a while, so that a batch is still
/// running when its backend ends.
fn slow_updates(db: &ScratchDatabase, when: &str) {
    db.execute(&format!(
        "CREATE FUNCTION public.slow() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep(0.2); RETURN NULL; END $$; \
         CREATE TRIGGER slow AFTER UPDATE ON lease.jobs FOR EACH ROW \
         WHEN ({when}) EXECUTE FUNCTION public.slow()"
    ))
    .unwrap();
}

/// Ends the backend of a settled batch while it sleeps in the slow trigger (waiting up to two
/// seconds for one); answers the client that ended it.
async fn kill_a_batch(db: &ScratchDatabase) -> tokio_postgres::Client {
    let killer = db.client().await.unwrap();
    for _ in 0..200 {
        if terminate_sleeping(&killer, "%unnest%").await > 0 {
            return killer;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no batch of many ran");
}

/// The answers of the callers of a lost batch that were acknowledged; at least one caller was
/// told its write may have committed, and none was answered anything else.
async fn acknowledged<T>(tasks: Vec<tokio::task::JoinHandle<Result<T, StoreError>>>) -> Vec<T> {
    let (mut unknown, mut answered) = (0, Vec::new());
    for task in tasks {
        match task.await.unwrap() {
            Ok(answer) => answered.push(answer),
            Err(StoreError::Indeterminate(detail)) => {
                assert_may_have_committed(&detail.to_string());
                unknown += 1;
            }
            // A later batch that took a pooled connection whose backend was being terminated
            // fails before its statement is sent: nothing applied, and said so.
            Err(StoreError::Unavailable(detail))
                if detail.to_string().contains("nothing was applied") => {}
            Err(other) => panic!("a caller of the lost batch got {other}"),
        }
    }
    assert!(
        unknown >= 1,
        "the callers of the lost batch are told the outcome is unknown ({unknown})"
    );
    answered
}

/// Ends every backend of the test's database that runs a statement `like` this and is inside
/// the slow trigger's sleep (so inside the statement, not preparing it); answers how many.
async fn terminate_sleeping(killer: &tokio_postgres::Client, like: &str) -> i64 {
    killer
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND state = 'active' AND wait_event = 'PgSleep' AND query LIKE $1",
            &[&like],
        )
        .await
        .unwrap()
        .get(0)
}

/// A lost batch's caller is told its write may have committed.
fn assert_may_have_committed(detail: &str) {
    assert!(
        detail.contains("may have committed") || detail.contains("failed while committing"),
        "{detail}"
    );
}

/// Since `before`, `writes` writes were queued, some batches held many, and they took fewer
/// commits than writes.
fn assert_shared(store: &PgLeaseStore, before: lease_ports::GroupCommitStats, writes: u64) {
    let after = store.group_commit_stats().unwrap();
    assert_eq!(
        after.writes - before.writes,
        writes,
        "every write was queued"
    );
    assert!(
        after.batches_of_many > before.batches_of_many,
        "writes shared batches: {after:?}"
    );
    assert!(
        after.batches - before.batches < writes,
        "fewer commits than writes: {after:?}"
    );
}

/// Renews `lease`'s job as `who` under `fence` to 600 s from `now`.
async fn renew_as(
    store: &PgLeaseStore,
    job: &JobId,
    who: &Owner,
    fence: lease_domain::Fence,
    now: f64,
) -> Result<(), String> {
    match store.renew(job, who, fence, term(now, 600.0)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(refused)) => Err(refused.to_string()),
        Err(e) => panic!("{job}: the store failed: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_renewals_share_commits_and_each_is_decided_alone() {
    let db = ScratchDatabase::create();
    let store = store(
        &db,
        PgOptions {
            pool_size: 4,
            audit: Some(1000),
            ..PgOptions::default()
        },
    )
    .await;
    fill(&db, "q", 40);
    let (me, intruder) = (owner("me"), owner("intruder"));
    let queue = QueueName::new("q").unwrap();
    let leases = store
        .claim_next(&queue, &me, term(1.0, 600.0), 40)
        .await
        .unwrap();
    assert_eq!(leases.len(), 40);
    let before = store.group_commit_stats().unwrap();
    // Every lease renewed by its holder, the first one twice, and the
    // first five also by someone else under the right fence.
    let mut calls: Vec<(usize, &Owner, f64)> = (0..40).map(|i| (i, &me, 10.0)).collect();
    calls.push((0, &me, 11.0));
    calls.extend((0..5).map(|i| (i, &intruder, 10.0)));
    let answers = futures::future::join_all(calls.iter().map(|(i, who, now)| {
        let lease = &leases[*i];
        renew_as(&store, &lease.job, who, lease.fence, *now)
    }))
    .await;
    for ((i, who, _), answer) in calls.iter().zip(&answers) {
        if *who == &intruder {
            assert!(
                answer.is_err(),
                "{i}: a renewal by another owner is refused"
            );
        } else {
            assert_eq!(answer, &Ok(()), "{i}: the holder's renewal is accepted");
        }
    }
    for (i, lease) in leases.iter().enumerate() {
        let stored = store.record(&lease.job).await.unwrap().unwrap().job;
        // The job renewed twice ends at the term of whichever renewal came last.
        let until: &[f64] = if i == 0 { &[610.0, 611.0] } else { &[610.0] };
        assert!(until.contains(&stored.until.get()), "{}", lease.job);
        assert_eq!(stored.owner.as_ref(), Some(&me), "{}", lease.job);
        assert_eq!(stored.fence, lease.fence, "{}", lease.job);
    }
    let refusals = lease_ports::audit::AuditTrail::refusals(
        store.as_ref(),
        &lease_ports::audit::AuditFilter::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        refusals.len(),
        5,
        "each refused renewal is in the audit trail"
    );
    assert_shared(&store, before, 46);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_renewals_whose_connection_is_lost_tells_its_callers_the_write_may_have_committed()
 {
    let db = ScratchDatabase::create();
    let store = store(&db, PgOptions::default()).await;
    fill(&db, "q", 20);
    let me = owner("me");
    let queue = QueueName::new("q").unwrap();
    let leases = store
        .claim_next(&queue, &me, term(1.0, 600.0), 20)
        .await
        .unwrap();
    // Every renewed row takes a while, so a batch is still writing (its COMMIT sent behind
    // its rows) when its backend ends.
    slow_updates(&db, "NEW.until > 605");
    let before = store.group_commit_stats().unwrap();
    let renewals: Vec<_> = leases
        .iter()
        .map(|l| {
            let (store, me, l) = (Arc::clone(&store), me.clone(), l.clone());
            tokio::spawn(async move { store.renew(&l.job, &me, l.fence, term(10.0, 600.0)).await })
        })
        .collect();
    // Until every renewal is answered, every backend writing a row is ended.
    let killer = db.client().await.unwrap();
    let answered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killing = tokio::spawn({
        let answered = Arc::clone(&answered);
        async move {
            let mut killed = 0;
            while !answered.load(std::sync::atomic::Ordering::SeqCst) {
                killed += terminate_sleeping(&killer, "UPDATE%").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            killed
        }
    });
    let mut answers = Vec::new();
    for renewal in renewals {
        answers.push(renewal.await.unwrap());
    }
    answered.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(killing.await.unwrap() > 0, "a renewal was writing");
    let stats = store.group_commit_stats().unwrap();
    assert!(
        stats.batches_of_many > before.batches_of_many,
        "the renewals ran as a batch: {stats:?}"
    );
    db.execute("DROP TRIGGER slow ON lease.jobs").unwrap();
    let mut unknown = 0;
    for (lease, answer) in leases.iter().zip(answers) {
        let stored = store.record(&lease.job).await.unwrap().unwrap().job;
        match answer {
            Ok(Ok(())) => assert_eq!(stored.until.get(), 610.0, "{} was renewed", lease.job),
            Err(StoreError::Indeterminate(detail)) => {
                assert_may_have_committed(&detail.to_string());
                unknown += 1;
            }
            Err(StoreError::Unavailable(detail))
                if detail.to_string().contains("nothing was applied") =>
            {
                assert_eq!(stored.until.get(), 601.0, "{} was not renewed", lease.job);
            }
            other => panic!("{}: {other:?}", lease.job),
        }
    }
    // A lone renewal lost is one caller told; more than one is a batch's callers.
    assert!(
        unknown >= 2,
        "the callers of the lost batch are told the outcome is unknown ({unknown})"
    );
}

/// Enqueues each of `ids` at once, each by a task of its own; each caller's answer.
async fn enqueue_at_once(
    store: &Arc<PgLeaseStore>,
    ids: &[String],
) -> Vec<Result<bool, StoreError>> {
    let tasks: Vec<_> = ids
        .iter()
        .map(|id| {
            let (store, id) = (Arc::clone(store), JobId::new(id.clone()).unwrap());
            tokio::spawn(async move { store.enqueue(&id).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueues_share_commits_and_each_caller_learns_whether_its_job_was_new() {
    let db = ScratchDatabase::create();
    let store = store(&db, PgOptions::default()).await;
    fill(&db, "default", 10);
    let before = store.group_commit_stats().unwrap();
    // 40 new ids, the 10 already stored, and the first 10 new ids a second time.
    let mut ids: Vec<String> = (0..40).map(|i| format!("new-{i}")).collect();
    ids.extend((0..10).map(|i| format!("default-{i}")));
    ids.extend((0..10).map(|i| format!("new-{i}")));
    let answers = enqueue_at_once(&store, &ids).await;
    let mut inserted: HashMap<&str, usize> = HashMap::new();
    for (id, answer) in ids.iter().zip(&answers) {
        match answer {
            Ok(true) => *inserted.entry(id).or_default() += 1,
            Ok(false) => {}
            Err(e) => panic!("{id}: {e}"),
        }
    }
    for i in 0..40 {
        let id = format!("new-{i}");
        assert_eq!(
            inserted.get(id.as_str()),
            Some(&1),
            "{id} was inserted once"
        );
        let stored = store
            .record(&JobId::new(id.clone()).unwrap())
            .await
            .unwrap();
        assert!(
            stored.is_some_and(|r| r.job.owner.is_none() && !r.job.done),
            "{id}"
        );
    }
    for i in 0..10 {
        let id = format!("default-{i}");
        assert_eq!(inserted.get(id.as_str()), None, "{id} was already stored");
    }
    assert_shared(&store, before, 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_failing_in_a_batch_fails_alone() {
    let db = ScratchDatabase::create();
    let store = store(&db, PgOptions::default()).await;
    // The server refuses one id's insert, so a batch holding it rolls back whole.
    db.execute(
        "CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN IF NEW.id = 'bad' THEN RAISE EXCEPTION 'no bad jobs here'; END IF; \
         RETURN NEW; END $$; \
         CREATE TRIGGER refuse BEFORE INSERT ON lease.jobs FOR EACH ROW \
         EXECUTE FUNCTION public.refuse()",
    )
    .unwrap();
    let before = store.group_commit_stats().unwrap();
    let mut ids: Vec<String> = (0..30).map(|i| format!("good-{i}")).collect();
    ids.insert(15, "bad".to_owned());
    let answers = enqueue_at_once(&store, &ids).await;
    for (id, answer) in ids.iter().zip(&answers) {
        if id == "bad" {
            let e = answer.as_ref().expect_err("the refused insert fails");
            assert!(e.to_string().contains("no bad jobs here"), "{e}");
        } else {
            assert!(matches!(answer, Ok(true)), "{id}: {answer:?}");
        }
    }
    let after = store.group_commit_stats().unwrap();
    assert!(
        after.batches_of_many > before.batches_of_many,
        "the enqueues shared batches: {after:?}"
    );
    assert!(
        store
            .record(&JobId::new("bad").unwrap())
            .await
            .unwrap()
            .is_none()
    );
}

/// A store whose every queue-loop write, even one alone, is decided as a batch is.
async fn settling_store(db: &ScratchDatabase) -> Arc<PgLeaseStore> {
    store(
        db,
        PgOptions {
            alone_in_batch: true,
            ..PgOptions::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_page_is_all_buried_reads_on_to_the_first_live_job() {
    let db = ScratchDatabase::create();
    let store = settling_store(&db).await;
    // Five jobs out of attempts, first in claim order, then two that may run.
    db.execute(
        "INSERT INTO lease.jobs(id, queue, attempts, max_attempts, priority) \
         SELECT 'spent-' || g, 'q', 3, 3, 1 FROM generate_series(0, 4) g",
    )
    .unwrap();
    fill(&db, "q", 2);
    let queue = QueueName::new("q").unwrap();
    let leases = store
        .claim_next(&queue, &owner("w"), term(1.0, 60.0), 1)
        .await
        .unwrap();
    assert_eq!(leases.len(), 1, "the claim reads past the spent jobs");
    assert!(
        leases[0].job.as_str().starts_with("q-"),
        "it leases a job that may run, not {}",
        leases[0].job
    );
    let dead: i64 = db
        .client()
        .await
        .unwrap()
        .query_one(
            "SELECT count(*) FROM lease.jobs WHERE id LIKE 'spent-%' AND ended = 'dead'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(dead, 5, "every spent job it met is buried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_of_one_batch_at_different_clocks_each_take_only_what_is_due_by_their_own() {
    let db = ScratchDatabase::create();
    let store = store(&db, PgOptions::default()).await;
    let queue = QueueName::new("q").unwrap();
    for round in 0..20 {
        // One job due at 5: an early claim (at 1) must pass it, a late one (at 10) takes it.
        db.execute(&format!(
            "INSERT INTO lease.jobs(id, queue, run_at) VALUES ('r{round}', 'q', 5)"
        ))
        .unwrap();
        let tasks: Vec<_> = [1.0, 10.0, 1.0, 1.0]
            .into_iter()
            .enumerate()
            .map(|(w, now)| {
                let (store, queue) = (Arc::clone(&store), queue.clone());
                tokio::spawn(async move {
                    let leases = store
                        .claim_next(&queue, &owner(&format!("w{w}")), term(now, 600.0), 1)
                        .await
                        .unwrap();
                    (now, leases)
                })
            })
            .collect();
        let mut taken = 0;
        for task in tasks {
            let (now, leases) = task.await.unwrap();
            for lease in leases {
                assert!(now >= 5.0, "a claim at {now} took {} due at 5", lease.job);
                taken += 1;
            }
        }
        assert_eq!(taken, 1, "round {round}: the claim at 10 takes the job");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_completions_of_one_job_in_one_batch_apply_at_most_once() {
    let db = ScratchDatabase::create();
    let store = store(&db, PgOptions::default()).await;
    fill(&db, "q", 1);
    let queue = QueueName::new("q").unwrap();
    let lease = store
        .claim_next(&queue, &owner("a"), term(1.0, 600.0), 1)
        .await
        .unwrap()
        .pop()
        .unwrap();
    // The holder's completion and seven others of the same job under wrong fences or owners,
    // all at once.
    let tasks: Vec<_> = (0..8_u64)
        .map(|w| {
            let (store, queue, job) = (Arc::clone(&store), queue.clone(), lease.job.clone());
            let (me, fence) = match w {
                0 => (owner("a"), lease.fence),
                1..=3 => (owner("b"), lease.fence),
                _ => (
                    owner("a"),
                    lease_domain::Fence::try_from(
                        i64::from(lease.fence) + i64::try_from(w).unwrap(),
                    )
                    .unwrap(),
                ),
            };
            tokio::spawn(async move {
                let result = JobResult::new(format!("by {w}")).unwrap();
                let (outcome, _) = store
                    .complete_and_claim_next(&job, &me, fence, &result, &queue, term(2.0, 600.0), 1)
                    .await
                    .unwrap();
                (w, outcome.is_ok())
            })
        })
        .collect();
    let mut applied = Vec::new();
    for task in tasks {
        let (w, ok) = task.await.unwrap();
        if ok {
            applied.push(w);
        }
    }
    assert_eq!(applied, vec![0], "only the holder's completion applies");
    let record = store.record(&lease.job).await.unwrap().unwrap();
    assert!(record.job.done);
    assert_eq!(record.job.result.as_deref(), Some("by 0"));
}
