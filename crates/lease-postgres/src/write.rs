//! The write path: one command on one job in one transaction (lock the row, let the domain
//! decide under the clock mode, write the decided row with COMMIT), pipelined into two round
//! trips.

use futures::future::try_join;
use lease_domain::{Change, Command, Fence, JobId, Outcome};
use lease_ports::{StoreError, outcome_as};

use crate::PgLeaseStore;
use crate::changes::Changes;
use crate::connection::{Conn, Statements};
use crate::error::{self, Stage};
use crate::row;
use crate::row::stored_now;
use crate::tx::{clock_if, one_if, rollback};

impl PgLeaseStore {
    /// Loads, decides and stores one command on one job, in one transaction on `conn`.
    pub(crate) async fn write_on(
        &self,
        conn: &mut Conn,
        id: &JobId,
        command: Command,
    ) -> Result<Outcome, StoreError> {
        // An enqueue that names parents, or may run a finished job again (whose parents it
        // replaces), is a batch of one: the batch checks and writes its workflow.
        if let Command::EnqueueWith(spec) = &command {
            if !spec.after.is_empty() || spec.replace_finished || spec.trace.is_some() {
                let inserted = self
                    .enqueue_many_on(conn, &[(id.clone(), spec.clone())])
                    .await?;
                return Ok(Outcome::Enqueued(
                    inserted.first().copied().unwrap_or(false),
                ));
            }
        }
        let s = Statements::prepare(conn, &self.sql).await?;
        let probe = if command.may_finish() {
            Some(conn.prepare(&self.workflow.has_waiting).await?)
        } else {
            None
        };
        let count = match command.checkpoint_asked() {
            Some(checkpoint) => Some((
                conn.prepare(&self.checkpoints.count).await?,
                checkpoint.name.as_str().to_owned(),
            )),
            None => None,
        };
        let c = conn.client();
        let key = id.as_str();
        let needs_clock = self.clock.needs_clock(&command);
        let enqueue = command.is_enqueue();
        // One round trip: BEGIN, the row lock, the clock after it, the purge mark, (for a
        // write that may finish the job) whether jobs wait on it, and (for a checkpoint) how
        // many the job keeps, each read after the lock.
        let claims = matches!(command, Command::Claim(..));
        let (((((_, row), (now, epoch)), purged), waited_on), kept) = try_join(
            try_join(
                try_join(
                    try_join(
                        try_join(c.execute(&s.begin, &[]), c.query_opt(&s.lock, &[&key])),
                        try_join(clock_if(c, &s, needs_clock), one_if(c, &s.epoch, claims)),
                    ),
                    async {
                        if enqueue {
                            c.query_opt(&s.lock_purged, &[&key])
                                .await
                                .map(|r| r.map(|r| r.get::<_, i64>(0)))
                        } else {
                            Ok(None)
                        }
                    },
                ),
                async {
                    match &probe {
                        Some(probe) => c
                            .query_one(probe, &[&key])
                            .await
                            .map(|r| r.get::<_, bool>(0)),
                        None => Ok(false),
                    }
                },
            ),
            async {
                match &count {
                    Some((count, name)) => c
                        .query_one(count, &[&key, name])
                        .await
                        .map(|r| Some((r.get::<_, i64>(0), r.get::<_, bool>(1)))),
                    None => Ok(None),
                }
            },
        )
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let mut current = row.as_ref().map(|r| row::decode(id, r, 0)).transpose()?;
        // A retried job is judged against its parents again: read them.
        if let (Some(row), Some(job), Command::Retry(_)) = (&row, &mut current, &command) {
            if row::names_parents(row, 0) {
                let mut jobs = [lease_ports::JobRecord {
                    id: id.clone(),
                    job: job.clone(),
                }];
                crate::workflow::with_parents(conn, &self.workflow, &mut jobs, &[true]).await?;
                let [record] = jobs;
                *job = record.job;
            }
        }
        let c = conn.client();
        let purged = purged
            .map(|f| {
                Fence::try_from(f).map_err(|f| {
                    StoreError::Corrupt(
                        format!("job {id}: stored purged fence {f} is negative").into(),
                    )
                })
            })
            .transpose()?;
        let command = self.resolved(c, &s, command, now).await?;
        // A claim hands out its fence in the epoch read in this transaction.
        let command = match epoch {
            Some(epoch) => command.in_epoch(lease_ports::codec::epoch(epoch)?),
            None => command,
        };
        let mut decided = command.decided(id, current.as_ref(), purged);
        lease_ports::observe::decided(&command, current.as_ref(), &decided);
        // Nothing waits on the job (read after its lock): no job to settle.
        if !waited_on {
            decided
                .changes
                .retain(|change| !matches!(change, Change::Release(..)));
        }
        let mut changes = Changes::default();
        changes.add(0, id, current.as_ref(), decided.changes)?;
        let written = changes.commit(self, conn, &s, kept).await?;
        match decided.outcome {
            // Another enqueue of the same new id committed first: this one changed nothing.
            Outcome::Enqueued(true) if !written.lost.is_empty() => Ok(Outcome::Enqueued(false)),
            outcome => Ok(outcome),
        }
    }

    /// One command on one job in a transaction of its own, on a pooled connection.
    pub(crate) async fn write_alone(
        &self,
        id: &JobId,
        command: Command,
    ) -> Result<Outcome, StoreError> {
        let mut conn = self.conn().await?;
        let outcome = self.write_on(&mut conn, id, command).await?;
        conn.clean();
        Ok(outcome)
    }

    /// Enqueues many jobs in one transaction, in three round trips whatever their number:
    /// BEGIN with the locking reads of every existing row and purge mark; the inserts, the
    /// removal of the purge marks they replace, and COMMIT; each decided by the domain in
    /// order (an id given twice sees its first entry's row).
    pub(crate) async fn enqueue_many_on(
        &self,
        conn: &mut Conn,
        jobs: &[(JobId, lease_domain::EnqueueSpec)],
    ) -> Result<Vec<bool>, StoreError> {
        let s = Statements::prepare(conn, &self.sql).await?;
        let lock_many = conn.prepare(&self.sql.lock_many).await?;
        let lock_purged_many = conn.prepare(&self.sql.lock_purged_many).await?;
        let c = conn.client();
        let ids: Vec<&str> = jobs.iter().map(|(id, _)| id.as_str()).collect();
        let ((_, rows), marks) = try_join(
            try_join(c.execute(&s.begin, &[]), c.query(&lock_many, &[&ids])),
            c.query(&lock_purged_many, &[&ids]),
        )
        .await
        .map_err(|e| error::map(e, Stage::BeforeCommit))?;
        let mut current: std::collections::HashMap<JobId, lease_domain::Job> = rows
            .iter()
            .map(|row| row::decode_with_id(row, 0))
            .collect::<Result<_, _>>()?;
        // A batch that names parents, or may run a finished job again, is a workflow's: its
        // parents are checked (and locked) before anything is decided.
        let workflow = jobs
            .iter()
            .any(|(_, spec)| !spec.after.is_empty() || spec.replace_finished);
        if workflow {
            crate::workflow::check(conn, &self.workflow, jobs).await?;
        }
        let mut purged = std::collections::HashMap::new();
        for mark in &marks {
            let (id, fence): (String, i64) = (mark.get(0), mark.get(1));
            let fence = Fence::try_from(fence).map_err(|f| {
                StoreError::Corrupt(format!("job {id}: stored purged fence {f} is negative").into())
            })?;
            purged.insert(id, fence);
        }
        // Each job decided in order (an id given twice sees its first entry's row), its
        // changes written set by set once all are decided.
        let mut changes = Changes::default();
        let mut decided = Vec::with_capacity(jobs.len());
        for (at, (id, spec)) in jobs.iter().enumerate() {
            let command = Command::EnqueueWith(spec.clone());
            let stood = current.get(id);
            let decision = command.decided(id, stood, purged.get(id.as_str()).copied());
            lease_ports::observe::decided(&command, stood, &decision);
            let next = decision.row().cloned();
            changes.add(at, id, stood, decision.changes)?;
            decided.push(decision.outcome);
            if let Some(next) = next {
                current.insert(id.clone(), next);
            }
        }
        let written = changes.commit(self, conn, &s, None).await?;
        // An insert that found the id taken by an enqueue that committed first changed
        // nothing: that job was not inserted by this batch.
        for at in written.lost {
            if let Some(outcome @ Outcome::Enqueued(true)) = decided.get_mut(at) {
                *outcome = Outcome::Enqueued(false);
            }
        }
        decided.into_iter().map(outcome_as).collect()
    }

    /// The command to decide under the clock mode, given the server's clock when it was read;
    /// a refused caller's transaction is rolled back.
    pub(crate) async fn resolved(
        &self,
        c: &tokio_postgres::Client,
        s: &Statements,
        command: Command,
        now: Option<f64>,
    ) -> Result<Command, StoreError> {
        let Some(now) = now else {
            return Ok(command);
        };
        match self.clock.resolve(&command, stored_now(now)?) {
            Ok(command) => Ok(command),
            Err(refused) => {
                rollback(c, s).await?;
                Err(refused.into())
            }
        }
    }
}
