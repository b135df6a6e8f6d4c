//! One command on one job inside the open transaction: load the row, let the domain decide,
//! store what it decided (and the purge mark of an id enqueued again). The queue's ops and its
//! control (a schedule's fire enqueues through it) both write jobs this way.

use lease_domain::{Change, Command, Fence, Job, JobId, Outcome};
use lease_ports::StoreError;
use rusqlite::Connection;

use crate::error;
use crate::row::{fence_of, load, run_with, store};

pub(crate) const SELECT_PURGED: &str = "SELECT fence FROM purged WHERE id = ?1";

pub(crate) const FORGET_PURGED: &str = "DELETE FROM purged WHERE id = ?1";

pub(crate) const REMEMBER_PURGED: &str = "INSERT INTO purged(id, fence) VALUES (?1, ?2) \
    ON CONFLICT(id) DO UPDATE SET fence = max(fence, excluded.fence)";

/// The fence a purged id had, when it was purged and not enqueued since.
pub(crate) fn purged_fence(conn: &Connection, id: &JobId) -> Result<Option<Fence>, StoreError> {
    let stored: Option<i64> = conn
        .prepare_cached(SELECT_PURGED)
        .and_then(|mut stmt| {
            let mut rows = stmt.query([id.as_str()])?;
            rows.next()?.map(|r| r.get(0)).transpose()
        })
        .map_err(error::sql(conn))?;
    stored.map(|f| fence_of(id, f, "purged fence")).transpose()
}

/// Loads, decides and stores one command inside the open transaction, recording a refused
/// holder's write in the audit trail when `audit` gives its retention; says whether it wrote.
pub(crate) fn apply_command(
    conn: &Connection,
    id: &JobId,
    command: &Command,
    audit: Option<u64>,
) -> Result<(Outcome, bool), StoreError> {
    if let Command::EnqueueWith(spec) = command {
        crate::workflow::check(conn, &[(id.clone(), spec.clone())])?;
    }
    if let Command::Claim(..) = command {
        // A claim hands out its fence in the epoch read in its transaction.
        let command = command.clone().in_epoch(crate::epoch::read(conn)?);
        return decide(conn, id, &command, audit, None);
    }
    decide(conn, id, command, audit, None)
}

/// Enqueues a batch inside the open transaction, all or nothing: its workflow is checked
/// before anything is written, then each job is decided and stored in order, then each job
/// with parents is judged against them (a parent may come later in the batch).
pub(crate) fn enqueue_batch(
    conn: &Connection,
    jobs: &[(JobId, lease_domain::EnqueueSpec)],
) -> Result<(Vec<Outcome>, bool), StoreError> {
    crate::workflow::check(conn, jobs)?;
    let mut judged = Vec::new();
    let mut outcomes = Vec::with_capacity(jobs.len());
    let mut wrote = false;
    for (id, spec) in jobs {
        let command = Command::EnqueueWith(spec.clone());
        let (outcome, inserted) = decide(conn, id, &command, None, Some(&mut judged))?;
        wrote |= inserted;
        outcomes.push(outcome);
    }
    for id in judged {
        crate::workflow::judge(conn, &id)?;
    }
    Ok((outcomes, wrote))
}

/// [`apply_command`] after any check of its workflow; with `judged`, a job to be judged
/// against its parents is added there instead of judged now (a batch judges after it is
/// all written).
fn decide(
    conn: &Connection,
    id: &JobId,
    command: &Command,
    audit: Option<u64>,
    judged: Option<&mut Vec<JobId>>,
) -> Result<(Outcome, bool), StoreError> {
    let current = load(conn, id)?;
    let purged = match current {
        None if command.is_enqueue() => purged_fence(conn, id)?,
        _ => None,
    };
    let decided = command.decided(id, current.as_ref(), purged);
    lease_ports::observe::decided(command, current.as_ref(), &decided);
    let wrote = decided.writes() || (audit.is_some() && decided.refused().is_some());
    match judged {
        Some(judged) => write_changes(conn, id, decided.changes, audit, judged)?,
        None => write_all(conn, id, decided.changes, audit)?,
    }
    Ok((decided.outcome, wrote))
}

/// Writes the changes of one decision on job `id`, in their order, judging the job (if it
/// is) at the end; a refusal goes to the audit trail when `audit` gives its retention.
pub(crate) fn write_all(
    conn: &Connection,
    id: &JobId,
    changes: Vec<Change>,
    audit: Option<u64>,
) -> Result<(), StoreError> {
    let mut judged = Vec::new();
    write_changes(conn, id, changes, audit, &mut judged)?;
    for id in judged {
        crate::workflow::judge(conn, &id)?;
    }
    Ok(())
}

/// Writes the changes of one decision on job `id`, in their order; a job to judge goes to
/// `judged` (a batch judges once it is all written).
fn write_changes(
    conn: &Connection,
    id: &JobId,
    changes: Vec<Change>,
    audit: Option<u64>,
    judged: &mut Vec<JobId>,
) -> Result<(), StoreError> {
    let mut row = None;
    for change in changes {
        write_change(conn, id, change, &mut row, audit, judged)?;
    }
    Ok(())
}

/// Writes one change of a decision on job `id` (SQLite's arm of every [`Change`]): `row` keeps
/// the row written, for the changes that follow it; a job to judge goes to `judged`; a refusal
/// goes to the audit trail when `audit` gives its retention.
fn write_change(
    conn: &Connection,
    id: &JobId,
    change: Change,
    row: &mut Option<Job>,
    audit: Option<u64>,
    judged: &mut Vec<JobId>,
) -> Result<(), StoreError> {
    match change {
        Change::Queue(queue, change) => {
            crate::control::change_queue(conn, &queue, change).map(drop)
        }
        Change::Checkpoint(checkpoint, fence, at) => {
            crate::checkpoint::keep(conn, id, &checkpoint, fence, at)
        }
        Change::ClearCheckpoints => crate::checkpoint::clear(conn, id),
        Change::Row { job, insert } => {
            store(conn, insert, id, &job)?;
            *row = Some(job);
            Ok(())
        }
        Change::ForgetPurged => run_with(conn, FORGET_PURGED, id.as_str()),
        Change::Trace(trace) => crate::trace::set(conn, id, trace.as_ref()),
        Change::Parents => match row {
            Some(job) => crate::workflow::write_parents(conn, id, job),
            None => Err(no_row(id, "parents")),
        },
        Change::Judge => {
            judged.push(id.clone());
            Ok(())
        }
        Change::Release(end, at) => crate::workflow::release(conn, id, end, at),
        Change::Attempt(attempt) => crate::attempts::keep(conn, id, &attempt),
        Change::Refused(entry) => match audit {
            Some(retention) => crate::audit::record_refusal(conn, retention, id, &entry),
            None => Ok(()),
        },
    }
}

/// A change that follows a job's row came without one: the domain gave them out of order.
fn no_row(id: &JobId, what: &str) -> StoreError {
    StoreError::Corrupt(format!("job {id}: its {what} were to be written before its row").into())
}
