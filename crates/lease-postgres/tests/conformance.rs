//! The PostgreSQL store passes the shared conformance suite, each check in its own fresh
//! database (dropped afterwards).

use std::sync::Arc;

use lease_ports::transfer::Transfer;
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

async fn fresh_store() -> (Arc<dyn Transfer>, ScratchDatabase) {
    let db = ScratchDatabase::create();
    let options = PgOptions {
        pool_size: 8,
        ..PgOptions::default()
    };
    let store = PgLeaseStore::init(db.url(), options)
        .await
        .expect("init store");
    (Arc::new(store), db)
}

lease_ports::conformance_tests!(async fresh_store);

/// The key store of the network service (outside the suite, which takes `Transfer` stores).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_store_keeps_keys_by_the_rules() {
    let db = ScratchDatabase::create();
    let store = PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .expect("init store");
    lease_ports::conformance::key_store_keeps_keys_by_the_rules(Arc::new(store)).await;
}

/// The operator's overview, with the audit trail on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overview_counts_what_the_rules_decide() {
    let db = ScratchDatabase::create();
    let options = PgOptions {
        audit: Some(100),
        ..PgOptions::default()
    };
    let store = PgLeaseStore::init(db.url(), options)
        .await
        .expect("init store");
    lease_ports::conformance::overview_counts_what_the_rules_decide(&store, true).await;
}
