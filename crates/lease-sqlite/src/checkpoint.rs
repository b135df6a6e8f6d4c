//! Checkpoints inside the open transaction: a granted checkpoint kept (a new name only while
//! the job keeps fewer than the limit, as `lease_domain::checkpoint_fits` says), a run again's
//! cleared, and the reads.

use lease_domain::{Checkpoint, Fence, JobId, KeptCheckpoint, Timestamp, checkpoint_fits};
use lease_ports::StoreError;
use rusqlite::{Connection, params};

use crate::error;

/// How many checkpoints `?1` keeps, and whether one is named `?2`.
const COUNT: &str = "SELECT count(*), coalesce(max(name = ?2), 0) FROM lease_checkpoints \
    WHERE job = ?1";

const UPSERT: &str = "INSERT INTO lease_checkpoints(job, name, value, fence, at) \
    VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(job, name) DO UPDATE SET value = excluded.value, \
    fence = excluded.fence, at = excluded.at";

const CLEAR: &str = "DELETE FROM lease_checkpoints WHERE job = ?1";

const SELECT: &str = "SELECT name, value, fence, at FROM lease_checkpoints WHERE job = ?1 \
    ORDER BY name";

const SELECT_ALL: &str = "SELECT job, name, value, fence, at FROM lease_checkpoints \
    ORDER BY job, name";

/// Keeps `checkpoint` of `job`, written by `fence` at `at`, if the job may keep it.
pub(crate) fn keep(
    conn: &Connection,
    job: &JobId,
    checkpoint: &Checkpoint,
    fence: Fence,
    at: Timestamp,
) -> Result<(), StoreError> {
    let key = job.as_str();
    let name = checkpoint.name.as_str();
    let (kept, named): (i64, i64) = conn
        .prepare_cached(COUNT)
        .and_then(|mut stmt| stmt.query_row(params![key, name], |r| Ok((r.get(0)?, r.get(1)?))))
        .map_err(error::sql(conn))?;
    let kept = usize::try_from(kept).unwrap_or(usize::MAX);
    checkpoint_fits(job, kept, named != 0)
        .map_err(|refused| StoreError::InvalidInput(refused.into()))?;
    let fence = i64::from(fence);
    let value = checkpoint.value.as_str();
    conn.prepare_cached(UPSERT)
        .and_then(|mut stmt| stmt.execute(params![key, name, value, fence, at.get()]))
        .map(drop)
        .map_err(error::sql(conn))
}

/// Deletes every checkpoint of `job`.
pub(crate) fn clear(conn: &Connection, job: &JobId) -> Result<(), StoreError> {
    crate::row::run_with(conn, CLEAR, job.as_str())
}

type Row = (String, String, String, i64, f64);

fn row(r: &rusqlite::Row<'_>, from: usize) -> rusqlite::Result<(String, String, i64, f64)> {
    Ok((
        r.get(from)?,
        r.get(from + 1)?,
        r.get(from + 2)?,
        r.get(from + 3)?,
    ))
}

/// The checkpoints `job` keeps, in name order.
pub(crate) fn of(conn: &Connection, job: &JobId) -> Result<Vec<KeptCheckpoint>, StoreError> {
    let rows: Vec<(String, String, i64, f64)> = conn
        .prepare_cached(SELECT)
        .and_then(|mut stmt| stmt.query_map([job.as_str()], |r| row(r, 0))?.collect())
        .map_err(error::sql(conn))?;
    rows.into_iter()
        .map(|(name, value, fence, at)| {
            lease_ports::codec::checkpoint(job.as_str(), name, value, fence, at)
        })
        .collect()
}

/// Every job's checkpoints, in job then name order.
pub(crate) fn all(conn: &Connection) -> Result<Vec<(JobId, KeptCheckpoint)>, StoreError> {
    let rows: Vec<Row> = conn
        .prepare_cached(SELECT_ALL)
        .and_then(|mut stmt| {
            stmt.query_map([], |r| {
                let (name, value, fence, at) = row(r, 1)?;
                Ok((r.get(0)?, name, value, fence, at))
            })?
            .collect()
        })
        .map_err(error::sql(conn))?;
    rows.into_iter()
        .map(|(job, name, value, fence, at)| {
            let kept = lease_ports::codec::checkpoint(&job, name, value, fence, at)?;
            let id = lease_ports::codec::job_id(job)?;
            Ok((id, kept))
        })
        .collect()
}

/// Writes `checkpoints` as they are (an import), replacing any of the same job and name.
pub(crate) fn put(
    conn: &Connection,
    checkpoints: &[(JobId, KeptCheckpoint)],
) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(UPSERT).map_err(error::sql(conn))?;
    for (job, kept) in checkpoints {
        let fence = i64::from(kept.fence);
        stmt.execute(params![
            job.as_str(),
            kept.name.as_str(),
            kept.value.as_str(),
            fence,
            kept.at.get()
        ])
        .map_err(error::sql(conn))?;
    }
    Ok(())
}
