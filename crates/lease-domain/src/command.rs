//! Every write as a value: a [`Command`] decided against the stored job gives the job to store
//! (if any) and the caller's [`Outcome`]. Stores that queue, batch or replay writes use this.

use crate::rules::{
    ClaimRefused, Job, WriteRefused, decide_claim, decide_complete, decide_release, decide_renew,
};
use crate::values::{Fence, JobResult, LeaseTerm, Owner, Timestamp};

/// One write to one job, with the caller's checked inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Insert the job in the default state if it is missing.
    Enqueue,
    /// Claim the job.
    Claim(Owner, LeaseTerm),
    /// Renew the live current lease.
    Renew(Owner, Fence, LeaseTerm),
    /// Complete the job with a result.
    Complete(Owner, Fence, Timestamp, JobResult),
    /// Release the lease.
    Release(Owner, Fence),
}

/// What a command answers its caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `enqueue`: inserted, or the job already existed.
    Enqueued(bool),
    /// `claim`: the new fence, or why not.
    Claimed(Result<Fence, ClaimRefused>),
    /// `renew`, `complete`, `release`: accepted, or why not.
    Wrote(Result<(), WriteRefused>),
}

impl Command {
    /// Decides the command against the stored job: the job to store (`None`: write nothing)
    /// and the outcome.
    #[must_use]
    pub fn decide(&self, current: Option<&Job>) -> (Option<Job>, Outcome) {
        match self {
            Command::Enqueue => match current {
                Some(_) => (None, Outcome::Enqueued(false)),
                None => (Some(Job::new()), Outcome::Enqueued(true)),
            },
            Command::Claim(owner, term) => match decide_claim(current, owner, *term) {
                Ok(next) => {
                    let fence = next.fence;
                    (Some(next), Outcome::Claimed(Ok(fence)))
                }
                Err(refused) => (None, Outcome::Claimed(Err(refused))),
            },
            Command::Renew(owner, fence, term) => {
                wrote(decide_renew(current, owner, *fence, *term))
            }
            Command::Complete(owner, fence, now, result) => {
                wrote(decide_complete(current, owner, *fence, *now, result))
            }
            Command::Release(owner, fence) => wrote(decide_release(current, owner, *fence)),
        }
    }
}

fn wrote(decision: Result<Job, WriteRefused>) -> (Option<Job>, Outcome) {
    match decision {
        Ok(next) => (Some(next), Outcome::Wrote(Ok(()))),
        Err(refused) => (None, Outcome::Wrote(Err(refused))),
    }
}
