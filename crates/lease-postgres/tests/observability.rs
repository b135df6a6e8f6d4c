//! The scripted stale-worker story on the PostgreSQL store with the audit trail on: the
//! counters, histograms and audit rows it must produce (`lease_ports::observed_story`). One
//! test per binary: it installs the process's metrics recorder.

use std::sync::Arc;

use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stale_worker_story_is_counted_and_audited() {
    let snapshotter = lease_ports::observed_story::capture();
    let db = ScratchDatabase::create();
    let options = PgOptions {
        audit: Some(100),
        ..PgOptions::default()
    };
    let store = Arc::new(PgLeaseStore::init(db.url(), options).await.unwrap());
    lease_ports::observed_story::check(store.clone(), store.as_ref(), &snapshotter).await;
}
