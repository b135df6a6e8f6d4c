//! A job's trace context inside the open transaction: set by the enqueue that makes the job
//! or runs it again (`lease_domain::Command::sets_trace`), read apart from the job.

use lease_domain::{JobId, TraceContext};
use lease_ports::StoreError;
use rusqlite::{Connection, OptionalExtension, params};

use crate::error;

const UPSERT: &str = "INSERT INTO lease_traces(job, traceparent, tracestate) VALUES (?1, ?2, ?3) \
    ON CONFLICT(job) DO UPDATE SET traceparent = excluded.traceparent, \
    tracestate = excluded.tracestate";

const DELETE: &str = "DELETE FROM lease_traces WHERE job = ?1";

const SELECT: &str = "SELECT traceparent, tracestate FROM lease_traces WHERE job = ?1";

const SELECT_ALL: &str = "SELECT job, traceparent, tracestate FROM lease_traces ORDER BY job";

/// Sets `job`'s trace context to `trace` (`None`: it has none).
pub(crate) fn set(
    conn: &Connection,
    job: &JobId,
    trace: Option<&TraceContext>,
) -> Result<(), StoreError> {
    let done = match trace {
        Some(t) => conn.prepare_cached(UPSERT).and_then(|mut stmt| {
            stmt.execute(params![job.as_str(), t.traceparent(), t.tracestate()])
        }),
        None => conn
            .prepare_cached(DELETE)
            .and_then(|mut stmt| stmt.execute(params![job.as_str()])),
    };
    done.map(drop).map_err(error::sql(conn))
}

/// `job`'s trace context, if it has one.
pub(crate) fn read(conn: &Connection, job: &JobId) -> Result<Option<TraceContext>, StoreError> {
    let row: Option<(String, Option<String>)> = conn
        .prepare_cached(SELECT)
        .and_then(|mut stmt| {
            stmt.query_row([job.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(error::sql(conn))?;
    row.map(|(parent, state)| lease_ports::codec::trace(job.as_str(), &parent, state.as_deref()))
        .transpose()
}

/// Every job's trace context, in job order.
pub(crate) fn all(conn: &Connection) -> Result<Vec<(JobId, TraceContext)>, StoreError> {
    let rows: Vec<(String, String, Option<String>)> = conn
        .prepare_cached(SELECT_ALL)
        .and_then(|mut stmt| {
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .and_then(Iterator::collect)
        })
        .map_err(error::sql(conn))?;
    rows.into_iter()
        .map(|(job, parent, state)| {
            let trace = lease_ports::codec::trace(&job, &parent, state.as_deref())?;
            let id = lease_ports::codec::job_id(job)?;
            Ok((id, trace))
        })
        .collect()
}
