//! Every write as a value: a [`Command`] decided against the stored job gives the job to store
//! (if any) and the caller's [`Outcome`]. Stores that queue, batch or replay writes use this.

use crate::access::{Credential, judge_credential};
use crate::queue::{EnqueueSpec, ErrorText, ProgressText, Retry};
use crate::rules::{
    ClaimRefused, Failed, Job, WriteRefused, decide_cancel, decide_checkpoint, decide_claim,
    decide_complete, decide_fail, decide_give_back, decide_hold_group, decide_progress,
    decide_release, decide_renew, decide_retry,
};
use crate::trace::TraceContext;
use crate::values::{Fence, JobId, JobResult, LeaseTerm, Owner, Renewal, Timestamp};
use crate::workflow::Checkpoint;

/// One write to one job, with the caller's checked inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Insert the job in the default state if it is missing (the seed's `enqueue`).
    Enqueue,
    /// Insert the job with queue fields if it is missing.
    EnqueueWith(EnqueueSpec),
    /// Claim the job.
    Claim(Owner, LeaseTerm),
    /// Renew the live current lease.
    Renew(Owner, Fence, LeaseTerm),
    /// Store the live current lease's progress, and renew it or keep its end.
    Progress(Owner, Fence, Renewal, ProgressText),
    /// Hold the job's group until a time (owner, fence, now, until): the live current
    /// lease's holder pauses its group, as [`Command::queue_change`] says.
    HoldGroup(Owner, Fence, Timestamp, Timestamp),
    /// Keep a checkpoint of the live current lease (owner, fence, now, checkpoint): the job
    /// is not changed, the store keeps the checkpoint, as [`Command::checkpoint`] says.
    Checkpoint(Owner, Fence, Timestamp, Checkpoint),
    /// Complete the job with a result.
    Complete(Owner, Fence, Timestamp, JobResult),
    /// Release the lease.
    Release(Owner, Fence),
    /// Give back a lease whose job was never started (a worker's lease claimed ahead, or one
    /// it got as it stopped): released as [`Command::Release`], and the attempt its claim
    /// counted is given back ([`decide_give_back`]).
    GiveBack(Owner, Fence),
    /// Report a failure of the live current lease.
    Fail(Owner, Fence, Timestamp, ErrorText, Retry),
    /// Cancel the job.
    Cancel(Timestamp),
    /// Put a dead or cancelled job back to pending.
    Retry(Timestamp),
    /// A holder's write (renew, complete, release or fail) through the network service: the
    /// inner command's owner is a stand-in, [`judge_credential`] finds the lease's owner, then
    /// the inner command is decided as that owner.
    AsHolder(Credential, Box<Command>),
}

/// A lease holder's write, as metrics and the audit trail name it: the one definition that
/// the stores' writers and every reader of the trail share, so that nothing can be recorded
/// that a reader does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HolderWrite {
    /// `renew`.
    Renew,
    /// `progress` (which renews too).
    Progress,
    /// `complete`.
    Complete,
    /// `release`.
    Release,
    /// `fail`.
    Fail,
    /// `hold_group`.
    HoldGroup,
    /// `checkpoint`.
    Checkpoint,
}

impl HolderWrite {
    /// Every holder's write, in the order the docs list them.
    pub const ALL: [HolderWrite; 7] = [
        HolderWrite::Renew,
        HolderWrite::Progress,
        HolderWrite::Complete,
        HolderWrite::Release,
        HolderWrite::Fail,
        HolderWrite::HoldGroup,
        HolderWrite::Checkpoint,
    ];

    /// The name the audit trail and metrics use.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            HolderWrite::Renew => "renew",
            HolderWrite::Progress => "progress",
            HolderWrite::Complete => "complete",
            HolderWrite::Release => "release",
            HolderWrite::Fail => "fail",
            HolderWrite::HoldGroup => "hold_group",
            HolderWrite::Checkpoint => "checkpoint",
        }
    }

    /// Reads [`HolderWrite::as_str`].
    #[must_use]
    pub fn parse(text: &str) -> Option<HolderWrite> {
        HolderWrite::ALL.into_iter().find(|w| w.as_str() == text)
    }
}

/// What a command answers its caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `enqueue`: inserted, or the job already existed.
    Enqueued(bool),
    /// `claim`: the new fence, or why not.
    Claimed(Result<Fence, ClaimRefused>),
    /// `renew`, `complete`, `release`, `cancel`, `retry`: accepted, or why not.
    Wrote(Result<(), WriteRefused>),
    /// `fail`: where the job went, or why not.
    Failed(Result<Failed, WriteRefused>),
}

impl Command {
    /// Whether the command inserts a missing job (and so needs the id's purge mark).
    #[must_use]
    pub fn is_enqueue(&self) -> bool {
        matches!(self, Command::Enqueue | Command::EnqueueWith(_))
    }

    /// Decides the command against the stored job `current` of job `id`: the job to store
    /// (`None`: write nothing) and the outcome. `purged` is the fence the id had when it was
    /// last purged, if it was; only an enqueue of a missing job uses it.
    #[must_use]
    pub fn decide(
        &self,
        id: &JobId,
        current: Option<&Job>,
        purged: Option<Fence>,
    ) -> (Option<Job>, Outcome) {
        match self {
            Command::Enqueue => enqueue(current, &EnqueueSpec::default(), purged),
            Command::EnqueueWith(spec) => enqueue(current, spec, purged),
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
            Command::Progress(owner, fence, renewal, text) => {
                wrote(decide_progress(current, owner, *fence, *renewal, text))
            }
            Command::HoldGroup(owner, fence, now, _) => (
                None,
                Outcome::Wrote(decide_hold_group(current, owner, *fence, *now).map(drop)),
            ),
            Command::Checkpoint(owner, fence, now, _) => (
                None,
                Outcome::Wrote(decide_checkpoint(current, owner, *fence, *now)),
            ),
            Command::Complete(owner, fence, now, result) => {
                wrote(decide_complete(current, owner, *fence, *now, result))
            }
            Command::Release(owner, fence) => wrote(decide_release(current, owner, *fence)),
            Command::GiveBack(owner, fence) => wrote(decide_give_back(current, owner, *fence)),
            Command::Fail(owner, fence, now, error, retry) => {
                match decide_fail(id, current, owner, *fence, *now, error, *retry) {
                    Ok((next, failed)) => (Some(next), Outcome::Failed(Ok(failed))),
                    Err(refused) => (None, Outcome::Failed(Err(refused))),
                }
            }
            Command::Cancel(now) => wrote(decide_cancel(current, *now)),
            Command::Retry(now) => wrote(decide_retry(current, *now)),
            Command::AsHolder(credential, inner) => {
                let refused = |refused: WriteRefused| match inner.as_ref() {
                    Command::Fail(..) => (None, Outcome::Failed(Err(refused))),
                    _ => (None, Outcome::Wrote(Err(refused))),
                };
                let Some(fence) = inner.holder_fence() else {
                    return refused(WriteRefused::Missing);
                };
                match judge_credential(current, fence, credential) {
                    Ok(owner) => inner.as_owner(owner).decide(id, current, purged),
                    Err(why) => refused(why),
                }
            }
        }
    }

    /// The fence a holder's write presents (`None` for other commands).
    #[must_use]
    pub fn holder_fence(&self) -> Option<Fence> {
        match self {
            Command::Renew(_, fence, _)
            | Command::Progress(_, fence, _, _)
            | Command::HoldGroup(_, fence, _, _)
            | Command::Checkpoint(_, fence, _, _)
            | Command::Complete(_, fence, _, _)
            | Command::Release(_, fence)
            | Command::GiveBack(_, fence)
            | Command::Fail(_, fence, _, _, _) => Some(*fence),
            Command::AsHolder(_, inner) => inner.holder_fence(),
            _ => None,
        }
    }

    /// Which holder's write the command is (through the service too); `None` for the others.
    #[must_use]
    pub fn holder_write(&self) -> Option<HolderWrite> {
        match self {
            Command::Renew(..) => Some(HolderWrite::Renew),
            Command::Progress(..) => Some(HolderWrite::Progress),
            Command::HoldGroup(..) => Some(HolderWrite::HoldGroup),
            Command::Checkpoint(..) => Some(HolderWrite::Checkpoint),
            Command::Complete(..) => Some(HolderWrite::Complete),
            Command::Release(..) | Command::GiveBack(..) => Some(HolderWrite::Release),
            Command::Fail(..) => Some(HolderWrite::Fail),
            Command::AsHolder(_, inner) => inner.holder_write(),
            _ => None,
        }
    }

    /// The owner a holder's write names directly (`None` for other commands, and for a write
    /// through the service, whose owner the credential decides).
    #[must_use]
    pub fn holder_owner(&self) -> Option<&Owner> {
        match self {
            Command::Renew(owner, ..)
            | Command::Progress(owner, ..)
            | Command::HoldGroup(owner, ..)
            | Command::Checkpoint(owner, ..)
            | Command::Complete(owner, ..)
            | Command::Release(owner, ..)
            | Command::GiveBack(owner, ..)
            | Command::Fail(owner, ..) => Some(owner),
            _ => None,
        }
    }

    /// The same holder's write made as `owner` (other commands are returned as they are).
    #[must_use]
    pub fn as_owner(&self, owner: Owner) -> Command {
        match self {
            Command::Renew(_, fence, term) => Command::Renew(owner, *fence, *term),
            Command::Progress(_, fence, renewal, text) => {
                Command::Progress(owner, *fence, *renewal, text.clone())
            }
            Command::Complete(_, fence, now, result) => {
                Command::Complete(owner, *fence, *now, result.clone())
            }
            Command::Release(_, fence) => Command::Release(owner, *fence),
            Command::GiveBack(_, fence) => Command::GiveBack(owner, *fence),
            Command::HoldGroup(_, fence, now, until) => {
                Command::HoldGroup(owner, *fence, *now, *until)
            }
            Command::Checkpoint(_, fence, now, checkpoint) => {
                Command::Checkpoint(owner, *fence, *now, checkpoint.clone())
            }
            Command::Fail(_, fence, now, error, retry) => {
                Command::Fail(owner, *fence, *now, error.clone(), *retry)
            }
            other => other.clone(),
        }
    }

    /// The change of its queue's settings a granted command makes beside the job, in the same
    /// transaction (`None` for every command but a hold of a group, and for a hold the domain
    /// refuses): the job's queue and the change.
    #[must_use]
    pub fn queue_change(
        &self,
        current: Option<&Job>,
        outcome: &Outcome,
    ) -> Option<(crate::QueueName, crate::QueueChange)> {
        match (self, outcome) {
            (Command::HoldGroup(_, _, _, until), Outcome::Wrote(Ok(()))) => {
                let job = current?;
                let group = job.group.clone()?;
                Some((
                    job.queue.clone(),
                    crate::QueueChange::HoldGroup(group, *until),
                ))
            }
            (Command::AsHolder(_, inner), _) => inner.queue_change(current, outcome),
            _ => None,
        }
    }

    /// The checkpoint the command would keep if granted (directly or through the service): a
    /// store that counts the job's checkpoints reads them with the job's row.
    #[must_use]
    pub fn checkpoint_asked(&self) -> Option<&Checkpoint> {
        match self {
            Command::Checkpoint(_, _, _, checkpoint) => Some(checkpoint),
            Command::AsHolder(_, inner) => inner.checkpoint_asked(),
            _ => None,
        }
    }

    /// The checkpoint a granted command keeps beside the job, in the same transaction, with
    /// the fence that writes it and when (`None` for every command but a checkpoint, and for
    /// one the domain refuses).
    #[must_use]
    pub fn checkpoint(&self, outcome: &Outcome) -> Option<(&Checkpoint, Fence, Timestamp)> {
        match (self, outcome) {
            (Command::Checkpoint(_, fence, now, checkpoint), Outcome::Wrote(Ok(()))) => {
                Some((checkpoint, *fence, *now))
            }
            (Command::AsHolder(_, inner), _) => inner.checkpoint(outcome),
            _ => None,
        }
    }

    /// Whether the job's checkpoints go when this command's decision `next` is stored over
    /// `current`: an enqueue that runs a finished job again starts it without them (a retry,
    /// a failed attempt or an expired lease keeps them).
    #[must_use]
    pub fn clears_checkpoints(&self, current: Option<&Job>, next: Option<&Job>) -> bool {
        self.is_enqueue() && next.is_some() && current.is_some_and(|job| job.finished().is_some())
    }

    /// The trace context to store for the job when this command's decision `next` is stored
    /// over `current`: `Some` for an enqueue that makes the job or runs a finished one again,
    /// holding the enqueue's context (`Some(None)`: the job then has none, and a run again
    /// drops its last run's); `None` for every other command and enqueue, which leave it.
    /// An enqueue that makes a job without a context needs no write (`None` too).
    #[must_use]
    pub fn sets_trace(
        &self,
        current: Option<&Job>,
        next: Option<&Job>,
    ) -> Option<Option<&TraceContext>> {
        let Command::EnqueueWith(spec) = self else {
            return None;
        };
        match current {
            None if next.is_some() => spec.trace.as_ref().map(Some),
            Some(job) if next.is_some() && job.finished().is_some() => Some(spec.trace.as_ref()),
            _ => None,
        }
    }

    /// Whether the command can finish a job (complete, fail or cancel it, directly or through
    /// the service): a store that must then settle the jobs waiting on it reads them first.
    #[must_use]
    pub fn may_finish(&self) -> bool {
        match self {
            Command::Complete(..) | Command::Fail(..) | Command::Cancel(_) => true,
            Command::AsHolder(_, inner) => inner.may_finish(),
            _ => false,
        }
    }

    /// Whether the command completes a job (as a holder, directly or through the service): the
    /// one command a claim of the next jobs may follow in the same transaction.
    #[must_use]
    pub fn is_completion(&self) -> bool {
        match self {
            Command::Complete(..) => true,
            Command::AsHolder(_, inner) => inner.is_completion(),
            _ => false,
        }
    }

    /// What the command is, as operations are named in metrics and the audit trail.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Command::Enqueue => "enqueue",
            Command::EnqueueWith(_) => "enqueue",
            Command::Claim(..) => "claim",
            Command::Renew(..)
            | Command::Progress(..)
            | Command::HoldGroup(..)
            | Command::Checkpoint(..)
            | Command::Complete(..)
            | Command::Release(..)
            | Command::GiveBack(..)
            | Command::Fail(..) => self.holder_write().map_or("write", HolderWrite::as_str),
            Command::Cancel(_) => "cancel",
            Command::Retry(_) => "retry",
            Command::AsHolder(_, inner) => inner.name(),
        }
    }
}

fn enqueue(
    current: Option<&Job>,
    spec: &EnqueueSpec,
    purged: Option<Fence>,
) -> (Option<Job>, Outcome) {
    match current {
        // A finished job is run again only when the caller asks for it.
        Some(job) if spec.replace_finished && job.finished().is_some() => {
            (Some(job.rerun(spec)), Outcome::Enqueued(true))
        }
        // A debounced enqueue of a job still waiting to start moves it; nothing is inserted.
        Some(job) if spec.debounce.is_some() => (job.debounced(spec), Outcome::Enqueued(false)),
        Some(_) => (None, Outcome::Enqueued(false)),
        None => (Some(Job::enqueued(spec, purged)), Outcome::Enqueued(true)),
    }
}

fn wrote(decision: Result<Job, WriteRefused>) -> (Option<Job>, Outcome) {
    match decision {
        Ok(next) => (Some(next), Outcome::Wrote(Ok(()))),
        Err(refused) => (None, Outcome::Wrote(Err(refused))),
    }
}
