//! The changes of decided commands ([`lease_domain::Change`]) written with this store's
//! statements: PostgreSQL's one arm for every change, gathered set by set so that a
//! transaction of many decisions (a batch of enqueues, a schedule's fire) writes each kind in
//! one statement or one round trip, in the domain's order of kinds.
//!
//! Rows go first, with the clearing of checkpoints (which never follows an insert) and the
//! removal of purge marks, in one round trip; with nothing reading them after, COMMIT goes in
//! the same one. What reads the rows (trace contexts, parents, judgements, the jobs waiting
//! on a finished job) follows, set by set, and a row an enqueue lost to another that committed
//! first takes what follows it with it.

use futures::future::{try_join, try_join_all};
use lease_domain::{
    Change, Checkpoint, Fence, Job, JobId, QueueChange, QueueName, Refusal, Status, Timestamp,
    TraceContext, checkpoint_fits,
};
use lease_ports::StoreError;

use crate::PgLeaseStore;
use crate::connection::{Conn, Statements};
use crate::error::{self, Stage};
use crate::row::{Encoded, Standing};
use crate::tx::{rollback, update};

/// One row to write: the row, whether it is inserted, whether its purge mark goes, and the
/// decision it belongs to.
struct Row {
    encoded: Encoded,
    insert: bool,
    forget: bool,
    decision: usize,
}

/// The changes of the decisions of one transaction, gathered by kind.
#[derive(Default)]
pub(crate) struct Changes {
    queue: Option<(QueueName, QueueChange)>,
    checkpoint: Option<(JobId, Checkpoint, Fence, Timestamp)>,
    clear: Vec<String>,
    rows: Vec<Row>,
    /// What follows a row (trace contexts, parents, judgements, settling), with the decision
    /// it belongs to.
    traces: Vec<(usize, JobId, Option<TraceContext>)>,
    parents: Vec<(usize, JobId, Job)>,
    judged: Vec<(usize, JobId)>,
    released: Vec<(usize, JobId, Status, Option<Timestamp>)>,
    refused: Vec<(JobId, Refusal)>,
    /// Whether the transaction wrote something else already (so it commits).
    wrote: bool,
}

/// What writing the changes found: the decisions whose insert found the id taken by a write
/// that committed first (their enqueue inserted nothing).
#[derive(Debug, Default)]
pub(crate) struct Written {
    pub(crate) lost: Vec<usize>,
}

impl Changes {
    /// Adds the changes of decision `decision` on job `id`, decided over `before` (PostgreSQL's
    /// arm of every [`Change`]).
    pub(crate) fn add(
        &mut self,
        decision: usize,
        id: &JobId,
        before: Option<&Job>,
        changes: Vec<Change>,
    ) -> Result<(), StoreError> {
        let mut row: Option<Job> = None;
        for change in changes {
            match change {
                Change::Queue(queue, change) => self.queue = Some((queue, change)),
                Change::Checkpoint(checkpoint, fence, at) => {
                    self.checkpoint = Some((id.clone(), checkpoint, fence, at));
                }
                Change::ClearCheckpoints => self.clear.push(id.as_str().to_owned()),
                Change::Row { job, insert } => {
                    self.rows.push(Row {
                        encoded: Encoded::from_to(id, before.map(Standing::of), &job),
                        insert,
                        forget: false,
                        decision,
                    });
                    row = Some(job);
                }
                Change::ForgetPurged => {
                    if let Some(last) = self.rows.last_mut() {
                        last.forget = true;
                    }
                }
                Change::Trace(trace) => self.traces.push((decision, id.clone(), trace)),
                Change::Parents => match &row {
                    Some(job) => self.parents.push((decision, id.clone(), job.clone())),
                    None => {
                        return Err(StoreError::Corrupt(
                            format!("job {id}: its parents were to be written before its row")
                                .into(),
                        ));
                    }
                },
                Change::Judge => self.judged.push((decision, id.clone())),
                Change::Release(end, at) => self.released.push((decision, id.clone(), end, at)),
                Change::Refused(entry) => self.refused.push((id.clone(), entry)),
                // Kept by the statement that writes the row it ended with.
                Change::Attempt(attempt) => {
                    if let Some(last) = self.rows.last_mut() {
                        last.encoded.set_ended(Some(&attempt));
                    }
                }
            }
        }
        Ok(())
    }

    /// Says the transaction wrote something besides these changes: it commits even if they
    /// are none.
    pub(crate) fn wrote(&mut self) {
        self.wrote = true;
    }

    /// Whether anything but rows (and what goes with them) is to be written after them.
    fn follows(&self) -> bool {
        !(self.traces.is_empty()
            && self.parents.is_empty()
            && self.judged.is_empty()
            && self.released.is_empty())
    }

    /// Writes every change and commits (rolls back when there is nothing to write). `kept`
    /// is what the checkpoint's job keeps, read after its row lock: how many checkpoints, and
    /// whether one has the checkpoint's name (a checkpoint that does not fit rolls back).
    pub(crate) async fn commit(
        mut self,
        store: &PgLeaseStore,
        conn: &Conn,
        s: &Statements,
        kept: Option<(i64, bool)>,
    ) -> Result<Written, StoreError> {
        let c = conn.client();
        let audit = store.audit.filter(|_| !self.refused.is_empty());
        // A hold of a group changes its queue's settings (the job's row stays locked until
        // COMMIT, so its lease cannot change meanwhile).
        if let Some((queue, change)) = self.queue.take() {
            crate::control_sql::change_in(c, &store.control, &queue, change).await?;
            c.execute(&s.commit, &[])
                .await
                .map_err(|e| error::map(e, Stage::Commit))?;
            return Ok(Written::default());
        }
        // A checkpoint is kept beside its job, its upsert and COMMIT in one round trip.
        if let Some((id, checkpoint, fence, at)) = self.checkpoint.take() {
            let (kept, named) = kept.unwrap_or((0, false));
            let kept = usize::try_from(kept).unwrap_or(usize::MAX);
            if let Err(refused) = checkpoint_fits(&id, kept, named) {
                rollback(c, s).await?;
                return Err(StoreError::InvalidInput(refused.into()));
            }
            crate::checkpoint::keep(conn, &store.checkpoints, s, &id, &checkpoint, fence, at)
                .await?;
            return Ok(Written::default());
        }
        if self.rows.is_empty() && audit.is_none() && self.clear.is_empty() {
            if self.wrote {
                c.execute(&s.commit, &[])
                    .await
                    .map_err(|e| error::map(e, Stage::Commit))?;
            } else {
                rollback(c, s).await?;
            }
            return Ok(Written::default());
        }
        let follows = self.follows();
        let clear = if self.clear.is_empty() {
            None
        } else {
            Some(conn.prepare(&store.checkpoints.clear).await?)
        };
        let cleared: &[String] = &self.clear;
        // The rows, the checkpoints they clear, the purge marks they replace; the refusals and
        // COMMIT too when nothing follows them.
        let rows = try_join(
            try_join_all(self.rows.iter().map(|row| send_row(c, s, row))),
            async {
                match &clear {
                    Some(clear) => c.execute(clear, &[&cleared]).await,
                    None => Ok(0),
                }
            },
        );
        let written = if follows {
            rows.await
                .map_err(|e| error::map(e, Stage::BeforeCommit))?
                .0
        } else {
            let ((written, _), _) = try_join(rows, audited_commit(c, s, &self.refused, audit))
                .await
                .map_err(|e| error::map(e, Stage::Commit))?;
            written
        };
        // An insert that found the id taken by an enqueue that committed first changed
        // nothing: what follows its row goes with it.
        let mut lost = Vec::new();
        for (row, n) in self.rows.iter().zip(written) {
            match (row.insert, n) {
                (_, 1) => {}
                (true, 0) => lost.push(row.decision),
                (_, n) => {
                    return Err(StoreError::Corrupt(
                        format!("job {}: a locked write changed {n} rows", row.encoded.id()).into(),
                    ));
                }
            }
        }
        if !follows {
            return Ok(Written { lost });
        }
        let kept = |decision: &usize| !lost.contains(decision);
        let traces: Vec<(&JobId, Option<&TraceContext>)> = self
            .traces
            .iter()
            .filter(|(d, _, _)| kept(d))
            .map(|(_, id, trace)| (id, trace.as_ref()))
            .collect();
        crate::trace::set(conn, &store.traces, &traces).await?;
        let parents: Vec<(&JobId, &Job)> = self
            .parents
            .iter()
            .filter(|(d, _, _)| kept(d))
            .map(|(_, id, job)| (id, job))
            .collect();
        crate::workflow::write_parents(conn, &store.workflow, &parents).await?;
        let judged: Vec<&JobId> = self
            .judged
            .iter()
            .filter(|(d, _)| kept(d))
            .map(|(_, id)| id)
            .collect();
        crate::workflow::judge(conn, s, &store.workflow, &judged).await?;
        for (_, id, end, at) in self.released.iter().filter(|(d, ..)| kept(d)) {
            crate::workflow::release(conn, s, &store.workflow, id, *end, *at).await?;
        }
        audited_commit(conn.client(), s, &self.refused, audit)
            .await
            .map_err(|e| error::map(e, Stage::Commit))?;
        Ok(Written { lost })
    }
}

/// The refusals' audit rows (when the store keeps the trail, to `audit` rows) and COMMIT,
/// sent together.
async fn audited_commit(
    c: &tokio_postgres::Client,
    s: &Statements,
    refused: &[(JobId, Refusal)],
    audit: Option<u64>,
) -> Result<(), tokio_postgres::Error> {
    let audits = refused.iter().filter_map(|(id, entry)| {
        audit.map(|retention| crate::audit::audit_sent(c, s, id, entry, retention))
    });
    try_join(try_join_all(audits), c.execute(&s.commit, &[]))
        .await
        .map(drop)
}

/// Sends one row (an insert or an update, with the removal of the purge mark it replaces);
/// answers how many rows it wrote.
async fn send_row(
    c: &tokio_postgres::Client,
    s: &Statements,
    row: &Row,
) -> Result<u64, tokio_postgres::Error> {
    let n = if row.insert {
        c.execute(&s.insert, &row.encoded.params()).await?
    } else {
        update(c, &s.update, &s.update_counted, &row.encoded).await?
    };
    if row.forget {
        let key = row.encoded.id();
        c.execute(&s.forget_purged, &[&key]).await?;
    }
    Ok(n)
}
