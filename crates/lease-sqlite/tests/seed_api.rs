//! The seed-contract functions, used as a caller would: through a path, with other programs
//! touching the same file.

use std::path::{Path, PathBuf};

use lease_sqlite::{
    Error, JobState, SqliteLeaseStore, claim, claim_many, complete, enqueue, init_db, release,
    renew, state,
};
use rusqlite::Connection;
use tempfile::TempDir;

fn fresh_db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lease.db");
    init_db(&path).unwrap();
    (dir, path)
}

fn row(path: &Path, id: &str) -> JobState {
    state(path, id).unwrap().unwrap()
}

#[test]
fn init_creates_the_contract_schema_and_is_idempotent() {
    let (_dir, path) = fresh_db();
    assert!(enqueue(&path, "j").unwrap());
    claim(&path, "j", "a", 0.0, 5.0).unwrap();
    let before = row(&path, "j");
    init_db(&path).unwrap();
    assert_eq!(row(&path, "j"), before, "a second init changed the data");
    let conn = Connection::open(&path).unwrap();
    let sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE name = 'jobs'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    for column in [
        "id TEXT PRIMARY KEY",
        "owner TEXT",
        "until REAL NOT NULL DEFAULT 0",
        "fence INTEGER NOT NULL DEFAULT 0",
        "result TEXT",
        "done INTEGER NOT NULL DEFAULT 0",
    ] {
        assert!(sql.contains(column), "schema {sql} lacks {column}");
    }
}

#[test]
fn the_stale_worker_story_through_the_api() {
    let (_dir, path) = fresh_db();
    assert!(enqueue(&path, "invoice-42").unwrap());
    let a = claim(&path, "invoice-42", "A", 100.0, 30.0)
        .unwrap()
        .unwrap();
    // A stalls past its lease; B takes over at until == now.
    let b = claim(&path, "invoice-42", "B", 130.0, 30.0)
        .unwrap()
        .unwrap();
    assert_eq!((a, b), (1, 2));
    assert!(!renew(&path, "invoice-42", "A", a, 131.0, 30.0).unwrap());
    assert!(complete(&path, "invoice-42", "B", b, 140.0, "paid by B").unwrap());
    assert!(!complete(&path, "invoice-42", "A", a, 141.0, "paid by A").unwrap());
    let s = row(&path, "invoice-42");
    assert_eq!(
        (s.owner.as_deref(), s.fence, s.result.as_deref(), s.done),
        (Some("B"), 2, Some("paid by B"), true)
    );
}

#[test]
fn state_reads_what_another_program_wrote() {
    let (_dir, path) = fresh_db();
    assert!(enqueue(&path, "j").unwrap());
    let other = Connection::open(&path).unwrap();
    other
        .execute(
            "UPDATE jobs SET owner = 'x', until = 9.5, fence = 4 WHERE id = 'j'",
            [],
        )
        .unwrap();
    let s = row(&path, "j");
    assert_eq!((s.owner.as_deref(), s.until, s.fence), (Some("x"), 9.5, 4));
}

#[test]
fn row_inserted_with_only_an_id_is_a_job_in_the_default_state() {
    let (_dir, path) = fresh_db();
    Connection::open(&path)
        .unwrap()
        .execute("INSERT INTO jobs(id) VALUES ('outside')", [])
        .unwrap();
    assert_eq!(
        row(&path, "outside"),
        JobState {
            id: "outside".into(),
            owner: None,
            until: 0.0,
            fence: 0,
            result: None,
            done: false
        }
    );
    assert_eq!(claim(&path, "outside", "a", 0.0, 1.0).unwrap(), Some(1));
}

#[test]
fn a_database_created_by_the_python_seed_is_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE jobs(id TEXT PRIMARY KEY, owner TEXT, until REAL NOT NULL DEFAULT 0, \
         fence INTEGER NOT NULL DEFAULT 0, result TEXT, done INTEGER NOT NULL DEFAULT 0);
         INSERT INTO jobs(id, owner, until, fence) VALUES ('old', 'w', 5.0, 7);",
    )
    .unwrap();
    drop(conn);
    init_db(&path).unwrap();
    assert_eq!(claim(&path, "old", "a", 5.0, 1.0).unwrap(), Some(8));
}

#[test]
fn path_functions_stay_correct_when_the_file_is_deleted_and_recreated() {
    let (_dir, path) = fresh_db();
    assert!(enqueue(&path, "j").unwrap());
    assert_eq!(claim(&path, "j", "a", 0.0, 5.0).unwrap(), Some(1));
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", path.display()));
        if file.exists() {
            std::fs::remove_file(file).unwrap();
        }
    }
    assert!(matches!(state(&path, "j"), Err(Error::NotFound { .. })));
    init_db(&path).unwrap();
    assert_eq!(state(&path, "j").unwrap(), None);
    assert!(enqueue(&path, "j").unwrap());
    assert_eq!(claim(&path, "j", "a", 0.0, 5.0).unwrap(), Some(1));
}

#[test]
fn operations_on_a_missing_database_are_not_found_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.db");
    assert!(matches!(enqueue(&path, "j"), Err(Error::NotFound { .. })));
    assert!(matches!(
        claim(&path, "j", "a", 0.0, 1.0),
        Err(Error::NotFound { .. })
    ));
    assert!(!path.exists());
}

#[test]
fn fences_are_never_reused_after_release_or_reopen() {
    let (_dir, path) = fresh_db();
    enqueue(&path, "j").unwrap();
    let mut fences = Vec::new();
    for round in 0..5_u32 {
        let now = f64::from(round) * 10.0;
        let f = claim(&path, "j", "a", now, 5.0).unwrap().unwrap();
        assert!(release(&path, "j", "a", f).unwrap());
        fences.push(f);
        // A long-lived store opened and dropped in between, as a restarted worker would.
        drop(SqliteLeaseStore::open(&path).unwrap());
    }
    assert_eq!(fences, [1, 2, 3, 4, 5]);
}

/// The whole file, read back, so a test can show an error changed nothing stored.
fn snapshot(path: &Path) -> Vec<JobState> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn.prepare("SELECT id FROM jobs ORDER BY id").unwrap();
    let ids: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    ids.iter().map(|id| row(path, id)).collect()
}

#[test]
fn invalid_ttl_and_now_are_typed_errors_that_change_nothing() {
    let (_dir, path) = fresh_db();
    enqueue(&path, "free").unwrap();
    enqueue(&path, "held").unwrap();
    let f = claim(&path, "held", "a", 0.0, 100.0).unwrap().unwrap();
    let before = snapshot(&path);
    let bad_ttls = [0.0, -0.0, -5.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    let bad_nows = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    let mut tried = 0;
    for ttl in bad_ttls {
        assert!(
            matches!(
                claim(&path, "free", "b", 1.0, ttl),
                Err(Error::InvalidInput(_))
            ),
            "claim ttl {ttl}"
        );
        assert!(
            matches!(
                renew(&path, "held", "a", f, 1.0, ttl),
                Err(Error::InvalidInput(_))
            ),
            "renew ttl {ttl}"
        );
        assert!(matches!(
            claim_many(&path, "free", &["b", "c"], 1.0, ttl),
            Err(Error::InvalidInput(_))
        ));
        tried += 3;
    }
    for now in bad_nows {
        assert!(
            matches!(
                claim(&path, "free", "b", now, 1.0),
                Err(Error::InvalidInput(_))
            ),
            "claim now {now}"
        );
        assert!(
            matches!(
                renew(&path, "held", "a", f, now, 1.0),
                Err(Error::InvalidInput(_))
            ),
            "renew now {now}"
        );
        assert!(
            matches!(
                complete(&path, "held", "a", f, now, "r"),
                Err(Error::InvalidInput(_))
            ),
            "complete now {now}"
        );
        assert!(matches!(
            claim_many(&path, "free", &["b"], now, 1.0),
            Err(Error::InvalidInput(_))
        ));
        tried += 4;
    }
    assert!(matches!(
        claim(&path, "", "b", 1.0, 1.0),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        claim(&path, "free", "", 1.0, 1.0),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        release(&path, "held", "a", u64::MAX),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        claim_many(&path, "free", &["b", ""], 1.0, 1.0),
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(tried, 30);
    assert_eq!(snapshot(&path), before);
}

#[test]
fn error_messages_name_the_bad_value() {
    let (_dir, path) = fresh_db();
    let message = claim(&path, "j", "a", 0.0, -5.0).unwrap_err().to_string();
    assert!(
        message.contains("ttl") && message.contains("-5"),
        "{message}"
    );
    let message = claim(&path, "j", "a", f64::NAN, 1.0)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("now") && message.contains("NaN"),
        "{message}"
    );
}

#[test]
fn a_file_that_is_not_a_database_is_refused_and_left_byte_for_byte_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    let bytes = b"these are my notes, not a database\n".repeat(200);
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(init_db(&path), Err(Error::Incompatible { .. })));
    assert!(matches!(
        enqueue(&path, "j"),
        Err(Error::Incompatible { .. })
    ));
    let refused = SqliteLeaseStore::open(&path).unwrap_err();
    assert!(matches!(refused, Error::Incompatible { .. }), "{refused}");
    // SQLite's own error is kept as the cause, for a log that shows the chain.
    let cause = std::error::Error::source(&refused).expect("the error's source");
    assert!(cause.downcast_ref::<rusqlite::Error>().is_some(), "{cause}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "open left side files behind");
}

#[test]
fn a_short_file_that_is_not_a_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short");
    std::fs::write(&path, b"hi").unwrap();
    assert!(matches!(init_db(&path), Err(Error::Incompatible { .. })));
    assert_eq!(std::fs::read(&path).unwrap(), b"hi");
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = init_db(dir.path()).unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("directory"), "{err}");
}

#[test]
fn a_missing_parent_directory_is_an_error_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir/lease.db");
    let err = init_db(&path).unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert!(!dir.path().join("no").exists());
}

#[test]
fn a_jobs_table_with_other_columns_or_types_is_refused() {
    let cases = [
        "CREATE TABLE jobs(id TEXT PRIMARY KEY, owner TEXT, until TEXT NOT NULL DEFAULT 0, \
         fence INTEGER NOT NULL DEFAULT 0, result TEXT, done INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE jobs(id TEXT PRIMARY KEY, owner TEXT, until REAL NOT NULL DEFAULT 0, \
         fence INTEGER NOT NULL DEFAULT 0, result TEXT, done INTEGER NOT NULL DEFAULT 0, extra TEXT)",
        "CREATE TABLE jobs(id TEXT PRIMARY KEY, owner TEXT, until REAL NOT NULL DEFAULT 0, result TEXT, \
         done INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE jobs(id INTEGER PRIMARY KEY, payload BLOB)",
    ];
    for sql in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.db");
        Connection::open(&path).unwrap().execute_batch(sql).unwrap();
        let err = init_db(&path).unwrap_err();
        assert!(matches!(err, Error::Incompatible { .. }), "{sql}: {err}");
    }
}

#[test]
fn a_database_marked_by_another_program_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA application_id = 1234; CREATE TABLE t(x);")
        .unwrap();
    let err = init_db(&path).unwrap_err();
    assert!(err.to_string().contains("application_id"), "{err}");
}

#[test]
fn corrupt_stored_values_are_reported_not_used() {
    let (_dir, path) = fresh_db();
    enqueue(&path, "neg").unwrap();
    enqueue(&path, "flag").unwrap();
    let other = Connection::open(&path).unwrap();
    other
        .execute("UPDATE jobs SET fence = -3 WHERE id = 'neg'", [])
        .unwrap();
    other
        .execute("UPDATE jobs SET done = 7 WHERE id = 'flag'", [])
        .unwrap();
    assert!(matches!(
        claim(&path, "neg", "a", 0.0, 1.0),
        Err(Error::Corrupt(_))
    ));
    assert!(matches!(state(&path, "flag"), Err(Error::Corrupt(_))));
}

#[test]
fn every_pooled_connection_runs_wal_full_sync_and_a_busy_timeout() {
    let (_dir, path) = fresh_db();
    let store = SqliteLeaseStore::open(&path).unwrap();
    let settings = store.settings().unwrap();
    assert_eq!(settings.journal_mode, "wal");
    assert_eq!(settings.synchronous, 2, "synchronous must be FULL");
    assert_eq!(settings.busy_timeout_ms, 30_000);
    let marks = Connection::open(&path).unwrap();
    let app: i32 = marks
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .unwrap();
    assert_eq!(app, lease_sqlite::APPLICATION_ID);
}

#[test]
fn claim_many_of_a_new_job_has_exactly_one_winner_every_round() {
    let (_dir, path) = fresh_db();
    let owners: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
    for round in 0..30 {
        let job = format!("race-{round}");
        enqueue(&path, &job).unwrap();
        let outcomes = claim_many(&path, &job, &owners, 1.0, 60.0).unwrap();
        assert_eq!(outcomes.len(), owners.len());
        let winners: Vec<usize> = (0..outcomes.len())
            .filter(|&i| outcomes[i].is_some())
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        assert_eq!(outcomes[winners[0]], Some(1));
        assert_eq!(row(&path, &job).owner.as_deref(), Some(owners[winners[0]]));
    }
}

#[test]
fn claim_many_keeps_input_order_with_more_owners_than_threads() {
    let (_dir, path) = fresh_db();
    enqueue(&path, "j").unwrap();
    let names: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
    let owners: Vec<&str> = names.iter().map(String::as_str).collect();
    let outcomes = claim_many(&path, "j", &owners, 1.0, 60.0).unwrap();
    assert_eq!(outcomes.len(), 100);
    let winner = outcomes.iter().position(Option::is_some).unwrap();
    assert_eq!(outcomes.iter().filter(|o| o.is_some()).count(), 1);
    assert_eq!(row(&path, "j").owner, Some(names[winner].clone()));
    assert_eq!(
        claim_many(&path, "j", &[], 1.0, 60.0).unwrap(),
        Vec::<Option<u64>>::new()
    );
}

/// How many descriptors process `pid` has open on `path` itself (not its -wal or -shm).
fn open_descriptors(pid: &str, path: &Path) -> usize {
    let target = path.canonicalize().unwrap();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .filter(|link| *link == target)
                .count()
        })
        .unwrap_or(0)
}

/// The claims of `claim_many` overlap in time: while another connection holds the write lock,
/// every owner's claim is under way at once, each on its own connection. Claims run one after
/// another would never have more than one connection open here.
#[test]
fn claim_many_runs_every_claim_at_the_same_time_on_its_own_connection() {
    const OWNERS: usize = 8;
    let (_dir, path) = fresh_db();
    enqueue(&path, "j").unwrap();
    let holder = Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let names: Vec<String> = (0..OWNERS).map(|i| format!("w{i}")).collect();
    let racing = {
        let path = path.clone();
        std::thread::spawn(move || {
            let owners: Vec<&str> = names.iter().map(String::as_str).collect();
            claim_many(&path, "j", &owners, 1.0, 60.0)
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut most = 0;
    while most < OWNERS + 1 && std::time::Instant::now() < deadline {
        most = most.max(open_descriptors("self", &path));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    holder.execute_batch("COMMIT").unwrap();
    let outcomes = racing.join().unwrap().unwrap();
    assert_eq!(outcomes.iter().filter(|o| o.is_some()).count(), 1);
    assert!(
        most > OWNERS,
        "at most {most} connections (the holder's included) were open at once"
    );
}

/// The size of `path`'s write-ahead log, 0 when there is none.
fn log_len(path: &Path) -> u64 {
    std::fs::metadata(format!("{}-wal", path.display())).map_or(0, |m| m.len())
}

#[test]
fn a_call_leaves_its_commits_in_the_log_and_the_log_stays_small() {
    let (_dir, path) = fresh_db();
    assert!(enqueue(&path, "j").unwrap());
    assert_eq!(claim(&path, "j", "a", 0.0, 5.0).unwrap(), Some(1));
    // The claim's commit is in the log, not yet in the main file, after its call closed.
    assert!(log_len(&path) > 0, "the call's close emptied the log");
    let main_only = Connection::open_with_flags(
        format!("file:{}?immutable=1", path.display()),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    let fence_in_main_file: Option<i64> = main_only
        .query_row("SELECT fence FROM jobs WHERE id = 'j'", [], |r| r.get(0))
        .unwrap_or(None);
    assert_ne!(fence_in_main_file, Some(1), "the claim was checkpointed");
    drop(main_only);
    // Every call reads it: the next one sees the claim.
    assert_eq!(row(&path, "j").fence, 1);
    // A write empties the log once it passes 128 KiB, so after any call it holds no more than
    // that and one commit's pages.
    let (mut largest, mut emptied, mut last) = (0, 0, log_len(&path));
    let mut after_call = || {
        let now = log_len(&path);
        largest = largest.max(now);
        if now < last {
            emptied += 1;
        }
        last = now;
    };
    for i in 0..300 {
        let job = format!("job-{i}");
        assert!(enqueue(&path, &job).unwrap());
        after_call();
        let fence = claim(&path, &job, "a", 0.0, 5.0).unwrap().unwrap();
        after_call();
        assert!(complete(&path, &job, "a", fence, 1.0, "done").unwrap());
        after_call();
    }
    assert!(
        emptied >= 2,
        "the log was emptied {emptied} times in 900 writes"
    );
    assert!(
        largest <= 32 * 4096,
        "the log held {largest} bytes after a call; a write empties it past 128 KiB"
    );
    for i in 0..300 {
        assert!(row(&path, &format!("job-{i}")).done);
    }
}

#[test]
fn deleting_only_the_main_file_brings_no_commit_of_its_log_back() {
    let (_dir, path) = fresh_db();
    assert!(enqueue(&path, "j").unwrap());
    assert_eq!(claim(&path, "j", "a", 0.0, 5.0).unwrap(), Some(1));
    assert!(
        log_len(&path) > 0,
        "the test needs a log that holds commits"
    );
    // Only the main file goes; its log and the log's index stay behind.
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(state(&path, "j"), Err(Error::NotFound { .. })));
    init_db(&path).unwrap();
    assert_eq!(state(&path, "j").unwrap(), None, "an old commit came back");
    assert!(enqueue(&path, "j").unwrap());
    assert_eq!(claim(&path, "j", "a", 0.0, 5.0).unwrap(), Some(1));
    assert_eq!(row(&path, "j").fence, 1);
}

/// A process keeps its connection for a path only while the path names the file it opened:
/// a file put in its place (renamed over it) is read as it is, and so is the first file again.
#[test]
fn a_file_renamed_over_the_path_is_read_afresh() {
    let (dir, path) = fresh_db();
    assert!(enqueue(&path, "j").unwrap());
    assert_eq!(claim(&path, "j", "a", 0.0, 5.0).unwrap(), Some(1));
    // Another database, with another job, takes the path's place.
    let other = dir.path().join("other.db");
    init_db(&other).unwrap();
    assert!(enqueue(&other, "k").unwrap());
    let kept = dir.path().join("kept.db");
    for suffix in ["", "-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{suffix}", path.display()));
        if from.exists() {
            std::fs::rename(from, format!("{}{suffix}", kept.display())).unwrap();
        }
    }
    // The other file (with its log, which holds its last commits) is renamed to the path.
    for suffix in ["", "-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{suffix}", other.display()));
        if from.exists() {
            std::fs::rename(from, format!("{}{suffix}", path.display())).unwrap();
        }
    }
    assert_eq!(
        state(&path, "j").unwrap(),
        None,
        "the old file's job was read"
    );
    assert_eq!(row(&path, "k").fence, 0);
    assert_eq!(claim(&path, "k", "b", 0.0, 5.0).unwrap(), Some(1));
    // The first file, under its new name, is as it was.
    assert_eq!(row(&kept, "j").fence, 1);
}

/// More paths than a process keeps connections for are each read correctly, in any order.
#[test]
fn many_paths_each_keep_their_own_jobs() {
    let dir = TempDir::new().unwrap();
    let paths: Vec<PathBuf> = (0..lease_sqlite::KEPT_PATHS + 4)
        .map(|n| dir.path().join(format!("db{n}.db")))
        .collect();
    for (n, path) in paths.iter().enumerate() {
        init_db(path).unwrap();
        assert!(enqueue(path, &format!("j{n}")).unwrap());
    }
    for round in 0..2 {
        for (n, path) in paths.iter().enumerate().rev() {
            let now = f64::from(u32::try_from(round * 10).unwrap());
            let fence = claim(path, &format!("j{n}"), "a", now, 5.0).unwrap();
            assert_eq!(fence, Some(round + 1), "{}", path.display());
            assert_eq!(state(path, &format!("j{}", n + 1)).unwrap(), None);
        }
    }
}
