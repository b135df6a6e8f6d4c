//! The lease and queue state machine: one pure decision function per operation.
//!
//! Each function takes the stored job (or `None` when it does not exist) and the
//! caller's checked inputs, and returns either the job as it must be stored next or
//! the reason the operation is refused. A refusal means nothing may be written.

use crate::control::QueueSettings;
use crate::queue::{
    Ended, EnqueueSpec, ErrorText, GroupKey, OnParentFailure, ProgressText, QueueName, Retry,
    Status,
};
use crate::values::{
    Fence, JobId, JobResult, LeaseTerm, Owner, Renewal, Timestamp, TokenDigest, Ttl,
};

/// The stored state of one job, without its id: the seed's six columns and the queue's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The worker holding (or last holding) the lease; `None` when never claimed or released.
    pub owner: Option<Owner>,
    /// The lease is live while `until > now`; `until <= now` means expired.
    pub until: Timestamp,
    /// The generation of the latest claim; 0 before the first claim.
    pub fence: Fence,
    /// The result stored by the completing holder.
    pub result: Option<String>,
    /// Whether the job was completed; a done job never changes again.
    pub done: bool,
    /// The queue it waits in.
    pub queue: QueueName,
    /// Higher is claimed first by `claim_next`.
    pub priority: i64,
    /// Not claimable before this time; `None`: due at once.
    pub run_at: Option<Timestamp>,
    /// Leases `claim_next` has handed out since the job was enqueued or last retried.
    pub attempts: u32,
    /// The most leases `claim_next` may hand out (0 counts as 1).
    pub max_attempts: u32,
    /// Opaque bytes for the worker.
    pub payload: Option<Vec<u8>>,
    /// Dead or cancelled; `None` while the job can still run or is done.
    pub ended: Option<Ended>,
    /// The text of the last failure.
    pub error: Option<String>,
    /// The fence of the lease that completed the job.
    pub result_fence: Option<Fence>,
    /// When a queue rule last changed the job (for `purge`); `None` before any such change.
    pub updated: Option<Timestamp>,
    /// The digest of the current lease's token, when the claim that granted it was given one
    /// (claims through the network service); every claim replaces it, so a token dies with
    /// its fence.
    pub token: Option<TokenDigest>,
    /// How long one attempt may run (`None`: the queue's default, if any).
    pub timeout: Option<Ttl>,
    /// What the current attempt last said of its progress; every claim clears it.
    pub progress: Option<String>,
    /// The job's group in its queue, set at enqueue (`None`: no group).
    pub group: Option<GroupKey>,
    /// Whether it waits for its parents (`after`): not claimable, its status `waiting`, until
    /// the store finds them finished as [`crate::decide_child`] says, in the transaction that
    /// finishes the last of them.
    pub waiting: bool,
    /// The jobs it runs after, in the order first named, without repeats (empty: none).
    pub after: Vec<JobId>,
    /// What it does when a parent ends dead or cancelled.
    pub on_parent_failure: OnParentFailure,
}

impl Default for Job {
    fn default() -> Self {
        Self {
            owner: None,
            until: Timestamp::ZERO,
            fence: Fence::ZERO,
            result: None,
            done: false,
            queue: QueueName::default(),
            priority: 0,
            run_at: None,
            attempts: 0,
            max_attempts: EnqueueSpec::DEFAULT_MAX_ATTEMPTS,
            payload: None,
            ended: None,
            error: None,
            result_fence: None,
            updated: None,
            token: None,
            timeout: None,
            progress: None,
            group: None,
            waiting: false,
            after: Vec::new(),
            on_parent_failure: OnParentFailure::Cancel,
        }
    }
}

impl Job {
    /// A job as `enqueue` inserts it: no owner, `until = 0`, fence 0, no result, not done,
    /// in the default queue.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A job as `enqueue` inserts it with `spec`. A job id that was purged before starts from
    /// the fence it had (`purged`), so no fence it was ever given is handed out again.
    #[must_use]
    pub fn enqueued(spec: &EnqueueSpec, purged: Option<Fence>) -> Self {
        Self {
            fence: purged.unwrap_or(Fence::ZERO),
            queue: spec.queue.clone(),
            priority: spec.priority,
            run_at: spec.due(),
            max_attempts: spec
                .max_attempts
                .unwrap_or(EnqueueSpec::DEFAULT_MAX_ATTEMPTS),
            payload: spec.payload.as_ref().map(|p| p.as_bytes().to_vec()),
            updated: spec.enqueued_at,
            timeout: spec.timeout,
            group: spec.group.clone(),
            waiting: !spec.after.is_empty(),
            after: spec.after.clone(),
            // A policy is a job's only while it has parents (stores keep none without them).
            on_parent_failure: if spec.after.is_empty() {
                OnParentFailure::default()
            } else {
                spec.on_parent_failure
            },
            ..Self::default()
        }
    }

    /// The job run again as `spec` says (an enqueue with [`EnqueueSpec::replace_finished`] of a
    /// finished job): pending, with the spec's queue fields and its attempts from 0; its fence
    /// goes on from where it was (so every lease of the old runs stays refused), and its last
    /// result and the fence that wrote it are kept until the new run completes.
    #[must_use]
    pub fn rerun(&self, spec: &EnqueueSpec) -> Self {
        Self {
            fence: self.fence,
            result: self.result.clone(),
            result_fence: self.result_fence,
            ..Self::enqueued(spec, None)
        }
    }

    /// The job after a debounced enqueue of its id (`spec` with a debounce): while it waits to
    /// start (no lease ever granted, not finished) it takes the spec's payload and is due as
    /// the spec says ([`EnqueueSpec::due`]); `None` for a job that has started or finished,
    /// which the enqueue leaves alone, or a spec without a debounce.
    #[must_use]
    pub fn debounced(&self, spec: &EnqueueSpec) -> Option<Self> {
        let waiting =
            !self.done && self.ended.is_none() && self.attempts == 0 && self.owner.is_none();
        (spec.debounce.is_some() && waiting).then(|| Self {
            payload: spec.payload.as_ref().map(|p| p.as_bytes().to_vec()),
            run_at: spec.due(),
            updated: spec.enqueued_at.or(self.updated),
            ..self.clone()
        })
    }

    /// How long an attempt of the job may run in a queue with `settings`: its own timeout, else
    /// the queue's.
    #[must_use]
    pub fn timeout_in(&self, settings: &QueueSettings) -> Option<Ttl> {
        self.timeout.or(settings.timeout)
    }

    /// Whether the job waits for a worker at `now`: pending (not done, ended or live, with an
    /// attempt left) and due.
    #[must_use]
    pub fn is_waiting_at(&self, now: Timestamp) -> bool {
        self.status_at(now) == Status::Pending && self.is_due_at(now)
    }

    /// Since when a waiting job has been waiting, as far as the record tells: the latest of its
    /// `run_at`, the end of its last lease and its last change (its enqueue, when the caller
    /// gave the time, a release, a failure or a retry); `None` for a job enqueued without a
    /// time and never changed since.
    #[must_use]
    pub fn waiting_since(&self) -> Option<Timestamp> {
        let lease_end = (self.fence > Fence::ZERO).then_some(self.until);
        [self.run_at, lease_end, self.updated]
            .into_iter()
            .flatten()
            .max_by(|a, b| a.get().total_cmp(&b.get()))
    }

    /// Whether the lease is live at `now` (`until > now`); `until == now` is expired.
    #[must_use]
    pub fn is_live_at(&self, now: Timestamp) -> bool {
        self.until > now
    }

    /// Whether the job may be claimed at `now` as far as its schedule goes (`run_at <= now`).
    #[must_use]
    pub fn is_due_at(&self, now: Timestamp) -> bool {
        self.run_at.is_none_or(|t| t <= now)
    }

    /// Whether `claim_next` may lease the job again (0 attempts allowed counts as 1).
    #[must_use]
    pub fn has_attempts_left(&self) -> bool {
        self.attempts < self.max_attempts.max(1)
    }

    /// Whether `claim_next` acts on the job at `now` (leases it, or buries it when no attempt
    /// is left): not done, not ended, no live lease, due, and a fence that can still go up.
    /// Every store's candidate query selects exactly these jobs, and
    /// [`decide_claim_next`] skips exactly the others, so a job the query returns is never
    /// skipped (a due job whose fence is at [`Fence::MAX`] is not a candidate), but for a job
    /// whose fence has used every fence of the store's epoch ([`Fence::next_in`], after 2^32
    /// claims of it in one epoch), which is skipped.
    #[must_use]
    pub fn is_claim_candidate(&self, now: Timestamp) -> bool {
        !self.done
            && self.ended.is_none()
            && !self.waiting
            && !self.is_live_at(now)
            && self.is_due_at(now)
            && self.fence < Fence::MAX
    }

    /// Whether the job bears on its group's rules at `now`: it has started (been leased, or
    /// holds a lease) and is not finished, or it is dead. Done and cancelled jobs, and jobs
    /// never started, do not: a store reads only these jobs of a group to judge it.
    #[must_use]
    pub fn bears_on_group(&self, now: Timestamp) -> bool {
        if self.done || self.ended == Some(Ended::Cancelled) {
            return false;
        }
        self.ended == Some(Ended::Dead) || self.attempts > 0 || self.is_live_at(now)
    }

    /// Where a store's ready set files the job: `Some(until)` while someone holds it (it has
    /// an owner and can still run), so that `claim_next` need not read past it before its
    /// lease ends at `until`; `None` for a job no one holds, which waits in claim order.
    ///
    /// A store keeps held jobs out of its claim-order index and moves each one back when its
    /// `until` has passed. That never hides a candidate: a job that
    /// [`is_claim_candidate`](Self::is_claim_candidate) at `now` has `until <= now`, so it is
    /// either filed with the unheld jobs or its `leased_until` has passed.
    #[must_use]
    pub fn leased_until(&self) -> Option<Timestamp> {
        (self.owner.is_some() && !self.done && self.ended.is_none()).then_some(self.until)
    }

    /// Where the job stands at `now`. A job whose last lease expired with no attempts left is
    /// dead: `claim_next` will never lease it again.
    #[must_use]
    pub fn status_at(&self, now: Timestamp) -> Status {
        if self.done {
            return Status::Done;
        }
        match self.ended {
            Some(Ended::Dead) => Status::Dead,
            Some(Ended::Cancelled) => Status::Cancelled,
            None if self.waiting => Status::Waiting,
            None if self.is_live_at(now) => Status::Running,
            None if self.has_attempts_left() => Status::Pending,
            None => Status::Dead,
        }
    }

    /// The status stored in the job, without judging time: done, dead or cancelled, else `None`.
    #[must_use]
    pub fn finished(&self) -> Option<Status> {
        if self.done {
            return Some(Status::Done);
        }
        self.ended.map(|ended| match ended {
            Ended::Dead => Status::Dead,
            Ended::Cancelled => Status::Cancelled,
        })
    }
}

/// Why a claim was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClaimRefused {
    /// The job does not exist.
    #[error("the job does not exist")]
    Missing,
    /// The job is done.
    #[error("the job is already done")]
    Done,
    /// The job is dead (out of attempts, or failed without retry).
    #[error("the job is dead")]
    Dead,
    /// The job was cancelled.
    #[error("the job was cancelled")]
    Cancelled,
    /// The job waits for its parents (`--after`) to finish.
    #[error("the job waits for its parents to finish")]
    Waiting,
    /// The job is scheduled for later.
    #[error("the job is not due until {run_at}")]
    NotDue {
        /// When it becomes due.
        run_at: Timestamp,
    },
    /// Another lease (possibly the caller's own) is live.
    #[error("the job is leased{} until {until}", holder_suffix(owner.as_ref()))]
    Live {
        /// The current holder, if any.
        owner: Option<Owner>,
        /// When that lease expires.
        until: Timestamp,
    },
    /// The fence cannot go up: it has reached its largest value, or 2^32 claims of the job in
    /// the store's epoch used every fence of the epoch (the next would be a later epoch's).
    #[error(
        "the job's fence cannot go up: it is at the largest fence ({}) or at the last of its epoch",
        Fence::MAX
    )]
    FenceExhausted,
}

fn holder_suffix(owner: Option<&Owner>) -> String {
    owner.map(|o| format!(" to {o}")).unwrap_or_default()
}

/// Why a renew, complete or release was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WriteRefused {
    /// The job does not exist.
    #[error("the job does not exist")]
    Missing,
    /// The job is done; its result is kept.
    #[error("the job is already done{}", result_fence.map(|f| format!(" (completed with fence {f})")).unwrap_or_default())]
    Done {
        /// The fence of the lease that completed it, when known.
        result_fence: Option<Fence>,
    },
    /// The job was cancelled; its holder must stop.
    #[error("the job was cancelled")]
    Cancelled,
    /// The job is dead.
    #[error("the job is dead")]
    Dead,
    /// `retry` of a job that is still pending or running.
    #[error("the job is {status}; only dead or cancelled jobs can be retried")]
    Active {
        /// Its status.
        status: Status,
    },
    /// The caller is not the current owner.
    #[error("{presented} is not the owner (the owner is {})", current.as_ref().map_or("nobody", Owner::as_str))]
    NotOwner {
        /// The owner the caller named.
        presented: Owner,
        /// The stored owner.
        current: Option<Owner>,
    },
    /// The caller's fence is not the current one: a newer claim happened, or (a fence above
    /// the current one) the fence was never handed out.
    #[error("{}", stale_text(*presented, *current))]
    Stale {
        /// The fence the caller presented.
        presented: Fence,
        /// The stored fence.
        current: Fence,
    },
    /// A write through the network service sent no lease token.
    #[error("the write carries no lease token")]
    TokenMissing,
    /// A write through the network service sent a token that is not the lease's.
    #[error("the lease token is not this lease's")]
    BadToken,
    /// A hold of the job's group, of a job that has no group.
    #[error("the job has no group to hold")]
    NoGroup,
    /// The caller's lease expired; it cannot be renewed or completed.
    #[error("the lease expired at {until} (now is {now})")]
    Expired {
        /// When the lease expired.
        until: Timestamp,
        /// The caller's `now`.
        now: Timestamp,
    },
}

/// How a stale fence is told: one below the current fence was overtaken by a newer claim,
/// one above it was never issued. Both keep the reason `stale`.
fn stale_text(presented: Fence, current: Fence) -> String {
    if presented > current {
        format!("fence {presented} was never issued; the current fence is {current}")
    } else {
        format!("fence {presented} is stale (the current fence is {current})")
    }
}

/// Decides a claim: a job that exists, is not done and whose lease is not live at `now`
/// gets `owner`, `until = now + ttl` and the next fence.
///
/// A live lease is not claimable, not even by its own owner; `until == now` is claimable.
///
/// # Errors
/// The [`ClaimRefused`] reason; the stored job must then be left as it is.
pub fn decide_claim(
    current: Option<&Job>,
    owner: &Owner,
    term: LeaseTerm,
) -> Result<Job, ClaimRefused> {
    let job = current.ok_or(ClaimRefused::Missing)?;
    if job.done {
        return Err(ClaimRefused::Done);
    }
    match job.ended {
        Some(Ended::Dead) => return Err(ClaimRefused::Dead),
        Some(Ended::Cancelled) => return Err(ClaimRefused::Cancelled),
        None => {}
    }
    if job.waiting {
        return Err(ClaimRefused::Waiting);
    }
    if job.is_live_at(term.now()) {
        return Err(ClaimRefused::Live {
            owner: job.owner.clone(),
            until: job.until,
        });
    }
    if let Some(run_at) = job.run_at.filter(|_| !job.is_due_at(term.now())) {
        return Err(ClaimRefused::NotDue { run_at });
    }
    let fence = job
        .fence
        .next_in(term.epoch())
        .ok_or(ClaimRefused::FenceExhausted)?;
    Ok(Job {
        owner: Some(owner.clone()),
        until: term.until(),
        fence,
        updated: Some(term.now()),
        token: term.token(),
        progress: None,
        ..job.clone()
    })
}

/// What `claim_next` does with one candidate job.
#[derive(Debug, Clone, PartialEq)]
pub enum NextDecision {
    /// Lease it: store this job (new owner, `until`, fence and attempt count).
    Lease(Job),
    /// Its last lease expired with no attempts left: store it dead ("lease expired").
    Bury(Job),
    /// Not claimable now (done, ended, live, not due, or its fence is exhausted): leave it.
    Skip,
}

/// Decides one candidate of `claim_next`: a job that is not done or ended, not live and due
/// is leased with the next fence and one more attempt, unless it has used every attempt, in
/// which case it goes dead. The attempt limit belongs here, never to `claim` by id.
#[must_use]
pub fn decide_claim_next(job: &Job, owner: &Owner, term: LeaseTerm) -> NextDecision {
    let now = term.now();
    if !job.is_claim_candidate(now) {
        return NextDecision::Skip;
    }
    if !job.has_attempts_left() {
        // An expired lease keeps its owner; a released one (a worker shutting down) has none.
        let why = if job.owner.is_some() {
            LEASE_EXPIRED
        } else {
            RELEASED_AT_LAST_ATTEMPT
        };
        return NextDecision::Bury(Job {
            ended: Some(Ended::Dead),
            error: Some(why.to_owned()),
            updated: Some(now),
            ..job.clone()
        });
    }
    let Some(fence) = job.fence.next_in(term.epoch()) else {
        return NextDecision::Skip;
    };
    NextDecision::Lease(Job {
        owner: Some(owner.clone()),
        until: term.until(),
        fence,
        attempts: job.attempts + 1,
        updated: Some(now),
        token: term.token(),
        progress: None,
        ..job.clone()
    })
}

/// The order in which `claim_next` considers due jobs: highest priority first, then earliest
/// `run_at` (a job with none counts as earliest), then enqueue order (`seq`, increasing).
#[must_use]
pub fn claim_order(a: (&Job, u64), b: (&Job, u64)) -> std::cmp::Ordering {
    ClaimKey::of(a.0, a.1).cmp(&ClaimKey::of(b.0, b.1))
}

/// Where a job stands in claim order ([`claim_order`]), as a value a claim can compare across
/// reads: the job's priority, its `run_at` and its enqueue order (`seq`). A store keeps the
/// claim key of each group's head (the first of its ready jobs in claim order), so a claim can
/// meet the groups in the order of their heads and pass a group it may not lease from in one
/// step, whatever its backlog. Ordered as [`claim_order`] orders jobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClaimKey {
    /// Higher first.
    pub priority: i64,
    /// Earlier first; none counts as earliest.
    pub run_at: Option<Timestamp>,
    /// Enqueue order, lower first.
    pub seq: u64,
}

impl ClaimKey {
    /// The key of `job`, enqueued `seq`th.
    #[must_use]
    pub fn of(job: &Job, seq: u64) -> Self {
        Self {
            priority: job.priority,
            run_at: job.run_at,
            seq,
        }
    }
}

impl Eq for ClaimKey {}

impl PartialOrd for ClaimKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ClaimKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let run_at = |k: &ClaimKey| k.run_at.map_or(f64::NEG_INFINITY, Timestamp::get);
        other
            .priority
            .cmp(&self.priority)
            .then_with(|| run_at(self).total_cmp(&run_at(other)))
            .then_with(|| self.seq.cmp(&other.seq))
    }
}

/// The error a job gets when its last allowed lease expired.
pub const LEASE_EXPIRED: &str = "lease expired";

/// The error a job gets when its last allowed lease was given back (a worker shut down before
/// it finished); `retry` runs it again.
pub const RELEASED_AT_LAST_ATTEMPT: &str =
    "its last allowed attempt was released unfinished (a worker shut down); retry it to run again";

/// Judges a holder's write through the network service up to the point where the lease's
/// token and liveness are checked, in the order every client sees: no such job; a fence other
/// than the job's current one (stale, whoever sends it); the job done, cancelled or dead; the
/// lease's owner (none once released) outside what the caller may act as (`may_act_as`). On
/// success, the owner the write is made as. The service then checks the token; the store's
/// own decision (`decide_renew` and the rest, made as that owner) judges liveness.
///
/// # Errors
/// The [`WriteRefused`] reason; `caller` is named as the presented owner of `NotOwner`.
pub fn judge_holder(
    current: Option<&Job>,
    fence: Fence,
    caller: &Owner,
    may_act_as: impl Fn(&Owner) -> bool,
) -> Result<Owner, WriteRefused> {
    let job = current.ok_or(WriteRefused::Missing)?;
    if fence != job.fence {
        return Err(WriteRefused::Stale {
            presented: fence,
            current: job.fence,
        });
    }
    check_unfinished(job)?;
    match &job.owner {
        Some(owner) if may_act_as(owner) => Ok(owner.clone()),
        current => Err(WriteRefused::NotOwner {
            presented: caller.clone(),
            current: current.clone(),
        }),
    }
}

/// Refuses a write to a job that is done, cancelled or dead.
fn check_unfinished(job: &Job) -> Result<(), WriteRefused> {
    if job.done {
        return Err(WriteRefused::Done {
            result_fence: job.result_fence,
        });
    }
    match job.ended {
        Some(Ended::Cancelled) => Err(WriteRefused::Cancelled),
        Some(Ended::Dead) => Err(WriteRefused::Dead),
        None => Ok(()),
    }
}

/// Checks that `owner` and `fence` name the current holder of a job that is not done, in the
/// one order every store and the network service judge a holder's write in
/// ([`crate::judge_holder`]): missing, stale, done/cancelled/dead, not the owner.
fn check_holder<'a>(
    current: Option<&'a Job>,
    owner: &Owner,
    fence: Fence,
) -> Result<&'a Job, WriteRefused> {
    judge_holder(current, fence, owner, |held| held == owner)?;
    current.ok_or(WriteRefused::Missing)
}

/// Checks the holder and that its lease is live at `now`.
fn check_live_holder<'a>(
    current: Option<&'a Job>,
    owner: &Owner,
    fence: Fence,
    now: Timestamp,
) -> Result<&'a Job, WriteRefused> {
    let job = check_holder(current, owner, fence)?;
    if !job.is_live_at(now) {
        return Err(WriteRefused::Expired {
            until: job.until,
            now,
        });
    }
    Ok(job)
}

/// Decides a hold of the job's group from its holder (the upstream answered 429): only the
/// live current lease may hold it, and only a job that has a group. The job itself is not
/// changed; the store pauses the group until the hold's time in the same transaction
/// ([`crate::QueueChange::HoldGroup`]).
///
/// # Errors
/// The [`WriteRefused`] reason ([`WriteRefused::NoGroup`] for a job without a group); nothing
/// is then changed.
pub fn decide_hold_group<'a>(
    current: Option<&'a Job>,
    owner: &Owner,
    fence: Fence,
    now: Timestamp,
) -> Result<&'a crate::GroupKey, WriteRefused> {
    let job = check_live_holder(current, owner, fence, now)?;
    job.group.as_ref().ok_or(WriteRefused::NoGroup)
}

/// Decides a checkpoint from its holder: only the live current lease may keep one (so a
/// stalled attempt can never overwrite the step a newer attempt recorded). The job itself is
/// not changed; the store keeps the checkpoint in the same transaction as the check, if
/// [`crate::checkpoint_fits`] says the job may keep it.
///
/// # Errors
/// The [`WriteRefused`] reason; nothing is then changed.
pub fn decide_checkpoint(
    current: Option<&Job>,
    owner: &Owner,
    fence: Fence,
    now: Timestamp,
) -> Result<(), WriteRefused> {
    check_live_holder(current, owner, fence, now).map(drop)
}

/// Decides a renewal: only the live current lease (owner and fence match, not done,
/// `until > now`) is extended to `until = now + ttl`. An expired lease is never revived.
///
/// # Errors
/// The [`WriteRefused`] reason; the stored job must then be left as it is.
pub fn decide_renew(
    current: Option<&Job>,
    owner: &Owner,
    fence: Fence,
    term: LeaseTerm,
) -> Result<Job, WriteRefused> {
    let job = check_live_holder(current, owner, fence, term.now())?;
    Ok(Job {
        until: term.until(),
        ..job.clone()
    })
}

/// Decides a progress report: only the live current lease (as for a renewal) stores its text;
/// a [`Renewal::Renew`] extends the lease to `until = now + ttl` as a renewal would, a
/// [`Renewal::Keep`] leaves its end where it is.
///
/// # Errors
/// The [`WriteRefused`] reason; the stored job must then be left as it is.
pub fn decide_progress(
    current: Option<&Job>,
    owner: &Owner,
    fence: Fence,
    renewal: Renewal,
    progress: &ProgressText,
) -> Result<Job, WriteRefused> {
    let job = check_live_holder(current, owner, fence, renewal.now())?;
    Ok(Job {
        until: renewal.until(job.until),
        progress: Some(progress.as_str().to_owned()),
        ..job.clone()
    })
}

/// Decides a completion: only the live current lease stores its result and marks the job done.
///
/// # Errors
/// The [`WriteRefused`] reason; the stored job, and so any stored result, is then left as it is.
pub fn decide_complete(
    current: Option<&Job>,
    owner: &Owner,
    fence: Fence,
    now: Timestamp,
    result: &JobResult,
) -> Result<Job, WriteRefused> {
    let job = check_live_holder(current, owner, fence, now)?;
    Ok(Job {
        result: Some(result.as_str().to_owned()),
        done: true,
        result_fence: Some(fence),
        updated: Some(now),
        ..job.clone()
    })
}

/// Where a failed job went.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Failed {
    /// `Pending` (it will be retried) or `Dead`.
    pub status: Status,
    /// When it becomes due again, when pending.
    pub run_at: Option<Timestamp>,
}

/// Decides a failure reported by the live current holder: while attempts remain (and `retry`
/// allows) the job goes back to pending, due after the backoff delay; otherwise it goes dead.
/// Either way the lease is given up and the fence kept, so the failed holder's later writes
/// stay refused; the error text is kept.
///
/// # Errors
/// The [`WriteRefused`] reason; the stored job must then be left as it is.
pub fn decide_fail(
    id: &JobId,
    current: Option<&Job>,
    owner: &Owner,
    fence: Fence,
    now: Timestamp,
    error: &ErrorText,
    retry: Retry,
) -> Result<(Job, Failed), WriteRefused> {
    let job = check_live_holder(current, owner, fence, now)?;
    let released = Job {
        owner: None,
        until: Timestamp::ZERO,
        error: Some(error.as_str().to_owned()),
        updated: Some(now),
        ..job.clone()
    };
    match retry {
        Retry::Backoff(policy) if job.has_attempts_left() => {
            let delay = policy.delay(id, job.attempts.max(1));
            // A delay that would pass the largest time retries at once instead.
            let run_at = Timestamp::new(now.get() + delay).unwrap_or(now);
            let failed = Failed {
                status: Status::Pending,
                run_at: Some(run_at),
            };
            Ok((
                Job {
                    run_at: Some(run_at),
                    ..released
                },
                failed,
            ))
        }
        _ => Ok((
            Job {
                ended: Some(Ended::Dead),
                ..released
            },
            Failed {
                status: Status::Dead,
                run_at: None,
            },
        )),
    }
}

/// Decides a cancel: a waiting, pending or running job becomes cancelled at once (its holder's later
/// writes are refused as `Cancelled`); so does a dead one, keeping its record and last error, so
/// an operator can end a job that must not run again without purging it (a cancelled job frees
/// its ordered group, where a dead one holds it). Done and cancelled jobs are refused.
///
/// # Errors
/// The [`WriteRefused`] reason; the stored job must then be left as it is.
pub fn decide_cancel(current: Option<&Job>, now: Timestamp) -> Result<Job, WriteRefused> {
    let job = current.ok_or(WriteRefused::Missing)?;
    match job.status_at(now) {
        Status::Done => Err(WriteRefused::Done {
            result_fence: job.result_fence,
        }),
        Status::Cancelled => Err(WriteRefused::Cancelled),
        Status::Waiting | Status::Pending | Status::Running | Status::Dead => Ok(Job {
            ended: Some(Ended::Cancelled),
            waiting: false,
            updated: Some(now),
            ..job.clone()
        }),
    }
}

/// Decides a retry: a dead or cancelled job goes back to pending, due at once, with fresh
/// attempts and no lease; its fence continues (never reset). A job with parents is then
/// judged against them again by the store ([`crate::judges_parents`]), so it may wait.
///
/// # Errors
/// The [`WriteRefused`] reason (`Active` for a pending or running job).
pub fn decide_retry(current: Option<&Job>, now: Timestamp) -> Result<Job, WriteRefused> {
    let job = current.ok_or(WriteRefused::Missing)?;
    match job.status_at(now) {
        Status::Dead | Status::Cancelled => Ok(Job {
            owner: None,
            until: Timestamp::ZERO,
            run_at: None,
            attempts: 0,
            ended: None,
            updated: Some(now),
            ..job.clone()
        }),
        Status::Done => Err(WriteRefused::Done {
            result_fence: job.result_fence,
        }),
        status => Err(WriteRefused::Active { status }),
    }
}

/// Whether `purge` deletes the job: its status at `before` ([`Job::status_at`], as `list`
/// judges it) is done, dead or cancelled and one of `statuses`, and its last change is before
/// `before` (a job never changed by a queue rule counts as older than any time). A job whose
/// last allowed lease expired is dead from then on, whether or not `claim_next` has buried it
/// yet.
#[must_use]
pub fn is_purgeable(job: &Job, before: Timestamp, statuses: &[Status]) -> bool {
    let status = job.status_at(before);
    status.is_finished()
        && statuses.contains(&status)
        && job.updated.is_none_or(|changed| changed < before)
}

/// Decides a release: the current holder (owner and fence match, not done) gives the lease
/// back: no owner, `until = 0`, and the fence is kept so it is never handed out again.
///
/// There is no time condition: a holder whose lease expired may still release it, as long
/// as nobody claimed the job since (a claim would have changed the fence).
///
/// # Errors
/// The [`WriteRefused`] reason; the stored job must then be left as it is.
pub fn decide_release(
    current: Option<&Job>,
    owner: &Owner,
    fence: Fence,
) -> Result<Job, WriteRefused> {
    let job = check_holder(current, owner, fence)?;
    Ok(Job {
        owner: None,
        until: Timestamp::ZERO,
        ..job.clone()
    })
}

/// Give back a lease whose job was never started: the same holders as [`decide_release`], the
/// same release, and the attempt the claim counted is given back, so a job held ahead by a
/// worker that stopped is neither nearer its last attempt nor buried for having been held. The
/// fence stays where the claim took it: the next lease takes the next fence, as always.
pub fn decide_give_back(
    current: Option<&Job>,
    owner: &Owner,
    fence: Fence,
) -> Result<Job, WriteRefused> {
    let released = decide_release(current, owner, fence)?;
    Ok(Job {
        attempts: released.attempts.saturating_sub(1),
        ..released
    })
}
