//! The arguments of the store's methods, checked into the domain's types before a call exists:
//! a bad one raises `InvalidInput` naming it, and nothing is sent.

use lease_domain::{EnqueueFields, EnqueueSpec, JobId, LeaseTerm, Payload, Status, Timestamp};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::errors::{Failure, Outcome, invalid, to_py};
use crate::values::{self, now_or_clock};

pub(crate) fn schedule_name(name: &str) -> Outcome<lease_domain::ScheduleName> {
    lease_domain::ScheduleName::new(name).or_else(|e| invalid(format!("schedule name: {e}")))
}

/// A job's group, checked.
pub(crate) fn group(group: &str) -> Outcome<lease_domain::GroupKey> {
    lease_domain::GroupKey::new(group).or_else(|e| invalid(format!("group: {e}")))
}

/// A payload's bytes, given as bytes or as text (UTF-8); its size is checked with the job.
pub(crate) fn payload_bytes(
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Outcome<Option<Vec<u8>>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Ok(None));
    };
    if let Ok(bytes) = value.cast::<PyBytes>() {
        Ok(Ok(Some(bytes.as_bytes().to_vec())))
    } else if let Ok(text) = value.cast::<PyString>() {
        Ok(Ok(Some(text.extract::<String>()?.into_bytes())))
    } else {
        Ok(invalid(format!(
            "payload: must be bytes or str, got {}",
            value.get_type().name()?
        )))
    }
}

/// A payload given as bytes or as text (UTF-8), checked.
pub(crate) fn payload(value: Option<&Bound<'_, PyAny>>) -> PyResult<Outcome<Option<Payload>>> {
    Ok(payload_bytes(value)?.and_then(|bytes| {
        bytes
            .map(|b| Payload::new(b, Payload::DEFAULT_LIMIT))
            .transpose()
            .or_else(|e| invalid(format!("payload: {e}")))
    }))
}

/// One job's fields checked by the domain's one enqueue check, enqueued now (by this host's
/// clock) with `trace`, if the fields name none.
pub(crate) fn check_job(
    fields: EnqueueFields,
    trace: Option<lease_domain::TraceContext>,
) -> Outcome<(JobId, EnqueueSpec)> {
    let defaults = EnqueueSpec {
        enqueued_at: Some(values::clock_now()?),
        trace,
        ..EnqueueSpec::default()
    };
    fields.check(&defaults).map_err(|e| {
        let field = if e.field == "id" { "job id" } else { e.field };
        Failure::Input(format!("{field}: {}", e.error))
    })
}

/// The fields a job of `enqueue_many` may give.
const JOB_FIELDS: [&str; 12] = EnqueueSpec::FIELDS;

/// One job of `enqueue_many`, a dict with an `id` and any of the other fields.
pub(crate) fn batch_job(
    n: usize,
    item: &Bound<'_, PyAny>,
    default_queue: &str,
) -> PyResult<Outcome<(JobId, EnqueueSpec)>> {
    let at = |why: String| invalid(format!("jobs[{n}]: {why}"));
    let Ok(fields) = item.cast::<PyDict>() else {
        return Ok(at("must be a dict with an \"id\"".to_owned()));
    };
    for key in fields.keys() {
        let name: String = key.extract().unwrap_or_default();
        if !JOB_FIELDS.contains(&name.as_str()) {
            return Ok(at(format!(
                "{name:?} is not a field of a job (the fields are {})",
                JOB_FIELDS.join(", ")
            )));
        }
    }
    let Some(id) = fields.get_item("id")? else {
        return Ok(at("has no \"id\"".to_owned()));
    };
    let get = |name: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        Ok(fields.get_item(name)?.filter(|v| !v.is_none()))
    };
    let payload = match payload_bytes(get("payload")?.as_ref())? {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    let fields = EnqueueFields {
        id: id.extract()?,
        queue: Some(get("queue")?.map_or_else(|| Ok(default_queue.to_owned()), |q| q.extract())?),
        priority: get("priority")?.map(|p| p.extract()).transpose()?,
        run_at: get("run_at")?.map(|t| t.extract()).transpose()?,
        max_attempts: get("max_attempts")?.map(|m| m.extract()).transpose()?,
        payload,
        enqueued_at: None,
        timeout: get("timeout")?.map(|t| t.extract()).transpose()?,
        replace: get("replace")?.map(|r| r.extract()).transpose()?,
        group: get("group")?.map(|g| g.extract()).transpose()?,
        debounce: get("debounce")?.map(|d| d.extract()).transpose()?,
        after: get("after")?.map(|a| a.extract()).transpose()?,
        on_parent_failure: get("on_parent_failure")?.map(|p| p.extract()).transpose()?,
        traceparent: None,
        tracestate: None,
    };
    Ok(check_job(fields, None).or_else(|e| match e {
        Failure::Input(why) => at(why),
        other => Err(other),
    }))
}

/// A holder's job and name.
pub(crate) fn holder(job_id: &str, owner: &str) -> Outcome<(JobId, lease_domain::Owner)> {
    Ok((values::job_id(job_id)?, values::owner(owner)?))
}

/// A lease from the caller's `now` (or this host's clock) for `ttl` seconds.
pub(crate) fn term(now: Option<f64>, ttl: f64) -> Outcome<LeaseTerm> {
    Ok(LeaseTerm::new(now_or_clock(now)?.get(), ttl)?)
}

/// A job id and the time an operator's command on it is decided at (the caller's `now`, or
/// the clock).
pub(crate) fn job_at(job_id: &str, now: Option<f64>) -> Outcome<(JobId, Timestamp)> {
    Ok((values::job_id(job_id)?, now_or_clock(now)?))
}

/// The statuses `purge` deletes: an iterable of `done`, `dead` and `cancelled` (by default
/// `done`), at least one.
pub(crate) fn statuses(given: Option<&Bound<'_, PyAny>>) -> PyResult<Outcome<Vec<Status>>> {
    let Some(given) = given.filter(|g| !g.is_none()) else {
        return Ok(Ok(vec![Status::Done]));
    };
    if given.is_instance_of::<PyString>() {
        return Ok(invalid(
            "statuses: a list of statuses (such as [\"done\", \"dead\"]), not one string",
        ));
    }
    let mut statuses = Vec::new();
    for status in given.try_iter()? {
        let name: String = status?.extract()?;
        match values::status(&name) {
            Ok(status) => statuses.push(status),
            Err(e) => return Ok(Err(e)),
        }
    }
    if statuses.is_empty() {
        return Ok(invalid(
            "statuses: name at least one of done, dead, cancelled",
        ));
    }
    Ok(Ok(statuses))
}

/// The keyword options a class of `lease` passes on to its native core (`**options`), each
/// read once by name: a value of the wrong type is a `TypeError` naming the option, and one
/// the core does not read is refused by name.
pub(crate) struct Options<'py> {
    given: Option<Bound<'py, PyDict>>,
}

impl<'py> Options<'py> {
    /// The options as given (a copy: reading one takes it out).
    pub(crate) fn new(given: Option<&Bound<'py, PyDict>>) -> PyResult<Self> {
        Ok(Self {
            given: given.map(|g| g.copy()).transpose()?,
        })
    }

    /// The option `name`, or `None` when it was not given or given as `None`.
    pub(crate) fn take<T>(&self, name: &str) -> PyResult<Option<T>>
    where
        T: for<'a> FromPyObject<'a, 'py>,
    {
        let Some(given) = &self.given else {
            return Ok(None);
        };
        let Some(value) = given.get_item(name)? else {
            return Ok(None);
        };
        given.del_item(name)?;
        if value.is_none() {
            return Ok(None);
        }
        value.extract::<T>().map(Some).map_err(|e| {
            let e: PyErr = e.into();
            PyTypeError::new_err(format!("{name}: {}", e.value(value.py())))
        })
    }

    /// The option `name`, which must be given (and not as `None`).
    pub(crate) fn need<T>(&self, py: Python<'_>, name: &str) -> PyResult<T>
    where
        T: for<'a> FromPyObject<'a, 'py>,
    {
        match self.take(name)? {
            Some(value) => Ok(value),
            None => to_py(py, invalid(format!("{name}: required"))),
        }
    }

    /// An error naming the first option nobody read, if any.
    pub(crate) fn finish(self, what: &str) -> PyResult<Outcome<()>> {
        let Some(given) = self.given else {
            return Ok(Ok(()));
        };
        match given.keys().iter().next() {
            Some(name) => Ok(invalid(format!("{what} takes no option {name}"))),
            None => Ok(Ok(())),
        }
    }
}
