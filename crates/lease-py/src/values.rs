//! The values crossing the boundary: arguments checked into the domain's types (each refusal
//! names the argument), and the answers as small immutable Python objects: `Lease`,
//! `Accepted`, `Refused` (a refusal by the lease rules is a value, never an exception),
//! `Failed`, `Record`, `StatsRow`, `QueueSettings`, `Schedule`, `AuditRow` and `Backoff`.

use lease_domain::{
    ClaimRefused, Fence, GuardRefused, JobId, Owner, QueueName, Status, Timestamp, WriteRefused,
};
use lease_ports::{JobRecord, StatsRow as PortStatsRow};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{Outcome, invalid};

/// This host's clock, in Unix seconds (the worker runtime's system clock).
pub(crate) fn clock_now() -> Outcome<Timestamp> {
    use lease_worker::Clock as _;
    Ok(Timestamp::new(lease_worker::SystemClock.now())?)
}

/// The caller's `now`, or this host's clock when it gave none.
pub(crate) fn now_or_clock(now: Option<f64>) -> Outcome<Timestamp> {
    match now {
        Some(t) => time("now", t),
        None => clock_now(),
    }
}

/// A time argument named `what`.
pub(crate) fn time(what: &str, t: f64) -> Outcome<Timestamp> {
    Timestamp::new(t).or_else(|e| invalid(format!("{what}: {e}")))
}

pub(crate) fn job_id(id: &str) -> Outcome<JobId> {
    JobId::new(id).or_else(|e| invalid(format!("job id: {e}")))
}

pub(crate) fn owner(name: &str) -> Outcome<Owner> {
    Owner::new(name).or_else(|e| invalid(format!("owner: {e}")))
}

pub(crate) fn queue(name: &str) -> Outcome<QueueName> {
    QueueName::new(name).or_else(|e| invalid(format!("queue: {e}")))
}

/// A fence as a Python int: 0 to 2^63-1.
pub(crate) fn fence(value: &Bound<'_, PyAny>) -> PyResult<Outcome<Fence>> {
    // A bool is an int in Python, and never meant as a fence.
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Ok(invalid("fence: a bool is not a fence"));
    }
    let Ok(number) = value.extract::<i128>() else {
        return Ok(invalid(format!(
            "fence: must be an int, got {}",
            value.get_type().name()?
        )));
    };
    Ok(u64::try_from(number)
        .ok()
        .and_then(|n| Fence::new(n).ok())
        .map_or_else(
            || {
                invalid(format!(
                    "fence: must be 0 to {}, got {number}",
                    Fence::MAX.get()
                ))
            },
            Ok,
        ))
}

/// A status as the API names it.
pub(crate) fn status(name: &str) -> Outcome<Status> {
    Status::parse(name).or_else(|_| {
        invalid(format!(
            "status: {name:?} is none of pending, running, done, dead, cancelled"
        ))
    })
}

/// A granted lease.
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct Lease {
    /// The job.
    id: String,
    /// Its fence: present it with every write, and to every resource the job writes to.
    fence: u64,
    /// When the lease was granted (Unix seconds, by the clock the store decides with).
    now: f64,
    /// The lease is live until then.
    until: f64,
    /// Which attempt this is (1 for the first; 0 for a claim by id).
    attempt: u32,
    /// The job's payload.
    payload: Option<Py<PyBytes>>,
    /// How long this attempt may run, in seconds (the job's timeout, else its queue's), if
    /// it is limited.
    timeout: Option<f64>,
    /// The job's group in its queue, if it has one.
    group: Option<String>,
}

#[pymethods]
impl Lease {
    /// Always true: a lease was granted.
    #[getter]
    fn ok(&self) -> bool {
        true
    }

    fn __repr__(&self) -> String {
        format!(
            "Lease(id={:?}, fence={}, until={}, attempt={})",
            self.id, self.fence, self.until, self.attempt
        )
    }
}

impl Lease {
    pub(crate) fn of(py: Python<'_>, lease: &lease_ports::Lease) -> Self {
        Self {
            id: lease.job.as_str().to_owned(),
            fence: lease.fence.get(),
            now: lease.now.get(),
            until: lease.until.get(),
            attempt: lease.attempt,
            payload: lease
                .payload
                .as_deref()
                .map(|p| PyBytes::new(py, p).unbind()),
            timeout: lease.timeout.map(lease_domain::Ttl::get),
            group: lease.group.as_ref().map(|g| g.as_str().to_owned()),
        }
    }

    /// A lease granted by a claim of one job by id.
    pub(crate) fn claimed(id: &JobId, fence: Fence, term: lease_domain::LeaseTerm) -> Self {
        Self {
            id: id.as_str().to_owned(),
            fence: fence.get(),
            now: term.now().get(),
            until: term.until().get(),
            attempt: 0,
            payload: None,
            timeout: None,
            group: None,
        }
    }
}

/// A write the lease rules (or a guard) accepted.
#[pyclass(module = "lease", frozen)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Accepted;

#[pymethods]
impl Accepted {
    /// Always true.
    #[getter]
    fn ok(&self) -> bool {
        true
    }

    fn __bool__(&self) -> bool {
        true
    }

    fn __repr__(&self) -> &'static str {
        "Accepted()"
    }
}

/// A write or claim the lease rules (or a guard) refused: nothing changed.
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug, Clone, Default)]
pub(crate) struct Refused {
    /// Why, as a word: `missing`, `done`, `cancelled`, `dead`, `active`, `not_owner`, `stale`,
    /// `token_missing`, `bad_token`, `expired` (writes); `live`, `not_due`, `fence_exhausted`
    /// (claims).
    reason: &'static str,
    /// The same in a sentence.
    message: String,
    /// The fence the caller presented (`stale`, and a guard's refusal).
    presented_fence: Option<u64>,
    /// The current fence (`stale`, and a guard's refusal; `done`: the fence that completed it).
    current_fence: Option<u64>,
    /// The current holder (`not_owner`, `live`).
    owner: Option<String>,
    /// When the lease ends or ended (`live`, `expired`).
    until: Option<f64>,
    /// When the job comes due (`not_due`).
    run_at: Option<f64>,
    /// The job's status (`active`).
    status: Option<&'static str>,
}

#[pymethods]
impl Refused {
    /// Always false.
    #[getter]
    fn ok(&self) -> bool {
        false
    }

    fn __bool__(&self) -> bool {
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "Refused(reason={:?}, message={:?})",
            self.reason, self.message
        )
    }
}

impl Refused {
    pub(crate) fn write(refused: &WriteRefused) -> Self {
        let message = refused.to_string();
        let base = Self {
            message,
            ..Self::default()
        };
        match refused {
            WriteRefused::Missing => Self {
                reason: "missing",
                ..base
            },
            WriteRefused::Done { result_fence } => Self {
                reason: "done",
                current_fence: result_fence.map(Fence::get),
                ..base
            },
            WriteRefused::Cancelled => Self {
                reason: "cancelled",
                ..base
            },
            WriteRefused::Dead => Self {
                reason: "dead",
                ..base
            },
            WriteRefused::NoGroup => Self {
                reason: "no_group",
                ..base
            },
            WriteRefused::Active { status } => Self {
                reason: "active",
                status: Some(status.as_str()),
                ..base
            },
            WriteRefused::NotOwner { current, .. } => Self {
                reason: "not_owner",
                owner: current.as_ref().map(|o| o.as_str().to_owned()),
                ..base
            },
            WriteRefused::Stale { presented, current } => Self {
                reason: "stale",
                presented_fence: Some(presented.get()),
                current_fence: Some(current.get()),
                ..base
            },
            WriteRefused::TokenMissing => Self {
                reason: "token_missing",
                ..base
            },
            WriteRefused::BadToken => Self {
                reason: "bad_token",
                ..base
            },
            WriteRefused::Expired { until, .. } => Self {
                reason: "expired",
                until: Some(until.get()),
                ..base
            },
        }
    }

    pub(crate) fn claim(refused: &ClaimRefused) -> Self {
        let message = refused.to_string();
        let base = Self {
            message,
            ..Self::default()
        };
        match refused {
            ClaimRefused::Missing => Self {
                reason: "missing",
                ..base
            },
            ClaimRefused::Done => Self {
                reason: "done",
                ..base
            },
            ClaimRefused::Dead => Self {
                reason: "dead",
                ..base
            },
            ClaimRefused::Cancelled => Self {
                reason: "cancelled",
                ..base
            },
            ClaimRefused::Waiting => Self {
                reason: "waiting",
                ..base
            },
            ClaimRefused::NotDue { run_at } => Self {
                reason: "not_due",
                run_at: Some(run_at.get()),
                ..base
            },
            ClaimRefused::Live { owner, until } => Self {
                reason: "live",
                owner: owner.as_ref().map(|o| o.as_str().to_owned()),
                until: Some(until.get()),
                ..base
            },
            ClaimRefused::FenceExhausted => Self {
                reason: "fence_exhausted",
                ..base
            },
        }
    }

    pub(crate) fn guard(refused: &GuardRefused) -> Self {
        Self {
            reason: "stale",
            message: refused.to_string(),
            presented_fence: Some(refused.presented.get()),
            current_fence: Some(refused.current.get()),
            ..Self::default()
        }
    }
}

/// A failure the store took: the job will be retried, or is dead.
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug, Clone)]
pub(crate) struct Failed {
    /// `pending` (it will be retried) or `dead`.
    status: &'static str,
    /// When it comes due again, when pending.
    run_at: Option<f64>,
}

#[pymethods]
impl Failed {
    /// Always true: the failure was recorded.
    #[getter]
    fn ok(&self) -> bool {
        true
    }

    fn __bool__(&self) -> bool {
        true
    }

    fn __repr__(&self) -> String {
        format!("Failed(status={:?}, run_at={:?})", self.status, self.run_at)
    }
}

impl Failed {
    pub(crate) fn of(failed: &lease_domain::Failed) -> Self {
        Self {
            status: failed.status.as_str(),
            run_at: failed.run_at.map(Timestamp::get),
        }
    }
}

/// Every field of a stored job.
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct Record {
    id: String,
    /// Judged at the time the record was read.
    status: &'static str,
    queue: String,
    owner: Option<String>,
    until: f64,
    fence: u64,
    result: Option<String>,
    done: bool,
    priority: i64,
    run_at: Option<f64>,
    attempts: u32,
    max_attempts: u32,
    payload: Option<Py<PyBytes>>,
    error: Option<String>,
    result_fence: Option<u64>,
    updated: Option<f64>,
    /// How long one attempt may run, in seconds, if the job names a limit.
    timeout: Option<f64>,
    /// What the current attempt last reported of its progress.
    progress: Option<String>,
    /// The job's group in its queue, if it has one.
    group: Option<String>,
    /// The jobs it runs after, in the order named (empty: none).
    after: Vec<String>,
    /// What it does when a parent fails (``cancel`` or ``run``), for a job with parents.
    on_parent_failure: Option<&'static str>,
}

#[pymethods]
impl Record {
    fn __repr__(&self) -> String {
        format!(
            "Record(id={:?}, status={:?}, queue={:?}, fence={})",
            self.id, self.status, self.queue, self.fence
        )
    }
}

impl Record {
    pub(crate) fn of(py: Python<'_>, record: &JobRecord, now: Timestamp) -> Self {
        let job = &record.job;
        Self {
            id: record.id.as_str().to_owned(),
            status: job.status_at(now).as_str(),
            queue: job.queue.as_str().to_owned(),
            owner: job.owner.as_ref().map(|o| o.as_str().to_owned()),
            until: job.until.get(),
            fence: job.fence.get(),
            result: job.result.clone(),
            done: job.done,
            priority: job.priority,
            run_at: job.run_at.map(Timestamp::get),
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            payload: job.payload.as_deref().map(|p| PyBytes::new(py, p).unbind()),
            error: job.error.clone(),
            result_fence: job.result_fence.map(Fence::get),
            updated: job.updated.map(Timestamp::get),
            timeout: job.timeout.map(lease_domain::Ttl::get),
            progress: job.progress.clone(),
            group: job.group.as_ref().map(|g| g.as_str().to_owned()),
            after: job.after.iter().map(|p| p.as_str().to_owned()).collect(),
            on_parent_failure: (!job.after.is_empty()).then(|| job.on_parent_failure.as_str()),
        }
    }
}

/// How many jobs of a queue have a status.
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct StatsRow {
    queue: String,
    status: &'static str,
    count: u64,
}

#[pymethods]
impl StatsRow {
    fn __repr__(&self) -> String {
        format!(
            "StatsRow(queue={:?}, status={:?}, count={})",
            self.queue, self.status, self.count
        )
    }
}

impl StatsRow {
    pub(crate) fn of(row: &PortStatsRow) -> Self {
        Self {
            queue: row.queue.as_str().to_owned(),
            status: row.status.as_str(),
            count: row.count,
        }
    }
}

/// An optional value as Python shows it: the value, or `None`.
fn optional<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "None".to_owned(), |v| v.to_string())
}

/// A queue's flow control: whether it is paused (at the time it was read) and until when, its
/// concurrency limit, its default timeout, the limit per group, whether groups are ordered,
/// its rates and whether claims serve its groups in turn (``fair``).
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct QueueSettings {
    queue: String,
    paused: bool,
    paused_until: Option<f64>,
    concurrency: Option<u32>,
    timeout: Option<f64>,
    per_group: Option<u32>,
    ordered: bool,
    /// The groups paused at the time the settings were read, each with the end of its pause
    /// (`None`: until resumed).
    paused_groups: std::collections::BTreeMap<String, Option<f64>>,
    /// The queue's rate as ``N/PERIOD``, if any.
    rate: Option<String>,
    /// Each group's rate as ``N/PERIOD``, if any.
    rate_per_group: Option<String>,
    /// Whether claims serve the groups in turn, the group served least recently first.
    fair: bool,
}

/// Where a queue's rates stand: when its rate lets a claim lease again (``until``, ``None``
/// when it is not throttled) and each throttled group with when its rate opens again.
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct Throttle {
    queue: String,
    until: Option<f64>,
    groups: std::collections::BTreeMap<String, f64>,
}

/// How loaded one group of a queue is: its jobs that wait (``backlog``) and run
/// (``running``), and whether it is paused or throttled now (``paused_until`` or
/// ``throttled_until`` when that ends at a time).
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct GroupLoad {
    group: String,
    backlog: u64,
    running: u64,
    paused: bool,
    paused_until: Option<f64>,
    throttled_until: Option<f64>,
}

#[pymethods]
impl GroupLoad {
    fn __repr__(&self) -> String {
        format!(
            "GroupLoad(group={:?}, backlog={}, running={}, paused={}, paused_until={}, \
             throttled_until={})",
            self.group,
            self.backlog,
            self.running,
            if self.paused { "True" } else { "False" },
            optional(self.paused_until),
            optional(self.throttled_until)
        )
    }
}

impl GroupLoad {
    pub(crate) fn of(standing: &lease_ports::control::GroupStanding) -> Self {
        Self {
            group: standing.load.group.as_str().to_owned(),
            backlog: standing.load.backlog,
            running: standing.load.running,
            paused: standing.paused,
            paused_until: standing.paused_until.map(Timestamp::get),
            throttled_until: standing.throttled_until.map(Timestamp::get),
        }
    }
}

#[pymethods]
impl Throttle {
    fn __repr__(&self) -> String {
        format!(
            "Throttle(queue={:?}, until={}, groups={:?})",
            self.queue,
            optional(self.until),
            self.groups
        )
    }
}

impl Throttle {
    pub(crate) fn of(queue: &QueueName, throttle: &lease_domain::Throttle) -> Self {
        Self {
            queue: queue.as_str().to_owned(),
            until: throttle.until.map(Timestamp::get),
            groups: throttle
                .groups
                .iter()
                .map(|(g, at)| (g.as_str().to_owned(), at.get()))
                .collect(),
        }
    }
}

#[pymethods]
impl QueueSettings {
    fn __repr__(&self) -> String {
        let flag = |b: bool| if b { "True" } else { "False" };
        format!(
            "QueueSettings(queue={:?}, paused={}, paused_until={}, concurrency={}, timeout={}, \
             per_group={}, ordered={}, rate={}, rate_per_group={}, fair={})",
            self.queue,
            flag(self.paused),
            optional(self.paused_until),
            optional(self.concurrency),
            optional(self.timeout),
            optional(self.per_group),
            flag(self.ordered),
            optional(self.rate.as_deref().map(|r| format!("{r:?}"))),
            optional(self.rate_per_group.as_deref().map(|r| format!("{r:?}"))),
            flag(self.fair)
        )
    }
}

impl QueueSettings {
    pub(crate) fn of(
        queue: &QueueName,
        settings: &lease_domain::QueueSettings,
        now: Timestamp,
    ) -> Self {
        Self {
            queue: queue.as_str().to_owned(),
            paused: settings.is_paused_at(now),
            paused_until: settings.paused.and_then(|p| p.until).map(Timestamp::get),
            concurrency: settings.concurrency.map(lease_domain::Concurrency::get),
            timeout: settings.timeout.map(lease_domain::Ttl::get),
            per_group: settings.per_group.map(lease_domain::Concurrency::get),
            ordered: settings.ordered,
            paused_groups: settings
                .paused_groups
                .iter()
                .filter(|(group, _)| settings.is_group_paused_at(group, now))
                .map(|(group, until)| (group.as_str().to_owned(), until.map(Timestamp::get)))
                .collect(),
            rate: settings.rate.map(|r| r.to_string()),
            rate_per_group: settings.rate_per_group.map(|r| r.to_string()),
            fair: settings.fair,
        }
    }
}

/// A stored schedule, with its next tick as of when it was read.
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct Schedule {
    name: String,
    cron: String,
    zone: String,
    queue: String,
    priority: i64,
    max_attempts: Option<u32>,
    timeout: Option<f64>,
    catch_up: String,
    version: u64,
    created: f64,
    last_tick: Option<f64>,
    next_tick: Option<f64>,
}

#[pymethods]
impl Schedule {
    fn __repr__(&self) -> String {
        format!(
            "Schedule(name={:?}, cron={:?}, zone={:?}, queue={:?}, version={}, last_tick={}, next_tick={})",
            self.name,
            self.cron,
            self.zone,
            self.queue,
            self.version,
            optional(self.last_tick),
            optional(self.next_tick)
        )
    }
}

impl Schedule {
    pub(crate) fn of(schedule: &lease_domain::Schedule, now: Timestamp) -> Self {
        let view = lease_schedule::ScheduleView::of(schedule, now);
        Self {
            name: view.name,
            cron: view.cron,
            zone: view.zone,
            queue: view.queue,
            priority: view.priority,
            max_attempts: view.max_attempts,
            timeout: view.timeout,
            catch_up: view.catch_up,
            version: view.version,
            created: view.created,
            last_tick: view.last_tick,
            next_tick: view.next_tick,
        }
    }
}

/// One refused write, as the audit trail keeps it.
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct AuditRow {
    time: f64,
    job: String,
    owner: String,
    operation: String,
    presented_fence: u64,
    current_fence: Option<u64>,
    reason: String,
    late_by: Option<f64>,
}

#[pymethods]
impl AuditRow {
    fn __repr__(&self) -> String {
        format!(
            "AuditRow(job={:?}, operation={:?}, reason={:?}, presented_fence={})",
            self.job, self.operation, self.reason, self.presented_fence
        )
    }
}

impl AuditRow {
    pub(crate) fn of(row: lease_ports::audit::AuditRow) -> Self {
        Self {
            time: row.time,
            job: row.job,
            owner: row.owner,
            operation: row.operation,
            presented_fence: row.presented_fence,
            current_fence: row.current_fence,
            reason: row.reason,
            late_by: row.late_by,
        }
    }
}

/// How long a failed job waits before its next attempt: `base` seconds, times `factor` per
/// attempt, at most `max`, up to `jitter` (a fraction) shorter at random.
#[pyclass(module = "lease", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct Backoff(pub(crate) lease_domain::Backoff);

#[pymethods]
impl Backoff {
    #[new]
    #[pyo3(signature = (base = 1.0, factor = 2.0, max = 3600.0, jitter = 0.25))]
    fn new(py: Python<'_>, base: f64, factor: f64, max: f64, jitter: f64) -> PyResult<Self> {
        crate::errors::to_py(
            py,
            lease_domain::Backoff::new(base, factor, max, jitter)
                .map(Backoff)
                .or_else(|e| invalid(format!("backoff: {e}"))),
        )
    }

    fn __repr__(&self) -> String {
        format!("Backoff({:?})", self.0)
    }
}

/// The retry policy of a failure: `False` goes straight to dead, `True` the store's default
/// backoff, a `Backoff` its own.
pub(crate) fn retry(retry: bool, backoff: Option<&Backoff>) -> Outcome<lease_domain::Retry> {
    match (retry, backoff) {
        (false, Some(_)) => invalid("backoff: a backoff needs retry=True"),
        (false, None) => Ok(lease_domain::Retry::No),
        (true, Some(b)) => Ok(lease_domain::Retry::Backoff(b.0)),
        (true, None) => Ok(lease_domain::Retry::default()),
    }
}

/// The statement's six fields of a job, as its SQLite row gives them: `done` is 0 or 1.
pub(crate) fn state_dict<'py>(
    py: Python<'py>,
    state: &lease_ports::JobState,
) -> PyResult<Bound<'py, PyDict>> {
    let row = PyDict::new(py);
    row.set_item("id", &state.id)?;
    row.set_item("owner", state.owner.as_deref())?;
    row.set_item("until", state.until)?;
    row.set_item("fence", state.fence)?;
    row.set_item("result", state.result.as_deref())?;
    row.set_item("done", i64::from(state.done))?;
    Ok(row)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Lease>()?;
    m.add_class::<Accepted>()?;
    m.add_class::<Refused>()?;
    m.add_class::<Failed>()?;
    m.add_class::<Record>()?;
    m.add_class::<StatsRow>()?;
    m.add_class::<QueueSettings>()?;
    m.add_class::<Throttle>()?;
    m.add_class::<GroupLoad>()?;
    m.add_class::<Schedule>()?;
    m.add_class::<AuditRow>()?;
    m.add_class::<Backoff>()?;
    Ok(())
}

/// A checkpoint from Python's arguments, its bad input named.
pub(crate) fn checkpoint(name: &str, value: &str) -> Outcome<lease_domain::Checkpoint> {
    Ok(lease_domain::Checkpoint {
        name: lease_domain::CheckpointName::new(name)
            .map_err(|e| crate::errors::Failure::Input(e.to_string()))?,
        value: lease_domain::CheckpointValue::new(value)?,
    })
}

/// A job's trace context as Python sees it: ``{"traceparent": ..., "tracestate": ...}``.
pub(crate) fn trace_dict<'py>(
    py: Python<'py>,
    trace: &lease_domain::TraceContext,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let shown = pyo3::types::PyDict::new(py);
    shown.set_item("traceparent", trace.traceparent())?;
    shown.set_item("tracestate", trace.tracestate())?;
    Ok(shown)
}

/// A job's attempts as Python sees them (`Store.attempts`): the kept ones, then the one under
/// way at `now`, each a dict; with the count of older ones.
pub(crate) fn attempts_dict<'py>(
    py: Python<'py>,
    job: Option<&lease_domain::Job>,
    kept: &lease_domain::Attempts,
    now: lease_domain::Timestamp,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let time = |t: Option<lease_domain::Timestamp>| t.map(lease_domain::Timestamp::get);
    let list = pyo3::types::PyList::empty(py);
    let one = |fence: u64,
               owner: &str,
               started: Option<f64>,
               ended: Option<f64>,
               outcome: &str,
               error: Option<&str>,
               until: Option<f64>|
     -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let d = pyo3::types::PyDict::new(py);
        d.set_item("fence", fence)?;
        d.set_item("owner", owner)?;
        d.set_item("started", started)?;
        d.set_item("ended", ended)?;
        d.set_item("outcome", outcome)?;
        d.set_item("error", error)?;
        d.set_item("until", until)?;
        Ok(d)
    };
    for a in &kept.kept {
        list.append(one(
            a.fence.get(),
            a.owner.as_str(),
            time(a.started),
            time(a.ended),
            a.end.as_str(),
            a.error.as_deref(),
            None,
        )?)?;
    }
    if let Some(open) = job.and_then(lease_domain::Job::open_attempt) {
        let outcome = open.outcome_at(now);
        list.append(one(
            open.fence.get(),
            open.owner.as_str(),
            time(open.started),
            None,
            outcome,
            None,
            Some(open.until.get()),
        )?)?;
    }
    let shown = pyo3::types::PyDict::new(py);
    shown.set_item("attempts", list)?;
    shown.set_item("older", kept.older)?;
    Ok(shown)
}

/// A job's workflow as Python sees it (`Store.graph`).
pub(crate) fn graph_dict<'py>(
    py: Python<'py>,
    graph: &lease_ports::graph::Graph,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let nodes = pyo3::types::PyList::empty(py);
    for n in &graph.nodes {
        let d = pyo3::types::PyDict::new(py);
        d.set_item("id", n.id.as_str())?;
        d.set_item("status", n.status.map_or("purged", |s| s.as_str()))?;
        d.set_item("queue", n.queue.as_ref().map(|q| q.as_str()))?;
        nodes.append(d)?;
    }
    let edges = pyo3::types::PyList::empty(py);
    for (parent, child) in &graph.edges {
        edges.append((parent.as_str(), child.as_str()))?;
    }
    let shown = pyo3::types::PyDict::new(py);
    shown.set_item("nodes", nodes)?;
    shown.set_item("edges", edges)?;
    shown.set_item("more", graph.more)?;
    Ok(shown)
}

/// A job's checkpoints as Python sees them: ``{name: value}`` in name order.
pub(crate) fn checkpoints_dict<'py>(
    py: Python<'py>,
    kept: &[lease_domain::KeptCheckpoint],
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let shown = pyo3::types::PyDict::new(py);
    for c in kept {
        shown.set_item(c.name.as_str(), c.value.as_str())?;
    }
    Ok(shown)
}
