//! Group commit as callers see it: concurrent writers share transactions, every caller gets its
//! own correct answer, a lone caller runs alone, turning it off still works, and nobody is
//! answered from a batch whose commit failed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lease_domain::{JobId, LeaseTerm, Owner};
use lease_sqlite::{ConnectHook, SqliteLeaseStore, SqliteOptions, StoreError};

const THREADS: usize = 16;
const CLAIMS: usize = 40;

fn claim_everything(store: &SqliteLeaseStore) {
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            scope.spawn(move || {
                let store = store.blocking();
                let me = Owner::new(format!("w{t}")).unwrap();
                for i in 0..CLAIMS {
                    let job = JobId::new(format!("job-{t}-{i}")).unwrap();
                    assert!(store.enqueue(&job).unwrap());
                    let fence = store
                        .claim(&job, &me, LeaseTerm::new(0.0, 60.0).unwrap())
                        .unwrap()
                        .unwrap();
                    assert_eq!(fence.get(), 1);
                }
            });
        }
    });
    let store = store.blocking();
    for t in 0..THREADS {
        for i in 0..CLAIMS {
            let state = store
                .state(&JobId::new(format!("job-{t}-{i}")).unwrap())
                .unwrap()
                .unwrap();
            assert_eq!((state.owner, state.fence), (Some(format!("w{t}")), 1));
        }
    }
}

#[test]
fn concurrent_writers_share_commits_and_each_gets_its_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteLeaseStore::open(dir.path().join("group.db")).unwrap();
    claim_everything(&store);
    let stats = store.group_commit_stats().unwrap();
    let writes = u64::try_from(THREADS * CLAIMS * 2).unwrap();
    assert_eq!(stats.writes, writes);
    assert!(stats.batches_of_many > 0, "{stats:?}");
    assert!(stats.batches < writes, "{stats:?}");
    assert!(stats.largest_batch <= 128, "{stats:?}");
}

#[test]
fn a_lone_caller_commits_each_write_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteLeaseStore::open(dir.path().join("alone.db")).unwrap();
    let blocking = store.blocking();
    for i in 0..20 {
        blocking
            .enqueue(&JobId::new(format!("j{i}")).unwrap())
            .unwrap();
    }
    let stats = store.group_commit_stats().unwrap();
    assert_eq!(
        (
            stats.batches,
            stats.writes,
            stats.largest_batch,
            stats.batches_of_many
        ),
        (20, 20, 1, 0)
    );
}

#[test]
fn with_group_commit_off_concurrent_writers_still_get_correct_answers() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        max_batch: 1,
        ..SqliteOptions::default()
    };
    let store = SqliteLeaseStore::open_with(dir.path().join("off.db"), options).unwrap();
    claim_everything(&store);
    assert_eq!(store.group_commit_stats(), None);
}

/// A store whose commits SQLite turns into rollbacks while `fail` is set (its commit hook), to
/// see what callers are told about a batch that never committed.
fn store_with_failing_commits(path: &std::path::Path) -> (SqliteLeaseStore, Arc<AtomicBool>) {
    let fail = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&fail);
    let hook = ConnectHook(Arc::new(move |conn: &rusqlite::Connection| {
        let flag = Arc::clone(&flag);
        conn.commit_hook(Some(move || flag.load(Ordering::SeqCst)))
    }));
    let options = SqliteOptions {
        on_connect: Some(hook),
        ..SqliteOptions::default()
    };
    (SqliteLeaseStore::open_with(path, options).unwrap(), fail)
}

/// Nobody is answered from a batch before its COMMIT returns: when the commit fails, every
/// caller of the batch hears that its outcome is unknown, none that its claim was granted.
#[test]
fn when_a_batch_commit_fails_no_caller_is_told_its_write_happened() {
    const CALLERS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fails.db");
    let (store, fail) = store_with_failing_commits(&path);
    let jobs: Vec<JobId> = (0..CALLERS)
        .map(|i| JobId::new(format!("j{i}")).unwrap())
        .collect();
    for job in &jobs {
        assert!(store.blocking().enqueue(job).unwrap());
    }
    fail.store(true, Ordering::SeqCst);
    for round in 0..20 {
        // Hold the write lock so that the callers queue up behind the first one and the rest
        // of them are decided in one batch.
        let holder = rusqlite::Connection::open(&path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let answers: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .iter()
                .map(|job| {
                    let store = store.blocking();
                    scope.spawn(move || {
                        let owner = Owner::new(format!("w{round}")).unwrap();
                        store.claim(job, &owner, LeaseTerm::new(0.0, 60.0).unwrap())
                    })
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(50));
            holder.execute_batch("COMMIT").unwrap();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for answer in answers {
            assert!(
                matches!(answer, Err(StoreError::Indeterminate(_))),
                "round {round}: a caller was told {answer:?}"
            );
        }
        if store.group_commit_stats().unwrap().batches_of_many > 0 {
            break;
        }
    }
    assert!(store.group_commit_stats().unwrap().batches_of_many > 0);
    fail.store(false, Ordering::SeqCst);
    for job in &jobs {
        assert_eq!(store.blocking().state(job).unwrap().unwrap().fence, 0);
    }
}

/// A batch never carries more writes than `max_batch`, and fills up to it when enough callers
/// wait.
#[test]
fn a_batch_takes_queued_writes_up_to_max_batch_and_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bounded.db");
    let options = SqliteOptions {
        max_batch: 4,
        ..SqliteOptions::default()
    };
    let store = SqliteLeaseStore::open_with(&path, options).unwrap();
    let jobs: Vec<JobId> = (0..16)
        .map(|i| JobId::new(format!("j{i}")).unwrap())
        .collect();
    // Hold the write lock so that every caller queues behind the first.
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    std::thread::scope(|scope| {
        for job in &jobs {
            let store = store.blocking();
            scope.spawn(move || assert!(store.enqueue(job).unwrap()));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        holder.execute_batch("COMMIT").unwrap();
    });
    let stats = store.group_commit_stats().unwrap();
    assert_eq!(stats.writes, 16);
    assert_eq!(stats.largest_batch, 4, "{stats:?}");
}

/// `apply_many` hands group commit its writes as one caller's: they share one batch (one
/// commit), and each is still decided on its own (a stale completion refused among accepted
/// ones, each completion's claim taking a job of its own). Six rounds: sent as separate calls
/// at once, the writes of a round fell into one batch only some of the time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_many_takes_a_requests_writes_into_one_batch_each_decided_alone() {
    use lease_ports::{ClaimNext, Command, LeaseStore, Outcome};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteLeaseStore::open(dir.path().join("many.db")).unwrap();
    let me = Owner::new("w").unwrap();
    let queue = lease_domain::QueueName::default();
    for i in 0..70 {
        store
            .enqueue(&JobId::new(format!("j{i:02}")).unwrap())
            .await
            .unwrap();
    }
    let at = lease_domain::Timestamp::new(1.0).unwrap();
    let done = lease_domain::JobResult::new("ok").unwrap();
    let mut held = store
        .claim_next(&queue, &me, LeaseTerm::new(0.0, 60.0).unwrap(), 10)
        .await
        .unwrap();
    for round in 0..6 {
        let before = store.group_commit_stats().unwrap();
        let writes = held
            .iter()
            .enumerate()
            .map(|(i, lease)| {
                // Every third under a fence the job never had; each with a claim of one job.
                let fence = if i % 3 == 2 {
                    lease_domain::Fence::new(lease.fence.get() + 5).unwrap()
                } else {
                    lease.fence
                };
                let claim = ClaimNext::new(&queue, &me, LeaseTerm::new(1.0, 60.0).unwrap(), 1);
                (
                    lease.job.clone(),
                    Command::Complete(me.clone(), fence, at, done.clone()),
                    Some(claim),
                )
            })
            .collect();
        let answers = store.apply_many(writes).await;
        let after = store.group_commit_stats().unwrap();
        assert_eq!(
            after.batches - before.batches,
            1,
            "round {round}: one batch ({after:?})"
        );
        assert_eq!(
            after.writes - before.writes,
            20,
            "ten completions and ten claims"
        );
        let mut next = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            let applied = answer.unwrap();
            assert_eq!(
                matches!(applied.outcome, Outcome::Wrote(Ok(()))),
                i % 3 != 2,
                "round {round}, write {i}: {:?}",
                applied.outcome
            );
            next.extend(applied.claimed.unwrap().unwrap());
        }
        let mut ids: Vec<&str> = next.iter().map(|l| l.job.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(
            ids.len(),
            10,
            "round {round}: each claim took a job of its own"
        );
        held = next;
    }
}
