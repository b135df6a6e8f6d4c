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
    // The empty schema takes 42 pages.
    let store = capped(&db, 44);
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

/// The bytes of `db` and of its write-ahead log (empty when there is none).
fn files(db: &Path) -> (Vec<u8>, Vec<u8>) {
    let log = std::fs::read(format!("{}-wal", db.display())).unwrap_or_default();
    (std::fs::read(db).unwrap(), log)
}

/// Typed errors for writes, reads that work, and nothing changed, on storage that can only be
/// read; the database takes writes again once it can be written. `log_holds_commits`: the
/// claim is left in the write-ahead log (as a seed call leaves it), or moved into the main
/// file (as a store does when it closes).
fn read_only_storage(log_holds_commits: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ro.db");
    lease_sqlite::init_db(&db).unwrap();
    lease_sqlite::enqueue(&db, "j").unwrap();
    let fence = lease_sqlite::claim(&db, "j", "w", 0.0, 10.0)
        .unwrap()
        .unwrap();
    if !log_holds_commits {
        drop(SqliteLeaseStore::open_existing(&db).unwrap());
    }
    let before = files(&db);
    assert_eq!(
        !before.1.is_empty(),
        log_holds_commits,
        "the log is not as the test needs it"
    );
    {
        let _mount = ReadOnlyMount::new(dir.path());
        let err = lease_sqlite::complete(&db, "j", "w", fence, 1.0, "r").unwrap_err();
        assert!(matches!(err, Error::ReadOnly(_)), "{err}");
        let err = lease_sqlite::enqueue(&db, "k").unwrap_err();
        assert!(matches!(err, Error::ReadOnly(_)), "{err}");
        let err = lease_sqlite::init_db(dir.path().join("new.db")).unwrap_err();
        assert!(matches!(err, Error::ReadOnly(_)), "{err}");
        // Reads work on storage that can only be read, through the path API and a store, and
        // see the claim wherever it is kept.
        let s = lease_sqlite::state(&db, "j").unwrap().unwrap();
        assert_eq!((s.owner.as_deref(), s.fence), (Some("w"), fence));
        let store = SqliteLeaseStore::open_existing(&db).unwrap();
        assert!(
            store
                .read_only_reason()
                .unwrap()
                .contains("read-only file system")
        );
        let job = JobId::new("j").unwrap();
        assert_eq!(store.blocking().state(&job).unwrap().unwrap().fence, fence);
        let err = store
            .blocking()
            .enqueue(&JobId::new("k").unwrap())
            .unwrap_err();
        assert!(matches!(err, Error::ReadOnly(_)), "{err}");
        lease_sqlite::init_db(&db).unwrap();
    }
    assert!(
        files(&db) == before,
        "the read-only attempts changed the file or its log"
    );
    assert!(lease_sqlite::complete(&db, "j", "w", fence, 1.0, "r").unwrap());
    assert_eq!(integrity(&db), "ok");
}

#[test]
fn a_read_only_database_gives_typed_errors_and_works_again_when_writable() {
    read_only_storage(false);
}

#[test]
fn a_read_only_database_whose_log_holds_commits_is_read_whole() {
    read_only_storage(true);
}

/// Mounts a tmpfs of `size` at `dir`; the guard unmounts it.
struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    fn new(dir: &'a Path, size: &str) -> Self {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "mount -t tmpfs failed (this test needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

/// Writes to `path` until the file system has no byte left.
fn fill(path: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    for chunk in [65_536, 4096, 512, 1] {
        let bytes = vec![0_u8; chunk];
        while file.write_all(&bytes).is_ok() {}
    }
    let _ = file.sync_all();
}

#[test]
fn a_file_system_filled_to_the_last_byte_is_reported_as_full_not_as_an_outage() {
    let dir = tempfile::tempdir().unwrap();
    let _mount = Tmpfs::new(dir.path(), "2m");
    let db = dir.path().join("lease.db");
    lease_sqlite::init_db(&db).unwrap();
    assert!(lease_sqlite::enqueue(&db, "j").unwrap());
    let filler = dir.path().join("filler");
    fill(&filler);
    // The write must grow the log (the calls before left it in place, holding their commits).
    let err = lease_sqlite::enqueue(&db, "x").unwrap_err();
    assert!(matches!(err, Error::Full(_)), "enqueue: {err}");
    match lease_sqlite::state(&db, "j") {
        Ok(found) => assert!(found.is_some()),
        Err(err) => assert!(matches!(err, Error::Full(_)), "state: {err}"),
    }
    let store = SqliteLeaseStore::open_existing(&db);
    if let Ok(store) = &store {
        // The failed write grew the log before it ran out of space, and the calls leave the
        // log in place, so the next writes reuse what it took; then they are refused as full.
        let err = (0..1000)
            .find_map(|i| {
                let job = JobId::new(format!("y{i}")).unwrap();
                store.blocking().enqueue(&job).err()
            })
            .expect("the store never ran out of space");
        assert!(matches!(err, Error::Full(_)), "store enqueue: {err}");
    } else if let Err(err) = store {
        assert!(matches!(err, Error::Full(_)), "open: {err}");
    }
    std::fs::remove_file(&filler).unwrap();
    assert!(lease_sqlite::enqueue(&db, "x").unwrap());
    assert!(lease_sqlite::state(&db, "j").unwrap().is_some());
    assert_eq!(integrity(&db), "ok");
}

#[test]
fn exclusive_mode_needs_no_shared_memory_and_keeps_other_openers_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("alone.db");
    let options = SqliteOptions {
        exclusive: true,
        busy_timeout: std::time::Duration::from_millis(200),
        ..SqliteOptions::default()
    };
    let store = SqliteLeaseStore::open_with(&db, options.clone()).unwrap();
    let job = JobId::new("j").unwrap();
    let blocking = store.blocking();
    assert!(blocking.enqueue(&job).unwrap());
    let fence = blocking
        .claim(
            &job,
            &Owner::new("w").unwrap(),
            LeaseTerm::new(0.0, 10.0).unwrap(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(fence.get(), 1);
    assert!(
        !dir.path().join("alone.db-shm").exists(),
        "exclusive mode made a -shm file"
    );
    let err = SqliteLeaseStore::open_with(&db, options.clone()).unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert!(err.to_string().contains("locked"), "{err}");
    drop(store);
    let again = SqliteLeaseStore::open_with(&db, options).unwrap();
    assert_eq!(again.blocking().state(&job).unwrap().unwrap().fence, 1);
}
