//! One command on one job inside the open transaction: load the row, let the domain decide,
//! store what it decided (and the purge mark of an id enqueued again). The queue's ops and its
//! control (a schedule's fire enqueues through it) both write jobs this way.

use lease_domain::{Command, Fence, JobId, Outcome, finishes, judges_parents};
use lease_ports::StoreError;
use rusqlite::Connection;

use crate::error;
use crate::row::{fence_of, load, store};

pub(crate) const SELECT_PURGED: &str = "SELECT fence FROM purged WHERE id = ?1";

pub(crate) const FORGET_PURGED: &str = "DELETE FROM purged WHERE id = ?1";

pub(crate) const REMEMBER_PURGED: &str = "INSERT INTO purged(id, fence) VALUES (?1, ?2) \
    ON CONFLICT(id) DO UPDATE SET fence = max(fence, excluded.fence)";

pub(crate) fn run_with(conn: &Connection, sql: &str, id: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([id]))
        .map(drop)
        .map_err(error::sql(conn))
}

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

/// Loads, decides and stores one command inside the open transaction; says whether it wrote.
pub(crate) fn apply_command(
    conn: &Connection,
    id: &JobId,
    command: &Command,
) -> Result<(Outcome, bool), StoreError> {
    decide_command(conn, id, command).map(|(outcome, wrote, _)| (outcome, wrote))
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
        let (outcome, inserted, _) = decide(conn, id, &command, Some(&mut judged))?;
        wrote |= inserted;
        outcomes.push(outcome);
    }
    for id in judged {
        crate::workflow::judge(conn, &id)?;
    }
    Ok((outcomes, wrote))
}

/// [`apply_command`], also giving the refusal of a holder's write (for the audit trail).
pub(crate) fn decide_command(
    conn: &Connection,
    id: &JobId,
    command: &Command,
) -> Result<(Outcome, bool, Option<lease_domain::Refusal>), StoreError> {
    if let Command::EnqueueWith(spec) = command {
        crate::workflow::check(conn, &[(id.clone(), spec.clone())])?;
    }
    if let Command::Claim(..) = command {
        // A claim hands out its fence in the epoch read in its transaction.
        let command = command.clone().in_epoch(crate::epoch::read(conn)?);
        return decide(conn, id, &command, None);
    }
    decide(conn, id, command, None)
}

/// [`decide_command`] after any check of its workflow; with `judged`, a job to be judged
/// against its parents is added there instead of judged now (a batch judges after it is
/// all written).
fn decide(
    conn: &Connection,
    id: &JobId,
    command: &Command,
    judged: Option<&mut Vec<JobId>>,
) -> Result<(Outcome, bool, Option<lease_domain::Refusal>), StoreError> {
    let current = load(conn, id)?;
    let purged = match current {
        None if command.is_enqueue() => purged_fence(conn, id)?,
        _ => None,
    };
    let (next, outcome) = command.decide(id, current.as_ref(), purged);
    let refused = lease_ports::observe::decided(command, current.as_ref(), &outcome);
    // A hold of the job's group changes its queue's settings in this transaction.
    if let Some((queue, change)) = command.queue_change(current.as_ref(), &outcome) {
        crate::control::change_queue(conn, &queue, change)?;
        return Ok((outcome, true, refused));
    }
    // A checkpoint is kept beside the job, which it leaves as it is.
    if let Some((checkpoint, fence, at)) = command.checkpoint(&outcome) {
        crate::checkpoint::keep(conn, id, checkpoint, fence, at)?;
        return Ok((outcome, true, refused));
    }
    if command.clears_checkpoints(current.as_ref(), next.as_ref()) {
        crate::checkpoint::clear(conn, id)?;
    }
    let Some(next) = next else {
        return Ok((outcome, false, refused));
    };
    store(conn, current.is_none(), id, &next)?;
    if current.is_none() && purged.is_some() {
        run_with(conn, FORGET_PURGED, id.as_str())?;
    }
    if let Some(trace) = command.sets_trace(current.as_ref(), Some(&next)) {
        crate::trace::set(conn, id, trace)?;
    }
    // An enqueue that inserts the job or runs it again writes its parents (a run again may
    // name others, or none).
    let started = current.as_ref().is_none_or(|c| c.finished().is_some());
    if command.is_enqueue() && started && (current.is_some() || !next.after.is_empty()) {
        crate::workflow::write_parents(conn, id, &next)?;
    }
    if judges_parents(current.as_ref(), &next) {
        match judged {
            Some(later) => later.push(id.clone()),
            None => crate::workflow::judge(conn, id)?,
        }
    }
    if let Some(end) = finishes(current.as_ref(), &next) {
        crate::workflow::release(conn, id, end, next.updated)?;
    }
    Ok((outcome, true, None))
}
