//! The in-memory reference store passes the conformance suite.

use std::sync::Arc;

use lease_ports::LeaseStore;
use lease_ports::memory::MemoryLeaseStore;

fn fresh_store() -> (Arc<dyn LeaseStore>, ()) {
    (Arc::new(MemoryLeaseStore::new()), ())
}

lease_ports::conformance_tests!(fresh_store);
