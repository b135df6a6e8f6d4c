//! Renewals in group commit: concurrent renewals of one store (a worker's held leases renewed
//! all at once, many workers' heartbeats) share one transaction and one commit.
//!
//! A batch of renewals is one transaction of two round trips, as a lone renewal is: BEGIN with
//! every renewed job's row lock (in job order, so two batches lock in the same order) and the
//! clock after them; then, each renewal decided by the domain in turn against the row as the
//! ones before it left it, every decided row and every refusal for the audit trail, with
//! COMMIT. Each caller is answered after the commit.
//!
//! When the server answers an error, the transaction rolled back and nothing was written: each
//! renewal then runs alone, so one renewal's error never fails another. When the connection
//! fails after COMMIT was sent, every caller is told the write may have committed.

use std::collections::HashMap;

use futures::future::{join_all, try_join, try_join_all};
use lease_domain::{Change, Command, Job, JobId, Outcome};
use lease_ports::StoreError;
use tokio::sync::oneshot;

use crate::PgLeaseStore;
use crate::batch_share::{Shared, retold, tell_all};
use crate::connection::{Conn, Statements};
use crate::error::{self, Stage};
use crate::row;
use crate::row::{Encoded, Standing, stored_now};
use crate::tx::{clock_if, update};

/// A caller's answer: the renewal's outcome, or the error.
type Answer = Result<Outcome, StoreError>;

/// One queued renewal.
pub(crate) struct Renewal {
    job: JobId,
    command: Command,
    reply: oneshot::Sender<Answer>,
}

impl Renewal {
    pub(crate) fn new(job: JobId, command: Command, reply: oneshot::Sender<Answer>) -> Self {
        Self {
            job,
            command,
            reply,
        }
    }
}

/// Why a batch of renewals failed as a whole, and whether COMMIT had been sent.
type Failed = (tokio_postgres::Error, Stage);

impl PgLeaseStore {
    /// Runs one batch of renewals on a pooled connection and answers each caller.
    pub(crate) async fn run_renewals(&self, batcher: &Shared, mut batch: Vec<Renewal>) {
        // A caller that stopped waiting is not written for.
        batch.retain(|r| !r.reply.is_closed());
        if batch.is_empty() {
            return;
        }
        batcher.count(batch.len());
        if batch.len() == 1 && !batcher.alone_in_batch() {
            return self.renew_alone(batch).await;
        }
        let mut conn = match self.conn().await {
            Ok(conn) => conn,
            Err(e) => return answer_all(batch, &e),
        };
        let s = match Statements::prepare(&conn, &self.sql).await {
            Ok(s) => s,
            Err(e) => return answer_all(batch, &e),
        };
        // Rows locked in job order; a job renewed twice is decided in the callers' order.
        batch.sort_by(|a, b| a.job.cmp(&b.job));
        match self.renewals_in_one(&conn, &s, &batch).await {
            Ok(answers) => {
                conn.clean();
                for (renewal, answer) in batch.into_iter().zip(answers) {
                    let _ = renewal.reply.send(answer);
                }
            }
            // The server answered with an error: the transaction rolled back, nothing was
            // written, so each renewal runs alone (the connection, mid-transaction, is not
            // given back clean and so not reused).
            Err((e, _)) if !error::is_connection_loss(&e) => self.renew_alone(batch).await,
            Err((e, stage)) => answer_all(batch, &error::map(e, stage)),
        }
    }

    /// Runs each renewal of `batch` as a lone write, each on a connection of its own.
    async fn renew_alone(&self, batch: Vec<Renewal>) {
        let answers = join_all(
            batch
                .iter()
                .map(|r| self.write_alone(&r.job, r.command.clone())),
        )
        .await;
        for (renewal, answer) in batch.into_iter().zip(answers) {
            let _ = renewal.reply.send(answer);
        }
    }

    /// The batch's transaction; each renewal's answer in the batch's order.
    async fn renewals_in_one(
        &self,
        conn: &Conn,
        s: &Statements,
        batch: &[Renewal],
    ) -> Result<Vec<Answer>, Failed> {
        let c = conn.client();
        let needs_clock = batch.iter().any(|r| self.clock.needs_clock(&r.command));
        // One round trip: BEGIN, each row lock, the clock after them.
        let ((_, rows), now) = try_join(
            try_join(
                c.execute(&s.begin, &[]),
                try_join_all(batch.iter().map(|r| async move {
                    let key = r.job.as_str();
                    c.query_opt(&s.lock, &[&key]).await
                })),
            ),
            clock_if(c, s, needs_clock),
        )
        .await
        .map_err(|e| (e, Stage::BeforeCommit))?;
        let now = match now.map(stored_now).transpose() {
            Ok(now) => now,
            Err(e) => {
                c.execute(&s.rollback, &[])
                    .await
                    .map_err(|e| (e, Stage::BeforeCommit))?;
                return Ok(batch.iter().map(|_| Err(retold(&e))).collect());
            }
        };
        // Each job as the renewals before it in this batch left it.
        let mut jobs: HashMap<&JobId, Option<Job>> = HashMap::new();
        let mut answers: Vec<Answer> = Vec::with_capacity(batch.len());
        // The rows to write, and the refusals to record, with the answer each belongs to.
        let mut writes: Vec<(Encoded, usize)> = Vec::new();
        let mut refusals = Vec::new();
        for (r, row) in batch.iter().zip(rows) {
            let current = match jobs.get(&r.job) {
                Some(job) => job.clone(),
                None => match row
                    .as_ref()
                    .map(|row| row::decode(&r.job, row, 0))
                    .transpose()
                {
                    Ok(job) => job,
                    Err(e) => {
                        answers.push(Err(e));
                        continue;
                    }
                },
            };
            let command = match now {
                Some(now) => match self.clock.resolve(&r.command, now) {
                    Ok(command) => command,
                    Err(refused) => {
                        answers.push(Err(refused.into()));
                        continue;
                    }
                },
                None => r.command.clone(),
            };
            let decided = command.decided(&r.job, current.as_ref(), None);
            lease_ports::observe::decided(&command, current.as_ref(), &decided);
            // A renewal changes its job's row, or is refused (and recorded in the audit trail
            // when the store keeps one); nothing else.
            let mut next = None;
            let mut strange = None;
            for change in decided.changes {
                match (change, &current) {
                    (Change::Row { job, insert: false }, Some(before)) => {
                        writes.push((
                            Encoded::from_to(&r.job, Some(Standing::of(before)), &job),
                            answers.len(),
                        ));
                        next = Some(job);
                    }
                    (Change::Refused(entry), _) => {
                        if let Some(retention) = self.audit {
                            refusals.push((&r.job, entry, retention));
                        }
                    }
                    (other, _) => strange = Some(other),
                }
            }
            if let Some(change) = strange {
                answers.push(Err(StoreError::Corrupt(
                    format!("job {}: a renewal decided {change:?}", r.job).into(),
                )));
                continue;
            }
            let outcome = decided.outcome;
            jobs.insert(&r.job, next.or(current));
            answers.push(Ok(outcome));
        }
        if writes.is_empty() && refusals.is_empty() {
            c.execute(&s.rollback, &[])
                .await
                .map_err(|e| (e, Stage::BeforeCommit))?;
            return Ok(answers);
        }
        // One round trip: every decided row, every refusal for the audit trail, COMMIT.
        let ((written, _), _) = try_join(
            try_join(
                try_join_all(
                    writes
                        .iter()
                        .map(|(row, _)| update(c, &s.update, &s.update_counted, row)),
                ),
                try_join_all(refusals.iter().map(|(id, entry, retention)| {
                    crate::audit::audit_sent(c, s, id, entry, *retention)
                })),
            ),
            c.execute(&s.commit, &[]),
        )
        .await
        .map_err(|e| (e, Stage::Commit))?;
        for ((_, at), n) in writes.iter().zip(written) {
            if n != 1 {
                if let Some(answer) = answers.get_mut(*at) {
                    *answer = Err(StoreError::Corrupt(
                        format!("job {}: a locked renewal changed {n} rows", batch[*at].job).into(),
                    ));
                }
            }
        }
        Ok(answers)
    }
}

/// Answers every caller of `batch` with `error`, each told in its own words.
fn answer_all(batch: Vec<Renewal>, error: &StoreError) {
    tell_all(batch.into_iter().map(|r| r.reply), error);
}
