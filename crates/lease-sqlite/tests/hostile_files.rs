//! Files a hostile or careless user points the store at: other programs' databases, empty files,
//! a second name for one file, concurrent creators, stored values no lease rule could write.
//! Every refusal is checked by the file's bytes: a refused file is left exactly as it was.

use std::path::{Path, PathBuf};

use lease_sqlite::{Error, SqliteLeaseStore, SqliteOptions, claim, enqueue, init_db, state};
use rusqlite::Connection;

/// The bytes of every file in the directory, so a test can show that nothing was changed or added.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    found.sort();
    found
}

/// Every way in that must refuse `path`, each checked for the kind of error.
fn every_open_refuses(path: &Path, expected: &dyn Fn(&Error) -> bool) {
    let attempts: Vec<(&str, Result<(), Error>)> = vec![
        ("init_db", init_db(path)),
        ("enqueue", enqueue(path, "j").map(drop)),
        ("state", state(path, "j").map(drop)),
        ("claim", claim(path, "j", "w", 0.0, 1.0).map(drop)),
        ("open", SqliteLeaseStore::open(path).map(drop)),
        (
            "open_existing",
            SqliteLeaseStore::open_existing(path).map(drop),
        ),
    ];
    for (how, attempt) in attempts {
        let err = attempt.expect_err(how);
        assert!(expected(&err), "{how}: {err}");
    }
}

const CONTRACT: &str = "CREATE TABLE jobs(id TEXT PRIMARY KEY, owner TEXT, until REAL NOT NULL \
    DEFAULT 0, fence INTEGER NOT NULL DEFAULT 0, result TEXT, done INTEGER NOT NULL DEFAULT 0)";

#[test]
fn a_foreign_database_is_refused_and_left_byte_for_byte_unchanged() {
    let lease_id = lease_sqlite::APPLICATION_ID;
    let cases = [
        (
            "another program's application_id",
            "PRAGMA application_id = 1234; CREATE TABLE t(x);".to_owned(),
        ),
        (
            "jobs with other columns",
            "CREATE TABLE jobs(id INTEGER PRIMARY KEY, payload BLOB)".to_owned(),
        ),
        (
            "jobs with an extra column",
            CONTRACT.replace("DEFAULT 0)", "DEFAULT 0, extra TEXT)"),
        ),
        (
            "jobs as a view",
            "CREATE VIEW jobs AS SELECT 1 AS id".to_owned(),
        ),
        (
            "user_version 7",
            "PRAGMA user_version = 7; CREATE TABLE t(x);".to_owned(),
        ),
        (
            "a newer lease schema",
            format!("PRAGMA application_id = {lease_id}; PRAGMA user_version = 99; {CONTRACT};"),
        ),
        (
            "until declared TEXT",
            CONTRACT.replace("until REAL", "until TEXT"),
        ),
        (
            "another program's tables and no markers",
            "CREATE TABLE users(name); INSERT INTO users VALUES ('ann');".to_owned(),
        ),
        (
            "the contract's table beside another program's",
            format!("{CONTRACT}; CREATE TABLE users(name);"),
        ),
        (
            "owner declared NOT NULL",
            CONTRACT.replace("owner TEXT", "owner TEXT NOT NULL"),
        ),
        (
            "fence with another default",
            CONTRACT.replace(
                "fence INTEGER NOT NULL DEFAULT 0",
                "fence INTEGER NOT NULL DEFAULT 1",
            ),
        ),
        (
            "id without a primary key",
            CONTRACT.replace("id TEXT PRIMARY KEY", "id TEXT"),
        ),
    ];
    for (what, sql) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch(&sql)
            .unwrap();
        let before = files(dir.path());
        every_open_refuses(&path, &|e| matches!(e, Error::Incompatible { .. }));
        assert_eq!(files(dir.path()), before, "{what}: the file was changed");
    }
}

#[test]
fn only_init_turns_an_empty_file_into_a_lease_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    std::fs::write(&path, b"").unwrap();
    for (how, attempt) in [
        ("enqueue", enqueue(&path, "j").map(drop)),
        ("state", state(&path, "j").map(drop)),
        ("claim", claim(&path, "j", "w", 0.0, 1.0).map(drop)),
        (
            "open_existing",
            SqliteLeaseStore::open_existing(&path).map(drop),
        ),
    ] {
        let err = attempt.expect_err(how);
        assert!(matches!(err, Error::NotFound { .. }), "{how}: {err}");
        assert!(err.to_string().contains("init"), "{how}: {err}");
    }
    assert_eq!(files(dir.path()), [(path.clone(), Vec::new())]);
    init_db(&path).unwrap();
    assert!(enqueue(&path, "j").unwrap());
}

#[test]
fn a_database_made_by_the_seed_is_still_adopted_by_any_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(&format!(
            "{CONTRACT}; INSERT INTO jobs(id, fence) VALUES ('old', 3);"
        ))
        .unwrap();
    assert_eq!(state(&path, "old").unwrap().unwrap().fence, 3);
    assert_eq!(claim(&path, "old", "a", 0.0, 1.0).unwrap(), Some(4));
}

#[test]
fn a_file_with_a_second_hard_link_is_refused_under_both_names_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.db");
    let b = dir.path().join("b.db");
    init_db(&a).unwrap();
    enqueue(&a, "j").unwrap();
    std::fs::hard_link(&a, &b).unwrap();
    let before = files(dir.path());
    for name in [&a, &b] {
        every_open_refuses(name, &|e| {
            matches!(e, Error::Incompatible { .. }) && e.to_string().contains("2 hard links")
        });
    }
    assert_eq!(files(dir.path()), before);
    std::fs::remove_file(&b).unwrap();
    assert_eq!(claim(&a, "j", "w", 0.0, 1.0).unwrap(), Some(1));
}

#[test]
fn a_store_refuses_new_connections_once_a_second_name_is_linked() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.db");
    let options = SqliteOptions {
        max_batch: 1,
        ..SqliteOptions::default()
    };
    let store = SqliteLeaseStore::open_with(&a, options).unwrap();
    std::fs::hard_link(&a, dir.path().join("b.db")).unwrap();
    // The store has no pooled connection yet; the first one is made now, and refused.
    let job = lease_domain::JobId::new("j").unwrap();
    let err = store.blocking().enqueue(&job).unwrap_err();
    assert!(err.to_string().contains("hard links"), "{err}");
}

#[test]
fn many_threads_opening_a_new_path_at_once_all_succeed() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        let failures: Vec<String> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let path = &path;
                    scope.spawn(move || {
                        if i % 2 == 0 {
                            init_db(path).map(drop)
                        } else {
                            SqliteLeaseStore::open(path).map(drop)
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|h| h.join().unwrap().err().map(|e| e.to_string()))
                .collect()
        });
        assert!(failures.is_empty(), "round {round}: {failures:?}");
        assert!(enqueue(&path, "j").unwrap());
    }
}

#[test]
fn a_stored_text_that_is_not_utf8_is_corrupt_data_naming_the_job_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lease.db");
    init_db(&path).unwrap();
    enqueue(&path, "bad-result").unwrap();
    enqueue(&path, "bad-owner").unwrap();
    let other = Connection::open(&path).unwrap();
    other
        .execute_batch(
            "UPDATE jobs SET result = CAST(x'c328' AS TEXT) WHERE id = 'bad-result';
             UPDATE jobs SET owner = x'4142' WHERE id = 'bad-owner';",
        )
        .unwrap();
    drop(other);
    for (job, column) in [("bad-result", "result"), ("bad-owner", "owner")] {
        let err = state(&path, job).unwrap_err();
        assert!(matches!(err, Error::Corrupt(_)), "{job}: {err}");
        let message = err.to_string();
        assert!(
            message.contains(job) && message.contains(column),
            "{message}"
        );
    }
}

#[test]
fn a_mismatched_column_is_named_with_what_was_found_and_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(&CONTRACT.replace("until REAL", "until TEXT"))
        .unwrap();
    let err = init_db(&path).unwrap_err().to_string();
    assert!(
        err.contains(
            "jobs.until is declared TEXT NOT NULL DEFAULT 0, expected REAL NOT NULL DEFAULT 0"
        ),
        "{err}"
    );
}

#[test]
fn a_path_that_is_not_a_regular_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.db");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for err in [init_db(&fifo).unwrap_err(), state(&fifo, "j").unwrap_err()] {
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}

#[test]
fn a_path_under_a_file_is_an_error_that_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, b"notes").unwrap();
    let err = state(file.join("lease.db"), "j").unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert!(err.to_string().contains("cannot inspect"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"notes");
}

#[test]
fn a_store_never_recreates_a_database_deleted_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.db");
    let options = SqliteOptions {
        max_batch: 1,
        ..SqliteOptions::default()
    };
    let store = SqliteLeaseStore::open_with(&path, options).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let job = lease_domain::JobId::new("j").unwrap();
    let err = store.blocking().enqueue(&job).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert!(!path.exists(), "the store made a new, empty database");
}

/// Marks a file immutable (`chattr +i`); the guard clears it.
struct Immutable<'a>(&'a Path);

impl<'a> Immutable<'a> {
    fn new(path: &'a Path) -> Self {
        let out = std::process::Command::new("chattr")
            .arg("+i")
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "chattr +i failed (this test needs root and a file system with attributes): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Immutable(path)
    }
}

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(self.0)
            .status();
    }
}

#[test]
fn an_immutable_database_can_be_read_and_refuses_writes_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("frozen.db");
    init_db(&path).unwrap();
    enqueue(&path, "j").unwrap();
    assert_eq!(claim(&path, "j", "w", 0.0, 5.0).unwrap(), Some(1));
    // The claim is still in the write-ahead log (a call leaves it there), which the reads
    // below must read; the log's index (`-shm`, shared memory, no data) is rebuilt by the
    // first reader, so it is left out of what must not change.
    let stored = || {
        let mut found = files(dir.path());
        found.retain(|(file, _)| !file.to_string_lossy().ends_with("-shm"));
        found
    };
    let before = stored();
    assert!(
        before
            .iter()
            .any(|(file, bytes)| file.to_string_lossy().ends_with("-wal") && !bytes.is_empty()),
        "the test needs a log that holds commits"
    );
    {
        let _frozen = Immutable::new(&path);
        assert_eq!(state(&path, "j").unwrap().unwrap().fence, 1);
        let err = claim(&path, "j", "x", 10.0, 5.0).unwrap_err();
        assert!(matches!(err, Error::ReadOnly(_)), "{err}");
        assert!(err.to_string().contains("immutable"), "{err}");
    }
    assert!(
        stored() == before,
        "reading an immutable database changed it"
    );
    assert_eq!(claim(&path, "j", "x", 10.0, 5.0).unwrap(), Some(2));
}

/// The released migrations, as the builds of each version ran them.
const MIGRATIONS: [&str; 5] = [
    include_str!("../migrations/0001_jobs.sql"),
    include_str!("../migrations/0002_queue.sql"),
    include_str!("../migrations/0003_audit.sql"),
    include_str!("../migrations/0004_ready_set.sql"),
    include_str!("../migrations/0005_service.sql"),
];

#[test]
fn a_version_5_file_upgraded_counts_its_finished_jobs_and_completions() {
    use lease_ports::overview::Overview;
    use lease_ports::{Status, Timestamp};
    let dir = tempfile::tempdir().unwrap();
    let path = older(
        dir.path(),
        5,
        "INSERT INTO jobs(id, owner, until, fence, result, done) VALUES \
           ('d1', 'w', 1, 1, 'r', 1), ('d2', 'w', 1, 1, 'r', 1), ('c', NULL, 0, 0, NULL, 0); \
         UPDATE jobs_queue SET queue = 'mail', updated = 125, result_fence = 1 WHERE id = 'd1'; \
         UPDATE jobs_queue SET updated = 61, result_fence = 1 WHERE id = 'd2'; \
         UPDATE jobs_queue SET finished = 'cancelled', updated = 70 WHERE id = 'c';",
    );
    let store = SqliteLeaseStore::open_existing(&path).unwrap();
    let stats = store
        .blocking()
        .stats(Timestamp::new(1.0).unwrap())
        .unwrap();
    let counts: Vec<(&str, Status, u64)> = stats
        .iter()
        .map(|r| (r.queue.as_str(), r.status, r.count))
        .collect();
    assert_eq!(
        counts,
        [
            ("default", Status::Pending, 1),
            ("default", Status::Done, 1),
            ("default", Status::Cancelled, 1),
            ("mail", Status::Done, 1),
        ]
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let minutes = runtime
        .block_on(store.activity(Timestamp::ZERO))
        .unwrap()
        .iter()
        .map(|r| (r.queue.as_str().to_owned(), r.minute.get(), r.completed))
        .collect::<Vec<_>>();
    assert_eq!(
        minutes,
        [
            ("default".to_owned(), 60.0, 1),
            ("mail".to_owned(), 120.0, 1)
        ]
    );
}

/// A lease database of an earlier version, as that version's build left it (its migrations
/// run by hand, recorded with their checksums from version 3 on), holding the job `kept`; then
/// `extra`.
fn older(dir: &Path, version: i32, extra: &str) -> PathBuf {
    let path = dir.join("old.db");
    let conn = Connection::open(&path).unwrap();
    if version >= 3 {
        conn.execute_batch(
            "CREATE TABLE lease_migrations(version INTEGER PRIMARY KEY, checksum TEXT NOT NULL)",
        )
        .unwrap();
    }
    for (sql, n) in MIGRATIONS[..usize::try_from(version).unwrap()]
        .iter()
        .zip(1..)
    {
        conn.execute_batch(sql).unwrap();
        if version >= 3 {
            let checksum = lease_ports::migrations::Migration { version: n, sql }.checksum();
            conn.execute(
                "INSERT INTO lease_migrations VALUES (?1, ?2)",
                rusqlite::params![n, checksum],
            )
            .unwrap();
        }
    }
    conn.execute_batch(&format!(
        "INSERT INTO jobs(id) VALUES ('kept'); {extra} \
         PRAGMA application_id = {}; PRAGMA user_version = {version};",
        lease_sqlite::APPLICATION_ID
    ))
    .unwrap();
    path
}

#[test]
fn a_version_3_file_upgraded_keeps_its_held_jobs_out_of_claim_order_until_their_leases_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = older(
        dir.path(),
        3,
        "INSERT INTO jobs(id, owner, until, fence) VALUES ('live', 'w', 1e12, 1), \
         ('ended', 'w', 5, 1); UPDATE jobs_queue SET attempts = 1 WHERE id IN ('live', 'ended');",
    );
    let store = SqliteLeaseStore::open(&path).unwrap();
    let filed: Vec<(String, Option<f64>)> = Connection::open(&path)
        .unwrap()
        .prepare("SELECT id, leased_until FROM jobs_queue ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        filed,
        [
            ("kept".to_owned(), None),
            ("live".to_owned(), Some(1e12)),
            ("ended".to_owned(), Some(5.0)),
        ]
    );
    let leases = store
        .blocking()
        .claim_next(
            &lease_domain::QueueName::default(),
            &lease_domain::Owner::new("x").unwrap(),
            lease_domain::LeaseTerm::from_parts(
                lease_domain::Timestamp::new(10.0).unwrap(),
                lease_domain::Ttl::new(5.0).unwrap(),
            )
            .unwrap(),
            3,
        )
        .unwrap();
    let ids: Vec<&str> = leases.iter().map(|l| l.job.as_str()).collect();
    assert_eq!(ids, ["kept", "ended"]);
}

#[test]
fn a_version_2_file_is_upgraded_on_open_and_records_every_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = older(dir.path(), 2, "");
    let store = SqliteLeaseStore::open(&path).unwrap();
    drop(store);
    let conn = Connection::open(&path).unwrap();
    let version: i32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, lease_sqlite::SCHEMA_VERSION);
    let recorded: Vec<(i32, String)> = conn
        .prepare("SELECT version, checksum FROM lease_migrations ORDER BY version")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        recorded.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        (1..=lease_sqlite::SCHEMA_VERSION).collect::<Vec<_>>()
    );
    assert!(recorded.iter().all(|(_, c)| c.len() == 64));
    assert!(state(&path, "kept").unwrap().is_some());
}

#[test]
fn a_marked_file_missing_its_queue_table_is_refused_untouched_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = older(dir.path(), 2, "DROP TABLE jobs_queue;");
    // Back to a rollback journal, so that opening for writing would show as a WAL switch.
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA journal_mode = DELETE")
        .unwrap();
    let before = files(dir.path());
    every_open_refuses(&path, &|e| {
        matches!(e, Error::Corrupt(_)) && e.to_string().contains("no jobs_queue table")
    });
    assert_eq!(files(dir.path()), before, "the file was changed");
}

#[test]
fn a_file_whose_recorded_migration_was_edited_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edited.db");
    init_db(&path).unwrap();
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "UPDATE lease_migrations SET checksum = 'x' WHERE version = 2; \
             PRAGMA journal_mode = DELETE",
        )
        .unwrap();
    let before = files(dir.path());
    every_open_refuses(&path, &|e| {
        matches!(e, Error::Incompatible { .. }) && e.to_string().contains("migration 2 was changed")
    });
    assert_eq!(files(dir.path()), before, "the file was changed");
}

#[test]
fn a_row_another_program_inserts_gets_the_domains_defaults() {
    use lease_ports::{EnqueueSpec, QueueName, Status, Timestamp};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("defaults.db");
    init_db(&path).unwrap();
    let conn = Connection::open(&path).unwrap();
    // Through the trigger (the schema's column defaults), and with no queue row at all (the
    // defaults the reading statements fill in).
    conn.execute_batch(
        "INSERT INTO jobs(id) VALUES ('by-trigger'); \
         INSERT INTO jobs(id) VALUES ('no-queue-row'); \
         DELETE FROM jobs_queue WHERE id = 'no-queue-row';",
    )
    .unwrap();
    let store = SqliteLeaseStore::open_existing(&path).unwrap();
    let blocking = store.blocking();
    for id in ["by-trigger", "no-queue-row"] {
        let record = blocking
            .record(&lease_ports::JobId::new(id).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(record.job.queue, QueueName::default(), "{id}");
        assert_eq!(record.job.queue.as_str(), QueueName::DEFAULT);
        assert_eq!(
            record.job.max_attempts,
            EnqueueSpec::DEFAULT_MAX_ATTEMPTS,
            "{id}"
        );
    }
    // `stats` reads the queue table (its open rows and the counted finished ones, so it does
    // not scan a million jobs): the job whose queue row was deleted reads back whole but is
    // not counted.
    let stats = blocking.stats(Timestamp::new(1.0).unwrap()).unwrap();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(
        (stats[0].queue.as_str(), stats[0].status, stats[0].count),
        (QueueName::DEFAULT, Status::Pending, 1)
    );
}

#[test]
fn a_batch_enqueue_meeting_an_unreadable_row_stores_none_of_its_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("batch.db");
    let store = SqliteLeaseStore::open(&path).unwrap();
    let b = store.blocking();
    let bad = lease_domain::JobId::new("bad").unwrap();
    b.enqueue(&bad).unwrap();
    Connection::open(&path)
        .unwrap()
        .execute("UPDATE jobs SET until = 'soon' WHERE id = 'bad'", [])
        .unwrap();
    let spec = lease_domain::EnqueueSpec::default();
    let batch: Vec<_> = ["first", "bad", "last"]
        .iter()
        .map(|id| (lease_domain::JobId::new(*id).unwrap(), spec.clone()))
        .collect();
    let err = b.enqueue_many(&batch).unwrap_err();
    assert!(matches!(err, lease_ports::StoreError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("job bad"), "{err}");
    for id in ["first", "last"] {
        let id = lease_domain::JobId::new(id).unwrap();
        assert!(b.state(&id).unwrap().is_none(), "{id} was stored");
    }
}
