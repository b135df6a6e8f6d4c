//! Opening connections: the checks on the target path and its file system, a look at what the
//! file holds that writes nothing, the per-connection settings, and making a new file durable.

use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lease_ports::StoreError;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::error::{self, OpenError};
use crate::filesystem::{
    FileSystem, Target, check_filesystem, check_path, filesystem_of, hard_link_reason,
    incompatible, parent_dir, read_only_reason, sync_dir,
};
use crate::options::SqliteOptions;
use crate::schema::{self, Found, SCHEMA_VERSION};

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

/// How many prepared statements each connection keeps.
const STATEMENT_CACHE: usize = 128;

/// Applies and verifies the settings every read-write connection must have.
pub(crate) fn configure(conn: &Connection, options: &SqliteOptions) -> rusqlite::Result<()> {
    check_sqlite_version(rusqlite::version_number()).map_err(setting_error)?;
    // Room for every statement a write prepares (`prepare_cached`): rusqlite keeps 16, fewer
    // than a claim by heads under a rate runs, and a statement evicted is parsed again on its
    // next use (issue 54's profile: a claim under a rate per group ran at 2.5x the time).
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // A second name may have been linked to the file since the store was opened.
    if let Some(links) = conn
        .path()
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| m.nlink())
        .filter(|links| *links > 1)
    {
        return Err(setting_error(hard_link_reason(links)));
    }
    if options.exclusive {
        // Before the first WAL access, so that SQLite keeps the WAL index in heap memory.
        let mode: String =
            conn.pragma_update_and_check(None, "locking_mode", "EXCLUSIVE", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("exclusive") {
            return Err(setting_error(format!(
                "locking_mode is {mode}, not exclusive"
            )));
        }
        // Take the file's exclusive lock first, without waiting: a connection in exclusive
        // locking mode keeps the shared lock of its first read, so two processes that each
        // read first and then wait for the exclusive lock wait for each other until one gives
        // up after the whole busy timeout. Busy here, the caller drops this connection (and
        // its lock) and tries again with a new one until the busy timeout.
        conn.busy_timeout(Duration::ZERO)?;
        conn.execute_batch("BEGIN EXCLUSIVE; COMMIT")?;
    }
    // The busy timeout goes before the journal mode so that switching to WAL waits for other
    // openers.
    conn.busy_timeout(options.busy_timeout)?;
    let wanted_ms = i64::try_from(options.busy_timeout.as_millis()).unwrap_or(i64::MAX);
    let busy_ms: i64 = conn.pragma_query_value(None, "busy_timeout", |r| r.get(0))?;
    if busy_ms != wanted_ms.min(i64::from(i32::MAX)) {
        return Err(setting_error(format!(
            "busy_timeout is {busy_ms} ms, not {wanted_ms} ms"
        )));
    }
    let journal = journal_mode(conn, options);
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", journal, |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case(journal) {
        return Err(setting_error(format!(
            "journal_mode is {mode}, not {journal}"
        )));
    }
    if let Some(pages) = options.max_pages {
        let set: u32 = conn.pragma_update_and_check(None, "max_page_count", pages, |r| r.get(0))?;
        if set != pages {
            return Err(setting_error(format!(
                "max_page_count is {set}, not {pages} (the file is already larger)"
            )));
        }
    }
    let wanted = synchronous_for(journal, options.synchronous);
    conn.pragma_update(None, "synchronous", wanted)?;
    let synchronous: i64 = conn.pragma_query_value(None, "synchronous", |r| r.get(0))?;
    if synchronous != wanted {
        return Err(setting_error(format!(
            "synchronous is {synchronous}, not {wanted}"
        )));
    }
    if let Some(hook) = &options.on_connect {
        (hook.0)(conn)?;
    }
    Ok(())
}

/// The journal a read-write connection uses: the write-ahead log, except on a file system this
/// build cannot vouch for (FUSE, unknown; allowed only with `allow_unverified_filesystem`)
/// without `exclusive`. There the WAL index lives in memory mapped from the `-shm` file, which
/// such a file system may not keep coherent between processes (two of them were seen granting
/// one fence); the rollback journal uses file locks only. With `exclusive` one process holds
/// the file and keeps the WAL index in its own heap, so WAL is safe there.
pub(crate) fn journal_mode(conn: &Connection, options: &SqliteOptions) -> &'static str {
    let unverified = conn
        .path()
        .filter(|p| !p.is_empty())
        .and_then(|p| filesystem_of(Path::new(p), p).ok())
        .is_some_and(|kind| matches!(kind, FileSystem::Unverified(_)));
    journal_for(unverified, options.exclusive)
}

/// [`journal_mode`]'s rule, as a pure function.
pub(crate) fn journal_for(unverified_filesystem: bool, exclusive: bool) -> &'static str {
    if unverified_filesystem && !exclusive {
        "delete"
    } else {
        "wal"
    }
}

/// The `synchronous` level a connection runs at: the one asked for, except that `Full` on the
/// rollback journal is `EXTRA` (3). There a commit is final when its journal is unlinked, and
/// only `EXTRA` syncs the directory after the unlink: at `FULL` a power cut could bring the
/// journal back, and the next open would roll back a commit that was acknowledged.
pub(crate) fn synchronous_for(journal: &str, asked: crate::Synchronous) -> i64 {
    match asked {
        crate::Synchronous::Full if journal == "delete" => 3,
        asked => asked.pragma_value(),
    }
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

/// How the connections of a store reach the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read and write, with the settings of [`configure`].
    ReadWrite,
    /// Only read: the storage cannot be written, for the reason given. `target` is what SQLite
    /// opens (a URI), `flags` how.
    ReadOnly {
        reason: String,
        target: PathBuf,
        flags: OpenFlags,
    },
}

/// The error for a write to a store whose storage can only be read.
pub(crate) fn can_only_be_read(path: &Path, reason: &str) -> StoreError {
    StoreError::ReadOnly(format!("{} can only be read: {reason}", path.display()).into())
}

/// A file URI for `path` with `query`, escaping what URIs reserve.
fn file_uri(path: &Path, query: &str) -> PathBuf {
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/._-~".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push('?');
    uri.push_str(query);
    PathBuf::from(uri)
}

/// How to read a database on storage that cannot be written. Without a write-ahead log to
/// replay (no `-wal` file, or an empty one) every committed write is in the main file, which is
/// then opened `immutable` (no `-shm` file needed, no locks); otherwise read-only with SQLite's
/// usual locking, which needs the `-shm` file to exist.
fn read_only_access(path: &Path, reason: String) -> Access {
    let side_file_len = |suffix: &str| {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        std::fs::metadata(&side).map_or(0, |m| m.len())
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    // `immutable` reads the main file alone, without locks: right for a file at rest, wrong
    // with a write-ahead log to read, and wrong with a rollback journal that may be hot (an
    // interrupted commit): the main file may then hold half of that commit, which `mode=ro`
    // refuses to read (SQLITE_READONLY_ROLLBACK) and `immutable` would show as stored.
    let query = if side_file_len("-wal") == 0 && side_file_len("-journal") == 0 {
        "immutable=1"
    } else {
        "mode=ro"
    };
    Access::ReadOnly {
        reason,
        target: file_uri(path, query),
        flags,
    }
}

/// Opens one connection as `access` says; read-write connections get [`configure`]d.
pub(crate) fn connect_as(
    path: &Path,
    access: &Access,
    options: &SqliteOptions,
) -> Result<Connection, StoreError> {
    match access {
        Access::ReadWrite => connect(path, options),
        Access::ReadOnly { target, flags, .. } => {
            let conn = Connection::open_with_flags(target, *flags).map_err(error::before_commit)?;
            conn.busy_timeout(options.busy_timeout)
                .map_err(error::sql(&conn))?;
            Ok(conn)
        }
    }
}

/// With `keep`, leaves the write-ahead log in place when `conn` closes, even as the file's last
/// connection: no checkpoint, no deletion of the log and its index (without, SQLite's default). A call that opens the file afresh then
/// costs fewer syncs: the close's checkpoint and the next call's new log and index cost four
/// more than the commit's. Every commit in the log is as durable as in the main file. SQLite's
/// automatic checkpoints do not bound the log here (the first connection to a file rebuilds the
/// log's index and counts nothing in it as checkpointed, so the log never starts over), so the
/// caller empties it (`path_api`); a connection that closes without this setting checkpoints
/// it. Readers on storage that can only be read open a file whose log holds commits with
/// `mode=ro` (see [`read_only_access`]).
pub(crate) fn keep_log_on_close(conn: &Connection, keep: bool) -> Result<(), StoreError> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, keep)
        .map(drop)
        .map_err(error::sql(conn))
}

/// Opens one configured read-write connection without any schema check (the file was checked
/// when the store was opened).
pub(crate) fn connect(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let conn =
        Connection::open_with_flags(path, existing_file_flags()).map_err(error::before_commit)?;
    configure(&conn, options).map_err(error::sql(&conn))?;
    Ok(conn)
}

/// A checked database: one open connection, and how the store's connections reach the file.
pub(crate) struct Opened {
    pub(crate) conn: Connection,
    pub(crate) access: Access,
}

/// Checks the target, opens (creating when allowed), configures, and makes sure the schema is
/// there, writing nothing to a file before it is known to be a lease database (or, with
/// `create`, an empty one). A newly created file is made durable by syncing its directory.
///
/// Any number of processes and threads may open (and create) the same path at once: a lock
/// held by another opener is waited for, up to the busy timeout.
pub(crate) fn open(path: &Path, options: &SqliteOptions) -> Result<Opened, StoreError> {
    let shown = path.display().to_string();
    let mut created = false;
    let opened = retry_while_busy(&shown, options.busy_timeout, || {
        open_once(path, &shown, options, &mut created)
    })?;
    if created {
        sync_dir(parent_dir(path))?;
    }
    Ok(opened)
}

/// Runs `attempt` until it succeeds, fails for good, or stays busy past `timeout`. SQLite
/// returns BUSY at once (without its busy handler) in some races between openers, such as two
/// connections switching a new file to WAL; waiting a little and trying again resolves them.
pub(crate) fn retry_while_busy<T>(
    shown: &str,
    timeout: Duration,
    mut attempt: impl FnMut() -> Result<T, OpenError>,
) -> Result<T, StoreError> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match attempt() {
            Ok(done) => return Ok(done),
            Err(OpenError::Fail(e)) => return Err(e),
            Err(OpenError::Busy(_)) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(OpenError::Busy(e)) => {
                return Err(StoreError::Unavailable(
                    format!(
                        "{shown} stayed locked by another connection for the whole busy timeout \
                     ({timeout:?}): {e}"
                    )
                    .into(),
                ));
            }
        }
    }
}

fn open_once(
    path: &Path,
    shown: &str,
    options: &SqliteOptions,
    created: &mut bool,
) -> Result<Opened, OpenError> {
    if options.create {
        let parent = parent_dir(path);
        if !parent.is_dir() {
            return Err(StoreError::Unavailable(
                format!(
                    "cannot create {shown}: directory {} does not exist",
                    parent.display()
                )
                .into(),
            )
            .into());
        }
        check_filesystem(
            &filesystem_of(parent, shown)?,
            shown,
            options.allow_unverified_filesystem,
        )?;
        // Create the (empty) file exclusively: SQLite treats an empty file as a new database,
        // a read-only directory gets a clear error here, and when the path already exists
        // (made by another opener a moment ago, or long ago) this is the ordinary way on.
        match OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(_) => *created = true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(read_only_or_unavailable(shown, e).into()),
        }
    }
    if let Target::Missing = check_path(path, shown)? {
        return Err(StoreError::NotFound {
            path: shown.to_owned(),
            reason: "there is no file".into(),
        }
        .into());
    }
    check_filesystem(
        &filesystem_of(path, shown)?,
        shown,
        options.allow_unverified_filesystem,
    )?;
    let access = match read_only_reason(path, shown) {
        Some(reason) => read_only_access(path, reason),
        None => Access::ReadWrite,
    };
    let (found, inspected) = inspect(path, &access, options, shown)?;
    if found == Found::Empty && !options.create {
        return Err(StoreError::NotFound {
            path: shown.to_owned(),
            reason: "the file holds no database yet".into(),
        }
        .into());
    }
    if let Access::ReadOnly { reason, .. } = &access {
        return match found {
            // Version 2 has every table a read needs (version 3 adds the audit trail, which
            // reads as empty where it is missing).
            Found::Lease(v) if v >= 2 => Ok(Opened {
                conn: connect_as(path, &access, options)?,
                access,
            }),
            Found::Empty | Found::Unmarked | Found::Lease(_) => Err(StoreError::ReadOnly(
                format!("{shown} must be initialised or upgraded before use, but {reason}").into(),
            )
            .into()),
        };
    }
    let conn = match inspected {
        Some(conn) => {
            // A lease database (or an empty file): it closes as any other connection again.
            keep_log_on_close(&conn, false)?;
            conn
        }
        None => Connection::open_with_flags(path, existing_file_flags())
            .map_err(|e| OpenError::Fail(error::before_commit(e)))?,
    };
    configure(&conn, options).map_err(error::open_step(&conn))?;
    if found != Found::Lease(SCHEMA_VERSION) {
        // Create or mark under the write lock, judging the file again there: another process
        // may have done it (or written something else) since the look above.
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(error::open_step(&conn))?;
        let prepared = schema::prepare(&conn, shown, options.create).and_then(|()| {
            conn.execute_batch("COMMIT")
                .map_err(|e| OpenError::Fail(error::at_commit(e)))
        });
        if prepared.is_err() && !conn.is_autocommit() {
            // Nothing to do if the rollback fails: SQLite has then ended the transaction.
            let _ = conn.execute_batch("ROLLBACK");
        }
        prepared?;
    }
    Ok(Opened {
        conn,
        access: Access::ReadWrite,
    })
}

/// Reads what the file holds, in one transaction, and judges it. Nothing is written to the
/// file, whatever it turns out to be.
///
/// Where the store may write (and not in exclusive mode, whose locking mode must be set before
/// the first read), the reading connection can write, and it is returned to be configured and
/// used: the schema is then parsed once per opening, not once to judge and once to use (a
/// third of a seed call's time). It reads only, and it is set not to checkpoint when it
/// closes, so that dropping it over another program's file moves nothing into that file.
/// Otherwise the file is read through a read-only connection, and none is returned.
fn inspect(
    path: &Path,
    access: &Access,
    options: &SqliteOptions,
    shown: &str,
) -> Result<(Found, Option<Connection>), OpenError> {
    let (target, flags) = match access {
        Access::ReadWrite if !options.exclusive => (path.to_path_buf(), existing_file_flags()),
        Access::ReadWrite => (
            path.to_path_buf(),
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        ),
        Access::ReadOnly { target, flags, .. } => (target.clone(), *flags),
    };
    // The connection is returned with what it read, to name a failure by its system error.
    type Read = (Connection, rusqlite::Result<schema::Schema>);
    let read_schema = |flags: OpenFlags| -> Result<Read, OpenError> {
        let mut conn = Connection::open_with_flags(&target, flags)
            .map_err(|e| OpenError::Fail(error::before_commit(e)))?;
        if flags.contains(OpenFlags::SQLITE_OPEN_READ_WRITE) {
            keep_log_on_close(&conn, true)?;
        }
        conn.busy_timeout(options.busy_timeout)
            .map_err(error::open_step(&conn))?;
        let read = conn.transaction().and_then(|tx| {
            let found = schema::read(&tx)?;
            tx.commit()?;
            Ok(found)
        });
        Ok((conn, read))
    };
    let (mut conn, mut read) = read_schema(flags)?;
    if read.as_ref().is_err_and(is_hot_journal) {
        // A commit in rollback-journal mode was interrupted (a kill, a power cut) after its
        // journal was written and before it was deleted: the file may hold half of that
        // commit, and only a connection that can write may roll it back (SQLite does so on
        // its first read). That is recovery, not a write of ours: any SQLite writer must do
        // it before reading, and it leaves the file at its last committed state.
        (conn, read) = match access {
            Access::ReadWrite => read_schema(existing_file_flags())?,
            Access::ReadOnly { reason, .. } => {
                return Err(StoreError::ReadOnly(
                    format!(
                        "{shown} holds a hot journal (a commit was interrupted, by a kill or a \
                         power cut) that only a process that can write to it can roll back, \
                         and {reason}; open it once where it can be written"
                    )
                    .into(),
                )
                .into());
            }
        };
    }
    let found = match read {
        Ok(found) => found,
        Err(e @ rusqlite::Error::SqliteFailure(f, _)) if f.code == ErrorCode::NotADatabase => {
            let why = lease_ports::Detail::caused_by("it is not an SQLite database", e);
            return Err(incompatible(shown, why).into());
        }
        Err(e) => {
            return Err(match (error::open_step(&conn)(e), access) {
                (
                    OpenError::Fail(StoreError::Unavailable(why)),
                    Access::ReadOnly { reason, .. },
                ) => StoreError::ReadOnly(
                    format!(
                        "cannot read {shown}: {reason}, and its write-ahead log holds changes \
                         not yet in the main file, which SQLite can read only through a -shm \
                         file it cannot create there ({why})"
                    )
                    .into(),
                )
                .into(),
                (other, _) => other,
            });
        }
    };
    let found = schema::classify(&found, shown)?;
    // In exclusive mode a connection that could write may have been opened to roll back a hot
    // journal; it has read already, so it is not the one to use.
    let reuse = matches!(access, Access::ReadWrite) && !options.exclusive;
    Ok((found, reuse.then_some(conn)))
}

/// Whether a read failed because the file has a hot journal that this read-only connection
/// cannot roll back (`SQLITE_READONLY_ROLLBACK`).
fn is_hot_journal(err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_READONLY_ROLLBACK
    )
}

fn read_only_or_unavailable(shown: &str, err: std::io::Error) -> StoreError {
    match err.kind() {
        std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied => {
            StoreError::ReadOnly(lease_ports::Detail::caused_by(
                format!("{shown} cannot be written: {err}"),
                err,
            ))
        }
        _ => StoreError::Unavailable(lease_ports::Detail::caused_by(
            format!("cannot open {shown} for writing: {err}"),
            err,
        )),
    }
}

/// The settings of one connection, as SQLite reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// `PRAGMA journal_mode` (`wal`).
    pub journal_mode: String,
    /// `PRAGMA synchronous` (3 = EXTRA, the rollback journal's `Full`; 2 = FULL; 1 = NORMAL).
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
    use std::sync::Arc;

    use super::*;
    use crate::filesystem::{FUSE_MAGIC, FileSystem, check_filesystem, classify_filesystem};
    use crate::options::ConnectHook;

    #[test]
    fn the_rollback_journal_is_used_exactly_on_unverified_file_systems_without_exclusive() {
        assert_eq!(journal_for(true, false), "delete");
        assert_eq!(journal_for(true, true), "wal");
        assert_eq!(journal_for(false, false), "wal");
        assert_eq!(journal_for(false, true), "wal");
    }

    #[test]
    fn full_on_the_rollback_journal_syncs_the_directory_too_and_normal_stays_normal() {
        use crate::Synchronous;
        assert_eq!(synchronous_for("delete", Synchronous::Full), 3);
        assert_eq!(synchronous_for("wal", Synchronous::Full), 2);
        assert_eq!(synchronous_for("delete", Synchronous::Normal), 1);
        assert_eq!(synchronous_for("wal", Synchronous::Normal), 1);
    }

    #[test]
    fn network_file_systems_are_refused_and_fuse_needs_an_opt_in() {
        for (magic, name) in [(0x6969, "NFS"), (0xFF53_4D42, "CIFS"), (0x517B, "SMB")] {
            let kind = classify_filesystem(magic);
            assert_eq!(kind, FileSystem::Network(name));
            for allow in [false, true] {
                let err = check_filesystem(&kind, "f.db", allow).unwrap_err();
                assert!(err.to_string().contains(name), "{err}");
            }
        }
        for magic in [FUSE_MAGIC, 0x1234_5678] {
            let kind = classify_filesystem(magic);
            assert!(matches!(kind, FileSystem::Unverified(_)), "{kind:?}");
            let err = check_filesystem(&kind, "f.db", false).unwrap_err();
            assert!(err.to_string().contains("--allow-unverified-fs"), "{err}");
            assert!(check_filesystem(&kind, "f.db", true).is_ok());
        }
        assert!(err_free(&classify_filesystem(0x0102_1994)));
        assert!(err_free(&classify_filesystem(0xEF53)));
    }

    fn err_free(kind: &FileSystem) -> bool {
        check_filesystem(kind, "f.db", false).is_ok()
    }

    #[test]
    fn fuse_and_unknown_file_systems_are_named_as_such() {
        assert_eq!(
            classify_filesystem(FUSE_MAGIC),
            FileSystem::Unverified("FUSE".to_owned())
        );
        assert_eq!(
            classify_filesystem(0x1234_5678),
            FileSystem::Unverified("unknown (statfs type 0x12345678)".to_owned())
        );
    }

    fn busy() -> OpenError {
        OpenError::Busy(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        ))
    }

    #[test]
    fn a_busy_open_is_tried_again_until_it_succeeds_within_the_timeout() {
        let mut tries = 0;
        let opened = retry_while_busy("f.db", Duration::from_secs(5), || {
            tries += 1;
            if tries < 3 { Err(busy()) } else { Ok(tries) }
        });
        assert_eq!(opened.unwrap(), 3);
    }

    #[test]
    fn an_open_that_stays_busy_fails_after_the_timeout_and_says_so() {
        let started = Instant::now();
        let err = retry_while_busy("f.db", Duration::from_millis(50), || Err::<(), _>(busy()))
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        assert!(
            err.to_string()
                .contains("for the whole busy timeout (50ms)"),
            "{err}"
        );
    }

    #[test]
    fn a_final_failure_is_returned_at_once() {
        let mut tries = 0;
        let err = retry_while_busy("f.db", Duration::from_secs(5), || {
            tries += 1;
            Err::<(), _>(OpenError::Fail(StoreError::Corrupt("x".into())))
        })
        .unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)));
        assert_eq!(tries, 1);
    }

    #[test]
    fn the_connect_hook_shows_without_its_closure() {
        let hook = ConnectHook(Arc::new(|_: &Connection| Ok(())));
        assert_eq!(format!("{hook:?}"), "ConnectHook(..)");
    }

    #[test]
    fn every_new_connection_refuses_a_file_with_a_second_link() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        drop(open(&path, &SqliteOptions::default()).unwrap());
        assert!(connect(&path, &SqliteOptions::default()).is_ok());
        std::fs::hard_link(&path, dir.path().join("b.db")).unwrap();
        let err = connect(&path, &SqliteOptions::default()).unwrap_err();
        assert!(err.to_string().contains("2 hard links"), "{err}");
    }

    #[test]
    fn file_uris_escape_reserved_characters() {
        assert_eq!(
            file_uri(Path::new("/tmp/a b?#%.db"), "immutable=1"),
            PathBuf::from("file:/tmp/a%20b%3F%23%25.db?immutable=1")
        );
    }

    #[test]
    fn sqlite_older_than_3_51_3_is_refused() {
        let err = check_sqlite_version(3_051_002).unwrap_err();
        assert!(err.contains("3.51.2 is older than 3.51.3"), "{err}");
        assert!(check_sqlite_version(3_051_003).is_ok());
        assert!(check_sqlite_version(rusqlite::version_number()).is_ok());
    }
}
