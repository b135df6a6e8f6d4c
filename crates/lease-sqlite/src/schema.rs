//! The schema: the `jobs` table of the contract, the file markers, and what a file is found to be.
//!
//! Deciding what a file is happens on what was read from it ([`Schema`]) by a pure function
//! ([`classify`]), so the same rules judge a file seen through a read-only connection before
//! anything is written, and again inside the write transaction that creates or marks it.

use lease_ports::StoreError;
use rusqlite::Connection;

use crate::error::{self, OpenError};

/// `PRAGMA application_id` of a lease database ("LEAS").
pub const APPLICATION_ID: i32 = 0x4C45_4153;

/// `PRAGMA user_version`: the schema version this code writes and reads. Version 1 had the
/// contract's `jobs` table only; version 2 adds the work queue beside it.
pub const SCHEMA_VERSION: i32 = 2;

/// The contract's table. Other programs may insert rows with only `id`.
pub(crate) const CREATE_JOBS: &str = "CREATE TABLE IF NOT EXISTS jobs(
    id TEXT PRIMARY KEY,
    owner TEXT,
    until REAL NOT NULL DEFAULT 0,
    fence INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    done INTEGER NOT NULL DEFAULT 0
)";

/// The work queue (version 2), beside the contract's table so that `jobs` keeps exactly the
/// contract's columns. One `jobs_queue` row per job, kept in step by triggers when another
/// program inserts or deletes `jobs` rows; `finished` mirrors done/dead/cancelled so that the
/// partial index holds only jobs that can still run; `purged` keeps the fence of each purged id.
/// Idempotent, and it backfills a queue row for every existing job in the default queue.
pub(crate) const CREATE_QUEUE: &str = "
CREATE TABLE IF NOT EXISTS jobs_queue(
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    queue TEXT NOT NULL DEFAULT 'default',
    priority INTEGER NOT NULL DEFAULT 0,
    run_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 5,
    payload BLOB,
    finished TEXT,
    error TEXT,
    result_fence INTEGER,
    updated REAL
);
CREATE INDEX IF NOT EXISTS jobs_queue_ready
    ON jobs_queue(queue, priority DESC, run_at, seq) WHERE finished IS NULL;
CREATE TABLE IF NOT EXISTS purged(id TEXT PRIMARY KEY, fence INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS jobs_queue_insert AFTER INSERT ON jobs BEGIN
    INSERT OR IGNORE INTO jobs_queue(id, finished)
        VALUES (new.id, CASE WHEN new.done = 1 THEN 'done' END);
END;
CREATE TRIGGER IF NOT EXISTS jobs_queue_delete AFTER DELETE ON jobs BEGIN
    DELETE FROM jobs_queue WHERE id = old.id;
END;
INSERT OR IGNORE INTO jobs_queue(id, finished)
    SELECT id, CASE WHEN done = 1 THEN 'done' END FROM jobs ORDER BY rowid;
";

/// One column as `PRAGMA table_info` describes it: name, declared type, NOT NULL, default, key.
struct Column {
    name: &'static str,
    kind: &'static str,
    not_null: bool,
    default: Option<&'static str>,
    primary_key: bool,
}

const COLUMNS: [Column; 6] = [
    Column {
        name: "id",
        kind: "TEXT",
        not_null: false,
        default: None,
        primary_key: true,
    },
    Column {
        name: "owner",
        kind: "TEXT",
        not_null: false,
        default: None,
        primary_key: false,
    },
    Column {
        name: "until",
        kind: "REAL",
        not_null: true,
        default: Some("0"),
        primary_key: false,
    },
    Column {
        name: "fence",
        kind: "INTEGER",
        not_null: true,
        default: Some("0"),
        primary_key: false,
    },
    Column {
        name: "result",
        kind: "TEXT",
        not_null: false,
        default: None,
        primary_key: false,
    },
    Column {
        name: "done",
        kind: "INTEGER",
        not_null: true,
        default: Some("0"),
        primary_key: false,
    },
];

/// One column of the stored `jobs` table: name, declared type, NOT NULL, default, part of the key.
type FoundColumn = (String, String, bool, Option<String>, bool);

/// What a database holds, read in one transaction so the markers and the tables agree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Schema {
    application_id: i32,
    user_version: i32,
    /// Every schema object not made by SQLite itself: (name, type).
    objects: Vec<(String, String)>,
    /// The columns of `jobs`, when it is a table.
    jobs_columns: Vec<FoundColumn>,
}

/// What a file is, judged from its [`Schema`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// An SQLite database with nothing in it (a new or 0-byte file): only `init` may use it.
    Empty,
    /// An unmarked database holding exactly the contract's `jobs` table (made by the seed's
    /// `init_db`): a lease database that is marked when first opened for writing.
    Unmarked,
    /// A database marked as a lease database, at this schema version (older ones are
    /// upgraded when first opened for writing).
    Lease(i32),
}

/// Reads the markers and the schema objects; call it inside a transaction.
pub(crate) fn read(conn: &Connection) -> rusqlite::Result<Schema> {
    let application_id = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let user_version = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let objects = conn
        .prepare(
            "SELECT name, type FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
             ORDER BY name",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<(String, String)>, _>>()?;
    let jobs_columns = conn
        .prepare("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('jobs')")?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get::<_, i64>(4)? > 0,
            ))
        })?
        .collect::<Result<Vec<FoundColumn>, _>>()?;
    Ok(Schema {
        application_id,
        user_version,
        objects,
        jobs_columns,
    })
}

fn incompatible(path: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Incompatible {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// Judges what a database is; anything that is not a usable lease database is refused with a
/// reason that names what was found.
pub(crate) fn classify(schema: &Schema, path: &str) -> Result<Found, StoreError> {
    match (schema.application_id, schema.user_version) {
        (APPLICATION_ID, v) if v > SCHEMA_VERSION => Err(incompatible(
            path,
            format!("schema version {v} is newer than this build supports ({SCHEMA_VERSION})"),
        )),
        (APPLICATION_ID, v) => {
            check_jobs_table(schema, path)?;
            Ok(Found::Lease(v))
        }
        (0, 0) if schema.objects.is_empty() => Ok(Found::Empty),
        (0, 0) => {
            let others: Vec<&str> = schema
                .objects
                .iter()
                .filter(|(name, _)| name != "jobs")
                .map(|(name, kind)| {
                    if kind == "table" {
                        name.as_str()
                    } else {
                        kind.as_str()
                    }
                })
                .collect();
            if !others.is_empty() {
                return Err(incompatible(
                    path,
                    format!(
                        "it holds objects of another program ({}); a lease database holds only \
                         its own tables",
                        others.join(", ")
                    ),
                ));
            }
            check_jobs_table(schema, path)?;
            Ok(Found::Unmarked)
        }
        (0, v) => Err(incompatible(
            path,
            format!("user_version {v} was set by another program"),
        )),
        (other, _) => Err(incompatible(
            path,
            format!("application_id {other:#x} belongs to another program"),
        )),
    }
}

fn check_jobs_table(schema: &Schema, path: &str) -> Result<(), StoreError> {
    match schema.objects.iter().find(|(name, _)| name == "jobs") {
        Some((_, kind)) if kind == "table" => {}
        Some((_, kind)) => {
            return Err(incompatible(path, format!("jobs is a {kind}, not a table")));
        }
        None => return Err(incompatible(path, "there is no jobs table")),
    }
    let found = &schema.jobs_columns;
    for (name, kind, not_null, default, primary_key) in found {
        let Some(want) = COLUMNS.iter().find(|c| c.name.eq_ignore_ascii_case(name)) else {
            return Err(incompatible(
                path,
                format!("jobs has an unexpected column {name}"),
            ));
        };
        let default = default.as_deref().map(str::trim);
        if !want.kind.eq_ignore_ascii_case(kind)
            || want.not_null != *not_null
            || want.default != default
            || want.primary_key != *primary_key
        {
            return Err(incompatible(
                path,
                format!(
                    "jobs.{name} is declared {}, expected {}",
                    declared(kind, *not_null, default, *primary_key),
                    declared(want.kind, want.not_null, want.default, want.primary_key),
                ),
            ));
        }
    }
    if let Some(missing) = COLUMNS
        .iter()
        .find(|c| !found.iter().any(|f| c.name.eq_ignore_ascii_case(&f.0)))
    {
        return Err(incompatible(
            path,
            format!("jobs has no {} column", missing.name),
        ));
    }
    Ok(())
}

fn declared(kind: &str, not_null: bool, default: Option<&str>, primary_key: bool) -> String {
    format!(
        "{kind}{}{}{}",
        if not_null { " NOT NULL" } else { "" },
        default.map(|d| format!(" DEFAULT {d}")).unwrap_or_default(),
        if primary_key { " PRIMARY KEY" } else { "" },
    )
}

/// Inside an open write transaction: creates the table (when `create` and the file is empty),
/// marks an unmarked contract database, or leaves a current lease database alone.
///
/// # Errors
/// [`StoreError::NotFound`] for an empty database when `create` is false; the refusals of
/// [`classify`]; SQLite errors. The caller rolls back on any error.
pub(crate) fn prepare(conn: &Connection, path: &str, create: bool) -> Result<(), OpenError> {
    let schema = read(conn).map_err(error::open_step(conn))?;
    match classify(&schema, path)? {
        Found::Lease(SCHEMA_VERSION) => Ok(()),
        Found::Empty if !create => Err(StoreError::NotFound {
            path: path.to_owned(),
        }
        .into()),
        Found::Empty | Found::Unmarked | Found::Lease(_) => {
            create_and_mark(conn).map_err(error::open_step(conn))
        }
    }
}

/// Creates what is missing of the current schema (every statement is idempotent, so the same
/// code creates a new file, marks a seed file and upgrades version 1) and marks the file.
fn create_and_mark(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(CREATE_JOBS)?;
    conn.execute_batch(CREATE_QUEUE)?;
    conn.pragma_update(None, "application_id", APPLICATION_ID)?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(app: i32, version: i32, objects: &[(&str, &str)]) -> Schema {
        let jobs_columns = if objects.contains(&("jobs", "table")) {
            COLUMNS
                .iter()
                .map(|c| {
                    (
                        c.name.to_owned(),
                        c.kind.to_owned(),
                        c.not_null,
                        c.default.map(str::to_owned),
                        c.primary_key,
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        Schema {
            application_id: app,
            user_version: version,
            objects: objects
                .iter()
                .map(|(n, k)| ((*n).to_owned(), (*k).to_owned()))
                .collect(),
            jobs_columns,
        }
    }

    #[test]
    fn each_kind_of_file_is_judged_by_its_markers_and_tables() {
        let jobs = [("jobs", "table")];
        assert_eq!(classify(&schema(0, 0, &[]), "f").unwrap(), Found::Empty);
        assert_eq!(
            classify(&schema(0, 0, &jobs), "f").unwrap(),
            Found::Unmarked
        );
        assert_eq!(
            classify(&schema(APPLICATION_ID, 1, &jobs), "f").unwrap(),
            Found::Lease(1)
        );
        assert_eq!(
            classify(&schema(APPLICATION_ID, 2, &jobs), "f").unwrap(),
            Found::Lease(2)
        );
        let refused = [
            (
                schema(0, 0, &[("users", "table")]),
                "another program (users)",
            ),
            (
                schema(0, 0, &[("jobs", "table"), ("users", "table")]),
                "(users)",
            ),
            (schema(0, 0, &[("jobs", "view")]), "jobs is a view"),
            (schema(0, 7, &[]), "user_version 7"),
            (schema(1234, 0, &[]), "application_id 0x4d2"),
            (
                schema(APPLICATION_ID, 3, &jobs),
                "schema version 3 is newer",
            ),
            (schema(APPLICATION_ID, 1, &[]), "no jobs table"),
        ];
        for (found, why) in refused {
            let err = classify(&found, "f").unwrap_err();
            assert!(
                matches!(err, StoreError::Incompatible { .. }) && err.to_string().contains(why),
                "{found:?}: {err}"
            );
        }
    }
}
