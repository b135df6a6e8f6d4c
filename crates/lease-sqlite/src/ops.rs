//! The store operations over one connection. Every write is an [`Op`]: a `lease_domain::Command`
//! on one job, or a `claim_next` or `purge` over many. Inside a `BEGIN IMMEDIATE` transaction
//! each job is loaded, the domain decides, the decision is stored, and the transaction commits
//! before anyone is answered. A batch runs several ops in one transaction, each inside its own
//! savepoint.

use lease_domain::{
    ClockMode, Command, Fence, Job, JobId, LeaseTerm, Outcome, Owner, QueueName, Status, Timestamp,
    is_purgeable,
};
use lease_ports::codec::{self, StoredAudit, StoredGroup};
use lease_ports::next::ClaimNextLoop;
use lease_ports::{JobRecord, JobState, Lease, ListFilter, StatsRow, StoreError};
use rusqlite::Connection;
use rusqlite::types::ValueRef;

use crate::error;

/// Loads one job, its queue fields joined (a missing queue row reads as the defaults).
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const SELECT_JOB: &str = "SELECT j.owner, j.until, j.fence, j.result, j.done, q.queue, \
    q.priority, q.run_at, q.attempts, q.max_attempts, q.payload, q.finished, q.error, \
    q.result_fence, q.updated FROM jobs j LEFT JOIN jobs_queue q ON q.id = j.id WHERE j.id = ?1";
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
/// Stores the queue's columns of a decided job, keeping its enqueue order (`seq`).
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const UPSERT_QUEUE: &str = "INSERT INTO jobs_queue(id, queue, priority, run_at, attempts, \
    max_attempts, payload, finished, error, result_fence, updated) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT(id) DO UPDATE SET \
    queue = excluded.queue, priority = excluded.priority, run_at = excluded.run_at, \
    attempts = excluded.attempts, max_attempts = excluded.max_attempts, \
    payload = excluded.payload, finished = excluded.finished, error = excluded.error, \
    result_fence = excluded.result_fence, updated = excluded.updated";
/// The candidates of `claim_next`, in the domain's claim order, from the ready index: exactly
/// the jobs `Job::is_claim_candidate` selects (the queue's jobs that can still run, whose
/// lease is not live, that are due and whose fence can still go up). The domain then decides
/// each one; the differential tests check that this filter and the rule agree.
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const SELECT_CANDIDATES: &str = "SELECT q.id FROM jobs_queue q JOIN jobs j ON j.id = q.id \
    WHERE q.queue = ?1 AND q.finished IS NULL AND j.done = 0 AND j.until <= ?2 \
    AND (q.run_at IS NULL OR q.run_at <= ?2) AND j.fence < 9223372036854775807 \
    ORDER BY q.priority DESC, q.run_at, q.seq LIMIT ?3";

const SELECT_PURGED: &str = "SELECT fence FROM purged WHERE id = ?1";
pub(crate) const FORGET_PURGED: &str = "DELETE FROM purged WHERE id = ?1";
pub(crate) const REMEMBER_PURGED: &str = "INSERT INTO purged(id, fence) VALUES (?1, ?2) \
    ON CONFLICT(id) DO UPDATE SET fence = max(fence, excluded.fence)";
const DELETE_JOB: &str = "DELETE FROM jobs WHERE id = ?1";
/// Finished jobs changed before the cutoff; the domain decides each one.
const SELECT_PURGEABLE: &str = "SELECT id FROM jobs_queue WHERE finished IS NOT NULL \
    AND (updated IS NULL OR updated < ?1)";
const SELECT_IDS: &str = "SELECT id FROM jobs WHERE ?1 IS NULL OR id IN \
    (SELECT id FROM jobs_queue WHERE queue = ?1) ORDER BY id";
/// The inputs of the status rule, grouped: the domain judges each group.
const SELECT_STATS: &str = "SELECT coalesce(q.queue, 'default'), j.done, q.finished, \
    j.until > ?1, coalesce(q.attempts, 0) >= max(coalesce(q.max_attempts, 5), 1), count(*) \
    FROM jobs j LEFT JOIN jobs_queue q ON q.id = j.id GROUP BY 1, 2, 3, 4, 5";

/// One write: a command on one job, or an operation over many jobs.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// A command on one job.
    Job(JobId, Command),
    /// Lease up to `limit` due jobs of a queue.
    ClaimNext {
        queue: QueueName,
        owner: Owner,
        term: LeaseTerm,
        limit: usize,
    },
    /// An op decided under a clock mode: the host's clock is read inside the transaction.
    Clocked(ClockMode, Option<crate::HostClock>, Box<Op>),
    /// An op whose refused holder writes are recorded in the audit trail, keeping at most
    /// this many rows.
    Audited(u64, Box<Op>),
    /// Delete finished jobs changed before `before`.
    Purge {
        before: Timestamp,
        statuses: Vec<Status>,
    },
}

/// What an [`Op`] answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// The outcome of a command.
    Job(Outcome),
    /// The leases `claim_next` handed out.
    Leases(Vec<Lease>),
    /// How many jobs `purge` deleted.
    Purged(u64),
}

impl Reply {
    pub(crate) fn into_outcome(self) -> Result<Outcome, StoreError> {
        match self {
            Reply::Job(outcome) => Ok(outcome),
            other => Err(wrong_reply(&other)),
        }
    }

    pub(crate) fn into_leases(self) -> Result<Vec<Lease>, StoreError> {
        match self {
            Reply::Leases(leases) => Ok(leases),
            other => Err(wrong_reply(&other)),
        }
    }

    pub(crate) fn into_purged(self) -> Result<u64, StoreError> {
        match self {
            Reply::Purged(n) => Ok(n),
            other => Err(wrong_reply(&other)),
        }
    }
}

fn wrong_reply(reply: &Reply) -> StoreError {
    StoreError::Corrupt(format!("an operation was answered with the wrong reply {reply:?}").into())
}

fn corrupt(id: &JobId, what: String) -> StoreError {
    StoreError::Corrupt(format!("job {id}: {what}").into())
}

/// Reads one column as text, or NULL; anything else (a number, a blob, text that is not UTF-8)
/// is corrupt data that names the job and the column.
fn text(
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
fn number(
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

fn integer(
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

fn required<T>(id: &JobId, value: Option<T>, column: &'static str) -> Result<T, StoreError> {
    value.ok_or_else(|| corrupt(id, format!("stored {column} is NULL")))
}

fn fence_of(id: &JobId, stored: i64, column: &'static str) -> Result<Fence, StoreError> {
    Fence::try_from(stored).map_err(|f| corrupt(id, format!("stored {column} {f} is negative")))
}

fn count(
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
fn decode(id: &JobId, row: &rusqlite::Row<'_>) -> Result<Job, StoreError> {
    let owner = text(id, row, 0, "owner")?
        .map(Owner::new)
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
            QueueName::new(name).map_err(|e| corrupt(id, format!("stored queue: {e}")))?
        }
        None => QueueName::default(),
    };
    let finished = text(id, row, 11, "finished")?;
    let ended = codec::ended(finished.as_deref(), "stored finished")?;
    if ended.is_some() && done {
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
    })
}

pub(crate) fn load(conn: &Connection, id: &JobId) -> Result<Option<Job>, StoreError> {
    let mut stmt = conn.prepare_cached(SELECT_JOB).map_err(error::sql(conn))?;
    let mut rows = stmt.query([id.as_str()]).map_err(error::sql(conn))?;
    match rows.next().map_err(error::sql(conn))? {
        Some(row) => decode(id, row).map(Some),
        None => Ok(None),
    }
}

fn finished_text(job: &Job) -> Option<&'static str> {
    job.finished().map(Status::as_str)
}

pub(crate) fn store(
    conn: &Connection,
    inserting: bool,
    id: &JobId,
    job: &Job,
) -> Result<(), StoreError> {
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
        .map_err(error::sql(conn))?;
    conn.prepare_cached(UPSERT_QUEUE)
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
            ])
        })
        .map_err(error::sql(conn))?;
    Ok(())
}

pub(crate) fn run_with(conn: &Connection, sql: &str, id: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([id]))
        .map(drop)
        .map_err(error::sql(conn))
}

/// The fence a purged id had, when it was purged and not enqueued since.
pub(crate) fn purged_fence(conn: &Connection, id: &JobId) -> Result<Option<Fence>, StoreError> {
    let stored: Option<i64> = conn
        .prepare_cached(SELECT_PURGED)
        .and_then(|mut stmt| {
            let mut rows = stmt.query([id.as_str()])?;
            rows.next()?.map(|r| r.get(0)).transpose()
        })
        .map_err(error::sql(conn))?;
    stored.map(|f| fence_of(id, f, "purged fence")).transpose()
}

/// Loads, decides and stores one command inside the open transaction; says whether it wrote.
fn apply_command(
    conn: &Connection,
    id: &JobId,
    command: &Command,
) -> Result<(Outcome, bool), StoreError> {
    decide_command(conn, id, command).map(|(outcome, wrote, _)| (outcome, wrote))
}

/// [`apply_command`], also giving the refusal of a holder's write (for the audit trail).
fn decide_command(
    conn: &Connection,
    id: &JobId,
    command: &Command,
) -> Result<(Outcome, bool, Option<lease_domain::Refusal>), StoreError> {
    let current = load(conn, id)?;
    let purged = match current {
        None if command.is_enqueue() => purged_fence(conn, id)?,
        _ => None,
    };
    let (next, outcome) = command.decide(id, current.as_ref(), purged);
    let refused = lease_ports::observe::decided(command, current.as_ref(), &outcome);
    let Some(next) = next else {
        return Ok((outcome, false, refused));
    };
    store(conn, current.is_none(), id, &next)?;
    if current.is_none() && purged.is_some() {
        run_with(conn, FORGET_PURGED, id.as_str())?;
    }
    Ok((outcome, true, None))
}

fn candidates(
    conn: &Connection,
    queue: &QueueName,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<JobId>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn
        .prepare_cached(SELECT_CANDIDATES)
        .map_err(error::sql(conn))?;
    let ids = stmt
        .query_map(rusqlite::params![queue.as_str(), now.get(), limit], |r| {
            r.get::<_, String>(0)
        })
        .and_then(Iterator::collect::<Result<Vec<String>, _>>)
        .map_err(error::sql(conn))?;
    ids.into_iter()
        .map(|id| {
            JobId::new(id).map_err(|e| StoreError::Corrupt(format!("stored job id: {e}").into()))
        })
        .collect()
}

/// Leases up to `limit` jobs: the shared loop (`lease_ports::next`) reads pages of candidates
/// from the ready index in claim order and decides each; the decided rows are stored here.
fn claim_next(
    conn: &Connection,
    queue: &QueueName,
    owner: &Owner,
    term: LeaseTerm,
    limit: usize,
) -> Result<(Vec<Lease>, bool), StoreError> {
    let mut next = ClaimNextLoop::new(owner, limit);
    let mut wrote = false;
    while let Some(want) = next.want() {
        let mut page = Vec::new();
        for id in candidates(conn, queue, term.now(), want)? {
            if let Some(job) = load(conn, &id)? {
                page.push((id, job));
            }
        }
        for (id, job) in next.page(term, page) {
            store(conn, false, &id, &job)?;
            wrote = true;
        }
    }
    Ok((next.into_leases(), wrote))
}

fn purge(
    conn: &Connection,
    before: Timestamp,
    statuses: &[Status],
) -> Result<(u64, bool), StoreError> {
    let ids: Vec<String> = conn
        .prepare_cached(SELECT_PURGEABLE)
        .and_then(|mut stmt| {
            stmt.query_map([before.get()], |r| r.get(0))?
                .collect::<Result<_, _>>()
        })
        .map_err(error::sql(conn))?;
    let mut purged = 0_u64;
    for id in ids {
        let id = JobId::new(id)
            .map_err(|e| StoreError::Corrupt(format!("stored job id: {e}").into()))?;
        let Some(job) = load(conn, &id)? else {
            continue;
        };
        if !is_purgeable(&job, before, statuses) {
            continue;
        }
        conn.prepare_cached(REMEMBER_PURGED)
            .and_then(|mut stmt| stmt.execute(rusqlite::params![id.as_str(), i64::from(job.fence)]))
            .map_err(error::sql(conn))?;
        run_with(conn, DELETE_JOB, id.as_str())?;
        purged += 1;
    }
    Ok((purged, purged > 0))
}

/// Runs one op inside the open transaction; says whether it wrote.
fn apply(conn: &Connection, op: &Op) -> Result<(Reply, bool), StoreError> {
    match op {
        Op::Job(id, command) => {
            apply_command(conn, id, command).map(|(outcome, wrote)| (Reply::Job(outcome), wrote))
        }
        Op::ClaimNext {
            queue,
            owner,
            term,
            limit,
        } => claim_next(conn, queue, owner, *term, *limit)
            .map(|(leases, wrote)| (Reply::Leases(leases), wrote)),
        Op::Purge { before, statuses } => {
            purge(conn, *before, statuses).map(|(n, wrote)| (Reply::Purged(n), wrote))
        }
        Op::Clocked(mode, clock, op) => apply(
            conn,
            &clocked(*mode, op, crate::clock::now(clock.as_ref())?)?,
        ),
        Op::Audited(retention, op) => audited(conn, *retention, op),
    }
}

/// The audit trail's table (made when a store is opened with the trail on).
const INSERT_AUDIT: &str = "INSERT INTO lease_audit(time, job, owner, operation, presented, \
    current, reason, late_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
const TRIM_AUDIT: &str =
    "DELETE FROM lease_audit WHERE seq <= (SELECT max(seq) FROM lease_audit) - ?1";

/// Runs `op`; if it is a holder's write that was refused, records the refusal (and trims the
/// trail to `retention` rows) in the same transaction, which then commits.
fn audited(conn: &Connection, retention: u64, op: &Op) -> Result<(Reply, bool), StoreError> {
    let op = match op {
        Op::Clocked(mode, clock, inner) => {
            clocked(*mode, inner, crate::clock::now(clock.as_ref())?)?
        }
        other => other.clone(),
    };
    let Op::Job(id, command) = &op else {
        return apply(conn, &op);
    };
    let (outcome, wrote, refused) = decide_command(conn, id, command)?;
    let reply = Reply::Job(outcome);
    let Some(entry) = refused else {
        return Ok((reply, wrote));
    };
    let now = crate::clock::host_now()?;
    conn.prepare_cached(INSERT_AUDIT)
        .and_then(|mut stmt| {
            stmt.execute(rusqlite::params![
                now.get(),
                id.as_str(),
                entry.owner.as_str(),
                entry.operation,
                i64::from(entry.presented),
                entry.current.map(i64::from),
                entry.reason.as_str(),
                entry.late_by,
            ])
        })
        .and_then(|_| {
            conn.prepare_cached(TRIM_AUDIT)?
                .execute([i64::try_from(retention).unwrap_or(i64::MAX)])
        })
        .map_err(error::sql(conn))?;
    Ok((reply, true))
}

/// The op to decide under `mode` when the store's clock reads `now`; a skewed caller is
/// refused before anything is read.
fn clocked(mode: ClockMode, op: &Op, now: Timestamp) -> Result<Op, StoreError> {
    Ok(match op {
        Op::Job(id, command) if mode.needs_clock(command) => {
            Op::Job(id.clone(), mode.resolve(command, now)?)
        }
        Op::ClaimNext {
            queue,
            owner,
            term,
            limit,
        } if mode.needs_clock_for_term() => Op::ClaimNext {
            queue: queue.clone(),
            owner: owner.clone(),
            term: mode.resolve_term(*term, now)?,
            limit: *limit,
        },
        other => other.clone(),
    })
}

pub(crate) fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Rolls back whatever is still open; used on every path that does not commit.
pub(crate) fn roll_back(conn: &Connection) {
    if !conn.is_autocommit() {
        // A failed ROLLBACK leaves nothing to do: SQLite has already ended the transaction.
        let _ = run(conn, "ROLLBACK");
    }
}

/// Runs one op in its own `BEGIN IMMEDIATE` transaction; one that writes nothing rolls back (no
/// sync).
pub(crate) fn execute(conn: &mut Connection, op: &Op) -> Result<Reply, StoreError> {
    run(conn, "BEGIN IMMEDIATE").map_err(error::sql(conn))?;
    match apply(conn, op) {
        Ok((reply, true)) => match run(conn, "COMMIT") {
            Ok(()) => Ok(reply),
            Err(e) => {
                roll_back(conn);
                Err(error::at_commit(e))
            }
        },
        Ok((reply, false)) => {
            roll_back(conn);
            Ok(reply)
        }
        Err(e) => {
            roll_back(conn);
            Err(e)
        }
    }
}

/// Runs several ops in one `BEGIN IMMEDIATE` transaction, in order, each in its own savepoint
/// so a failing one leaves the others alone; one commit (one sync) covers them all.
///
/// If the transaction cannot begin or commit, or SQLite ends it early, every op of the batch
/// fails: none of them is applied (or, for a failed commit, the outcome is unknown).
pub(crate) fn execute_batch(conn: &mut Connection, batch: &[Op]) -> Vec<Result<Reply, StoreError>> {
    if let [op] = batch {
        return vec![execute(conn, op)];
    }
    let fail_all = |err: &StoreError, why: &str| -> Vec<Result<Reply, StoreError>> {
        batch.iter().map(|_| Err(batch_error(err, why))).collect()
    };
    if let Err(e) = run(conn, "BEGIN IMMEDIATE") {
        return fail_all(&error::sql(conn)(e), "the batch could not begin");
    }
    let mut results = Vec::with_capacity(batch.len());
    let mut wrote = false;
    for op in batch {
        let attempt = run(conn, "SAVEPOINT op")
            .map_err(error::sql(conn))
            .and_then(|()| apply(conn, op));
        match attempt {
            Ok((reply, did_write)) => {
                wrote |= did_write;
                results.push(
                    run(conn, "RELEASE op")
                        .map(|()| reply)
                        .map_err(error::sql(conn)),
                );
            }
            Err(e) => {
                if conn.is_autocommit() {
                    // SQLite rolled the whole transaction back (a full disk, say): nothing stands.
                    return fail_all(&e, "the batch was rolled back");
                }
                let _ = run(conn, "ROLLBACK TO op").and_then(|()| run(conn, "RELEASE op"));
                results.push(Err(e));
            }
        }
    }
    if !wrote {
        roll_back(conn);
        return results;
    }
    match run(conn, "COMMIT") {
        Ok(()) => results,
        Err(e) => {
            roll_back(conn);
            fail_all(&error::at_commit(e), "the batch's commit failed")
        }
    }
}

/// The error every op of a failed batch gets: it keeps the kind (so "not applied" stays
/// determinate and an unknown commit stays indeterminate) and says what happened.
pub(crate) fn batch_error(err: &StoreError, why: &str) -> StoreError {
    let message = if err.is_determinate() {
        format!("{why}, so this write was not applied: {err}")
    } else {
        format!("{why}: {err}")
    };
    match err {
        StoreError::Full(d) => StoreError::Full(d.retold(message)),
        StoreError::ReadOnly(d) => StoreError::ReadOnly(d.retold(message)),
        StoreError::Corrupt(d) => StoreError::Corrupt(d.retold(message)),
        StoreError::Indeterminate(d) => StoreError::Indeterminate(d.retold(message)),
        StoreError::Unavailable(d) => StoreError::Unavailable(d.retold(message)),
        _ => StoreError::Unavailable(message.into()),
    }
}

pub(crate) fn state(conn: &Connection, id: &JobId) -> Result<Option<JobState>, StoreError> {
    Ok(load(conn, id)?.map(|job| JobState::new(id, job)))
}

pub(crate) fn record(conn: &Connection, id: &JobId) -> Result<Option<JobRecord>, StoreError> {
    Ok(load(conn, id)?.map(|job| JobRecord {
        id: id.clone(),
        job,
    }))
}

/// Runs `body` in a read transaction, so that a multi-row read sees one snapshot.
pub(crate) fn reading<T>(
    conn: &Connection,
    body: impl FnOnce(&Connection) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    run(conn, "BEGIN").map_err(error::sql(conn))?;
    let result = body(conn);
    roll_back(conn);
    result
}

pub(crate) fn list(conn: &Connection, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
    reading(conn, |conn| {
        let mut stmt = conn.prepare_cached(SELECT_IDS).map_err(error::sql(conn))?;
        let queue = filter.queue.as_ref().map(QueueName::as_str);
        let mut rows = stmt.query([queue]).map_err(error::sql(conn))?;
        let mut found = Vec::new();
        while found.len() < filter.limit {
            let Some(row) = rows.next().map_err(error::sql(conn))? else {
                break;
            };
            let id: String = row.get(0).map_err(error::sql(conn))?;
            let id = JobId::new(id)
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

/// The audit trail, oldest first (empty when the table was never made).
pub(crate) fn audit_rows(
    conn: &Connection,
    filter: &lease_ports::audit::AuditFilter,
) -> Result<Vec<lease_ports::audit::AuditRow>, StoreError> {
    reading(conn, |conn| {
        let exists: bool = conn
            .query_row(
                "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'lease_audit'",
                [],
                |r| r.get(0),
            )
            .map_err(error::sql(conn))?;
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

#[cfg(test)]
mod tests {
    use lease_domain::{ClaimRefused, LeaseTerm};

    use super::*;
    use crate::connection::{SqliteOptions, open};

    fn fresh(dir: &tempfile::TempDir, options: &SqliteOptions) -> Connection {
        open(&dir.path().join("batch.db"), options).unwrap().conn
    }

    fn claim(owner: &str) -> Command {
        Command::Claim(
            Owner::new(owner).unwrap(),
            LeaseTerm::new(0.0, 10.0).unwrap(),
        )
    }

    fn id(name: &str) -> JobId {
        JobId::new(name).unwrap()
    }

    #[test]
    fn claim_next_candidates_come_from_the_ready_index_without_a_scan_or_a_sort() {
        let dir = tempfile::tempdir().unwrap();
        let conn = fresh(&dir, &SqliteOptions::default());
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {SELECT_CANDIDATES}"))
            .unwrap()
            .query_map(rusqlite::params!["q", 0.0, 10], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let shown = plan.join("; ");
        assert!(
            plan.iter()
                .any(|step| step.contains("USING INDEX jobs_queue_ready")),
            "{shown}"
        );
        assert!(
            plan.iter()
                .any(|step| step.starts_with("SEARCH j USING INDEX sqlite_autoindex_jobs_1")),
            "{shown}"
        );
        assert!(!plan.iter().any(|step| step.starts_with("SCAN")), "{shown}");
        assert!(!shown.contains("TEMP B-TREE"), "{shown}");
    }

    #[test]
    fn a_failed_batch_keeps_the_kind_of_its_error_for_every_command() {
        let kinds = [
            StoreError::Full("x".into()),
            StoreError::ReadOnly("x".into()),
            StoreError::Corrupt("x".into()),
            StoreError::Indeterminate("x".into()),
            StoreError::Unavailable("x".into()),
        ];
        for kind in kinds {
            let batch = batch_error(&kind, "the batch's commit failed");
            assert_eq!(
                std::mem::discriminant(&batch),
                std::mem::discriminant(&kind),
                "{kind:?} became {batch:?}"
            );
            assert_eq!(batch.is_determinate(), kind.is_determinate());
            assert!(
                batch.to_string().contains("the batch's commit failed"),
                "{batch}"
            );
        }
    }

    #[test]
    fn a_batch_decides_in_order_and_later_commands_see_earlier_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = fresh(&dir, &SqliteOptions::default());
        let batch = [
            Op::Job(id("j"), Command::Enqueue),
            Op::Job(id("j"), claim("a")),
            Op::Job(id("j"), claim("b")),
            Op::Job(id("j"), Command::Enqueue),
        ];
        let answers: Vec<Outcome> = execute_batch(&mut conn, &batch)
            .into_iter()
            .map(|r| r.unwrap().into_outcome().unwrap())
            .collect();
        assert_eq!(answers[0], Outcome::Enqueued(true));
        assert_eq!(answers[1], Outcome::Claimed(Ok(Fence::new(1).unwrap())));
        assert!(matches!(
            answers[2],
            Outcome::Claimed(Err(ClaimRefused::Live { .. }))
        ));
        assert_eq!(answers[3], Outcome::Enqueued(false));
        assert_eq!(
            state(&conn, &id("j")).unwrap().unwrap().owner.as_deref(),
            Some("a")
        );
    }

    #[test]
    fn a_failing_command_leaves_the_rest_of_its_batch_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = fresh(&dir, &SqliteOptions::default());
        conn.execute_batch("INSERT INTO jobs(id) VALUES ('a'), ('b'); INSERT INTO jobs(id, fence) VALUES ('bad', -1);")
            .unwrap();
        let batch = [
            Op::Job(id("a"), claim("w")),
            Op::Job(id("bad"), claim("w")),
            Op::Job(id("b"), claim("w")),
        ];
        let answers = execute_batch(&mut conn, &batch);
        assert!(matches!(
            answers[0],
            Ok(Reply::Job(Outcome::Claimed(Ok(_))))
        ));
        assert!(
            matches!(answers[1], Err(StoreError::Corrupt(_))),
            "{:?}",
            answers[1]
        );
        assert!(matches!(
            answers[2],
            Ok(Reply::Job(Outcome::Claimed(Ok(_))))
        ));
        assert_eq!(state(&conn, &id("a")).unwrap().unwrap().fence, 1);
        assert_eq!(state(&conn, &id("b")).unwrap().unwrap().fence, 1);
        let bad: i64 = conn
            .query_row("SELECT fence FROM jobs WHERE id = 'bad'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(bad, -1);
    }

    #[test]
    fn when_the_disk_fills_mid_batch_every_answer_matches_what_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let options = SqliteOptions {
            max_pages: Some(12),
            ..SqliteOptions::default()
        };
        let mut conn = fresh(&dir, &options);
        // Small and large enqueues alternate; the large ones run out of pages.
        let batch: Vec<Op> = (0..40)
            .map(|i| {
                Op::Job(
                    id(&format!(
                        "{i:02}-{}",
                        "x".repeat(if i % 2 == 0 { 1 } else { 3000 })
                    )),
                    Command::Enqueue,
                )
            })
            .collect();
        let answers = execute_batch(&mut conn, &batch);
        let failures = answers.iter().filter(|a| a.is_err()).count();
        assert!(failures > 0, "the cap never bit");
        for (op, answer) in batch.iter().zip(&answers) {
            let Op::Job(job, _) = op else { unreachable!() };
            let stored = state(&conn, job).unwrap().is_some();
            match answer {
                Ok(Reply::Job(Outcome::Enqueued(true))) => {
                    assert!(stored, "{job} acknowledged but not stored")
                }
                Err(e) => {
                    assert!(matches!(e, StoreError::Full(_)), "{e}");
                    assert!(!stored, "{job} failed but was stored");
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
