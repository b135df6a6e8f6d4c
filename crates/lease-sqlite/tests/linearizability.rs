//! Concurrent histories of the SQLite store (threads, each call on its own pooled connection)
//! are linearizable against the sequential contract.

use std::sync::Arc;

use lease_ports::history::{Workload, check_linearizable, record};
use lease_sqlite::SqliteLeaseStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_histories_of_the_sqlite_store_are_linearizable() {
    let mut calls = 0;
    for seed in 1..=6 {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteLeaseStore::open(dir.path().join("history.db")).unwrap();
        let workload = Workload {
            workers: 8,
            calls_per_worker: 30,
            jobs: 3,
            seed,
        };
        let history = record(Arc::new(store), workload).await;
        assert!(
            history.iter().all(|e| e.answer.is_some()),
            "a call failed with a storage error"
        );
        calls += history.len();
        check_linearizable(&history).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    }
    assert_eq!(calls, 6 * 8 * 30);
}
