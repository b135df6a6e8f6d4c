//! The PostgreSQL store passes the shared conformance suite, each check in its own fresh
//! database (dropped afterwards): with the queue loop's writes batched by group commit (the
//! default: a batch decided set by set, a lone write one call of the `step` function), with
//! every write decided as a batch is (`settled::`), as one call of `step` each
//! (`one_step_per_call::`), and as separate statements (`statements::`).

use std::sync::Arc;

use lease_ports::transfer::Transfer;
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

async fn store_with(step: bool, max_batch: usize) -> (Arc<dyn Transfer>, ScratchDatabase) {
    store_of(PgOptions {
        pool_size: 8,
        step,
        max_batch,
        ..PgOptions::default()
    })
    .await
}

async fn store_of(options: PgOptions) -> (Arc<dyn Transfer>, ScratchDatabase) {
    let db = ScratchDatabase::create();
    let store = PgLeaseStore::init(db.url(), options)
        .await
        .expect("init store");
    (Arc::new(store), db)
}

async fn fresh_store() -> (Arc<dyn Transfer>, ScratchDatabase) {
    store_with(true, PgOptions::default().max_batch).await
}

lease_ports::conformance_tests!(async fresh_store);
lease_ports::workflow_conformance_tests!(async fresh_store);

/// The same checks with every queue-loop write, even one alone, decided as a batch is: set by
/// set in Rust over one locking read (`settle.rs`).
mod settled {
    use super::*;

    async fn fresh_store() -> (Arc<dyn Transfer>, ScratchDatabase) {
        store_of(PgOptions {
            pool_size: 8,
            alone_in_batch: true,
            ..PgOptions::default()
        })
        .await
    }

    lease_ports::conformance_tests!(async fresh_store);
    lease_ports::workflow_conformance_tests!(small async fresh_store);
}

/// The same checks with group commit off: each queue-loop write its own call of `step`.
mod one_step_per_call {
    use super::*;

    async fn fresh_store() -> (Arc<dyn Transfer>, ScratchDatabase) {
        store_with(true, 1).await
    }

    lease_ports::conformance_tests!(async fresh_store);
    lease_ports::workflow_conformance_tests!(small async fresh_store);
}

/// The same checks with `claim_next` and a completion followed by it as separate statements.
mod statements {
    use super::*;

    async fn fresh_store() -> (Arc<dyn Transfer>, ScratchDatabase) {
        store_with(false, 1).await
    }

    lease_ports::conformance_tests!(async fresh_store);
    lease_ports::workflow_conformance_tests!(small async fresh_store);
}

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
