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
