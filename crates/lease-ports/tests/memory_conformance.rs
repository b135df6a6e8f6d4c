//! The in-memory reference store passes the conformance suite.

use std::sync::Arc;

use lease_ports::memory::MemoryLeaseStore;
use lease_ports::transfer::Transfer;

fn fresh_store() -> (Arc<dyn Transfer>, ()) {
    (Arc::new(MemoryLeaseStore::new()), ())
}

lease_ports::conformance_tests!(fresh_store);
lease_ports::workflow_conformance_tests!(fresh_store);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_store_keeps_keys_by_the_rules() {
    lease_ports::conformance::key_store_keeps_keys_by_the_rules(Arc::new(MemoryLeaseStore::new()))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overview_counts_what_the_rules_decide() {
    lease_ports::conformance::overview_counts_what_the_rules_decide(
        &MemoryLeaseStore::new(),
        false,
    )
    .await;
}
