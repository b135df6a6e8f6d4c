//! Export and import of every job and purge mark, for `lease migrate`.

use std::collections::HashMap;

use async_trait::async_trait;
use futures::future::try_join_all;
use lease_domain::{Fence, ImportDecision, Job, JobId, decide_import, raise_fence};
use lease_ports::transfer::{Conflict, Imported, Snapshot, Transfer, refuse_unless_empty};
use lease_ports::{JobRecord, StoreError};

use crate::error::{self, Stage};
use crate::sql::{self, Encoded};
use crate::{PgLeaseStore, update};

fn mark_fence(id: &str, fence: i64) -> Result<(JobId, Fence), StoreError> {
    let id = JobId::new(id).map_err(|e| StoreError::Corrupt(format!("stored purged id: {e}")))?;
    let fence = Fence::try_from(fence)
        .map_err(|f| StoreError::Corrupt(format!("purged job {id}: fence {f} is negative")))?;
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
            .map_err(|e| error::map(&e, Stage::BeforeCommit))?;
        let read = |e: tokio_postgres::Error| error::map(&e, Stage::BeforeCommit);
        let jobs = c
            .query(
                &format!("SELECT id, {} FROM {s}.jobs ORDER BY seq", sql::COLUMNS),
                &[],
            )
            .await
            .map_err(read)?;
        let marks = c
            .query(
                &format!("SELECT id, fence FROM {s}.purged ORDER BY id"),
                &[],
            )
            .await
            .map_err(read)?;
        c.batch_execute("COMMIT").await.map_err(read)?;
        conn.clean();
        let mut snapshot = Snapshot::default();
        for row in &jobs {
            let (id, job) = sql::decode_with_id(row, 0)?;
            snapshot.jobs.push(JobRecord { id, job });
        }
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
        let before = |e: tokio_postgres::Error| error::map(&e, Stage::BeforeCommit);
        // Writers wait while the copy runs; readers do not.
        c.batch_execute(&format!(
            "BEGIN; LOCK TABLE {s}.jobs, {s}.purged IN SHARE ROW EXCLUSIVE MODE"
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
        refuse_unless_empty(
            &self.target,
            u64::try_from(jobs).unwrap_or(0),
            u64::try_from(marks).unwrap_or(0),
            merge,
        )?;
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
                    sql::COLUMNS
                ),
                &[&ids],
            )
            .await
            .map_err(before)?;
        let mut existing: HashMap<JobId, Job> = HashMap::new();
        for row in &rows {
            let (id, job) = sql::decode_with_id(row, 0)?;
            existing.insert(id, job);
        }
        let rows = c
            .query(
                &format!("SELECT id, fence FROM {s}.purged WHERE id = ANY($1)"),
                &[&ids],
            )
            .await
            .map_err(before)?;
        let mut target_marks: HashMap<JobId, Fence> = HashMap::new();
        for row in &rows {
            let (id, fence) = mark_fence(row.get::<_, &str>(0), row.get(1))?;
            target_marks.insert(id, fence);
        }
        let mut inserts = Vec::new();
        let mut inserted_ids: Vec<String> = Vec::new();
        let mut updates = Vec::new();
        let mut imported = Imported::default();
        for record in &snapshot.jobs {
            let current = existing.get(&record.id);
            match decide_import(&record.job, current, target_marks.get(&record.id).copied()) {
                ImportDecision::Insert(job) => {
                    inserts.push(Encoded::new(&record.id, &job));
                    imported.inserted += 1;
                    inserted_ids.push(record.id.as_str().to_owned());
                    existing.insert(record.id.clone(), job);
                }
                ImportDecision::Replace(job) => {
                    imported.conflicts.push(conflict(record, current, true));
                    updates.push(Encoded::new(&record.id, &job));
                    existing.insert(record.id.clone(), job);
                }
                ImportDecision::Keep => imported.conflicts.push(conflict(record, current, false)),
            }
        }
        let mut new_marks: Vec<(String, i64)> = Vec::new();
        for (id, fence) in &snapshot.purged {
            match existing.get(id) {
                Some(job) if job.fence < *fence => {
                    updates.push(Encoded::new(id, &raise_fence(job, Some(*fence))));
                    imported.marks += 1;
                }
                Some(_) => {}
                None => {
                    new_marks.push((id.as_str().to_owned(), i64::from(*fence)));
                    imported.marks += 1;
                }
            }
        }
        let insert = conn.prepare(&self.sql.insert).await?;
        let update_stmt = conn.prepare(&self.sql.update).await?;
        let forget = format!("DELETE FROM {s}.purged WHERE id = ANY($1::text[])");
        let (mark_ids, mark_fences): (Vec<String>, Vec<i64>) = new_marks.into_iter().unzip();
        let commit = |e: tokio_postgres::Error| error::map(&e, Stage::Commit);
        // In order: inserts keep the source's enqueue order.
        try_join_all(inserts.iter().map(|job| update(c, &insert, job)))
            .await
            .map_err(before)?;
        try_join_all(updates.iter().map(|job| update(c, &update_stmt, job)))
            .await
            .map_err(before)?;
        c.execute(&forget, &[&inserted_ids]).await.map_err(before)?;
        c.execute(&self.sql.remember_purged, &[&mark_ids, &mark_fences])
            .await
            .map_err(before)?;
        c.batch_execute("COMMIT").await.map_err(commit)?;
        conn.clean();
        Ok(imported)
    }
}

fn conflict(record: &JobRecord, current: Option<&Job>, replaced: bool) -> Conflict {
    Conflict {
        job: record.id.clone(),
        source_fence: record.job.fence,
        target_fence: current.map_or(Fence::ZERO, |j| j.fence),
        replaced,
    }
}
