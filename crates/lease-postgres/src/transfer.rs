//! Export and import of every job, purge mark, queue setting and schedule, for
//! `lease migrate`.

use async_trait::async_trait;
use futures::future::try_join_all;
use lease_domain::{Epoch, Fence, JobId};
use lease_ports::transfer::{Imported, Snapshot, TargetView, Transfer, plan_import};
use lease_ports::{JobRecord, StoreError};

use crate::PgLeaseStore;
use crate::error::{self, Stage};
use crate::row;
use crate::row::{Encoded, Standing};
use crate::sql;
use crate::tx::update;

fn mark_fence(id: &str, fence: i64) -> Result<(JobId, Fence), StoreError> {
    let id = lease_ports::codec::job_id(id)?;
    let fence = lease_ports::codec::fence(fence, &format!("purged job {id}: fence"))?;
    Ok((id, fence))
}

#[async_trait]
impl Transfer for PgLeaseStore {
    async fn export(&self) -> Result<Snapshot, StoreError> {
        let mut conn = self.conn().await?;
        let c = conn.client();
        let s = &self.schema;
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let read = |e: tokio_postgres::Error| error::map(e, Stage::BeforeCommit);
        let jobs = c
            .query(
                &format!(
                    "SELECT id, {} FROM {s}.jobs ORDER BY seq",
                    sql::READ_COLUMNS
                ),
                &[],
            )
            .await
            .map_err(read)?;
        let mut records = jobs
            .iter()
            .map(|row| row::decode_with_id(row, 0).map(|(id, job)| JobRecord { id, job }))
            .collect::<Result<Vec<_>, _>>()?;
        let named: Vec<bool> = jobs.iter().map(|row| row::names_parents(row, 1)).collect();
        crate::workflow::with_parents(&conn, &self.workflow, &mut records, &named).await?;
        let marks = c
            .query(
                &format!("SELECT id, fence FROM {s}.purged ORDER BY id"),
                &[],
            )
            .await
            .map_err(read)?;
        let (queues, schedules) = crate::control_sql::read_all(c, &self.control).await?;
        let checkpoints = c
            .query(&self.checkpoints.select_all, &[])
            .await
            .map_err(read)?;
        let traces = c.query(&self.traces.select_all, &[]).await.map_err(read)?;
        let attempts = c.query(&self.sql.attempts_all, &[]).await.map_err(read)?;
        let epoch = c.query_one(&self.sql.epoch, &[]).await.map_err(read)?;
        c.batch_execute("COMMIT").await.map_err(read)?;
        conn.clean();
        let mut snapshot = Snapshot {
            queues,
            schedules,
            checkpoints: crate::checkpoint::decode_all(&checkpoints)?,
            traces: crate::trace::decode_all(&traces)?,
            attempts: decode_attempts(&attempts)?,
            epoch: lease_ports::codec::epoch(epoch.get(0))?,
            ..Snapshot::default()
        };
        snapshot.jobs = records;
        for row in &marks {
            snapshot
                .purged
                .push(mark_fence(row.get::<_, &str>(0), row.get(1))?);
        }
        Ok(snapshot)
    }

    async fn import(&self, snapshot: &Snapshot, merge: bool) -> Result<Imported, StoreError> {
        let mut conn = self.conn().await?;
        let c = conn.client();
        let s = &self.schema;
        let before = |e: tokio_postgres::Error| error::map(e, Stage::BeforeCommit);
        // Writers wait while the copy runs; readers do not.
        c.batch_execute(&format!(
            "BEGIN; LOCK TABLE {s}.jobs, {s}.purged, {s}.queues, {s}.schedules \
             IN SHARE ROW EXCLUSIVE MODE"
        ))
        .await
        .map_err(before)?;
        let counts = c
            .query_one(
                &format!(
                    "SELECT (SELECT count(*) FROM {s}.jobs), (SELECT count(*) FROM {s}.purged)"
                ),
                &[],
            )
            .await
            .map_err(before)?;
        let (jobs, marks): (i64, i64) = (counts.get(0), counts.get(1));
        let (queues, schedules) = crate::control_sql::read_all(c, &self.control).await?;
        let mut view = TargetView {
            total_jobs: lease_ports::codec::count(jobs, "the target's job count")?,
            total_marks: lease_ports::codec::count(marks, "the target's purge mark count")?,
            queues: queues.into_iter().collect(),
            schedules: schedules
                .into_iter()
                .map(|s| (s.spec.name.clone(), s))
                .collect(),
            ..TargetView::default()
        };
        // The target's jobs that name parents (an update replaces them).
        let named = read_met(c, s, snapshot, &mut view).await?;
        // Where the target's jobs stood, for the counts an update moves.
        let current: std::collections::HashMap<JobId, Standing> = view
            .jobs
            .iter()
            .map(|(id, job)| (id.clone(), Standing::of(job)))
            .collect();
        let plan = plan_import(&self.target, view, snapshot, merge)?;
        c.query_one(&self.sql.raise_epoch, &[&i64::from(plan.epoch.get())])
            .await
            .map_err(before)?;
        let inserts: Vec<Encoded> = plan
            .inserts
            .iter()
            .map(|(id, j)| Encoded::new(id, j))
            .collect();
        let inserted_ids: Vec<&str> = plan.inserts.iter().map(|(id, _)| id.as_str()).collect();
        let updates: Vec<Encoded> = plan
            .updates
            .iter()
            .map(|(id, j)| Encoded::from_to(id, current.get(id).cloned(), j))
            .collect();
        let (mark_ids, mark_fences): (Vec<&str>, Vec<i64>) = plan
            .marks
            .iter()
            .map(|(id, f)| (id.as_str(), i64::from(*f)))
            .unzip();
        let insert = conn.prepare(&self.sql.insert).await?;
        let update_stmt = conn.prepare(&self.sql.update).await?;
        let update_counted = conn.prepare(&self.sql.update_counted).await?;
        let forget = format!("DELETE FROM {s}.purged WHERE id = ANY($1::text[])");
        let commit = |e: tokio_postgres::Error| error::map(e, Stage::Commit);
        // In order: inserts keep the source's enqueue order.
        try_join_all(inserts.iter().map(|job| crate::tx::insert(c, &insert, job)))
            .await
            .map_err(before)?;
        try_join_all(
            updates
                .iter()
                .map(|job| update(c, &update_stmt, &update_counted, job)),
        )
        .await
        .map_err(before)?;
        c.execute(&forget, &[&inserted_ids]).await.map_err(before)?;
        c.execute(&self.sql.remember_purged, &[&mark_ids, &mark_fences])
            .await
            .map_err(before)?;
        for (queue, settings) in &plan.queues {
            crate::control_sql::write_settings(c, &self.control, queue, settings)
                .await
                .map_err(before)?;
        }
        for schedule in &plan.schedules {
            crate::control_sql::write_schedule(c, &self.control, schedule)
                .await
                .map_err(before)?;
        }
        // Each job's parents and policy, as the source had them.
        let parented: Vec<(&JobId, &lease_domain::Job)> = plan
            .inserts
            .iter()
            .chain(&plan.updates)
            .filter(|(id, job)| !job.after.is_empty() || named.contains(id))
            .map(|(id, job)| (id, job))
            .collect();
        crate::workflow::write_parents(&conn, &self.workflow, &parented).await?;
        let cleared: Vec<&str> = plan.cleared.iter().map(JobId::as_str).collect();
        crate::checkpoint::clear(&conn, &self.checkpoints, &cleared).await?;
        crate::checkpoint::put(&conn, &self.checkpoints, &plan.checkpoints).await?;
        let traces: Vec<(&JobId, Option<&lease_domain::TraceContext>)> = plan
            .cleared
            .iter()
            .map(|id| (id, None))
            .chain(plan.traces.iter().map(|(id, t)| (id, Some(t))))
            .collect();
        crate::trace::set(&conn, &self.traces, &traces).await?;
        put_attempts(&conn, &self.sql, &cleared, &plan.attempts).await?;
        conn.client()
            .batch_execute("COMMIT")
            .await
            .map_err(commit)?;
        conn.clean();
        Ok(plan.imported)
    }

    async fn epoch(&self) -> Result<Epoch, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .client()
            .query_one(&self.sql.epoch, &[])
            .await
            .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        lease_ports::codec::epoch(row.get(0))
    }

    async fn raise_epoch(&self, at_least: Epoch) -> Result<Epoch, StoreError> {
        let conn = self.conn().await?;
        // One statement, so one transaction: it commits or it does not.
        let row = conn
            .client()
            .query_one(&self.sql.raise_epoch, &[&i64::from(at_least.get())])
            .await
            .map_err(|e| error::map(e, Stage::Commit))?;
        lease_ports::codec::epoch(row.get(0))
    }

    async fn check_heads(
        &self,
        rebuild: bool,
    ) -> Result<lease_ports::transfer::HeadCheck, StoreError> {
        self.heads_checked(rebuild).await
    }
}

/// Rows of `Sql::attempts_all` as each job's attempts.
fn decode_attempts(
    rows: &[tokio_postgres::Row],
) -> Result<Vec<(JobId, lease_domain::Attempt)>, StoreError> {
    let bad = |e: tokio_postgres::Error| {
        StoreError::Corrupt(format!("an attempt cannot be read: {e}").into())
    };
    rows.iter()
        .map(|r| {
            let job: String = r.try_get(0).map_err(bad)?;
            let row = row::stored_attempt(r, 1).map_err(bad)?;
            let attempt = lease_ports::codec::attempt(&job, row)?;
            Ok((lease_ports::codec::job_id(job)?, attempt))
        })
        .collect()
}

/// Deletes the attempts of the `cleared` jobs and keeps `attempts`, in the open transaction.
async fn put_attempts(
    conn: &crate::connection::Conn,
    sql: &crate::sql::Sql,
    cleared: &[&str],
    attempts: &[(JobId, lease_domain::Attempt)],
) -> Result<(), StoreError> {
    let c = conn.client();
    let before = |e| crate::error::map(e, crate::error::Stage::BeforeCommit);
    if !cleared.is_empty() {
        c.execute(sql.attempts_clear.as_str(), &[&cleared])
            .await
            .map_err(before)?;
    }
    if attempts.is_empty() {
        return Ok(());
    }
    let jobs: Vec<&str> = attempts.iter().map(|(id, _)| id.as_str()).collect();
    let fences: Vec<i64> = attempts
        .iter()
        .map(|(_, a)| i64::try_from(a.fence.get()).unwrap_or(i64::MAX))
        .collect();
    let owners: Vec<&str> = attempts.iter().map(|(_, a)| a.owner.as_str()).collect();
    let started: Vec<Option<f64>> = attempts
        .iter()
        .map(|(_, a)| a.started.map(lease_domain::Timestamp::get))
        .collect();
    // One read from a store without a clock (the memory store's release) ends by this one's.
    let ended: Vec<Option<f64>> = attempts
        .iter()
        .map(|(_, a)| a.ended.map(lease_domain::Timestamp::get))
        .collect();
    let outcomes: Vec<&str> = attempts.iter().map(|(_, a)| a.end.as_str()).collect();
    let errors: Vec<Option<&str>> = attempts.iter().map(|(_, a)| a.error.as_deref()).collect();
    c.execute(
        sql.attempts_put.as_str(),
        &[
            &jobs, &fences, &owners, &started, &ended, &outcomes, &errors,
        ],
    )
    .await
    .map_err(before)?;
    Ok(())
}

/// Reads into `view` the target's jobs and purge marks that `snapshot` names (none when the
/// target is empty), answering which of those jobs name parents.
async fn read_met(
    c: &tokio_postgres::Client,
    s: &str,
    snapshot: &Snapshot,
    view: &mut TargetView,
) -> Result<std::collections::HashSet<JobId>, StoreError> {
    let before = |e: tokio_postgres::Error| error::map(e, Stage::BeforeCommit);
    let mut named = std::collections::HashSet::new();
    if view.total_jobs > 0 || view.total_marks > 0 {
        let ids: Vec<&str> = snapshot
            .jobs
            .iter()
            .map(|r| r.id.as_str())
            .chain(snapshot.purged.iter().map(|(id, _)| id.as_str()))
            .collect();
        let rows = c
            .query(
                &format!(
                    "SELECT id, {} FROM {s}.jobs WHERE id = ANY($1)",
                    sql::READ_COLUMNS
                ),
                &[&ids],
            )
            .await
            .map_err(before)?;
        for row in &rows {
            let (id, job) = row::decode_with_id(row, 0)?;
            if row::names_parents(row, 1) {
                named.insert(id.clone());
            }
            view.jobs.insert(id, job);
        }
        let rows = c
            .query(
                &format!("SELECT id, fence FROM {s}.purged WHERE id = ANY($1)"),
                &[&ids],
            )
            .await
            .map_err(before)?;
        for row in &rows {
            let (id, fence) = mark_fence(row.get::<_, &str>(0), row.get(1))?;
            view.marks.insert(id, fence);
        }
    }
    Ok(named)
}
