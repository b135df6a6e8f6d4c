//! What a refused write by a lease holder says about the system: who wrote, with which fence,
//! against which current fence, why it was refused, and how late it came. Stores record it
//! (the opt-in audit trail) and count it (metrics).

use crate::command::{Command, HolderWrite};
use crate::rules::{Job, WriteRefused};
use crate::values::{Fence, Owner};

/// Why a holder's write was refused, as the audit trail names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AuditReason {
    /// A newer claim happened: the writer's fence is stale.
    Stale,
    /// The writer's lease expired.
    Expired,
    /// The writer is not the owner.
    NotOwner,
    /// The job was done.
    Done,
    /// The job was cancelled.
    Cancelled,
    /// The job was dead.
    Dead,
    /// The job does not exist.
    Missing,
    /// The write came through the network service without its lease's token.
    BadToken,
}

impl AuditReason {
    /// Every reason.
    pub const ALL: [AuditReason; 8] = [
        AuditReason::Stale,
        AuditReason::Expired,
        AuditReason::NotOwner,
        AuditReason::Done,
        AuditReason::Cancelled,
        AuditReason::Dead,
        AuditReason::Missing,
        AuditReason::BadToken,
    ];

    /// The name the audit trail and metrics use.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            AuditReason::Stale => "stale",
            AuditReason::Expired => "expired",
            AuditReason::NotOwner => "not_owner",
            AuditReason::Done => "done",
            AuditReason::Cancelled => "cancelled",
            AuditReason::Dead => "dead",
            AuditReason::Missing => "missing",
            AuditReason::BadToken => "bad_token",
        }
    }

    /// Reads [`AuditReason::as_str`].
    #[must_use]
    pub fn parse(text: &str) -> Option<AuditReason> {
        AuditReason::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

/// One refused write by a holder.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The operation.
    pub operation: HolderWrite,
    /// The writer.
    pub owner: Owner,
    /// The fence it presented.
    pub presented: Fence,
    /// The job's fence when it was refused (`None`: no such job).
    pub current: Option<Fence>,
    /// Why.
    pub reason: AuditReason,
    /// For an expired lease, the writer's `now` minus the lease's `until`, in seconds.
    pub late_by: Option<f64>,
}

/// The refusal a holder's write (every [`HolderWrite`]) amounts to, given the stored job it
/// was decided against; `None` for an accepted write or another kind of command.
#[must_use]
pub fn refusal(
    command: &Command,
    current: Option<&Job>,
    refused: &WriteRefused,
) -> Option<Refusal> {
    let operation = command.holder_write()?;
    let presented = command.holder_fence()?;
    let owner = match command {
        // Through the service: the lease's owner once the credential passed (a lease that
        // expired), else the writer as it named itself, or its principal.
        Command::AsHolder(credential, _) => {
            crate::access::judge_credential(current, presented, credential)
                .unwrap_or_else(|_| credential.writer())
        }
        direct => direct.holder_owner()?.clone(),
    };
    holder_refusal(operation, &owner, presented, current, refused)
}

/// The refusal of a holder's `operation` by `owner` presenting `presented`, against the stored
/// job; `None` for a refusal that is not a holder's (`retry` of an active job).
#[must_use]
pub fn holder_refusal(
    operation: HolderWrite,
    owner: &Owner,
    presented: Fence,
    current: Option<&Job>,
    refused: &WriteRefused,
) -> Option<Refusal> {
    let reason = match refused {
        WriteRefused::Missing => AuditReason::Missing,
        WriteRefused::Done { .. } => AuditReason::Done,
        WriteRefused::Cancelled => AuditReason::Cancelled,
        WriteRefused::Dead => AuditReason::Dead,
        WriteRefused::NotOwner { .. } => AuditReason::NotOwner,
        WriteRefused::Stale { .. } => AuditReason::Stale,
        WriteRefused::Expired { .. } => AuditReason::Expired,
        WriteRefused::BadToken => AuditReason::BadToken,
        // A request without a token is the client's mistake, not a holder's stale write.
        // A hold of a job without a group is the caller's mistake too.
        WriteRefused::Active { .. } | WriteRefused::TokenMissing | WriteRefused::NoGroup => {
            return None;
        }
    };
    let late_by = match refused {
        WriteRefused::Expired { until, now } => Some(now.get() - until.get()),
        _ => None,
    };
    Some(Refusal {
        operation,
        owner: owner.clone(),
        presented,
        current: current.map(|j| j.fence),
        reason,
        late_by,
    })
}

/// How long a job's lease had been expired when `command` claimed it again (`None` when it is
/// not a claim, or the job had no expired lease).
#[must_use]
pub fn reclaim_delay(command: &Command, current: Option<&Job>) -> Option<f64> {
    let (Command::Claim(_, term), Some(job)) = (command, current) else {
        return None;
    };
    reclaim_delay_at(job, term.now())
}

/// How long `job`'s lease had been expired at `now`, if it had a holder whose lease ran out.
#[must_use]
pub fn reclaim_delay_at(job: &Job, now: crate::values::Timestamp) -> Option<f64> {
    (job.owner.is_some() && job.until <= now).then(|| now.get() - job.until.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::{JobResult, LeaseTerm, Timestamp};

    #[test]
    fn an_expired_completion_is_audited_with_how_late_it_came() {
        let job = Job {
            owner: Some(Owner::new("a").unwrap()),
            until: Timestamp::new(10.0).unwrap(),
            fence: Fence::new(1).unwrap(),
            ..Job::new()
        };
        let command = Command::Complete(
            Owner::new("a").unwrap(),
            Fence::new(1).unwrap(),
            Timestamp::new(12.5).unwrap(),
            JobResult::new("r").unwrap(),
        );
        let refused = WriteRefused::Expired {
            until: job.until,
            now: Timestamp::new(12.5).unwrap(),
        };
        let entry = refusal(&command, Some(&job), &refused).unwrap();
        assert_eq!(
            (entry.operation, entry.reason, entry.late_by, entry.current),
            (
                HolderWrite::Complete,
                AuditReason::Expired,
                Some(2.5),
                Some(Fence::new(1).unwrap())
            )
        );
        assert_eq!(AuditReason::parse("not_owner"), Some(AuditReason::NotOwner));
        let claim = Command::Claim(Owner::new("b").unwrap(), LeaseTerm::new(14.0, 5.0).unwrap());
        assert_eq!(reclaim_delay(&claim, Some(&job)), Some(4.0));
        assert_eq!(refusal(&claim, Some(&job), &refused), None);
    }
}
