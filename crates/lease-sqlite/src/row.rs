//! The row codec: a job as the `jobs` and `jobs_queue` rows hold it, read back (every stored
//! value checked, anything no lease rule could write is `Corrupt`) and written.

use lease_domain::{Fence, Job, JobId, Owner, QueueName, Status, Timestamp, TokenDigest};
use lease_ports::StoreError;
use lease_ports::codec::{self};
use rusqlite::Connection;
use rusqlite::types::ValueRef;

use crate::error;

/// Loads one job, its queue fields joined (a missing queue row reads as the defaults).
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const SELECT_JOB: &str = "SELECT j.owner, j.until, j.fence, j.result, j.done, q.queue, \
    q.priority, q.run_at, q.attempts, q.max_attempts, q.payload, q.finished, q.error, \
    q.result_fence, q.updated, q.token, q.timeout, q.progress, q.grp, q.on_parent_failure \
    FROM jobs j \
    LEFT JOIN jobs_queue q ON q.id = j.id WHERE j.id = ?1";

/// Stores the contract's columns of a decided job over its row.
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const UPDATE_JOB: &str =
    "UPDATE jobs SET owner = ?2, until = ?3, fence = ?4, result = ?5, done = ?6 WHERE id = ?1";

/// Stores the contract's columns of a decided job that had no row (a trigger adds its queue row).
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const INSERT_JOB: &str =
    "INSERT INTO jobs(id, owner, until, fence, result, done) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// Stores the queue's columns of a decided job, keeping its enqueue order (`seq`), and files
/// it in the ready set (`leased_until`: `Job::leased_until`).
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const UPSERT_QUEUE: &str = "INSERT INTO jobs_queue(id, queue, priority, run_at, attempts, \
    max_attempts, payload, finished, error, result_fence, updated, leased_until, token, timeout, \
    progress, grp, on_parent_failure) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17) \
    ON CONFLICT(id) DO UPDATE SET \
    queue = excluded.queue, priority = excluded.priority, run_at = excluded.run_at, \
    attempts = excluded.attempts, max_attempts = excluded.max_attempts, \
    payload = excluded.payload, finished = excluded.finished, error = excluded.error, \
    result_fence = excluded.result_fence, updated = excluded.updated, \
    leased_until = excluded.leased_until, token = excluded.token, timeout = excluded.timeout, \
    progress = excluded.progress, grp = excluded.grp, \
    on_parent_failure = excluded.on_parent_failure";

/// Stores the queue's columns of a decided job over its existing queue row (most writes:
/// cheaper than the upsert's failed insert); a job whose queue row is missing gets one by
/// [`UPSERT_QUEUE`].
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const UPDATE_QUEUE: &str = "UPDATE jobs_queue SET queue = ?2, priority = ?3, \
    run_at = ?4, attempts = ?5, max_attempts = ?6, payload = ?7, finished = ?8, error = ?9, \
    result_fence = ?10, updated = ?11, leased_until = ?12, token = ?13, timeout = ?14, \
    progress = ?15, grp = ?16, on_parent_failure = ?17 WHERE id = ?1";

const SELECT_PARENTS: &str = "SELECT parent FROM lease_parents WHERE child = ?1 ORDER BY ord";

/// Runs `sql`, a statement with the one parameter `id`.
pub(crate) fn run_with(conn: &Connection, sql: &str, id: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([id]))
        .map(drop)
        .map_err(error::sql(conn))
}

/// The parents of `child`, in the order first named.
pub(crate) fn parents(conn: &Connection, child: &JobId) -> Result<Vec<JobId>, StoreError> {
    let mut stmt = conn
        .prepare_cached(SELECT_PARENTS)
        .map_err(error::sql(conn))?;
    let ids: Vec<String> = stmt
        .query_map([child.as_str()], |r| r.get(0))
        .and_then(Iterator::collect)
        .map_err(error::sql(conn))?;
    ids.into_iter().map(lease_ports::codec::job_id).collect()
}

pub(crate) fn corrupt(id: &JobId, what: String) -> StoreError {
    StoreError::Corrupt(format!("job {id}: {what}").into())
}

/// Reads one column as text, or NULL; anything else (a number, a blob, text that is not UTF-8)
/// is corrupt data that names the job and the column.
pub(crate) fn text(
    id: &JobId,
    row: &rusqlite::Row<'_>,
    index: usize,
    column: &'static str,
) -> Result<Option<String>, StoreError> {
    match row.get_ref(index).map_err(error::before_commit)? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(bytes) => String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|e| corrupt(id, format!("stored {column} is not valid UTF-8 text ({e})"))),
        other => Err(corrupt(
            id,
            format!("stored {column} is {:?}, not text", other.data_type()),
        )),
    }
}

/// Reads one numeric column, or NULL; `until` may be stored as an integer (`DEFAULT 0`).
pub(crate) fn number(
    id: &JobId,
    row: &rusqlite::Row<'_>,
    index: usize,
    column: &'static str,
) -> Result<Option<Timestamp>, StoreError> {
    let value = match row.get_ref(index).map_err(error::before_commit)? {
        ValueRef::Null => return Ok(None),
        ValueRef::Real(x) => x,
        // Integers of up to 2^53 convert exactly; a larger stored time is still a time.
        ValueRef::Integer(n) => n as f64,
        other => {
            return Err(corrupt(
                id,
                format!("stored {column} is {:?}, not a number", other.data_type()),
            ));
        }
    };
    Timestamp::new(value)
        .map(Some)
        .map_err(|_| corrupt(id, format!("stored {column} {value} is not finite")))
}

pub(crate) fn integer(
    id: &JobId,
    row: &rusqlite::Row<'_>,
    index: usize,
    column: &'static str,
) -> Result<Option<i64>, StoreError> {
    match row.get_ref(index).map_err(error::before_commit)? {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(n) => Ok(Some(n)),
        other => Err(corrupt(
            id,
            format!("stored {column} is {:?}, not an integer", other.data_type()),
        )),
    }
}

pub(crate) fn required<T>(
    id: &JobId,
    value: Option<T>,
    column: &'static str,
) -> Result<T, StoreError> {
    value.ok_or_else(|| corrupt(id, format!("stored {column} is NULL")))
}

pub(crate) fn fence_of(id: &JobId, stored: i64, column: &'static str) -> Result<Fence, StoreError> {
    Fence::try_from(stored).map_err(|f| corrupt(id, format!("stored {column} {f} is negative")))
}

pub(crate) fn count(
    id: &JobId,
    stored: Option<i64>,
    column: &'static str,
    default: u32,
) -> Result<u32, StoreError> {
    stored.map_or(Ok(default), |n| {
        u32::try_from(n).map_err(|_| corrupt(id, format!("stored {column} {n} is out of range")))
    })
}

/// Turns a stored row into a job, refusing values no rule could have written.
pub(crate) fn decode(id: &JobId, row: &rusqlite::Row<'_>) -> Result<Job, StoreError> {
    let owner = text(id, row, 0, "owner")?
        .map(Owner::stored)
        .transpose()
        .map_err(|e| corrupt(id, format!("stored owner: {e}")))?;
    let until = required(id, number(id, row, 1, "until")?, "until")?;
    let fence = fence_of(
        id,
        required(id, integer(id, row, 2, "fence")?, "fence")?,
        "fence",
    )?;
    let result = text(id, row, 3, "result")?;
    let done = match required(id, integer(id, row, 4, "done")?, "done")? {
        0 => false,
        1 => true,
        other => {
            return Err(corrupt(
                id,
                format!("stored done {other} is neither 0 nor 1"),
            ));
        }
    };
    let queue = match text(id, row, 5, "queue")? {
        Some(name) => {
            QueueName::stored(name).map_err(|e| corrupt(id, format!("stored queue: {e}")))?
        }
        None => QueueName::default(),
    };
    let finished = text(id, row, 11, "finished")?;
    let (ended, waiting) = codec::stands(finished.as_deref(), "stored finished")?;
    if (ended.is_some() || waiting) && done {
        return Err(corrupt(
            id,
            format!("stored finished {finished:?} does not fit done = {done}"),
        ));
    }
    let payload = match row.get_ref(10).map_err(error::before_commit)? {
        ValueRef::Null => None,
        ValueRef::Blob(bytes) => Some(bytes.to_vec()),
        other => {
            return Err(corrupt(
                id,
                format!("stored payload is {:?}, not a blob", other.data_type()),
            ));
        }
    };
    Ok(Job {
        owner,
        until,
        fence,
        result,
        done,
        queue,
        priority: integer(id, row, 6, "priority")?.unwrap_or(0),
        run_at: number(id, row, 7, "run_at")?,
        attempts: count(id, integer(id, row, 8, "attempts")?, "attempts", 0)?,
        max_attempts: count(
            id,
            integer(id, row, 9, "max_attempts")?,
            "max_attempts",
            lease_domain::EnqueueSpec::DEFAULT_MAX_ATTEMPTS,
        )?,
        payload,
        ended,
        error: text(id, row, 12, "error")?,
        result_fence: integer(id, row, 13, "result_fence")?
            .map(|f| fence_of(id, f, "result_fence"))
            .transpose()?,
        updated: number(id, row, 14, "updated")?,
        token: match row.get_ref(15).map_err(error::before_commit)? {
            ValueRef::Null => None,
            ValueRef::Blob(bytes) => Some(
                TokenDigest::from_slice(bytes)
                    .map_err(|e| corrupt(id, format!("stored token: {e}")))?,
            ),
            other => {
                return Err(corrupt(
                    id,
                    format!("stored token is {:?}, not a blob", other.data_type()),
                ));
            }
        },
        timeout: number(id, row, 16, "timeout")?
            .map(|t| {
                lease_domain::Ttl::new(t.get())
                    .map_err(|_| corrupt(id, format!("stored timeout {t} is not above 0")))
            })
            .transpose()?,
        progress: text(id, row, 17, "progress")?,
        group: text(id, row, 18, "grp")?
            .map(lease_domain::GroupKey::stored)
            .transpose()
            .map_err(|e| corrupt(id, format!("stored group: {e}")))?,
        waiting,
        // Read by `load` from `lease_parents` when the policy says the job has parents.
        after: Vec::new(),
        on_parent_failure: match text(id, row, 19, "on_parent_failure")? {
            None => lease_domain::OnParentFailure::default(),
            Some(policy) => lease_domain::OnParentFailure::parse(&policy)
                .map_err(|e| corrupt(id, format!("stored on_parent_failure: {e}")))?,
        },
    })
}

/// Whether the stored row says the job has parents (a policy is kept only for those).
fn has_parents(row: &rusqlite::Row<'_>) -> bool {
    matches!(row.get_ref(19), Ok(ValueRef::Text(_)))
}

pub(crate) fn load(conn: &Connection, id: &JobId) -> Result<Option<Job>, StoreError> {
    let mut stmt = conn.prepare_cached(SELECT_JOB).map_err(error::sql(conn))?;
    let mut rows = stmt.query([id.as_str()]).map_err(error::sql(conn))?;
    let Some(row) = rows.next().map_err(error::sql(conn))? else {
        return Ok(None);
    };
    let mut job = decode(id, row)?;
    if has_parents(row) {
        job.after = parents(conn, id)?;
    }
    Ok(Some(job))
}

/// What the `finished` column holds: the job's end, or `waiting` while it waits for its
/// parents (kept there so the indexes of jobs that can run leave it out), else NULL.
pub(crate) fn finished_text(job: &Job) -> Option<&'static str> {
    job.finished()
        .or(job.waiting.then_some(Status::Waiting))
        .map(Status::as_str)
}

pub(crate) fn store(
    conn: &Connection,
    inserting: bool,
    id: &JobId,
    job: &Job,
) -> Result<(), StoreError> {
    let contract = || {
        let sql = if inserting { INSERT_JOB } else { UPDATE_JOB };
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
            .map(drop)
            .map_err(error::sql(conn))
    };
    // A new job's queue row goes first: the insert trigger (for rows other programs insert)
    // then finds it and adds nothing, instead of adding a row this would rewrite.
    if !inserting {
        contract()?;
    }
    let queue_row = |sql: &str| {
        conn.prepare_cached(sql)
            .and_then(|mut stmt| {
                stmt.execute(rusqlite::params![
                    id.as_str(),
                    job.queue.as_str(),
                    job.priority,
                    job.run_at.map(Timestamp::get),
                    job.attempts,
                    job.max_attempts,
                    job.payload.as_deref(),
                    finished_text(job),
                    job.error.as_deref(),
                    job.result_fence.map(i64::from),
                    job.updated.map(Timestamp::get),
                    job.leased_until().map(Timestamp::get),
                    job.token.as_ref().map(TokenDigest::as_bytes),
                    job.timeout.map(lease_domain::Ttl::get),
                    job.progress.as_deref(),
                    job.group.as_ref().map(lease_domain::GroupKey::as_str),
                    (!job.after.is_empty()).then(|| job.on_parent_failure.as_str()),
                ])
            })
            .map_err(error::sql(conn))
    };
    if inserting || queue_row(UPDATE_QUEUE)? == 0 {
        queue_row(UPSERT_QUEUE)?;
    }
    if inserting {
        contract()?;
    }
    Ok(())
}
