//! `lease._lease.StoreCore`: one store (a SQLite file, a PostgreSQL database or a `lease serve`
//! URL with an API key) and the port's operations, each answered as a `Pending` call that
//! `lease.Store` waits for and `lease.AsyncStore` awaits. Each method here is the one
//! declaration of its Python method: its signature, defaults and docstring are what both
//! classes show. Arguments are checked before the call exists, so bad input raises at once
//! and nothing is sent.

use std::path::PathBuf;
use std::sync::Arc;

use lease_domain::{EnqueueSpec, ErrorText, JobResult, ProgressText, Renewal};
use lease_ports::audit::AuditFilter;
use lease_ports::{LeaseStore, ListFilter};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::args::{self, batch_job, holder, job_at, schedule_name, term};
use crate::errors::{Failure, Outcome, invalid, to_py};
use crate::open::{Backend, Opening, open};
use crate::run::{Pending, block, work};
use crate::values::{
    self, Accepted, AuditRow, Backoff, Failed, Lease, QueueSettings, Record, Refused, Schedule,
    StatsRow, now_or_clock,
};

/// One open store. Use it from the process that opened it: a child made by `fork` must open
/// its own (a pooled connection must not cross a fork).
#[pyclass(module = "lease._lease", frozen)]
pub(crate) struct StoreCore {
    pub(crate) backend: Backend,
    target: String,
    pid: u32,
}

impl StoreCore {
    /// The store, or an error in a process other than the one that opened it.
    pub(crate) fn store(&self, py: Python<'_>) -> PyResult<Arc<dyn LeaseStore>> {
        self.same_process(py)?;
        Ok(self.backend.store())
    }

    fn same_process(&self, py: Python<'_>) -> PyResult<()> {
        if std::process::id() == self.pid {
            Ok(())
        } else {
            Err(crate::errors::raise(
                py,
                "LeaseError",
                format!(
                    "this Store of {} was opened in process {}, before a fork; open a Store in \
                     each process",
                    self.target, self.pid
                ),
            ))
        }
    }

    fn call<T, F, C>(&self, py: Python<'_>, future: F, convert: C) -> PyResult<Pending>
    where
        T: Send + 'static,
        F: Future<Output = Outcome<T>> + Send + 'static,
        C: for<'py> FnOnce(Python<'py>, T) -> PyResult<Py<PyAny>> + Send + 'static,
    {
        self.same_process(py)?;
        Ok(Pending::new(work(future, convert)))
    }

    /// One change of a queue's settings, answered with the settings after it at `now`.
    fn change_queue(
        &self,
        py: Python<'_>,
        queue: &str,
        change: Outcome<lease_domain::QueueChange>,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let (queue, change, now) = to_py(
            py,
            (|| Ok((values::queue(queue)?, change?, now_or_clock(now)?)))(),
        )?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move {
                let settings = control.change_queue(&queue, change).await?;
                Ok((queue, settings))
            },
            move |py, (queue, settings)| QueueSettings::of(&queue, &settings, now).into_py_any(py),
        )
    }
}

fn accepted_or_refused(py: Python<'_>, outcome: lease_ports::WriteOutcome) -> PyResult<Py<PyAny>> {
    match outcome {
        Ok(()) => Accepted.into_py_any(py),
        Err(refused) => Refused::write(&refused).into_py_any(py),
    }
}

#[pymethods]
impl StoreCore {
    /// Opens the store at `target` with the keyword options of `lease.Store`.
    #[new]
    #[pyo3(signature = (target, **options))]
    fn new(
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let target: String = match target.extract::<PathBuf>() {
            Ok(path) if !target.is_instance_of::<PyString>() => path.display().to_string(),
            _ => target.extract()?,
        };
        let how = Opening::read(py, options)?;
        let backend = block(py, open(target.clone(), how))?;
        Ok(Self {
            backend,
            target,
            pid: std::process::id(),
        })
    }

    /// What the store is: `sqlite`, `postgres` or `http`.
    #[getter]
    fn kind(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
            Backend::Http(_) => "http",
        }
    }

    /// The path or URL it was opened with.
    #[getter]
    fn target(&self) -> &str {
        &self.target
    }

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
        let payload = to_py(py, args::payload(payload)?)?;
        let trace = to_py(
            py,
            crate::trace::enqueue_trace(py, traceparent, tracestate)?,
        )?;
        let job = args::JobArgs {
            id: job_id,
            queue,
            priority,
            run_at,
            max_attempts,
            payload,
            timeout,
            replace_finished,
            group,
            debounce,
            after: after.unwrap_or_default(),
            on_parent_failure,
        };
        let (id, mut spec) = to_py(py, job.check())?;
        spec.trace = trace;
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

    /// Leases one job by its id for ``ttl`` seconds: a :class:`Lease` with its new fence,
    /// or :class:`Refused` (``missing``, ``done``, ``live``, ...).
    #[pyo3(signature = (job_id, owner, ttl, *, now = None))]
    fn claim(
        &self,
        py: Python<'_>,
        job_id: &str,
        owner: &str,
        ttl: f64,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let ((id, owner), term) = to_py(
            py,
            holder(job_id, owner).and_then(|h| Ok((h, term(now, ttl)?))),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move {
                let outcome = store.claim(&id, &owner, term).await?;
                Ok((id, term, outcome))
            },
            |py, (id, term, outcome)| match outcome {
                Ok(fence) => Lease::claimed(&id, fence, term).into_py_any(py),
                Err(refused) => Refused::claim(&refused).into_py_any(py),
            },
        )
    }

    /// Leases up to ``limit`` due jobs of ``queue`` (highest priority first, then the
    /// oldest), each a :class:`Lease` with its fence, attempt and payload; an empty list when
    /// none is due.
    #[pyo3(signature = (queue, owner, ttl, *, limit = 1, now = None))]
    fn claim_next(
        &self,
        py: Python<'_>,
        queue: &str,
        owner: &str,
        ttl: f64,
        limit: usize,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let (queue, owner, term) = to_py(
            py,
            (|| {
                Ok((
                    values::queue(queue)?,
                    values::owner(owner)?,
                    term(now, ttl)?,
                ))
            })(),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.claim_next(&queue, &owner, term, limit).await?) },
            |py, leases| {
                let leases: Vec<Lease> = leases.iter().map(|l| Lease::of(py, l)).collect();
                leases.into_py_any(py)
            },
        )
    }

    /// Extends the live lease of ``owner`` at ``fence`` to ``now + ttl``.
    #[pyo3(signature = (job_id, owner, fence, ttl, *, now = None))]
    fn renew(
        &self,
        py: Python<'_>,
        job_id: &str,
        owner: &str,
        fence: &Bound<'_, PyAny>,
        ttl: f64,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let fence = to_py(py, values::fence(fence)?)?;
        let ((id, owner), term) = to_py(
            py,
            holder(job_id, owner).and_then(|h| Ok((h, term(now, ttl)?))),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.renew(&id, &owner, fence, term).await?) },
            accepted_or_refused,
        )
    }

    /// Holds the job's group until ``until`` (Unix seconds), only for the live current
    /// lease: the queue leases none of the group's jobs until then (or later, if it was
    /// paused longer). Refused (``Refused``, reason ``no_group``) for a job without a group.
    #[pyo3(signature = (job_id, owner, fence, until, *, now = None))]
    fn hold_group(
        &self,
        py: Python<'_>,
        job_id: &str,
        owner: &str,
        fence: &Bound<'_, PyAny>,
        until: f64,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let fence = to_py(py, values::fence(fence)?)?;
        let ((id, owner), now, until) = to_py(
            py,
            (|| {
                Ok((
                    holder(job_id, owner)?,
                    now_or_clock(now)?,
                    values::time("until", until)?,
                ))
            })(),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.hold_group(&id, &owner, fence, now, until).await?) },
            accepted_or_refused,
        )
    }

    /// Keeps a checkpoint (a durable step's result: ``value`` under ``name``, 1 to 256 bytes),
    /// only for the live current lease: kept across failed attempts, expired leases and
    /// retries; a name written again is replaced. A stale holder gets :class:`Refused`
    /// (``stale``) and nothing is kept; a new name past the job's 1,000 raises
    /// :class:`InvalidInput`.
    #[pyo3(signature = (job_id, owner, fence, name, value, *, now = None))]
    #[allow(clippy::too_many_arguments)] // The Python method's own arguments, one each.
    fn checkpoint(
        &self,
        py: Python<'_>,
        job_id: &str,
        owner: &str,
        fence: &Bound<'_, PyAny>,
        name: &str,
        value: &str,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let fence = to_py(py, values::fence(fence)?)?;
        let ((id, owner), now, checkpoint) = to_py(
            py,
            (|| {
                Ok((
                    holder(job_id, owner)?,
                    now_or_clock(now)?,
                    values::checkpoint(name, value)?,
                ))
            })(),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move {
                Ok(store
                    .checkpoint(&id, &owner, fence, now, &checkpoint)
                    .await?)
            },
            accepted_or_refused,
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

    /// Stores ``text`` (up to 1,024 bytes) as the job's progress, only for the live current
    /// lease; with ``ttl`` the lease is renewed to ``now + ttl``, without it the lease keeps
    /// its end.
    #[pyo3(signature = (job_id, owner, fence, text, *, ttl = None, now = None))]
    #[allow(clippy::too_many_arguments)] // The Python method's own arguments, one each.
    fn progress(
        &self,
        py: Python<'_>,
        job_id: &str,
        owner: &str,
        fence: &Bound<'_, PyAny>,
        text: &str,
        ttl: Option<f64>,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let fence = to_py(py, values::fence(fence)?)?;
        let ((id, owner), renewal, text) = to_py(
            py,
            (|| {
                let renewal = match ttl {
                    Some(ttl) => Renewal::Renew(term(now, ttl)?),
                    None => Renewal::Keep(now_or_clock(now)?),
                };
                Ok((
                    holder(job_id, owner)?,
                    renewal,
                    ProgressText::new(text).or_else(|e| invalid(format!("progress: {e}")))?,
                ))
            })(),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.progress(&id, &owner, fence, renewal, &text).await?) },
            accepted_or_refused,
        )
    }

    /// Stores ``result`` and marks the job done, only for the live current lease; a stale
    /// holder gets :class:`Refused` (``stale``, with both fences) and the stored result
    /// stands.
    #[pyo3(signature = (job_id, owner, fence, result = "", *, now = None))]
    fn complete(
        &self,
        py: Python<'_>,
        job_id: &str,
        owner: &str,
        fence: &Bound<'_, PyAny>,
        result: &str,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let fence = to_py(py, values::fence(fence)?)?;
        let ((id, owner), now, result) = to_py(
            py,
            (|| {
                Ok((
                    holder(job_id, owner)?,
                    now_or_clock(now)?,
                    JobResult::new(result).or_else(|e| invalid(format!("result: {e}")))?,
                ))
            })(),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.complete(&id, &owner, fence, now, &result).await?) },
            accepted_or_refused,
        )
    }

    /// Reports a failure of the live current lease: the job is retried after ``backoff``
    /// while attempts remain (``retry=False``: straight to dead).
    #[pyo3(signature = (job_id, owner, fence, error, *, retry = true, backoff = None, now = None))]
    #[allow(clippy::too_many_arguments)] // A failure's fields, as the caller names them.
    fn fail(
        &self,
        py: Python<'_>,
        job_id: &str,
        owner: &str,
        fence: &Bound<'_, PyAny>,
        error: &str,
        retry: bool,
        backoff: Option<PyRef<'_, Backoff>>,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let fence = to_py(py, values::fence(fence)?)?;
        let ((id, owner), now, error, retry) = to_py(
            py,
            (|| {
                Ok((
                    holder(job_id, owner)?,
                    now_or_clock(now)?,
                    ErrorText::new(error).or_else(|e| invalid(format!("error: {e}")))?,
                    values::retry(retry, backoff.as_deref())?,
                ))
            })(),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.fail(&id, &owner, fence, now, &error, retry).await?) },
            |py, outcome| match outcome {
                Ok(failed) => Failed::of(&failed).into_py_any(py),
                Err(refused) => Refused::write(&refused).into_py_any(py),
            },
        )
    }

    /// Gives the lease back (the fence is kept), so the job can be claimed at once; with
    /// `unstarted=True` (the job was never started) the attempt its claim counted is given back
    /// too.
    #[pyo3(signature = (job_id, owner, fence, *, unstarted = false))]
    fn release(
        &self,
        py: Python<'_>,
        job_id: &str,
        owner: &str,
        fence: &Bound<'_, PyAny>,
        unstarted: bool,
    ) -> PyResult<Pending> {
        let fence = to_py(py, values::fence(fence)?)?;
        let (id, owner) = to_py(py, holder(job_id, owner))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move {
                Ok(if unstarted {
                    store.give_back(&id, &owner, fence).await?
                } else {
                    store.release(&id, &owner, fence).await?
                })
            },
            accepted_or_refused,
        )
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

    /// Pauses ``queue`` (until resumed, or until the time ``until``): no claim leases its
    /// jobs from the moment the pause commits; enqueueing goes on and running leases are
    /// untouched. With ``group``, pauses only that group of the queue: its jobs are not
    /// leased while the queue's other groups run. Returns the queue's :class:`QueueSettings`.
    #[pyo3(signature = (queue, *, until = None, group = None, now = None))]
    fn pause(
        &self,
        py: Python<'_>,
        queue: &str,
        until: Option<f64>,
        group: Option<&str>,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let change = (|| {
            let until = until.map(|t| values::time("until", t)).transpose()?;
            Ok(match group.map(args::group).transpose()? {
                Some(group) => lease_domain::QueueChange::PauseGroup(group, until),
                None => lease_domain::QueueChange::Pause(until),
            })
        })();
        self.change_queue(py, queue, change, now)
    }

    /// Ends a pause of ``queue``, or with ``group`` of that group only.
    #[pyo3(signature = (queue, *, group = None, now = None))]
    fn resume(
        &self,
        py: Python<'_>,
        queue: &str,
        group: Option<&str>,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let change = group.map(args::group).transpose().map(|group| match group {
            Some(group) => lease_domain::QueueChange::ResumeGroup(group),
            None => lease_domain::QueueChange::Resume,
        });
        self.change_queue(py, queue, change, now)
    }

    /// Sets ``queue``'s concurrency limit (the most of its leases live at once, across
    /// every worker; 0 removes it), its default timeout in seconds (``no_timeout=True``
    /// removes it), the most live leases of each of its groups (``per_group``; 0 removes it)
    /// and whether each group runs one job at a time in claim order (``ordered``), the most
    /// leases of the queue granted in any window of a period (``rate``, ``"N/PERIOD"`` such as
    /// ``"100/1m"``; ``"none"`` removes it) and of each group (``rate_per_group``), and whether
    /// claims serve the groups in turn, the group served least recently first (``fair``). All
    /// given are one change, applied together or not at all.
    #[pyo3(signature = (queue, *, concurrency = None, timeout = None, no_timeout = false, per_group = None, ordered = None, rate = None, rate_per_group = None, fair = None, now = None))]
    #[allow(clippy::too_many_arguments)] // A queue's settings, as the caller names them.
    fn limit(
        &self,
        py: Python<'_>,
        queue: &str,
        concurrency: Option<u32>,
        timeout: Option<f64>,
        no_timeout: bool,
        per_group: Option<u32>,
        ordered: Option<bool>,
        rate: Option<&str>,
        rate_per_group: Option<&str>,
        fair: Option<bool>,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let rate_of = |name: &str, text: &str| -> Result<Option<lease_domain::Rate>, Failure> {
            if text == "none" {
                return Ok(None);
            }
            lease_domain::Rate::parse(text)
                .map(Some)
                .map_err(|e| Failure::Input(format!("{name}: {e}")))
        };
        let change = (|| {
            let timeout = match (timeout, no_timeout) {
                (Some(_), true) => {
                    return invalid("give timeout or no_timeout, not both".to_owned());
                }
                (Some(t), false) => Some(Some(
                    lease_domain::Ttl::new(t)
                        .map_err(|e| Failure::Input(format!("timeout: {e}")))?,
                )),
                (None, true) => Some(None),
                (None, false) => None,
            };
            // All given are one change: applied together or not at all.
            lease_domain::QueueChange::set(lease_domain::Limits {
                concurrency: concurrency.map(lease_domain::Concurrency::new),
                timeout,
                per_group: per_group.map(lease_domain::Concurrency::new),
                ordered,
                rate: rate.map(|r| rate_of("rate", r)).transpose()?,
                rate_per_group: rate_per_group
                    .map(|r| rate_of("rate_per_group", r))
                    .transpose()?,
                fair,
            })
            .map_or_else(
                || {
                    invalid(
                        "give concurrency (0 removes the limit), timeout, no_timeout, per_group, \
                         ordered, rate, rate_per_group or fair"
                            .to_owned(),
                    )
                },
                Ok,
            )
        })();
        self.change_queue(py, queue, change, now)
    }

    /// ``queue``'s busiest groups at ``now`` (most unfinished jobs first, at most ``limit``,
    /// 1 to 1,000), each as :class:`GroupLoad`: its waiting and running jobs, and whether it
    /// is paused or throttled.
    #[pyo3(signature = (queue, *, limit = 10, now = None))]
    fn groups(
        &self,
        py: Python<'_>,
        queue: &str,
        limit: usize,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let (queue, now) = to_py(
            py,
            (|| {
                if !(1..=1000).contains(&limit) {
                    return invalid(format!("limit: {limit} is not 1 to 1000"));
                }
                Ok((values::queue(queue)?, now_or_clock(now)?))
            })(),
        )?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move {
                let standings =
                    lease_ports::control::busiest_groups(&*control, &queue, now, limit).await?;
                Ok(standings
                    .iter()
                    .map(values::GroupLoad::of)
                    .collect::<Vec<_>>())
            },
            |py, loads| loads.into_py_any(py),
        )
    }

    /// Where ``queue``'s rates stand at ``now``, as :class:`Throttle`: when its rate lets a
    /// claim lease again, if it lets none now, and the same for each throttled group.
    #[pyo3(signature = (queue, *, now = None))]
    fn throttle(&self, py: Python<'_>, queue: &str, now: Option<f64>) -> PyResult<Pending> {
        let (queue, now) = to_py(py, (|| Ok((values::queue(queue)?, now_or_clock(now)?)))())?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move {
                let throttle = control.throttle(&queue, now).await?;
                Ok((queue, throttle))
            },
            |py, (queue, throttle)| values::Throttle::of(&queue, &throttle).into_py_any(py),
        )
    }

    /// Every queue that has settings, as :class:`QueueSettings` (``paused`` as of ``now``).
    #[pyo3(signature = (*, now = None))]
    fn queues(&self, py: Python<'_>, now: Option<f64>) -> PyResult<Pending> {
        let now = to_py(py, now_or_clock(now))?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move { Ok(control.queues().await?) },
            move |py, rows| {
                let rows: Vec<QueueSettings> = rows
                    .iter()
                    .map(|(queue, settings)| QueueSettings::of(queue, settings, now))
                    .collect();
                rows.into_py_any(py)
            },
        )
    }

    /// Makes or changes the schedule ``name``: each tick of ``cron`` in the time zone ``tz``
    /// enqueues one job in ``queue``, its id ``NAME@TICK`` (the tick in UTC). ``catch_up`` is
    /// what a pass does after downtime: ``latest``, ``none``, ``all`` or ``all:N``. A change
    /// keeps the last tick, so no tick fires twice. Every ``lease serve`` and ``lease work``
    /// on the store runs the schedules.
    #[pyo3(signature = (name, *, cron, queue, tz = "UTC", priority = 0, max_attempts = None, timeout = None, payload = None, catch_up = "latest", now = None))]
    #[allow(clippy::too_many_arguments)] // A schedule's fields, each a keyword.
    fn put_schedule(
        &self,
        py: Python<'_>,
        name: &str,
        cron: &str,
        queue: &str,
        tz: &str,
        priority: i64,
        max_attempts: Option<u32>,
        timeout: Option<f64>,
        payload: Option<&Bound<'_, PyAny>>,
        catch_up: &str,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let payload = args::payload(payload)?;
        let spec = to_py(
            py,
            (|| {
                let name = schedule_name(name)?;
                // The calendar reads the expression and the zone now, so a bad one is refused
                // before anything is sent.
                lease_schedule::Calendar::new(cron, tz).or_else(|e| invalid(e.to_string()))?;
                Ok(lease_domain::ScheduleSpec {
                    name,
                    cron: cron.to_owned(),
                    zone: tz.to_owned(),
                    job: EnqueueSpec {
                        queue: values::queue(queue)?,
                        priority,
                        max_attempts,
                        timeout: timeout
                            .map(|t| {
                                lease_domain::Ttl::new(t)
                                    .map_err(|e| Failure::Input(format!("timeout: {e}")))
                            })
                            .transpose()?,
                        payload: payload?,
                        ..EnqueueSpec::default()
                    },
                    catch_up: lease_domain::CatchUp::parse(catch_up)
                        .or_else(|e| invalid(format!("catch_up: {e}")))?,
                })
            })(),
        )?;
        let now = to_py(py, now_or_clock(now))?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move { Ok(control.put_schedule(&spec, now).await?) },
            move |py, schedule| Schedule::of(&schedule, now).into_py_any(py),
        )
    }

    /// Every schedule, as :class:`Schedule` (with its next tick after ``now``).
    #[pyo3(signature = (*, now = None))]
    fn schedules(&self, py: Python<'_>, now: Option<f64>) -> PyResult<Pending> {
        let now = to_py(py, now_or_clock(now))?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move { Ok(control.schedules().await?) },
            move |py, schedules| {
                let rows: Vec<Schedule> = schedules.iter().map(|s| Schedule::of(s, now)).collect();
                rows.into_py_any(py)
            },
        )
    }

    /// Removes a schedule (the jobs its ticks made stay); ``False`` when there was none.
    #[pyo3(signature = (name))]
    fn remove_schedule(&self, py: Python<'_>, name: &str) -> PyResult<Pending> {
        let name = to_py(py, schedule_name(name))?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move { Ok(control.remove_schedule(&name).await?) },
            |py, removed| removed.into_py_any(py),
        )
    }

    /// Enqueues the schedule's job now, outside its ticks, as ``NAME@run-TIME`` (runs asked
    /// for within one second are one job). Returns ``(job_id, inserted)``, or ``None`` when
    /// there is no such schedule.
    #[pyo3(signature = (name, *, now = None))]
    fn run_schedule(&self, py: Python<'_>, name: &str, now: Option<f64>) -> PyResult<Pending> {
        let name = to_py(py, schedule_name(name))?;
        let now = to_py(py, now_or_clock(now))?;
        self.same_process(py)?;
        let control = self.backend.control();
        self.call(
            py,
            async move { Ok(lease_schedule::run_now(&*control, &name, now).await?) },
            |py, ran| {
                ran.map(|ran| (ran.id.as_str().to_owned(), ran.inserted))
                    .into_py_any(py)
            },
        )
    }

    fn __repr__(&self) -> String {
        format!("Store({:?})", self.target)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<StoreCore>()?;
    Ok(())
}

/// `payloads` sealed for their jobs with the keys of the environment, when it gives any
/// (docs/ENCRYPTION.md): a payload leaves the process sealed. Bad keys are a `ValueError`
/// naming the variable, never the key.
fn sealed<'a>(
    payloads: impl IntoIterator<
        Item = (
            &'a lease_domain::JobId,
            &'a mut Option<lease_domain::Payload>,
        ),
    >,
) -> crate::errors::Outcome<()> {
    lease_seal::seal_payloads_from_env(payloads).or_else(|e| invalid(e.to_string()))
}
