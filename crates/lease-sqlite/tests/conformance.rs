//! The SQLite store passes the shared conformance suite, on a fresh file in a temporary directory.

use std::sync::Arc;

use lease_ports::transfer::Transfer;
use lease_sqlite::SqliteLeaseStore;
use tempfile::TempDir;

fn fresh_store() -> (Arc<dyn Transfer>, TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteLeaseStore::open(dir.path().join("lease.db")).expect("open store");
    (Arc::new(store), dir)
}

lease_ports::conformance_tests!(fresh_store);
