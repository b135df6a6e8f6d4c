//! The W3C trace context a job is enqueued with: the caller's `traceparent`/`tracestate`, or
//! else the current OpenTelemetry context's when the `opentelemetry` package is installed
//! (its global propagator injects it; without an active span it injects nothing, so a job is
//! enqueued without one).

use lease_domain::TraceContext;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

use crate::errors::{Outcome, invalid};

/// `opentelemetry.propagate.inject`, looked up once; `None` when the package is absent.
static INJECT: PyOnceLock<Option<Py<PyAny>>> = PyOnceLock::new();

/// The context to enqueue with: the one given, checked (a bad one is refused, naming what is
/// wrong), else the current OpenTelemetry context's (a malformed one is dropped, as a W3C
/// receiver drops a malformed header).
pub(crate) fn enqueue_trace(
    py: Python<'_>,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) -> PyResult<Outcome<Option<TraceContext>>> {
    match (traceparent, tracestate) {
        (Some(parent), state) => Ok(TraceContext::new(parent, state)
            .map(Some)
            .or_else(|e| invalid(format!("traceparent/tracestate: {e}")))),
        (None, Some(_)) => Ok(invalid(
            "tracestate: needs a traceparent (a tracestate means nothing without one)",
        )),
        (None, None) => current(py).map(Ok),
    }
}

/// The current OpenTelemetry context's trace context, if the package is installed and a span
/// is active.
fn current(py: Python<'_>) -> PyResult<Option<TraceContext>> {
    let inject = INJECT.get_or_init(py, || {
        py.import("opentelemetry.propagate")
            .and_then(|m| m.getattr("inject"))
            .map(Bound::unbind)
            .ok()
    });
    let Some(inject) = inject else {
        return Ok(None);
    };
    let carrier = PyDict::new(py);
    inject.bind(py).call1((&carrier,))?;
    let text = |name: &str| -> PyResult<Option<String>> {
        carrier
            .get_item(name)?
            .map(|v| v.extract::<String>())
            .transpose()
    };
    let Some(parent) = text("traceparent")? else {
        return Ok(None);
    };
    Ok(TraceContext::new(&parent, text("tracestate")?.as_deref()).ok())
}
