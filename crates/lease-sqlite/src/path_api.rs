//! The seed-contract API: synchronous, path-based functions over the store's operations.
//!
//! Inputs are checked before the file is touched, so bad input changes nothing. A process
//! keeps the connection it opened for a path (for the last [`KEPT_PATHS`] paths it called
//! with) and checks, on every call, that the path still names the file it was opened on (its
//! device and inode) in the process that opened it: a file deleted or replaced since is opened
//! afresh, and a forked child opens its own. Each call then does only its statement's work
//! (a new connection parses the lease schema and rebuilds the log's index: more than half of
//! a call). Long-lived callers should still use [`SqliteLeaseStore`](crate::SqliteLeaseStore).
//!
//! A call leaves the write-ahead log in place when it closes (SQLite would otherwise checkpoint
//! it into the main file and delete it, and the next call would make it again: five syncs a
//! write where the commit needs one), and a write empties it once it passes 128 KiB. Every
//! acknowledged write is as durable in the log as in the main file; a copy of the database
//! must take its `-wal` file with it (as with any SQLite file in WAL mode).

use std::path::{Path, PathBuf};
use std::sync::{Barrier, Mutex};
use std::thread;

use lease_domain::{Command, Fence, JobId, JobResult, LeaseTerm, Owner, Timestamp};
use lease_ports::{ClaimOutcome, FromOutcome, JobState, StoreError, WriteOutcome, outcome_as};
use rusqlite::Connection;

use crate::connection::{self, Access};
use crate::ops::{Op, Reply};
use crate::options::SqliteOptions;
use crate::reads;
use crate::tx;

/// Claim threads of [`claim_many`] at most; more owners share these threads.
const MAX_CLAIM_THREADS: usize = 64;

/// The size past which a call that wrote empties the write-ahead log it leaves behind: 32
/// pages. Each call's connection reads the whole log again when it opens (the first connection
/// to a file rebuilds the log's index), and emptying it costs a checkpoint (two syncs); 8 to
/// 128 pages measured alike (docs/PERFORMANCE.md).
const KEPT_LOG_BYTES: u64 = 32 * 4096;

/// The most paths a process keeps a connection for; the one used longest ago goes first.
pub const KEPT_PATHS: usize = 16;

/// A connection a process keeps for a path: the file it was opened on (device, inode) and the
/// process that opened it.
struct Kept {
    path: PathBuf,
    file: (u64, u64),
    pid: u32,
    opened: connection::Opened,
}

/// The connections this process keeps, the one used last at the end.
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

fn kept() -> std::sync::MutexGuard<'static, Vec<Kept>> {
    KEPT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Takes the entry for `path` out of `kept`, if there is one.
fn remove(kept: &mut Vec<Kept>, path: &Path) -> Option<Kept> {
    let at = kept.iter().position(|k| k.path == path)?;
    Some(kept.remove(at))
}

/// The file `path` names now (device, inode), if any (and one that can be opened: the checks
/// every open makes of the path, a hard link made since above all, are made on every call).
fn file_of(path: &Path) -> Result<Option<(u64, u64)>, StoreError> {
    crate::filesystem::identity(path, &path.display().to_string())
}

/// Takes the connection this process keeps for `path` when it was opened on `file` by this
/// process, on storage that could be written as now (`read_only`); any other kept for `path`
/// is let go ([`let_go`]).
fn take(path: &Path, file: (u64, u64), read_only: bool) -> Option<connection::Opened> {
    let mut kept = kept();
    // In a child made by `fork`, every connection inherited from the parent goes first (see
    // [`let_go`]), before this process opens its own to any of their files.
    let pid = std::process::id();
    if kept.iter().any(|k| k.pid != pid) {
        let (inherited, own): (Vec<Kept>, Vec<Kept>) = std::mem::take(&mut *kept)
            .into_iter()
            .partition(|k| k.pid != pid);
        *kept = own;
        drop(kept);
        inherited.into_iter().for_each(let_go);
        kept = self::kept();
    }
    let found = remove(&mut kept, path)?;
    drop(kept);
    let was_read_only = matches!(found.opened.access, Access::ReadOnly { .. });
    if found.file == file && was_read_only == read_only {
        return Some(found.opened);
    }
    let_go(found);
    None
}

/// Keeps `opened` for `path` (opened on `file`) for the next call, letting go of the one used
/// longest ago past [`KEPT_PATHS`].
fn keep(path: &Path, file: (u64, u64), opened: connection::Opened) {
    let mut kept = kept();
    let mut gone: Vec<Kept> = remove(&mut kept, path).into_iter().collect();
    if kept.len() >= KEPT_PATHS {
        gone.push(kept.remove(0));
    }
    kept.push(Kept {
        path: path.to_owned(),
        file,
        pid: std::process::id(),
        opened,
    });
    drop(kept);
    gone.into_iter().for_each(let_go);
}

/// Lets go of a kept connection: closed, unless this process opened it on a file its path no
/// longer names, when it is left open and forgotten. A connection on a file since deleted or
/// replaced shares the path's `-wal` and `-shm` with the file now there, and closing it would
/// release this process's locks on them (POSIX locks belong to the process, and go with any
/// of its descriptors of the file). One inherited through `fork` is closed in the child: the
/// child holds none of the parent's locks, so closing its copies releases none of them, and
/// SQLite's record of the file in the child (inherited with it) must go before the child
/// opens the file itself. A closing connection never checkpoints or deletes the log
/// ([`connection::keep_log_on_close`]).
fn let_go(kept: Kept) {
    let inherited = std::process::id() != kept.pid;
    if inherited || file_of(&kept.path).is_ok_and(|file| file == Some(kept.file)) {
        drop(kept.opened);
    } else {
        std::mem::forget(kept.opened);
    }
}

/// Lets go of the connection this process keeps for `path`, if any (a store opened on the
/// path takes over: see [`let_go`]).
pub(crate) fn let_go_of(path: &Path) {
    let found = remove(&mut kept(), path);
    found.into_iter().for_each(let_go);
}

/// Runs `call` on a connection to the existing database at `path`: the one this process keeps
/// for it while the path names the same file, else one opened afresh (never creating a file).
/// A `write` on storage that can only be read is refused before any statement runs. The
/// connection is kept for the next call unless the call failed (a connection that saw an
/// error is not trusted again) or says not to (`call` answers with whether it may be kept).
fn with_connection<T>(
    path: &Path,
    write: bool,
    call: impl FnOnce(&mut Connection) -> Result<(T, bool), StoreError>,
) -> Result<T, StoreError> {
    // A kept connection is used only while the storage can be written as it could be when it
    // was opened (a mount made read-only since, or writable again, is opened afresh).
    let read_only = crate::filesystem::read_only_reason(path, "").is_some();
    // The file the path names now: the connection is kept as opened on it (one opened on a
    // file that replaced it in between is let go at the next call, as any other).
    let file = file_of(path)?;
    let kept = file.and_then(|file| take(path, file, read_only));
    let mut opened = match kept {
        Some(opened) => opened,
        None => opened(path)?,
    };
    if let (true, Access::ReadOnly { reason, .. }) = (write, &opened.access) {
        return Err(connection::can_only_be_read(path, reason));
    }
    let (answer, keeps) = call(&mut opened.conn)?;
    if let (true, Some(file)) = (keeps, file) {
        keep(path, file, opened);
    }
    Ok(answer)
}

/// Runs one write in its own transaction, on the connection [`with_connection`] gives.
fn execute<T: FromOutcome>(path: &Path, id: &JobId, command: Command) -> Result<T, StoreError> {
    let op = Op::Job(id.clone(), command);
    let reply = with_connection(path, true, |conn| {
        let reply = tx::execute(conn, &op)?;
        Ok((reply, keep_log_small(path, conn)))
    })?;
    outcome_as(reply.into_outcome()?)
}

/// After a commit: moves the log into the main file and empties it once it holds more than
/// [`KEPT_LOG_BYTES`]. Housekeeping, after the write committed: a checkpoint that cannot run
/// now (another connection reads an older snapshot) is left to a later call, without waiting
/// and without failing this one. Says whether the connection waits for locks as long as
/// before (only then is it kept for the next call).
fn keep_log_small(path: &Path, conn: &Connection) -> bool {
    let mut log = path.as_os_str().to_owned();
    log.push("-wal");
    if std::fs::metadata(&log).map_or(0, |m| m.len()) > KEPT_LOG_BYTES
        && conn.busy_timeout(std::time::Duration::ZERO).is_ok()
    {
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        return conn
            .busy_timeout(SqliteOptions::default().busy_timeout)
            .is_ok();
    }
    true
}

/// Opens an existing database afresh (never creates one), keeping the log past the close.
fn opened(path: &Path) -> Result<connection::Opened, StoreError> {
    let opened = connection::open(
        path,
        &SqliteOptions {
            create: false,
            ..SqliteOptions::default()
        },
    )?;
    connection::keep_log_on_close(&opened.conn, true)?;
    Ok(opened)
}

/// Opens an existing database for a write; storage that can only be read is refused here,
/// before any statement runs.
fn open_for_writing(path: &Path) -> Result<Connection, StoreError> {
    let opened = opened(path)?;
    match opened.access {
        Access::ReadWrite => Ok(opened.conn),
        Access::ReadOnly { reason, .. } => Err(connection::can_only_be_read(path, &reason)),
    }
}

/// Creates the lease database at `path`, or checks and keeps an existing one.
///
/// Idempotent; never overwrites or truncates a file. The directory must exist.
///
/// # Errors
/// [`StoreError::Incompatible`] for a directory or a file that is not a lease-compatible SQLite
/// database (left byte-for-byte unchanged); [`StoreError::Unavailable`] for a missing directory.
pub fn init_db(path: impl AsRef<Path>) -> Result<(), StoreError> {
    // On storage that can only be read, a database that is already current is ready (for
    // reading); one that would need creating or marking is refused as read-only.
    connection::open(path.as_ref(), &SqliteOptions::default()).map(drop)
}

/// Inserts `job_id` in the default state and returns `true`; if it exists, changes nothing and
/// returns `false`.
///
/// # Errors
/// [`StoreError::InvalidInput`] for an empty id; [`StoreError::NotFound`] when there is no
/// database (run [`init_db`] first); other [`StoreError`]s from storage.
pub fn enqueue(path: impl AsRef<Path>, job_id: &str) -> Result<bool, StoreError> {
    let id = JobId::new(job_id)?;
    execute(path.as_ref(), &id, Command::Enqueue)
}

/// The stored row of `job_id`, read from the file, or `None`.
///
/// # Errors
/// As [`enqueue`].
pub fn state(path: impl AsRef<Path>, job_id: &str) -> Result<Option<JobState>, StoreError> {
    let id = JobId::new(job_id)?;
    with_connection(path.as_ref(), false, |conn| {
        Ok((reads::state(conn, &id)?, true))
    })
}

/// Claims `job_id` for `owner` until `now + ttl` and returns the new fence, or `None` when the
/// job is missing, done, or leased (`until > now`).
///
/// # Errors
/// [`StoreError::InvalidInput`] for `ttl <= 0`, a non-finite `now` or `ttl`, or empty names;
/// nothing changes then. Other [`StoreError`]s as [`enqueue`].
pub fn claim(
    path: impl AsRef<Path>,
    job_id: &str,
    owner: &str,
    now: f64,
    ttl: f64,
) -> Result<Option<u64>, StoreError> {
    let (id, owner, term) = (
        JobId::new(job_id)?,
        Owner::new(owner)?,
        LeaseTerm::new(now, ttl)?,
    );
    let outcome: ClaimOutcome = execute(path.as_ref(), &id, Command::Claim(owner, term))?;
    Ok(outcome.ok().map(Fence::get))
}

/// Extends the live current lease to `now + ttl`; `false` (and nothing changes) unless owner
/// and fence match, the job is not done and `until > now`.
///
/// # Errors
/// As [`claim`], and [`StoreError::InvalidInput`] for a fence above `i64::MAX`.
pub fn renew(
    path: impl AsRef<Path>,
    job_id: &str,
    owner: &str,
    fence: u64,
    now: f64,
    ttl: f64,
) -> Result<bool, StoreError> {
    let (id, owner, fence) = (JobId::new(job_id)?, Owner::new(owner)?, Fence::new(fence)?);
    let term = LeaseTerm::new(now, ttl)?;
    let outcome: WriteOutcome = execute(path.as_ref(), &id, Command::Renew(owner, fence, term))?;
    Ok(outcome.is_ok())
}

/// Stores `result` and marks the job done, only for the live current lease; otherwise `false`
/// and the stored result is preserved.
///
/// # Errors
/// As [`renew`], and [`StoreError::InvalidInput`] for a result containing NUL.
pub fn complete(
    path: impl AsRef<Path>,
    job_id: &str,
    owner: &str,
    fence: u64,
    now: f64,
    result: &str,
) -> Result<bool, StoreError> {
    let (id, owner, fence) = (JobId::new(job_id)?, Owner::new(owner)?, Fence::new(fence)?);
    let (now, result) = (Timestamp::new(now)?, JobResult::new(result)?);
    let command = Command::Complete(owner, fence, now, result);
    let outcome: WriteOutcome = execute(path.as_ref(), &id, command)?;
    Ok(outcome.is_ok())
}

/// Gives the lease back (owner cleared, `until = 0`, fence kept) where owner and fence match
/// and the job is not done; otherwise `false`. There is no time condition.
///
/// # Errors
/// As [`renew`].
pub fn release(
    path: impl AsRef<Path>,
    job_id: &str,
    owner: &str,
    fence: u64,
) -> Result<bool, StoreError> {
    let (id, owner, fence) = (JobId::new(job_id)?, Owner::new(owner)?, Fence::new(fence)?);
    let outcome: WriteOutcome = execute(path.as_ref(), &id, Command::Release(owner, fence))?;
    Ok(outcome.is_ok())
}

/// Runs one claim per owner concurrently, on separate threads with separate connections, and
/// returns the outcomes in input order. For a free job exactly one owner gets a fence.
///
/// At most 64 threads run; with more owners, each thread claims for several owners in turn.
///
/// # Errors
/// Invalid input of any owner fails the whole call before anything is claimed. A storage error
/// in any claim is returned; claims by other owners may have been applied, which
/// [`state`] shows.
pub fn claim_many(
    path: impl AsRef<Path>,
    job_id: &str,
    owners: &[&str],
    now: f64,
    ttl: f64,
) -> Result<Vec<Option<u64>>, StoreError> {
    let id = JobId::new(job_id)?;
    let term = LeaseTerm::new(now, ttl)?;
    let owners = owners
        .iter()
        .map(|o| Owner::new(*o))
        .collect::<Result<Vec<_>, _>>()?;
    let path = path.as_ref();
    // Check, create the schema if needed and surface open errors once, before any thread runs.
    drop(open_for_writing(path)?);
    let threads = owners.len().min(MAX_CLAIM_THREADS);
    let options = SqliteOptions::default();
    let start = Barrier::new(threads);
    let mut outcomes: Vec<Option<Result<Option<u64>, StoreError>>> =
        (0..owners.len()).map(|_| None).collect();
    thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (owners, id, options, start) = (&owners, &id, &options, &start);
                scope.spawn(move || {
                    let conn = connection::connect(path, options);
                    // Every thread waits here, even one that failed to connect, so none waits forever.
                    start.wait();
                    let mut answers = Vec::new();
                    let mut conn = match conn {
                        Ok(conn) => conn,
                        Err(e) => return Err(e),
                    };
                    for i in (t..owners.len()).step_by(threads) {
                        let op = Op::Job(id.clone(), Command::Claim(owners[i].clone(), term));
                        let outcome = tx::execute(&mut conn, &op)
                            .and_then(Reply::into_outcome)
                            .and_then(outcome_as::<ClaimOutcome>)
                            .map(|o| o.ok().map(Fence::get));
                        answers.push((i, outcome));
                    }
                    Ok(answers)
                })
            })
            .collect();
        for handle in handles {
            let answers = handle.join().map_err(|_| {
                StoreError::Indeterminate("a claim thread panicked".to_owned().into())
            })??;
            for (i, outcome) in answers {
                outcomes[i] = Some(outcome);
            }
        }
        Ok::<(), StoreError>(())
    })?;
    outcomes
        .into_iter()
        .map(|o| {
            o.unwrap_or_else(|| {
                Err(StoreError::Indeterminate(
                    "a claim did not run".to_owned().into(),
                ))
            })
        })
        .collect()
}
