//! A worker runtime over any [`LeaseStore`]: it claims due jobs of a queue in batches up to its
//! free slots, runs a handler for each, keeps every lease alive with a heartbeat, and stops a
//! job the moment its lease is lost (a renewal refused, or the store unreachable until the lease
//! would run out): the job's [`CancellationToken`] is cancelled at once and nothing is ever
//! reported for it. The handler's `Ok(result)` completes the job, `Err(error)` fails it (retried
//! with backoff, then dead-lettered, by the store's rules), and a panic fails it too.
//!
//! The runtime owns tasks and timers, never a rule: every decision is the store's, made by
//! `lease_domain`.
//!
//! A job whose lease carries a timeout (its own, else its queue's) is stopped once its handler
//! has run that long, by the worker's clock, and failed with the error "timed out" (retried or
//! dead by the store's rules), whatever its lease and renewals. A handler reports its progress
//! through [`JobContext::progress`]: a fenced write that also renews the lease.
//!
//! Shutdown has three steps: stop claiming, let running jobs finish until the drain deadline,
//! then cancel what is left and release its leases.

mod clock;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use lease_domain::{
    ErrorText, Failed, Fence, InputError, JobId, JobResult, LeaseTerm, Owner, ProgressText,
    QueueName, Retry, Timestamp, Ttl,
};
use lease_ports::{Lease, LeaseStore, StoreError, WriteOutcome};
use tokio::task::JoinSet;
pub use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

pub use clock::{Clock, ManualClock, SystemClock, unix_seconds};

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
    store: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    job: JobId,
    owner: Owner,
    fence: Fence,
    ttl: Ttl,
    sealing: Sealing,
}

/// How a worker seals what it writes of a job (its result, and the attempt's progress and
/// checkpoints) and reads its checkpoints back, with its keys (docs/ENCRYPTION.md).
#[derive(Clone, Default)]
struct Sealing {
    keys: Option<Arc<lease_seal::Keyring>>,
    seal: bool,
    require: bool,
}

impl Sealing {
    fn of(config: &WorkerConfig) -> Self {
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
    fn sealer(&self, what: &str, job: &JobId) -> Result<Option<&lease_seal::Keyring>, String> {
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

fn sealing(e: impl std::fmt::Display) -> StoreError {
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

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The queue it takes jobs from.
    pub queue: QueueName,
    /// Its name as a lease holder.
    pub owner: Owner,
    /// How many jobs run at once.
    pub concurrency: usize,
    /// The lease duration of each claim and renewal.
    pub ttl: Ttl,
    /// Renew every `ttl * renew_fraction` (default one third), bounded to
    /// [`MIN_RENEW_INTERVAL`]..=[`MAX_RENEW_INTERVAL`] seconds.
    pub renew_fraction: f64,
    /// How long to wait before looking again when no job is due.
    pub idle_poll: Duration,
    /// What a failure does while attempts remain.
    pub retry: Retry,
    /// Stop after starting this many jobs (and finishing them).
    pub max_jobs: Option<usize>,
    /// Stop when no job is due and none is running.
    pub exit_when_empty: bool,
    /// At shutdown, how long running jobs may go on before they are cancelled and released.
    pub drain: Duration,
    /// After a job's token is cancelled, how long its handler may run before it is dropped.
    pub cancel_grace: Duration,
    /// How many leases the worker holds beyond its busy slots, ready to run, while its jobs
    /// are short ([`Self::prefetch_while_under`]); `Some(0)` none. `None` (the default) holds
    /// as many as the slots run in [`DEFAULT_AHEAD_WINDOW`] at the recent jobs' average run
    /// time, at least one per slot (as many as [`Self::concurrency`]) and at most
    /// [`DEFAULT_AHEAD_MOST`] beyond that, so no lease waits ahead much longer than that
    /// window while the jobs keep their pace.
    /// A prefetched lease is a real lease: it counts against the queue's limits, is renewed
    /// while it waits, and is given back unstarted at shutdown. With any, a slot whose job
    /// finished starts the next prefetched one while the finished job's completion commits
    /// (as many completions of a slot committing at once as leases are held ahead), so
    /// completions share commits even at one slot; each is reported once it has committed,
    /// in the order its slot ran them.
    pub prefetch: Option<usize>,
    /// Leases are held ahead only while the worker's recent jobs ran shorter than this on
    /// average (the handler's run time, averaged with more weight on the last ones; default
    /// [`DEFAULT_PREFETCH_WHILE_UNDER`]), and not before a job has finished. A lease held
    /// ahead of long jobs would only keep it from other workers; of short ones it saves the
    /// wait for a commit between jobs. When jobs grow long, the leases already held ahead run
    /// as slots free and no more are taken. [`Duration::MAX`] holds them ahead whatever the
    /// jobs take, from the first claim on.
    pub prefetch_while_under: Duration,
    /// The keys that open sealed payloads (docs/ENCRYPTION.md; default none). A handler is
    /// given a sealed payload opened; a payload that does not open (no keys, a key not among
    /// them, a key that does not open it) fails the job with that error, and its handler does
    /// not run. A plain payload is given as it is.
    pub keys: Option<Arc<lease_seal::Keyring>>,
    /// Seal each handler's result under `keys` before it is stored (docs/ENCRYPTION.md;
    /// default false). Without keys, a result to be sealed fails its job instead of being
    /// stored in the clear.
    pub seal_results: bool,
    /// Refuse a plain payload (default false): a job whose payload is not sealed fails naming
    /// it, and its handler does not run, so a plaintext payload swapped into a sealed queue by
    /// whoever can enqueue or write the store is never run. A worker that requires sealed
    /// values also seals its results ([`Self::seal_results`] is implied).
    pub require_sealed: bool,
    /// Joins each attempt's span to the trace its job was enqueued in (default none). Given,
    /// the worker reads the job's trace context ([`LeaseStore::trace`]) as it starts an
    /// attempt, and calls this with the attempt's span, the context and the attempt; without
    /// it the worker reads nothing, so tracing off costs nothing.
    pub trace: Option<TraceJoin>,
}

/// How a worker joins an attempt's span (`lease.attempt`) to the trace its job was enqueued
/// in (defined in `lease-ports`, where the server's request spans use it too).
pub use lease_ports::observe::{Join, JoinFn, TraceJoin};

impl WorkerConfig {
    /// One job at a time, renewing every third of `ttl`, the store's default backoff.
    #[must_use]
    pub fn new(queue: QueueName, owner: Owner, ttl: Ttl) -> Self {
        Self {
            queue,
            owner,
            concurrency: 1,
            ttl,
            renew_fraction: 1.0 / 3.0,
            idle_poll: Duration::from_millis(500),
            retry: Retry::default(),
            max_jobs: None,
            exit_when_empty: false,
            drain: Duration::from_secs(30),
            cancel_grace: Duration::from_secs(5),
            prefetch: None,
            prefetch_while_under: DEFAULT_PREFETCH_WHILE_UNDER,
            keys: None,
            seal_results: false,
            require_sealed: false,
            trace: None,
        }
    }
}

/// The average run time under which a worker holds leases ahead by default
/// ([`WorkerConfig::prefetch_while_under`]).
pub const DEFAULT_PREFETCH_WHILE_UNDER: Duration = Duration::from_millis(50);

/// How much of its slots' work a worker holds ahead by default ([`WorkerConfig::prefetch`]):
/// the leases its slots would run in this time at the recent jobs' average run time.
pub const DEFAULT_AHEAD_WINDOW: Duration = Duration::from_millis(20);

/// The most leases a worker holds ahead by default beyond one per slot, however short its jobs
/// ([`WorkerConfig::prefetch`]).
pub const DEFAULT_AHEAD_MOST: usize = 128;

/// How many leases to hold ahead by default, for `slots` slots whose recent jobs ran `recent`
/// seconds on average: as many as they run in [`DEFAULT_AHEAD_WINDOW`], at least one per slot
/// and at most [`DEFAULT_AHEAD_MOST`] (or one per slot, when there are more slots).
fn default_ahead(slots: usize, recent: f64) -> usize {
    // Jobs of no measurable time count as a microsecond each (the cap decides then); a time
    // too long to be a `Duration` as one window.
    let each = Duration::try_from_secs_f64(recent)
        .unwrap_or(DEFAULT_AHEAD_WINDOW)
        .as_nanos()
        .max(1_000);
    let per_slot = DEFAULT_AHEAD_WINDOW.as_nanos().div_ceil(each);
    let per_slot = usize::try_from(per_slot).unwrap_or(DEFAULT_AHEAD_MOST);
    per_slot
        .saturating_mul(slots)
        .min(DEFAULT_AHEAD_MOST)
        .max(slots)
}

/// The weight of the last job in the average of run times that decides prefetching.
const RECENT_WEIGHT: f64 = 0.25;

/// The shortest time between two renewals of one lease, whatever the ttl: a tiny ttl does not
/// turn the heartbeat into a busy loop of commits.
pub const MIN_RENEW_INTERVAL: f64 = 0.05;

/// The longest time between two renewals of one lease, whatever the ttl (a huge ttl is renewed
/// hourly, not never).
pub const MAX_RENEW_INTERVAL: f64 = 3600.0;

/// How often a lease of `ttl` seconds is renewed.
#[must_use]
pub fn renew_interval(ttl: Ttl, renew_fraction: f64) -> f64 {
    let interval = ttl.get() * renew_fraction;
    if interval.is_nan() {
        return (ttl.get() / 3.0).clamp(MIN_RENEW_INTERVAL, MAX_RENEW_INTERVAL);
    }
    interval.clamp(MIN_RENEW_INTERVAL, MAX_RENEW_INTERVAL)
}

/// How long before its lease ends, by the worker's own clock, a job is stopped when the lease
/// could not be renewed (whatever the store is doing): a tenth of the ttl, at most 2 s.
#[must_use]
pub fn stop_margin(ttl: Ttl) -> f64 {
    (ttl.get() / 10.0).min(2.0)
}

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
    fn count(&mut self, outcome: &JobOutcome) {
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

type Observer = Arc<dyn Fn(&JobReport) + Send + Sync>;

/// A worker: a store, a handler, a clock and a configuration.
pub struct Worker {
    store: Arc<dyn LeaseStore>,
    handler: Arc<dyn Handler>,
    clock: Arc<dyn Clock>,
    config: WorkerConfig,
    observer: Option<Observer>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What every job task of one worker shares.
struct Shared {
    store: Arc<dyn LeaseStore>,
    handler: Arc<dyn Handler>,
    clock: Arc<dyn Clock>,
    config: WorkerConfig,
    /// Jobs that may still be started (`max_jobs`, or unbounded).
    budget: AtomicUsize,
    /// Cancelled when the worker stops claiming.
    stopping: CancellationToken,
    /// Where slots send the report of every job they ran.
    reports: tokio::sync::mpsc::UnboundedSender<JobReport>,
    /// Leases claimed ahead of a free slot ([`WorkerConfig::prefetch`]), oldest first.
    waiting: std::sync::Mutex<std::collections::VecDeque<Held>>,
    /// The recent jobs' average run time in seconds, none before a job has finished
    /// ([`WorkerConfig::prefetch_while_under`]).
    recent: std::sync::Mutex<Option<f64>>,
    /// Completions under way that claim a lease to hold ahead.
    refilling: AtomicUsize,
}

/// A completion that claims a lease to hold ahead, counted while it is under way.
struct Refill(Arc<Shared>);

impl Refill {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.refilling.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(shared))
    }
}

impl Drop for Refill {
    fn drop(&mut self) {
        self.0.refilling.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A lease this worker holds, with when it ends by the worker's clock (the store's `until`
/// measured from when the worker got it, so in store-clock mode too).
struct Held {
    lease: Lease,
    until: f64,
    /// Not renewed before this time, by the worker's clock: after a renewal the store could
    /// not answer, the next try waits a little instead of asking again at once.
    retry_after: f64,
}

impl Held {
    /// A lease just granted.
    fn granted(lease: Lease, now: f64) -> Self {
        let until = now + (lease.until.get() - lease.now.get());
        Self {
            lease,
            until,
            retry_after: now,
        }
    }

    /// When this lease is due a renewal while it waits (an interval after its grant or last
    /// renewal, and not before a retry may be made).
    fn renewal_due(&self, ttl: Ttl, interval: f64) -> f64 {
        (self.until - (ttl.get() - interval)).max(self.retry_after)
    }
}

impl Shared {
    /// Takes up to `wanted` starts from the budget; returns how many were taken.
    fn take(&self, wanted: usize) -> usize {
        let mut taken = 0;
        let _ = self
            .budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                taken = left.min(wanted);
                Some(left - taken)
            });
        taken
    }

    /// Returns starts that were taken but not used.
    fn give_back(&self, unused: usize) {
        self.budget.fetch_add(unused, Ordering::SeqCst);
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Held>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a job that ran `seconds` in the recent jobs' average.
    fn ran(&self, seconds: f64) {
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seconds = seconds.max(0.0);
        *recent = Some(match *recent {
            Some(avg) => avg + RECENT_WEIGHT * (seconds - avg),
            None => seconds,
        });
    }

    /// How many leases to hold ahead now: the configured number while the recent jobs are
    /// short, else none.
    fn ahead_wanted(&self) -> usize {
        let config = &self.config;
        if config.prefetch == Some(0) {
            return 0;
        }
        let recent = *self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let short = config.prefetch_while_under == Duration::MAX
            || recent.is_some_and(|avg| avg < config.prefetch_while_under.as_secs_f64());
        if !short {
            return 0;
        }
        let slots = config.concurrency.max(1);
        config
            .prefetch
            .unwrap_or_else(|| recent.map_or(slots, |avg| default_ahead(slots, avg)))
    }

    /// The oldest prefetched lease, unless the worker is stopping.
    fn next_waiting(&self) -> Option<Held> {
        if self.stopping.is_cancelled() {
            return None;
        }
        self.waiting().pop_front()
    }

    /// Keeps a lease claimed ahead (or, once the worker stops, gives it back).
    async fn keep_waiting(&self, held: Held) {
        if self.stopping.is_cancelled() {
            self.give_back_lease(&held.lease).await;
        } else {
            self.waiting().push_back(held);
        }
    }

    /// Gives back a lease that was never run (its attempt too), and returns its start to the
    /// budget.
    async fn give_back_lease(&self, lease: &Lease) {
        let _ = self
            .store
            .give_back(&lease.job, &self.config.owner, lease.fence)
            .await;
        self.give_back(1);
    }

    /// Renews every prefetched lease that has waited an interval since it was granted or last
    /// renewed, all at once; a lease refused, or about to end unrenewed, is dropped and reported
    /// lost (it never ran).
    async fn renew_waiting(&self) {
        let config = &self.config;
        let interval = renew_interval(config.ttl, config.renew_fraction);
        let now = self.clock.now();
        let due: Vec<Lease> = self
            .waiting()
            .iter()
            .filter(|h| h.renewal_due(config.ttl, interval) <= now)
            .map(|h| h.lease.clone())
            .collect();
        let Ok(term) = Timestamp::new(now).and_then(|t| LeaseTerm::from_parts(t, config.ttl))
        else {
            return;
        };
        let answers = futures::future::join_all(due.iter().map(|lease| {
            self.store
                .renew(&lease.job, &config.owner, lease.fence, term)
        }))
        .await;
        let margin = stop_margin(config.ttl);
        let mut lost = Vec::new();
        {
            let mut waiting = self.waiting();
            for (lease, answer) in due.iter().zip(answers) {
                let Some(at) = waiting
                    .iter()
                    .position(|h| h.lease.job == lease.job && h.lease.fence == lease.fence)
                else {
                    continue;
                };
                let why = match answer {
                    Ok(Ok(())) => {
                        waiting[at].until = now + config.ttl.get();
                        continue;
                    }
                    Ok(Err(refused)) => {
                        format!("renewal refused while it waited to run: {refused}")
                    }
                    Err(_) if waiting[at].until - margin > self.clock.now() => {
                        waiting[at].retry_after = now + (interval / 4.0).min(1.0);
                        continue;
                    }
                    Err(e) => format!("the lease could not be renewed while it waited to run: {e}"),
                };
                if let Some(held) = waiting.remove(at) {
                    lost.push((held.lease, why));
                }
            }
        }
        for (lease, why) in lost {
            self.give_back(1);
            let _ = self.reports.send(JobReport {
                job: lease.job,
                fence: lease.fence,
                attempt: lease.attempt,
                outcome: JobOutcome::Lost(why),
                seconds: 0.0,
            });
        }
    }

    /// When the next prefetched lease is due a renewal, by the worker's clock.
    fn next_renewal(&self) -> Option<f64> {
        let config = &self.config;
        let interval = renew_interval(config.ttl, config.renew_fraction);
        self.waiting()
            .iter()
            .map(|h| h.renewal_due(config.ttl, interval))
            .reduce(f64::min)
    }
}

impl Worker {
    /// A worker on the system clock.
    pub fn new(store: Arc<dyn LeaseStore>, handler: impl Handler, config: WorkerConfig) -> Self {
        Self {
            store,
            handler: Arc::new(handler),
            clock: Arc::new(SystemClock),
            config,
            observer: None,
        }
    }

    /// Uses `clock` instead of the system clock.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Calls `observe` with every job's report as it finishes (for progress output or metrics).
    #[must_use]
    pub fn on_report(mut self, observe: impl Fn(&JobReport) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observe));
        self
    }

    /// Runs until `shutdown` is cancelled (or `max_jobs` are done, or the queue is empty with
    /// `exit_when_empty`), then drains and releases as described in the crate docs.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] when `now + ttl` is not a valid lease term. A store that
    /// cannot be reached is waited out, not an error.
    pub async fn run(self, shutdown: CancellationToken) -> Result<Summary, StoreError> {
        self.run_with_abort(shutdown, CancellationToken::new())
            .await
    }

    /// [`Worker::run`], and cancelling `abort` during the drain ends it at once: running jobs
    /// are cancelled and released without waiting for the drain deadline (a second Ctrl-C).
    ///
    /// # Errors
    /// As [`Worker::run`]; and the store's error when claiming failed for any reason but an
    /// unreachable store (or for any reason with `exit_when_empty`), after the running jobs
    /// were drained.
    pub async fn run_with_abort(
        self,
        shutdown: CancellationToken,
        hurry: CancellationToken,
    ) -> Result<Summary, StoreError> {
        let (reports, mut reported) = tokio::sync::mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            store: self.store,
            handler: self.handler,
            clock: self.clock,
            budget: AtomicUsize::new(self.config.max_jobs.unwrap_or(usize::MAX)),
            config: self.config,
            stopping: CancellationToken::new(),
            reports,
            waiting: std::sync::Mutex::default(),
            recent: std::sync::Mutex::default(),
            refilling: AtomicUsize::new(0),
        });
        let config = &shared.config;
        let abort = CancellationToken::new();
        // One task per busy slot: it runs its lease, and the next one its completion claimed.
        let mut slots: JoinSet<()> = JoinSet::new();
        let mut summary = Summary::default();
        let mut failure = None;
        let record = |report: JobReport, summary: &mut Summary| {
            summary.count(&report.outcome);
            if let Some(observe) = &self.observer {
                observe(&report);
            }
        };
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            let mut free = config.concurrency.max(1).saturating_sub(slots.len());
            while free > 0 {
                let Some(held) = shared.next_waiting() else {
                    break;
                };
                slots.spawn(run_slot(Arc::clone(&shared), held, abort.clone()));
                free -= 1;
            }
            if shared.budget.load(Ordering::SeqCst) == 0 && slots.is_empty() {
                break;
            }
            let held_ahead = shared.waiting().len() + shared.refilling.load(Ordering::SeqCst);
            let ahead = shared.ahead_wanted().saturating_sub(held_ahead);
            let taken = shared.take(free + ahead);
            let mut idle = false;
            if taken > 0 {
                let term = LeaseTerm::from_parts(Timestamp::new(shared.clock.now())?, config.ttl)?;
                let Some(claimed) = claim_unless_stopped(&shared, term, taken, &shutdown).await
                else {
                    break;
                };
                match claimed {
                    Ok(leases) => {
                        idle = leases.len() < taken;
                        shared.give_back(taken - leases.len());
                        let now = shared.clock.now();
                        let mut leases = leases.into_iter().map(|l| Held::granted(l, now));
                        let run: Vec<Held> = leases.by_ref().take(free).collect();
                        // Those held ahead first, so the slots started next can find them.
                        for held in leases {
                            shared.keep_waiting(held).await;
                        }
                        for held in run {
                            slots.spawn(run_slot(Arc::clone(&shared), held, abort.clone()));
                        }
                    }
                    // An unreachable store is waited out like an empty queue, unless the worker
                    // is to stop once nothing is due: then it cannot know, and says so. Any
                    // other error (bad input, a skewed clock, corrupt data) ends the run.
                    Err(e) => {
                        shared.give_back(taken);
                        if config.exit_when_empty || !is_transient(&e) {
                            failure = Some(e);
                            break;
                        }
                        idle = true;
                    }
                }
                if idle && slots.is_empty() && config.exit_when_empty && shared.waiting().is_empty()
                {
                    break;
                }
            }
            let renewal = shared.next_renewal();
            tokio::select! {
                Some(_) = slots.join_next(), if !slots.is_empty() => {}
                Some(report) = reported.recv() => record(report, &mut summary),
                () = shared.clock.sleep(config.idle_poll.as_secs_f64()), if idle => {}
                () = shared.clock.sleep(renewal.unwrap_or(0.0) - shared.clock.now()), if renewal.is_some() => {
                    // A store that does not answer holds up neither the run nor its shutdown:
                    // the held leases are asked again next round, and one that runs out before
                    // an answer is stopped as it starts, writing nothing.
                    let interval = renew_interval(config.ttl, config.renew_fraction);
                    tokio::select! {
                        () = shared.renew_waiting() => {}
                        () = shared.clock.sleep(interval) => {}
                        () = shutdown.cancelled() => {}
                    }
                }
                () = shutdown.cancelled() => {}
            }
        }
        // Stop claiming (finishing jobs no longer take a next one); drain until the deadline;
        // then cancel and release the rest.
        shared.stopping.cancel();
        // The leases held ahead are given back together, for no longer than the drain (a
        // store that does not answer cannot hold up the shutdown; those leases then expire).
        let unrun: Vec<Held> = shared.waiting().drain(..).collect();
        let giving =
            futures::future::join_all(unrun.iter().map(|held| shared.give_back_lease(&held.lease)));
        let _ = tokio::time::timeout(config.drain, giving).await;
        let deadline = tokio::time::sleep(config.drain);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                done = slots.join_next() => if done.is_none() { break },
                Some(report) = reported.recv() => record(report, &mut summary),
                () = &mut deadline => {
                    abort.cancel();
                    break;
                }
                () = hurry.cancelled() => {
                    abort.cancel();
                    break;
                }
            }
        }
        while slots.join_next().await.is_some() {}
        while let Ok(report) = reported.try_recv() {
            record(report, &mut summary);
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }
}

/// Claims up to `limit` jobs, or `None` when `shutdown` comes first. The claim runs in a task of
/// its own, so a store that waits (on a lock another process holds) cannot hold up the
/// shutdown; a claim overtaken by it goes on in the background and releases whatever it
/// leased (if the process ends first, those leases simply expire).
async fn claim_unless_stopped(
    shared: &Arc<Shared>,
    term: LeaseTerm,
    limit: usize,
    shutdown: &CancellationToken,
) -> Option<Result<Vec<Lease>, StoreError>> {
    let store = Arc::clone(&shared.store);
    let (queue, owner) = (shared.config.queue.clone(), shared.config.owner.clone());
    let mut claim =
        tokio::spawn(async move { store.claim_next(&queue, &owner, term, limit).await });
    tokio::select! {
        joined = &mut claim => Some(joined.unwrap_or_else(|e| {
            Err(StoreError::Indeterminate(lease_ports::Detail::caused_by(
                "the claim's task ended without an answer".to_owned(),
                e,
            )))
        })),
        () = shutdown.cancelled() => {
            let store = Arc::clone(&shared.store);
            let owner = shared.config.owner.clone();
            tokio::spawn(async move {
                if let Ok(Ok(leases)) = claim.await {
                    for lease in leases {
                        let _ = store.give_back(&lease.job, &owner, lease.fence).await;
                    }
                }
            });
            None
        }
    }
}

/// What became of a job, told now or once its completion has committed.
enum Reported {
    Now(JobReport),
    /// The report, whose outcome the completion still committing answers (with prefetch, the
    /// slot runs its next job meanwhile).
    Later(JobReport, tokio::task::JoinHandle<JobOutcome>),
}

/// The outcome of a job's result, known now or once its completion has committed.
enum Finished {
    Now(JobOutcome),
    Later(tokio::task::JoinHandle<JobOutcome>),
}

/// The report of a completion that was committing, once it has.
async fn committed(
    mut report: JobReport,
    completion: tokio::task::JoinHandle<JobOutcome>,
) -> JobReport {
    report.outcome = completion.await.unwrap_or_else(|e| {
        JobOutcome::Unreported(format!(
            "the completion's task ended without an answer: {e}"
        ))
    });
    report
}

/// One busy slot: runs its lease, then each lease the completion claimed for the slot (or, with
/// prefetch, the oldest lease claimed ahead), until there is none (or the worker stops: a lease
/// claimed as it stopped is given back unrun). As many completions of the slot commit while
/// its next jobs run as leases are held ahead (at least one); each is reported once it has
/// committed, in the order the slot ran its jobs, and all before the slot ends.
async fn run_slot(shared: Arc<Shared>, first: Held, abort: CancellationToken) {
    let mut held = first;
    let mut committing = std::collections::VecDeque::new();
    loop {
        let (report, next) = run_job(&shared, held, &abort).await;
        match report {
            Reported::Now(report) => {
                // Reported after the completions the slot made before it.
                while let Some((report, completion)) = committing.pop_front() {
                    // The receiver lives as long as the worker's run.
                    let _ = shared.reports.send(committed(report, completion).await);
                }
                let _ = shared.reports.send(report);
            }
            Reported::Later(report, completion) => {
                committing.push_back((report, completion));
                let depth = shared.ahead_wanted().max(1);
                while committing.len() > depth {
                    if let Some((report, completion)) = committing.pop_front() {
                        let _ = shared.reports.send(committed(report, completion).await);
                    }
                }
            }
        }
        match next.or_else(|| shared.next_waiting()) {
            Some(next) if !shared.stopping.is_cancelled() => held = next,
            Some(next) => {
                shared.give_back_lease(&next.lease).await;
                break;
            }
            None => break,
        }
    }
    while let Some((report, completion)) = committing.pop_front() {
        let _ = shared.reports.send(committed(report, completion).await);
    }
}

/// Runs one job: the handler in its own task, and the heartbeat here.
async fn run_job(
    shared: &Arc<Shared>,
    held: Held,
    abort: &CancellationToken,
) -> (Reported, Option<Held>) {
    let Held { lease, until, .. } = held;
    let config = &shared.config;
    let started = shared.clock.now();
    let report = |outcome| JobReport {
        job: lease.job.clone(),
        fence: lease.fence,
        attempt: lease.attempt,
        outcome,
        seconds: shared.clock.now() - started,
    };
    // A sealed payload is opened before the handler runs; one that does not open fails the
    // job with the reason, naming the job and the key, and the handler never sees it.
    let payload = match &lease.payload {
        Some(bytes) => {
            let keys = config.keys.as_deref();
            match lease_seal::open_payload(keys, config.require_sealed, lease.job.as_str(), bytes) {
                Ok(payload) => Some(payload),
                Err(e) => {
                    let outcome = report_failure(shared, &lease, e.to_string()).await;
                    return (Reported::Now(report(outcome)), None);
                }
            }
        }
        None => None,
    };
    let span = tracing::info_span!(
        "lease.attempt",
        job = %lease.job,
        queue = %config.queue,
        fence = lease.fence.get(),
        attempt = lease.attempt,
    );
    let mut enqueued = None;
    if let Some(join) = &config.trace {
        // Tracing never fails a job: a context that cannot be read leaves the span unjoined.
        match shared.store.trace(&lease.job).await {
            Ok(Some(trace)) => {
                (join.0)(&span, &trace, Join::attempt(lease.attempt));
                enqueued = Some(trace);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(job = %lease.job, error = %e, "the job's trace context was not read")
            }
        }
    }
    let token = CancellationToken::new();
    let mut handle = tokio::spawn(
        shared
            .handler
            .handle(JobContext {
                job: lease.job.clone(),
                fence: lease.fence,
                attempt: lease.attempt,
                payload,
                cancel: token.clone(),
                timeout: lease.timeout,
                group: lease.group.clone(),
                progress: Progress {
                    store: Arc::clone(&shared.store),
                    clock: Arc::clone(&shared.clock),
                    job: lease.job.clone(),
                    owner: config.owner.clone(),
                    fence: lease.fence,
                    ttl: config.ttl,
                    sealing: Sealing::of(config),
                },
                span: span.clone(),
                trace: enqueued,
            })
            .instrument(span.clone()),
    );
    // When the attempt runs out of time, by the worker's clock.
    let deadline = lease.timeout.map(|t| started + t.get());
    let interval = renew_interval(config.ttl, config.renew_fraction);
    let margin = stop_margin(config.ttl);
    // When the lease ends by the worker's clock (see `Held`).
    let mut until = until;
    let mut next = None;
    // The attempt's renewals, its report and its release are in its span too.
    let finished = async { loop {
        tokio::select! {
            joined = &mut handle => {
                shared.ran(shared.clock.now() - started);
                let (finished, following) = finish(shared, &lease, joined).await;
                next = following;
                break finished;
            }
            // Past its timeout: stop the handler, then fail the job while the lease is held.
            () = shared.clock.sleep(deadline.map_or(0.0, |d| d - shared.clock.now())), if deadline.is_some() => {
                let _ = stop(&token, handle, config.cancel_grace, String::new()).await;
                break Finished::Now(report_failure(shared, &lease, TIMED_OUT.to_owned()).await);
            }
            // The lease is about to end by the worker's clock and was not renewed: stop now.
            () = shared.clock.sleep(until - margin - shared.clock.now()) => {
                break Finished::Now(stop(&token, handle, config.cancel_grace, "the lease ran out before it could be renewed".to_owned()).await);
            }
            () = shared.clock.sleep(interval) => {
                let now = shared.clock.now();
                let renew = async {
                    match Timestamp::new(now).and_then(|t| LeaseTerm::from_parts(t, config.ttl)) {
                        Ok(term) => shared.store.renew(&lease.job, &config.owner, lease.fence, term).await,
                        Err(e) => Err(StoreError::InvalidInput(e)),
                    }
                };
                // A store that does not answer cannot keep the handler past the lease's end.
                let renewed = tokio::select! {
                    renewed = renew => Some(renewed),
                    () = shared.clock.sleep(until - margin - now) => None,
                };
                let Some(renewed) = renewed else {
                    break Finished::Now(stop(&token, handle, config.cancel_grace, "the store did not answer the renewal before the lease ran out".to_owned()).await);
                };
                match renewed {
                    Ok(Ok(())) => until = now + config.ttl.get(),
                    Ok(Err(refused)) => {
                        break Finished::Now(stop(&token, handle, config.cancel_grace, format!("renewal refused: {refused}")).await);
                    }
                    // The next try would come after the lease ran out: stop now, while it may
                    // still be live, rather than let the handler outlive it.
                    Err(e) if now + interval >= until => {
                        break Finished::Now(stop(&token, handle, config.cancel_grace, format!("the lease could not be renewed before it ran out: {e}")).await);
                    }
                    Err(_) => {}
                }
            }
            () = abort.cancelled() => {
                let _ = stop(&token, handle, config.cancel_grace, String::new()).await;
                break Finished::Now(match shared.store.release(&lease.job, &config.owner, lease.fence).await {
                    Ok(_) => JobOutcome::Released,
                    Err(e) => JobOutcome::Unreported(format!("could not release the lease: {e}")),
                });
            }
        }
    } }
    .instrument(span.clone())
    .await;
    let reported = match finished {
        Finished::Now(outcome) => Reported::Now(report(outcome)),
        Finished::Later(completion) => Reported::Later(report(JobOutcome::Completed), completion),
    };
    (reported, next)
}

/// Stores the handler's result. While the worker is still claiming, the completion and the
/// claim of this slot's next job share one transaction (one commit); the next lease, if any,
/// is returned for the slot to run. With a lease claimed ahead, that one is returned at once and
/// the completion commits while it runs; the lease the completion claims is kept ahead.
async fn report_result(
    shared: &Arc<Shared>,
    lease: &Lease,
    result: &JobResult,
) -> (Finished, Option<Held>) {
    let config = &shared.config;
    let Ok(now) = Timestamp::new(shared.clock.now()) else {
        return (
            Finished::Now(JobOutcome::Unreported(
                "the clock is not a finite time".to_owned(),
            )),
            None,
        );
    };
    let term = match LeaseTerm::from_parts(now, config.ttl) {
        Ok(term) if !shared.stopping.is_cancelled() && shared.take(1) == 1 => term,
        _ => {
            let outcome = match shared
                .store
                .complete(&lease.job, &config.owner, lease.fence, now, result)
                .await
            {
                Ok(Ok(())) => JobOutcome::Completed,
                Ok(Err(refused)) => JobOutcome::Lost(format!("completion refused: {refused}")),
                Err(e) => JobOutcome::Unreported(e.to_string()),
            };
            return (Finished::Now(outcome), None);
        }
    };
    let ahead = shared.next_waiting();
    // The completion claims the slot's next job, or, when a lease held ahead runs next, one to
    // hold ahead in its place: none while the jobs are not short, so those held drain.
    let limit = usize::from(ahead.is_none() || shared.ahead_wanted() > 0);
    let pipelined = ahead.is_some();
    // A lease this completion claims to hold ahead counts as held while it is claimed, so the
    // claims ahead never hold more than `prefetch`.
    let refill = (pipelined && limit == 1).then(|| Refill::new(shared));
    let completion = {
        let (shared, lease, result) = (Arc::clone(shared), lease.clone(), result.clone());
        async move {
            let refill = refill;
            let config = &shared.config;
            let answer = shared
                .store
                .complete_and_claim_next(
                    &lease.job,
                    &config.owner,
                    lease.fence,
                    &result,
                    &config.queue,
                    term,
                    limit,
                )
                .await;
            let (completed, next) = match answer {
                Ok(answer) => answer,
                Err(e) => {
                    shared.give_back(1);
                    return (JobOutcome::Unreported(e.to_string()), None);
                }
            };
            let mut next = next
                .unwrap_or_default()
                .pop()
                .map(|next| Held::granted(next, shared.clock.now()));
            if next.is_none() {
                shared.give_back(1);
            }
            if pipelined && let Some(held) = next.take() {
                shared.keep_waiting(held).await;
            }
            drop(refill);
            let outcome = match completed {
                Ok(()) => JobOutcome::Completed,
                Err(refused) => JobOutcome::Lost(format!("completion refused: {refused}")),
            };
            (outcome, next)
        }
    };
    match ahead {
        Some(ahead) => {
            let completion = tokio::spawn(async move { completion.await.0 });
            (Finished::Later(completion), Some(ahead))
        }
        None => {
            let (outcome, next) = completion.await;
            (Finished::Now(outcome), next)
        }
    }
}

/// Tells the handler to stop, gives it `grace` to do so, then drops it; nothing is reported.
async fn stop(
    token: &CancellationToken,
    mut handle: tokio::task::JoinHandle<HandlerResult>,
    grace: Duration,
    why: String,
) -> JobOutcome {
    token.cancel();
    if tokio::time::timeout(grace, &mut handle).await.is_err() {
        handle.abort();
    }
    JobOutcome::Lost(why)
}

/// Reports what the handler answered: complete, or fail (a panic is a failure too).
async fn finish(
    shared: &Arc<Shared>,
    lease: &Lease,
    joined: Result<HandlerResult, tokio::task::JoinError>,
) -> (Finished, Option<Held>) {
    let outcome = match joined {
        Ok(Ok(result)) => match stored_result(&shared.config, &lease.job, result) {
            Ok(result) => match JobResult::new(result) {
                Ok(result) => return report_result(shared, lease, &result).await,
                Err(e) => format!("the handler's result cannot be stored: {e}"),
            },
            Err(e) => e,
        },
        Ok(Err(error)) => error,
        Err(e) if e.is_panic() => format!("the handler panicked: {}", panic_text(e)),
        Err(e) => format!("the handler did not finish: {e}"),
    };
    (
        Finished::Now(report_failure(shared, lease, outcome).await),
        None,
    )
}

/// The handler's result as it is stored: sealed for its job when the worker seals results.
fn stored_result(config: &WorkerConfig, job: &JobId, result: String) -> Result<String, String> {
    match Sealing::of(config).sealer("result", job)? {
        Some(keys) => keys
            .seal_result(job.as_str(), &result)
            .map_err(|e| e.to_string()),
        None => Ok(result),
    }
}

/// Fails the job with the handler's error (retried or dead by the store's rules).
async fn report_failure(shared: &Shared, lease: &Lease, error: String) -> JobOutcome {
    let config = &shared.config;
    let error = ErrorText::lossy(error);
    let now = match Timestamp::new(shared.clock.now()) {
        Ok(now) => now,
        Err(e) => return JobOutcome::Unreported(e.to_string()),
    };
    match shared
        .store
        .fail(
            &lease.job,
            &config.owner,
            lease.fence,
            now,
            &error,
            config.retry,
        )
        .await
    {
        Ok(Ok(failed)) => JobOutcome::Failed(failed),
        Ok(Err(refused)) => JobOutcome::Lost(format!("failure refused: {refused}")),
        Err(e) => JobOutcome::Unreported(e.to_string()),
    }
}

/// Whether a store error is worth waiting out (the store is unreachable or busy), rather than
/// one that will not change by waiting.
fn is_transient(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Unavailable(_) | StoreError::Indeterminate(_)
    )
}

fn panic_text(error: tokio::task::JoinError) -> String {
    let payload = error.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".to_owned())
}

/// Serves this process's metrics (everything recorded through the `metrics` facade: store
/// operations, refusals, leases lost) in the Prometheus text format at `http://addr/metrics`,
/// by installing the Prometheus exporter as the process's recorder. Call it once, inside a
/// Tokio runtime, before the worker runs (feature `prometheus`).
///
/// # Errors
/// A message naming the address when it cannot listen there, or when a recorder is already
/// installed.
#[cfg(feature = "prometheus")]
pub fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| format!("cannot serve metrics at {addr}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_AHEAD_MOST, default_ahead};

    #[test]
    fn the_default_holds_ahead_what_the_slots_run_in_the_window_within_its_bounds() {
        // 20 ms of 1 ms jobs at one slot; of 10 ms jobs at four slots.
        assert_eq!(default_ahead(1, 0.001), 20);
        assert_eq!(default_ahead(4, 0.010), 8);
        // Jobs as long as the window or longer: one per slot.
        assert_eq!(default_ahead(4, 0.040), 4);
        // Jobs of no measurable time: the most, however few the slots.
        assert_eq!(default_ahead(1, 0.0), DEFAULT_AHEAD_MOST);
        assert_eq!(default_ahead(16, 1e-5), DEFAULT_AHEAD_MOST);
        // More slots than the most: one per slot still.
        assert_eq!(default_ahead(300, 1e-5), 300);
    }
}
