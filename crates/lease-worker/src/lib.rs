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

// Library and binary code may not unwrap, expect or panic on what it meets, nor export what is
// unreachable (each exception allowed in place with its reason); tests may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        unreachable_pub
    )
)]

mod ahead;
mod clock;
mod config;
mod context;
mod outcome;
mod report;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lease_domain::{LeaseTerm, Timestamp};
use lease_ports::{Lease, LeaseStore, StoreError};
use tokio::task::JoinSet;
pub use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::ahead::{Held, Shared};
use crate::context::Sealing;
use crate::outcome::Observer;
use crate::report::{Finished, Reported, committed, finish, is_transient, report_failure};

pub use clock::{Clock, ManualClock, SystemClock, unix_seconds};
pub use config::{
    DEFAULT_AHEAD_MOST, DEFAULT_AHEAD_WINDOW, DEFAULT_PREFETCH_WHILE_UNDER, MAX_RENEW_INTERVAL,
    MIN_RENEW_INTERVAL, WorkerConfig, renew_interval, stop_margin,
};
pub use context::{Handler, HandlerResult, TIMED_OUT};
pub use context::{JobContext, Progress};
pub use lease_ports::observe::{Join, JoinFn, TraceJoin};
pub use outcome::{JobOutcome, JobReport, Summary};

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
