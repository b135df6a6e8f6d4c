//! The seed-contract API: synchronous, path-based functions over the store's operations.
//!
//! Inputs are checked before the file is touched, so bad input changes nothing. Each call
//! opens the file afresh (no process cache), which keeps it correct when the file is deleted
//! and re-created between calls; long-lived callers should use [`SqliteLeaseStore`](crate::SqliteLeaseStore).
//!
//! A call leaves the write-ahead log in place when it closes (SQLite would otherwise checkpoint
//! it into the main file and delete it, and the next call would make it again: five syncs a
//! write where the commit needs one), and a write empties it once it passes 128 KiB. Every
//! acknowledged write is as durable in the log as in the main file; a copy of the database
//! must take its `-wal` file with it (as with any SQLite file in WAL mode).

use std::path::Path;
use std::sync::Barrier;
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

/// Opens the file afresh and runs one write in its own transaction.
fn execute<T: FromOutcome>(path: &Path, id: &JobId, command: Command) -> Result<T, StoreError> {
    let op = Op::Job(id.clone(), command);
    let mut conn = open_for_writing(path)?;
    let reply = tx::execute(&mut conn, &op)?;
    keep_log_small(path, &conn);
    outcome_as(reply.into_outcome()?)
}

/// After a commit: moves the log into the main file and empties it once it holds more than
/// [`KEPT_LOG_BYTES`]. Housekeeping, after the write committed: a checkpoint that cannot run
/// now (another connection reads an older snapshot) is left to a later call, without waiting
/// and without failing this one.
fn keep_log_small(path: &Path, conn: &Connection) {
    let mut log = path.as_os_str().to_owned();
    log.push("-wal");
    if std::fs::metadata(&log).map_or(0, |m| m.len()) > KEPT_LOG_BYTES
        && conn.busy_timeout(std::time::Duration::ZERO).is_ok()
    {
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
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

fn open_existing(path: &Path) -> Result<Connection, StoreError> {
    Ok(opened(path)?.conn)
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
    reads::state(&open_existing(path.as_ref())?, &id)
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
