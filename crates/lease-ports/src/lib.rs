//! The lease storage port: one async trait that every store implements, its error type,
//! the in-memory reference store and (feature `conformance`) the shared behaviour suite.
//!
//! This crate names no database. Adapters (`lease-sqlite`, `lease-postgres`; and the HTTP
//! client, `lease-client`, over the network service) implement
//! [`LeaseStore`] by loading a job, calling one `lease_domain::decide_*` function and storing
//! its answer atomically; they never restate a lease rule.

// Library and binary code may not unwrap, expect or panic on what it meets, nor export what is
// unreachable (each exception allowed in place with its reason); tests may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        unreachable_pub
    )
)]

pub mod audit;
pub mod blocking;
pub mod bulk;
pub mod codec;
pub mod control;
pub mod decorate;
mod error;
pub mod forward;
pub mod graph;
#[cfg(feature = "conformance")]
// Test support (built only with the feature), where a failed setup is a failed test: it may
// unwrap, expect and panic.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod history;
pub mod keys;
pub mod memory;
pub mod migrations;
pub mod next;
pub mod observe;
pub mod overview;
pub mod signal;
mod surface;
pub mod transfer;

#[cfg(feature = "conformance")]
// Test support (built only with the feature), where a failed setup is a failed test: it may
// unwrap, expect and panic.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod conformance;
#[cfg(feature = "conformance")]
// Test support (built only with the feature), where a failed setup is a failed test: it may
// unwrap, expect and panic.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod differential;
#[cfg(feature = "conformance")]
// Test support (built only with the feature), where a failed setup is a failed test: it may
// unwrap, expect and panic.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod observed_story;
#[cfg(feature = "conformance")]
// Test support (built only with the feature), where a failed setup is a failed test: it may
// unwrap, expect and panic.
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod workflow_conformance;

use async_trait::async_trait;
pub use error::{Detail, StoreError};
pub use lease_domain::{
    Backoff, CatchUp, Checkpoint, CheckpointName, CheckpointValue, ClaimRefused, ClockMode,
    ClockRefused, ClockSkew, Command, Concurrency, Ended, EnqueueSpec, ErrorText, Failed, Fence,
    GroupKey, InputError, Job, JobId, JobResult, KeptCheckpoint, LeaseTerm, Limits,
    OnParentFailure, Outcome, Owner, Pause, Payload, ProgressText, QueueChange, QueueName,
    QueueSettings, Renewal, Retry, Schedule, ScheduleName, ScheduleSpec, Status, Timestamp,
    TokenDigest, Ttl, WriteRefused,
};

/// The whole surface of a store: the queue ([`LeaseStore`]), its settings and schedules
/// ([`control::Control`]), the audit trail ([`audit::AuditTrail`]), the operator's overview
/// ([`overview::Overview`]), the API keys ([`keys::KeyStore`]) and enqueue signals
/// ([`signal::EnqueueSignal`]): what `lease serve` takes, and what the memory, SQLite and
/// PostgreSQL stores and every [`decorate::Decorated`] store are. Migration
/// ([`transfer::Transfer`]) comes on top for the stores that hold their data. Each trait keeps
/// its required part small and provides the rest; `docs/ARCHITECTURE.md` lists them.
pub trait Store:
    LeaseStore
    + control::Control
    + audit::AuditTrail
    + overview::Overview
    + keys::KeyStore
    + signal::EnqueueSignal
{
}

impl<T> Store for T where
    T: LeaseStore
        + control::Control
        + audit::AuditTrail
        + overview::Overview
        + keys::KeyStore
        + signal::EnqueueSignal
        + ?Sized
{
}

/// The outcome of a claim that reached the store: the new fence, or why it was refused.
pub type ClaimOutcome = Result<Fence, ClaimRefused>;

/// The outcome of a renew, complete or release that reached the store.
pub type WriteOutcome = Result<(), WriteRefused>;

/// The outcome of a `fail` that reached the store: where the job went, or why it was refused.
pub type FailOutcome = Result<Failed, WriteRefused>;

/// A port method's return type, read back from the [`Outcome`] of the [`Command`] it ran.
pub trait FromOutcome: Sized {
    /// The value, or the outcome back when it belongs to another kind of command.
    ///
    /// # Errors
    /// The outcome itself, when it is of another kind.
    fn from_outcome(outcome: Outcome) -> Result<Self, Outcome>;
}

impl FromOutcome for bool {
    fn from_outcome(outcome: Outcome) -> Result<Self, Outcome> {
        match outcome {
            Outcome::Enqueued(inserted) => Ok(inserted),
            other => Err(other),
        }
    }
}

impl FromOutcome for ClaimOutcome {
    fn from_outcome(outcome: Outcome) -> Result<Self, Outcome> {
        match outcome {
            Outcome::Claimed(claimed) => Ok(claimed),
            other => Err(other),
        }
    }
}

impl FromOutcome for WriteOutcome {
    fn from_outcome(outcome: Outcome) -> Result<Self, Outcome> {
        match outcome {
            Outcome::Wrote(wrote) => Ok(wrote),
            other => Err(other),
        }
    }
}

impl FromOutcome for FailOutcome {
    fn from_outcome(outcome: Outcome) -> Result<Self, Outcome> {
        match outcome {
            Outcome::Failed(failed) => Ok(failed),
            other => Err(other),
        }
    }
}

/// Reads an outcome as the type a port method returns.
///
/// # Errors
/// [`StoreError::Corrupt`] if the outcome is of another kind, which only a store that answered
/// one command with another's outcome can cause.
pub fn outcome_as<T: FromOutcome>(outcome: Outcome) -> Result<T, StoreError> {
    // The outcome is shown only when it is wrong (formatting it on every write showed in
    // profiles).
    T::from_outcome(outcome).map_err(|wrong| {
        StoreError::Corrupt(
            format!("a command was answered with the wrong outcome {wrong:?}").into(),
        )
    })
}

/// One stored job, as plain values.
#[derive(Debug, Clone, PartialEq)]
pub struct JobState {
    /// The job id.
    pub id: String,
    /// The holder of the lease, if any.
    pub owner: Option<String>,
    /// The lease is live while `until > now`.
    pub until: f64,
    /// The latest fence handed out; 0 before the first claim.
    pub fence: u64,
    /// The stored result, if any.
    pub result: Option<String>,
    /// Whether the job is done.
    pub done: bool,
}

impl JobState {
    /// The plain form of a stored job.
    #[must_use]
    pub fn new(id: &JobId, job: Job) -> Self {
        Self {
            id: id.as_str().to_owned(),
            owner: job.owner.map(|o| o.as_str().to_owned()),
            until: job.until.get(),
            fence: job.fence.get(),
            result: job.result,
            done: job.done,
        }
    }
}

/// One stored job with every field, the queue's included (`state` gives the seed's six).
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// The job id.
    pub id: JobId,
    /// The stored job.
    pub job: Job,
}

impl JobRecord {
    /// The seed's view of the record.
    #[must_use]
    pub fn state(&self) -> JobState {
        JobState::new(&self.id, self.job.clone())
    }
}

/// How a parent of a job stands, as its child sees it: its status, its result and the fence
/// that wrote it. A parent purged since is `done` with no result (a purge takes only finished
/// jobs, and a child whose parent failed was settled then).
#[derive(Debug, Clone, PartialEq)]
pub struct ParentState {
    /// The parent.
    pub id: JobId,
    /// Its status, judged at the time read.
    pub status: Status,
    /// Its result, once done.
    pub result: Option<String>,
    /// The fence of the lease that completed it.
    pub result_fence: Option<Fence>,
}

/// The parents of `job`, in the order it named them, each as it stands at `now` (read one by
/// one: a job's parents are few next to what a read costs; at most
/// [`lease_domain::MAX_PARENTS`]). Empty for a job without parents, or one that is gone.
///
/// # Errors
/// The store's.
pub async fn parents_of(
    store: &dyn LeaseStore,
    job: &JobId,
    now: Timestamp,
) -> Result<Vec<ParentState>, StoreError> {
    let Some(record) = store.record(job).await? else {
        return Ok(Vec::new());
    };
    let mut parents = Vec::with_capacity(record.job.after.len());
    for id in record.job.after {
        let read = store.record(&id).await?;
        parents.push(match read {
            Some(parent) => ParentState {
                status: parent.job.status_at(now),
                result: parent.job.result,
                result_fence: parent.job.result_fence,
                id,
            },
            None => ParentState {
                id,
                status: Status::Done,
                result: None,
                result_fence: None,
            },
        });
    }
    Ok(parents)
}

/// A lease handed out by `claim_next`.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    /// The job.
    pub job: JobId,
    /// Its new fence: present it with every write.
    pub fence: Fence,
    /// When it was granted, by the clock the store decides with (the caller's `now`, or the
    /// store's own clock in [`ClockMode::Store`]).
    pub now: Timestamp,
    /// The lease is live until then, by the same clock.
    pub until: Timestamp,
    /// Which attempt this is (1 for the first).
    pub attempt: u32,
    /// The job's payload.
    pub payload: Option<Vec<u8>>,
    /// How long this attempt may run (the job's own timeout, else its queue's default): its
    /// worker stops it after that and fails it as "timed out".
    pub timeout: Option<Ttl>,
    /// The job's group in its queue, if it has one.
    pub group: Option<GroupKey>,
}

/// Which jobs `list` returns.
#[derive(Debug, Clone, PartialEq)]
pub struct ListFilter {
    /// Only this queue, if given.
    pub queue: Option<QueueName>,
    /// Only this status (judged at `now`), if given.
    pub status: Option<Status>,
    /// At most this many jobs, in id order.
    pub limit: usize,
    /// Only jobs whose id comes after this one (keyset paging: the last id of a page).
    pub after: Option<JobId>,
    /// The time statuses are judged at.
    pub now: Timestamp,
    /// Only jobs of this group, if given.
    pub group: Option<GroupKey>,
    /// Only jobs whose id starts with this text, if given.
    pub prefix: Option<String>,
}

impl ListFilter {
    /// Whether the job `id`, stored as `job`, is one this filter lists, but for its queue and
    /// its place after `after` (which a store reads by): its status at `now`, its group and
    /// its id's prefix.
    #[must_use]
    pub fn admits(&self, id: &JobId, job: &Job) -> bool {
        self.status.is_none_or(|s| job.status_at(self.now) == s)
            && self
                .group
                .as_ref()
                .is_none_or(|g| job.group.as_ref() == Some(g))
            && self
                .prefix
                .as_deref()
                .is_none_or(|p| id.as_str().starts_with(p))
    }

    /// Whether no id at or after `id` in byte order can match the prefix, so a store reading
    /// ids in order may stop.
    #[must_use]
    pub fn past_prefix(&self, id: &JobId) -> bool {
        self.prefix
            .as_deref()
            .is_some_and(|p| id.as_str() > p && !id.as_str().starts_with(p))
    }
}

/// How many jobs of one queue have one status, judged at a given time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsRow {
    /// The queue.
    pub queue: QueueName,
    /// The status.
    pub status: Status,
    /// How many jobs.
    pub count: u64,
}

/// Tallies judged jobs into `StatsRow`s ordered by queue, then status.
#[must_use]
pub fn tally<'a>(jobs: impl IntoIterator<Item = &'a Job>, now: Timestamp) -> Vec<StatsRow> {
    let mut counts: std::collections::BTreeMap<(QueueName, Status), u64> =
        std::collections::BTreeMap::new();
    for job in jobs {
        *counts
            .entry((job.queue.clone(), job.status_at(now)))
            .or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((queue, status), count)| StatsRow {
            queue,
            status,
            count,
        })
        .collect()
}

/// The inputs of the status rule for a group of jobs, as a store's grouping query gives them.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusGroup {
    /// The queue.
    pub queue: QueueName,
    /// Whether the jobs are done.
    pub done: bool,
    /// Whether they are dead or cancelled.
    pub ended: Option<Ended>,
    /// Whether they wait for their parents.
    pub waiting: bool,
    /// Whether their lease is live at the time judged.
    pub live: bool,
    /// Whether they used every attempt.
    pub exhausted: bool,
    /// How many jobs.
    pub count: u64,
}

/// Tallies grouped inputs of the status rule into `StatsRow`s: the domain judges one
/// representative job per group (`Job::status_at`), so stores never restate the rule in SQL.
#[must_use]
pub fn tally_groups(
    groups: impl IntoIterator<Item = StatusGroup>,
    now: Timestamp,
) -> Vec<StatsRow> {
    let mut counts: std::collections::BTreeMap<(QueueName, Status), u64> =
        std::collections::BTreeMap::new();
    for group in groups {
        let representative = Job {
            done: group.done,
            ended: group.ended,
            waiting: group.waiting,
            until: if group.live {
                Timestamp::new(f64::MAX).unwrap_or(now)
            } else {
                now
            },
            attempts: u32::from(group.exhausted),
            max_attempts: 1,
            ..Job::new()
        };
        *counts
            .entry((group.queue, representative.status_at(now)))
            .or_default() += group.count;
    }
    counts
        .into_iter()
        .map(|((queue, status), count)| StatsRow {
            queue,
            status,
            count,
        })
        .collect()
}

/// What group commit has done so far, for benchmarks and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupCommitStats {
    /// Batches run (each one transaction).
    pub batches: u64,
    /// Batches that carried more than one write.
    pub batches_of_many: u64,
    /// Writes run in all batches.
    pub writes: u64,
    /// The most writes one batch carried.
    pub largest_batch: u64,
}

/// A claim of the next due jobs of a queue, as [`LeaseStore::claim_next_with`] and
/// [`LeaseStore::apply`] take it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimNext {
    /// The queue.
    pub queue: QueueName,
    /// Who takes the leases.
    pub owner: Owner,
    /// From when to when (and, without `tokens`, the token every lease keeps).
    pub term: LeaseTerm,
    /// How many jobs at most.
    pub limit: usize,
    /// A token digest per lease, the first lease taking the first, so that every lease has a
    /// secret of its own (the network service gives one per lease it may grant). Empty: each
    /// lease keeps `term`'s token, if it has one.
    pub tokens: Vec<TokenDigest>,
}

impl ClaimNext {
    /// A claim of up to `limit` jobs of `queue` for `owner` over `term`, without tokens.
    #[must_use]
    pub fn new(queue: &QueueName, owner: &Owner, term: LeaseTerm, limit: usize) -> Self {
        Self {
            queue: queue.clone(),
            owner: owner.clone(),
            term,
            limit,
            tokens: Vec::new(),
        }
    }

    /// The term the `n`th lease (from 0) is written with: `term` with that lease's token.
    #[must_use]
    pub fn term_of(&self, n: usize) -> LeaseTerm {
        match self.tokens.get(n) {
            Some(token) => self.term.with_token(*token),
            None => self.term,
        }
    }
}

/// What [`LeaseStore::apply`] answers: the command's outcome and, when a claim was asked for,
/// the leases it took (or the claim's own error; the command stands either way).
#[derive(Debug)]
pub struct Applied {
    /// The command's outcome.
    pub outcome: Outcome,
    /// The claim that followed it, if one was asked for.
    pub claimed: Option<Result<Vec<Lease>, StoreError>>,
}

/// One write of [`LeaseStore::apply_many`]: the job, the command, and the claim that follows it.
pub type ManyWrite = (JobId, Command, Option<ClaimNext>);

/// Runs `apply` on each of `writes` at once and answers each in order: how
/// [`LeaseStore::apply_many`] is made of calls of `apply`.
pub async fn apply_each<F, Fut>(
    writes: Vec<ManyWrite>,
    apply: F,
) -> Vec<Result<Applied, StoreError>>
where
    F: Fn(ManyWrite) -> Fut,
    Fut: Future<Output = Result<Applied, StoreError>>,
{
    futures::future::join_all(writes.into_iter().map(apply)).await
}

/// A durable store of fenced job leases.
///
/// The required part is small: [`apply`](LeaseStore::apply) (one [`Command`] on one job, and
/// optionally a claim of the next jobs after it, in one transaction),
/// [`claim_next_with`](LeaseStore::claim_next_with), [`enqueue_many`](LeaseStore::enqueue_many),
/// [`purge`](LeaseStore::purge) and the reads ([`record`](LeaseStore::record),
/// [`list`](LeaseStore::list), [`stats`](LeaseStore::stats)). Every other method is provided
/// on top of them, with the contract its documentation gives; a store, decorator or client
/// implements the core only (and may override a provided method to do it faster, with the
/// same contract).
///
/// # Contract
/// - Each write MUST be atomic: the job is read, decided by `lease_domain` and written back
///   with no other write to the same job in between, so two concurrent claims of a free job
///   give exactly one fence.
/// - An operation returns `Ok` iff it reached the store and was decided; a refusal by the
///   lease rules (`Ok(Err(_))`) MUST change nothing.
/// - A job's fence MUST strictly increase across claims and MUST never be handed out twice,
///   not after release, restart or across processes.
/// - An acknowledged write (`Ok(Ok(_))`, `enqueue` returning `true`) MUST be durable when it
///   returns, as far as the adapter's documented settings allow.
/// - `state` MUST read what is stored, not a process cache.
///
/// # Errors
/// [`StoreError`]; every kind but [`StoreError::Indeterminate`] means "not applied".
///
/// # Cancellation
/// Dropping a returned future does not undo a write that was already sent to the store:
/// it may still commit. A caller that cancels must read [`LeaseStore::state`] to find out.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Decides `command` on `job` with `Command::decide` and stores what it decided; with
    /// `then`, leases up to `then.limit` due jobs after it as [`LeaseStore::claim_next_with`]
    /// would, in the same transaction (one commit): a worker hands back one job and takes the
    /// next with one commit. The claim is made whether or not the command was accepted; its own
    /// error is in [`Applied::claimed`] (the command stands).
    ///
    /// # Errors
    /// `then` may follow only a completion ([`Command::is_completion`]); with another command
    /// it is [`StoreError::InvalidInput`] (`ClaimAfter`), before anything is read.
    async fn apply(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError>;

    /// Leases up to `claim.limit` due jobs of `claim.queue` in one transaction, in
    /// [`lease_domain::claim_order`], each as decided by [`lease_domain::decide_claim_next`]
    /// (which may also bury a job out of attempts), the `n`th with [`ClaimNext::term_of`]`(n)`.
    /// Returns the leases, possibly none.
    async fn claim_next_with(&self, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError>;

    /// Applies each of `writes` as [`LeaseStore::apply`] would (the job, the command, the claim
    /// that follows it) and answers each on its own, in order: one write's refusal or error
    /// says nothing of another's. A store may take them together (SQLite's group commit as one
    /// caller's writes, each in a savepoint of its own, so one batch and one commit for all of
    /// them); by default they run at once, as many calls of `apply`. Nothing makes them one
    /// transaction: a crash may keep some of them and not others, each caller's error then
    /// saying so.
    async fn apply_many(&self, writes: Vec<ManyWrite>) -> Vec<Result<Applied, StoreError>> {
        apply_each(writes, |(job, command, then)| async move {
            self.apply(&job, command, then).await
        })
        .await
    }

    /// Enqueues many jobs in one transaction (one commit): each as [`enqueue_with`] would, in
    /// order, answering `true` for each job it inserted and `false` for each that already
    /// existed (an id given twice is inserted by its first entry). All or none: on an error
    /// nothing of the batch is stored. An empty batch writes nothing.
    ///
    /// [`enqueue_with`]: LeaseStore::enqueue_with
    async fn enqueue_many(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError>;

    /// The stored job with every field, or `None`.
    async fn record(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError>;

    /// Deletes the jobs [`lease_domain::is_purgeable`] picks, keeping each one's fence so that
    /// the id, if enqueued again, never receives a fence it had before. Returns how many.
    async fn purge(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError>;

    /// The jobs that `filter` selects, in id order.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError>;

    /// How many jobs each queue has in each status at `now` (statuses with no job left out).
    async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError>;

    /// The checkpoints the job keeps, in name order (none for a job that is gone).
    async fn checkpoints(&self, job: &JobId) -> Result<Vec<KeptCheckpoint>, StoreError>;

    /// The job's ended attempts the store keeps (the latest [`lease_domain::ATTEMPTS_KEPT`], by
    /// fence) and how many earlier ones it no longer keeps; the attempt under way is in the
    /// job's row ([`lease_domain::Job::open_attempt`]). None for a job that is gone.
    async fn attempts(&self, job: &JobId) -> Result<lease_domain::Attempts, StoreError>;

    /// The W3C trace context the job was enqueued with (or run again with), if any: what its
    /// attempts continue (`None` too for a job that is gone). Read apart from the job, so
    /// the queue's reads and writes never carry it; a worker reads it only when it traces.
    async fn trace(&self, job: &JobId) -> Result<Option<lease_domain::TraceContext>, StoreError>;

    /// Inserts the job in the default state and returns `true`; if the job exists,
    /// changes nothing (never resets a lease or a result) and returns `false`.
    async fn enqueue(&self, job: &JobId) -> Result<bool, StoreError> {
        outcome_as(self.apply(job, Command::Enqueue, None).await?.outcome)
    }

    /// The jobs that name `job` among their parents, in id order, after the id `after` (for
    /// the next page), at most `limit` of them. Provided by reading every job in pages of
    /// [`LeaseStore::list`]; the stores read their index of parents instead.
    async fn children(
        &self,
        job: &JobId,
        after: Option<&JobId>,
        limit: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        let mut found = Vec::new();
        let mut filter = ListFilter {
            queue: None,
            status: None,
            limit: 1000,
            after: after.cloned(),
            now: Timestamp::ZERO,
            group: None,
            prefix: None,
        };
        while found.len() < limit {
            let page = self.list(&filter).await?;
            let Some(last) = page.last() else { break };
            filter.after = Some(last.id.clone());
            found.extend(
                page.into_iter()
                    .filter(|r| r.job.after.contains(job))
                    .map(|r| r.id),
            );
        }
        found.truncate(limit);
        Ok(found)
    }

    /// The stored job, or `None`.
    async fn state(&self, job: &JobId) -> Result<Option<JobState>, StoreError> {
        Ok(self.record(job).await?.map(|record| record.state()))
    }

    /// Claims the job for `owner` from `term.now()` to `term.until()` and returns the new fence,
    /// as decided by [`lease_domain::decide_claim`].
    async fn claim(
        &self,
        job: &JobId,
        owner: &Owner,
        term: LeaseTerm,
    ) -> Result<ClaimOutcome, StoreError> {
        let command = Command::Claim(owner.clone(), term);
        outcome_as(self.apply(job, command, None).await?.outcome)
    }

    /// Extends the live current lease, as decided by [`lease_domain::decide_renew`].
    async fn renew(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        term: LeaseTerm,
    ) -> Result<WriteOutcome, StoreError> {
        let command = Command::Renew(owner.clone(), fence, term);
        outcome_as(self.apply(job, command, None).await?.outcome)
    }

    /// Stores the live current lease's progress, and renews it or keeps its end
    /// ([`Renewal`]), as decided by [`lease_domain::decide_progress`].
    async fn progress(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        renewal: Renewal,
        text: &ProgressText,
    ) -> Result<WriteOutcome, StoreError> {
        let command = Command::Progress(owner.clone(), fence, renewal, text.clone());
        outcome_as(self.apply(job, command, None).await?.outcome)
    }

    /// Holds the job's group until `until` (its upstream answered 429): only the live current
    /// lease's holder may, as decided by [`lease_domain::decide_hold_group`]; the group is
    /// paused until then (or later, if it already was) in the same transaction as the check,
    /// so a stale holder can never pause it.
    async fn hold_group(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<WriteOutcome, StoreError> {
        let command = Command::HoldGroup(owner.clone(), fence, now, until);
        outcome_as(self.apply(job, command, None).await?.outcome)
    }

    /// Keeps a checkpoint of the live current lease, as decided by
    /// [`lease_domain::decide_checkpoint`], in the transaction that checks the lease: a new
    /// name only while the job keeps fewer than [`lease_domain::MAX_CHECKPOINTS`]
    /// ([`lease_domain::checkpoint_fits`]; else [`StoreError::InvalidInput`], nothing kept).
    async fn checkpoint(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        checkpoint: &Checkpoint,
    ) -> Result<WriteOutcome, StoreError> {
        let command = Command::Checkpoint(owner.clone(), fence, now, checkpoint.clone());
        outcome_as(self.apply(job, command, None).await?.outcome)
    }

    /// Stores the result of the live current lease and marks the job done,
    /// as decided by [`lease_domain::decide_complete`].
    async fn complete(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        result: &JobResult,
    ) -> Result<WriteOutcome, StoreError> {
        let command = Command::Complete(owner.clone(), fence, now, result.clone());
        outcome_as(self.apply(job, command, None).await?.outcome)
    }

    /// Gives the current lease back, keeping the fence, as decided by
    /// [`lease_domain::decide_release`].
    async fn release(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
    ) -> Result<WriteOutcome, StoreError> {
        let command = Command::Release(owner.clone(), fence);
        outcome_as(self.apply(job, command, None).await?.outcome)
    }

    /// Gives back a lease whose job was never started: a release that also gives back the
    /// attempt the claim counted, as decided by [`lease_domain::decide_give_back`].
    async fn give_back(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
    ) -> Result<WriteOutcome, StoreError> {
        let command = Command::GiveBack(owner.clone(), fence);
        outcome_as(self.apply(job, command, None).await?.outcome)
    }

    /// Inserts the job with the queue fields of `spec` and returns `true`; if the job exists,
    /// changes nothing and returns `false`. An id that was purged continues from its old fence.
    async fn enqueue_with(&self, job: &JobId, spec: &EnqueueSpec) -> Result<bool, StoreError> {
        let command = Command::EnqueueWith(spec.clone());
        outcome_as(self.apply(job, command, None).await?.outcome)
    }

    /// Leases up to `limit` due jobs of `queue` for `owner` over `term`, as
    /// [`LeaseStore::claim_next_with`] does.
    async fn claim_next(
        &self,
        queue: &QueueName,
        owner: &Owner,
        term: LeaseTerm,
        limit: usize,
    ) -> Result<Vec<Lease>, StoreError> {
        self.claim_next_with(&ClaimNext::new(queue, owner, term, limit))
            .await
    }

    /// Reports a failure of the live current lease, as decided by [`lease_domain::decide_fail`].
    async fn fail(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        error: &ErrorText,
        retry: Retry,
    ) -> Result<FailOutcome, StoreError> {
        let command = Command::Fail(owner.clone(), fence, now, error.clone(), retry);
        outcome_as(self.apply(job, command, None).await?.outcome)
    }

    /// Cancels a waiting, pending, running or dead job, as decided by [`lease_domain::decide_cancel`].
    async fn cancel(&self, job: &JobId, now: Timestamp) -> Result<WriteOutcome, StoreError> {
        outcome_as(self.apply(job, Command::Cancel(now), None).await?.outcome)
    }

    /// Puts a dead or cancelled job back to pending, as decided by
    /// [`lease_domain::decide_retry`].
    async fn retry(&self, job: &JobId, now: Timestamp) -> Result<WriteOutcome, StoreError> {
        outcome_as(self.apply(job, Command::Retry(now), None).await?.outcome)
    }

    /// Completes `job` as [`LeaseStore::complete`] would at `term.now()`, then leases up to
    /// `limit` due jobs of `queue` as [`LeaseStore::claim_next`] would, in one transaction: a
    /// worker hands back one job and takes the next with one commit. The claim is made whether
    /// or not the completion was accepted; its own error (the completion stands) is the inner
    /// `Err`.
    #[allow(clippy::too_many_arguments)] // A completion's four and a claim's three, together.
    async fn complete_and_claim_next(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        result: &JobResult,
        queue: &QueueName,
        term: LeaseTerm,
        limit: usize,
    ) -> Result<CompleteAndClaim, StoreError> {
        let command = Command::Complete(owner.clone(), fence, term.now(), result.clone());
        let claim = ClaimNext::new(queue, owner, term, limit);
        let applied = self.apply(job, command, Some(claim)).await?;
        Ok((
            outcome_as(applied.outcome)?,
            applied.claimed.unwrap_or_else(|| Ok(Vec::new())),
        ))
    }
}

/// Refuses a claim after a command that is not a completion (every store's `apply` checks this
/// first).
///
/// # Errors
/// [`StoreError::InvalidInput`] naming the command.
pub fn claim_may_follow(command: &Command, then: Option<&ClaimNext>) -> Result<(), StoreError> {
    match then {
        Some(_) if !command.is_completion() => Err(StoreError::InvalidInput(
            InputError::ClaimAfter(command.name()),
        )),
        _ => Ok(()),
    }
}

/// What [`LeaseStore::complete_and_claim_next`] answers: the completion's outcome, and the
/// leases (or why the claim failed; the completion stands either way).
pub type CompleteAndClaim = (WriteOutcome, Result<Vec<Lease>, StoreError>);

/// Runs one claim per owner concurrently and returns each outcome in input order.
///
/// How concurrent the claims really are is up to the store: inside a Tokio runtime
/// `lease-sqlite` runs each call on its own blocking thread, and with group commit off each on
/// its own connection, racing for SQLite's lock; with group commit on they share a transaction
/// and are decided in queue order. Either way exactly one claim of a free job wins.
/// Each element is independent: an error for one owner says nothing about the others.
pub async fn claim_many(
    store: &dyn LeaseStore,
    job: &JobId,
    owners: &[Owner],
    term: LeaseTerm,
) -> Vec<Result<ClaimOutcome, StoreError>> {
    futures::future::join_all(owners.iter().map(|owner| store.claim(job, owner, term))).await
}

#[cfg(test)]
mod outcome_tests {
    use super::*;

    #[test]
    fn an_outcome_of_another_kind_is_corrupt_and_named() {
        assert_eq!(outcome_as::<bool>(Outcome::Enqueued(true)).ok(), Some(true));
        let err = outcome_as::<bool>(Outcome::Wrote(Ok(()))).unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt(_)) && err.to_string().contains("Wrote"),
            "{err}"
        );
    }
}
