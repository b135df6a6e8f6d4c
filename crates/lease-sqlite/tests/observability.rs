//! The scripted stale-worker story on the SQLite store with the audit trail on: the counters,
//! histograms and audit rows it must produce (`lease_ports::observed_story`). One test per
//! binary: it installs the process's metrics recorder.

use std::sync::Arc;

use lease_sqlite::{SqliteLeaseStore, SqliteOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stale_worker_story_is_counted_and_audited() {
    let snapshotter = lease_ports::observed_story::capture();
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        audit: Some(100),
        ..SqliteOptions::default()
    };
    let store =
        Arc::new(SqliteLeaseStore::open_with(dir.path().join("audit.db"), options).unwrap());
    lease_ports::observed_story::check(store.clone(), store.as_ref(), &snapshotter).await;
}
