//! A full disk and a read-only database: typed errors, nothing corrupted, and the database usable
//! again once space or write access returns.

use std::path::Path;
use std::process::Command;

use lease_domain::{JobId, JobResult, LeaseTerm, Owner, Timestamp};
use lease_sqlite::{Error, SqliteLeaseStore, SqliteOptions};

fn integrity(db: &Path) -> String {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

fn capped(db: &Path, pages: u32) -> SqliteLeaseStore {
    SqliteLeaseStore::open_with(
        db,
        SqliteOptions {
            max_pages: Some(pages),
            ..SqliteOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn a_full_database_gives_typed_errors_keeps_its_data_and_recovers_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("full.db");
    lease_sqlite::init_db(&db).unwrap();
    let store = capped(&db, 8);
    let blocking = store.blocking();
    let me = Owner::new("w").unwrap();
    // Fill the file: every enqueue that was acknowledged must survive.
    let mut acknowledged = Vec::new();
    let full = loop {
        let job = JobId::new(format!("job-{:05}-{}", acknowledged.len(), "x".repeat(200))).unwrap();
        match blocking.enqueue(&job) {
            Ok(true) => acknowledged.push(job),
            Ok(false) => panic!("fresh job already there"),
            Err(e) => break e,
        }
        assert!(acknowledged.len() < 100_000, "the cap never bit");
    };
    assert!(matches!(full, Error::Full(_)), "{full}");
    assert!(full.is_determinate());
    // A claim on an existing job still fits (it rewrites a row in place) or fails as Full; either
    // way a failed write changes nothing.
    let first = &acknowledged[0];
    let term = LeaseTerm::new(0.0, 100.0).unwrap();
    let fence = blocking.claim(first, &me, term).unwrap().unwrap();
    let result = JobResult::new("r".repeat(20_000)).unwrap();
    let before = blocking.state(first).unwrap();
    let big = blocking.complete(first, &me, fence, Timestamp::new(1.0).unwrap(), &result);
    assert!(matches!(big, Err(Error::Full(_))), "{big:?}");
    assert_eq!(
        blocking.state(first).unwrap(),
        before,
        "a failed write changed the job"
    );
    drop(store);
    assert_eq!(integrity(&db), "ok");

    // Space returns: the same file takes the write, and everything acknowledged is there.
    let store = SqliteLeaseStore::open(&db).unwrap();
    let blocking = store.blocking();
    assert_eq!(
        blocking
            .complete(first, &me, fence, Timestamp::new(1.0).unwrap(), &result)
            .unwrap(),
        Ok(())
    );
    for job in &acknowledged {
        assert!(
            blocking.state(job).unwrap().is_some(),
            "acknowledged {job} lost"
        );
    }
    assert_eq!(integrity(&db), "ok");
}

/// Mounts `dir` read-only onto itself; the guard undoes it.
struct ReadOnlyMount<'a>(&'a Path);

impl<'a> ReadOnlyMount<'a> {
    fn new(dir: &'a Path) -> Self {
        let run = |args: &[&str]| {
            let out = Command::new("mount")
                .args(args)
                .arg(dir)
                .arg(dir)
                .output()
                .expect("mount runs");
            assert!(
                out.status.success(),
                "mount {args:?} failed (this test needs root): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&["--bind"]);
        let guard = ReadOnlyMount(dir);
        run(&["-o", "remount,ro,bind"]);
        guard
    }
}

impl Drop for ReadOnlyMount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

#[test]
fn a_read_only_database_gives_typed_errors_and_works_again_when_writable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ro.db");
    lease_sqlite::init_db(&db).unwrap();
    lease_sqlite::enqueue(&db, "j").unwrap();
    let fence = lease_sqlite::claim(&db, "j", "w", 0.0, 10.0)
        .unwrap()
        .unwrap();
    let before = std::fs::read(&db).unwrap();
    {
        let _mount = ReadOnlyMount::new(dir.path());
        let err = lease_sqlite::complete(&db, "j", "w", fence, 1.0, "r").unwrap_err();
        assert!(matches!(err, Error::ReadOnly(_)), "{err}");
        let err = lease_sqlite::enqueue(&db, "k").unwrap_err();
        assert!(matches!(err, Error::ReadOnly(_)), "{err}");
        let err = lease_sqlite::init_db(dir.path().join("new.db")).unwrap_err();
        assert!(matches!(err, Error::ReadOnly(_)), "{err}");
    }
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the read-only attempts changed the file"
    );
    assert!(lease_sqlite::complete(&db, "j", "w", fence, 1.0, "r").unwrap());
    assert_eq!(integrity(&db), "ok");
}
