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
lease_ports::workflow_conformance_tests!(fresh_store);

/// With the audit trail on (outside the suite, which opens stores without it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_complete_and_claim_next_is_audited_and_still_claims() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = lease_sqlite::SqliteOptions {
        audit: Some(100),
        ..lease_sqlite::SqliteOptions::default()
    };
    let store = Arc::new(
        SqliteLeaseStore::open_with(dir.path().join("audit.db"), options).expect("open store"),
    );
    lease_ports::observed_story::a_refused_completion_is_audited_and_its_claim_goes_on(
        store.clone(),
        store.as_ref(),
    )
    .await;
    lease_ports::observed_story::a_wrong_lease_token_is_refused_and_audited_by_the_store(
        store.as_ref(),
        store.as_ref(),
    )
    .await;
    lease_ports::observed_story::every_refused_holder_write_is_audited_and_read_back(
        store.as_ref(),
        store.as_ref(),
    )
    .await;
}

/// A row whose operation and reason this version does not know (a newer writer's) reads as
/// `unknown`, and the rest of the trail still reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_row_of_an_unknown_operation_reads_as_unknown_and_the_trail_still_reads() {
    use lease_ports::audit::{AuditFilter, AuditTrail};
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("audit.db");
    let options = lease_sqlite::SqliteOptions {
        audit: Some(100),
        ..lease_sqlite::SqliteOptions::default()
    };
    let store = SqliteLeaseStore::open_with(&path, options).expect("open store");
    lease_ports::observed_story::every_refused_holder_write_is_audited_and_read_back(
        &store, &store,
    )
    .await;
    rusqlite::Connection::open(&path)
        .expect("open")
        .execute(
            "INSERT INTO lease_audit(time, job, owner, operation, presented, current, reason, \
             late_by) VALUES (2e9, 'later', 'w', 'rewind', 3, 4, 'overtaken', NULL)",
            [],
        )
        .expect("insert a newer writer's row");
    let rows = store
        .refusals(&AuditFilter::default())
        .await
        .expect("the trail reads");
    let last = rows.last().expect("rows");
    assert_eq!(
        (
            last.job.as_str(),
            last.operation.as_str(),
            last.reason.as_str()
        ),
        ("later", "unknown", "unknown")
    );
    // The story refuses every holder write twice (stale, and a wrong token), then this row.
    let story = 2 * lease_domain::HolderWrite::ALL.len();
    assert_eq!(
        rows.len(),
        story + 1,
        "every other row is still read: {rows:?}"
    );
}

/// The key store of the network service (outside the suite, which takes `Transfer` stores).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_store_keeps_keys_by_the_rules() {
    let (_, dir) = fresh_store();
    let store = SqliteLeaseStore::open(dir.path().join("keys.db")).expect("open store");
    lease_ports::conformance::key_store_keeps_keys_by_the_rules(Arc::new(store)).await;
}

/// The operator's overview, with the audit trail on and off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overview_counts_what_the_rules_decide() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plain = SqliteLeaseStore::open(dir.path().join("plain.db")).expect("open store");
    lease_ports::conformance::overview_counts_what_the_rules_decide(&plain, false).await;
    let options = lease_sqlite::SqliteOptions {
        audit: Some(100),
        ..lease_sqlite::SqliteOptions::default()
    };
    let audited =
        SqliteLeaseStore::open_with(dir.path().join("audited.db"), options).expect("open store");
    lease_ports::conformance::overview_counts_what_the_rules_decide(&audited, true).await;
}
