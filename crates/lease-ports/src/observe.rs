//! Observability for every store, through facades the application wires up: `tracing` spans
//! (no output unless a subscriber is installed) and `metrics` (no cost beyond a check unless a
//! recorder is installed; the application picks the exporter).
//!
//! - [`decided`] is called by every adapter where a command is decided, with the stored job it
//!   was decided against: it counts refusals by reason and records how late an expired write
//!   came and how long an expired lease waited to be claimed again; it returns the
//!   [`Refusal`] an audit trail stores.
//! - [`Observed`] wraps any store: one span per operation (job, owner, fence, outcome, refusal
//!   reason), an operation counter by kind and outcome, and a latency histogram; `stats` also
//!   sets the jobs-per-queue-and-status gauges.

use std::future::Future;
use std::time::Instant;

use async_trait::async_trait;
use lease_domain::{
    Command, EnqueueSpec, Fence, Job, JobId, Outcome, Owner, QueueName, Refusal, Status, Timestamp,
    WriteRefused, reclaim_delay, reclaim_delay_at, refusal,
};
use tracing::Instrument;

use crate::{Applied, ClaimNext, JobRecord, Lease, LeaseStore, ListFilter, StatsRow, StoreError};

/// The metric names (Prometheus style).
pub mod names {
    /// Counter: store operations, labelled `operation` and `outcome` (accepted, refused,
    /// unchanged, empty, read, error).
    pub const OPERATIONS: &str = "lease_operations_total";
    /// Histogram: seconds per store operation, labelled `operation`.
    pub const OPERATION_SECONDS: &str = "lease_operation_seconds";
    /// Counter: refused writes of lease holders, labelled `operation` and `reason` (stale,
    /// expired, not_owner, done, cancelled, dead, missing).
    pub const REFUSALS: &str = "lease_refusals_total";
    /// Histogram: how late a write refused for an expired lease came (its `now` minus the
    /// lease's `until`), in seconds.
    pub const REFUSED_LATE_SECONDS: &str = "lease_refused_late_seconds";
    /// Histogram: from a lease's expiry to its job being claimed again, in seconds.
    pub const RECLAIM_DELAY_SECONDS: &str = "lease_reclaim_delay_seconds";
    /// Gauge: jobs per `queue` and `status`, as the last `stats` call counted them.
    pub const JOBS: &str = "lease_jobs";
    /// Gauge: 1 while the `queue` is paused, else 0.
    pub const QUEUE_PAUSED: &str = "lease_queue_paused";
    /// Gauge: the most of the `queue`'s leases live at once (0: no limit).
    pub const QUEUE_CONCURRENCY_LIMIT: &str = "lease_queue_concurrency_limit";
    /// Gauge: the default timeout of an attempt of the `queue`'s jobs, in seconds (0: none).
    pub const QUEUE_TIMEOUT_SECONDS: &str = "lease_queue_timeout_seconds";
    /// Counter: leases a worker lost (a refused renewal, or the store unreachable until the
    /// lease ran out).
    pub const LEASES_LOST: &str = "lease_worker_leases_lost_total";
    /// Counter: writes a fence guard refused at a protected resource.
    pub const GUARD_REFUSALS: &str = "lease_guard_refusals_total";
}

/// Records what a decision says (see the module documentation) and returns the refusal an
/// audit trail stores, if the command was a holder's write that was refused.
pub fn decided(command: &Command, current: Option<&Job>, outcome: &Outcome) -> Option<Refusal> {
    let refused: Option<&WriteRefused> = match outcome {
        Outcome::Wrote(Err(refused)) | Outcome::Failed(Err(refused)) => Some(refused),
        Outcome::Claimed(Ok(_)) => {
            if let Some(delay) = reclaim_delay(command, current) {
                metrics::histogram!(names::RECLAIM_DELAY_SECONDS).record(delay);
            }
            None
        }
        _ => None,
    };
    let entry = refusal(command, current, refused?)?;
    metrics::counter!(names::REFUSALS, "operation" => entry.operation.as_str(), "reason" => entry.reason.as_str())
        .increment(1);
    if let Some(late) = entry.late_by {
        metrics::histogram!(names::REFUSED_LATE_SECONDS).record(late);
    }
    tracing::debug!(
        operation = entry.operation.as_str(),
        owner = %entry.owner,
        presented = %entry.presented,
        current = ?entry.current.map(Fence::get),
        reason = entry.reason.as_str(),
        late_by = ?entry.late_by,
        "refused a holder's write"
    );
    Some(entry)
}

/// Records how long `job`'s lease had been expired when `claim_next` leased it at `now`.
pub fn leased_next(job: &Job, now: Timestamp) {
    if let Some(delay) = reclaim_delay_at(job, now) {
        metrics::histogram!(names::RECLAIM_DELAY_SECONDS).record(delay);
    }
}

/// A store whose every operation is a span, counted and timed.
#[derive(Debug)]
pub struct Observed<S: ?Sized> {
    inner: std::sync::Arc<S>,
}

impl<S: ?Sized> Clone for Observed<S> {
    fn clone(&self) -> Self {
        Self {
            inner: std::sync::Arc::clone(&self.inner),
        }
    }
}

impl<S: ?Sized> Observed<S> {
    /// Wraps `inner` (any store, `dyn LeaseStore` included).
    pub fn new(inner: std::sync::Arc<S>) -> Self {
        Self { inner }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

/// Runs one operation inside `span`, then records its outcome (from `judge`) on the span and
/// in the metrics.
async fn observe<T>(
    operation: &'static str,
    span: tracing::Span,
    call: impl Future<Output = Result<T, StoreError>>,
    judge: impl FnOnce(&T) -> (&'static str, Option<String>),
) -> Result<T, StoreError> {
    let started = Instant::now();
    let answer = call.instrument(span.clone()).await;
    let (outcome, reason) = match &answer {
        Ok(value) => judge(value),
        Err(e) => ("error", Some(e.to_string())),
    };
    span.record("outcome", outcome);
    if let Some(reason) = &reason {
        span.record("reason", reason.as_str());
    }
    metrics::counter!(names::OPERATIONS, "operation" => operation, "outcome" => outcome)
        .increment(1);
    metrics::histogram!(names::OPERATION_SECONDS, "operation" => operation)
        .record(started.elapsed().as_secs_f64());
    let _entered = span.enter();
    match outcome {
        "error" => tracing::warn!(reason = reason.as_deref(), "{operation} failed"),
        "refused" => tracing::info!(reason = reason.as_deref(), "{operation} refused"),
        _ => tracing::debug!("{operation} {outcome}"),
    }
    answer
}

fn span(
    operation: &'static str,
    job: Option<&JobId>,
    owner: Option<&Owner>,
    fence: Option<Fence>,
) -> tracing::Span {
    tracing::info_span!(
        "lease",
        operation,
        job = job.map(JobId::as_str),
        owner = owner.map(Owner::as_str),
        fence = fence.map(Fence::get),
        outcome = tracing::field::Empty,
        reason = tracing::field::Empty,
    )
}

/// The owner a command names (a holder's stand-in through the service is not named).
fn owner_of(command: &Command) -> Option<&Owner> {
    match command {
        Command::Claim(owner, _) => Some(owner),
        other => other.holder_owner(),
    }
}

/// How an outcome is counted: its kind and, for a refusal, why.
fn judged(outcome: &Outcome) -> (&'static str, Option<String>) {
    match outcome {
        Outcome::Enqueued(true) | Outcome::Claimed(Ok(_)) => ("accepted", None),
        Outcome::Wrote(Ok(())) | Outcome::Failed(Ok(_)) => ("accepted", None),
        Outcome::Enqueued(false) => ("unchanged", None),
        Outcome::Claimed(Err(refused)) => ("refused", Some(refused.to_string())),
        Outcome::Wrote(Err(refused)) | Outcome::Failed(Err(refused)) => {
            ("refused", Some(refused.to_string()))
        }
    }
}

fn leased(leases: &[Lease]) -> (&'static str, Option<String>) {
    (
        if leases.is_empty() {
            "empty"
        } else {
            "accepted"
        },
        None,
    )
}

#[async_trait]
impl<S: LeaseStore + ?Sized> LeaseStore for Observed<S> {
    async fn apply(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        // The operations keep the names the port's methods had.
        let operation = match (&command, &then) {
            (Command::Complete(..), Some(_)) => "complete_and_claim_next",
            (command, _) => command.name(),
        };
        let span = span(
            operation,
            Some(job),
            owner_of(&command),
            command.holder_fence(),
        );
        let recorded = span.clone();
        observe(
            operation,
            span,
            self.inner.apply(job, command, then),
            move |applied| {
                if let Outcome::Claimed(Ok(fence)) = &applied.outcome {
                    recorded.record("fence", fence.get());
                }
                judged(&applied.outcome)
            },
        )
        .await
    }

    async fn claim_next_with(&self, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError> {
        let span = span("claim_next", None, Some(&claim.owner), None);
        observe(
            "claim_next",
            span,
            self.inner.claim_next_with(claim),
            |leases| leased(leases),
        )
        .await
    }

    async fn enqueue_many(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError> {
        let span = span("enqueue_many", None, None, None);
        observe(
            "enqueue_many",
            span,
            self.inner.enqueue_many(jobs),
            |inserted| {
                let outcome = if inserted.contains(&true) {
                    "accepted"
                } else {
                    "unchanged"
                };
                (outcome, None)
            },
        )
        .await
    }

    async fn record(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError> {
        let span = span("record", Some(job), None, None);
        observe("record", span, self.inner.record(job), |_| ("read", None)).await
    }

    async fn purge(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError> {
        let span = span("purge", None, None, None);
        observe("purge", span, self.inner.purge(before, statuses), |_| {
            ("accepted", None)
        })
        .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
        let span = span("list", None, None, None);
        observe("list", span, self.inner.list(filter), |_| ("read", None)).await
    }

    async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
        let span = span("stats", None, None, None);
        let rows = observe("stats", span, self.inner.stats(now), |_| ("read", None)).await?;
        set_gauges(&rows);
        Ok(rows)
    }
}

/// Sets the jobs-per-queue-and-status gauges from `stats` rows (a status a queue has no job
/// in reads 0).
pub fn set_gauges(rows: &[StatsRow]) {
    let queues: std::collections::BTreeSet<&QueueName> = rows.iter().map(|r| &r.queue).collect();
    for queue in queues {
        for status in Status::ALL {
            let count = rows
                .iter()
                .find(|r| &r.queue == queue && r.status == status)
                .map_or(0, |r| r.count);
            let value = count as f64;
            metrics::gauge!(names::JOBS, "queue" => queue.as_str().to_owned(), "status" => status.as_str())
                .set(value);
        }
    }
}

/// The flow-control gauges of a queue with `settings`, as of `now`: each name with its help
/// text and its value, `None` where the queue has none (no limit, no timeout); whether it is
/// paused is always 1 or 0. `lease stats --prometheus` and [`set_queue_gauges`] both read it.
#[must_use]
pub fn queue_gauges(
    settings: &lease_domain::QueueSettings,
    now: Timestamp,
) -> [(&'static str, &'static str, Option<f64>); 3] {
    [
        (
            names::QUEUE_PAUSED,
            "1 while the queue is paused, else 0.",
            Some(if settings.is_paused_at(now) { 1.0 } else { 0.0 }),
        ),
        (
            names::QUEUE_CONCURRENCY_LIMIT,
            "The most of the queue's leases live at once.",
            settings.concurrency.map(|c| f64::from(c.get())),
        ),
        (
            names::QUEUE_TIMEOUT_SECONDS,
            "The default timeout of an attempt of the queue's jobs.",
            settings.timeout.map(lease_domain::Ttl::get),
        ),
    ]
}

/// Sets the flow-control gauges of each queue in `settings` as of `now`, and of each queue in
/// `before` (queues reported earlier) that has no settings now, which reads as free: not
/// paused, no limit (0), no timeout (0).
pub fn set_queue_gauges(
    settings: &[(QueueName, lease_domain::QueueSettings)],
    before: &std::collections::BTreeSet<QueueName>,
    now: Timestamp,
) {
    let free = lease_domain::QueueSettings::default();
    let gone = before
        .iter()
        .filter(|q| !settings.iter().any(|(s, _)| s == *q))
        .map(|q| (q, &free));
    for (queue, set) in settings.iter().map(|(q, s)| (q, s)).chain(gone) {
        for (name, _, value) in queue_gauges(set, now) {
            metrics::gauge!(name, "queue" => queue.as_str().to_owned()).set(value.unwrap_or(0.0));
        }
    }
}

/// The audit trail of the wrapped store, read as it is (reads of the trail are not counted).
#[async_trait]
impl<S: crate::audit::AuditTrail + ?Sized> crate::audit::AuditTrail for Observed<S> {
    async fn refusals(
        &self,
        filter: &crate::audit::AuditFilter,
    ) -> Result<Vec<crate::audit::AuditRow>, StoreError> {
        self.inner.refusals(filter).await
    }
}

/// The overview of the wrapped store, as it is (reads for an operator, not counted).
#[async_trait]
impl<S: crate::overview::Overview + ?Sized> crate::overview::Overview for Observed<S> {
    async fn due(
        &self,
        now: lease_domain::Timestamp,
    ) -> Result<Vec<crate::overview::DueRow>, StoreError> {
        self.inner.due(now).await
    }

    async fn activity(
        &self,
        since: lease_domain::Timestamp,
    ) -> Result<Vec<crate::overview::MinuteRow>, StoreError> {
        self.inner.activity(since).await
    }
}

/// The key store of the wrapped store, as it is (key reads are not store operations of the
/// queue, and their arguments hold digests that spans must not carry).
#[async_trait]
impl<S: crate::keys::KeyStore + ?Sized> crate::keys::KeyStore for Observed<S> {
    async fn add_key(
        &self,
        key: &crate::keys::KeyRecord,
    ) -> Result<Result<(), lease_domain::KeyRefused>, StoreError> {
        self.inner.add_key(key).await
    }

    async fn key(
        &self,
        id: &lease_domain::KeyId,
    ) -> Result<Option<crate::keys::KeyRecord>, StoreError> {
        self.inner.key(id).await
    }

    async fn keys(&self) -> Result<Vec<crate::keys::KeyRecord>, StoreError> {
        self.inner.keys().await
    }

    async fn revoke_key(
        &self,
        id: &lease_domain::KeyId,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.inner.revoke_key(id, now).await
    }
}

/// The queue control and schedules of the wrapped store: changes and fires are spans and
/// counted like the queue's operations; reads are passed through.
#[async_trait]
impl<S: crate::control::Control + ?Sized> crate::control::Control for Observed<S> {
    async fn change_queue(
        &self,
        queue: &lease_domain::QueueName,
        change: lease_domain::QueueChange,
    ) -> Result<lease_domain::QueueSettings, StoreError> {
        let span = span("change_queue", None, None, None);
        observe(
            "change_queue",
            span,
            self.inner.change_queue(queue, change),
            |_| ("accepted", None),
        )
        .await
    }

    async fn queues(
        &self,
    ) -> Result<Vec<(lease_domain::QueueName, lease_domain::QueueSettings)>, StoreError> {
        self.inner.queues().await
    }

    async fn settings_of(
        &self,
        queue: &lease_domain::QueueName,
    ) -> Result<lease_domain::QueueSettings, StoreError> {
        self.inner.settings_of(queue).await
    }

    async fn put_schedule(
        &self,
        spec: &lease_domain::ScheduleSpec,
        now: Timestamp,
    ) -> Result<lease_domain::Schedule, StoreError> {
        let span = span("put_schedule", None, None, None);
        observe(
            "put_schedule",
            span,
            self.inner.put_schedule(spec, now),
            |_| ("accepted", None),
        )
        .await
    }

    async fn remove_schedule(&self, name: &lease_domain::ScheduleName) -> Result<bool, StoreError> {
        let span = span("remove_schedule", None, None, None);
        observe(
            "remove_schedule",
            span,
            self.inner.remove_schedule(name),
            |removed| (if *removed { "accepted" } else { "unchanged" }, None),
        )
        .await
    }

    async fn schedules(&self) -> Result<Vec<lease_domain::Schedule>, StoreError> {
        self.inner.schedules().await
    }

    async fn fire_schedule(
        &self,
        fire: &crate::control::Fire,
    ) -> Result<Option<Vec<bool>>, StoreError> {
        let span = span("fire_schedule", None, None, None);
        observe(
            "fire_schedule",
            span,
            self.inner.fire_schedule(fire),
            |fired| {
                (
                    if fired.is_some() {
                        "accepted"
                    } else {
                        "unchanged"
                    },
                    None,
                )
            },
        )
        .await
    }
}
