//! Checkpoints inside the open transaction (the job's row locked first, as every write of
//! the job does): a granted checkpoint kept (a new name only while the job keeps fewer than
//! the limit, as `lease_domain::checkpoint_fits` says), a run again's cleared, and the reads.

use lease_domain::{Checkpoint, Fence, JobId, KeptCheckpoint, Timestamp};
use lease_ports::StoreError;

use crate::connection::Conn;
use crate::error::{self, Stage};

/// The statements of checkpoints, spelled for one schema.
#[derive(Debug)]
pub(crate) struct CheckpointSql {
    /// How many checkpoints `$1` keeps, and whether one is named `$2`.
    pub(crate) count: String,
    /// Keeps a checkpoint (`$1` job, `$2` name, `$3` value, `$4` fence, `$5` time).
    upsert: String,
    /// Writes checkpoints as they are (arrays of job, name, value, fence, time).
    put: String,
    /// Deletes the checkpoints of the jobs `$1`.
    pub(crate) clear: String,
    /// The checkpoints of `$1`, in name order.
    select: String,
    /// Every checkpoint, in job then name order.
    pub(crate) select_all: String,
}

impl CheckpointSql {
    pub(crate) fn new(s: &str) -> Self {
        let set = "ON CONFLICT (job, name) DO UPDATE SET value = excluded.value, \
            fence = excluded.fence, at = excluded.at";
        Self {
            count: format!(
                "SELECT count(*), coalesce(bool_or(name = $2), false) FROM {s}.checkpoints \
                 WHERE job = $1"
            ),
            upsert: format!(
                "INSERT INTO {s}.checkpoints (job, name, value, fence, at) \
                 VALUES ($1, $2, $3, $4, $5) {set}"
            ),
            put: format!(
                "INSERT INTO {s}.checkpoints (job, name, value, fence, at) \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], \
                 $5::double precision[]) {set}"
            ),
            clear: format!("DELETE FROM {s}.checkpoints WHERE job = ANY($1::text[])"),
            select: format!(
                "SELECT name, value, fence, at FROM {s}.checkpoints WHERE job = $1 \
                 ORDER BY name COLLATE \"C\""
            ),
            select_all: format!(
                "SELECT job, name, value, fence, at FROM {s}.checkpoints \
                 ORDER BY job COLLATE \"C\", name COLLATE \"C\""
            ),
        }
    }
}

fn before(e: tokio_postgres::Error) -> StoreError {
    error::map(e, Stage::BeforeCommit)
}

/// Keeps `checkpoint` of `job`, written by `fence` at `at`, and commits, in one round trip
/// (the caller has judged, with [`CheckpointSql::count`] read after the row lock, that the
/// job may keep it).
pub(crate) async fn keep(
    conn: &Conn,
    sql: &CheckpointSql,
    s: &crate::connection::Statements,
    job: &JobId,
    checkpoint: &Checkpoint,
    fence: Fence,
    at: Timestamp,
) -> Result<(), StoreError> {
    let upsert = conn.prepare(&sql.upsert).await?;
    let c = conn.client();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
        &job.as_str(),
        &checkpoint.name.as_str(),
        &checkpoint.value.as_str(),
        &i64::from(fence),
        &at.get(),
    ];
    futures::future::try_join(c.execute(&upsert, &params), c.execute(&s.commit, &[]))
        .await
        .map(drop)
        .map_err(|e| error::map(e, Stage::Commit))
}

/// Deletes every checkpoint of `jobs`.
pub(crate) async fn clear(
    conn: &Conn,
    sql: &CheckpointSql,
    jobs: &[&str],
) -> Result<(), StoreError> {
    if jobs.is_empty() {
        return Ok(());
    }
    let clear = conn.prepare(&sql.clear).await?;
    conn.client()
        .execute(&clear, &[&jobs])
        .await
        .map(drop)
        .map_err(before)
}

/// The checkpoints `job` keeps, in name order.
pub(crate) async fn of(
    conn: &Conn,
    sql: &CheckpointSql,
    job: &JobId,
) -> Result<Vec<KeptCheckpoint>, StoreError> {
    let select = conn.prepare(&sql.select).await?;
    let rows = conn
        .client()
        .query(&select, &[&job.as_str()])
        .await
        .map_err(before)?;
    rows.iter()
        .map(|r| {
            lease_ports::codec::checkpoint(job.as_str(), r.get(0), r.get(1), r.get(2), r.get(3))
        })
        .collect()
}

/// Decodes rows of [`CheckpointSql::select_all`].
pub(crate) fn decode_all(
    rows: &[tokio_postgres::Row],
) -> Result<Vec<(JobId, KeptCheckpoint)>, StoreError> {
    rows.iter()
        .map(|r| {
            let job: &str = r.get(0);
            let kept = lease_ports::codec::checkpoint(job, r.get(1), r.get(2), r.get(3), r.get(4))?;
            let id = lease_ports::codec::job_id(job)?;
            Ok((id, kept))
        })
        .collect()
}

/// Writes `checkpoints` as they are (an import), replacing any of the same job and name.
pub(crate) async fn put(
    conn: &Conn,
    sql: &CheckpointSql,
    checkpoints: &[(JobId, KeptCheckpoint)],
) -> Result<(), StoreError> {
    if checkpoints.is_empty() {
        return Ok(());
    }
    let jobs: Vec<&str> = checkpoints.iter().map(|(id, _)| id.as_str()).collect();
    let names: Vec<&str> = checkpoints.iter().map(|(_, c)| c.name.as_str()).collect();
    let values: Vec<&str> = checkpoints.iter().map(|(_, c)| c.value.as_str()).collect();
    let fences: Vec<i64> = checkpoints
        .iter()
        .map(|(_, c)| i64::from(c.fence))
        .collect();
    let ats: Vec<f64> = checkpoints.iter().map(|(_, c)| c.at.get()).collect();
    let put = conn.prepare(&sql.put).await?;
    conn.client()
        .execute(&put, &[&jobs, &names, &values, &fences, &ats])
        .await
        .map(drop)
        .map_err(before)
}
