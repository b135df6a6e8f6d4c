//! The in-memory reference store passes the conformance suite.

use std::sync::Arc;

use lease_ports::memory::MemoryLeaseStore;
use lease_ports::transfer::Transfer;

fn fresh_store() -> (Arc<dyn Transfer>, ()) {
    (Arc::new(MemoryLeaseStore::new()), ())
}

lease_ports::conformance_tests!(fresh_store);
