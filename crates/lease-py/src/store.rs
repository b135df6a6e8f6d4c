//! `lease._lease.StoreCore`: one store (a SQLite file, a PostgreSQL database or a `lease serve`
//! URL with an API key) and the port's operations, each answered as a `Pending` call that
//! `lease.Store` waits for and `lease.AsyncStore` awaits. Arguments are checked before the
//! call exists, so bad input raises at once and nothing is sent.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lease_domain::{
    EnqueueSpec, ErrorText, JobId, JobResult, LeaseTerm, Payload, ProgressText, Renewal, Status,
    Timestamp,
};
use lease_ports::audit::{AuditFilter, AuditTrail};
use lease_ports::control::Controlled;
use lease_ports::{LeaseStore, ListFilter};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::errors::{Failure, Outcome, invalid, to_py};
use crate::run::{Pending, block, work};
use crate::values::{
    self, Accepted, AuditRow, Backoff, Failed, Lease, QueueSettings, Record, Refused, Schedule,
    StatsRow, now_or_clock,
};

/// A store as opened, kept by kind so that its audit trail is reachable too.
#[derive(Clone)]
pub(crate) enum Backend {
    Sqlite(Arc<lease_sqlite::SqliteLeaseStore>),
    Postgres(Arc<lease_postgres::PgLeaseStore>),
    Http(Arc<lease_client::HttpLeaseStore>),
}

impl Backend {
    pub(crate) fn store(&self) -> Arc<dyn LeaseStore> {
        match self {
            Backend::Sqlite(s) => Arc::clone(s) as Arc<dyn LeaseStore>,
            Backend::Postgres(s) => Arc::clone(s) as Arc<dyn LeaseStore>,
            Backend::Http(s) => Arc::clone(s) as Arc<dyn LeaseStore>,
        }
    }

    fn control(&self) -> Arc<dyn Controlled> {
        match self {
            Backend::Sqlite(s) => Arc::clone(s) as Arc<dyn Controlled>,
            Backend::Postgres(s) => Arc::clone(s) as Arc<dyn Controlled>,
            Backend::Http(s) => Arc::clone(s) as Arc<dyn Controlled>,
        }
    }

    fn audit(&self) -> Arc<dyn AuditTrail> {
        match self {
            Backend::Sqlite(s) => Arc::clone(s) as Arc<dyn AuditTrail>,
            Backend::Postgres(s) => Arc::clone(s) as Arc<dyn AuditTrail>,
            Backend::Http(s) => Arc::clone(s) as Arc<dyn AuditTrail>,
        }
    }
}

/// How a store is opened (the constructor's keyword arguments).
struct Opening {
    api_key: Option<String>,
    create: bool,
    audit: Option<u64>,
    busy_timeout: Option<f64>,
    ca_cert: Option<PathBuf>,
    schema: Option<String>,
}

fn seconds(what: &str, value: f64) -> Outcome<Duration> {
    Duration::try_from_secs_f64(value)
        .or_else(|_| invalid(format!("{what}: must be 0 or more seconds, got {value}")))
}

async fn open(target: String, how: Opening) -> Outcome<Backend> {
    let remote = target.starts_with("http://") || target.starts_with("https://");
    let postgres = target.starts_with("postgres://") || target.starts_with("postgresql://");
    if !remote && how.api_key.is_some() {
        return invalid("api_key: only a lease serve URL (http:// or https://) takes a key");
    }
    if remote {
        if how.create || how.audit.is_some() || how.schema.is_some() {
            return invalid(
                "create, audit and schema are the server's to decide; a lease serve URL takes \
                 api_key and ca_cert",
            );
        }
        let Some(key) = how.api_key else {
            return invalid("api_key: a lease serve URL needs an API key");
        };
        let ca_cert =
            match how.ca_cert {
                Some(path) => Some(std::fs::read(&path).or_else(|e| {
                    invalid(format!("ca_cert: cannot read {}: {e}", path.display()))
                })?),
                None => None,
            };
        let options = lease_client::ClientOptions {
            ca_cert,
            ..lease_client::ClientOptions::default()
        };
        let store = lease_client::HttpLeaseStore::new(&target, &key, options)?;
        return Ok(Backend::Http(Arc::new(store)));
    }
    if how.ca_cert.is_some() {
        return invalid("ca_cert: only a lease serve URL (https://) takes a CA certificate");
    }
    if postgres {
        let mut options = lease_postgres::PgOptions {
            audit: how.audit,
            ..lease_postgres::PgOptions::default()
        };
        if let Some(schema) = how.schema {
            options.schema = schema;
        }
        if let Some(wait) = how.busy_timeout {
            options.wait_timeout = seconds("busy_timeout", wait)?;
        }
        let store = if how.create {
            lease_postgres::PgLeaseStore::init(&target, options).await?
        } else {
            lease_postgres::PgLeaseStore::open(&target, options).await?
        };
        return Ok(Backend::Postgres(Arc::new(store)));
    }
    if how.schema.is_some() {
        return invalid("schema: only a PostgreSQL URL has schemas");
    }
    let mut options = lease_sqlite::SqliteOptions {
        create: how.create,
        audit: how.audit,
        ..lease_sqlite::SqliteOptions::default()
    };
    if let Some(wait) = how.busy_timeout {
        options.busy_timeout = seconds("busy_timeout", wait)?;
    }
    let path = target
        .strip_prefix("sqlite://")
        .unwrap_or(&target)
        .to_owned();
    let store = tokio::task::spawn_blocking(move || {
        lease_sqlite::SqliteLeaseStore::open_with(path, options)
    })
    .await
    .map_err(|e| Failure::Other(format!("opening the store stopped: {e}")))??;
    Ok(Backend::Sqlite(Arc::new(store)))
}

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

fn schedule_name(name: &str) -> Outcome<lease_domain::ScheduleName> {
    lease_domain::ScheduleName::new(name).or_else(|e| invalid(format!("schedule name: {e}")))
}

/// A payload given as bytes or as text (UTF-8).
fn payload(value: Option<&Bound<'_, PyAny>>) -> PyResult<Outcome<Option<Payload>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Ok(None));
    };
    let bytes = if let Ok(bytes) = value.cast::<PyBytes>() {
        bytes.as_bytes().to_vec()
    } else if let Ok(text) = value.cast::<PyString>() {
        text.extract::<String>()?.into_bytes()
    } else {
        return Ok(invalid(format!(
            "payload: must be bytes or str, got {}",
            value.get_type().name()?
        )));
    };
    Ok(Payload::new(bytes, Payload::DEFAULT_LIMIT)
        .map(Some)
        .or_else(|e| invalid(format!("payload: {e}"))))
}

/// The queue fields of one job.
#[allow(clippy::too_many_arguments)] // A job's fields, as the caller names them.
fn spec(
    queue: &str,
    priority: i64,
    run_at: Option<f64>,
    max_attempts: Option<u32>,
    payload: Option<Payload>,
    timeout: Option<f64>,
    replace_finished: bool,
) -> Outcome<EnqueueSpec> {
    Ok(EnqueueSpec {
        queue: values::queue(queue)?,
        priority,
        run_at: run_at.map(|t| values::time("run_at", t)).transpose()?,
        max_attempts,
        payload,
        enqueued_at: Some(values::clock_now()?),
        timeout: timeout
            .map(|t| lease_domain::Ttl::new(t).map_err(|e| Failure::Input(format!("timeout: {e}"))))
            .transpose()?,
        replace_finished,
    })
}

/// The fields a job of `enqueue_many` may give.
const JOB_FIELDS: [&str; 8] = EnqueueSpec::FIELDS;

/// One job of `enqueue_many`, a dict with an `id` and any of the other fields.
fn batch_job(
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
    let id: String = id.extract()?;
    let queue: String = match fields.get_item("queue")? {
        Some(q) if !q.is_none() => q.extract()?,
        _ => default_queue.to_owned(),
    };
    let get = |name: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        Ok(fields.get_item(name)?.filter(|v| !v.is_none()))
    };
    let priority: i64 = get("priority")?
        .map(|p| p.extract())
        .transpose()?
        .unwrap_or(0);
    let run_at: Option<f64> = get("run_at")?.map(|t| t.extract()).transpose()?;
    let max_attempts: Option<u32> = get("max_attempts")?.map(|m| m.extract()).transpose()?;
    let timeout: Option<f64> = get("timeout")?.map(|t| t.extract()).transpose()?;
    let replace: Option<String> = get("replace")?.map(|r| r.extract()).transpose()?;
    let replace_finished = match replace.as_deref() {
        None => false,
        Some("finished") => true,
        Some(other) => {
            return Ok(at(format!(
                "replace is {other:?}; the one value is \"finished\""
            )));
        }
    };
    let payload = match payload(get("payload")?.as_ref())? {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    Ok(values::job_id(&id)
        .and_then(|id| {
            let spec = spec(
                &queue,
                priority,
                run_at,
                max_attempts,
                payload,
                timeout,
                replace_finished,
            )?;
            Ok((id, spec))
        })
        .or_else(|e| match e {
            Failure::Input(why) => at(why),
            other => Err(other),
        }))
}

/// A holder's job and name.
fn holder(job_id: &str, owner: &str) -> Outcome<(JobId, lease_domain::Owner)> {
    Ok((values::job_id(job_id)?, values::owner(owner)?))
}

/// A lease from the caller's `now` (or this host's clock) for `ttl` seconds.
fn term(now: Option<f64>, ttl: f64) -> Outcome<LeaseTerm> {
    Ok(LeaseTerm::new(now_or_clock(now)?.get(), ttl)?)
}

/// A job id and the time an operator's command on it is decided at (the caller's `now`, or
/// the clock).
fn job_at(job_id: &str, now: Option<f64>) -> Outcome<(JobId, Timestamp)> {
    Ok((values::job_id(job_id)?, now_or_clock(now)?))
}

fn accepted_or_refused(py: Python<'_>, outcome: lease_ports::WriteOutcome) -> PyResult<Py<PyAny>> {
    match outcome {
        Ok(()) => Accepted.into_py_any(py),
        Err(refused) => Refused::write(&refused).into_py_any(py),
    }
}

#[pymethods]
impl StoreCore {
    #[new]
    #[pyo3(signature = (target, *, api_key = None, create = false, audit = None, busy_timeout = None, ca_cert = None, schema = None))]
    #[allow(clippy::too_many_arguments)] // The constructor's keyword arguments.
    fn new(
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        api_key: Option<String>,
        create: bool,
        audit: Option<u64>,
        busy_timeout: Option<f64>,
        ca_cert: Option<PathBuf>,
        schema: Option<String>,
    ) -> PyResult<Self> {
        let target: String = match target.extract::<PathBuf>() {
            Ok(path) if !target.is_instance_of::<PyString>() => path.display().to_string(),
            _ => target.extract()?,
        };
        let how = Opening {
            api_key,
            create,
            audit,
            busy_timeout,
            ca_cert,
            schema,
        };
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

    #[pyo3(signature = (job_id, queue, priority, run_at, max_attempts, payload, timeout = None, replace_finished = false))]
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
    ) -> PyResult<Pending> {
        let payload = to_py(py, self::payload(payload)?)?;
        let (id, spec) = to_py(
            py,
            values::job_id(job_id).and_then(|id| {
                let spec = spec(
                    queue,
                    priority,
                    run_at,
                    max_attempts,
                    payload,
                    timeout,
                    replace_finished,
                )?;
                Ok((id, spec))
            }),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.enqueue_with(&id, &spec).await?) },
            |py, inserted| inserted.into_py_any(py),
        )
    }

    fn enqueue_many(
        &self,
        py: Python<'_>,
        jobs: &Bound<'_, PyAny>,
        queue: &str,
    ) -> PyResult<Pending> {
        let mut specs = Vec::new();
        for (n, item) in jobs.try_iter()?.enumerate() {
            specs.push(to_py(py, batch_job(n, &item?, queue)?)?);
        }
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.enqueue_many(&specs).await?) },
            |py, inserted| inserted.into_py_any(py),
        )
    }

    #[pyo3(signature = (job_id, owner, ttl, now))]
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

    #[pyo3(signature = (queue, owner, ttl, limit, now))]
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

    #[pyo3(signature = (job_id, owner, fence, ttl, now))]
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

    #[pyo3(signature = (job_id, owner, fence, text, ttl, now))]
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

    #[pyo3(signature = (job_id, owner, fence, result, now))]
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

    #[pyo3(signature = (job_id, owner, fence, error, retry, backoff, now))]
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

    fn release(
        &self,
        py: Python<'_>,
        job_id: &str,
        owner: &str,
        fence: &Bound<'_, PyAny>,
    ) -> PyResult<Pending> {
        let fence = to_py(py, values::fence(fence)?)?;
        let (id, owner) = to_py(py, holder(job_id, owner))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.release(&id, &owner, fence).await?) },
            accepted_or_refused,
        )
    }

    #[pyo3(signature = (job_id, now))]
    fn cancel(&self, py: Python<'_>, job_id: &str, now: Option<f64>) -> PyResult<Pending> {
        let (id, now) = to_py(py, job_at(job_id, now))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.cancel(&id, now).await?) },
            accepted_or_refused,
        )
    }

    #[pyo3(signature = (job_id, now))]
    fn retry(&self, py: Python<'_>, job_id: &str, now: Option<f64>) -> PyResult<Pending> {
        let (id, now) = to_py(py, job_at(job_id, now))?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.retry(&id, now).await?) },
            accepted_or_refused,
        )
    }

    fn purge(&self, py: Python<'_>, before: f64, statuses: Vec<String>) -> PyResult<Pending> {
        let (before, statuses) = to_py(
            py,
            (|| {
                let statuses = statuses
                    .iter()
                    .map(|s| values::status(s))
                    .collect::<Outcome<Vec<Status>>>()?;
                if statuses.is_empty() {
                    return invalid("statuses: name at least one of done, dead, cancelled");
                }
                Ok((values::time("before", before)?, statuses))
            })(),
        )?;
        let store = self.store(py)?;
        self.call(
            py,
            async move { Ok(store.purge(before, &statuses).await?) },
            |py, purged| purged.into_py_any(py),
        )
    }

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

    #[pyo3(signature = (queue, status, limit, after, now))]
    fn list(
        &self,
        py: Python<'_>,
        queue: Option<&str>,
        status: Option<&str>,
        limit: usize,
        after: Option<&str>,
        now: Option<f64>,
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

    #[pyo3(signature = (now))]
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

    #[pyo3(signature = (job, since, limit))]
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

    #[pyo3(signature = (queue, until, now))]
    fn pause(
        &self,
        py: Python<'_>,
        queue: &str,
        until: Option<f64>,
        now: Option<f64>,
    ) -> PyResult<Pending> {
        let change = until
            .map(|t| values::time("until", t))
            .transpose()
            .map(lease_domain::QueueChange::Pause);
        self.change_queue(py, queue, change, now)
    }

    #[pyo3(signature = (queue, now))]
    fn resume(&self, py: Python<'_>, queue: &str, now: Option<f64>) -> PyResult<Pending> {
        self.change_queue(py, queue, Ok(lease_domain::QueueChange::Resume), now)
    }

    #[pyo3(signature = (queue, concurrency, timeout, no_timeout, now))]
    fn limit(
        &self,
        py: Python<'_>,
        queue: &str,
        concurrency: Option<u32>,
        timeout: Option<f64>,
        no_timeout: bool,
        now: Option<f64>,
    ) -> PyResult<Pending> {
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
            // Both given are one change: applied together or not at all.
            lease_domain::QueueChange::limits(
                concurrency.map(lease_domain::Concurrency::new),
                timeout,
            )
            .map_or_else(
                || {
                    invalid(
                        "give concurrency (0 removes the limit), timeout or no_timeout".to_owned(),
                    )
                },
                Ok,
            )
        })();
        self.change_queue(py, queue, change, now)
    }

    #[pyo3(signature = (now))]
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

    #[pyo3(signature = (name, cron, queue, tz, priority, max_attempts, timeout, payload, catch_up, now))]
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
        let payload = self::payload(payload)?;
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

    #[pyo3(signature = (now))]
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

    #[pyo3(signature = (name, now))]
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
