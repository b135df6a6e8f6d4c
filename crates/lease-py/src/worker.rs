//! `lease._lease.WorkerCore`: `lease_worker`'s runtime (claims, heartbeat, retries, the stop
//! when a lease is lost, the drain at shutdown) running a Python function per job. Each call
//! of the function runs on a thread of the runtime's blocking pool, attached to the
//! interpreter; the function gets a `Job` with its fence and a cancellation it can poll or
//! wait on. A Python thread cannot be killed: a function that ignores the cancellation runs
//! on, but nothing it returns is reported for that lease.

use std::sync::Arc;
use std::time::Duration;

use lease_domain::Ttl;
use lease_worker::{CancellationToken, HandlerResult, JobContext, Worker, WorkerConfig};
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::args::Options;
use crate::errors::{Outcome, invalid, to_py};
use crate::run::runtime;
use crate::store::StoreCore;
use crate::values::{self, Backoff};

/// How long the running worker waits before it looks whether Ctrl-C was pressed.
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

/// One job as the handler sees it.
#[pyclass(module = "lease", frozen)]
pub(crate) struct Job {
    id: String,
    fence: u64,
    attempt: u32,
    payload: Option<Py<PyBytes>>,
    cancel: CancellationToken,
    timeout: Option<f64>,
    group: Option<String>,
    /// The trace context the job was enqueued with: read as the attempt starts when the
    /// worker traces, else from the store the first time the handler asks.
    trace: std::sync::OnceLock<Option<lease_domain::TraceContext>>,
    /// The lease's context: its holder's writes (progress, a hold of the group) go through it.
    context: JobContext,
}

impl Job {
    /// The job's trace context, read from the store once, when first asked.
    fn enqueued_trace(&self, py: Python<'_>) -> PyResult<Option<&lease_domain::TraceContext>> {
        if let Some(known) = self.trace.get() {
            return Ok(known.as_ref());
        }
        let runtime = to_py(py, runtime())?;
        let context = self.context.clone();
        let read = py.detach(|| runtime.block_on(context.enqueued_trace()));
        let read = to_py(py, read.map_err(Into::into))?;
        Ok(self.trace.get_or_init(|| read).as_ref())
    }
}

#[pymethods]
impl Job {
    /// The job's id.
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// The fence of this lease: present it to every resource the job writes to.
    #[getter]
    fn fence(&self) -> u64 {
        self.fence
    }

    /// Which attempt this is (1 for the first).
    #[getter]
    fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The job's payload, if it has one.
    #[getter]
    fn payload(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.payload.as_ref().map(|p| p.clone_ref(py))
    }

    /// True once the lease is lost or the job cancelled: stop, because nothing this run
    /// returns will be stored.
    #[getter]
    fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Waits, with the interpreter released, until the job is cancelled or `timeout` seconds
    /// pass (None: no limit); True when cancelled.
    #[pyo3(signature = (timeout = None))]
    fn wait_cancelled(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let limit = match timeout {
            Some(t) => Some(to_py(
                py,
                Duration::try_from_secs_f64(t)
                    .or_else(|_| invalid(format!("timeout: must be 0 or more seconds, got {t}"))),
            )?),
            None => None,
        };
        let runtime = to_py(py, runtime())?;
        let cancel = self.cancel.clone();
        Ok(py.detach(|| {
            runtime.block_on(async {
                match limit {
                    Some(limit) => tokio::time::timeout(limit, cancel.cancelled())
                        .await
                        .is_ok(),
                    None => {
                        cancel.cancelled().await;
                        true
                    }
                }
            })
        }))
    }

    /// How long this attempt may run, in seconds (the job's timeout, else its queue's), if it
    /// is limited: past it the worker cancels the job and fails it "timed out".
    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.timeout
    }

    /// The job's group in its queue, if it has one.
    #[getter]
    fn group(&self) -> Option<String> {
        self.group.clone()
    }

    /// The W3C ``traceparent`` the job was enqueued with, if it has one, with or without a
    /// ``tracer`` (propagation does not depend on export): read with the attempt when the
    /// worker traces, else from the store the first time it is asked (with the interpreter
    /// released; a handler that never asks pays nothing).
    #[getter]
    fn traceparent(&self, py: Python<'_>) -> PyResult<Option<String>> {
        Ok(self.enqueued_trace(py)?.map(|t| t.traceparent().to_owned()))
    }

    /// The W3C ``tracestate`` that came with :attr:`traceparent`, if any.
    #[getter]
    fn tracestate(&self, py: Python<'_>) -> PyResult<Option<String>> {
        Ok(self
            .enqueued_trace(py)?
            .and_then(|t| t.tracestate().map(str::to_owned)))
    }

    /// Stores `text` (up to 1,024 bytes) as the job's progress under this lease's fence, and
    /// renews the lease; True when stored, False when the lease is no longer this run's
    /// (nothing is stored then). Waits with the interpreter released.
    fn progress(&self, py: Python<'_>, text: &str) -> PyResult<bool> {
        let runtime = to_py(py, runtime())?;
        let progress = self.context.progress.clone();
        let answer = py.detach(|| runtime.block_on(progress.report(text)));
        to_py(
            py,
            answer.map(|outcome| outcome.is_ok()).map_err(Into::into),
        )
    }

    /// Holds the job's group for ``seconds`` from now (what an upstream's ``Retry-After``
    /// says): the queue leases none of the group's jobs until then (or later, if it was
    /// paused longer). A fenced write: True when held, False when the lease is no longer this
    /// run's or the job has no group (nothing is paused then). Waits with the interpreter
    /// released.
    fn hold_group(&self, py: Python<'_>, seconds: f64) -> PyResult<bool> {
        if !(seconds.is_finite() && (0.0..=86_400.0).contains(&seconds)) {
            return to_py(
                py,
                invalid(format!("seconds: must be from 0 to 86400, got {seconds}")),
            );
        }
        let runtime = to_py(py, runtime())?;
        let context = self.context.clone();
        let answer = py.detach(|| runtime.block_on(context.hold_group_for(seconds)));
        to_py(
            py,
            answer.map(|outcome| outcome.is_ok()).map_err(Into::into),
        )
    }

    /// The job's parents (the jobs it ran after): a dict ``{id: {"status", "result",
    /// "result_fence"}}`` in the order they were named, read from the store when called;
    /// empty for a job without parents. Waits with the interpreter released.
    fn parents(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        let runtime = to_py(py, runtime())?;
        let context = self.context.clone();
        let answer = py.detach(|| runtime.block_on(context.parents()));
        let parents = to_py(py, answer.map_err(Into::into))?;
        let shown = PyDict::new(py);
        for parent in parents {
            let one = PyDict::new(py);
            one.set_item("status", parent.status.as_str())?;
            one.set_item("result", parent.result)?;
            one.set_item(
                "result_fence",
                parent.result_fence.map(lease_domain::Fence::get),
            )?;
            shown.set_item(parent.id.as_str(), one)?;
        }
        Ok(shown.unbind())
    }

    /// Keeps a checkpoint of this attempt (a step's result: ``value`` under ``name``) under
    /// its lease's fence, kept across failed attempts, expiry and retries so that the next
    /// attempt can resume; True when kept, False when the lease is no longer this run's
    /// (nothing is kept then). Waits with the interpreter released.
    fn checkpoint(&self, py: Python<'_>, name: &str, value: &str) -> PyResult<bool> {
        let runtime = to_py(py, runtime())?;
        let context = self.context.clone();
        let answer = py.detach(|| runtime.block_on(context.checkpoint(name, value)));
        to_py(
            py,
            answer.map(|outcome| outcome.is_ok()).map_err(Into::into),
        )
    }

    /// The checkpoints this job keeps (from this attempt and earlier ones), ``{name: value}``,
    /// read from the store when called. Waits with the interpreter released.
    fn checkpoints(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        let runtime = to_py(py, runtime())?;
        let context = self.context.clone();
        let answer = py.detach(|| runtime.block_on(context.checkpoints()));
        let kept = to_py(py, answer.map_err(Into::into))?;
        let shown = PyDict::new(py);
        for (name, value) in kept {
            shown.set_item(name, value)?;
        }
        Ok(shown.unbind())
    }

    /// A durable step: the value an attempt of this job kept under ``name``, if one did;
    /// else calls ``step()`` (which returns a ``str``), keeps what it returns, and returns
    /// it. A step that raises keeps nothing (the next attempt calls it again). Raises
    /// :class:`LeaseLost` when the value cannot be kept because the lease is no longer this
    /// run's: stop then, nothing this run reports will count.
    fn step(&self, py: Python<'_>, name: &str, step: &Bound<'_, PyAny>) -> PyResult<String> {
        let kept = self.checkpoints(py)?;
        if let Some(value) = kept.bind(py).get_item(name)? {
            return value.extract();
        }
        let value = step.call0()?;
        let text: String = value.extract().map_err(|_| {
            crate::errors::raise(
                py,
                "InvalidInput",
                format!("step {name:?}: the step must return a str to keep"),
            )
        })?;
        if self.checkpoint(py, name, &text)? {
            Ok(text)
        } else {
            Err(crate::errors::raise(
                py,
                "LeaseLost",
                format!(
                    "step {name:?} not kept: this run's lease of job {} was lost",
                    self.id
                ),
            ))
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Job(id={:?}, fence={}, attempt={})",
            self.id, self.fence, self.attempt
        )
    }
}

/// The text a handler's exception fails its job with: its class and message.
fn error_text(py: Python<'_>, error: &PyErr) -> String {
    let class = error
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".to_owned());
    let message = error
        .value(py)
        .str()
        .map(|s| s.to_string())
        .unwrap_or_default();
    if message.is_empty() {
        class
    } else {
        format!("{class}: {message}")
    }
}

/// Calls the Python handler for one job.
fn call_handler(handler: &Py<PyAny>, context: JobContext) -> HandlerResult {
    Python::attach(|py| {
        let job = Job {
            id: context.job.as_str().to_owned(),
            fence: context.fence.get(),
            attempt: context.attempt,
            payload: context
                .payload
                .as_deref()
                .map(|p| PyBytes::new(py, p).unbind()),
            cancel: context.cancel.clone(),
            timeout: context.timeout.map(Ttl::get),
            group: context.group.as_ref().map(|g| g.as_str().to_owned()),
            trace: context
                .trace
                .clone()
                .map(|known| std::sync::OnceLock::from(Some(known)))
                .unwrap_or_default(),
            context: context.clone(),
        };
        let answer = handler.call1(py, (job,)).map_err(|e| error_text(py, &e))?;
        if answer.is_none(py) {
            return Ok(String::new());
        }
        answer.extract::<String>(py).map_err(|_| {
            let class = answer
                .bind(py)
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            format!("the handler returned a {class}, not a str or None")
        })
    })
}

/// A worker of one queue, running a Python function per job.
#[pyclass(module = "lease._lease", frozen)]
pub(crate) struct WorkerCore {
    store: Py<StoreCore>,
    handler: Arc<Py<PyAny>>,
    config: WorkerConfig,
}

fn duration(what: &str, seconds: f64) -> Outcome<Duration> {
    Duration::try_from_secs_f64(seconds)
        .or_else(|_| invalid(format!("{what}: must be 0 or more seconds, got {seconds}")))
}

#[pymethods]
impl WorkerCore {
    /// A worker of `store` running `handler`, with the keyword options of `lease.Worker`.
    #[new]
    #[pyo3(signature = (store, handler, **options))]
    fn new(
        py: Python<'_>,
        store: Py<StoreCore>,
        handler: Py<PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        if !handler.bind(py).is_callable() {
            return to_py(py, invalid("handler: must be callable, as handler(job)"));
        }
        let options = Options::new(options)?;
        let queue: String = options.need(py, "queue")?;
        let owner: String = options.need(py, "owner")?;
        let ttl: f64 = options.need(py, "ttl")?;
        let concurrency: usize = options.need(py, "concurrency")?;
        let prefetch: Option<i64> = options.take("prefetch")?;
        let seal_results: bool = options.need(py, "seal_results")?;
        let require_sealed: Option<bool> = options.take("require_sealed")?;
        let renew_fraction: f64 = options.need(py, "renew_fraction")?;
        let idle_poll: f64 = options.need(py, "idle_poll")?;
        let retry: bool = options.need(py, "retry")?;
        let backoff: Option<PyRef<'_, Backoff>> = options.take("backoff")?;
        let max_jobs: Option<usize> = options.take("max_jobs")?;
        let exit_when_empty: bool = options.need(py, "exit_when_empty")?;
        let drain: f64 = options.need(py, "drain")?;
        let cancel_grace: f64 = options.need(py, "cancel_grace")?;
        let traced: bool = options.need(py, "trace")?;
        to_py(py, options.finish("a worker")?)?;
        let config = to_py(
            py,
            (|| {
                if concurrency == 0 {
                    return invalid("concurrency: must be at least 1");
                }
                if !(renew_fraction.is_finite() && renew_fraction > 0.0 && renew_fraction < 1.0) {
                    return invalid(format!(
                        "renew_fraction: must be above 0 and below 1, got {renew_fraction}"
                    ));
                }
                let ttl = Ttl::new(ttl).or_else(|e| invalid(format!("ttl: {e}")))?;
                let mut config =
                    WorkerConfig::new(values::queue(&queue)?, values::owner(&owner)?, ttl);
                config.concurrency = concurrency;
                config.prefetch =
                    match prefetch {
                        Some(n) => Some(usize::try_from(n).or_else(|_| {
                            invalid(format!("prefetch: must be 0 or more, got {n}"))
                        })?),
                        None => None,
                    };
                config.renew_fraction = renew_fraction;
                config.idle_poll = duration("idle_poll", idle_poll)?;
                config.retry = values::retry(retry, backoff.as_deref())?;
                config.max_jobs = max_jobs;
                config.exit_when_empty = exit_when_empty;
                config.drain = duration("drain", drain)?;
                config.cancel_grace = duration("cancel_grace", cancel_grace)?;
                // Sealed payloads are opened for the handler (docs/ENCRYPTION.md).
                config.keys = lease_seal::Keyring::from_env()
                    .or_else(|e| invalid(e.to_string()))?
                    .map(Arc::new);
                let require_sealed = match require_sealed {
                    Some(given) => given,
                    None => {
                        lease_seal::require_sealed_from_env().or_else(|e| invalid(e.to_string()))?
                    }
                };
                for (asked, what) in [
                    (seal_results, "seal_results"),
                    (require_sealed, "require_sealed"),
                ] {
                    if asked && config.keys.is_none() {
                        return invalid(format!(
                            "{what}: needs a key: set LEASE_PAYLOAD_KEY or LEASE_PAYLOAD_KEY_FILE"
                        ));
                    }
                }
                config.seal_results = seal_results;
                config.require_sealed = require_sealed;
                // The job's trace context is read for the handler's own span (the Python
                // `Worker`'s, in its tracer); the runtime's span is not exported from here.
                if traced {
                    config.trace = Some(lease_worker::TraceJoin(Arc::new(|_, _, _| {})));
                }
                Ok(config)
            })(),
        )?;
        Ok(Self {
            store,
            handler: Arc::new(handler),
            config,
        })
    }

    /// Runs until the queue is empty (with `exit_when_empty`), `max_jobs` are done, or Ctrl-C:
    /// the first stops claiming and lets running jobs finish within `drain`, a second releases
    /// them at once; then the `KeyboardInterrupt` goes on. Returns the counts of what it did.
    fn run(&self, py: Python<'_>) -> PyResult<Summary> {
        let store = self.store.get().store(py)?;
        let handler = Arc::clone(&self.handler);
        let runtime = to_py(py, runtime())?;
        let worker = Worker::new(
            store,
            move |context: JobContext| {
                let handler = Arc::clone(&handler);
                async move {
                    tokio::task::spawn_blocking(move || call_handler(&handler, context))
                        .await
                        .unwrap_or_else(|e| Err(format!("the handler's thread stopped: {e}")))
                }
            },
            self.config.clone(),
        );
        let (shutdown, abort) = (CancellationToken::new(), CancellationToken::new());
        let mut run = Box::pin(worker.run_with_abort(shutdown.clone(), abort.clone()));
        let mut interrupted: Option<PyErr> = None;
        let summary = loop {
            let slice = py.detach(|| {
                runtime.block_on(async { tokio::time::timeout(SIGNAL_SLICE, &mut run).await })
            });
            match slice {
                Ok(done) => break done,
                Err(_) => {
                    if let Err(signal) = py.check_signals() {
                        if interrupted.is_some() {
                            abort.cancel();
                        } else {
                            shutdown.cancel();
                        }
                        interrupted = Some(signal);
                    }
                }
            }
        };
        let summary = to_py(py, summary.map_err(crate::errors::Failure::from))?;
        match interrupted {
            Some(signal) if signal.is_instance_of::<PyKeyboardInterrupt>(py) => Err(signal),
            Some(other) => Err(other),
            None => Ok(Summary::of(summary)),
        }
    }
}

/// What a worker did.
#[pyclass(module = "lease", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct Summary {
    /// Jobs completed.
    completed: usize,
    /// Jobs failed (retried later, or dead).
    failed: usize,
    /// Jobs whose lease was lost before their result could be stored.
    lost: usize,
    /// Jobs released at shutdown.
    released: usize,
    /// Jobs whose result could not be reported.
    unreported: usize,
}

impl Summary {
    fn of(summary: lease_worker::Summary) -> Self {
        Self {
            completed: summary.completed,
            failed: summary.failed,
            lost: summary.lost,
            released: summary.released,
            unreported: summary.unreported,
        }
    }
}

#[pymethods]
impl Summary {
    fn __repr__(&self) -> String {
        format!(
            "Summary(completed={}, failed={}, lost={}, released={}, unreported={})",
            self.completed, self.failed, self.lost, self.released, self.unreported
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<WorkerCore>()?;
    m.add_class::<Job>()?;
    m.add_class::<Summary>()?;
    Ok(())
}
