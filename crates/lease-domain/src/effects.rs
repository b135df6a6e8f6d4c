//! What a decided command changes, as a value. [`Command::decided`] gives the caller's outcome
//! and the [`Change`]s to write, in the one order every store writes them: memory, SQLite and
//! PostgreSQL each write a change with their own statements (one `match` each), so a new kind
//! of command adds a case here and an arm to each writer, never an `if` in three orders.
//!
//! The order is the order of [`Change::kind`]. A store that writes many decisions at once
//! (a batch of enqueues) may write every change of one kind before the next kind: each change
//! depends only on changes of earlier kinds (a job is judged against parents written before
//! it, the jobs waiting on a job settle after its row).

use crate::attempt::Attempt;
use crate::audit::{Refusal, refusal};
use crate::command::{Command, Outcome};
use crate::control::QueueChange;
use crate::queue::{QueueName, Status};
use crate::rules::{Job, WriteRefused};
use crate::trace::TraceContext;
use crate::values::{Fence, JobId, Timestamp};
use crate::workflow::{Checkpoint, finishes, judges_parents};

/// A command decided against the stored job: what it answers and what it changes.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// What the caller is answered.
    pub outcome: Outcome,
    /// What the store writes, in order (empty: nothing).
    pub changes: Vec<Change>,
}

impl Decided {
    /// The job's row to store, if the decision writes one.
    #[must_use]
    pub fn row(&self) -> Option<&Job> {
        self.changes.iter().find_map(|change| match change {
            Change::Row { job, .. } => Some(job),
            _ => None,
        })
    }

    /// The refusal of a holder's write the decision records in the audit trail.
    #[must_use]
    pub fn refused(&self) -> Option<&Refusal> {
        self.changes.iter().find_map(|change| match change {
            Change::Refused(entry) => Some(entry),
            _ => None,
        })
    }

    /// The attempt the decision ends, if it ends one.
    #[must_use]
    pub fn attempt(&self) -> Option<&Attempt> {
        self.changes.iter().find_map(|change| match change {
            Change::Attempt(attempt) => Some(attempt),
            _ => None,
        })
    }

    /// Whether the decision writes anything but the audit trail (a refusal alone leaves the
    /// store as it was).
    #[must_use]
    pub fn writes(&self) -> bool {
        self.changes
            .iter()
            .any(|change| !matches!(change, Change::Refused(_)))
    }
}

/// One change a decided command makes, beside or to its job.
// Almost every decision writes a row, taken apart at once by the store: boxing it would cost
// an allocation per write for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The job's queue's settings change (a holder holds its group); the job is not written.
    Queue(QueueName, QueueChange),
    /// A checkpoint is kept beside the job, written with `fence` at the time given, if it fits
    /// ([`crate::checkpoint_fits`], which the store checks against what the job keeps; a
    /// refusal rolls back). The job is not written.
    Checkpoint(Checkpoint, Fence, Timestamp),
    /// The job's checkpoints go: a finished job runs again without them.
    ClearCheckpoints,
    /// The job's row: inserted when `insert` (it was not stored), else replaced.
    Row {
        /// The job as decided.
        job: Job,
        /// Whether the job was not stored.
        insert: bool,
    },
    /// The id's purge mark goes: a purged id is enqueued again.
    ForgetPurged,
    /// The job's trace context is set (`None`: the job now has none).
    Trace(Option<TraceContext>),
    /// The job's parents are written: an enqueue made the job, or runs a finished one again,
    /// with the parents it names (a store that keeps them in the row has nothing to write).
    Parents,
    /// The job is judged against its parents ([`judges_parents`]); a batch judges after all
    /// its rows are written, since a parent may come later in it.
    Judge,
    /// The jobs waiting on the job settle: it has just ended as the status given, at the time
    /// given ([`finishes`]).
    Release(Status, Option<Timestamp>),
    /// A holder's write was refused: the audit trail records it, when the store keeps one.
    Refused(Refusal),
    /// The attempt the job's row held has ended: the store keeps it (and drops the oldest
    /// beyond [`crate::ATTEMPTS_KEPT`] when [`crate::trims_attempts`] says it may have to).
    Attempt(Attempt),
}

impl Change {
    /// The change's place in the order of writes.
    #[must_use]
    pub fn kind(&self) -> u8 {
        match self {
            Change::Queue(..) => 0,
            Change::Checkpoint(..) => 1,
            Change::ClearCheckpoints => 2,
            Change::Row { .. } => 3,
            Change::ForgetPurged => 4,
            Change::Trace(_) => 5,
            Change::Parents => 6,
            Change::Judge => 7,
            Change::Release(..) => 8,
            Change::Refused(_) => 9,
            Change::Attempt(_) => 10,
        }
    }
}

impl Change {
    /// The changes of storing `next` over `before` (`None`: not stored): the row, then the
    /// judgement against its parents and the settling of the jobs waiting on it, when they
    /// follow. A command's decision adds its own to these; the claim walk writes these alone.
    #[must_use]
    pub fn of_row(before: Option<&Job>, next: Job) -> Vec<Change> {
        let judge = judges_parents(before, &next).then_some(Change::Judge);
        let release = finishes(before, &next).map(|end| Change::Release(end, next.updated));
        let row = Change::Row {
            job: next,
            insert: before.is_none(),
        };
        std::iter::once(row).chain(judge).chain(release).collect()
    }
}

impl Change {
    /// The changes of a row the claim walk decided over a stored job that had not finished (a
    /// job leased, or buried out of attempts): its row, then the settling of the jobs waiting
    /// on it when it was buried, and the attempt its expired lease held (`ended`) when one
    /// ended with it.
    #[must_use]
    pub fn of_claim(next: Job, ended: Option<Attempt>) -> Vec<Change> {
        let release = next
            .finished()
            .map(|end| Change::Release(end, next.updated));
        let row = Change::Row {
            job: next,
            insert: false,
        };
        std::iter::once(row)
            .chain(release)
            .chain(ended.map(Change::Attempt))
            .collect()
    }
}

impl Command {
    /// Decides the command against the stored job `current` of job `id` ([`Command::decide`])
    /// and says what the decision changes, in the order a store writes it. `purged` is the
    /// fence the id had when it was last purged, if it was.
    #[must_use]
    pub fn decided(&self, id: &JobId, current: Option<&Job>, purged: Option<Fence>) -> Decided {
        let (next, outcome) = self.decide(id, current, purged);
        let changes = self.changes(current, purged, next, &outcome);
        Decided { outcome, changes }
    }

    fn changes(
        &self,
        current: Option<&Job>,
        purged: Option<Fence>,
        next: Option<Job>,
        outcome: &Outcome,
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        if let Some((queue, change)) = self.queue_change(current, outcome) {
            changes.push(Change::Queue(queue, change));
        }
        if let Some((checkpoint, fence, at)) = self.checkpoint(outcome) {
            changes.push(Change::Checkpoint(checkpoint.clone(), fence, at));
        }
        if self.clears_checkpoints(current, next.as_ref()) {
            changes.push(Change::ClearCheckpoints);
        }
        let trace = self
            .sets_trace(current, next.as_ref())
            .map(|trace| trace.cloned());
        if let Some(next) = next {
            // An enqueue that makes the job, or runs a finished one again, writes its parents
            // (a run again may name others, or none).
            let started = current.is_none_or(|job| job.finished().is_some());
            if self.is_enqueue() && started && (current.is_some() || !next.after.is_empty()) {
                changes.push(Change::Parents);
            }
            if current.is_none() && purged.is_some() && self.is_enqueue() {
                changes.push(Change::ForgetPurged);
            }
            changes.extend(trace.map(Change::Trace));
            let ended = current.and_then(|job| job.ended_attempt(Some(self), &next));
            changes.extend(Change::of_row(current, next));
            changes.extend(ended.map(Change::Attempt));
        }
        if let Some(entry) = refused(outcome).and_then(|why| refusal(self, current, why)) {
            changes.push(Change::Refused(entry));
        }
        // The one order of writes (a stable sort: nothing of one kind comes twice).
        changes.sort_by_key(Change::kind);
        changes
    }
}

/// The refusal in a holder's outcome.
fn refused(outcome: &Outcome) -> Option<&WriteRefused> {
    match outcome {
        Outcome::Wrote(Err(refused)) | Outcome::Failed(Err(refused)) => Some(refused),
        _ => None,
    }
}
