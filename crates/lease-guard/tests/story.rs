//! The stale-worker story with a real external resource: a ledger in a database of its own,
//! guarded by the fence the lease store hands out.

use lease_guard::sqlite::{SqliteGuard, install};
use lease_guard::{Fence, FenceGuard};
use rusqlite::Connection;

/// A worker's write to the ledger: the guard and the entry in one ledger transaction.
fn ledger_write(ledger: &mut Connection, job: &str, fence: u64, text: &str) -> bool {
    let tx = ledger.transaction().unwrap();
    let fence = Fence::new(fence).unwrap();
    if SqliteGuard::new(&tx).admit(job, fence).unwrap().is_err() {
        return false;
    }
    tx.execute(
        "INSERT INTO entries(job, text) VALUES (?1, ?2)",
        rusqlite::params![job, text],
    )
    .unwrap();
    tx.commit().unwrap();
    true
}

#[test]
fn the_stale_worker_is_refused_by_the_ledger_and_by_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.db");
    lease_sqlite::init_db(&jobs).unwrap();
    lease_sqlite::enqueue(&jobs, "invoice-42").unwrap();
    let mut ledger = Connection::open(dir.path().join("ledger.db")).unwrap();
    install(&ledger).unwrap();
    ledger
        .execute_batch("CREATE TABLE entries(job TEXT, text TEXT)")
        .unwrap();

    // A claims and stalls before writing; its lease expires; B takes over.
    let a = lease_sqlite::claim(&jobs, "invoice-42", "A", 100.0, 30.0)
        .unwrap()
        .unwrap();
    let b = lease_sqlite::claim(&jobs, "invoice-42", "B", 130.0, 30.0)
        .unwrap()
        .unwrap();
    assert!(ledger_write(
        &mut ledger,
        "invoice-42",
        b,
        "charged once, by B"
    ));
    assert!(lease_sqlite::complete(&jobs, "invoice-42", "B", b, 140.0, "charged").unwrap());
    // A wakes: its ledger write and its completion are both refused.
    assert!(!ledger_write(
        &mut ledger,
        "invoice-42",
        a,
        "charged twice, by A"
    ));
    assert!(!lease_sqlite::complete(&jobs, "invoice-42", "A", a, 141.0, "charged").unwrap());

    let entries: Vec<String> = ledger
        .prepare("SELECT text FROM entries")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(entries, ["charged once, by B"]);
    let state = lease_sqlite::state(&jobs, "invoice-42").unwrap().unwrap();
    assert_eq!((state.owner.as_deref(), state.fence), (Some("B"), 2));
}
