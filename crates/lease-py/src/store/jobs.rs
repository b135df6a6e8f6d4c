//! `StoreCore`'s methods on jobs as a whole: enqueue (one or many), read (a record, a state,
//! a page, the counts, the audit trail, attempts, the workflow graph, the trace, checkpoints,
//! the epoch), and an admin's cancel, retry, bulk action and purge.

use lease_ports::ListFilter;
use lease_ports::audit::AuditFilter;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::args::{self, batch_job, job_at};
use crate::errors::{invalid, to_py};
use crate::run::Pending;
use crate::values::{self, AuditRow, Record, StatsRow, now_or_clock};

use crate::store::{StoreCore, accepted_or_refused, sealed};

#[pymethods]
impl StoreCore {
    /// Adds a job: True when it was made, False when the id existed (nothing changes then).
    ///
    /// Higher ``priority`` is claimed first; the job is not claimable before ``run_at``;
    /// ``claim_next`` leases it at most ``max_attempts`` times (default 5); ``payload`` is
    /// bytes (or text, kept as UTF-8), at most 1 MiB. An attempt may run ``timeout`` seconds
    /// (default: its queue's, if any) before its worker stops it and fails it "timed out".
    /// With ``replace_finished``, an id that is done, dead or cancelled runs again (pending,
    /// attempts from 0, its fence going on, its last result kept until the new run
    /// completes); a pending or running job is never touched. ``group`` puts the job in a
    /// group of its queue (a customer, an account), which the queue's group rules count by.
    /// With ``debounce`` (seconds) the job is due that long from now, and enqueueing its id
    /// again while it waits to start takes the new payload and pushes it to that long from
    /// then (answered False: nothing new was made). With ``after`` (job ids) the job waits
    /// (status ``waiting``) until those jobs have finished: it becomes due when the last of
    /// them completes; if one ends dead or cancelled it is cancelled, naming that parent,
    /// unless ``on_parent_failure`` is ``"run"`` (then it runs once every parent finished).
    /// ``traceparent`` and ``tracestate`` (W3C) name the trace the job's attempts join; by
    /// default, when the ``opentelemetry`` package is installed, the current span's.
    #[pyo3(signature = (job_id, *, queue = "default", priority = 0, run_at = None, max_attempts = None, payload = None, timeout = None, replace_finished = false, group = None, debounce = None, after = None, on_parent_failure = None, traceparent = None, tracestate = None))]
    #[allow(clippy::too_many_arguments)] // A job's fields, as the caller names them.
    fn enqueue(
        &self,
        py: Python<'_>,
        job_id: &str,
        queue: &str,
        priority: i64,
        run_at: Option<f64>,
        max_attempts: Option<u32>,
        payload: Option<&Bound<'_, PyAny>>,
        timeout: Option<f64>,
        replace_finished: bool,
        group: Option<&str>,
        debounce: Option<f64>,
        after: Option<Vec<String>>,
        on_parent_failure: Option<&str>,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
    ) -> PyResult<Pending> {
        let payload = to_py(py, args::payload_bytes(payload)?)?;
        let trace = to_py(
            py,
            crate::trace::enqueue_trace(py, traceparent, tracestate)?,
        )?;
        let fields = lease_domain::EnqueueFields {
            id: job_id.to_owned(),
            queue: Some(queue.to_owned()),
            priority: Some(priority),
            run_at,
            max_attempts,
            payload,
            enqueued_at: None,
            timeout,
            replace: replace_finished.then(|| "finished".to_owned()),
            group: group.map(str::to_owned),
            debounce,
            after,
            on_parent_failure: on_parent_failure.map(str::to_owned),
            traceparent: None,
            tracestate: None,
        };
        let (id, mut spec) = to_py(py, args::check_job(fields, trace))?;
        to_py(py, sealed([(&id, &mut spec.payload)]))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.enqueue_with(&id, &spec).await?) },
            |py, inserted| inserted.into_py_any(py),
        )
    }

    /// Adds many jobs in one transaction, all or none; for each, in order, whether it was
    /// made. Each job is a dict with ``id`` and any of ``queue`` (default ``queue``),
    /// ``priority``, ``run_at``, ``max_attempts``, ``payload``, ``timeout``, ``replace``
    /// (``"finished"``: as ``replace_finished``), ``group``, ``debounce``, ``after`` and
    /// ``on_parent_failure``; a job's parents may be named before or after it in the batch.
    /// ``traceparent`` and ``tracestate`` are every job's trace context, as in :meth:`enqueue`.
    #[pyo3(signature = (jobs, *, queue = "default", traceparent = None, tracestate = None))]
    fn enqueue_many(
        &self,
        py: Python<'_>,
        jobs: &Bound<'_, PyAny>,
        queue: &str,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
    ) -> PyResult<Pending> {
        let trace = to_py(
            py,
            crate::trace::enqueue_trace(py, traceparent, tracestate)?,
        )?;
        let mut specs = Vec::new();
        for (n, item) in jobs.try_iter()?.enumerate() {
            let (id, mut spec) = to_py(py, batch_job(n, &item?, queue)?)?;
            spec.trace = trace.clone();
            specs.push((id, spec));
        }
        to_py(
            py,
            sealed(specs.iter_mut().map(|(id, spec)| (&*id, &mut spec.payload))),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.enqueue_many(&specs).await?) },
            |py, inserted| inserted.into_py_any(py),
        )
    }

    /// The checkpoints the job keeps, ``{name: value}`` in name order (empty for a job that
    /// keeps none, or is gone).
    #[pyo3(signature = (job_id))]
    fn checkpoints(&self, py: Python<'_>, job_id: &str) -> PyResult<Pending> {
        let id = to_py(py, values::job_id(job_id))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.checkpoints(&id).await?) },
            |py, kept| values::checkpoints_dict(py, &kept).map(|d| d.into_any().unbind()),
        )
    }

    /// The job's attempts, ``{"attempts": [...], "older": n}``: each ended attempt the store
    /// keeps (the latest 100) then the one under way, by fence, as a dict of ``fence``,
    /// ``owner``, ``started``, ``ended``, ``outcome`` (done, failed, timed_out, lease_lost,
    /// released, cancelled; running or expired for the one under way), ``error`` and
    /// ``until`` (the lease's end, for the one under way); ``older`` counts the earlier
    /// attempts no longer kept. Empty for a job never leased, or gone.
    #[pyo3(signature = (job_id))]
    fn attempts(&self, py: Python<'_>, job_id: &str) -> PyResult<Pending> {
        let id = to_py(py, values::job_id(job_id))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move {
                let record = store.record(&id).await?;
                let kept = store.attempts(&id).await?;
                Ok((record, kept, values::clock_now()?))
            },
            |py, (record, kept, now)| {
                values::attempts_dict(py, record.as_ref().map(|r| &r.job), &kept, now)
                    .map(|d| d.into_any().unbind())
            },
        )
    }

    /// The job's workflow around it: ``{"nodes": [{"id", "status", "queue"}, ...], "edges":
    /// [(parent, child), ...], "more": n}``, its ancestors and descendants breadth first (the
    /// job first), at most ``limit`` jobs (1 to 500), every dependency between them, and how
    /// many jobs were met beyond the bound; None for a job that is gone. A parent purged since
    /// it finished has the status ``purged``.
    #[pyo3(signature = (job_id, limit = 50))]
    fn graph(&self, py: Python<'_>, job_id: &str, limit: usize) -> PyResult<Pending> {
        let id = to_py(py, values::job_id(job_id))?;
        if !(1..=lease_ports::graph::GRAPH_MOST).contains(&limit) {
            return to_py(py, crate::errors::invalid("limit must be from 1 to 500"));
        }
        let store = self.store(py)?;
        self.call(
            py,
            async move {
                let now = values::clock_now()?;
                Ok(lease_ports::graph::workflow_graph(store.as_ref(), &id, limit, now).await?)
            },
            |py, graph| match graph {
                Some(graph) => values::graph_dict(py, &graph).map(|d| d.into_any().unbind()),
                None => Ok(py.None()),
            },
        )
    }

    /// The W3C trace context the job was enqueued with: ``{"traceparent": ..., "tracestate":
    /// ...}`` (``tracestate`` None when it came without one), or None for a job enqueued
    /// outside a trace or gone. Read apart from the job, as every store keeps it.
    #[pyo3(signature = (job_id))]
    fn trace(&self, py: Python<'_>, job_id: &str) -> PyResult<Pending> {
        let id = to_py(py, values::job_id(job_id))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.trace(&id).await?) },
            |py, trace| match trace {
                Some(trace) => values::trace_dict(py, &trace)?.into_py_any(py),
                None => Ok(py.None()),
            },
        )
    }

    /// The store's epoch: the high 32 bits of every fence it hands out now, raised whenever its
    /// history may have lost writes (on PostgreSQL the server's timeline less one, so a
    /// promotion or a point-in-time recovery raises it; on SQLite ``lease restore``). A store
    /// reached over HTTP cannot say: its fences carry it.
    fn epoch(&self, py: Python<'_>) -> PyResult<Pending> {
        self.same_process(py)?;
        let Some(store) = self.backend.transfer() else {
            return Err(crate::errors::raise(
                py,
                "InvalidInput",
                "the epoch is read from a database: open the Store on a SQLite file or a \
                 postgres:// URL (a fence's epoch is its high 32 bits: fence >> 32)"
                    .to_owned(),
            ));
        };
        self.call(py, async move { Ok(store.epoch().await?) }, |py, epoch| {
            epoch.get().into_py_any(py)
        })
    }

    /// Cancels a waiting, pending, running or dead job (a dead one keeps its record and
    /// error, and frees its ordered group); its holder's later writes are refused.
    #[pyo3(signature = (job_id, *, now = None))]
    fn cancel(&self, py: Python<'_>, job_id: &str, now: Option<f64>) -> PyResult<Pending> {
        let (id, now) = to_py(py, job_at(job_id, now))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.cancel(&id, now).await?) },
            accepted_or_refused,
        )
    }

    /// Puts a dead or cancelled job back to pending, its attempts starting over.
    #[pyo3(signature = (job_id, *, now = None))]
    fn retry(&self, py: Python<'_>, job_id: &str, now: Option<f64>) -> PyResult<Pending> {
        let (id, now) = to_py(py, job_at(job_id, now))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.retry(&id, now).await?) },
            accepted_or_refused,
        )
    }

    /// Retries (``action="retry"``) or cancels (``action="cancel"``) every job of ``queue``,
    /// ``group`` and ``prefix`` with ``status`` (default ``dead`` for a retry, ``pending`` for
    /// a cancel), in batches of at most 500, each decided as its own retry or cancel would be;
    /// with ``dry_run`` only counts them. Answers ``{"matched": n, "changed": n}``.
    #[pyo3(signature = (action, *, queue = None, group = None, status = None, prefix = None, dry_run = false, now = None))]
    #[allow(clippy::too_many_arguments)] // The Python method's own arguments, one each.
    fn bulk(
        &self,
        py: Python<'_>,
        action: &str,
        queue: Option<&str>,
        group: Option<&str>,
        status: Option<&str>,
        prefix: Option<&str>,
        dry_run: bool,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        use lease_ports::bulk::BulkAction;
        let filter = to_py(
            py,
            (|| {
                let action = match action {
                    "retry" => BulkAction::Retry,
                    "cancel" => BulkAction::Cancel,
                    other => {
                        return invalid(format!("action: must be retry or cancel, got {other:?}"));
                    }
                };
                let status = match status {
                    Some(status) => values::status(status)?,
                    None => action.default_status(),
                };
                Ok((
                    ListFilter {
                        queue: queue.map(values::queue).transpose()?,
                        status: Some(status),
                        limit: lease_ports::bulk::BULK_BATCH,
                        after: None,
                        now: now_or_clock(now)?,
                        group: group.map(args::group).transpose()?,
                        prefix: prefix.map(str::to_owned),
                    },
                    action,
                ))
            })(),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move {
                let (filter, action) = filter;
                Ok(lease_ports::bulk::bulk(store.as_ref(), &filter, action, dry_run).await?)
            },
            |py, done| {
                let answer = PyDict::new(py);
                answer.set_item("matched", done.matched)?;
                answer.set_item("changed", done.changed)?;
                answer.into_py_any(py)
            },
        )
    }

    /// Deletes finished jobs last changed before ``before``, of the ``statuses`` named
    /// (``done``, ``dead``, ``cancelled``; by default ``done``); how many. A purged id
    /// enqueued again goes on from its old fence.
    #[pyo3(signature = (before, statuses = None))]
    fn purge(
        &self,
        py: Python<'_>,
        before: f64,
        statuses: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pending> {
        let statuses = to_py(py, args::statuses(statuses)?)?;
        let before = to_py(py, values::time("before", before))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.purge(before, &statuses).await?) },
            |py, purged| purged.into_py_any(py),
        )
    }

    /// Every field of the job (its status judged now), or None.
    #[pyo3(signature = (job_id))]
    fn record(&self, py: Python<'_>, job_id: &str) -> PyResult<Pending> {
        let id = to_py(py, values::job_id(job_id))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok((store.record(&id).await?, values::clock_now()?)) },
            |py, (record, now)| match record {
                Some(record) => Record::of(py, &record, now).into_py_any(py),
                None => Ok(py.None()),
            },
        )
    }

    /// The statement's six fields of the job (``id``, ``owner``, ``until``, ``fence``,
    /// ``result``, ``done``), or None.
    #[pyo3(signature = (job_id))]
    fn state(&self, py: Python<'_>, job_id: &str) -> PyResult<Pending> {
        let id = to_py(py, values::job_id(job_id))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.state(&id).await?) },
            |py, state| match state {
                Some(state) => values::state_dict(py, &state)?.into_py_any(py),
                None => Ok(py.None()),
            },
        )
    }

    /// Jobs in id order, as :class:`Record`: of ``queue``, with ``status``, of ``group``, whose
    /// id starts with ``prefix``, after the id ``after`` (the last of the previous page).
    #[pyo3(signature = (*, queue = None, status = None, limit = 100, after = None, now = None, group = None, prefix = None))]
    #[allow(clippy::too_many_arguments)] // The Python method's own arguments, one each.
    fn list(
        &self,
        py: Python<'_>,
        queue: Option<&str>,
        status: Option<&str>,
        limit: usize,
        after: Option<&str>,
        now: Option<f64>,
        group: Option<&str>,
        prefix: Option<&str>,
    ) -> PyResult<Pending> {
        let filter = to_py(
            py,
            (|| {
                Ok(ListFilter {
                    queue: queue.map(values::queue).transpose()?,
                    status: status.map(values::status).transpose()?,
                    limit,
                    after: after.map(values::job_id).transpose()?,
                    now: now_or_clock(now)?,
                    group: group.map(crate::args::group).transpose()?,
                    prefix: prefix.map(str::to_owned),
                })
            })(),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move {
                let now = filter.now;
                Ok((store.list(&filter).await?, now))
            },
            |py, (records, now)| {
                let list = PyList::empty(py);
                for record in &records {
                    list.append(Record::of(py, record, now))?;
                }
                list.into_py_any(py)
            },
        )
    }

    /// How many jobs each queue has in each status, as :class:`StatsRow`.
    #[pyo3(signature = (*, now = None))]
    fn stats(&self, py: Python<'_>, now: Option<f64>) -> PyResult<Pending> {
        let now = to_py(py, now_or_clock(now))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.stats(now).await?) },
            |py, rows| {
                let rows: Vec<StatsRow> = rows.iter().map(StatsRow::of).collect();
                rows.into_py_any(py)
            },
        )
    }

    /// The refused writes the audit trail recorded (open the store with ``audit=N``), as
    /// :class:`AuditRow`, oldest first.
    #[pyo3(signature = (*, job = None, since = None, limit = 100))]
    fn audit(
        &self,
        py: Python<'_>,
        job: Option<&str>,
        since: Option<f64>,
        limit: usize,
    ) -> PyResult<Pending> {
        let filter = to_py(
            py,
            (|| {
                Ok(AuditFilter {
                    job: job.map(values::job_id).transpose()?,
                    since: since.map(|t| values::time("since", t)).transpose()?,
                    limit,
                })
            })(),
        )?;
        self.same_process(py)?;
        let trail = self.backend.audit();
        self.call(
            py,
            async move { Ok(trail.refusals(&filter).await?) },
            |py, rows| {
                let rows: Vec<AuditRow> = rows.into_iter().map(AuditRow::of).collect();
                rows.into_py_any(py)
            },
        )
    }
}
