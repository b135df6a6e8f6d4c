//! `StoreCore`'s methods on leases: a claim (by id or the next due jobs) and a holder's fenced
//! writes (renew, progress, hold its group, keep a checkpoint, complete, fail, release).

use lease_domain::{ErrorText, JobResult, ProgressText, Renewal};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;

use crate::args::{holder, term};
use crate::errors::{invalid, to_py};
use crate::run::Pending;
use crate::values::{self, Backoff, Failed, Lease, Refused, now_or_clock};

use crate::store::{StoreCore, accepted_or_refused};

#[pymethods]
impl StoreCore {
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
}
