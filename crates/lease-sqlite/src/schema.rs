//! The schema: the `jobs` table of the contract, the file markers, and the checks at open.

use lease_ports::StoreError;
use rusqlite::{Connection, TransactionBehavior};

use crate::error;

/// `PRAGMA application_id` of a lease database ("LEAS").
pub const APPLICATION_ID: i32 = 0x4C45_4153;

/// `PRAGMA user_version`: the schema version this code writes and reads.
pub const SCHEMA_VERSION: i32 = 1;

/// The contract's table. Other programs may insert rows with only `id`.
const CREATE_JOBS: &str = "CREATE TABLE IF NOT EXISTS jobs(
    id TEXT PRIMARY KEY,
    owner TEXT,
    until REAL NOT NULL DEFAULT 0,
    fence INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    done INTEGER NOT NULL DEFAULT 0
)";

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

fn incompatible(path: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Incompatible {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn markers(conn: &Connection) -> Result<(i32, i32), StoreError> {
    let app = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(error::before_commit)?;
    let version = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(error::before_commit)?;
    Ok((app, version))
}

/// Makes sure the file holds a usable `jobs` table, creating and marking it when needed.
///
/// Creating is idempotent and never drops or rewrites data. A file marked by another program,
/// a newer schema version, or a `jobs` table whose columns differ from the contract is refused.
pub(crate) fn ensure(conn: &mut Connection, path: &str) -> Result<(), StoreError> {
    let (app, version) = markers(conn)?;
    check_markers(path, app, version)?;
    if app == APPLICATION_ID && version == SCHEMA_VERSION {
        return verify_jobs_table(conn, path);
    }
    // First open of a new or unmarked file: create and mark under the write lock, re-checking
    // the markers there because another process may have done it first.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(error::before_commit)?;
    let (app, version) = markers(&tx)?;
    check_markers(path, app, version)?;
    tx.execute_batch(CREATE_JOBS)
        .map_err(error::before_commit)?;
    verify_jobs_table(&tx, path)?;
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(error::before_commit)?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(error::before_commit)?;
    tx.commit().map_err(error::at_commit)
}

fn check_markers(path: &str, app: i32, version: i32) -> Result<(), StoreError> {
    match (app, version) {
        (APPLICATION_ID, v) if v > SCHEMA_VERSION => Err(incompatible(
            path,
            format!("schema version {v} is newer than this build supports ({SCHEMA_VERSION})"),
        )),
        (APPLICATION_ID, _) | (0, 0) => Ok(()),
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

fn verify_jobs_table(conn: &Connection, path: &str) -> Result<(), StoreError> {
    let kind: Option<String> = conn
        .query_row(
            "SELECT type FROM sqlite_schema WHERE name = 'jobs'",
            [],
            |r| r.get(0),
        )
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })
        .map_err(error::before_commit)?;
    match kind.as_deref() {
        Some("table") => {}
        Some(other) => {
            return Err(incompatible(
                path,
                format!("jobs is a {other}, not a table"),
            ));
        }
        None => return Err(incompatible(path, "there is no jobs table")),
    }
    let mut stmt = conn
        .prepare("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('jobs')")
        .map_err(error::before_commit)?;
    let found = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, bool>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, i64>(4)? > 0,
            ))
        })
        .map_err(error::before_commit)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(error::before_commit)?;
    for (name, kind, not_null, default, primary_key) in &found {
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
                    "jobs.{name} is declared {kind}{}{}{}, expected {}{}{}{}",
                    if *not_null { " NOT NULL" } else { "" },
                    default.map(|d| format!(" DEFAULT {d}")).unwrap_or_default(),
                    if *primary_key { " PRIMARY KEY" } else { "" },
                    want.kind,
                    if want.not_null { " NOT NULL" } else { "" },
                    want.default
                        .map(|d| format!(" DEFAULT {d}"))
                        .unwrap_or_default(),
                    if want.primary_key { " PRIMARY KEY" } else { "" },
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
