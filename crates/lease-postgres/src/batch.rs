//! Group commit on PostgreSQL: the queue loop's writes of one store (a claim, a completion
//! with the claim that follows it, and a holder's completion, failure or release with none)
//! that arrive together share one transaction and one commit.
//! Renewals and enqueues queue here too, each kind sharing a transaction of its own
//! (`crate::renewals`, `crate::enqueues`).
//!
//! A caller queues its write and awaits its answer. A runner (at most [`RUNNERS`] per store,
//! each with a pooled connection while it runs a batch) takes every queued write, up to
//! [`PgOptions::max_batch`](crate::PgOptions::max_batch), and settles them together
//! (`crate::settle`): one locking read of the rows the completions touch and of the candidates
//! the claims may take, every decision made in Rust by the domain and the claim engine, and one
//! statement writing every row, sent with COMMIT, so one transaction and one WAL flush carry
//! them all. Nothing waits on a timer: a batch is whatever queued while the previous one ran,
//! so a lone caller's write goes at once, alone, as a plain call of migration 7's `step`
//! function (one round trip against two: faster for one write, measured in
//! docs/PERFORMANCE.md), or, for a write with no claim (which `step` does not take), through
//! the write path.
//!
//! Each caller gets its own answer, only after the commit. Completions are locked in job
//! order, so two batches lock the rows they complete in the same order; claims skip locked
//! rows and wait on nothing.
//!
//! What a batch cannot decide it declines before writing anything (a refusal to audit, a
//! queue with settings, a job with children waiting), as does a batch the server answers with
//! an error (it rolled back): each write then runs alone, as a lone caller's would, and a
//! queue whose lone write `step` declined leaves batching for [`DECLINED_FOR`](crate::batch_share::DECLINED_FOR), so a queue
//! that always declines costs one declined batch per period. When the connection fails
//! instead, the batch may have committed: every caller gets `Indeterminate`, never an
//! acceptance.

use std::sync::{Arc, Mutex};

use lease_domain::{Command, EnqueueSpec, JobId, Outcome, QueueName};
use lease_ports::{ClaimNext, GroupCommitStats, StoreError};
use tokio::sync::{mpsc, oneshot};

use crate::PgLeaseStore;
use crate::batch_share::{Shared, answered, lock, tell_all};
use crate::complete_and_claim::Stepped;
use crate::connection::Conn;
use crate::enqueues::Enqueue;
use crate::renewals::Renewal;
use crate::settle::{Settled, Write};

/// How many batches of one store run at once, each on its own connection. The measurement
/// before this was built (docs/PERFORMANCE.md) found one to four batching connections about
/// equal; two keep one batch filling while the other commits.
pub(crate) const RUNNERS: usize = 2;

/// What a caller is answered: the step's answer (`None`: declined, decide it through
/// statements), or the error.
type Answer = Result<Option<Stepped>, StoreError>;

/// One queued write: a step (a claim, or a completion with its claim), a renewal or an
/// enqueue.
pub(crate) enum Queued {
    Step(Request),
    Renew(Renewal),
    Enqueue(Enqueue),
}

/// One queued step: a holder's write, a claim, or a completion with the claim that follows
/// it (at least one of the two).
pub(crate) struct Request {
    completion: Option<(JobId, Command)>,
    claim: Option<ClaimNext>,
    reply: oneshot::Sender<Answer>,
}

/// The write queue of one store. Its runners hold what it shares with them, not the queue's
/// sending side, so they stop once the store's last handle is dropped.
pub(crate) struct Batcher {
    /// The queue's sending side, made (with its runners) on the first write in the caller's
    /// runtime, and made again if that runtime has gone.
    sender: Mutex<Option<mpsc::UnboundedSender<Queued>>>,
    shared: Arc<Shared>,
}

impl Batcher {
    pub(crate) fn new(max_batch: usize, alone_in_batch: bool) -> Self {
        Self {
            sender: Mutex::new(None),
            shared: Arc::new(Shared::new(max_batch, alone_in_batch)),
        }
    }

    pub(crate) fn stats(&self) -> GroupCommitStats {
        self.shared.stats()
    }

    /// Whether writes to `queue` go into batches: not while it is remembered as declining.
    pub(crate) fn takes(&self, queue: &QueueName) -> bool {
        self.shared.takes(queue)
    }
}

impl Batcher {
    /// Queues `request`, starting the runners (in the caller's runtime) first if there are
    /// none or theirs has gone.
    pub(crate) fn send(&self, store: &PgLeaseStore, request: Queued) {
        let mut sender = lock(&self.sender);
        let request = match sender.as_ref() {
            Some(s) => match s.send(request) {
                Ok(()) => return,
                Err(mpsc::error::SendError(back)) => back,
            },
            None => request,
        };
        let (s, r) = mpsc::unbounded_channel();
        let queue = Arc::new(tokio::sync::Mutex::new(r));
        let runner = store.without_batcher();
        for _ in 0..RUNNERS {
            let shared = Arc::clone(&self.shared);
            tokio::spawn(run(runner.clone(), shared, Arc::clone(&queue)));
        }
        // The receiver is alive (its runners were just spawned), so this send is taken; were
        // it not, the request's reply is dropped and its caller told the write is unknown.
        let _ = s.send(request);
        *sender = Some(s);
    }
}

impl PgLeaseStore {
    /// Queues `completion` (when given) and `claim` for the next batch, and awaits its answer:
    /// as [`PgLeaseStore::step`] answers, after the batch's commit.
    pub(crate) async fn batched_step(
        &self,
        batcher: &Arc<Batcher>,
        completion: Option<(&JobId, &Command)>,
        claim: &ClaimNext,
    ) -> Answer {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            completion: completion.map(|(id, c)| (id.clone(), c.clone())),
            claim: Some(claim.clone()),
            reply,
        };
        batcher.send(self, Queued::Step(request));
        answered(answer).await
    }

    /// Queues a holder's write that carries no claim (a completion, a failure, a release) for
    /// the next batch, and awaits its outcome after the batch's commit. `None`: not decided
    /// in a batch (it ran alone, or the batch declined), so the caller writes it alone.
    pub(crate) async fn batched_write(
        &self,
        batcher: &Arc<Batcher>,
        id: &JobId,
        command: Command,
    ) -> Result<Option<lease_domain::Outcome>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            completion: Some((id.clone(), command)),
            claim: None,
            reply,
        };
        batcher.send(self, Queued::Step(request));
        Ok(answered(answer).await?.and_then(|stepped| stepped.outcome))
    }

    /// Queues a renewal (`command` is a [`Command::Renew`]) for the next batch and awaits its
    /// outcome, after the batch's commit.
    pub(crate) async fn batched_renew(
        &self,
        batcher: &Batcher,
        job: &JobId,
        command: Command,
    ) -> Result<lease_domain::Outcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        batcher.send(
            self,
            Queued::Renew(Renewal::new(job.clone(), command, reply)),
        );
        answered(answer).await
    }

    /// Queues an enqueue for the next batch and awaits its outcome, after the batch's commit.
    pub(crate) async fn batched_enqueue(
        &self,
        batcher: &Batcher,
        job: &JobId,
        spec: EnqueueSpec,
    ) -> Result<Outcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        batcher.send(
            self,
            Queued::Enqueue(Enqueue::new(job.clone(), spec, reply)),
        );
        answered(answer).await.map(Outcome::Enqueued)
    }

    /// Runs one batch on a pooled connection and answers each caller.
    async fn run_batch(&self, batcher: &Shared, mut batch: Vec<Request>) {
        // A caller that stopped waiting is not written for.
        batch.retain(|r| !r.reply.is_closed());
        if batch.is_empty() {
            return;
        }
        let mut conn = match self.conn().await {
            Ok(conn) => conn,
            Err(e) => return answer_all(batch, &e),
        };
        batcher.count(batch.len());
        // A lone write is a plain call of `step`: settling it costs a lone caller more
        // (two round trips and nine statements against one; docs/PERFORMANCE.md).
        if batch.len() == 1 && !batcher.alone_in_batch() {
            return self.run_alone(&mut conn, batcher, batch).await;
        }
        let writes: Vec<Write<'_>> = batch
            .iter()
            .map(|r| Write {
                completion: r.completion.as_ref().map(|(id, c)| (id, c)),
                claim: r.claim.as_ref(),
            })
            .collect();
        match self.settle(&conn, &writes).await {
            Ok(Settled::Answers(answers)) => {
                conn.clean();
                for (request, answer) in batch.into_iter().zip(answers) {
                    let _ = request.reply.send(Ok(Some(answer)));
                }
            }
            // Rolled back with nothing written: each write runs alone.
            Ok(Settled::Declined) => self.run_alone(&mut conn, batcher, batch).await,
            Err(e) => answer_all(batch, &e),
        }
    }

    /// Runs each write of `batch` that carries a claim as a lone call of `step`, pipelined on
    /// `conn`; a write without one is answered `None`, so its caller writes it alone (`step`
    /// claims).
    async fn run_alone(&self, conn: &mut Conn, batcher: &Shared, batch: Vec<Request>) {
        let answers = futures::future::join_all(batch.iter().map(|r| async {
            let completion = r.completion.as_ref().map(|(id, c)| (id, c));
            match &r.claim {
                Some(claim) => self.step(conn, completion, claim).await,
                None => Ok(None),
            }
        }))
        .await;
        if answers.iter().all(Result::is_ok) {
            conn.clean();
        }
        for (request, answer) in batch.into_iter().zip(answers) {
            if let (Ok(None), Some(claim)) = (&answer, &request.claim) {
                batcher.remember_declined(&claim.queue);
            }
            let _ = request.reply.send(answer);
        }
    }
}

/// Answers every caller of `batch` with `error`, each told in its own words.
fn answer_all(batch: Vec<Request>, error: &StoreError) {
    tell_all(batch.into_iter().map(|r| r.reply), error);
}

/// A runner: takes every queued write (up to the batch bound) and runs them as one batch,
/// until the store is gone.
async fn run(
    store: PgLeaseStore,
    batcher: Arc<Shared>,
    queue: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Queued>>>,
) {
    loop {
        let mut batch = Vec::new();
        {
            let mut queue = queue.lock().await;
            match queue.recv().await {
                Some(request) => batch.push(request),
                None => return,
            }
            while batch.len() < batcher.max_batch() {
                match queue.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
        }
        let (mut steps, mut renewals, mut enqueues) = (Vec::new(), Vec::new(), Vec::new());
        for queued in batch {
            match queued {
                Queued::Step(request) => steps.push(request),
                Queued::Renew(renewal) => renewals.push(renewal),
                Queued::Enqueue(enqueue) => enqueues.push(enqueue),
            }
        }
        // Each kind in a transaction of its own, on a connection of its own, at once.
        tokio::join!(
            store.run_batch(&batcher, steps),
            store.run_renewals(&batcher, renewals),
            store.run_enqueues(&batcher, enqueues)
        );
    }
}
