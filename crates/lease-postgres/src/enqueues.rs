//! Enqueues in group commit: concurrent enqueues of one store (many producers, the server's
//! handlers) share one transaction and one commit, as [`LeaseStore::enqueue_many`] does for a
//! list given at once.
//!
//! A batch is one `enqueue_many` transaction of the writes queued together, in job order (so
//! two batches inserting the same new ids take them in the same order and never wait on each
//! other in a cycle; an id enqueued twice is decided in the callers' order). Each caller is
//! answered after the commit, whether its job was inserted. When the batch fails and nothing
//! can have committed, each enqueue runs alone, so one enqueue's error never fails another;
//! when it may have committed, every caller is told so.
//!
//! An enqueue that names parents or may run a finished job again is a workflow's write and
//! never queues here: it checks and locks its parents in a transaction of its own.
//!
//! [`LeaseStore::enqueue_many`]: lease_ports::LeaseStore::enqueue_many

use futures::future::join_all;
use lease_domain::{Command, EnqueueSpec, JobId};
use lease_ports::{StoreError, outcome_as};
use tokio::sync::oneshot;

use crate::PgLeaseStore;
use crate::batch_share::{Shared, tell_all};

/// A caller's answer: whether the job was inserted, or the error.
pub(crate) type Answer = Result<bool, StoreError>;

/// One queued enqueue.
pub(crate) struct Enqueue {
    job: JobId,
    spec: EnqueueSpec,
    reply: oneshot::Sender<Answer>,
}

impl Enqueue {
    pub(crate) fn new(job: JobId, spec: EnqueueSpec, reply: oneshot::Sender<Answer>) -> Self {
        Self { job, spec, reply }
    }
}

/// The spec of an enqueue that may share a batch: a plain one, naming no parents and running
/// no finished job again.
pub(crate) fn batchable(command: &Command) -> Option<EnqueueSpec> {
    match command {
        Command::Enqueue => Some(EnqueueSpec::default()),
        Command::EnqueueWith(spec) if spec.after.is_empty() && !spec.replace_finished => {
            Some(spec.clone())
        }
        _ => None,
    }
}

impl PgLeaseStore {
    /// Runs one batch of enqueues on a pooled connection and answers each caller.
    pub(crate) async fn run_enqueues(&self, batcher: &Shared, mut batch: Vec<Enqueue>) {
        // A caller that stopped waiting is not written for.
        batch.retain(|e| !e.reply.is_closed());
        if batch.is_empty() {
            return;
        }
        batcher.count(batch.len());
        if batch.len() == 1 && !batcher.alone_in_batch() {
            return self.enqueue_alone(batch).await;
        }
        let mut conn = match self.conn().await {
            Ok(conn) => conn,
            Err(e) => return tell_all(batch.into_iter().map(|e| e.reply), &e),
        };
        batch.sort_by(|a, b| a.job.cmp(&b.job));
        let jobs: Vec<(JobId, EnqueueSpec)> = batch
            .iter()
            .map(|e| (e.job.clone(), e.spec.clone()))
            .collect();
        match self.enqueue_many_on(&mut conn, &jobs).await {
            Ok(inserted) if inserted.len() == batch.len() => {
                conn.clean();
                for (enqueue, inserted) in batch.into_iter().zip(inserted) {
                    let _ = enqueue.reply.send(Ok(inserted));
                }
            }
            Ok(_) => tell_all(
                batch.into_iter().map(|e| e.reply),
                &StoreError::Corrupt("a batch of enqueues answered another number of jobs".into()),
            ),
            // The batch may have committed: no caller is told otherwise.
            Err(e @ StoreError::Indeterminate(_)) => {
                tell_all(batch.into_iter().map(|e| e.reply), &e);
            }
            // Nothing committed (the server refused or rolled back, or the connection failed
            // before COMMIT was sent): each enqueue runs alone.
            Err(_) => self.enqueue_alone(batch).await,
        }
    }

    /// Runs each enqueue of `batch` as a lone write, each on a connection of its own.
    async fn enqueue_alone(&self, batch: Vec<Enqueue>) {
        let answers = join_all(batch.iter().map(|e| async {
            let command = Command::EnqueueWith(e.spec.clone());
            outcome_as(self.write_alone(&e.job, command).await?)
        }))
        .await;
        for (enqueue, answer) in batch.into_iter().zip(answers) {
            let _ = enqueue.reply.send(answer);
        }
    }
}
