//! The problem statement's functions, exactly: `init_db`, `enqueue`, `state`, `claim`,
//! `renew`, `complete`, `release` and `claim_many`, each acting on the file its path names at the
//! call (through the connection the process keeps for it while it names the same file), over
//! `lease_sqlite`'s path API. Invalid input (a `ttl` not above 0, an empty id, a fence out of
//! range, a time that is not finite) is `lease.errors.InvalidInput`, a `ValueError`, raised
//! before the file is touched; a refusal by the lease rules is `None` or `False`.

use std::path::PathBuf;

use lease_ports::StoreError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{Failure, Outcome, to_py};
use crate::values;

/// Runs `call` with the interpreter released and maps its error.
fn detached<T: Send>(
    py: Python<'_>,
    call: impl FnOnce() -> Result<T, StoreError> + Send,
) -> PyResult<T> {
    let outcome: Outcome<T> = py.detach(call).map_err(Failure::from);
    to_py(py, outcome)
}

/// A fence argument, checked.
fn fence_arg(py: Python<'_>, fence: &Bound<'_, PyAny>) -> PyResult<u64> {
    to_py(py, values::fence(fence)?).map(|f| f.get())
}

/// Creates the lease database at `path`, or checks and keeps an existing one (never
/// overwrites a file). The directory must exist.
#[pyfunction]
fn init_db(py: Python<'_>, path: PathBuf) -> PyResult<()> {
    detached(py, move || lease_sqlite::init_db(&path))
}

/// Inserts `job_id` in the default state and returns True; if it exists, changes nothing and
/// returns False.
#[pyfunction]
fn enqueue(py: Python<'_>, path: PathBuf, job_id: String) -> PyResult<bool> {
    detached(py, move || lease_sqlite::enqueue(&path, &job_id))
}

/// The stored row of `job_id` as a dict (`id`, `owner`, `until`, `fence`, `result`, `done`),
/// read from the file, or None.
#[pyfunction]
fn state<'py>(
    py: Python<'py>,
    path: PathBuf,
    job_id: String,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let found = detached(py, move || lease_sqlite::state(&path, &job_id))?;
    found.map(|s| values::state_dict(py, &s)).transpose()
}

/// Claims `job_id` for `owner` until `now + ttl` and returns the new fence, or None when the
/// job is missing, done or leased (`until > now`). ValueError for `ttl <= 0`.
#[pyfunction]
fn claim(
    py: Python<'_>,
    path: PathBuf,
    job_id: String,
    owner: String,
    now: f64,
    ttl: f64,
) -> PyResult<Option<u64>> {
    detached(py, move || {
        lease_sqlite::claim(&path, &job_id, &owner, now, ttl)
    })
}

/// Extends the live current lease to `now + ttl`: True only when owner and fence match, the
/// job is not done and `until > now`. ValueError for `ttl <= 0`.
#[pyfunction]
fn renew(
    py: Python<'_>,
    path: PathBuf,
    job_id: String,
    owner: String,
    fence: &Bound<'_, PyAny>,
    now: f64,
    ttl: f64,
) -> PyResult<bool> {
    let fence = fence_arg(py, fence)?;
    detached(py, move || {
        lease_sqlite::renew(&path, &job_id, &owner, fence, now, ttl)
    })
}

/// Stores `result` and marks the job done, only for the live current lease; otherwise False
/// and the stored result is kept.
#[pyfunction]
fn complete(
    py: Python<'_>,
    path: PathBuf,
    job_id: String,
    owner: String,
    fence: &Bound<'_, PyAny>,
    now: f64,
    result: String,
) -> PyResult<bool> {
    let fence = fence_arg(py, fence)?;
    detached(py, move || {
        lease_sqlite::complete(&path, &job_id, &owner, fence, now, &result)
    })
}

/// Gives the lease back (owner None, `until` 0, the fence kept) where owner and fence match
/// and the job is not done; otherwise False.
#[pyfunction]
fn release(
    py: Python<'_>,
    path: PathBuf,
    job_id: String,
    owner: String,
    fence: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let fence = fence_arg(py, fence)?;
    detached(py, move || {
        lease_sqlite::release(&path, &job_id, &owner, fence)
    })
}

/// Claims `job_id` for every owner at once, on threads of their own with connections of their
/// own, and returns the outcomes in input order: for a free job exactly one fence, the rest
/// None.
#[pyfunction]
fn claim_many(
    py: Python<'_>,
    path: PathBuf,
    job_id: String,
    owners: Vec<String>,
    now: f64,
    ttl: f64,
) -> PyResult<Vec<Option<u64>>> {
    detached(py, move || {
        let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
        lease_sqlite::claim_many(&path, &job_id, &owners, now, ttl)
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(init_db, m)?)?;
    m.add_function(wrap_pyfunction!(enqueue, m)?)?;
    m.add_function(wrap_pyfunction!(state, m)?)?;
    m.add_function(wrap_pyfunction!(claim, m)?)?;
    m.add_function(wrap_pyfunction!(renew, m)?)?;
    m.add_function(wrap_pyfunction!(complete, m)?)?;
    m.add_function(wrap_pyfunction!(release, m)?)?;
    m.add_function(wrap_pyfunction!(claim_many, m)?)?;
    Ok(())
}
