//! The store operations over one connection: each write is one `BEGIN IMMEDIATE` transaction
//! that loads the job, asks `lease_domain` for the decision, stores it and commits.

use lease_domain::{
    Fence, Job, JobId, JobResult, LeaseTerm, Owner, Timestamp, decide_claim, decide_complete,
    decide_release, decide_renew,
};
use lease_ports::{ClaimOutcome, JobState, StoreError, WriteOutcome};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::error;

const SELECT_JOB: &str = "SELECT owner, until, fence, result, done FROM jobs WHERE id = ?1";
const UPDATE_JOB: &str =
    "UPDATE jobs SET owner = ?2, until = ?3, fence = ?4, result = ?5, done = ?6 WHERE id = ?1";
const INSERT_JOB: &str = "INSERT INTO jobs(id, owner, until, fence, result, done) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(id) DO NOTHING";

/// A stored row before its values are checked.
type Row = (Option<String>, f64, i64, Option<String>, i64);

fn corrupt(id: &JobId, what: String) -> StoreError {
    StoreError::Corrupt(format!("job {id}: {what}"))
}

/// Turns a stored row into a job, refusing values no lease rule could have written.
fn decode(id: &JobId, (owner, until, fence, result, done): Row) -> Result<Job, StoreError> {
    let owner = owner
        .map(Owner::new)
        .transpose()
        .map_err(|e| corrupt(id, format!("stored owner: {e}")))?;
    let until = Timestamp::new(until)
        .map_err(|_| corrupt(id, format!("stored until {until} is not finite")))?;
    let fence =
        Fence::try_from(fence).map_err(|f| corrupt(id, format!("stored fence {f} is negative")))?;
    let done = match done {
        0 => false,
        1 => true,
        other => {
            return Err(corrupt(
                id,
                format!("stored done {other} is neither 0 nor 1"),
            ));
        }
    };
    Ok(Job {
        owner,
        until,
        fence,
        result,
        done,
    })
}

fn load(conn: &Connection, id: &JobId) -> Result<Option<Job>, StoreError> {
    let row: Option<Row> = conn
        .prepare_cached(SELECT_JOB)
        .and_then(|mut stmt| {
            stmt.query_row([id.as_str()], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .optional()
        })
        .map_err(error::before_commit)?;
    row.map(|row| decode(id, row)).transpose()
}

fn bind_and_run(conn: &Connection, sql: &str, id: &JobId, job: &Job) -> Result<usize, StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| {
            stmt.execute(rusqlite::params![
                id.as_str(),
                job.owner.as_ref().map(Owner::as_str),
                job.until.get(),
                i64::from(job.fence),
                job.result.as_deref(),
                job.done,
            ])
        })
        .map_err(error::before_commit)
}

/// Runs `body` inside one `BEGIN IMMEDIATE` transaction; commits iff it asks to.
fn immediate<T>(
    conn: &mut Connection,
    body: impl FnOnce(&Connection) -> Result<(T, bool), StoreError>,
) -> Result<T, StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(error::before_commit)?;
    let (answer, commit) = body(&tx)?;
    if commit {
        tx.commit().map_err(error::at_commit)?;
    }
    // Otherwise dropping the transaction rolls it back: a refusal writes nothing.
    Ok(answer)
}

/// Loads the job, decides, and stores the decision; a refusal stores nothing.
fn write<T, R>(
    conn: &mut Connection,
    id: &JobId,
    decide: impl FnOnce(Option<&Job>) -> Result<(Job, T), R>,
) -> Result<Result<T, R>, StoreError> {
    immediate(conn, |tx| match decide(load(tx, id)?.as_ref()) {
        Ok((next, answer)) => {
            bind_and_run(tx, UPDATE_JOB, id, &next)?;
            Ok((Ok(answer), true))
        }
        Err(refused) => Ok((Err(refused), false)),
    })
}

pub(crate) fn enqueue(conn: &mut Connection, id: &JobId) -> Result<bool, StoreError> {
    immediate(conn, |tx| {
        let inserted = bind_and_run(tx, INSERT_JOB, id, &Job::new())? == 1;
        Ok((inserted, inserted))
    })
}

pub(crate) fn state(conn: &Connection, id: &JobId) -> Result<Option<JobState>, StoreError> {
    Ok(load(conn, id)?.map(|job| JobState::new(id, job)))
}

pub(crate) fn claim(
    conn: &mut Connection,
    id: &JobId,
    owner: &Owner,
    term: LeaseTerm,
) -> Result<ClaimOutcome, StoreError> {
    write(conn, id, |current| {
        decide_claim(current, owner, term).map(|next| {
            let fence = next.fence;
            (next, fence)
        })
    })
}

pub(crate) fn renew(
    conn: &mut Connection,
    id: &JobId,
    owner: &Owner,
    fence: Fence,
    term: LeaseTerm,
) -> Result<WriteOutcome, StoreError> {
    write(conn, id, |current| {
        decide_renew(current, owner, fence, term).map(|next| (next, ()))
    })
}

pub(crate) fn complete(
    conn: &mut Connection,
    id: &JobId,
    owner: &Owner,
    fence: Fence,
    now: Timestamp,
    result: &JobResult,
) -> Result<WriteOutcome, StoreError> {
    write(conn, id, |current| {
        decide_complete(current, owner, fence, now, result).map(|next| (next, ()))
    })
}

pub(crate) fn release(
    conn: &mut Connection,
    id: &JobId,
    owner: &Owner,
    fence: Fence,
) -> Result<WriteOutcome, StoreError> {
    write(conn, id, |current| {
        decide_release(current, owner, fence).map(|next| (next, ()))
    })
}
