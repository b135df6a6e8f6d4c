//! A job's trace context inside the open transaction: set by the enqueue that makes the job
//! or runs it again (`lease_domain::Command::sets_trace`), read apart from the job.

use lease_domain::{JobId, TraceContext};
use lease_ports::StoreError;

use crate::connection::Conn;
use crate::error::{self, Stage};

/// The statements of trace contexts, spelled for one schema.
#[derive(Debug)]
pub(crate) struct TraceSql {
    /// Writes trace contexts (arrays of job, traceparent, tracestate), replacing any.
    put: String,
    /// Deletes the trace contexts of the jobs `$1`.
    clear: String,
    /// The trace context of `$1`.
    select: String,
    /// Every trace context, in job order.
    pub(crate) select_all: String,
}

impl TraceSql {
    pub(crate) fn new(s: &str) -> Self {
        Self {
            put: format!(
                "INSERT INTO {s}.traces (job, traceparent, tracestate) \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) \
                 ON CONFLICT (job) DO UPDATE SET traceparent = excluded.traceparent, \
                 tracestate = excluded.tracestate"
            ),
            clear: format!("DELETE FROM {s}.traces WHERE job = ANY($1::text[])"),
            select: format!("SELECT traceparent, tracestate FROM {s}.traces WHERE job = $1"),
            select_all: format!(
                "SELECT job, traceparent, tracestate FROM {s}.traces ORDER BY job COLLATE \"C\""
            ),
        }
    }
}

fn before(e: tokio_postgres::Error) -> StoreError {
    error::map(e, Stage::BeforeCommit)
}

/// Sets each job's trace context as given (`None`: it has none), in the open transaction.
pub(crate) async fn set(
    conn: &Conn,
    sql: &TraceSql,
    traces: &[(&JobId, Option<&TraceContext>)],
) -> Result<(), StoreError> {
    let cleared: Vec<&str> = traces
        .iter()
        .filter(|(_, t)| t.is_none())
        .map(|(id, _)| id.as_str())
        .collect();
    let kept: Vec<(&str, &TraceContext)> = traces
        .iter()
        .filter_map(|(id, t)| t.map(|t| (id.as_str(), t)))
        .collect();
    if !cleared.is_empty() {
        let clear = conn.prepare(&sql.clear).await?;
        conn.client()
            .execute(&clear, &[&cleared])
            .await
            .map_err(before)?;
    }
    if !kept.is_empty() {
        let put = conn.prepare(&sql.put).await?;
        let jobs: Vec<&str> = kept.iter().map(|(id, _)| *id).collect();
        let parents: Vec<&str> = kept.iter().map(|(_, t)| t.traceparent()).collect();
        let states: Vec<Option<&str>> = kept.iter().map(|(_, t)| t.tracestate()).collect();
        conn.client()
            .execute(&put, &[&jobs, &parents, &states])
            .await
            .map_err(before)?;
    }
    Ok(())
}

/// `job`'s trace context, if it has one.
pub(crate) async fn of(
    conn: &Conn,
    sql: &TraceSql,
    job: &JobId,
) -> Result<Option<TraceContext>, StoreError> {
    let select = conn.prepare(&sql.select).await?;
    let row = conn
        .client()
        .query_opt(&select, &[&job.as_str()])
        .await
        .map_err(before)?;
    row.map(|r| lease_ports::codec::trace(job.as_str(), r.get(0), r.get(1)))
        .transpose()
}

/// Decodes rows of [`TraceSql::select_all`].
pub(crate) fn decode_all(
    rows: &[tokio_postgres::Row],
) -> Result<Vec<(JobId, TraceContext)>, StoreError> {
    rows.iter()
        .map(|r| {
            let job: &str = r.get(0);
            let trace = lease_ports::codec::trace(job, r.get(1), r.get(2))?;
            let id = lease_ports::codec::job_id(job)?;
            Ok((id, trace))
        })
        .collect()
}
