//! `claim_next` inside the open transaction: the claim walk (`lease_ports::next::ClaimWalk`)
//! decides, its reads answered by this store's statements (candidates from the ready set or
//! one group's, in claim order; the group heads of migration 15; a group's standing; the next
//! fair turn), and each decided row is written before the next read.

use lease_domain::{GroupKey, Job, JobId, QueueName, Timestamp};
use lease_ports::next::{Answer, Candidate, ClaimWalk, Effect, Read};
use lease_ports::{ClaimNext, Lease, StoreError};
use rusqlite::{Connection, OptionalExtension};

use crate::error;
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
pub(crate) const SELECT_TURN_CANDIDATES: &str = "SELECT q.id, q.seq FROM jobs_queue q INDEXED BY jobs_queue_turn \
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
pub(crate) const SELECT_GROUP_BEARING: &str = "SELECT id FROM jobs_queue WHERE queue = ?1 AND grp = ?2 \
    AND grp IS NOT NULL \
    AND (finished = 'dead' OR (finished IS NULL AND (attempts > 0 OR leased_until IS NOT NULL)))";

/// Files the held jobs of a queue whose lease has ended by `?2` with the unheld jobs, so that
/// the candidates see them in claim order (`Job::leased_until`): each is moved once, found by
/// the index of lease ends, and live leases are never read.
// Exported by `lease_sqlite::sql` (feature `test-support`) for the benchmarks' baselines.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub const REFILE_ENDED_LEASES: &str = "UPDATE jobs_queue SET leased_until = NULL \
    WHERE queue = ?1 AND finished IS NULL AND leased_until <= ?2";

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
            crate::write::write_all(conn, &id, changes, None)?;
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
