//! The guards as a resource uses them: inside its own transaction with its own write, and over
//! HTTP header values.

use lease_guard::http::{self, Refusal};
use lease_guard::sqlite::{SqliteGuard, install};
use lease_guard::{Fence, FenceGuard, MemoryGuard};
use rusqlite::Connection;

fn fence(n: u64) -> Fence {
    Fence::new(n).unwrap()
}

/// The protected write: the guard's check, then the entry, in one transaction.
fn write_entry(conn: &mut Connection, key: &str, holder: Fence, text: &str) -> bool {
    let tx = conn.transaction().unwrap();
    let admitted = SqliteGuard::new(&tx).admit(key, holder).unwrap();
    if admitted.is_err() {
        return false; // dropping the transaction rolls it back
    }
    tx.execute(
        "INSERT INTO ledger(key, text, fence) VALUES (?1, ?2, ?3) \
         ON CONFLICT(key) DO UPDATE SET text = excluded.text, fence = excluded.fence",
        rusqlite::params![key, text, i64::from(holder)],
    )
    .unwrap();
    tx.commit().unwrap();
    true
}

#[test]
fn a_stale_holder_cannot_write_to_a_ledger_guarded_in_its_own_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = Connection::open(dir.path().join("ledger.db")).unwrap();
    install(&conn).unwrap();
    install(&conn).unwrap();
    conn.execute_batch("CREATE TABLE ledger(key TEXT PRIMARY KEY, text TEXT, fence INTEGER)")
        .unwrap();
    // A (fence 1) writes, stalls; B (fence 2) writes; A wakes and tries again.
    assert!(write_entry(&mut conn, "invoice-42", fence(1), "paid by A"));
    assert!(write_entry(&mut conn, "invoice-42", fence(2), "paid by B"));
    assert!(write_entry(
        &mut conn,
        "invoice-42",
        fence(2),
        "paid by B, again"
    ));
    assert!(!write_entry(
        &mut conn,
        "invoice-42",
        fence(1),
        "paid by A, late"
    ));
    let (text, kept): (String, i64) = conn
        .query_row(
            "SELECT text, fence FROM ledger WHERE key = 'invoice-42'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((text.as_str(), kept), ("paid by B, again", 2));
    let seen: i64 = conn
        .query_row(
            "SELECT fence FROM lease_fences WHERE key = 'invoice-42'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(seen, 2);
}

#[test]
fn a_guard_check_rolled_back_with_its_write_leaves_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let mut conn = Connection::open(dir.path().join("ledger.db")).unwrap();
    install(&conn).unwrap();
    {
        let tx = conn.transaction().unwrap();
        assert!(SqliteGuard::new(&tx).admit("k", fence(5)).unwrap().is_ok());
        // The resource's own write fails, so the transaction is dropped: fence 5 is not kept.
    }
    let tx = conn.transaction().unwrap();
    assert!(SqliteGuard::new(&tx).admit("k", fence(3)).unwrap().is_ok());
}

#[test]
fn a_corrupt_stored_fence_is_an_error_not_a_decision() {
    let mut conn = Connection::open_in_memory().unwrap();
    install(&conn).unwrap();
    conn.execute("INSERT INTO lease_fences VALUES ('k', -4)", [])
        .unwrap();
    let tx = conn.transaction().unwrap();
    let err = SqliteGuard::new(&tx).admit("k", fence(1)).unwrap_err();
    assert!(err.to_string().contains("-4"), "{err}");
}

#[test]
fn http_headers_are_checked_and_refusals_carry_their_status() {
    let guard = MemoryGuard::new();
    let check = |job: Option<&str>, fence: Option<&str>, guard: &MemoryGuard| {
        let job: Vec<&[u8]> = job.map(str::as_bytes).into_iter().collect();
        let fence: Vec<&[u8]> = fence.map(str::as_bytes).into_iter().collect();
        http::check(&job, &fence, guard)
    };
    assert_eq!(
        check(Some("j"), Some("2"), &guard).unwrap(),
        ("j".to_owned(), fence(2))
    );
    let stale = check(Some("j"), Some("1"), &guard).unwrap_err();
    assert_eq!(stale.status(), 409);
    assert!(
        matches!(stale, Refusal::Stale { presented, current } if presented == fence(1) && current == fence(2))
    );
    let bad = [
        (None, Some("1"), "Lease-Job header is missing"),
        (Some(" "), Some("1"), "Lease-Job header is missing"),
        (Some("j"), None, "Lease-Fence header is missing"),
        (Some("j"), Some("abc"), "decimal fence"),
        (Some("j"), Some("-1"), "decimal fence"),
        (Some("j"), Some("+3"), "decimal fence"),
        (Some("j"), Some("1.5"), "decimal fence"),
        (Some("j"), Some("9223372036854775808"), "decimal fence"),
    ];
    for (job, fence_text, named) in bad {
        let refusal = check(job, fence_text, &guard).unwrap_err();
        assert_eq!(refusal.status(), 400, "{job:?} {fence_text:?}");
        assert!(refusal.to_string().contains(named), "{refusal}");
    }
    assert!(check(Some("j"), Some(" 3 "), &guard).is_ok());
}

#[test]
fn a_repeated_or_non_utf8_header_is_refused_never_read_in_part() {
    let guard = MemoryGuard::new();
    // Two fences, two job ids: which one would count is not the service's guess to make.
    let twice = http::check(&[b"j"], &[b"1", b"9"], &guard).unwrap_err();
    assert_eq!(twice.status(), 400);
    assert!(
        twice
            .to_string()
            .contains("Lease-Fence header is sent 2 times"),
        "{twice}"
    );
    let twice = http::check(&[b"j", b"k"], &[b"1"], &guard).unwrap_err();
    assert!(
        twice
            .to_string()
            .contains("Lease-Job header is sent 2 times"),
        "{twice}"
    );
    // A non-UTF-8 job id is refused, not read as U+FFFD (which made every such id one key).
    let latin1: &[u8] = b"j\xf6b-A";
    let refused = http::check(&[latin1], &[b"5"], &guard).unwrap_err();
    assert_eq!(refused.status(), 400);
    assert!(refused.to_string().contains("not UTF-8"), "{refused}");
    // Distinct UTF-8 ids are distinct keys.
    assert!(http::check(&["jöb-A".as_bytes()], &[b"5"], &guard).is_ok());
    assert!(http::check(&["jöb-B".as_bytes()], &[b"1"], &guard).is_ok());
    assert!(guard.admit("jöb-A", fence(4)).unwrap().is_err());
}

#[test]
fn a_guard_writes_nothing_when_the_fence_is_the_one_it_keeps() {
    let mut conn = Connection::open_in_memory().unwrap();
    install(&conn).unwrap();
    let tx = conn.transaction().unwrap();
    assert!(SqliteGuard::new(&tx).admit("k", fence(4)).unwrap().is_ok());
    tx.commit().unwrap();
    let before = conn.total_changes();
    let tx = conn.transaction().unwrap();
    assert!(SqliteGuard::new(&tx).admit("k", fence(4)).unwrap().is_ok());
    tx.commit().unwrap();
    assert_eq!(conn.total_changes(), before, "the same fence wrote a row");
}
