//! A job's ended attempts inside the open transaction: kept by the decision that ends one
//! (`lease_domain::Change::Attempt`), read apart from the job.

use lease_domain::{Attempt, Attempts, JobId};
use lease_ports::StoreError;
use lease_ports::codec::StoredAttempt;
use rusqlite::{Connection, params};

use crate::error;

const INSERT: &str = "INSERT INTO lease_attempts(job, fence, owner, started, ended, outcome, \
    error) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(job, fence) DO NOTHING";

/// Drops all but the latest kept attempts of a job (`?2` of them, by fence).
const TRIM: &str = "DELETE FROM lease_attempts WHERE job = ?1 AND fence < \
    (SELECT fence FROM lease_attempts WHERE job = ?1 ORDER BY fence DESC LIMIT 1 OFFSET ?2 - 1)";

const SELECT: &str = "SELECT fence, owner, started, ended, outcome, error FROM lease_attempts \
    WHERE job = ?1 ORDER BY fence";

const SELECT_ALL: &str = "SELECT job, fence, owner, started, ended, outcome, error \
    FROM lease_attempts ORDER BY job, fence";

const CLEAR: &str = "DELETE FROM lease_attempts WHERE job = ?1";

/// Keeps an ended attempt of `job`: ended by this host's clock when its decision carried no
/// time (a release).
pub(crate) fn keep(conn: &Connection, job: &JobId, attempt: &Attempt) -> Result<(), StoreError> {
    let ended = match attempt.ended {
        Some(at) => at,
        None => crate::clock::host_now()?,
    };
    conn.prepare_cached(INSERT)
        .and_then(|mut stmt| {
            stmt.execute(params![
                job.as_str(),
                i64::try_from(attempt.fence.get()).unwrap_or(i64::MAX),
                attempt.owner.as_str(),
                attempt.started.map(lease_domain::Timestamp::get),
                ended.get(),
                attempt.end.as_str(),
                attempt.error.as_deref(),
            ])
        })
        .map_err(error::sql(conn))?;
    if lease_domain::trims_attempts(attempt.fence) {
        let kept = i64::try_from(lease_domain::ATTEMPTS_KEPT).unwrap_or(i64::MAX);
        conn.prepare_cached(TRIM)
            .and_then(|mut stmt| stmt.execute(params![job.as_str(), kept]))
            .map_err(error::sql(conn))?;
    }
    Ok(())
}

/// `job`'s kept attempts, by fence.
pub(crate) fn read(conn: &Connection, job: &JobId) -> Result<Attempts, StoreError> {
    let rows: Vec<StoredAttempt> = conn
        .prepare_cached(SELECT)
        .and_then(|mut stmt| {
            stmt.query_map([job.as_str()], |r| stored(r, 0))
                .and_then(Iterator::collect)
        })
        .map_err(error::sql(conn))?;
    let kept = rows
        .into_iter()
        .map(|row| lease_ports::codec::attempt(job.as_str(), row))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Attempts::of(kept))
}

/// Deletes every kept attempt of `job` (a migration replacing it with the source's).
pub(crate) fn clear(conn: &Connection, job: &JobId) -> Result<(), StoreError> {
    conn.prepare_cached(CLEAR)
        .and_then(|mut stmt| stmt.execute([job.as_str()]))
        .map(drop)
        .map_err(error::sql(conn))
}

/// Every job's kept attempts, in job then fence order.
pub(crate) fn all(conn: &Connection) -> Result<Vec<(JobId, Attempt)>, StoreError> {
    let rows: Vec<(String, StoredAttempt)> = conn
        .prepare_cached(SELECT_ALL)
        .and_then(|mut stmt| {
            stmt.query_map([], |r| Ok((r.get(0)?, stored(r, 1)?)))
                .and_then(Iterator::collect)
        })
        .map_err(error::sql(conn))?;
    rows.into_iter()
        .map(|(job, row)| {
            let attempt = lease_ports::codec::attempt(&job, row)?;
            Ok((lease_ports::codec::job_id(job)?, attempt))
        })
        .collect()
}

/// The columns of one kept attempt from `at` (fence, owner, started, ended, outcome, error).
fn stored(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<StoredAttempt> {
    Ok(StoredAttempt {
        fence: r.get(at)?,
        owner: r.get(at + 1)?,
        started: r.get(at + 2)?,
        ended: r.get(at + 3)?,
        outcome: r.get(at + 4)?,
        error: r.get(at + 5)?,
    })
}
