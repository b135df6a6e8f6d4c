//! A `Forward` that overrides nothing passes the conformance suite: every default passes its
//! call on unchanged, and `Forwarded` is a whole store (its provided methods included).

use std::sync::Arc;

use lease_ports::forward::{Forward, Forwarded};
use lease_ports::memory::MemoryLeaseStore;
use lease_ports::transfer::Transfer;

/// The reference store, passed through.
struct Through(MemoryLeaseStore);

impl Forward for Through {
    fn to(&self) -> &dyn Transfer {
        &self.0
    }
}

fn fresh_store() -> (Arc<dyn Transfer>, ()) {
    (Arc::new(Forwarded(Through(MemoryLeaseStore::new()))), ())
}

lease_ports::conformance_tests!(fresh_store);
