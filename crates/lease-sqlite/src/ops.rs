//! The store's write operations. Every write is an [`Op`]: a `lease_domain::Command` on one
//! job, or a `claim_next` or `purge` over many, possibly wrapped to read the host's clock or to
//! record a refusal in the audit trail. Inside the transaction `tx` opens, each job is loaded
//! (`row`), the domain decides, and the decision is stored.

use lease_domain::{
    ClockMode, Command, GroupKey, Job, JobId, Outcome, QueueName, Status, Timestamp, is_purgeable,
};
use lease_ports::next::{Answer, Candidate, ClaimWalk, Effect, Read};
use lease_ports::{ClaimNext, Lease, StoreError};
use rusqlite::{Connection, OptionalExtension};

use crate::error;
use crate::job_write::{REMEMBER_PURGED, apply_command, run_with};
use crate::row::load;

/// The candidates of `claim_next`, in the domain's claim order, from the ready index of the
/// jobs no one holds (after [`REFILE_ENDED_LEASES`]): exactly the jobs
/// `Job::is_claim_candidate` selects (the queue's jobs that can still run, whose lease is not
/// live, that are due and whose fence can still go up). The domain then decides each one; the
/// differential tests check that this filter and the rule agree.
///
/// The limit is `+?3`, not `?3`: SQLite recompiles a statement whenever a parameter its
/// planner looked at is bound again, and it looks at a bare `LIMIT ?`, so every call
/// recompiled the query (about a tenth of the group-commit leader's time at 64 workers).
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const SELECT_CANDIDATES: &str = "SELECT q.id FROM jobs_queue q JOIN jobs j ON j.id = q.id \
    WHERE q.queue = ?1 AND q.finished IS NULL AND q.leased_until IS NULL \
    AND j.done = 0 AND j.until <= ?2 \
    AND (q.run_at IS NULL OR q.run_at <= ?2) AND j.fence < 9223372036854775807 \
    ORDER BY q.priority DESC, q.run_at, q.seq LIMIT +?3";

/// The due jobs of one group of a queue (`?4`; NULL: the jobs without a group), in claim
/// order, found by `jobs_queue_turn` so that no other group's backlog is read.
const SELECT_TURN_CANDIDATES: &str = "SELECT q.id, q.seq FROM jobs_queue q INDEXED BY jobs_queue_turn \
    JOIN jobs j ON j.id = q.id \
    WHERE q.queue = ?1 AND q.grp IS ?4 AND q.finished IS NULL AND q.leased_until IS NULL \
    AND j.done = 0 AND j.until <= ?2 \
    AND (q.run_at IS NULL OR q.run_at <= ?2) AND j.fence < 9223372036854775807 \
    ORDER BY q.priority DESC, q.run_at, q.seq LIMIT +?3";

/// The next group's turn of a fair queue after (`?2` served, `?3` group), in turn order
/// (`lease_domain::Turn`).
const SELECT_NEXT_TURN: &str = "SELECT served, grp FROM lease_group_turns \
    WHERE queue = ?1 AND (served, grp) > (?2, ?3) ORDER BY served, grp LIMIT 1";

/// Moves a group behind every other of its queue (`Turn::next_served`).
const SERVE_TURN: &str = "UPDATE lease_group_turns SET served = \
    (SELECT max(served) FROM lease_group_turns WHERE queue = ?1) + 1 \
    WHERE queue = ?1 AND grp = ?2";

/// Takes its turn from a group left with no unfinished job.
const DROP_TURN: &str = "DELETE FROM lease_group_turns WHERE queue = ?1 AND grp = ?2 \
    AND NOT EXISTS (SELECT 1 FROM jobs_queue INDEXED BY jobs_queue_turn \
    WHERE queue = ?1 AND grp = ?2 AND finished IS NULL)";

/// A job's enqueue order.
const SELECT_SEQ: &str = "SELECT seq FROM jobs_queue WHERE id = ?1";

/// The jobs of one group of a queue that bear on the group rules (`Job::bears_on_group`):
/// started and not finished, or dead; found by `jobs_queue_group`, whose condition this is.
const SELECT_GROUP_BEARING: &str = "SELECT id FROM jobs_queue WHERE queue = ?1 AND grp = ?2 \
    AND grp IS NOT NULL \
    AND (finished = 'dead' OR (finished IS NULL AND (attempts > 0 OR leased_until IS NOT NULL)))";

/// Files the held jobs of a queue whose lease has ended by `?2` with the unheld jobs, so that
/// the candidates see them in claim order (`Job::leased_until`): each is moved once, found by
/// the index of lease ends, and live leases are never read.
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const REFILE_ENDED_LEASES: &str = "UPDATE jobs_queue SET leased_until = NULL \
    WHERE queue = ?1 AND finished IS NULL AND leased_until <= ?2";

pub(crate) const DELETE_JOB: &str = "DELETE FROM jobs WHERE id = ?1";

/// Jobs finished (or dead because their last allowed lease expired) and changed before the
/// cutoff; the domain decides each one.
pub(crate) const SELECT_PURGEABLE: &str = "SELECT q.id FROM jobs_queue q JOIN jobs j ON j.id = q.id \
    WHERE (q.finished IS NOT NULL OR (j.done = 0 AND q.attempts >= max(q.max_attempts, 1) \
    AND j.until <= ?1)) AND (q.updated IS NULL OR q.updated < ?1)";

/// One write: a command on one job, or an operation over many jobs.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// A command on one job.
    Job(JobId, Command),
    /// Lease up to `limit` due jobs of a queue.
    ClaimNext(ClaimNext),
    /// An op decided under a clock mode: the host's clock is read inside the transaction.
    Clocked(ClockMode, Option<crate::HostClock>, Box<Op>),
    /// An op whose refused holder writes are recorded in the audit trail, keeping at most
    /// this many rows.
    Audited(u64, Box<Op>),
    /// Enqueue many jobs, in order, all or none (one savepoint in a shared batch).
    Enqueue(Vec<(JobId, lease_domain::EnqueueSpec)>),
    /// Delete finished jobs changed before `before`.
    Purge {
        before: Timestamp,
        statuses: Vec<Status>,
    },
    /// Change a queue's settings.
    Queue(QueueName, lease_domain::QueueChange),
    /// Make or replace a schedule, at a time.
    PutSchedule(Box<lease_domain::ScheduleSpec>, Timestamp),
    /// Remove a schedule.
    RemoveSchedule(lease_domain::ScheduleName),
    /// Fire a schedule.
    Fire(Box<lease_ports::control::Fire>),
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
    /// The outcome of each enqueue of a batch.
    Jobs(Vec<Outcome>),
    /// A queue's settings after a change.
    Settings(lease_domain::QueueSettings),
    /// A schedule as written.
    Schedule(Box<lease_domain::Schedule>),
    /// Whether a schedule was removed.
    Removed(bool),
    /// What a fire did.
    Fired(Option<Vec<bool>>),
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

    pub(crate) fn into_outcomes(self) -> Result<Vec<Outcome>, StoreError> {
        match self {
            Reply::Jobs(outcomes) => Ok(outcomes),
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

pub(crate) fn wrong_reply(reply: &Reply) -> StoreError {
    StoreError::Corrupt(format!("an operation was answered with the wrong reply {reply:?}").into())
}

pub(crate) fn candidates(
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
    stored_ids(ids)
}

/// Job ids read back from the store, each checked.
fn stored_ids(ids: Vec<String>) -> Result<Vec<JobId>, StoreError> {
    ids.into_iter().map(lease_ports::codec::job_id).collect()
}

/// The jobs of `groups` (of `queue`) that bear on the group rules, loaded.
fn group_bearing(
    conn: &Connection,
    queue: &QueueName,
    groups: &[GroupKey],
) -> Result<Vec<(JobId, Job)>, StoreError> {
    let mut jobs = Vec::new();
    let mut stmt = conn
        .prepare_cached(SELECT_GROUP_BEARING)
        .map_err(error::sql(conn))?;
    for group in groups {
        let ids = stmt
            .query_map([queue.as_str(), group.as_str()], |r| r.get::<_, String>(0))
            .and_then(Iterator::collect::<Result<Vec<String>, _>>)
            .map_err(error::sql(conn))?;
        for id in stored_ids(ids)? {
            if let Some(job) = load(conn, &id)? {
                jobs.push((id, job));
            }
        }
    }
    Ok(jobs)
}

/// The due jobs of `group` of `queue` (`None`: those without a group) at `now`, in claim
/// order, at most `limit`, loaded.
fn due(
    conn: &Connection,
    queue: &QueueName,
    group: Option<&GroupKey>,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Candidate>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = conn
        .prepare_cached(SELECT_TURN_CANDIDATES)
        .and_then(|mut stmt| {
            stmt.query_map(
                rusqlite::params![
                    queue.as_str(),
                    now.get(),
                    limit,
                    group.map(GroupKey::as_str)
                ],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
            )?
            .collect::<Result<Vec<_>, _>>()
        })
        .map_err(error::sql(conn))?;
    let mut found = Vec::with_capacity(rows.len());
    for (id, seq) in rows {
        let id = lease_ports::codec::job_id(id)?;
        if let Some(job) = load(conn, &id)? {
            found.push(Candidate {
                id,
                job,
                seq: lease_ports::codec::seq(seq)?,
            });
        }
    }
    Ok(found)
}

/// The jobs of `ids` that are stored, loaded.
fn loaded(conn: &Connection, ids: Vec<JobId>) -> Result<Vec<(JobId, Job)>, StoreError> {
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(job) = load(conn, &id)? {
            jobs.push((id, job));
        }
    }
    Ok(jobs)
}

/// The jobs of `ids` that are stored, loaded with their enqueue order.
fn by_id(conn: &Connection, ids: Vec<JobId>) -> Result<Vec<Candidate>, StoreError> {
    let mut found = Vec::with_capacity(ids.len());
    for id in ids {
        let seq = conn
            .prepare_cached(SELECT_SEQ)
            .and_then(|mut stmt| {
                stmt.query_row([id.as_str()], |r| r.get::<_, i64>(0))
                    .optional()
            })
            .map_err(error::sql(conn))?;
        let (Some(seq), Some(job)) = (seq, load(conn, &id)?) else {
            continue;
        };
        found.push(Candidate {
            id,
            job,
            seq: lease_ports::codec::seq(seq)?,
        });
    }
    Ok(found)
}

/// The standing of `groups` (their jobs that bear on the group rules and, under a rate per
/// group, the grants that still count).
fn standing(
    conn: &Connection,
    queue: &QueueName,
    groups: &[GroupKey],
    rates: bool,
) -> Result<Answer, StoreError> {
    let bearing = group_bearing(conn, queue, groups)?;
    let mut counting = Vec::new();
    if rates {
        for group in groups {
            let n = crate::control::counting(conn, queue, Some(group))?;
            counting.push((group.clone(), n));
        }
    }
    Ok(Answer::Standing { bearing, counting })
}

/// The next turn of a fair queue after `after`.
fn next_turn(
    conn: &Connection,
    queue: &QueueName,
    after: Option<(u64, GroupKey)>,
) -> Result<Option<(u64, GroupKey)>, StoreError> {
    let (served, group) = match &after {
        Some((served, group)) => (i64::try_from(*served).unwrap_or(i64::MAX), group.as_str()),
        None => (-1, ""),
    };
    let turn = conn
        .prepare_cached(SELECT_NEXT_TURN)
        .and_then(|mut stmt| {
            stmt.query_row(rusqlite::params![queue.as_str(), served, group], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .optional()
        })
        .map_err(error::sql(conn))?;
    turn.map(|(served, group)| {
        let group = GroupKey::stored(group)
            .map_err(|e| StoreError::Corrupt(format!("a turn's stored group: {e}").into()))?;
        Ok((lease_ports::codec::seq(served)?, group))
    })
    .transpose()
}

/// Answers one read of the claim walk inside the claim's transaction.
fn answer(
    conn: &Connection,
    queue: &QueueName,
    walk: &ClaimWalk,
    read: Read,
) -> Result<Answer, StoreError> {
    let term = walk.term();
    let now = term.now();
    Ok(match read {
        Read::Many(reads) => Answer::Many(
            reads
                .into_iter()
                .map(|read| answer(conn, queue, walk, read))
                .collect::<Result<_, _>>()?,
        ),
        Read::Page { want } => {
            Answer::Page(term, loaded(conn, candidates(conn, queue, now, want)?)?)
        }
        Read::Due { group, want } => {
            Answer::Candidates(term, due(conn, queue, group.as_ref(), now, want)?)
        }
        Read::Jobs(ids) => Answer::Candidates(term, by_id(conn, ids)?),
        Read::Heads { want, skip } => Answer::Heads(crate::heads::first(conn, queue, want, &skip)?),
        Read::Standing(groups) => standing(conn, queue, &groups, walk.rates_groups())?,
        Read::Turn { after } => Answer::Turn(next_turn(conn, queue, after)?),
    })
}

/// Writes one effect of the claim walk; says whether it wrote.
fn write_effect(conn: &Connection, queue: &QueueName, effect: Effect) -> Result<bool, StoreError> {
    let run = |statement: &str, group: &GroupKey| {
        conn.prepare_cached(statement)
            .and_then(|mut stmt| stmt.execute([queue.as_str(), group.as_str()]))
            .map_err(error::sql(conn))
    };
    match effect {
        Effect::Job(id, job, ended) => {
            let changes = lease_domain::Change::of_claim(job, ended);
            crate::job_write::write_all(conn, &id, changes, None)?;
            Ok(true)
        }
        Effect::ServeTurn(group) => Ok(run(SERVE_TURN, &group)? > 0),
        Effect::DropTurn(group) => Ok(run(DROP_TURN, &group)? > 0),
        Effect::RepairHeads(groups) => crate::heads::repair(conn, queue, &groups),
    }
}

/// Leases up to `claim.limit` jobs: the claim walk (`lease_ports::next`) decides, its reads
/// answered by this store's statements and its effects written here.
pub(crate) fn claim_next(
    conn: &Connection,
    claim: &ClaimNext,
) -> Result<(Vec<Lease>, bool), StoreError> {
    let (queue, limit) = (&claim.queue, claim.limit);
    let mut wrote = false;
    // Every lease of this claim hands out its fence in the epoch read in its transaction (the
    // walk decides with this term; it reads only the claim's now from `claim`).
    let term = if limit > 0 {
        claim.term.in_epoch(crate::epoch::read(conn)?)
    } else {
        claim.term
    };
    if limit > 0 {
        let refiled = conn
            .prepare_cached(REFILE_ENDED_LEASES)
            .and_then(|mut stmt| stmt.execute(rusqlite::params![queue.as_str(), term.now().get()]))
            .map_err(error::sql(conn))?;
        wrote = refiled > 0;
    }
    // The queue's settings and, under a limit, its live leases, read in this transaction.
    let settings = crate::control::settings(conn, queue)?;
    let held = if settings.counts_leases() && limit > 0 {
        crate::control::held(conn, queue, term.now())?
    } else {
        0
    };
    // Under a rate: forget the grants expired by this claim's clock, then count the rest.
    let counting = if settings.limits_rate() && limit > 0 {
        wrote |= crate::control::forget_expired_grants(conn, queue, term.now())?;
        crate::control::counting(conn, queue, None)?
    } else {
        0
    };
    let at = ClaimNext {
        term,
        ..claim.clone()
    };
    let mut walk = ClaimWalk::in_queue(&at, &settings, held, counting);
    while let Some(read) = walk.next_read() {
        for effect in walk.take_effects() {
            wrote |= write_effect(conn, queue, effect)?;
        }
        let answered = answer(conn, queue, &walk, read)?;
        walk.answer(answered)?;
    }
    for effect in walk.take_effects() {
        wrote |= write_effect(conn, queue, effect)?;
    }
    let grants = walk.grants();
    if !grants.is_empty() {
        crate::control::log_grants(conn, queue, &grants)?;
        wrote = true;
    }
    Ok((walk.into_leases(), wrote))
}

pub(crate) fn purge(
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
        let id = lease_ports::codec::job_id(id)?;
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
pub(crate) fn apply(conn: &Connection, op: &Op) -> Result<(Reply, bool), StoreError> {
    match op {
        Op::Job(id, command) => apply_command(conn, id, command, None)
            .map(|(outcome, wrote)| (Reply::Job(outcome), wrote)),
        Op::ClaimNext(claim) => {
            claim_next(conn, claim).map(|(leases, wrote)| (Reply::Leases(leases), wrote))
        }
        Op::Purge { before, statuses } => {
            purge(conn, *before, statuses).map(|(n, wrote)| (Reply::Purged(n), wrote))
        }
        Op::Enqueue(jobs) => crate::job_write::enqueue_batch(conn, jobs)
            .map(|(outcomes, wrote)| (Reply::Jobs(outcomes), wrote)),
        Op::Queue(queue, change) => crate::control::change_queue(conn, queue, change.clone())
            .map(|settings| (Reply::Settings(settings), true)),
        Op::PutSchedule(spec, now) => crate::control::put_schedule(conn, spec, *now)
            .map(|schedule| (Reply::Schedule(Box::new(schedule)), true)),
        Op::RemoveSchedule(name) => crate::control::remove_schedule(conn, name)
            .map(|removed| (Reply::Removed(removed), removed)),
        Op::Fire(fire) => crate::control::fire(conn, fire).map(|fired| {
            let wrote = fired.is_some();
            (Reply::Fired(fired), wrote)
        }),
        Op::Clocked(mode, clock, op) => apply(
            conn,
            &clocked(*mode, op, crate::clock::now(clock.as_ref())?)?,
        ),
        Op::Audited(retention, op) => audited(conn, *retention, op),
    }
}

/// The audit trail's table (made when a store is opened with the trail on).
pub(crate) const INSERT_AUDIT: &str = "INSERT INTO lease_audit(time, job, owner, operation, presented, \
    current, reason, late_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

pub(crate) const TRIM_AUDIT: &str =
    "DELETE FROM lease_audit WHERE seq <= (SELECT max(seq) FROM lease_audit) - ?1";

/// Adds a refusal to the audit trail at the host's clock, in the open transaction, and trims
/// the trail to `retention` rows.
pub(crate) fn record_refusal(
    conn: &Connection,
    retention: u64,
    id: &JobId,
    entry: &lease_domain::Refusal,
) -> Result<(), StoreError> {
    let now = crate::clock::host_now()?;
    conn.prepare_cached(INSERT_AUDIT)
        .and_then(|mut stmt| {
            stmt.execute(rusqlite::params![
                now.get(),
                id.as_str(),
                entry.owner.as_str(),
                entry.operation.as_str(),
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
        .map(drop)
        .map_err(error::sql(conn))
}

/// Runs `op`; if it is a holder's write that was refused, records the refusal (and trims the
/// trail to `retention` rows) in the same transaction, which then commits.
pub(crate) fn audited(
    conn: &Connection,
    retention: u64,
    op: &Op,
) -> Result<(Reply, bool), StoreError> {
    let op = match op {
        Op::Clocked(mode, clock, inner) => {
            clocked(*mode, inner, crate::clock::now(clock.as_ref())?)?
        }
        other => other.clone(),
    };
    let Op::Job(id, command) = &op else {
        return apply(conn, &op);
    };
    apply_command(conn, id, command, Some(retention))
        .map(|(outcome, wrote)| (Reply::Job(outcome), wrote))
}

/// The op to decide under `mode` when the store's clock reads `now`; a skewed caller is
/// refused before anything is read.
pub(crate) fn clocked(mode: ClockMode, op: &Op, now: Timestamp) -> Result<Op, StoreError> {
    Ok(match op {
        Op::Job(id, command) if mode.needs_clock(command) => {
            Op::Job(id.clone(), mode.resolve(command, now)?)
        }
        Op::ClaimNext(claim) if mode.needs_clock_for_term() => Op::ClaimNext(ClaimNext {
            term: mode.resolve_term(claim.term, now)?,
            ..claim.clone()
        }),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use lease_domain::{ClaimRefused, Fence, LeaseTerm, Owner};

    use super::*;
    use crate::connection::open;
    use crate::options::SqliteOptions;
    use crate::reads::state;
    use crate::tx::{batch_error, execute_batch};

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
    fn the_statements_of_claim_next_are_compiled_once_not_for_each_new_time() {
        let dir = tempfile::tempdir().unwrap();
        let conn = fresh(&dir, &SqliteOptions::default());
        for (sql, params) in [
            (SELECT_CANDIDATES, 3),
            (REFILE_ENDED_LEASES, 2),
            (SELECT_PURGEABLE, 1),
        ] {
            let mut stmt = conn.prepare_cached(sql).unwrap();
            for now in 1..=5 {
                let now = f64::from(now);
                let limit = 10_i64;
                let all: [&dyn rusqlite::ToSql; 3] = [&"q", &now, &limit];
                let first: [&dyn rusqlite::ToSql; 1] = [&now];
                let bound: &[&dyn rusqlite::ToSql] =
                    if params == 1 { &first } else { &all[..params] };
                let mut rows = stmt.query(bound).unwrap();
                while rows.next().unwrap().is_some() {}
            }
            let recompiled = stmt.get_status(rusqlite::StatementStatus::RePrepare);
            assert_eq!(recompiled, 0, "{sql} was compiled again {recompiled} times");
        }
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
    fn the_group_rules_statements_read_their_indexes_without_a_scan() {
        let dir = tempfile::tempdir().unwrap();
        let conn = fresh(&dir, &SqliteOptions::default());
        let plan_of = |sql: &str, params: &[&dyn rusqlite::ToSql]| -> String {
            conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(params, |r| r.get::<_, String>(3))
                .unwrap()
                .map(Result::unwrap)
                .collect::<Vec<_>>()
                .join("; ")
        };
        let bearing = plan_of(SELECT_GROUP_BEARING, &[&"q", &"g"]);
        assert!(
            bearing.contains("USING INDEX jobs_queue_group (queue=? AND grp=?)"),
            "{bearing}"
        );
        let heads = plan_of(crate::heads::SELECT_HEADS, &[&"q", &10, &"[\"g\"]"]);
        assert!(
            heads.contains("INDEX lease_group_heads_order (queue=?)"),
            "{heads}"
        );
        assert!(!heads.contains("TEMP B-TREE"), "{heads}");
        let due = plan_of(SELECT_TURN_CANDIDATES, &[&"q", &0.0, &10, &"g"]);
        assert!(
            due.contains("USING INDEX jobs_queue_turn (queue=? AND grp=?)"),
            "{due}"
        );
        assert!(!due.contains("TEMP B-TREE"), "{due}");
        let head = plan_of(crate::heads::SET_HEAD, &[&"q", &"g"]);
        assert!(
            head.contains("USING INDEX jobs_queue_turn (queue=? AND grp=?)"),
            "{head}"
        );
        assert!(!head.contains("TEMP B-TREE"), "{head}");
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
            // The empty schema takes most of these pages (42); the batch fills the rest.
            max_pages: Some(44),
            ..SqliteOptions::default()
        };
        let mut conn = fresh(&dir, &options);
        // Small and large enqueues alternate; the large ones run out of pages.
        let batch: Vec<Op> = (0..40)
            .map(|i| {
                Op::Job(
                    id(&format!(
                        "{i:02}-{}",
                        "x".repeat(if i % 2 == 0 { 1 } else { 1000 })
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
