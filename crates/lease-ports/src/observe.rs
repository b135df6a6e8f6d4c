//! Observability for every store, through facades the application wires up: `tracing` spans
//! (no output unless a subscriber is installed) and `metrics` (no cost beyond a check unless a
//! recorder is installed; the application picks the exporter).
//!
//! - [`decided`] is called by every adapter where a command is decided, with the stored job it
//!   was decided against: it counts refusals by reason and records how late an expired write
//!   came and how long an expired lease waited to be claimed again (the [`lease_domain::Refusal`] an
//!   audit trail stores is one of the decision's changes).
//! - [`Observed`] wraps any store ([`Observe`]'s hooks on a [`Decorated`] store): one span per
//!   operation of the queue and its control (job, owner, fence, outcome, refusal reason), an
//!   operation counter by kind and outcome, and a latency histogram; `stats` also sets the
//!   jobs-per-queue-and-status gauges. Reads of the control, the audit trail, the overview and
//!   the keys pass through uncounted (key calls carry digests that spans must not carry).

use std::any::Any;
use std::time::Duration;

use async_trait::async_trait;
use lease_domain::{
    Command, Decided, Fence, Job, JobId, Outcome, Owner, QueueName, Status, Timestamp,
    reclaim_delay, reclaim_delay_at,
};

use crate::decorate::{Call, Decorated, Hooks};

/// How a span is joined to a trace that began elsewhere: `lease-otel`'s `join` in a process
/// that exports its spans. A worker joins each attempt's span (`lease.attempt`) to the trace
/// its job was enqueued in (a child of the enqueuing span on the first attempt, a link on
/// later ones); the server joins each request's span (`lease.request`) to its caller's
/// `traceparent` (as a first attempt: a child).
#[derive(Clone)]
pub struct TraceJoin(pub std::sync::Arc<JoinFn>);

/// What a [`TraceJoin`] calls: the span, the trace context it joins, and how.
pub type JoinFn = dyn Fn(&tracing::Span, &lease_domain::TraceContext, Join) + Send + Sync;

pub use lease_domain::Join;

impl std::fmt::Debug for TraceJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TraceJoin(..)")
    }
}
use crate::{Applied, Lease, StatsRow, StoreError};

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
    /// Gauge: the most live leases of one group of the `queue` (0: no limit per group).
    pub const QUEUE_PER_GROUP_LIMIT: &str = "lease_queue_per_group_limit";
    /// Gauge: 1 while the `queue` runs each group one job at a time in order, else 0.
    pub const QUEUE_ORDERED: &str = "lease_queue_ordered";
    /// Gauge: how many groups of the `queue` are paused.
    pub const QUEUE_PAUSED_GROUPS: &str = "lease_queue_paused_groups";
    /// Gauge: 1 while the `queue`'s rate lets no lease be granted, else 0.
    pub const QUEUE_THROTTLED: &str = "lease_queue_throttled";
    /// Gauge: how many groups of the `queue` their rate lets no lease be granted now.
    pub const QUEUE_THROTTLED_GROUPS: &str = "lease_queue_throttled_groups";
    /// Counter: leases a worker lost (a refused renewal, or the store unreachable until the
    /// lease ran out).
    pub const LEASES_LOST: &str = "lease_worker_leases_lost_total";
    /// Counter: writes a fence guard refused at a protected resource.
    pub const GUARD_REFUSALS: &str = "lease_guard_refusals_total";
}

/// Records what a decision says (see the module documentation): the delay before an expired
/// lease was claimed again, and the refusal of a holder's write (which the decision's
/// [`lease_domain::Change::Refused`] hands to an audit trail).
pub fn decided(command: &Command, current: Option<&Job>, decided: &Decided) {
    if let Outcome::Claimed(Ok(_)) = decided.outcome {
        if let Some(delay) = reclaim_delay(command, current) {
            metrics::histogram!(names::RECLAIM_DELAY_SECONDS).record(delay);
        }
    }
    let Some(entry) = decided.refused() else {
        return;
    };
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
}

/// Records how long `job`'s lease had been expired when `claim_next` leased it at `now`.
pub fn leased_next(job: &Job, now: Timestamp) {
    if let Some(delay) = reclaim_delay_at(job, now) {
        metrics::histogram!(names::RECLAIM_DELAY_SECONDS).record(delay);
    }
}

/// A store whose every operation is a span, counted and timed.
pub type Observed<S> = Decorated<S, Observe>;

impl<S: ?Sized> Decorated<S, Observe> {
    /// Wraps `inner` (any store, `dyn LeaseStore` included).
    pub fn new(inner: std::sync::Arc<S>) -> Self {
        Decorated::with(inner, Observe)
    }
}

/// The hooks of [`Observed`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Observe;

/// An observed operation: its name and its span.
#[derive(Debug)]
pub struct Observing {
    operation: &'static str,
    span: tracing::Span,
}

#[async_trait]
impl Hooks for Observe {
    type Ticket = Option<Observing>;

    async fn before(&self, call: &Call<'_>) -> Result<Option<Observing>, StoreError> {
        let (operation, job, owner, fence) = match *call {
            Call::Apply { job, command, then } => {
                // The operations keep the names the port's methods had.
                let operation = match (command, then) {
                    (Command::Complete(..), Some(_)) => "complete_and_claim_next",
                    (command, _) => command.name(),
                };
                (
                    operation,
                    Some(job),
                    owner_of(command),
                    command.holder_fence(),
                )
            }
            Call::ClaimNext(claim) => ("claim_next", None, Some(&claim.owner), None),
            Call::EnqueueMany(_) => ("enqueue_many", None, None, None),
            Call::Record(job) => ("record", Some(job), None, None),
            Call::Checkpoints(job) => ("checkpoints", Some(job), None, None),
            Call::Attempts(job) => ("attempts", Some(job), None, None),
            Call::Trace(job) => ("trace", Some(job), None, None),
            Call::Children(job, _) => ("children", Some(job), None, None),
            Call::Purge(..) => ("purge", None, None, None),
            Call::List(_) => ("list", None, None, None),
            Call::Stats(_) => ("stats", None, None, None),
            Call::ChangeQueue(..) => ("change_queue", None, None, None),
            Call::PutSchedule(..) => ("put_schedule", None, None, None),
            Call::RemoveSchedule(_) => ("remove_schedule", None, None, None),
            Call::FireSchedule(_) => ("fire_schedule", None, None, None),
            _ => return Ok(None),
        };
        Ok(Some(Observing {
            operation,
            span: span(operation, job, owner, fence),
        }))
    }

    fn span(&self, ticket: &Option<Observing>) -> tracing::Span {
        ticket
            .as_ref()
            .map_or_else(tracing::Span::none, |t| t.span.clone())
    }

    fn after(
        &self,
        ticket: Option<Observing>,
        answer: Result<&dyn Any, &StoreError>,
        took: Duration,
    ) {
        let Some(Observing { operation, span }) = ticket else {
            return;
        };
        let (outcome, reason) = match answer {
            Ok(value) => judge(operation, value, &span),
            Err(e) => ("error", Some(e.to_string())),
        };
        span.record("outcome", outcome);
        if let Some(reason) = &reason {
            span.record("reason", reason.as_str());
        }
        metrics::counter!(names::OPERATIONS, "operation" => operation, "outcome" => outcome)
            .increment(1);
        metrics::histogram!(names::OPERATION_SECONDS, "operation" => operation)
            .record(took.as_secs_f64());
        let _entered = span.enter();
        match outcome {
            "error" => tracing::warn!(reason = reason.as_deref(), "{operation} failed"),
            "refused" => tracing::info!(reason = reason.as_deref(), "{operation} refused"),
            _ => tracing::debug!("{operation} {outcome}"),
        }
    }
}

/// How an answer is counted, by the operation that gave it (`stats` also sets the gauges).
fn judge(operation: &str, value: &dyn Any, span: &tracing::Span) -> (&'static str, Option<String>) {
    let changed = |yes: bool| (if yes { "accepted" } else { "unchanged" }, None);
    if let Some(applied) = value.downcast_ref::<Applied>() {
        if let Outcome::Claimed(Ok(fence)) = &applied.outcome {
            span.record("fence", fence.get());
        }
        return judged(&applied.outcome);
    }
    if let Some(leases) = value.downcast_ref::<Vec<Lease>>() {
        return leased(leases);
    }
    if let Some(rows) = value.downcast_ref::<Vec<StatsRow>>() {
        set_gauges(rows);
        return ("read", None);
    }
    match operation {
        "enqueue_many" => changed(
            value
                .downcast_ref::<Vec<bool>>()
                .is_some_and(|inserted| inserted.contains(&true)),
        ),
        "remove_schedule" => changed(value.downcast_ref::<bool>() == Some(&true)),
        "fire_schedule" => changed(
            value
                .downcast_ref::<Option<Vec<bool>>>()
                .is_some_and(Option::is_some),
        ),
        "purge" | "change_queue" | "put_schedule" => ("accepted", None),
        _ => ("read", None),
    }
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
/// paused and whether its groups are ordered are always 1 or 0. `lease stats --prometheus` and
/// [`set_queue_gauges`] both read it.
#[must_use]
pub fn queue_gauges(
    settings: &lease_domain::QueueSettings,
    throttle: &lease_domain::Throttle,
    now: Timestamp,
) -> [(&'static str, &'static str, Option<f64>); 8] {
    let count = |n: usize| Some(f64::from(u32::try_from(n).unwrap_or(u32::MAX)));
    let paused_groups = settings
        .paused_groups
        .keys()
        .filter(|g| settings.is_group_paused_at(g, now))
        .count();
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
        (
            names::QUEUE_PER_GROUP_LIMIT,
            "The most live leases of one group of the queue at once.",
            settings.per_group.map(|c| f64::from(c.get())),
        ),
        (
            names::QUEUE_ORDERED,
            "1 while the queue runs each group one job at a time in order, else 0.",
            Some(if settings.ordered { 1.0 } else { 0.0 }),
        ),
        (
            names::QUEUE_PAUSED_GROUPS,
            "How many groups of the queue are paused.",
            count(paused_groups),
        ),
        (
            names::QUEUE_THROTTLED,
            "1 while the queue's rate lets no lease be granted, else 0.",
            Some(if throttle.until.is_some() { 1.0 } else { 0.0 }),
        ),
        (
            names::QUEUE_THROTTLED_GROUPS,
            "How many groups of the queue their rate lets no lease be granted now.",
            count(throttle.groups.len()),
        ),
    ]
}

/// Sets the flow-control gauges of each queue in `settings` as of `now`, and of each queue in
/// `before` (queues reported earlier) that has no settings now, which reads as free: not
/// paused, no limit (0), no timeout (0), no limit per group (0), not ordered.
pub fn set_queue_gauges(
    settings: &[(
        QueueName,
        lease_domain::QueueSettings,
        lease_domain::Throttle,
    )],
    before: &std::collections::BTreeSet<QueueName>,
    now: Timestamp,
) {
    let free = lease_domain::QueueSettings::default();
    let clear = lease_domain::Throttle::default();
    let gone = before
        .iter()
        .filter(|q| !settings.iter().any(|(s, _, _)| s == *q))
        .map(|q| (q, &free, &clear));
    for (queue, set, throttle) in settings.iter().map(|(q, s, t)| (q, s, t)).chain(gone) {
        for (name, _, value) in queue_gauges(set, throttle, now) {
            metrics::gauge!(name, "queue" => queue.as_str().to_owned()).set(value.unwrap_or(0.0));
        }
    }
}
