//! What a worker says about each run ([`JobOutcome`], [`JobReport`], handed to its observer) and
//! about the whole of its run ([`Summary`]).

use std::sync::Arc;

use lease_domain::{Failed, Fence, JobId};

/// What became of one job this worker ran.
#[derive(Debug, Clone, PartialEq)]
pub enum JobOutcome {
    /// The handler's result was stored.
    Completed,
    /// The handler's error was stored; the job was retried later or went dead.
    Failed(Failed),
    /// The lease was lost (or the job cancelled) before a result could be reported: the handler
    /// was told to stop, and nothing was written for this run.
    Lost(String),
    /// Shut down before the handler finished; the lease was given back.
    Released,
    /// The store could not be reached to report the result, or its answer was lost; the lease
    /// will expire and the job be retried if nothing was written.
    Unreported(String),
}

/// One job's report.
#[derive(Debug, Clone, PartialEq)]
pub struct JobReport {
    /// The job.
    pub job: JobId,
    /// The fence of the lease it ran under.
    pub fence: Fence,
    /// The attempt.
    pub attempt: u32,
    /// What became of it.
    pub outcome: JobOutcome,
    /// How long it ran, in seconds of the worker's clock.
    pub seconds: f64,
}

/// Counts of what a worker did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Jobs completed.
    pub completed: usize,
    /// Jobs failed (retried later or dead).
    pub failed: usize,
    /// Jobs whose lease was lost.
    pub lost: usize,
    /// Jobs released at shutdown.
    pub released: usize,
    /// Jobs whose result could not be reported.
    pub unreported: usize,
}

impl Summary {
    pub(crate) fn count(&mut self, outcome: &JobOutcome) {
        match outcome {
            JobOutcome::Completed => self.completed += 1,
            JobOutcome::Failed(_) => self.failed += 1,
            JobOutcome::Lost(why) => {
                metrics::counter!(lease_ports::observe::names::LEASES_LOST).increment(1);
                tracing::warn!(why = why.as_str(), "a worker lost its lease");
                self.lost += 1;
            }
            JobOutcome::Released => self.released += 1,
            JobOutcome::Unreported(_) => self.unreported += 1,
        }
    }
}

pub(crate) type Observer = Arc<dyn Fn(&JobReport) + Send + Sync>;
