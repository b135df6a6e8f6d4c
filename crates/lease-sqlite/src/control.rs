//! Queue settings and schedules (migration 7): read by every `claim_next` in its transaction,
//! changed and fired as ops in the write path, so that a change, a claim and a fire are each one
//! `BEGIN IMMEDIATE` transaction (and SQLite's one writer orders them).

use lease_domain::{
    QueueChange, QueueName, QueueSettings, Schedule, ScheduleName, ScheduleSpec, Timestamp,
    decide_put_schedule, decide_queue_change,
};
use lease_ports::StoreError;
use lease_ports::codec::{StoredQueue, StoredSchedule};
use rusqlite::{Connection, OptionalExtension};

use crate::error;

const SELECT_QUEUE: &str = "SELECT queue, paused, paused_until, concurrency, timeout, \
    per_group, ordered, rate_count, rate_period, group_rate_count, group_rate_period, fair \
    FROM lease_queues WHERE queue = ?1";

const SELECT_QUEUES: &str = "SELECT queue, paused, paused_until, concurrency, timeout, \
    per_group, ordered, rate_count, rate_period, group_rate_count, group_rate_period, fair \
    FROM lease_queues ORDER BY queue";

const UPSERT_QUEUE: &str = "INSERT INTO lease_queues(queue, paused, paused_until, concurrency, \
    timeout, per_group, ordered, rate_count, rate_period, group_rate_count, group_rate_period, \
    fair) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
    ON CONFLICT(queue) DO UPDATE SET paused = excluded.paused, \
    paused_until = excluded.paused_until, concurrency = excluded.concurrency, \
    timeout = excluded.timeout, per_group = excluded.per_group, ordered = excluded.ordered, \
    rate_count = excluded.rate_count, rate_period = excluded.rate_period, \
    group_rate_count = excluded.group_rate_count, group_rate_period = excluded.group_rate_period, \
    fair = excluded.fair";

/// Every grant of a queue that still counts at `?2`.
const SELECT_QUEUE_GRANTS: &str = "SELECT grp, expires FROM lease_grants INDEXED BY lease_grants_expiry \
    WHERE queue = ?1 AND expires > ?2";

/// How many of a queue's grants count against its own rate (`?2` '') or a group's.
const SELECT_COUNTING: &str = "SELECT n FROM lease_grant_counts WHERE queue = ?1 AND grp = ?2";

/// Counts one more grant against a rate.
const COUNT_GRANT: &str = "INSERT INTO lease_grant_counts(queue, grp, n) VALUES (?1, ?2, 1) \
    ON CONFLICT(queue, grp) DO UPDATE SET n = n + 1";

/// Counts `?3` fewer grants against a rate.
const UNCOUNT_GRANTS: &str = "UPDATE lease_grant_counts SET n = max(n - ?3, 0) \
    WHERE queue = ?1 AND grp = ?2";

/// Forgets a queue's counts that reached 0.
const DELETE_EMPTY_COUNTS: &str = "DELETE FROM lease_grant_counts WHERE queue = ?1 AND n = 0";

const INSERT_GRANT: &str = "INSERT INTO lease_grants(queue, grp, expires) VALUES (?1, ?2, ?3)";

/// Forgets a queue's grants that stopped counting by `?2` (`lease_grants_expiry`), saying the
/// rate each counted against.
const DELETE_EXPIRED_GRANTS: &str =
    "DELETE FROM lease_grants WHERE queue = ?1 AND expires <= ?2 RETURNING grp";

const DELETE_QUEUE: &str = "DELETE FROM lease_queues WHERE queue = ?1";

/// The paused groups of one queue (`?1`), or of every queue (`?1` NULL).
const SELECT_GROUP_PAUSES: &str = "SELECT queue, grp, until FROM lease_group_pauses \
    WHERE ?1 IS NULL OR queue = ?1 ORDER BY queue, grp";

const DELETE_GROUP_PAUSES: &str = "DELETE FROM lease_group_pauses WHERE queue = ?1";

const INSERT_GROUP_PAUSE: &str =
    "INSERT INTO lease_group_pauses(queue, grp, until) VALUES (?1, ?2, ?3)";

/// The live leases of a queue at `?2`: its held jobs whose lease has not ended (the index of
/// lease ends; `Job::leased_until` is the lease's end while someone holds the job).
const COUNT_HELD: &str = "SELECT count(*) FROM jobs_queue INDEXED BY jobs_queue_leased \
    WHERE queue = ?1 AND finished IS NULL AND leased_until > ?2";

const SCHEDULE_COLUMNS: &str = "name, cron, zone, queue, priority, max_attempts, payload, \
    timeout, catch_up, version, created, last_tick";

const UPSERT_SCHEDULE: &str = "INSERT INTO lease_schedules(name, cron, zone, queue, priority, \
    max_attempts, payload, timeout, catch_up, version, created, last_tick) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT(name) DO UPDATE SET \
    cron = excluded.cron, zone = excluded.zone, queue = excluded.queue, \
    priority = excluded.priority, max_attempts = excluded.max_attempts, \
    payload = excluded.payload, timeout = excluded.timeout, catch_up = excluded.catch_up, \
    version = excluded.version, created = excluded.created, last_tick = excluded.last_tick";

const DELETE_SCHEDULE: &str = "DELETE FROM lease_schedules WHERE name = ?1";

fn queue_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredQueue> {
    Ok(StoredQueue {
        queue: row.get(0)?,
        paused: row.get(1)?,
        paused_until: row.get(2)?,
        concurrency: row.get(3)?,
        timeout: row.get(4)?,
        per_group: row.get(5)?,
        ordered: row.get(6)?,
        paused_groups: Vec::new(),
        rate: (row.get(7)?, row.get(8)?),
        rate_per_group: (row.get(9)?, row.get(10)?),
        fair: row.get(11)?,
    })
}

/// The paused groups of `queue` (all queues' when `None`), as (queue, group, until) rows.
fn group_pauses(
    conn: &Connection,
    queue: Option<&QueueName>,
) -> Result<Vec<(String, String, Option<f64>)>, StoreError> {
    conn.prepare_cached(SELECT_GROUP_PAUSES)
        .and_then(|mut stmt| {
            stmt.query_map([queue.map(QueueName::as_str)], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect()
        })
        .map_err(error::sql(conn))
}

/// A stored queue row with its paused groups taken from `pauses`.
fn with_pauses(mut row: StoredQueue, pauses: &[(String, String, Option<f64>)]) -> StoredQueue {
    row.paused_groups = pauses
        .iter()
        .filter(|(queue, _, _)| *queue == row.queue)
        .map(|(_, group, until)| (group.clone(), *until))
        .collect();
    row
}

fn schedule_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredSchedule> {
    Ok(StoredSchedule {
        name: row.get(0)?,
        cron: row.get(1)?,
        zone: row.get(2)?,
        queue: row.get(3)?,
        priority: row.get(4)?,
        max_attempts: row.get(5)?,
        payload: row.get(6)?,
        timeout: row.get(7)?,
        catch_up: row.get(8)?,
        version: row.get(9)?,
        created: row.get(10)?,
        last_tick: row.get(11)?,
    })
}

/// The settings of `queue` (the default when it has none).
pub(crate) fn settings(conn: &Connection, queue: &QueueName) -> Result<QueueSettings, StoreError> {
    let stored = conn
        .prepare_cached(SELECT_QUEUE)
        .map_err(error::sql(conn))?
        .query_row([queue.as_str()], queue_row)
        .optional()
        .map_err(error::sql(conn))?;
    Ok(match stored {
        Some(stored) => {
            with_pauses(stored, &group_pauses(conn, Some(queue))?)
                .decode()?
                .1
        }
        None => QueueSettings::default(),
    })
}

/// How many of `queue`'s leases are live at `now`.
pub(crate) fn held(
    conn: &Connection,
    queue: &QueueName,
    now: Timestamp,
) -> Result<u64, StoreError> {
    let n: i64 = conn
        .prepare_cached(COUNT_HELD)
        .and_then(|mut stmt| {
            stmt.query_row(rusqlite::params![queue.as_str(), now.get()], |r| r.get(0))
        })
        .map_err(error::sql(conn))?;
    lease_ports::codec::count(n, "a queue's live leases")
}

/// Forgets the grants of `queue` that stopped counting by `now` (and uncounts them); whether
/// any was forgotten. Every claim of a queue with a rate does this before it counts.
pub(crate) fn forget_expired_grants(
    conn: &Connection,
    queue: &QueueName,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let gone: Vec<Option<String>> = conn
        .prepare_cached(DELETE_EXPIRED_GRANTS)
        .and_then(|mut stmt| {
            stmt.query_map(rusqlite::params![queue.as_str(), now.get()], |r| r.get(0))?
                .collect()
        })
        .map_err(error::sql(conn))?;
    if gone.is_empty() {
        return Ok(false);
    }
    let mut per_rate: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for group in gone {
        *per_rate.entry(group.unwrap_or_default()).or_default() += 1;
    }
    let mut uncount = conn
        .prepare_cached(UNCOUNT_GRANTS)
        .map_err(error::sql(conn))?;
    for (group, n) in per_rate {
        uncount
            .execute(rusqlite::params![queue.as_str(), group, n])
            .map_err(error::sql(conn))?;
    }
    conn.prepare_cached(DELETE_EMPTY_COUNTS)
        .and_then(|mut stmt| stmt.execute([queue.as_str()]))
        .map_err(error::sql(conn))?;
    Ok(true)
}

/// How many of `queue`'s grants count against its own rate (`group` `None`) or a group's
/// (after [`forget_expired_grants`]: all that are logged).
pub(crate) fn counting(
    conn: &Connection,
    queue: &QueueName,
    group: Option<&lease_domain::GroupKey>,
) -> Result<u64, StoreError> {
    let n: Option<i64> = conn
        .prepare_cached(SELECT_COUNTING)
        .and_then(|mut stmt| {
            stmt.query_row(
                rusqlite::params![queue.as_str(), group.map_or("", |g| g.as_str())],
                |r| r.get(0),
            )
            .optional()
        })
        .map_err(error::sql(conn))?;
    lease_ports::codec::count(n.unwrap_or(0), "a rate's grants")
}

/// Every grant of `queue` that still counts at `now`.
pub(crate) fn queue_grants(
    conn: &Connection,
    queue: &QueueName,
    now: Timestamp,
) -> Result<Vec<lease_domain::Grant>, StoreError> {
    let rows: Vec<(Option<String>, f64)> = conn
        .prepare_cached(SELECT_QUEUE_GRANTS)
        .and_then(|mut stmt| {
            stmt.query_map(rusqlite::params![queue.as_str(), now.get()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect()
        })
        .map_err(error::sql(conn))?;
    rows.into_iter()
        .map(|(g, at)| lease_ports::codec::grant(g, at))
        .collect()
}

/// Logs a claim's grants and counts them.
pub(crate) fn log_grants(
    conn: &Connection,
    queue: &QueueName,
    grants: &[lease_domain::Grant],
) -> Result<(), StoreError> {
    let mut insert = conn
        .prepare_cached(INSERT_GRANT)
        .map_err(error::sql(conn))?;
    let mut count = conn.prepare_cached(COUNT_GRANT).map_err(error::sql(conn))?;
    for (group, expires) in grants {
        let group = group.as_ref().map(|g| g.as_str());
        insert
            .execute(rusqlite::params![queue.as_str(), group, expires.get()])
            .map_err(error::sql(conn))?;
        count
            .execute(rusqlite::params![queue.as_str(), group.unwrap_or("")])
            .map_err(error::sql(conn))?;
    }
    Ok(())
}

/// Writes a queue's settings (forgetting default ones).
pub(crate) fn write_settings(
    conn: &Connection,
    queue: &QueueName,
    settings: &QueueSettings,
) -> Result<(), StoreError> {
    conn.prepare_cached(DELETE_GROUP_PAUSES)
        .and_then(|mut stmt| stmt.execute([queue.as_str()]))
        .map_err(error::sql(conn))?;
    let done = if settings.is_default() {
        conn.prepare_cached(DELETE_QUEUE)
            .and_then(|mut stmt| stmt.execute([queue.as_str()]))
    } else {
        let mut insert = conn
            .prepare_cached(INSERT_GROUP_PAUSE)
            .map_err(error::sql(conn))?;
        for (group, until) in &settings.paused_groups {
            insert
                .execute(rusqlite::params![
                    queue.as_str(),
                    group.as_str(),
                    until.map(Timestamp::get)
                ])
                .map_err(error::sql(conn))?;
        }
        let row = StoredQueue::of(queue, settings);
        conn.prepare_cached(UPSERT_QUEUE).and_then(|mut stmt| {
            stmt.execute(rusqlite::params![
                row.queue,
                row.paused,
                row.paused_until,
                row.concurrency,
                row.timeout,
                row.per_group,
                row.ordered,
                row.rate.0,
                row.rate.1,
                row.rate_per_group.0,
                row.rate_per_group.1,
                row.fair
            ])
        })
    };
    done.map(drop).map_err(error::sql(conn))
}

/// Each group of a queue with unfinished jobs: how many are running (a live lease) and how
/// many wait (`Job::status_at` pending: no live lease, attempts left), through
/// `jobs_queue_turn`.
const SELECT_GROUP_LOADS: &str = "SELECT q.grp, \
    sum(j.until > ?2), sum(j.until <= ?2 AND q.attempts < max(q.max_attempts, 1)) \
    FROM jobs_queue q INDEXED BY jobs_queue_turn JOIN jobs j ON j.id = q.id \
    WHERE q.queue = ?1 AND q.grp IS NOT NULL AND q.finished IS NULL AND j.done = 0 \
    GROUP BY q.grp";

/// The busiest `limit` groups of `queue` at `now` (`lease_ports::control::busiest`).
pub(crate) fn group_loads(
    conn: &Connection,
    queue: &QueueName,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<lease_ports::control::GroupLoad>, StoreError> {
    let rows = conn
        .prepare_cached(SELECT_GROUP_LOADS)
        .and_then(|mut stmt| {
            stmt.query_map(rusqlite::params![queue.as_str(), now.get()], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()
        })
        .map_err(error::sql(conn))?;
    let loads = rows
        .into_iter()
        .map(|(group, running, backlog)| {
            Ok(lease_ports::control::GroupLoad {
                group: lease_domain::GroupKey::stored(group).map_err(|e| {
                    StoreError::Corrupt(format!("a job's stored group: {e}").into())
                })?,
                backlog: lease_ports::codec::count(backlog, "a group's waiting jobs")?,
                running: lease_ports::codec::count(running, "a group's running jobs")?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(lease_ports::control::busiest(loads, limit))
}

/// Changes a queue's settings as the domain decides.
pub(crate) fn change_queue(
    conn: &Connection,
    queue: &QueueName,
    change: QueueChange,
) -> Result<QueueSettings, StoreError> {
    let next = decide_queue_change(&settings(conn, queue)?, change);
    write_settings(conn, queue, &next)?;
    Ok(next)
}

/// Every queue's settings.
pub(crate) fn queues(conn: &Connection) -> Result<Vec<(QueueName, QueueSettings)>, StoreError> {
    let rows: Vec<StoredQueue> = conn
        .prepare_cached(SELECT_QUEUES)
        .map_err(error::sql(conn))?
        .query_map([], queue_row)
        .and_then(Iterator::collect)
        .map_err(error::sql(conn))?;
    let pauses = group_pauses(conn, None)?;
    rows.into_iter()
        .map(|row| with_pauses(row, &pauses).decode())
        .collect()
}

/// One schedule, by name.
pub(crate) fn schedule(
    conn: &Connection,
    name: &ScheduleName,
) -> Result<Option<Schedule>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM lease_schedules WHERE name = ?1"
    ))
    .map_err(error::sql(conn))?
    .query_row([name.as_str()], schedule_row)
    .optional()
    .map_err(error::sql(conn))?
    .map(StoredSchedule::decode)
    .transpose()
}

/// Every schedule, by name.
pub(crate) fn schedules(conn: &Connection) -> Result<Vec<Schedule>, StoreError> {
    let rows: Vec<StoredSchedule> = conn
        .prepare_cached(&format!(
            "SELECT {SCHEDULE_COLUMNS} FROM lease_schedules ORDER BY name"
        ))
        .map_err(error::sql(conn))?
        .query_map([], schedule_row)
        .and_then(Iterator::collect)
        .map_err(error::sql(conn))?;
    rows.into_iter().map(StoredSchedule::decode).collect()
}

/// Writes a schedule over any of the same name.
pub(crate) fn write_schedule(conn: &Connection, schedule: &Schedule) -> Result<(), StoreError> {
    let row = StoredSchedule::of(schedule);
    conn.prepare_cached(UPSERT_SCHEDULE)
        .and_then(|mut stmt| {
            stmt.execute(rusqlite::params![
                row.name,
                row.cron,
                row.zone,
                row.queue,
                row.priority,
                row.max_attempts,
                row.payload,
                row.timeout,
                row.catch_up,
                row.version,
                row.created,
                row.last_tick
            ])
        })
        .map(drop)
        .map_err(error::sql(conn))
}

/// Makes or replaces a schedule as the domain decides.
pub(crate) fn put_schedule(
    conn: &Connection,
    spec: &ScheduleSpec,
    now: Timestamp,
) -> Result<Schedule, StoreError> {
    let next = decide_put_schedule(schedule(conn, &spec.name)?.as_ref(), spec.clone(), now);
    write_schedule(conn, &next)?;
    Ok(next)
}

/// Removes a schedule; whether there was one.
pub(crate) fn remove_schedule(conn: &Connection, name: &ScheduleName) -> Result<bool, StoreError> {
    conn.prepare_cached(DELETE_SCHEDULE)
        .and_then(|mut stmt| stmt.execute([name.as_str()]))
        .map(|n| n > 0)
        .map_err(error::sql(conn))
}
