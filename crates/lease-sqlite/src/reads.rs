//! Reads outside any write: a job's state or record, a page of `list`, the `stats` groups
//! judged by the domain, and the audit trail.

use lease_domain::{JobId, Status, Timestamp};
use lease_ports::codec::{StoredAudit, StoredDue, StoredGroup, StoredMinute};
use lease_ports::overview::Counted;
use lease_ports::{JobRecord, JobState, ListFilter, StatsRow, StoreError};
use rusqlite::Connection;

use crate::error;
use crate::row::load;
use crate::tx::reading;

/// Every id (of queue `?1`, or of any), in id order from after `?2`; the same three
/// parameters as the statements below (`?3`, an end, is NULL here).
pub(crate) const SELECT_IDS: &str = "SELECT id FROM jobs WHERE (?1 IS NULL OR id IN \
    (SELECT id FROM jobs_queue WHERE queue = ?1)) AND id > ?2 AND ?3 IS NULL ORDER BY id";

/// The open jobs (no end recorded), with the columns the status rule and the overview read:
/// those the ready set holds (`jobs_queue_ready`) and those it keeps out while a lease runs
/// (`jobs_queue_leased`), each read through its own partial index. Without `INDEXED BY`
/// the planner may scan every row of the table instead.
macro_rules! open_jobs {
    () => {
        "(SELECT q.id AS id, q.queue AS queue, q.finished AS finished, q.run_at AS run_at, \
         q.updated AS updated, q.attempts AS attempts, q.max_attempts AS max_attempts, \
         j.done AS done, j.until AS until, j.fence AS fence \
         FROM jobs_queue q INDEXED BY jobs_queue_ready CROSS JOIN jobs j ON j.id = q.id \
         WHERE q.finished IS NULL AND q.leased_until IS NULL \
         UNION ALL SELECT q.id, q.queue, q.finished, q.run_at, q.updated, q.attempts, \
         q.max_attempts, j.done, j.until, j.fence \
         FROM jobs_queue q INDEXED BY jobs_queue_leased CROSS JOIN jobs j ON j.id = q.id \
         WHERE q.finished IS NULL AND q.leased_until IS NOT NULL)"
    };
}

/// The inputs of the status rule for the open jobs, grouped: the domain judges each group.
pub(crate) const SELECT_STATS: &str = concat!(
    "SELECT queue, done, finished, until > ?1, \
     coalesce(attempts, 0) >= max(coalesce(max_attempts, 5), 1), count(*) FROM ",
    open_jobs!(),
    " GROUP BY 1, 2, 3, 4, 5"
);

/// The finished jobs, counted by migration 6's triggers as they change.
const SELECT_FINISHED: &str = "SELECT queue, finished, n FROM lease_finished WHERE n <> 0";

/// The ids `list` reads, in id order from after `?2` (the empty string: from the start): the
/// finished jobs of queue `?1` that ended `?3` (through their index), and the open jobs of
/// queue `?1` (or of any: NULL). Each statement names all three parameters.
const SELECT_IDS_ENDED_IN: &str = "SELECT id FROM jobs_queue INDEXED BY jobs_queue_ended \
    WHERE queue = ?1 AND finished = ?3 AND id > ?2 ORDER BY id";
const SELECT_IDS_OPEN: &str = concat!(
    "SELECT id FROM ",
    open_jobs!(),
    " WHERE (?1 IS NULL OR queue = ?1) AND ?3 IS NULL AND id > ?2 ORDER BY id"
);

/// The queues with finished jobs that ended `?1` (those whose pages `list` merges).
const SELECT_ENDED_QUEUES: &str =
    "SELECT queue FROM lease_finished WHERE finished = ?1 AND n > 0 ORDER BY queue";

pub(crate) fn state(conn: &Connection, id: &JobId) -> Result<Option<JobState>, StoreError> {
    Ok(load(conn, id)?.map(|job| JobState::new(id, job)))
}

pub(crate) fn record(conn: &Connection, id: &JobId) -> Result<Option<JobRecord>, StoreError> {
    Ok(load(conn, id)?.map(|job| JobRecord {
        id: id.clone(),
        job,
    }))
}

/// One place ids are read from: the statement, its queue and its end.
type IdSource = (&'static str, Option<String>, Option<&'static str>);

/// Where the ids `filter` can match are read: (statement, queue, end). A job without a
/// recorded end (pending, running, or dead of its last expired attempt) is among the open
/// ids; an end's ids are read queue by queue (each an index range in id order) and merged.
fn id_sources(conn: &Connection, filter: &ListFilter) -> Result<Vec<IdSource>, StoreError> {
    let queue = filter.queue.as_ref().map(|q| q.as_str().to_owned());
    let ended = |end: &'static str| -> Result<Vec<_>, StoreError> {
        let queues = match &queue {
            Some(queue) => vec![queue.clone()],
            None => {
                let mut stmt = conn
                    .prepare_cached(SELECT_ENDED_QUEUES)
                    .map_err(error::sql(conn))?;
                stmt.query_map([end], |r| r.get::<_, String>(0))
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(error::sql(conn))?
            }
        };
        Ok(queues
            .into_iter()
            .map(|q| (SELECT_IDS_ENDED_IN, Some(q), Some(end)))
            .collect())
    };
    let open = (SELECT_IDS_OPEN, queue.clone(), None);
    Ok(match filter.status {
        None => vec![(SELECT_IDS, queue.clone(), None)],
        Some(Status::Pending | Status::Running) => vec![open],
        Some(Status::Waiting) => ended("waiting")?,
        Some(Status::Done) => ended("done")?,
        Some(Status::Cancelled) => ended("cancelled")?,
        Some(Status::Dead) => {
            let mut sources = ended("dead")?;
            sources.push(open);
            sources
        }
    })
}

pub(crate) fn list(conn: &Connection, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
    reading(conn, |conn| {
        let after = filter.after.as_ref().map(JobId::as_str);
        let mut found: Vec<JobRecord> = Vec::new();
        // Each source gives ids in order; each gives its first `limit` matches and the merge
        // keeps the first `limit` of all.
        for (sql, queue, end) in id_sources(conn, filter)? {
            let mut stmt = conn.prepare_cached(sql).map_err(error::sql(conn))?;
            let mut rows = stmt
                .query(rusqlite::params![queue, after.unwrap_or(""), end])
                .map_err(error::sql(conn))?;
            let mut taken = 0;
            while taken < filter.limit {
                let Some(row) = rows.next().map_err(error::sql(conn))? else {
                    break;
                };
                let id: String = row.get(0).map_err(error::sql(conn))?;
                let id = lease_ports::codec::job_id(id)?;
                // Ids come in byte order: past the prefix, none of this source's can match.
                if filter.past_prefix(&id) {
                    break;
                }
                let Some(job) = load(conn, &id)? else {
                    continue;
                };
                if filter.admits(&id, &job) {
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
const SELECT_DUE: &str = concat!(
    "SELECT queue, count(*), \
     min(CASE WHEN run_at IS NULL AND fence = 0 AND updated IS NULL THEN NULL \
     ELSE max(coalesce(run_at, -1.7976931348623157e308), \
     CASE WHEN fence > 0 THEN until ELSE -1.7976931348623157e308 END, \
     coalesce(updated, -1.7976931348623157e308)) END) FROM ",
    open_jobs!(),
    " WHERE done = 0 AND until <= ?1 \
     AND coalesce(attempts, 0) < max(coalesce(max_attempts, 5), 1) \
     AND (run_at IS NULL OR run_at <= ?1) GROUP BY 1 ORDER BY 1"
);

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

const SELECT_FAILED: &str = concat!(
    "SELECT q.queue, ",
    minute!("a.ended"),
    ", count(*) FROM lease_attempts a INDEXED BY lease_attempts_failed \
     JOIN jobs_queue q ON q.id = a.job \
     WHERE a.outcome IN ('failed', 'timed_out') AND a.ended >= ?1 GROUP BY 1, 2"
);

/// The jobs that ended `$end` (and stand so) per queue and minute of their last change,
/// through the partial index of dead and cancelled jobs (its condition spelled out, so the
/// planner may take it).
macro_rules! ended_per_minute {
    ($end:literal) => {
        concat!(
            "SELECT queue, ",
            minute!("updated"),
            ", count(*) FROM jobs_queue INDEXED BY jobs_queue_ends \
             WHERE finished IN ('dead', 'cancelled') AND finished = '",
            $end,
            "' AND updated >= ?1 GROUP BY 1, 2"
        )
    };
}

const SELECT_DEAD: &str = ended_per_minute!("dead");

const SELECT_CANCELLED: &str = ended_per_minute!("cancelled");

const SELECT_REFUSED: &str = concat!(
    "SELECT q.queue, ",
    minute!("a.time"),
    ", count(*) FROM lease_audit a JOIN jobs_queue q ON q.id = a.job \
     WHERE a.time >= ?1 GROUP BY 1, 2"
);

pub(crate) fn due(
    conn: &Connection,
    now: Timestamp,
) -> Result<Vec<lease_ports::overview::DueRow>, StoreError> {
    reading(conn, |conn| {
        let mut stmt = conn.prepare_cached(SELECT_DUE).map_err(error::sql(conn))?;
        let rows = stmt
            .query_map([now.get()], |r| {
                Ok(StoredDue {
                    queue: r.get(0)?,
                    due: r.get(1)?,
                    oldest: r.get(2)?,
                })
            })
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(error::sql(conn))?;
        rows.into_iter().map(StoredDue::decode).collect()
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
        for (sql, counted) in [
            (SELECT_COMPLETIONS, Counted::Completed),
            (SELECT_FAILED, Counted::Failed),
            (SELECT_DEAD, Counted::Dead),
            (SELECT_CANCELLED, Counted::Cancelled),
            (SELECT_REFUSED, Counted::Refused),
        ] {
            if counted == Counted::Refused && !audited {
                continue;
            }
            let mut stmt = conn.prepare_cached(sql).map_err(error::sql(conn))?;
            let rows = stmt
                .query_map([from], |r| {
                    Ok(StoredMinute {
                        queue: r.get(0)?,
                        minute: r.get(1)?,
                        count: r.get(2)?,
                    })
                })
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(error::sql(conn))?;
            for row in rows {
                let (queue, minute, n) = row.decode()?;
                counts.push((queue, minute, counted, n));
            }
        }
        Ok(lease_ports::overview::minute_rows(counts))
    })
}
