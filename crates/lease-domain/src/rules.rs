//! The lease state machine: one pure decision function per operation.
//!
//! Each function takes the stored job (or `None` when it does not exist) and the
//! caller's checked inputs, and returns either the job as it must be stored next or
//! the reason the operation is refused. A refusal means nothing may be written.

use crate::values::{Fence, JobResult, LeaseTerm, Owner, Timestamp};

/// The stored state of one job, without its id.
#[derive(Debug, Clone, PartialEq, Default)]
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
}

impl Job {
    /// A job as `enqueue` inserts it: no owner, `until = 0`, fence 0, no result, not done.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the lease is live at `now` (`until > now`); `until == now` is expired.
    #[must_use]
    pub fn is_live_at(&self, now: Timestamp) -> bool {
        self.until > now
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
    /// Another lease (possibly the caller's own) is live.
    #[error("the job is leased{} until {until}", holder_suffix(owner.as_ref()))]
    Live {
        /// The current holder, if any.
        owner: Option<Owner>,
        /// When that lease expires.
        until: Timestamp,
    },
    /// The fence has reached its largest value; the job can never be claimed again.
    #[error("the job's fence is exhausted at {}", Fence::MAX)]
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
    #[error("the job is already done")]
    Done,
    /// The caller is not the current owner.
    #[error("{presented} is not the owner (the owner is {})", current.as_ref().map_or("nobody", Owner::as_str))]
    NotOwner {
        /// The owner the caller named.
        presented: Owner,
        /// The stored owner.
        current: Option<Owner>,
    },
    /// The caller's fence is not the current one: a newer claim happened.
    #[error("fence {presented} is stale (the current fence is {current})")]
    StaleFence {
        /// The fence the caller presented.
        presented: Fence,
        /// The stored fence.
        current: Fence,
    },
    /// The caller's lease expired; it cannot be renewed or completed.
    #[error("the lease expired at {until} (now is {now})")]
    Expired {
        /// When the lease expired.
        until: Timestamp,
        /// The caller's `now`.
        now: Timestamp,
    },
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
    if job.is_live_at(term.now()) {
        return Err(ClaimRefused::Live {
            owner: job.owner.clone(),
            until: job.until,
        });
    }
    let fence = job.fence.next().ok_or(ClaimRefused::FenceExhausted)?;
    Ok(Job {
        owner: Some(owner.clone()),
        until: term.until(),
        fence,
        result: job.result.clone(),
        done: false,
    })
}

/// Checks that `owner` and `fence` name the current holder of a job that is not done.
fn check_holder<'a>(
    current: Option<&'a Job>,
    owner: &Owner,
    fence: Fence,
) -> Result<&'a Job, WriteRefused> {
    let job = current.ok_or(WriteRefused::Missing)?;
    if job.done {
        return Err(WriteRefused::Done);
    }
    if job.owner.as_ref() != Some(owner) {
        return Err(WriteRefused::NotOwner {
            presented: owner.clone(),
            current: job.owner.clone(),
        });
    }
    if job.fence != fence {
        return Err(WriteRefused::StaleFence {
            presented: fence,
            current: job.fence,
        });
    }
    Ok(job)
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
        ..job.clone()
    })
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
