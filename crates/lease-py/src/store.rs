//! `lease._lease.StoreCore`: one store (a SQLite file, a PostgreSQL database or a `lease serve`
//! URL with an API key) and the port's operations, each answered as a `Pending` call that
//! `lease.Store` waits for and `lease.AsyncStore` awaits. Each method here is the one
//! declaration of its Python method: its signature, defaults and docstring are what both
//! classes show. Arguments are checked before the call exists, so bad input raises at once
//! and nothing is sent.

mod control;
mod jobs;
mod leases;

use std::path::PathBuf;
use std::sync::Arc;

use lease_ports::LeaseStore;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::errors::{Outcome, invalid, to_py};
use crate::open::{Backend, Opening, open};
use crate::run::{Pending, block, work};
use crate::values::{self, Accepted, QueueSettings, Refused, now_or_clock};

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
