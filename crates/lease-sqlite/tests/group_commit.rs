//! Group commit as callers see it: concurrent writers share transactions, every caller gets its
//! own correct answer, a lone caller runs alone, and turning it off still works.

use lease_domain::{JobId, LeaseTerm, Owner};
use lease_sqlite::{SqliteLeaseStore, SqliteOptions};

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
        (stats.batches, stats.writes, stats.largest_batch),
        (20, 20, 1)
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
