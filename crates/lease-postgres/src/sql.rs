//! The statements, spelled for one schema, and the conversion of a row to a job and back.
//! No lease rule is written here: the filters only pick candidates, and the domain decides.

/// Every column of a job after its id that a write writes, in the order `decode` reads them.
pub(crate) const COLUMNS: &str = "owner, until, fence, result, done, queue, priority, run_at, attempts, \
    max_attempts, payload, ended, error, result_fence, updated, token, timeout, progress, grp";

/// [`COLUMNS`] and the job's policy when a parent fails (set with its parents, by the
/// workflow's own statements; NULL for a job without parents): what reads of whole jobs
/// select (`decode` reads the policy when the row has it).
pub(crate) const READ_COLUMNS: &str = "owner, until, fence, result, done, queue, priority, \
    run_at, attempts, max_attempts, payload, ended, error, result_fence, updated, token, \
    timeout, progress, grp, on_parent_failure";

/// The statements of one schema (exported as `StatementTexts` with the feature `test-support`,
/// so that benchmarks can run the same SQL raw).
#[derive(Debug, Clone)]
// Public only through `StatementTexts` (feature `test-support`).
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub struct Sql {
    /// Reads one job.
    pub select: String,
    /// Reads and locks one job (`FOR UPDATE`).
    pub lock: String,
    /// Reads and locks the purge mark of an id.
    pub lock_purged: String,
    /// Deletes the purge mark of an id.
    pub forget_purged: String,
    /// Reads and locks the jobs of many ids (`$1` ids, `FOR UPDATE`).
    pub lock_many: String,
    /// Reads and locks the purge marks of many ids (`$1` ids).
    pub lock_purged_many: String,
    /// Inserts a job (all columns; nothing on conflict).
    pub insert: String,
    /// Writes every column of a job.
    pub update: String,
    /// Writes every column of a job and, in the same statement, the counts of migration 6 it
    /// moves (`$22`..`$25`) and the attempt it ends (`$26`..`$32`, see
    /// `Encoded::counted_params`); answers how many rows it wrote.
    pub update_counted: String,
    /// A job's kept attempts (`$1`), by fence.
    pub attempts: String,
    /// Every job's kept attempts, in job then fence order (the job first).
    pub attempts_all: String,
    /// Deletes the kept attempts of the jobs `$1`.
    pub attempts_clear: String,
    /// Keeps attempts (arrays of job, fence, owner, started, ended, outcome, error).
    pub attempts_put: String,
    /// Reads the server's clock.
    pub clock: String,
    /// Sets `claim_next`'s planner settings for its transaction only, and reads the store's
    /// epoch (the fourth column) that its leases' fences are handed out in.
    pub settings: String,
    /// Reads the store's epoch (migration 15), refused on a standby in recovery.
    pub epoch: String,
    /// Raises the store's epoch to `$1` where it is below (adding to what is raised above the
    /// timeline); answers the epoch after.
    pub raise_epoch: String,
    /// The candidates of `claim_next` (`$1` queue, `$2` caller's now or NULL, `$3` limit).
    pub candidates: String,
    /// Finished jobs changed before `$1`, locked (`SKIP LOCKED`).
    pub purgeable: String,
    /// Records purge marks (`$1` ids, `$2` fences), keeping the larger fence.
    pub remember_purged: String,
    /// Deletes jobs by id (`$1` ids).
    pub delete: String,
    /// A page of jobs in id order (`$1` queue or NULL, `$2` after this id or '', `$3` limit).
    pub page: String,
    /// The inputs of the status rule, grouped (`$1` now): the open jobs read, the finished
    /// ones counted.
    pub stats: String,
    /// The waiting jobs per queue (`Job::is_waiting_at`) and the earliest `waiting_since`.
    pub due: String,
    /// Completions per queue and minute from `$1` (migration 6's counts).
    pub completions: String,
    /// A page of the open jobs of queue `$1` in id order after `$2` (`$3` rows). The pages
    /// `list` merges compare ids byte by byte (`COLLATE "C"`), as the merge and the other
    /// stores do.
    pub open_page: String,
    /// A page of the open jobs of every queue in id order after `$1` (`$2` rows).
    pub open_page_any: String,
    /// A page of the finished jobs of queue `$1` that ended `$3`, in id order after `$2`
    /// (`$4` rows), read through the index of ends.
    pub ended_page: String,
    /// The queues with finished jobs that ended `$1`.
    pub ended_queues: String,
    /// Folds the finished counts of every server process into one row per queue and end.
    pub fold_finished: String,
    /// Folds the completion counts of every server process into one row per minute and queue.
    pub fold_completions: String,
    /// Recorded refusals per queue (of their job) and minute from `$1`.
    pub refused: String,
    /// Failed attempts per queue (of their job) and minute from `$1` (migration 17).
    pub failed: String,
    /// Jobs dead now per queue and minute of their last change from `$1`.
    pub dead: String,
    /// Jobs cancelled now per queue and minute of their last change from `$1`.
    pub cancelled: String,
    /// Records a refused holder write, at the server's clock.
    pub insert_audit: String,
    /// Keeps the newest `$1` audit rows.
    pub trim_audit: String,
    /// Completes a job and claims the next ones in one statement (migration 7's `step`).
    pub step: String,
    /// How many of the queues `$1` have settings, their rows read `FOR SHARE` (a change of
    /// settings waits for the batch that read them).
    pub settle_queues: String,
    /// Reads and locks the jobs of many ids (`$1`), in id order, their payloads left out
    /// (no completion reads or writes one).
    pub settle_lock: String,
    /// The jobs among `$1` that jobs are waiting on (a workflow's parents). Each child is read
    /// by its key: as a join, the generic plan scanned every job for the waiting ones.
    pub settle_waiting: String,
    /// [`update_many`] leaving every job's payload as it is (no batched write changes one).
    pub settle_update: String,
}

// Public only through `StatementTexts` (feature `test-support`).
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
impl Sql {
    /// The statements for schema `s`.
    #[must_use]
    pub fn new(s: &str) -> Self {
        let open = open_jobs(s);
        let [
            stats,
            due,
            completions,
            fold_finished,
            fold_completions,
            refused,
            failed,
            dead,
            cancelled,
        ] = overview(s, &open);
        Self {
            select: format!("SELECT {READ_COLUMNS} FROM {s}.jobs WHERE id = $1"),
            lock: format!("SELECT {READ_COLUMNS} FROM {s}.jobs WHERE id = $1 FOR UPDATE"),
            lock_purged: format!("SELECT fence FROM {s}.purged WHERE id = $1 FOR UPDATE"),
            forget_purged: format!("DELETE FROM {s}.purged WHERE id = $1"),
            lock_many: format!(
                "SELECT id, {READ_COLUMNS} FROM {s}.jobs WHERE id = ANY($1::text[]) FOR UPDATE"
            ),
            lock_purged_many: format!(
                "SELECT id, fence FROM {s}.purged WHERE id = ANY($1::text[]) FOR UPDATE"
            ),
            insert: format!(
                "INSERT INTO {s}.jobs (id, {COLUMNS}, leased_until) VALUES \
                 ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
                 $18, $19, $20, $21) \
                 ON CONFLICT (id) DO NOTHING"
            ),
            update: format!(
                "UPDATE {s}.jobs SET owner = $2, until = $3, fence = $4, result = $5, done = $6, \
                 queue = $7, priority = $8, run_at = $9, attempts = $10, max_attempts = $11, \
                 payload = $12, ended = $13, error = $14, result_fence = $15, updated = $16, \
                 token = $17, timeout = $18, progress = $19, grp = $20, leased_until = $21 \
                 WHERE id = $1"
            ),
            update_counted: update_counted(s),
            attempts: format!(
                "SELECT fence, owner, started, ended, outcome, error FROM {s}.attempts \
                 WHERE job = $1 ORDER BY fence"
            ),
            attempts_all: format!(
                "SELECT job, fence, owner, started, ended, outcome, error FROM {s}.attempts \
                 ORDER BY job COLLATE \"C\", fence"
            ),
            attempts_clear: format!("DELETE FROM {s}.attempts WHERE job = ANY($1::text[])"),
            attempts_put: format!(
                "INSERT INTO {s}.attempts (job, fence, owner, started, ended, outcome, error) \
                 SELECT j, f, o, st, coalesce(e, extract(epoch FROM clock_timestamp())::float8), \
                 oc, er FROM unnest($1::text[], $2::int8[], $3::text[], $4::float8[], \
                 $5::float8[], $6::text[], $7::text[]) AS u(j, f, o, st, e, oc, er) \
                 ON CONFLICT DO NOTHING"
            ),
            // Read after the statements before it in the transaction (and so after any row
            // lock they waited for).
            clock: "SELECT extract(epoch FROM clock_timestamp())::float8".to_owned(),
            settings: format!("{}, {s}.epoch()", settings_sql()),
            epoch: format!("SELECT {s}.epoch()"),
            raise_epoch: format!(
                "WITH now AS (SELECT {s}.epoch() AS e) UPDATE {s}.epoch \
                 SET raised = raised + greatest(0, $1::bigint - now.e) FROM now \
                 RETURNING greatest(now.e, $1::bigint)"
            ),
            candidates: candidates(s),
            purgeable: format!(
                "SELECT id, {COLUMNS} FROM {s}.jobs WHERE (done OR ended IS NOT NULL \
                 OR (attempts >= greatest(max_attempts, 1) AND until <= $1)) \
                 AND (updated IS NULL OR updated < $1) FOR UPDATE SKIP LOCKED"
            ),
            remember_purged: format!(
                "INSERT INTO {s}.purged (id, fence) SELECT * FROM unnest($1::text[], $2::bigint[]) \
                 ON CONFLICT (id) DO UPDATE SET fence = greatest({s}.purged.fence, excluded.fence)"
            ),
            delete: format!("DELETE FROM {s}.jobs WHERE id = ANY($1::text[])"),
            page: format!(
                "SELECT id, {READ_COLUMNS} FROM {s}.jobs WHERE ($1::text IS NULL OR queue = $1) \
                 AND id > $2 ORDER BY id LIMIT $3"
            ),
            stats,
            due,
            completions,
            open_page: format!(
                "SELECT id, {READ_COLUMNS} FROM {open} o WHERE queue = $1 \
                 AND id > $2 COLLATE \"C\" ORDER BY id COLLATE \"C\" LIMIT $3"
            ),
            open_page_any: format!(
                "SELECT id, {READ_COLUMNS} FROM {open} o WHERE id > $1 COLLATE \"C\" \
                 ORDER BY id COLLATE \"C\" LIMIT $2"
            ),
            ended_page: format!(
                "SELECT id, {READ_COLUMNS} FROM {s}.jobs WHERE (done OR ended IS NOT NULL) \
                 AND queue = $1 AND ({END}) = $3 AND id > $2 COLLATE \"C\" \
                 ORDER BY queue, ({END}), id COLLATE \"C\" LIMIT $4"
            ),
            ended_queues: format!(
                "SELECT queue FROM {s}.finished WHERE finished = $1 GROUP BY queue \
                 HAVING sum(n) > 0 ORDER BY queue"
            ),
            fold_finished,
            fold_completions,
            refused,
            failed,
            dead,
            cancelled,
            insert_audit: format!(
                "INSERT INTO {s}.audit (time, job, owner, operation, presented, current, reason, \
                 late_by) VALUES (extract(epoch FROM clock_timestamp())::float8, \
                 $1, $2, $3, $4, $5, $6, $7)"
            ),
            trim_audit: format!(
                "DELETE FROM {s}.audit WHERE seq <= (SELECT max(seq) FROM {s}.audit) - $1"
            ),
            step: format!(
                "SELECT * FROM {s}.step($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
                 $14, $15, $16)"
            ),
            settle_queues: format!(
                "SELECT count(*) FROM (SELECT 1 FROM {s}.queues WHERE queue = ANY($1::text[]) \
                 FOR SHARE) q"
            ),
            settle_lock: format!(
                "SELECT id, owner, until, fence, result, done, queue, priority, run_at, \
                 attempts, max_attempts, NULL::bytea, ended, error, result_fence, updated, \
                 token, timeout, progress, grp, on_parent_failure FROM {s}.jobs \
                 WHERE id = ANY($1::text[]) ORDER BY id COLLATE \"C\" FOR UPDATE"
            ),
            settle_waiting: format!(
                "SELECT DISTINCT p.parent FROM {s}.parents p WHERE p.parent = ANY($1::text[]) \
                 AND (SELECT c.ended FROM {s}.jobs c WHERE c.id = p.child) = 'waiting'"
            ),
            settle_update: update_many_with(s, false),
        }
    }
}

/// The overview's statements for schema `s` (`open` is the open jobs' relation), in this
/// order: `stats`, `due`, the completions, the folds of the finished and the completed counts,
/// and the activity counts (refused, failed, dead, cancelled per minute).
fn overview(s: &str, open: &str) -> [String; 9] {
    [
        // The inputs of the status rule for the open jobs, grouped (the domain judges
        // each group), with the finished ones as migration 6's trigger counts them.
        format!(
            "SELECT queue, done, ended, until > $1, attempts >= greatest(max_attempts, 1), \
             count(*) FROM {open} o GROUP BY 1, 2, 3, 4, 5 \
             UNION ALL SELECT queue, finished = 'done', nullif(finished, 'done'), false, \
             false, sum(n)::bigint FROM {s}.finished GROUP BY queue, finished \
             HAVING sum(n) <> 0"
        ),
        format!(
            "SELECT queue, count(*), min(greatest(run_at, CASE WHEN fence > 0 THEN until END, \
             updated)) FROM {open} o WHERE until <= $1 \
             AND attempts < greatest(max_attempts, 1) AND (run_at IS NULL OR run_at <= $1) \
             GROUP BY 1 ORDER BY 1"
        ),
        format!(
            "SELECT queue, minute, sum(n)::bigint FROM {s}.completions WHERE minute >= $1 \
             GROUP BY 1, 2 HAVING sum(n) <> 0"
        ),
        format!(
            "WITH f AS (DELETE FROM {s}.finished WHERE shard <> 0 RETURNING queue, finished, n) \
             INSERT INTO {s}.finished (queue, finished, shard, n) \
             SELECT queue, finished, 0, sum(n) FROM f GROUP BY 1, 2 \
             ON CONFLICT (queue, finished, shard) DO UPDATE SET n = {s}.finished.n + excluded.n"
        ),
        format!(
            "WITH f AS (DELETE FROM {s}.completions WHERE shard <> 0 \
             RETURNING minute, queue, n) \
             INSERT INTO {s}.completions (minute, queue, shard, n) \
             SELECT minute, queue, 0, sum(n) FROM f GROUP BY 1, 2 \
             ON CONFLICT (minute, queue, shard) DO UPDATE SET n = {s}.completions.n + excluded.n"
        ),
        format!(
            "SELECT j.queue, floor(a.time / 60) * 60, count(*) FROM {s}.audit a \
             JOIN {s}.jobs j ON j.id = a.job WHERE a.time >= $1 GROUP BY 1, 2"
        ),
        format!(
            "SELECT j.queue, floor(a.ended / 60) * 60, count(*) FROM {s}.attempts a \
             JOIN {s}.jobs j ON j.id = a.job WHERE a.outcome IN ('failed', 'timed_out') \
             AND a.ended >= $1 GROUP BY 1, 2"
        ),
        format!(
            "SELECT queue, floor(updated / 60) * 60, count(*) FROM {s}.jobs \
             WHERE ended IN ('dead', 'cancelled') AND ended = 'dead' AND updated >= $1 \
             GROUP BY 1, 2"
        ),
        format!(
            "SELECT queue, floor(updated / 60) * 60, count(*) FROM {s}.jobs \
             WHERE ended IN ('dead', 'cancelled') AND ended = 'cancelled' AND updated >= $1 \
             GROUP BY 1, 2"
        ),
    ]
}

/// The candidates of claim_next, in the domain's claim order (exactly the jobs
/// `Job::is_claim_candidate` selects), skipping rows another transaction holds. `$2` is the
/// caller's now, or NULL for the store's clock, read once for the whole statement and returned
/// with each row. Held jobs whose lease has ended are first filed with the unheld ones
/// (`Job::leased_until`), found by the index of lease ends; the unheld ones come from the ready
/// index in claim order, so live leases are never read. The two meet in one small sort. The
/// ended leases are gathered into an array first, so that the update finds them by primary key:
/// as `IN (subquery)` the generic plan was a hash join over a scan of the whole table.
fn candidates(s: &str) -> String {
    format!(
        "WITH clock AS MATERIALIZED \
         (SELECT coalesce($2, extract(epoch FROM clock_timestamp())::float8) AS now), \
         refiled AS (UPDATE {s}.jobs SET leased_until = NULL WHERE id = ANY(ARRAY( \
         SELECT id FROM {s}.jobs WHERE queue = $1 AND NOT done AND ended IS NULL \
         AND leased_until <= (SELECT now FROM clock) FOR UPDATE SKIP LOCKED)) \
         RETURNING seq, id, {COLUMNS}), \
         unheld AS (SELECT seq, id, {COLUMNS} FROM {s}.jobs \
         WHERE queue = $1 AND NOT done AND ended IS NULL AND leased_until IS NULL \
         AND until <= (SELECT now FROM clock) \
         AND (run_at IS NULL OR run_at <= (SELECT now FROM clock)) \
         AND fence < 9223372036854775807 \
         ORDER BY priority DESC, run_at ASC NULLS FIRST, seq LIMIT $3 \
         FOR UPDATE SKIP LOCKED) \
         SELECT (SELECT now FROM clock), id, {COLUMNS} FROM \
         (SELECT * FROM unheld UNION ALL SELECT * FROM refiled \
         WHERE until <= (SELECT now FROM clock) \
         AND (run_at IS NULL OR run_at <= (SELECT now FROM clock)) \
         AND fence < 9223372036854775807) c \
         ORDER BY priority DESC, run_at ASC NULLS FIRST, seq LIMIT $3"
    )
}

/// A job's update that also counts what it finished and completed (migration 6's counts) and
/// keeps the attempt it ended (`$26`..`$31`, trimming the job's when `$32`), in one
/// statement.
fn update_counted(s: &str) -> String {
    format!(
        "WITH u AS (UPDATE {s}.jobs SET owner = $2, until = $3, fence = $4, result = $5, \
         done = $6, queue = $7, priority = $8, run_at = $9, attempts = $10, \
         max_attempts = $11, payload = $12, ended = $13, error = $14, \
         result_fence = $15, updated = $16, token = $17, timeout = $18, progress = $19, \
         grp = $20, leased_until = $21 WHERE id = $1 RETURNING 1), \
         f AS (INSERT INTO {s}.finished (queue, finished, shard, n) \
         SELECT q, e, pg_backend_pid(), d FROM u, (VALUES ($22::text, $23::text, -1), \
         ($7, $24::text, 1)) AS v(q, e, d) WHERE e IS NOT NULL \
         ON CONFLICT (queue, finished, shard) DO UPDATE SET n = {s}.finished.n + excluded.n), \
         c AS (INSERT INTO {s}.completions (minute, queue, shard, n) \
         SELECT $25::float8, $7, pg_backend_pid(), 1 FROM u WHERE $25::float8 IS NOT NULL \
         ON CONFLICT (minute, queue, shard) DO UPDATE SET n = {s}.completions.n + 1), \
         a AS (INSERT INTO {s}.attempts (job, fence, owner, started, ended, outcome, error) \
         SELECT $1, $26::int8, $27::text, $28::float8, \
         coalesce($29::float8, extract(epoch FROM clock_timestamp())::float8), $30::text, \
         $31::text FROM u WHERE $26::int8 IS NOT NULL ON CONFLICT DO NOTHING), \
         t AS (DELETE FROM {s}.attempts d WHERE $32::bool AND d.job = $1 AND d.fence < \
         (SELECT x.fence FROM {s}.attempts x WHERE x.job = $1 ORDER BY x.fence DESC \
         OFFSET {kept_before} LIMIT 1)) \
         SELECT count(*) FROM u",
        kept_before = KEPT_BEFORE,
    )
}

/// How many of a job's kept attempts a write that keeps one more leaves beside it when it
/// trims: the statement does not see the row it inserts.
const KEPT_BEFORE: u64 = lease_domain::ATTEMPTS_KEPT - 1;

/// Writes many jobs in one statement, each column an array (`$1`..`$21` as
/// [`Encoded::params`], `$22`..`$25` the counts each moves and `$26`..`$32` the attempt it
/// ends as [`Encoded::counted_params`], NULL for a write that moves none), with the counts of
/// migration 6 they move summed by queue and end; answers how many rows it wrote. For rows already locked (a generation of a
/// workflow's children).
pub(crate) fn update_many(s: &str) -> String {
    update_many_with(s, true)
}

/// [`update_many`], writing each job's payload (`$12`) when `payload`, else leaving it.
fn update_many_with(s: &str, payload: bool) -> String {
    let payload = if payload { "payload = v.payload, " } else { "" };
    format!(
        "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::float8[], $4::int8[], \
         $5::text[], $6::bool[], $7::text[], $8::int8[], $9::float8[], $10::int8[], \
         $11::int8[], $12::bytea[], $13::text[], $14::text[], $15::int8[], $16::float8[], \
         $17::bytea[], $18::float8[], $19::text[], $20::text[], $21::float8[], $22::text[], \
         $23::text[], $24::text[], $25::float8[], $26::int8[], $27::text[], $28::float8[], \
         $29::float8[], $30::text[], $31::text[], $32::bool[]) AS v(id, owner, until, fence, \
         result, done, queue, priority, run_at, attempts, max_attempts, payload, ended, error, \
         result_fence, updated, token, timeout, progress, grp, leased_until, old_queue, \
         old_end, new_end, completed, a_fence, a_owner, a_started, a_ended, a_outcome, \
         a_error, a_trim)), \
         u AS (UPDATE {s}.jobs j SET owner = v.owner, until = v.until, fence = v.fence, \
         result = v.result, done = v.done, queue = v.queue, priority = v.priority, \
         run_at = v.run_at, attempts = v.attempts, max_attempts = v.max_attempts, \
         {payload}ended = v.ended, error = v.error, result_fence = v.result_fence, \
         updated = v.updated, token = v.token, timeout = v.timeout, progress = v.progress, \
         grp = v.grp, leased_until = v.leased_until FROM v WHERE j.id = v.id \
         RETURNING v.id, v.queue, v.old_queue, v.old_end, v.new_end, v.completed, v.a_fence, \
         v.a_owner, v.a_started, v.a_ended, v.a_outcome, v.a_error, v.a_trim), \
         f AS (INSERT INTO {s}.finished (queue, finished, shard, n) \
         SELECT q, e, pg_backend_pid(), sum(d) FROM (\
         SELECT old_queue AS q, old_end AS e, -1 AS d FROM u WHERE old_end IS NOT NULL \
         UNION ALL SELECT queue, new_end, 1 FROM u WHERE new_end IS NOT NULL) AS moved \
         GROUP BY q, e \
         ON CONFLICT (queue, finished, shard) DO UPDATE SET n = {s}.finished.n + excluded.n), \
         c AS (INSERT INTO {s}.completions (minute, queue, shard, n) \
         SELECT completed, queue, pg_backend_pid(), count(*) FROM u \
         WHERE completed IS NOT NULL GROUP BY completed, queue \
         ON CONFLICT (minute, queue, shard) DO UPDATE SET n = {s}.completions.n + excluded.n), \
         a AS (INSERT INTO {s}.attempts (job, fence, owner, started, ended, outcome, error) \
         SELECT id, a_fence, a_owner, a_started, \
         coalesce(a_ended, extract(epoch FROM clock_timestamp())::float8), a_outcome, a_error \
         FROM u WHERE a_fence IS NOT NULL ON CONFLICT DO NOTHING), \
         t AS (DELETE FROM {s}.attempts d USING u WHERE u.a_trim AND d.job = u.id \
         AND d.fence < (SELECT x.fence FROM {s}.attempts x WHERE x.job = u.id \
         ORDER BY x.fence DESC OFFSET {kept_before} LIMIT 1)) \
         SELECT count(*) FROM u",
        kept_before = KEPT_BEFORE,
    )
}

/// A job's end as migration 6 indexes and counts it (`done`, `dead`, `cancelled`; NULL while
/// open), spelled exactly as in its index so the planner uses it.
const END: &str = "CASE WHEN done THEN 'done' ELSE ended END";

/// The open jobs (no end recorded), with every column: those the ready set holds
/// (`jobs_ready`) and those it keeps out while a lease runs (`jobs_leased`), each filter that
/// of its partial index, so neither half reads a finished job.
fn open_jobs(s: &str) -> String {
    format!(
        "(SELECT id, seq, {COLUMNS}, on_parent_failure, leased_until FROM {s}.jobs \
         WHERE NOT done AND ended IS NULL AND leased_until IS NULL \
         UNION ALL SELECT id, seq, {COLUMNS}, on_parent_failure, leased_until FROM {s}.jobs \
         WHERE NOT done AND ended IS NULL AND leased_until IS NOT NULL)"
    )
}

/// The planner settings of every `claim_next` transaction (`SET LOCAL` each). `enable_sort`
/// keeps the candidates on the ordered scan of the ready index, which stops at the limit. With
/// statistics that lag a burst of enqueues, the planner otherwise estimates one row and sorts
/// every pending job of the queue instead (seen: over two minutes on 2M jobs). It is local to
/// those transactions because, session-wide, it also turned a catalog query into 300 ms.
/// `jit` is off because the one sort left (merging ended leases with the unheld jobs) is costed
/// as disabled, which puts the statement over the JIT threshold: compiling it took 250 ms per
/// call and up to 2 s under contention, for a statement that runs in a fraction of a
/// millisecond. `plan_cache_mode` takes the generic plan of the prepared statement at once:
/// with the sort costed as disabled, the server otherwise kept planning the statement anew
/// for every call (the plan test checks the generic plan).
pub const CLAIM_NEXT_SETTINGS: [&str; 3] = [
    "enable_sort = off",
    "jit = off",
    "plan_cache_mode = force_generic_plan",
];

/// [`CLAIM_NEXT_SETTINGS`] as one statement that sets each for the transaction only
/// (`set_config(name, value, true)`); spelled once per store (`Sql::settings`) and prepared
/// once per connection like the others.
pub(crate) fn settings_sql() -> String {
    let sets: Vec<String> = CLAIM_NEXT_SETTINGS
        .iter()
        .map(|setting| {
            let (name, value) = setting.split_once(" = ").unwrap_or((setting, ""));
            format!("set_config('{name}', '{value}', true)")
        })
        .collect();
    format!("SELECT {}", sets.join(", "))
}
