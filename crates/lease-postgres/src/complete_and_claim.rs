//! The queue loop's writes in one statement: migration 7's `step` function completes a job and
//! leases the next ones in the transaction of the one statement that calls it (one round trip,
//! one commit). The function restates two of the domain's rules in SQL, so it answers every row
//! it read and every row it wrote, and [`judge`] decides each read row again with
//! `lease_domain` (through the same `Command::decide` and `ClaimWalk` the statements' way
//! uses) and compares: the caller gets the domain's answer, and any difference is an error.

use lease_domain::{ClockMode, Command, JobId, LEASE_EXPIRED, Outcome, RELEASED_AT_LAST_ATTEMPT};
use lease_ports::next::ClaimWalk;
use lease_ports::{ClaimNext, Lease, StoreError};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::PgLeaseStore;
use crate::connection::Conn;
use crate::error::{self, Stage};
use crate::row;
use crate::row::stored_now;

/// SQLSTATEs with which `step` declines a write the store must decide itself (it rolls back):
/// a refused completion to audit, a lease the server's clock cannot time, a queue with settings,
/// a job that finishes with children waiting on it.
const DECLINED: [&str; 4] = ["LE001", "LE002", "LE003", "LE004"];

/// What `step` answered, as the domain decides it.
pub(crate) struct Stepped {
    /// The completion's outcome, when the step completed a job.
    pub(crate) outcome: Option<Outcome>,
    /// The leases, in claim order.
    pub(crate) leases: Vec<Lease>,
}

impl PgLeaseStore {
    /// Whether `step` can decide `command` (then a claim of `queue`): a plain completion or
    /// none, under the caller's unchecked clock or the store's (a skew bound is checked before
    /// anything is written, which one statement cannot do), in a queue that had no settings
    /// when a claim last read them (`step` declines a queue with settings: trying it would
    /// cost every such claim a round trip), unless the store was opened to use statements
    /// only.
    pub(crate) fn steps(&self, command: Option<&Command>, queue: &lease_domain::QueueName) -> bool {
        self.batches_under_its_clock()
            && command.is_none_or(|c| matches!(c, Command::Complete(..)))
            && self
                .seen(queue)
                .is_none_or(|settings| settings.is_default())
    }

    /// Whether the queue loop's writes may be decided in one statement or a settled batch at
    /// all: not when the store was opened to use statements only, nor with a skew bound (which
    /// is checked before anything is written).
    fn batches_under_its_clock(&self) -> bool {
        self.step_enabled
            && matches!(
                self.clock,
                ClockMode::Caller { max_skew: None } | ClockMode::Store
            )
    }

    /// Whether a holder's write without a claim (a completion, a failure, a release) joins
    /// group commit's batches: under the caller's unchecked clock or the store's, as
    /// [`PgLeaseStore::steps`] says.
    pub(crate) fn settles(&self, command: &Command) -> bool {
        self.batches_under_its_clock()
            && matches!(
                command,
                Command::Complete(..) | Command::Fail(..) | Command::Release(..)
            )
    }

    /// Completes `completion` (when given) and then claims as `claim` says, in one statement on
    /// `conn`. `None`: the function declined (its transaction rolled back, nothing written), so
    /// the caller decides the write through statements.
    pub(crate) async fn step(
        &self,
        conn: &Conn,
        completion: Option<(&JobId, &Command)>,
        claim: &ClaimNext,
    ) -> Result<Option<Stepped>, StoreError> {
        let stmt = conn.prepare(&self.sql.step).await?;
        let a = StepArgs::of(self.clock, completion, claim);
        let token = a.token_bytes();
        let tokens: Vec<&[u8]> = claim
            .tokens
            .iter()
            .map(|t| t.as_bytes().as_slice())
            .collect();
        let params: [&(dyn ToSql + Sync); 16] = [
            &a.job,
            &a.owner,
            &a.fence,
            &a.result,
            &a.done_at,
            &a.queue,
            &a.claimer,
            &a.limit,
            &tokens,
            &token,
            &a.now,
            &a.until,
            &a.length,
            &self.audit.is_some(),
            &LEASE_EXPIRED,
            &RELEASED_AT_LAST_ATTEMPT,
        ];
        let rows = match conn.client().query(&stmt, &params).await {
            Ok(rows) => rows,
            Err(e) if declined(&e) => return Ok(None),
            Err(e) => return Err(error::map(e, Stage::Commit)),
        };
        let completion = completion.map(|(id, command)| (id, command.clone()));
        judge(self.clock, &rows, 0, completion, claim).map(Some)
    }
}

/// Whether `step` declined the write (SQLSTATE LE001-LE004), rolling back its statement.
pub(crate) fn declined(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| DECLINED.contains(&c.code()))
}

/// The arguments of one call of `step` but its tokens and the store's constants.
pub(crate) struct StepArgs<'a> {
    pub(crate) job: Option<&'a str>,
    pub(crate) owner: Option<&'a str>,
    pub(crate) fence: Option<i64>,
    pub(crate) result: Option<&'a str>,
    pub(crate) done_at: Option<f64>,
    pub(crate) queue: &'a str,
    pub(crate) claimer: &'a str,
    pub(crate) limit: i32,
    pub(crate) token: Option<lease_domain::TokenDigest>,
    /// The caller's now, or `None` for the server's clock.
    pub(crate) now: Option<f64>,
    pub(crate) until: f64,
    /// The lease length as `LeaseTerm::at` keeps it when the store's clock decides.
    pub(crate) length: f64,
}

impl<'a> StepArgs<'a> {
    pub(crate) fn token_bytes(&self) -> Option<&[u8]> {
        self.token.as_ref().map(|t| t.as_bytes().as_slice())
    }

    pub(crate) fn of(
        clock: ClockMode,
        completion: Option<(&'a JobId, &'a Command)>,
        claim: &'a ClaimNext,
    ) -> Self {
        let (job, owner, fence, result, done_at) = match completion {
            Some((id, Command::Complete(owner, fence, now, result))) => (
                Some(id.as_str()),
                Some(owner.as_str()),
                Some(i64::from(*fence)),
                Some(result.as_str()),
                Some(now.get()),
            ),
            _ => (None, None, None, None, None),
        };
        let term = &claim.term;
        let store_clock = matches!(clock, ClockMode::Store);
        Self {
            job,
            owner,
            fence,
            result,
            done_at,
            queue: claim.queue.as_str(),
            claimer: claim.owner.as_str(),
            limit: i32::try_from(claim.limit).unwrap_or(i32::MAX),
            token: term.token(),
            now: (!store_clock).then_some(term.now().get()),
            until: term.until().get(),
            length: term.until().get() - term.now().get(),
        }
    }
}

/// One row `step` answered: what it is, the clock reading and the epoch it was decided at,
/// and the job.
struct Answered {
    role: String,
    now: f64,
    epoch: i64,
    id: JobId,
    job: lease_domain::Job,
}

/// Reads the answered row whose columns from `at` on are `step`'s.
fn read(row: &Row, at: usize) -> Result<Answered, StoreError> {
    let head = |e: tokio_postgres::Error| {
        StoreError::Corrupt(lease_ports::Detail::caused_by(
            format!("the step function's answer: {e}"),
            e,
        ))
    };
    let role: String = row.try_get(at).map_err(head)?;
    let now: f64 = row.try_get(at + 1).map_err(head)?;
    let epoch: i64 = row.try_get(at + 2).map_err(head)?;
    let (id, job) = row::decode_with_id(row, at + 3)?;
    Ok(Answered {
        role,
        now,
        epoch,
        id,
        job,
    })
}

/// The error of a row the function wrote otherwise than the domain decides (`on`: what it is
/// about).
fn disagree(
    on: &dyn std::fmt::Display,
    domain: &dyn std::fmt::Debug,
    function: &dyn std::fmt::Debug,
) -> StoreError {
    StoreError::Corrupt(
        format!(
            "{on}: the step function (migration 7) and lease_domain disagree: \
             the domain decides {domain:?}, the function answered {function:?}"
        )
        .into(),
    )
}

/// Decides again, with the domain, every row `step` read, compares each decision with the row
/// it wrote, and answers the domain's outcome and leases (`rows`' columns from `at` on are
/// `step`'s).
pub(crate) fn judge(
    clock: ClockMode,
    rows: &[Row],
    at: usize,
    completion: Option<(&JobId, Command)>,
    claim: &ClaimNext,
) -> Result<Stepped, StoreError> {
    let mut answered = rows
        .iter()
        .map(|row| read(row, at))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .peekable();
    let mut outcome = None;
    if let Some((id, command)) = completion {
        let before = answered.next_if(|a| a.role == "c");
        let after = answered.next_if(|a| a.role == "C");
        // The store's clock, read once the row was locked, decides when the store's does.
        let command = match (&before, clock) {
            (Some(read), ClockMode::Store) => command
                .at(stored_now(read.now)?)
                .map_err(StoreError::InvalidInput)?,
            _ => command,
        };
        if before.as_ref().is_some_and(|b| b.id != *id) {
            return Err(disagree(
                &job_of(id),
                &"the job's own row",
                &before.map(|b| b.id),
            ));
        }
        let current = before.map(|b| b.job);
        let decided = command.decided(id, current.as_ref(), None);
        match (decided.row(), after) {
            (None, None) => {}
            (Some(next), Some(wrote)) if wrote.id == *id && *next == wrote.job => {}
            (next, wrote) => return Err(disagree(&job_of(id), &next, &wrote.map(|w| w.job))),
        }
        lease_ports::observe::decided(&command, current.as_ref(), &decided);
        outcome = Some(decided.outcome);
    }
    let mut candidates = Vec::new();
    let mut written = Vec::new();
    let mut page_now = None;
    let mut epoch = None;
    while let Some(read) = answered.next() {
        let Some(wrote) = answered.next() else {
            return Err(disagree(
                &job_of(&read.id),
                &"a write for every candidate",
                &"none",
            ));
        };
        if read.role != "n" || wrote.role != "w" || wrote.id != read.id || read.now != wrote.now {
            return Err(disagree(
                &job_of(&read.id),
                &"a candidate and its write",
                &(read.role, wrote.role),
            ));
        }
        page_now = Some(read.now);
        epoch = Some(read.epoch);
        let mut job = read.job;
        // Pre-images come without the payload, which no rule reads and none writes.
        job.payload.clone_from(&wrote.job.payload);
        candidates.push((read.id, job));
        written.push((wrote.id, wrote.job));
    }
    let term = match (page_now, clock) {
        (Some(now), ClockMode::Store) => claim
            .term
            .at(stored_now(now)?)
            .map_err(StoreError::InvalidInput)?,
        _ => claim.term,
    };
    // The function handed out its fences in the epoch it answered.
    let term = match epoch {
        Some(epoch) => term.in_epoch(lease_ports::codec::epoch(epoch)?),
        None => term,
    };
    let mut next = ClaimWalk::of(claim);
    let decided = next.page(term, candidates);
    if decided != written {
        let on = format!("the claim of queue {}", claim.queue);
        return Err(disagree(&on, &decided, &written));
    }
    Ok(Stepped {
        outcome,
        leases: next.into_leases(),
    })
}

fn job_of(id: &JobId) -> String {
    format!("job {id}")
}
