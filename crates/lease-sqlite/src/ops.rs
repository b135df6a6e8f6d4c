//! The store's write operations. Every write is an [`Op`]: a `lease_domain::Command` on one
//! job, or a `claim_next` or `purge` over many, possibly wrapped to read the host's clock or to
//! record a refusal in the audit trail. Inside the transaction `tx` opens, each job is loaded
//! (`row`), the domain decides, and the decision is stored.

use lease_domain::{
    ClockMode, Command, JobId, Outcome, QueueName, Status, Timestamp, is_purgeable,
};
use lease_ports::{ClaimNext, Lease, StoreError};
use rusqlite::Connection;

use crate::claim::claim_next;
use crate::error;
use crate::row::load;
use crate::row::run_with;
use crate::write::{REMEMBER_PURGED, apply_command};

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
        Op::Enqueue(jobs) => crate::write::enqueue_batch(conn, jobs)
            .map(|(outcomes, wrote)| (Reply::Jobs(outcomes), wrote)),
        Op::Queue(queue, change) => crate::control::change_queue(conn, queue, change.clone())
            .map(|settings| (Reply::Settings(settings), true)),
        Op::PutSchedule(spec, now) => crate::control::put_schedule(conn, spec, *now)
            .map(|schedule| (Reply::Schedule(Box::new(schedule)), true)),
        Op::RemoveSchedule(name) => crate::control::remove_schedule(conn, name)
            .map(|removed| (Reply::Removed(removed), removed)),
        Op::Fire(fire) => fire_schedule(conn, fire).map(|fired| {
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

/// Fires a schedule when it is as the pass read it: its jobs enqueued and its last tick
/// recorded in the open transaction; `None` (nothing written) otherwise.
fn fire_schedule(
    conn: &Connection,
    fire: &lease_ports::control::Fire,
) -> Result<Option<Vec<bool>>, StoreError> {
    let Some(fired) = fire.decide(crate::control::schedule(conn, &fire.name)?.as_ref()) else {
        return Ok(None);
    };
    let mut inserted = Vec::with_capacity(fire.jobs.len());
    for (id, spec) in &fire.jobs {
        let command = lease_domain::Command::EnqueueWith(spec.clone());
        let (outcome, _) = apply_command(conn, id, &command, None)?;
        inserted.push(lease_ports::outcome_as(outcome)?);
    }
    crate::control::write_schedule(conn, &fired)?;
    Ok(Some(inserted))
}

#[cfg(test)]
mod tests {
    use lease_domain::{ClaimRefused, Fence, LeaseTerm, Owner};

    use super::*;
    use crate::claim::{
        REFILE_ENDED_LEASES, SELECT_CANDIDATES, SELECT_GROUP_BEARING, SELECT_TURN_CANDIDATES,
    };
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
