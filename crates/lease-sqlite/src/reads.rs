//! Reads outside any write: a job's state or record, a page of `list`, the `stats` groups
//! judged by the domain, and the audit trail.

use lease_domain::{JobId, QueueName, Timestamp};
use lease_ports::codec::{StoredAudit, StoredGroup};
use lease_ports::{JobRecord, JobState, ListFilter, StatsRow, StoreError};
use rusqlite::Connection;

use crate::error;
use crate::row::load;
use crate::tx::reading;

pub(crate) const SELECT_IDS: &str = "SELECT id FROM jobs WHERE (?1 IS NULL OR id IN \
    (SELECT id FROM jobs_queue WHERE queue = ?1)) AND (?2 IS NULL OR id > ?2) ORDER BY id";

/// The inputs of the status rule, grouped: the domain judges each group.
pub(crate) const SELECT_STATS: &str = "SELECT coalesce(q.queue, 'default'), j.done, q.finished, \
    j.until > ?1, coalesce(q.attempts, 0) >= max(coalesce(q.max_attempts, 5), 1), count(*) \
    FROM jobs j LEFT JOIN jobs_queue q ON q.id = j.id GROUP BY 1, 2, 3, 4, 5";

pub(crate) fn state(conn: &Connection, id: &JobId) -> Result<Option<JobState>, StoreError> {
    Ok(load(conn, id)?.map(|job| JobState::new(id, job)))
}

pub(crate) fn record(conn: &Connection, id: &JobId) -> Result<Option<JobRecord>, StoreError> {
    Ok(load(conn, id)?.map(|job| JobRecord {
        id: id.clone(),
        job,
    }))
}

pub(crate) fn list(conn: &Connection, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
    reading(conn, |conn| {
        let mut stmt = conn.prepare_cached(SELECT_IDS).map_err(error::sql(conn))?;
        let queue = filter.queue.as_ref().map(QueueName::as_str);
        let after = filter.after.as_ref().map(JobId::as_str);
        let mut rows = stmt.query([queue, after]).map_err(error::sql(conn))?;
        let mut found = Vec::new();
        while found.len() < filter.limit {
            let Some(row) = rows.next().map_err(error::sql(conn))? else {
                break;
            };
            let id: String = row.get(0).map_err(error::sql(conn))?;
            let id = JobId::stored(id)
                .map_err(|e| StoreError::Corrupt(format!("stored job id: {e}").into()))?;
            let Some(job) = load(conn, &id)? else {
                continue;
            };
            if filter.status.is_none_or(|s| job.status_at(filter.now) == s) {
                found.push(JobRecord { id, job });
            }
        }
        Ok(found)
    })
}

pub(crate) fn stats(conn: &Connection, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
    reading(conn, |conn| {
        let mut stmt = conn
            .prepare_cached(SELECT_STATS)
            .map_err(error::sql(conn))?;
        let groups = stmt
            .query_map([now.get()], |r| {
                Ok(StoredGroup {
                    queue: r.get(0)?,
                    done: r.get(1)?,
                    ended: r.get(2)?,
                    live: r.get(3)?,
                    exhausted: r.get(4)?,
                    count: r.get(5)?,
                })
            })
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(error::sql(conn))?;
        let judged = groups
            .into_iter()
            .map(StoredGroup::decode)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(lease_ports::tally_groups(judged, now))
    })
}

/// Whether the audit table was ever made (a store opened with the trail on).
fn has_audit_table(conn: &Connection) -> Result<bool, StoreError> {
    conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'lease_audit'",
        [],
        |r| r.get(0),
    )
    .map_err(error::sql(conn))
}

/// The audit trail, oldest first (empty when the table was never made).
pub(crate) fn audit_rows(
    conn: &Connection,
    filter: &lease_ports::audit::AuditFilter,
) -> Result<Vec<lease_ports::audit::AuditRow>, StoreError> {
    reading(conn, |conn| {
        let exists = has_audit_table(conn)?;
        if !exists {
            return Ok(Vec::new());
        }
        let limit = if filter.limit == 0 {
            i64::MAX
        } else {
            i64::try_from(filter.limit).unwrap_or(i64::MAX)
        };
        let mut stmt = conn
            .prepare_cached(
                "SELECT time, job, owner, operation, presented, current, reason, late_by \
                 FROM lease_audit WHERE (?1 IS NULL OR job = ?1) AND (?2 IS NULL OR time >= ?2) \
                 ORDER BY seq DESC LIMIT ?3",
            )
            .map_err(error::sql(conn))?;
        let rows = stmt
            .query_map(
                rusqlite::params![
                    filter.job.as_ref().map(JobId::as_str),
                    filter.since.map(Timestamp::get),
                    limit
                ],
                |r| {
                    Ok(StoredAudit {
                        time: r.get(0)?,
                        job: r.get(1)?,
                        owner: r.get(2)?,
                        operation: r.get(3)?,
                        presented: r.get(4)?,
                        current: r.get(5)?,
                        reason: r.get(6)?,
                        late_by: r.get(7)?,
                    })
                },
            )
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(error::sql(conn))?;
        let mut rows = rows
            .into_iter()
            .map(StoredAudit::decode)
            .collect::<Result<Vec<_>, _>>()?;
        rows.reverse();
        Ok(rows)
    })
}

/// The waiting jobs per queue (`Job::is_waiting_at`: not done or ended, no live lease, an
/// attempt left, due) and the earliest `Job::waiting_since` among them (SQLite's `max()`
/// of several values is NULL when one is, so a missing value counts as the least `f64`).
const SELECT_DUE: &str = "SELECT coalesce(q.queue, 'default'), count(*), \
    min(CASE WHEN q.run_at IS NULL AND j.fence = 0 AND q.updated IS NULL THEN NULL \
    ELSE max(coalesce(q.run_at, -1.7976931348623157e308), \
    CASE WHEN j.fence > 0 THEN j.until ELSE -1.7976931348623157e308 END, \
    coalesce(q.updated, -1.7976931348623157e308)) END) \
    FROM jobs j LEFT JOIN jobs_queue q ON q.id = j.id \
    WHERE j.done = 0 AND q.finished IS NULL AND j.until <= ?1 \
    AND coalesce(q.attempts, 0) < max(coalesce(q.max_attempts, 5), 1) \
    AND (q.run_at IS NULL OR q.run_at <= ?1) GROUP BY 1 ORDER BY 1";

/// The start of the minute of a time column (no `floor()` in this SQLite build).
macro_rules! minute {
    ($column:literal) => {
        concat!(
            "((CAST(",
            $column,
            " / 60 AS INTEGER) - (",
            $column,
            " < 0 AND ",
            $column,
            " / 60 <> CAST(",
            $column,
            " / 60 AS INTEGER))) * 60)"
        )
    };
}

const SELECT_COMPLETIONS: &str = concat!(
    "SELECT q.queue, ",
    minute!("q.updated"),
    ", count(*) FROM jobs j JOIN jobs_queue q ON q.id = j.id \
     WHERE j.done = 1 AND q.updated >= ?1 GROUP BY 1, 2"
);

const SELECT_REFUSED: &str = concat!(
    "SELECT q.queue, ",
    minute!("a.time"),
    ", count(*) FROM lease_audit a JOIN jobs_queue q ON q.id = a.job \
     WHERE a.time >= ?1 GROUP BY 1, 2"
);

fn queue_name(name: String) -> Result<QueueName, StoreError> {
    QueueName::new(name).map_err(|e| StoreError::Corrupt(format!("stored queue name: {e}").into()))
}

fn stored_time(t: f64) -> Result<Timestamp, StoreError> {
    Timestamp::new(t).map_err(|_| StoreError::Corrupt(format!("stored time {t}").into()))
}

pub(crate) fn due(
    conn: &Connection,
    now: Timestamp,
) -> Result<Vec<lease_ports::overview::DueRow>, StoreError> {
    reading(conn, |conn| {
        let mut stmt = conn.prepare_cached(SELECT_DUE).map_err(error::sql(conn))?;
        let rows = stmt
            .query_map([now.get()], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Option<f64>>(2)?,
                ))
            })
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(error::sql(conn))?;
        rows.into_iter()
            .map(|(queue, due, oldest)| {
                Ok(lease_ports::overview::DueRow {
                    queue: queue_name(queue)?,
                    due: u64::try_from(due).unwrap_or(0),
                    oldest_since: oldest.map(stored_time).transpose()?,
                })
            })
            .collect()
    })
}

pub(crate) fn activity(
    conn: &Connection,
    since: Timestamp,
) -> Result<Vec<lease_ports::overview::MinuteRow>, StoreError> {
    let from = lease_ports::overview::minute_of(since).get();
    reading(conn, |conn| {
        let audited = has_audit_table(conn)?;
        let mut counts = Vec::new();
        for (sql, completed) in [(SELECT_COMPLETIONS, true), (SELECT_REFUSED, false)] {
            if !completed && !audited {
                continue;
            }
            let mut stmt = conn.prepare_cached(sql).map_err(error::sql(conn))?;
            let rows = stmt
                .query_map([from], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, f64>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                })
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(error::sql(conn))?;
            for (queue, minute, n) in rows {
                let n = u64::try_from(n).unwrap_or(0);
                let (c, r) = if completed { (n, 0) } else { (0, n) };
                counts.push((queue_name(queue)?, stored_time(minute)?, c, r));
            }
        }
        Ok(lease_ports::overview::minute_rows(counts))
    })
}
