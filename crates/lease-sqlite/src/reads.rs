//! Reads outside any write: a job's state or record, a page of `list`, the `stats` groups
//! judged by the domain, and the audit trail.

use lease_domain::{JobId, QueueName, Status, Timestamp};
use lease_ports::codec::{StoredAudit, StoredGroup};
use lease_ports::{JobRecord, JobState, ListFilter, StatsRow, StoreError};
use rusqlite::Connection;

use crate::error;
use crate::row::load;
use crate::tx::reading;

pub(crate) const SELECT_IDS: &str = "SELECT id FROM jobs WHERE (?1 IS NULL OR id IN \
    (SELECT id FROM jobs_queue WHERE queue = ?1)) AND (?2 IS NULL OR id > ?2) ORDER BY id";

/// The inputs of the status rule for the open jobs (no end recorded: `finished IS NULL`, read
/// through the status index, which the planner would otherwise pass over for the one that
/// gives the queue order, scanning every row), grouped: the domain judges each group.
pub(crate) const SELECT_STATS: &str = "SELECT q.queue, j.done, q.finished, j.until > ?1, \
    coalesce(q.attempts, 0) >= max(coalesce(q.max_attempts, 5), 1), count(*) \
    FROM jobs_queue q INDEXED BY jobs_queue_status_all CROSS JOIN jobs j ON j.id = q.id \
    WHERE q.finished IS NULL GROUP BY 1, 2, 3, 4, 5";

/// The finished jobs, counted by migration 6's triggers as they change.
const SELECT_FINISHED: &str = "SELECT queue, finished, n FROM lease_finished WHERE n <> 0";

/// The ids `list` reads, in id order from after `?2` (the empty string: from the start): of
/// queue `?1` (or any: NULL) with `finished` `?3` (or none recorded: NULL), through the
/// status index. Each statement names all three parameters.
const SELECT_IDS_ENDED: &str = "SELECT id FROM jobs_queue \
    WHERE ?1 IS NULL AND finished = ?3 AND id > ?2 ORDER BY id";
const SELECT_IDS_ENDED_IN: &str = "SELECT id FROM jobs_queue \
    WHERE queue = ?1 AND finished = ?3 AND id > ?2 ORDER BY id";
const SELECT_IDS_OPEN: &str = "SELECT id FROM jobs_queue \
    WHERE ?1 IS NULL AND ?3 IS NULL AND finished IS NULL AND id > ?2 ORDER BY id";
const SELECT_IDS_OPEN_IN: &str = "SELECT id FROM jobs_queue \
    WHERE queue = ?1 AND ?3 IS NULL AND finished IS NULL AND id > ?2 ORDER BY id";

pub(crate) fn state(conn: &Connection, id: &JobId) -> Result<Option<JobState>, StoreError> {
    Ok(load(conn, id)?.map(|job| JobState::new(id, job)))
}

pub(crate) fn record(conn: &Connection, id: &JobId) -> Result<Option<JobRecord>, StoreError> {
    Ok(load(conn, id)?.map(|job| JobRecord {
        id: id.clone(),
        job,
    }))
}

/// The statements whose ids hold every job `filter` can match: all ids, or those of one
/// recorded end; a job without one (pending, running, or dead of its last expired attempt)
/// is among the open ids.
fn id_statements(filter: &ListFilter) -> Vec<(&'static str, Option<&'static str>)> {
    let queue = filter.queue.is_some();
    let ended = |end: &'static str| {
        (
            if queue {
                SELECT_IDS_ENDED_IN
            } else {
                SELECT_IDS_ENDED
            },
            Some(end),
        )
    };
    let open = (
        if queue {
            SELECT_IDS_OPEN_IN
        } else {
            SELECT_IDS_OPEN
        },
        None,
    );
    match filter.status {
        None => vec![(SELECT_IDS, None)],
        Some(Status::Pending | Status::Running) => vec![open],
        Some(Status::Done) => vec![ended("done")],
        Some(Status::Cancelled) => vec![ended("cancelled")],
        Some(Status::Dead) => vec![ended("dead"), open],
    }
}

pub(crate) fn list(conn: &Connection, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
    reading(conn, |conn| {
        let queue = filter.queue.as_ref().map(QueueName::as_str);
        let after = filter.after.as_ref().map(JobId::as_str);
        let mut found: Vec<JobRecord> = Vec::new();
        // Each statement gives ids in order; with two (dead: recorded, or of an expired last
        // attempt), each gives its first `limit` matches and the merge keeps the first.
        for (sql, end) in id_statements(filter) {
            let mut stmt = conn.prepare_cached(sql).map_err(error::sql(conn))?;
            let mut rows = if sql == SELECT_IDS {
                stmt.query(rusqlite::params![queue, after])
            } else {
                stmt.query(rusqlite::params![queue, after.unwrap_or(""), end])
            }
            .map_err(error::sql(conn))?;
            let mut taken = 0;
            while taken < filter.limit {
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
                    taken += 1;
                }
            }
        }
        found.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        found.truncate(filter.limit);
        Ok(found)
    })
}

pub(crate) fn stats(conn: &Connection, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
    reading(conn, |conn| {
        let mut stmt = conn
            .prepare_cached(SELECT_STATS)
            .map_err(error::sql(conn))?;
        let mut groups = stmt
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
        let mut stmt = conn
            .prepare_cached(SELECT_FINISHED)
            .map_err(error::sql(conn))?;
        let finished = stmt
            .query_map([], |r| {
                let end: String = r.get(1)?;
                Ok(StoredGroup {
                    queue: r.get(0)?,
                    done: end == "done",
                    ended: (end != "done").then_some(end),
                    live: false,
                    exhausted: false,
                    count: r.get(2)?,
                })
            })
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(error::sql(conn))?;
        groups.extend(finished);
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
    FROM jobs_queue q INDEXED BY jobs_queue_status_all CROSS JOIN jobs j ON j.id = q.id \
    WHERE q.finished IS NULL AND j.done = 0 AND j.until <= ?1 \
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

/// Completions per queue and minute, counted by migration 6's triggers.
const SELECT_COMPLETIONS: &str =
    "SELECT queue, minute, n FROM lease_completions WHERE minute >= ?1";

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
