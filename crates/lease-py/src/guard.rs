//! `lease.guard`'s native half: a value guard opened from its URL (Redis, an object store, a
//! directory, NATS key-value), whose `put`, `get` and `delete` are `lease_guard`'s one atomic
//! step inside the resource; `install` for a resource that needs preparing; and a write to a
//! SQLite database under a fence, the guard's check and the caller's statement in one
//! `BEGIN IMMEDIATE` transaction.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lease_guard::FenceGuard;
use lease_guard::value::{GuardKey, PutOptions, ValueGuard};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use rusqlite::types::Value as SqlValue;

use crate::errors::{Failure, Outcome, invalid, to_py};
use crate::run::block;
use crate::values::{self, Accepted, Refused};

/// A value read back with the fence it was written under.
#[pyclass(module = "lease.guard", frozen, get_all)]
pub(crate) struct Guarded {
    fence: u64,
    value: Py<PyBytes>,
}

#[pymethods]
impl Guarded {
    fn __repr__(&self) -> String {
        format!("Guarded(fence={})", self.fence)
    }
}

fn admission(py: Python<'_>, admission: lease_guard::Admission) -> PyResult<Py<PyAny>> {
    match admission {
        Ok(()) => Accepted.into_py_any(py),
        Err(refused) => Refused::guard(&refused).into_py_any(py),
    }
}

/// Text as its UTF-8 bytes, or bytes as they are.
fn bytes_of(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Outcome<Vec<u8>>> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(Ok(bytes.as_bytes().to_vec()));
    }
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(Ok(text.extract::<String>()?.into_bytes()));
    }
    Ok(invalid(format!(
        "{what}: must be bytes or str, got {}",
        value.get_type().name()?
    )))
}

fn key(key: &str) -> Outcome<GuardKey> {
    Ok(GuardKey::new(key)?)
}

/// A resource that keeps, per key, a value and the highest fence that wrote it.
#[pyclass(module = "lease.guard", name = "ValueGuard", frozen)]
pub(crate) struct ValueGuardCore {
    inner: Arc<dyn ValueGuard>,
    url: String,
}

#[pymethods]
impl ValueGuardCore {
    #[new]
    fn new(py: Python<'_>, url: String) -> PyResult<Self> {
        let opened = url.clone();
        let inner = block(py, async move { Ok(lease_guard::open(&opened).await?) })?;
        Ok(Self { inner, url })
    }

    /// What the resource is (`redis`, `s3`, `file`, `nats`, ...).
    #[getter]
    fn resource(&self) -> &'static str {
        self.inner.resource()
    }

    /// Writes `value` at `key` from a holder of `fence` (and `job`), or refuses it; `expiry`
    /// (seconds, Redis only) lets the value lapse, never the fence.
    #[pyo3(signature = (key, value, *, fence, job = None, expiry = None))]
    fn put(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        fence: &Bound<'_, PyAny>,
        job: Option<String>,
        expiry: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let fence = to_py(py, values::fence(fence)?)?;
        let value = to_py(py, bytes_of(value, "value")?)?;
        let (key, expiry) = to_py(
            py,
            (|| {
                let expiry = expiry
                    .map(|s| {
                        Duration::try_from_secs_f64(s)
                            .ok()
                            .filter(|d| !d.is_zero())
                            .map_or_else(
                                || invalid(format!("expiry: must be more than 0 seconds, got {s}")),
                                Ok,
                            )
                    })
                    .transpose()?;
                Ok((self::key(key)?, expiry))
            })(),
        )?;
        let guard = Arc::clone(&self.inner);
        let options = PutOptions { job, expiry };
        let outcome = block(py, async move {
            Ok(guard.put(&key, &value, fence, &options).await?)
        })?;
        admission(py, outcome)
    }

    /// The value at `key` with its fence, or None.
    fn get(&self, py: Python<'_>, key: &str) -> PyResult<Option<Guarded>> {
        let key = to_py(py, self::key(key))?;
        let guard = Arc::clone(&self.inner);
        let found = block(py, async move { Ok(guard.get(&key).await?) })?;
        Ok(found.map(|g| Guarded {
            fence: g.fence.get(),
            value: PyBytes::new(py, &g.value).unbind(),
        }))
    }

    /// Deletes the value at `key` from a holder of `fence`, or refuses it; the fence stays.
    #[pyo3(signature = (key, *, fence))]
    fn delete(&self, py: Python<'_>, key: &str, fence: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let fence = to_py(py, values::fence(fence)?)?;
        let key = to_py(py, self::key(key))?;
        let guard = Arc::clone(&self.inner);
        let outcome = block(py, async move { Ok(guard.delete(&key, fence).await?) })?;
        admission(py, outcome)
    }

    fn __repr__(&self) -> String {
        format!("ValueGuard({:?})", self.url)
    }
}

/// Prepares the resource `url` names (idempotent); True when something was made or upgraded.
#[pyfunction]
fn install(py: Python<'_>, url: String) -> PyResult<bool> {
    block(
        py,
        async move { Ok(lease_guard::install(&url).await?.made) },
    )
}

/// A statement parameter from Python: None, an int, a float, a str or bytes.
fn sql_value(value: &Bound<'_, PyAny>, n: usize) -> PyResult<Outcome<SqlValue>> {
    if value.is_none() {
        return Ok(Ok(SqlValue::Null));
    }
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Ok(Ok(SqlValue::Integer(i64::from(value.extract::<bool>()?))));
    }
    if let Ok(i) = value.extract::<i64>() {
        return Ok(Ok(SqlValue::Integer(i)));
    }
    if let Ok(f) = value.extract::<f64>() {
        return Ok(Ok(SqlValue::Real(f)));
    }
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(Ok(SqlValue::Text(text.extract::<String>()?)));
    }
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(Ok(SqlValue::Blob(bytes.as_bytes().to_vec())));
    }
    Ok(invalid(format!(
        "params[{n}]: must be None, int, float, str or bytes, got {}",
        value.get_type().name()?
    )))
}

/// The write itself: the guard's table made if missing, the fence admitted, then `sql` run,
/// all in one `BEGIN IMMEDIATE` transaction that commits only when the fence was admitted.
fn sqlite_write_now(
    path: &PathBuf,
    key: &str,
    fence: lease_domain::Fence,
    sql: &str,
    params: &[SqlValue],
    busy_timeout: Duration,
) -> Outcome<lease_guard::Admission> {
    let storage =
        |e: rusqlite::Error| Failure::Guard(lease_guard::GuardError::Storage(e.to_string()));
    let mut conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
            | rusqlite::OpenFlags::SQLITE_OPEN_CREATE
            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(storage)?;
    conn.busy_timeout(busy_timeout).map_err(storage)?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(storage)?;
    lease_guard::sqlite::install(&tx)?;
    let admitted = lease_guard::sqlite::SqliteGuard::new(&tx).admit(key, fence)?;
    if admitted.is_ok() {
        tx.execute(sql, rusqlite::params_from_iter(params.iter()))
            .map_err(storage)?;
        tx.commit().map_err(storage)?;
    }
    Ok(admitted)
}

/// Runs `sql` with `params` on the SQLite database at `path` only if `fence` is admitted for
/// `key`, the check and the statement in one transaction: Accepted, or Refused and nothing
/// written.
#[pyfunction]
#[pyo3(signature = (path, key, fence, sql, params = None, busy_timeout = 5.0))]
fn sqlite_write(
    py: Python<'_>,
    path: PathBuf,
    key: &str,
    fence: &Bound<'_, PyAny>,
    sql: &str,
    params: Option<&Bound<'_, PyAny>>,
    busy_timeout: f64,
) -> PyResult<Py<PyAny>> {
    let fence = to_py(py, values::fence(fence)?)?;
    let mut values = Vec::new();
    if let Some(params) = params {
        let params = params
            .cast::<PyTuple>()
            .map(|t| t.clone().into_any())
            .unwrap_or_else(|_| params.clone());
        for (n, item) in params.try_iter()?.enumerate() {
            values.push(to_py(py, sql_value(&item?, n)?)?);
        }
    }
    let busy = to_py(
        py,
        Duration::try_from_secs_f64(busy_timeout).or_else(|_| {
            invalid(format!(
                "busy_timeout: must be 0 or more seconds, got {busy_timeout}"
            ))
        }),
    )?;
    let (key, sql) = (key.to_owned(), sql.to_owned());
    let outcome = py.detach(|| {
        self::key(&key).and_then(|_| sqlite_write_now(&path, &key, fence, &sql, &values, busy))
    });
    let outcome = to_py(py, outcome)?;
    admission(py, outcome)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ValueGuardCore>()?;
    m.add_class::<Guarded>()?;
    m.add_function(wrap_pyfunction!(install, m)?)?;
    m.add_function(wrap_pyfunction!(sqlite_write, m)?)?;
    Ok(())
}
