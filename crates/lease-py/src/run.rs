//! Where the package's async Rust runs: one Tokio runtime per process (a new one after a fork,
//! whose child inherits the parent's runtime without its threads), and `Pending`, a call that
//! has not run yet, which the blocking API waits for with the interpreter released (and
//! Ctrl-C still heard) and the asyncio API awaits.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::{Failure, Outcome, to_py};

/// How long a blocked call waits before it looks whether Ctrl-C was pressed.
const SIGNAL_SLICE: Duration = Duration::from_millis(100);

/// The runtime, and the process that started it.
static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// This process's runtime, started on first use.
///
/// # Errors
/// When the runtime cannot start (no threads).
pub(crate) fn runtime() -> Outcome<Arc<Runtime>> {
    let pid = std::process::id();
    let mut held = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((started_in, runtime)) = held.as_ref() {
        if *started_in == pid {
            return Ok(Arc::clone(runtime));
        }
    }
    // A runtime inherited through fork has none of its threads here; dropping it would wait
    // for them forever, so it is left as it is and another one started.
    if let Some(inherited) = held.take() {
        std::mem::forget(inherited);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("lease")
        .build()
        .map(Arc::new)
        .map_err(|e| Failure::Other(format!("cannot start the runtime: {e}")))?;
    *held = Some((pid, Arc::clone(&runtime)));
    Ok(runtime)
}

/// Turns a call's Rust value into its Python value, once attached.
pub(crate) type Convert = Box<dyn for<'py> FnOnce(Python<'py>) -> PyResult<Py<PyAny>> + Send>;

/// A call's work: a future whose value is converted once the interpreter is attached.
pub(crate) type Work = Pin<Box<dyn Future<Output = Outcome<Convert>> + Send>>;

/// Wraps a future and the conversion of its value into a call's work.
pub(crate) fn work<T, F, C>(future: F, convert: C) -> Work
where
    T: Send + 'static,
    F: Future<Output = Outcome<T>> + Send + 'static,
    C: for<'py> FnOnce(Python<'py>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    Box::pin(async move {
        let value = future.await?;
        let convert: Convert = Box::new(move |py| convert(py, value));
        Ok(convert)
    })
}

/// Runs `future` to its end on this thread with the interpreter released, looking for Ctrl-C
/// every 100 ms (a `KeyboardInterrupt` drops the future: what it already sent stays sent).
///
/// # Errors
/// The future's failure, or the signal's exception.
pub(crate) fn block<T: Send>(
    py: Python<'_>,
    future: impl Future<Output = Outcome<T>> + Send,
) -> PyResult<T> {
    let runtime = to_py(py, runtime())?;
    let mut future = Box::pin(future);
    loop {
        let slice = py.detach(|| {
            runtime.block_on(async { tokio::time::timeout(SIGNAL_SLICE, &mut future).await })
        });
        match slice {
            Ok(done) => return to_py(py, done),
            Err(_) => py.check_signals()?,
        }
    }
}

/// A call of the store or a guard, not run yet: `wait()` runs it and returns its value (the
/// blocking API), and awaiting it runs it on the package's runtime (the asyncio API). It runs
/// once.
#[pyclass(module = "lease._lease", frozen)]
pub(crate) struct Pending {
    work: Mutex<Option<Work>>,
}

impl Pending {
    pub(crate) fn new(work: Work) -> Self {
        Self {
            work: Mutex::new(Some(work)),
        }
    }

    fn take(&self, py: Python<'_>) -> PyResult<Work> {
        self.work
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| {
                crate::errors::raise(py, "LeaseError", "this call was already run".to_owned())
            })
    }
}

/// Cancels a call started for asyncio when its asyncio future is cancelled.
#[pyclass(module = "lease._lease", frozen)]
struct Abort(tokio::task::AbortHandle);

#[pymethods]
impl Abort {
    /// Called by asyncio with the future when it is done; aborts the Rust task if the future
    /// was cancelled.
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future.call_method0("cancelled")?.is_truthy()? {
            self.0.abort();
        }
        Ok(())
    }
}

#[pymethods]
impl Pending {
    /// Runs the call here, with the interpreter released, and returns its value.
    fn wait(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let work = self.take(py)?;
        let convert = block(py, work)?;
        convert(py)
    }

    /// Starts the call on the package's runtime and returns an awaitable for its value.
    fn __await__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let work = self.take(py)?;
        let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
        let future = event_loop.call_method0("create_future")?;
        let resolve = py.import("lease._aio")?.getattr("resolve")?.unbind();
        let (loop_ref, future_ref) = (event_loop.clone().unbind(), future.clone().unbind());
        let runtime = to_py(py, runtime())?;
        let task = runtime.spawn(async move {
            let done = work.await;
            Python::attach(|py| {
                let (ok, value) = match done.and_then(|convert| convert(py).map_err(Failure::from))
                {
                    Ok(value) => (true, value),
                    Err(failure) => (false, failure.into_py(py).into_value(py).into_any()),
                };
                // The loop may be closed by now; then nobody is waiting for the answer.
                let _ = loop_ref.call_method1(
                    py,
                    "call_soon_threadsafe",
                    (resolve, future_ref, ok, value),
                );
            });
        });
        future.call_method1("add_done_callback", (Abort(task.abort_handle()),))?;
        future.call_method0("__await__")
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Pending>()?;
    Ok(())
}
