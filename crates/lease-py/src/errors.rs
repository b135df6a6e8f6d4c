//! The Rust errors as the Python exceptions of `lease.errors`: one class per kind of
//! `StoreError` and `GuardError`, all under `lease.errors.LeaseError`, invalid input also a
//! `ValueError`. The classes are defined in Python, because an exception that is both a
//! `LeaseError` and a `ValueError` needs two bases, which `create_exception!` cannot give.

use lease_domain::InputError;
use lease_guard::GuardError;
use lease_ports::StoreError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// Why a call failed, kept as the Rust error until the interpreter is attached again.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The store failed or refused to work (not a lease rule's refusal, which is a value).
    Store(StoreError),
    /// A guard's resource failed.
    Guard(GuardError),
    /// An argument the Rust API refuses, named.
    Input(String),
    /// Anything else the package itself says.
    Other(String),
    /// A Python error raised along the way.
    Python(PyErr),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

impl From<GuardError> for Failure {
    fn from(e: GuardError) -> Self {
        match e {
            GuardError::InvalidKey(why) => Failure::Input(format!("invalid key: {why}")),
            other => Failure::Guard(other),
        }
    }
}

impl From<InputError> for Failure {
    fn from(e: InputError) -> Self {
        Failure::Input(e.to_string())
    }
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Self {
        Failure::Python(e)
    }
}

/// The exception class `name` of `lease.errors`.
fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    Ok(py
        .import("lease.errors")?
        .getattr(name)?
        .cast_into::<PyType>()?)
}

/// An exception of class `name` with `message`, or the error of finding the class.
pub(crate) fn raise(py: Python<'_>, name: &str, message: String) -> PyErr {
    match class(py, name) {
        Ok(class) => PyErr::from_type(class, message),
        Err(e) => e,
    }
}

/// The class of a store error's kind.
fn store_class(e: &StoreError) -> &'static str {
    match e {
        StoreError::InvalidInput(_) => "InvalidInput",
        StoreError::NotFound { .. } | StoreError::NoSuchDatabase { .. } => "NotFound",
        StoreError::Incompatible { .. } => "Incompatible",
        StoreError::Denied(_) => "Denied",
        StoreError::Unavailable(_) => "StoreUnavailable",
        StoreError::Full(_) => "StoreFull",
        StoreError::ReadOnly(_) => "ReadOnly",
        StoreError::Indeterminate(_) => "OutcomeUnknown",
        StoreError::ClockSkew(_) => "ClockSkew",
        StoreError::Corrupt(_) => "Corrupt",
        _ => "LeaseError",
    }
}

/// The class of a guard error's kind.
fn guard_class(e: &GuardError) -> &'static str {
    match e {
        GuardError::InvalidKey(_) => "InvalidInput",
        GuardError::Unavailable(..) => "StoreUnavailable",
        GuardError::Indeterminate(..) => "OutcomeUnknown",
        GuardError::Corrupt(_) => "Corrupt",
        GuardError::Unsupported(_) => "Unsupported",
        _ => "GuardError",
    }
}

/// The whole chain of `error`'s causes, as one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = inner.source();
    }
    text
}

impl Failure {
    /// The Python exception this failure is.
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Store(e) => raise(py, store_class(&e), chain(&e)),
            Failure::Guard(e) => raise(py, guard_class(&e), chain(&e)),
            Failure::Input(message) => raise(py, "InvalidInput", message),
            Failure::Other(message) => raise(py, "LeaseError", message),
            Failure::Python(e) => e,
        }
    }
}

/// A result whose error becomes a Python exception once attached.
pub(crate) type Outcome<T> = Result<T, Failure>;

/// `Err(InvalidInput)` naming `what`.
pub(crate) fn invalid<T>(what: impl Into<String>) -> Outcome<T> {
    Err(Failure::Input(what.into()))
}

/// Converts an outcome into a Python result while attached.
pub(crate) fn to_py<T>(py: Python<'_>, outcome: Outcome<T>) -> PyResult<T> {
    outcome.map_err(|e| e.into_py(py))
}
