//! What a handler is given for one job: its [`JobContext`] (id, fence, attempt, payload, the
//! cancellation token, its timeout) and the fenced writes it may make while it runs (progress,
//! checkpoints, a hold of its group), each under the lease it holds; sealed when the worker
//! seals results.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use lease_domain::{Fence, InputError, JobId, LeaseTerm, Owner, ProgressText, Timestamp, Ttl};
use lease_ports::{LeaseStore, StoreError, WriteOutcome};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::WorkerConfig;

/// What a handler is given for one job.
#[derive(Debug, Clone)]
pub struct JobContext {
    /// The job.
    pub job: JobId,
    /// The fence of this lease: present it to every system the handler writes to.
    pub fence: Fence,
    /// Which attempt this is (1 for the first).
    pub attempt: u32,
    /// The job's payload.
    pub payload: Option<Vec<u8>>,
    /// Cancelled the moment the lease is lost or the job is cancelled, or the attempt runs
    /// past its timeout: stop then, because no result of this run will be reported.
    pub cancel: CancellationToken,
    /// How long this attempt may run (the job's timeout, else its queue's), if it is limited.
    pub timeout: Option<Ttl>,
    /// The job's group in its queue, if it has one.
    pub group: Option<lease_domain::GroupKey>,
    /// Reports this attempt's progress.
    pub progress: Progress,
    /// The attempt's span (`lease.attempt`: job, queue, fence, attempt), which the handler
    /// runs in; joined to the job's trace when the worker has a [`WorkerConfig::trace`].
    pub span: tracing::Span,
    /// The trace context the job was enqueued with (W3C), read when the worker joins traces
    /// ([`WorkerConfig::trace`]); `None` without it, or when the job has none. For a handler
    /// that makes its attempt's span in a tracer of its own (Python's `Worker(tracer=...)`).
    pub trace: Option<lease_domain::TraceContext>,
}

impl JobContext {
    /// Holds this job's group until `until` (Unix seconds), when its upstream answered 429
    /// with a Retry-After: the queue leases none of the group's jobs until then (or later, if
    /// it was already paused longer). A fenced write: refused, and nothing paused, once this
    /// lease is lost. The handler then usually fails its job with a retry after that time.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for a time that is not finite, or the store's error. A
    /// refusal (the lease was lost, or the job has no group) is the `Err` inside.
    pub async fn hold_group(&self, until: f64) -> Result<WriteOutcome, StoreError> {
        let p = &self.progress;
        let now = Timestamp::new(p.clock.now())?;
        p.store
            .hold_group(&self.job, &p.owner, self.fence, now, Timestamp::new(until)?)
            .await
    }

    /// This job's parents (the jobs it ran after), each with its status, result and the
    /// fence that wrote it, read from the store when asked (a handler that does not ask pays
    /// nothing); empty for a job without parents.
    ///
    /// # Errors
    /// The store's.
    pub async fn parents(&self) -> Result<Vec<lease_ports::ParentState>, StoreError> {
        let p = &self.progress;
        let now = Timestamp::new(p.clock.now())?;
        lease_ports::parents_of(p.store.as_ref(), &self.job, now).await
    }

    /// Keeps a checkpoint of this attempt: `value` under `name` (replacing what the name
    /// held), kept across failed attempts, lease expiry and retries, so that the next attempt
    /// can resume where this one stopped. A fenced write: refused, and nothing kept, once
    /// this lease is lost (a stalled attempt can never overwrite a newer attempt's step).
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for a name that is not 1 to 256 bytes without NUL, a
    /// value over the limit, or a new name when the job keeps 1,000 already (nothing is
    /// kept); or the store's error. A refusal (the lease was lost) is the `Err` inside.
    pub async fn checkpoint(&self, name: &str, value: &str) -> Result<WriteOutcome, StoreError> {
        let p = &self.progress;
        let name = lease_domain::CheckpointName::new(name).map_err(InputError::Workflow)?;
        let checked = lease_domain::CheckpointValue::new(value)?;
        // Sealed for this job and step when results are (docs/ENCRYPTION.md).
        let value = match p.sealing.sealer("checkpoint", &self.job).map_err(sealing)? {
            Some(keys) => lease_domain::CheckpointValue::new(
                keys.seal_checkpoint(self.job.as_str(), name.as_str(), value)
                    .map_err(sealing)?,
            )?,
            None => checked,
        };
        let checkpoint = lease_domain::Checkpoint { name, value };
        let now = Timestamp::new(p.clock.now())?;
        p.store
            .checkpoint(&self.job, &p.owner, self.fence, now, &checkpoint)
            .await
    }

    /// The checkpoints this job keeps, by name (read from the store when asked), a sealed
    /// value opened with the worker's keys.
    ///
    /// # Errors
    /// The store's; or a sealed value that does not open (no key, another key, changed or
    /// moved from another step), or a plain one where sealed values are required.
    pub async fn checkpoints(&self) -> Result<BTreeMap<String, String>, StoreError> {
        let opening = &self.progress.sealing;
        self.progress
            .store
            .checkpoints(&self.job)
            .await?
            .into_iter()
            .map(|c| {
                let name = c.name.as_str();
                let value = lease_seal::open_checkpoint(
                    opening.keys.as_deref(),
                    opening.require,
                    self.job.as_str(),
                    name,
                    c.value.as_str(),
                )
                .map_err(sealing)?;
                Ok((name.to_owned(), value))
            })
            .collect()
    }

    /// The W3C trace context the job was enqueued with, if it has one: [`Self::trace`] when
    /// the worker already read it to join the attempt's span, else read from the store when
    /// asked (a handler that does not ask pays nothing). Propagation does not depend on
    /// export: a handler, or a program it starts, continues the job's trace with it whether or
    /// not this worker exports spans.
    ///
    /// # Errors
    /// The store's.
    pub async fn enqueued_trace(&self) -> Result<Option<lease_domain::TraceContext>, StoreError> {
        match &self.trace {
            Some(trace) => Ok(Some(trace.clone())),
            None => self.progress.store.trace(&self.job).await,
        }
    }

    /// A durable step: the value kept under `name` if an attempt of this job kept one, else
    /// runs `step` and keeps what it returns before returning it. A step that fails keeps
    /// nothing (the next attempt runs it again).
    ///
    /// # Errors
    /// The step's error; or, when the value cannot be kept (the lease was lost, or the store
    /// failed), that reason: the handler should then stop, as no result of it will count.
    pub async fn step<F, Fut>(&self, name: &str, step: F) -> Result<String, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<String, String>>,
    {
        let kept = self
            .checkpoints()
            .await
            .map_err(|e| format!("checkpoint {name}: cannot read the checkpoints: {e}"))?;
        if let Some(value) = kept.get(name) {
            return Ok(value.clone());
        }
        let value = step().await?;
        match self.checkpoint(name, &value).await {
            Ok(Ok(())) => Ok(value),
            Ok(Err(why)) => Err(format!("checkpoint {name} not kept: {why}")),
            Err(e) => Err(format!("checkpoint {name} not kept: {e}")),
        }
    }

    /// [`JobContext::hold_group`] for `seconds` from now by the worker's clock (what an
    /// upstream's `Retry-After` says).
    ///
    /// # Errors
    /// As [`JobContext::hold_group`].
    pub async fn hold_group_for(&self, seconds: f64) -> Result<WriteOutcome, StoreError> {
        self.hold_group(self.progress.clock.now() + seconds).await
    }
}

/// Reports a running job's progress: a short text stored with the job (shown by `record`,
/// the API and the page) under the lease's fence, which also renews the lease. A stale holder's
/// report is refused like any of its writes.
#[derive(Clone)]
pub struct Progress {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) job: JobId,
    pub(crate) owner: Owner,
    pub(crate) fence: Fence,
    pub(crate) ttl: Ttl,
    pub(crate) sealing: Sealing,
}

/// How a worker seals what it writes of a job (its result, and the attempt's progress and
/// checkpoints) and reads its checkpoints back, with its keys (docs/ENCRYPTION.md).
#[derive(Clone, Default)]
pub(crate) struct Sealing {
    pub(crate) keys: Option<Arc<lease_seal::Keyring>>,
    pub(crate) seal: bool,
    pub(crate) require: bool,
}

impl Sealing {
    pub(crate) fn of(config: &WorkerConfig) -> Self {
        Self {
            keys: config.keys.clone(),
            seal: config.seal_results || config.require_sealed,
            require: config.require_sealed,
        }
    }

    /// The keyring that seals what this worker writes of job `job` (`what`: its result, a
    /// checkpoint, its progress), if it seals.
    ///
    /// # Errors
    /// Sealing asked for and no key given, said naming `what` and the job.
    pub(crate) fn sealer(
        &self,
        what: &str,
        job: &JobId,
    ) -> Result<Option<&lease_seal::Keyring>, String> {
        match (&self.keys, self.seal) {
            (_, false) => Ok(None),
            (Some(keys), true) => Ok(Some(keys)),
            (None, true) => Err(format!(
                "the {what} of job {job} is to be sealed, and no key is given (set {} or {})",
                lease_seal::KEY_VAR,
                lease_seal::KEY_FILE_VAR
            )),
        }
    }
}

pub(crate) fn sealing(e: impl std::fmt::Display) -> StoreError {
    StoreError::InvalidInput(InputError::Sealing(e.to_string()))
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("job", &self.job)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl Progress {
    /// Stores `text` as the job's progress and renews the lease for the worker's ttl.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for a text over [`ProgressText::MAX_BYTES`] bytes (nothing
    /// is stored), or the store's error. A refusal (the lease was lost) is the `Err` inside.
    pub async fn report(&self, text: &str) -> Result<WriteOutcome, StoreError> {
        // Checked as given, then sealed (cut to what fits once sealed) when results are.
        let checked = ProgressText::new(text)?;
        let text = match self
            .sealing
            .sealer("progress", &self.job)
            .map_err(sealing)?
        {
            Some(keys) => ProgressText::new(
                keys.seal_progress(self.job.as_str(), text)
                    .map_err(sealing)?,
            )?,
            None => checked,
        };
        let term = LeaseTerm::from_parts(Timestamp::new(self.clock.now())?, self.ttl)?;
        self.store
            .progress(&self.job, &self.owner, self.fence, term.into(), &text)
            .await
    }
}

/// The error a job that ran past its timeout is failed with.
pub const TIMED_OUT: &str = "timed out";

/// What a handler answers: the result to store, or the error to fail the job with.
pub type HandlerResult = Result<String, String>;

/// The work done for each job.
pub trait Handler: Send + Sync + 'static {
    /// Runs one job.
    fn handle(&self, job: JobContext) -> BoxFuture<'static, HandlerResult>;
}

impl<F, Fut> Handler for F
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn handle(&self, job: JobContext) -> BoxFuture<'static, HandlerResult> {
        Box::pin(self(job))
    }
}
