//! The statements of queue settings and schedules (migration 8) and what runs them inside an
//! open transaction: a change of settings as the domain decides it, the settings and a
//! schedule written, the rate grants counted, every queue and schedule read for `export`.
//! `crate::control` is the `Control` port on top of them.

use lease_domain::{QueueChange, QueueName, QueueSettings, Schedule, decide_queue_change};
use lease_ports::StoreError;
use lease_ports::codec::{StoredQueue, StoredSchedule};
use tokio_postgres::Row;

use crate::error::{self, Stage};
use crate::sql;

const QUEUE_COLUMNS: &str = "queue, paused, paused_until, concurrency, timeout, per_group, ordered, \
    rate_count, rate_period, group_rate_count, group_rate_period, fair";

/// A queue's settings row as `decode_queue` reads it: its columns, then its paused groups and
/// the end of each pause as two arrays in group order (`{s}` the schema; the row is `q`).
fn queue_select(s: &str) -> String {
    format!(
        "q.queue, q.paused, q.paused_until, q.concurrency, q.timeout, q.per_group, q.ordered, \
         ARRAY(SELECT p.grp FROM {s}.group_pauses p WHERE p.queue = q.queue \
         ORDER BY p.grp COLLATE \"C\"), \
         ARRAY(SELECT p.until FROM {s}.group_pauses p WHERE p.queue = q.queue \
         ORDER BY p.grp COLLATE \"C\"), \
         q.rate_count, q.rate_period, q.group_rate_count, q.group_rate_period, q.fair"
    )
}

const SCHEDULE_COLUMNS: &str = "name, cron, zone, queue, priority, max_attempts, payload, \
    timeout, catch_up, version, created, last_tick";

pub(crate) fn decode_schedule(row: &Row) -> Result<Schedule, StoreError> {
    let read = |e: tokio_postgres::Error| {
        StoreError::Corrupt(lease_ports::Detail::caused_by(
            format!("a schedule cannot be read: {e}"),
            e,
        ))
    };
    StoredSchedule {
        name: row.try_get(0).map_err(read)?,
        cron: row.try_get(1).map_err(read)?,
        zone: row.try_get(2).map_err(read)?,
        queue: row.try_get(3).map_err(read)?,
        priority: row.try_get(4).map_err(read)?,
        max_attempts: row.try_get(5).map_err(read)?,
        payload: row.try_get(6).map_err(read)?,
        timeout: row.try_get(7).map_err(read)?,
        catch_up: row.try_get(8).map_err(read)?,
        version: row.try_get(9).map_err(read)?,
        created: row.try_get(10).map_err(read)?,
        last_tick: row.try_get(11).map_err(read)?,
    }
    .decode()
}

/// The jobs of queue `$1` in the groups `which` says that bear on the group rules (`id` and
/// the job's columns): started and not finished, or dead (`Job::bears_on_group`), found by
/// the index of migration 9, whose condition this is.
fn bearing(s: &str, which: &str) -> String {
    format!(
        "SELECT id, {columns} FROM {s}.jobs WHERE queue = $1 AND {which} \
         AND grp IS NOT NULL AND (ended = 'dead' OR (NOT done AND ended IS NULL \
         AND (attempts > 0 OR leased_until IS NOT NULL)))",
        columns = sql::COLUMNS
    )
}

/// The due jobs of queue `$1` that `held` picks (`seq`, `id` and the job's columns), at the
/// clock of the statement's `clock`, ordered by `order`, at most `limit`, locked.
fn due(s: &str, held: &str, order: &str, limit: &str) -> String {
    format!(
        "SELECT seq, id, {columns} FROM {s}.jobs \
         WHERE queue = $1 AND {held} AND NOT done AND ended IS NULL \
         AND (leased_until IS NULL) IS TRUE \
         AND until <= (SELECT now FROM clock) \
         AND (run_at IS NULL OR run_at <= (SELECT now FROM clock)) \
         AND fence < 9223372036854775807 {order} LIMIT {limit} FOR UPDATE SKIP LOCKED",
        columns = sql::COLUMNS
    )
}

/// The due jobs of one group of a queue (`held` picks the group), ordered by `order`, each with
/// the clock reading (`$2`, else the store's) and its `seq` first, at most `$3`, locked.
fn turn_candidates(s: &str, held: &str, order: &str) -> String {
    format!(
        "WITH clock AS MATERIALIZED \
         (SELECT coalesce($2, extract(epoch FROM clock_timestamp())::float8) AS now) \
         SELECT (SELECT now FROM clock), d.* FROM ({due}) d",
        due = due(s, held, order, "$3")
    )
}

/// The first `$2` heads of queue `$1`'s groups in claim order, leaving out the groups `$3`,
/// each with its standing and its first due jobs (at most `$5`, at the clock `$4`, else the
/// store's): see `ControlSql::heads`.
fn heads(s: &str) -> String {
    format!(
        "WITH clock AS MATERIALIZED \
         (SELECT coalesce($4::float8, extract(epoch FROM clock_timestamp())::float8) AS now), \
         h AS MATERIALIZED (SELECT grp, priority, run_at, seq FROM {s}.group_heads \
         WHERE queue = $1 AND NOT (grp = ANY($3::text[])) \
         ORDER BY priority DESC, run_at ASC NULLS FIRST, seq LIMIT $2) \
         SELECT h.grp, h.priority, h.run_at, h.seq, c.n, (SELECT now FROM clock), x.* FROM h \
         LEFT JOIN {s}.grant_counts c ON c.queue = $1 AND c.grp = h.grp \
         LEFT JOIN LATERAL (SELECT 'b'::text AS kind, 0::bigint AS seq, b.* FROM ({bearing}) b \
         UNION ALL SELECT 'd'::text, d.* FROM ({due}) d) x ON true \
         ORDER BY h.priority DESC, h.run_at ASC NULLS FIRST, h.seq",
        bearing = bearing(s, "grp = h.grp"),
        due = due(s, "grp = h.grp", IN_GROUP_ORDER, "$5"),
    )
}

/// Claim order within one group, spelled as `jobs_turn` orders its rows (queue and group
/// first, each fixed by the statement). With it, and `leased_until IS NULL` written so that
/// the planner cannot prove the claim-order index's condition from it (`IS TRUE`), the only
/// index that serves the statement is `jobs_turn`, read from the group's first job: a generic
/// plan without sorts (`CLAIM_NEXT_SETTINGS`) otherwise took the claim-order index and read
/// past another group's whole backlog (105 ms at 300,000 jobs, against 0.05 ms).
const IN_GROUP_ORDER: &str = "ORDER BY queue, grp, priority DESC, run_at ASC NULLS FIRST, seq";

/// The statements of queue settings and schedules for schema `s`.
pub(crate) struct ControlSql {
    /// A queue's settings, read `FOR SHARE` (`$1` queue).
    pub(crate) settings: String,
    /// Serializes the claims of one limited queue (`$1` queue).
    pub(crate) lock_queue: String,
    /// The live leases of a queue at a time (`$1` queue, `$2` now, NULL: the store's clock).
    pub(crate) held: String,
    /// The jobs of some groups of a queue that bear on the group rules (`$1` queue, `$2` the
    /// groups): started and not finished, or dead (`Job::bears_on_group`), found by the index
    /// of migration 9, whose condition this is.
    pub(crate) group_bearing: String,
    /// The due jobs of one group (`$4`) of a queue (`$1`), in claim order, at most `$3`,
    /// each with the clock reading (`$2`, else the store's): found by `jobs_turn`, locked
    /// (`SKIP LOCKED`).
    pub(crate) turn_candidates: String,
    /// As `turn_candidates`, for the jobs without a group (`$4` unused and NULL).
    pub(crate) ungrouped_candidates: String,
    /// As `turn_candidates`, for the jobs `$4` (an ordered group's started work), in no order.
    pub(crate) only_candidates: String,
    /// The next group's turn of a fair queue (`$1`) after (`$2` served, `$3` group), in turn
    /// order (`lease_domain::Turn`): `served`, `grp`.
    pub(crate) next_turn: String,
    /// Moves a group (`$2`) behind every other of its queue (`$1`; `Turn::next_served`).
    pub(crate) serve_turn: String,
    /// Takes the advisory lock of a group's turn (`$1` queue, `$2` group) if no writer of the
    /// group holds it: whether it did.
    pub(crate) try_lock_turn: String,
    /// Takes its turn from a group (`$2` of queue `$1`) left with no unfinished job.
    pub(crate) drop_turn: String,
    /// The first `$2` heads of queue `$1`'s groups (migration 16) in claim order, leaving out
    /// the groups `$3`, with each group's standing and first due jobs: `grp`, `priority`,
    /// `run_at`, `seq`, the grants of the group that count (`n`, NULL for none), the clock
    /// reading (`$4`, else the store's), then one of its jobs, a row per job (NULL for none):
    /// `kind` (`b` for a job that bears on the group rules, `d` for one of its first `$5`
    /// due jobs, locked as `turn_candidates` locks them), the job's `seq` (0 for `b`), `id`
    /// and its columns.
    pub(crate) heads: String,
    /// Sets the heads of the groups `$2` of queue `$1` to each one's first ready job
    /// (migration 16's `repair_group_heads`).
    pub(crate) repair_heads: String,
    /// Each group of queue `$1` with unfinished jobs at `$2`: `grp`, how many are running (a
    /// live lease), how many wait (no live lease, attempts left), through `jobs_turn`.
    pub(crate) group_loads: String,
    /// Forgets a queue's grants expired by `$2` (NULL: the store's clock) and uncounts them
    /// (`$1` queue).
    pub(crate) forget_expired_grants: String,
    /// How many grants count against the rates `$2` of a queue (`$1`; '' for its own, else
    /// groups): `grp`, `n` for each that has any.
    pub(crate) counting: String,
    /// Every grant of a queue that still counts (`$1` queue, `$2` now).
    pub(crate) queue_grants: String,
    /// Logs the grants `$2` (groups, NULL for the queue's own) expiring at `$3` of queue `$1`,
    /// and counts them.
    pub(crate) log_grants: String,
    lock_table: String,
    settings_for_update: String,
    delete_group_pauses: String,
    insert_group_pauses: String,
    upsert_queue: String,
    delete_queue: String,
    pub(crate) all_queues: String,
    pub(crate) schedule_for_update: String,
    pub(crate) all_schedules: String,
    upsert_schedule: String,
    pub(crate) delete_schedule: String,
}

impl ControlSql {
    pub(crate) fn new(s: &str) -> Self {
        Self {
            settings: format!(
                "SELECT {} FROM {s}.queues q WHERE q.queue = $1 FOR SHARE",
                queue_select(s)
            ),
            lock_queue: format!(
                "SELECT pg_advisory_xact_lock(hashtextextended('{s}.queues/' || $1, 0))"
            ),
            held: format!(
                "SELECT count(*) FROM {s}.jobs WHERE queue = $1 AND NOT done AND ended IS NULL \
                 AND leased_until > (SELECT coalesce($2::float8, extract(epoch FROM clock_timestamp())::float8))"
            ),
            group_bearing: bearing(s, "grp = ANY($2::text[])"),
            turn_candidates: turn_candidates(s, "grp = $4", IN_GROUP_ORDER),
            ungrouped_candidates: turn_candidates(
                s,
                "grp IS NULL AND $4::text IS NULL",
                IN_GROUP_ORDER,
            ),
            // Found by id; the claim walk puts them in claim order.
            only_candidates: turn_candidates(s, "id = ANY($4::text[])", ""),
            next_turn: format!(
                "SELECT served, grp FROM {s}.group_turns WHERE queue = $1 \
                 AND (served, grp COLLATE \"C\") > ($2, $3::text COLLATE \"C\") \
                 ORDER BY served, grp COLLATE \"C\" LIMIT 1"
            ),
            serve_turn: format!(
                "UPDATE {s}.group_turns SET served = \
                 (SELECT max(served) FROM {s}.group_turns WHERE queue = $1) + 1 \
                 WHERE queue = $1 AND grp = $2"
            ),
            try_lock_turn: format!(
                "SELECT pg_try_advisory_xact_lock(\
                 hashtextextended('{s}.group_turns/' || $1 || '/' || $2, 0))"
            ),
            drop_turn: format!(
                "DELETE FROM {s}.group_turns WHERE queue = $1 AND grp = $2 \
                 AND NOT EXISTS (SELECT 1 FROM {s}.jobs WHERE queue = $1 AND grp = $2 \
                 AND NOT done AND ended IS NULL)"
            ),
            heads: heads(s),
            repair_heads: format!("SELECT {s}.repair_group_heads($1, $2::text[])"),
            group_loads: format!(
                "SELECT grp, count(*) FILTER (WHERE until > $2), \
                 count(*) FILTER (WHERE until <= $2 AND attempts < greatest(max_attempts, 1)) \
                 FROM {s}.jobs WHERE queue = $1 AND grp IS NOT NULL AND NOT done \
                 AND ended IS NULL GROUP BY grp"
            ),
            forget_expired_grants: format!(
                "WITH gone AS (DELETE FROM {s}.grants WHERE queue = $1 \
                 AND expires <= (SELECT coalesce($2::float8, extract(epoch FROM clock_timestamp())::float8)) \
                 RETURNING coalesce(grp, '') AS g), \
                 per AS (SELECT g, count(*) AS k FROM gone GROUP BY g) \
                 UPDATE {s}.grant_counts c SET n = greatest(c.n - per.k, 0) FROM per \
                 WHERE c.queue = $1 AND c.grp = per.g"
            ),
            counting: format!(
                "SELECT grp, n FROM {s}.grant_counts WHERE queue = $1 AND grp = ANY($2::text[])"
            ),
            queue_grants: format!(
                "SELECT grp, expires FROM {s}.grants WHERE queue = $1 AND expires > $2"
            ),
            log_grants: format!(
                "WITH logged AS (INSERT INTO {s}.grants (queue, grp, expires) \
                 SELECT $1, * FROM unnest($2::text[], $3::float8[])) \
                 INSERT INTO {s}.grant_counts (queue, grp, n) \
                 SELECT $1, coalesce(g, ''), count(*) FROM unnest($2::text[]) AS g \
                 GROUP BY coalesce(g, '') \
                 ON CONFLICT (queue, grp) DO UPDATE SET n = {s}.grant_counts.n + excluded.n"
            ),
            lock_table: format!("LOCK TABLE {s}.queues IN EXCLUSIVE MODE"),
            settings_for_update: format!(
                "SELECT {} FROM {s}.queues q WHERE q.queue = $1 FOR UPDATE",
                queue_select(s)
            ),
            delete_group_pauses: format!("DELETE FROM {s}.group_pauses WHERE queue = $1"),
            insert_group_pauses: format!(
                "INSERT INTO {s}.group_pauses (queue, grp, until) \
                 SELECT $1, * FROM unnest($2::text[], $3::float8[])"
            ),
            upsert_queue: format!(
                "INSERT INTO {s}.queues ({QUEUE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, \
                 $8, $9, $10, $11, $12) \
                 ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, \
                 paused_until = excluded.paused_until, concurrency = excluded.concurrency, \
                 timeout = excluded.timeout, per_group = excluded.per_group, \
                 ordered = excluded.ordered, rate_count = excluded.rate_count, \
                 rate_period = excluded.rate_period, \
                 group_rate_count = excluded.group_rate_count, \
                 group_rate_period = excluded.group_rate_period, fair = excluded.fair"
            ),
            delete_queue: format!("DELETE FROM {s}.queues WHERE queue = $1"),
            all_queues: format!(
                "SELECT {} FROM {s}.queues q ORDER BY q.queue COLLATE \"C\"",
                queue_select(s)
            ),
            schedule_for_update: format!(
                "SELECT {SCHEDULE_COLUMNS} FROM {s}.schedules WHERE name = $1 FOR UPDATE"
            ),
            all_schedules: format!(
                "SELECT {SCHEDULE_COLUMNS} FROM {s}.schedules ORDER BY name COLLATE \"C\""
            ),
            upsert_schedule: format!(
                "INSERT INTO {s}.schedules ({SCHEDULE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, \
                 $7, $8, $9, $10, $11, $12) ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, \
                 zone = excluded.zone, queue = excluded.queue, priority = excluded.priority, \
                 max_attempts = excluded.max_attempts, payload = excluded.payload, \
                 timeout = excluded.timeout, catch_up = excluded.catch_up, \
                 version = excluded.version, created = excluded.created, \
                 last_tick = excluded.last_tick"
            ),
            delete_schedule: format!("DELETE FROM {s}.schedules WHERE name = $1"),
        }
    }
}

/// How many grants count against the rates `rates` of `queue` ('' for its own, else groups),
/// for each that has any.
pub(crate) async fn counting(
    c: &tokio_postgres::Client,
    sql: &ControlSql,
    queue: &QueueName,
    rates: &[&str],
) -> Result<Vec<(String, u64)>, StoreError> {
    let rows = c
        .query(&sql.counting, &[&queue.as_str(), &rates])
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
    rows.iter()
        .map(|row| {
            let group: String = row.try_get(0).map_err(grant_column)?;
            let n: i64 = row.try_get(1).map_err(grant_column)?;
            Ok((group, lease_ports::codec::count(n, "a rate's grants")?))
        })
        .collect()
}

/// Grant rows (`grp`, `expires`) read back.
pub(crate) fn decode_grants(rows: &[Row]) -> Result<Vec<lease_domain::Grant>, StoreError> {
    rows.iter()
        .map(|row| {
            let group: Option<String> = row.try_get(0).map_err(grant_column)?;
            let expires: f64 = row.try_get(1).map_err(grant_column)?;
            lease_ports::codec::grant(group, expires)
        })
        .collect()
}

fn grant_column(e: tokio_postgres::Error) -> StoreError {
    StoreError::Corrupt(lease_ports::Detail::caused_by(
        format!("a grant cannot be read: {e}"),
        e,
    ))
}

/// Changes a queue's settings as the domain decides, in the open transaction: the settings
/// table locked (`EXCLUSIVE`, so the change waits for the claims that read it), the row read
/// `FOR UPDATE`, the decided settings written.
pub(crate) async fn change_in(
    c: &tokio_postgres::Client,
    sql: &ControlSql,
    queue: &QueueName,
    change: QueueChange,
) -> Result<QueueSettings, StoreError> {
    let before = |e| error::map(e, Stage::BeforeCommit);
    c.batch_execute(&sql.lock_table).await.map_err(before)?;
    let row = c
        .query_opt(&sql.settings_for_update, &[&queue.as_str()])
        .await
        .map_err(before)?;
    let current = match row {
        Some(row) => crate::row::decode_queue(&row)?.1,
        None => QueueSettings::default(),
    };
    let next = decide_queue_change(&current, change);
    write_settings(c, sql, queue, &next).await.map_err(before)?;
    Ok(next)
}

/// Writes a queue's settings in the open transaction (forgetting default ones).
pub(crate) async fn write_settings(
    c: &tokio_postgres::Client,
    sql: &ControlSql,
    queue: &QueueName,
    settings: &QueueSettings,
) -> Result<(), tokio_postgres::Error> {
    c.execute(&sql.delete_group_pauses, &[&queue.as_str()])
        .await?;
    if settings.is_default() {
        c.execute(&sql.delete_queue, &[&queue.as_str()]).await?;
    } else {
        let row = StoredQueue::of(queue, settings);
        if !row.paused_groups.is_empty() {
            let (groups, ends): (Vec<&str>, Vec<Option<f64>>) = row
                .paused_groups
                .iter()
                .map(|(g, until)| (g.as_str(), *until))
                .unzip();
            c.execute(&sql.insert_group_pauses, &[&queue.as_str(), &groups, &ends])
                .await?;
        }
        c.execute(
            &sql.upsert_queue,
            &[
                &row.queue,
                &row.paused,
                &row.paused_until,
                &row.concurrency,
                &row.timeout,
                &row.per_group,
                &row.ordered,
                &row.rate.0,
                &row.rate.1,
                &row.rate_per_group.0,
                &row.rate_per_group.1,
                &row.fair,
            ],
        )
        .await?;
    }
    Ok(())
}

/// Writes a schedule in the open transaction, over any of the same name.
pub(crate) async fn write_schedule(
    c: &tokio_postgres::Client,
    sql: &ControlSql,
    schedule: &Schedule,
) -> Result<(), tokio_postgres::Error> {
    let row = StoredSchedule::of(schedule);
    c.execute(
        &sql.upsert_schedule,
        &[
            &row.name,
            &row.cron,
            &row.zone,
            &row.queue,
            &row.priority,
            &row.max_attempts,
            &row.payload,
            &row.timeout,
            &row.catch_up,
            &row.version,
            &row.created,
            &row.last_tick,
        ],
    )
    .await
    .map(drop)
}

/// Every queue's settings and every schedule, read in the open transaction (for `export`).
pub(crate) async fn read_all(
    c: &tokio_postgres::Client,
    sql: &ControlSql,
) -> Result<(Vec<(QueueName, QueueSettings)>, Vec<Schedule>), StoreError> {
    let before = |e| error::map(e, Stage::BeforeCommit);
    let queues = c.query(&sql.all_queues, &[]).await.map_err(before)?;
    let schedules = c.query(&sql.all_schedules, &[]).await.map_err(before)?;
    Ok((
        queues
            .iter()
            .map(crate::row::decode_queue)
            .collect::<Result<_, _>>()?,
        schedules
            .iter()
            .map(decode_schedule)
            .collect::<Result<_, _>>()?,
    ))
}
