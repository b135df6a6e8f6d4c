//! A job's attempts: one per lease (every claim takes the next fence, so a fence names one
//! attempt), from its claim to its end. The job's row holds the attempt under way; when it
//! ends, the decision that ends it says so as a value ([`crate::Change::Attempt`]) and the
//! store keeps it, up to [`ATTEMPTS_KEPT`] a job.

use crate::command::Command;
use crate::rules::Job;
use crate::values::{Fence, Owner, Timestamp};

/// How many ended attempts a store keeps of one job: the latest (by fence).
pub const ATTEMPTS_KEPT: u64 = 100;

/// The error a worker fails an attempt with when it ran longer than its timeout.
pub const TIMED_OUT: &str = "timed out";

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptEnd {
    /// Its holder completed the job.
    Done,
    /// Its holder failed it (its error says why).
    Failed,
    /// Its holder failed it for running past its timeout ([`TIMED_OUT`]).
    TimedOut,
    /// Its lease expired: another claim took the job, or `claim_next` buried it, or an
    /// operator cancelled it after the lease had ended. It ended at the lease's deadline.
    LeaseLost,
    /// Its holder gave the lease back unfinished.
    Released,
    /// An operator cancelled the job while the lease was live.
    Cancelled,
}

impl AttemptEnd {
    /// Every end, in the order above.
    pub const ALL: [AttemptEnd; 6] = [
        AttemptEnd::Done,
        AttemptEnd::Failed,
        AttemptEnd::TimedOut,
        AttemptEnd::LeaseLost,
        AttemptEnd::Released,
        AttemptEnd::Cancelled,
    ];

    /// The end as stores keep it and readers show it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptEnd::Done => "done",
            AttemptEnd::Failed => "failed",
            AttemptEnd::TimedOut => "timed_out",
            AttemptEnd::LeaseLost => "lease_lost",
            AttemptEnd::Released => "released",
            AttemptEnd::Cancelled => "cancelled",
        }
    }

    /// Whether the attempt failed (its holder's failure, a timeout's included): what the
    /// overview counts as a failure.
    #[must_use]
    pub fn is_failure(self) -> bool {
        matches!(self, AttemptEnd::Failed | AttemptEnd::TimedOut)
    }

    /// The end named `text` ([`AttemptEnd::as_str`]).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|end| end.as_str() == text)
    }
}

/// One attempt of a job that has ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// The fence its claim took.
    pub fence: Fence,
    /// Who held it.
    pub owner: Owner,
    /// When it was claimed (`None` for a lease granted before attempts were kept).
    pub started: Option<Timestamp>,
    /// When it ended; `None` in a decision that carries no time (a release): the store writes
    /// its own clock's time.
    pub ended: Option<Timestamp>,
    /// How it ended.
    pub end: AttemptEnd,
    /// Its error, when it failed.
    pub error: Option<String>,
}

/// The attempt a job's row holds: leased, not finished.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAttempt {
    /// The fence its claim took.
    pub fence: Fence,
    /// Who holds it.
    pub owner: Owner,
    /// When it was claimed (a claim writes its time as the job's `updated`, which nothing
    /// else changes while the lease is held).
    pub started: Option<Timestamp>,
    /// When its lease ends (or ended).
    pub until: Timestamp,
}

impl Job {
    /// The attempt under way, if the job is leased and not finished: live, or expired and
    /// not yet taken by another claim.
    #[must_use]
    pub fn open_attempt(&self) -> Option<OpenAttempt> {
        let owner = self.owner.clone()?;
        (self.fence > Fence::ZERO && !self.done && self.ended.is_none()).then_some(OpenAttempt {
            fence: self.fence,
            owner,
            started: self.updated,
            until: self.until,
        })
    }
}

impl Job {
    /// The attempt this job's row held that ends when the job becomes `next` through `command`
    /// (`None`: a claim by `claim_next`), as [`OpenAttempt::closed_by`] says; `None` when the
    /// row held none or `next` still holds it.
    #[must_use]
    pub fn ended_attempt(&self, command: Option<&Command>, next: &Job) -> Option<Attempt> {
        self.open_attempt()?.closed_by(command, next)
    }
}

impl OpenAttempt {
    /// How readers name the attempt under way at `now`: `running` while its lease is live,
    /// `expired` after (not yet taken by another claim).
    #[must_use]
    pub fn outcome_at(&self, now: Timestamp) -> &'static str {
        if self.until > now {
            "running"
        } else {
            "expired"
        }
    }

    /// How this attempt ends when its job becomes `next` through `command` (`None`: a claim
    /// by `claim_next`, which only takes or buries a job whose lease expired): `None` while
    /// `next` still holds it. A write made while the lease was live ends it as the write
    /// says; anything after the lease's end (another claim, a burial, an operator's cancel)
    /// finds it lost at its deadline.
    #[must_use]
    pub fn closed_by(&self, command: Option<&Command>, next: &Job) -> Option<Attempt> {
        if next
            .open_attempt()
            .is_some_and(|open| open.fence == self.fence)
        {
            return None;
        }
        let by_holder = command.and_then(holder_end);
        let (end, ended, error) = match by_holder {
            Some((end, at)) if at.is_none_or(|t| t < self.until) => {
                let error = matches!(end, AttemptEnd::Failed | AttemptEnd::TimedOut)
                    .then(|| next.error.clone())
                    .flatten();
                (end, at, error)
            }
            _ => (AttemptEnd::LeaseLost, Some(self.until), None),
        };
        Some(Attempt {
            fence: self.fence,
            owner: self.owner.clone(),
            started: self.started,
            ended,
            end,
            error,
        })
    }
}

/// How `command` ends the attempt it writes to, and when (`None`: a release, which carries
/// no time); `None` for a command that ends no attempt by itself.
fn holder_end(command: &Command) -> Option<(AttemptEnd, Option<Timestamp>)> {
    match command {
        Command::AsHolder(_, inner) => holder_end(inner),
        Command::Complete(_, _, at, _) => Some((AttemptEnd::Done, Some(*at))),
        Command::Fail(_, _, at, error, _) if error.as_str() == TIMED_OUT => {
            Some((AttemptEnd::TimedOut, Some(*at)))
        }
        Command::Fail(_, _, at, _, _) => Some((AttemptEnd::Failed, Some(*at))),
        Command::Release(..) | Command::GiveBack(..) => Some((AttemptEnd::Released, None)),
        Command::Cancel(at) => Some((AttemptEnd::Cancelled, Some(*at))),
        _ => None,
    }
}

/// What a store keeps of a job's ended attempts: the latest [`ATTEMPTS_KEPT`] (by fence),
/// oldest first, and how many earlier ones it no longer keeps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attempts {
    /// The attempts kept, by fence.
    pub kept: Vec<Attempt>,
    /// Earlier attempts of the first kept one's epoch not kept: trimmed, or purged with an
    /// earlier life of the job's id (every claim of an epoch takes the next fence, so the
    /// first kept fence's count says how many came before it).
    pub older: u64,
}

impl Attempts {
    /// The kept attempts (by fence), with the earlier ones counted.
    #[must_use]
    pub fn of(kept: Vec<Attempt>) -> Self {
        let older = kept
            .first()
            .map_or(0, |a| u64::from(a.fence.count().saturating_sub(1)));
        Self { kept, older }
    }
}

/// Whether keeping the attempt of `fence` may take its job past [`ATTEMPTS_KEPT`], so the
/// store drops all but the latest of them by fence: when its epoch's count of claims passes
/// the bound, and always after the first epoch (a job's attempts may then span epochs).
/// Most jobs never trim: their first epoch's claims are below the bound.
#[must_use]
pub fn trims_attempts(fence: Fence) -> bool {
    u64::from(fence.count()) > ATTEMPTS_KEPT || fence.epoch() > crate::values::Epoch::ZERO
}
