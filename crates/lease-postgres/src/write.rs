//! The write path: one command on one job in one transaction (lock the row, let the domain
//! decide under the clock mode, write the decided row with COMMIT), pipelined into two round
//! trips.

use futures::future::{try_join, try_join_all};
use lease_domain::{Command, Fence, JobId, Outcome, finishes, judges_parents};
use lease_ports::{StoreError, outcome_as};
use tokio_postgres::Statement;

use crate::PgLeaseStore;
use crate::connection::{Conn, Statements};
use crate::error::{self, Stage};
use crate::sql::stored_now;
use crate::sql::{self, Encoded, Standing};

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
        let mut current = row.as_ref().map(|r| sql::decode(id, r, 0)).transpose()?;
        // A retried job is judged against its parents again: read them.
        if let (Some(row), Some(job), Command::Retry(_)) = (&row, &mut current, &command) {
            if sql::names_parents(row, 0) {
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
        let (next, outcome) = command.decide(id, current.as_ref(), purged);
        let refused = lease_ports::observe::decided(&command, current.as_ref(), &outcome);
        // A hold of the job's group changes its queue's settings in this transaction (the job
        // row stays locked until COMMIT, so its lease cannot change meanwhile).
        if let Some((queue, change)) = command.queue_change(current.as_ref(), &outcome) {
            crate::control::change_in(c, &self.control, &queue, change).await?;
            c.execute(&s.commit, &[])
                .await
                .map_err(|e| error::map(e, Stage::Commit))?;
            return Ok(outcome);
        }
        // A checkpoint is kept beside the job, which it leaves as it is (its row stays locked
        // until COMMIT), its upsert and COMMIT in one round trip. A refusal of the limit rolls
        // back.
        if let Some((checkpoint, fence, at)) = command.checkpoint(&outcome) {
            let (kept, named) = kept.unwrap_or((0, false));
            let kept = usize::try_from(kept).unwrap_or(usize::MAX);
            if let Err(refused) = lease_domain::checkpoint_fits(id, kept, named) {
                rollback(c, &s).await?;
                return Err(StoreError::InvalidInput(refused.into()));
            }
            crate::checkpoint::keep(conn, &self.checkpoints, &s, id, checkpoint, fence, at).await?;
            return Ok(outcome);
        }
        let Some(next) = next else {
            match (refused, self.audit) {
                (Some(entry), Some(retention)) => {
                    self.commit_refusal(c, &s, id, &entry, retention).await?;
                }
                _ => rollback(c, &s).await?,
            }
            return Ok(outcome);
        };
        let encoded = Encoded::from_to(id, current.as_ref().map(Standing::of), &next);
        let inserting = current.is_none();
        let judged = judges_parents(current.as_ref(), &next);
        let released = finishes(current.as_ref(), &next).filter(|_| waited_on);
        if judged || released.is_some() {
            // A workflow's write: the row first, then the jobs it decides, then COMMIT.
            update(c, &s.update, &s.update_counted, &encoded)
                .await
                .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            if judged {
                crate::workflow::judge(conn, &s, &self.workflow, &[id]).await?;
            }
            if let Some(end) = released {
                crate::workflow::release(conn, &s, &self.workflow, id, end, next.updated).await?;
            }
            conn.client()
                .execute(&s.commit, &[])
                .await
                .map_err(|e| error::map(e, Stage::Commit))?;
            return Ok(outcome);
        }
        // One round trip: the write, the purge mark's removal, COMMIT.
        let ((written, _), _) = try_join(
            try_join(
                async {
                    if inserting {
                        c.execute(&s.insert, &encoded.params()).await
                    } else {
                        update(c, &s.update, &s.update_counted, &encoded).await
                    }
                },
                async {
                    if inserting && purged.is_some() {
                        c.execute(&s.forget_purged, &[&key]).await
                    } else {
                        Ok(0)
                    }
                },
            ),
            c.execute(&s.commit, &[]),
        )
        .await
        .map_err(|e| error::map(e, Stage::Commit))?;
        match (written, outcome) {
            (1, outcome) => Ok(outcome),
            // Another enqueue of the same new id committed first: this one changed nothing.
            (0, Outcome::Enqueued(_)) => Ok(Outcome::Enqueued(false)),
            (n, _) => Err(StoreError::Corrupt(
                format!("job {id}: a locked write changed {n} rows").into(),
            )),
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
            .map(|row| sql::decode_with_id(row, 0))
            .collect::<Result<_, _>>()?;
        // A batch that names parents, or may run a finished job again, is a workflow's: its
        // parents are checked (and locked) before anything is decided.
        let workflow = jobs
            .iter()
            .any(|(_, spec)| !spec.after.is_empty() || spec.replace_finished);
        if workflow {
            crate::workflow::check(conn, &self.workflow, jobs).await?;
        }
        // A batch with a trace context writes it after its rows, knowing which it made: the
        // workflow's way (one more round trip before COMMIT), only for such batches.
        let traced = jobs.iter().any(|(_, spec)| spec.trace.is_some());
        let c = conn.client();
        let mut purged = std::collections::HashMap::new();
        for mark in &marks {
            let (id, fence): (String, i64) = (mark.get(0), mark.get(1));
            let fence = Fence::try_from(fence).map_err(|f| {
                StoreError::Corrupt(format!("job {id}: stored purged fence {f} is negative").into())
            })?;
            purged.insert(id, fence);
        }
        // Each write: the row, whether it is new (else a finished job run again or a waiting
        // one debounced), its mark, and the index of its outcome.
        let mut writes = Vec::new();
        let mut decided = Vec::with_capacity(jobs.len());
        let mut reruns = std::collections::HashSet::new();
        let mut traces = std::collections::HashMap::new();
        for (id, spec) in jobs {
            let command = Command::EnqueueWith(spec.clone());
            let mark = purged.get(id.as_str()).copied();
            let stood = current.get(id);
            let (next, outcome) = command.decide(id, stood, mark);
            if command.clears_checkpoints(stood, next.as_ref()) {
                reruns.insert(id);
            }
            if let Some(trace) = command.sets_trace(stood, next.as_ref()) {
                traces.insert(id, trace.cloned());
            }
            decided.push(outcome);
            if let Some(next) = next {
                let encoded = Encoded::from_to(id, stood.map(Standing::of), &next);
                writes.push((
                    encoded,
                    stood.is_none(),
                    mark.map(|_| id.as_str()),
                    decided.len() - 1,
                ));
                current.insert(id.clone(), next);
            }
        }
        if writes.is_empty() {
            rollback(c, &s).await?;
        } else if workflow || traced {
            // The rows first, then each started job's parents and its judgement, then COMMIT.
            let written = send_rows(c, &s, &writes)
                .await
                .map_err(|e| error::map(e, Stage::BeforeCommit))?;
            let mut started = Vec::new();
            for ((_, _, _, at), n) in writes.iter().zip(written) {
                if n == 0 && matches!(decided[*at], Outcome::Enqueued(true)) {
                    decided[*at] = Outcome::Enqueued(false);
                } else if matches!(decided[*at], Outcome::Enqueued(true)) {
                    let id = &jobs[*at].0;
                    if let Some(job) = current.get(id) {
                        started.push((id, job));
                    }
                }
            }
            if workflow {
                crate::workflow::write_parents(conn, &self.workflow, &started).await?;
            }
            // A finished job run again starts without its checkpoints.
            let rerun: Vec<&str> = started
                .iter()
                .filter(|(id, _)| reruns.contains(id))
                .map(|(id, _)| id.as_str())
                .collect();
            crate::checkpoint::clear(conn, &self.checkpoints, &rerun).await?;
            let judged: Vec<&JobId> = started
                .iter()
                .filter(|(_, job)| judges_parents(None, job))
                .map(|(id, _)| *id)
                .collect();
            crate::workflow::judge(conn, &s, &self.workflow, &judged).await?;
            // Each started job's trace context, as its enqueue set it (the last word of an id
            // given twice).
            let set: Vec<(&JobId, Option<&lease_domain::TraceContext>)> = started
                .iter()
                .filter_map(|(id, _)| traces.get(*id).map(|t| (*id, t.as_ref())))
                .collect();
            crate::trace::set(conn, &self.traces, &set).await?;
            conn.client()
                .execute(&s.commit, &[])
                .await
                .map_err(|e| error::map(e, Stage::Commit))?;
        } else {
            let (written, _) = try_join(send_rows(c, &s, &writes), c.execute(&s.commit, &[]))
                .await
                .map_err(|e| error::map(e, Stage::Commit))?;
            // An insert that found the id taken by an enqueue that committed first changed
            // nothing: that job was not inserted by this batch.
            for ((_, _, _, at), n) in writes.iter().zip(written) {
                if n == 0 && matches!(decided[*at], Outcome::Enqueued(true)) {
                    decided[*at] = Outcome::Enqueued(false);
                }
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

/// Reads the server's clock when `needed` (sent when first polled, so it can be pipelined
/// after the requests before it), else answers `None` without a request.
pub(crate) async fn clock_if(
    c: &tokio_postgres::Client,
    s: &Statements,
    needed: bool,
) -> Result<Option<f64>, tokio_postgres::Error> {
    one_if(c, &s.clock, needed).await
}

/// The one value `statement` answers, read when `needed`, else `None` without a request.
async fn one_if<T: for<'a> tokio_postgres::types::FromSql<'a>>(
    c: &tokio_postgres::Client,
    statement: &tokio_postgres::Statement,
    needed: bool,
) -> Result<Option<T>, tokio_postgres::Error> {
    if needed {
        c.query_one(statement, &[]).await.map(|r| Some(r.get(0)))
    } else {
        Ok(None)
    }
}

/// A row an enqueue writes: the row, whether it is new (else an update), the purge mark it
/// replaces, and the index of its outcome.
type RowWrite<'a> = (Encoded, bool, Option<&'a str>, usize);

/// Sends an enqueue's rows (inserts or updates, each with the removal of the purge mark it
/// replaces), pipelined; answers how many rows each wrote.
async fn send_rows(
    c: &tokio_postgres::Client,
    s: &Statements,
    writes: &[RowWrite<'_>],
) -> Result<Vec<u64>, tokio_postgres::Error> {
    let (insert, forget) = (&s.insert, &s.forget_purged);
    let (plain, counted) = (&s.update, &s.update_counted);
    try_join_all(writes.iter().map(|(row, new, marked, _)| async move {
        let n = if *new {
            c.execute(insert, &row.params()).await?
        } else {
            update(c, plain, counted, row).await?
        };
        if let Some(key) = marked {
            c.execute(forget, &[key]).await?;
        }
        Ok(n)
    }))
    .await
}

/// Inserts one job's row; the parameters live as long as the request.
pub(crate) async fn insert(
    c: &tokio_postgres::Client,
    stmt: &Statement,
    job: &Encoded,
) -> Result<u64, tokio_postgres::Error> {
    let params = job.params();
    c.execute(stmt, &params).await
}

/// Sends one job's row (with the counts it moves, through `counted`, when it moves any);
/// answers how many rows it wrote. The parameters live as long as the request.
pub(crate) async fn update(
    c: &tokio_postgres::Client,
    plain: &Statement,
    counted: &Statement,
    job: &Encoded,
) -> Result<u64, tokio_postgres::Error> {
    if job.counts() {
        let params = job.counted_params();
        let row = c.query_one(counted, &params).await?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    } else {
        let params = job.params();
        c.execute(plain, &params).await
    }
}

pub(crate) async fn rollback(c: &tokio_postgres::Client, s: &Statements) -> Result<(), StoreError> {
    c.execute(&s.rollback, &[])
        .await
        .map(|_| ())
        .map_err(|e| error::map(e, Stage::BeforeCommit))
}

/// Writes `writes` and commits, pipelined in one round trip; with nothing to write, rolls
/// back.
pub(crate) async fn commit(
    c: &tokio_postgres::Client,
    s: &Statements,
    writes: &[Encoded],
    wrote: bool,
) -> Result<(), StoreError> {
    if writes.is_empty() && !wrote {
        return rollback(c, s).await;
    }
    try_join(
        try_join_all(
            writes
                .iter()
                .map(|w| update(c, &s.update, &s.update_counted, w)),
        ),
        c.execute(&s.commit, &[]),
    )
    .await
    .map(|_| ())
    .map_err(|e| error::map(e, Stage::Commit))
}
