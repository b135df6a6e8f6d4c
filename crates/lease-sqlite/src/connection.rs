//! Opening connections: the checks on the target path, the per-connection settings, and
//! making a newly created file durable.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use lease_ports::StoreError;
use rusqlite::{Connection, OpenFlags};

use crate::{error, schema};

/// SQLite's `synchronous` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is synced before it is acknowledged: an acknowledged fence survives power
    /// loss. The default, and the only setting under which the fence guarantees hold.
    #[default]
    Full,
    /// Explicit opt-in: faster commits, but a power cut can roll back commits that were already
    /// acknowledged, and a rolled-back fence is then handed out a second time.
    /// Process crashes (`kill -9`) are still safe.
    Normal,
}

impl Synchronous {
    fn pragma_value(self) -> i64 {
        match self {
            Synchronous::Full => 2,
            Synchronous::Normal => 1,
        }
    }
}

/// How to open a SQLite lease store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Create the database file when it does not exist (its directory must exist).
    pub create: bool,
    /// The `synchronous` setting; keep [`Synchronous::Full`] unless you accept reissued fences
    /// after a power cut.
    pub synchronous: Synchronous,
    /// How long a writer waits for the database lock before failing with
    /// [`StoreError::Unavailable`].
    pub busy_timeout: Duration,
    /// The largest number of pooled connections.
    pub pool_size: u32,
    /// A cap on the database size in pages (`PRAGMA max_page_count`); a write that would pass it
    /// fails with [`StoreError::Full`] and changes nothing. `None` leaves SQLite's default.
    pub max_pages: Option<u32>,
    /// Group commit: the most writes one transaction (one sync) may carry when callers of this
    /// store write at the same time. 1 turns group commit off: each write then runs in its own
    /// transaction on its own pooled connection, and concurrent writers wait on SQLite's lock.
    pub max_batch: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            create: true,
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(30),
            pool_size: 16,
            max_pages: None,
            max_batch: 128,
        }
    }
}

/// The first bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Checks the path before SQLite touches it, so a wrong target is refused without writing to it.
/// Returns whether the file has yet to be created.
pub(crate) fn check_target(path: &Path, create: bool) -> Result<bool, StoreError> {
    let shown = path.display().to_string();
    let incompatible = |reason: &str| StoreError::Incompatible {
        path: shown.clone(),
        reason: reason.to_owned(),
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(incompatible("it is a directory")),
        Ok(meta) if !meta.is_file() => Err(incompatible("it is not a regular file")),
        Ok(meta) if meta.len() == 0 => Ok(false),
        Ok(_) => {
            let mut header = [0_u8; 16];
            let mut file = File::open(path)
                .map_err(|e| StoreError::Unavailable(format!("cannot read {shown}: {e}")))?;
            let read = file.read(&mut header).unwrap_or(0);
            if read < header.len() || &header != SQLITE_HEADER {
                return Err(incompatible("it is not an SQLite database"));
            }
            // Opening for writing changes nothing, and tells a read-only file or file system
            // apart from other open failures, which SQLite reports only as "unable to open".
            OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| read_only_or_unavailable(&shown, &e))?;
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !create {
                return Err(StoreError::NotFound { path: shown });
            }
            let parent = parent_dir(path);
            if !parent.is_dir() {
                return Err(StoreError::Unavailable(format!(
                    "cannot create {shown}: directory {} does not exist",
                    parent.display()
                )));
            }
            // Create the (empty) file here so a read-only directory gets a clear error; SQLite
            // treats an empty file as a new database.
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| read_only_or_unavailable(&shown, &e))?;
            Ok(true)
        }
        Err(e) => Err(StoreError::Unavailable(format!(
            "cannot inspect {shown}: {e}"
        ))),
    }
}

fn read_only_or_unavailable(shown: &str, err: &std::io::Error) -> StoreError {
    match err.kind() {
        std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied => {
            StoreError::ReadOnly(format!("{shown} cannot be written: {err}"))
        }
        _ => StoreError::Unavailable(format!("cannot open {shown} for writing: {err}")),
    }
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The oldest SQLite this store runs on: 3.51.3 fixes the WAL-reset bug that could corrupt a
/// WAL database when a checkpoint and a writer race.
pub const MIN_SQLITE_VERSION: i32 = 3_051_003;

/// Refuses an SQLite library older than [`MIN_SQLITE_VERSION`].
pub(crate) fn check_sqlite_version(version: i32) -> Result<(), String> {
    if version < MIN_SQLITE_VERSION {
        return Err(format!(
            "SQLite {}.{}.{} is older than 3.51.3, which fixes a WAL-reset corruption bug",
            version / 1_000_000,
            version / 1_000 % 1_000,
            version % 1_000
        ));
    }
    Ok(())
}

/// Applies and verifies the settings every connection must have.
pub(crate) fn configure(conn: &Connection, options: &SqliteOptions) -> rusqlite::Result<()> {
    check_sqlite_version(rusqlite::version_number()).map_err(setting_error)?;
    // The busy timeout goes first so that switching to WAL waits for other openers.
    conn.busy_timeout(options.busy_timeout)?;
    let wanted_ms = i64::try_from(options.busy_timeout.as_millis()).unwrap_or(i64::MAX);
    let busy_ms: i64 = conn.pragma_query_value(None, "busy_timeout", |r| r.get(0))?;
    if busy_ms != wanted_ms.min(i64::from(i32::MAX)) {
        return Err(setting_error(format!(
            "busy_timeout is {busy_ms} ms, not {wanted_ms} ms"
        )));
    }
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(setting_error(format!("journal_mode is {mode}, not wal")));
    }
    if let Some(pages) = options.max_pages {
        let set: u32 = conn.pragma_update_and_check(None, "max_page_count", pages, |r| r.get(0))?;
        if set != pages {
            return Err(setting_error(format!(
                "max_page_count is {set}, not {pages} (the file is already larger)"
            )));
        }
    }
    let wanted = options.synchronous.pragma_value();
    conn.pragma_update(None, "synchronous", wanted)?;
    let synchronous: i64 = conn.pragma_query_value(None, "synchronous", |r| r.get(0))?;
    if synchronous != wanted {
        return Err(setting_error(format!(
            "synchronous is {synchronous}, not {wanted}"
        )));
    }
    Ok(())
}

fn setting_error(message: String) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
        Some(format!("unsafe connection: {message}")),
    )
}

/// The flags for connections to a file that must already exist.
pub(crate) fn existing_file_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// Opens one configured connection without any schema check (the file was checked before).
pub(crate) fn connect(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let conn =
        Connection::open_with_flags(path, existing_file_flags()).map_err(error::before_commit)?;
    configure(&conn, options).map_err(error::before_commit)?;
    Ok(conn)
}

/// Checks the target, opens (creating when allowed), configures, and makes sure the schema is
/// there. A newly created file is made durable by syncing its directory.
pub(crate) fn open(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let creating = check_target(path, options.create)?;
    let mut flags = existing_file_flags();
    if creating {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let mut conn = Connection::open_with_flags(path, flags).map_err(error::before_commit)?;
    configure(&conn, options).map_err(error::before_commit)?;
    schema::ensure(&mut conn, &path.display().to_string())?;
    if creating {
        sync_dir(parent_dir(path))?;
    }
    Ok(conn)
}

/// SQLite syncs the file but not the directory entry that names it; without this a power cut
/// can lose a new database file and every fence in it.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| {
        StoreError::Unavailable(format!("cannot sync directory {}: {e}", dir.display()))
    })
}

/// The settings of one connection, as SQLite reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// `PRAGMA journal_mode` (`wal`).
    pub journal_mode: String,
    /// `PRAGMA synchronous` (2 = FULL, 1 = NORMAL).
    pub synchronous: i64,
    /// `PRAGMA busy_timeout` in milliseconds.
    pub busy_timeout_ms: i64,
    /// The linked SQLite library's version.
    pub sqlite_version: String,
}

pub(crate) fn read_settings(conn: &Connection) -> Result<ConnectionSettings, StoreError> {
    let read = || -> rusqlite::Result<ConnectionSettings> {
        Ok(ConnectionSettings {
            journal_mode: conn.pragma_query_value(None, "journal_mode", |r| r.get(0))?,
            synchronous: conn.pragma_query_value(None, "synchronous", |r| r.get(0))?,
            busy_timeout_ms: conn.pragma_query_value(None, "busy_timeout", |r| r.get(0))?,
            sqlite_version: rusqlite::version().to_owned(),
        })
    };
    read().map_err(error::before_commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_older_than_3_51_3_is_refused() {
        let err = check_sqlite_version(3_051_002).unwrap_err();
        assert!(err.contains("3.51.2 is older than 3.51.3"), "{err}");
        assert!(check_sqlite_version(3_051_003).is_ok());
        assert!(check_sqlite_version(rusqlite::version_number()).is_ok());
    }
}
