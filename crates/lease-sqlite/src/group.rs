//! Group commit: concurrent writers of one store share transactions, and so share syncs.
//!
//! Callers queue their commands. One of them, the leader, takes every queued command (up to a
//! batch limit), runs them in one `BEGIN IMMEDIATE` transaction with a savepoint each, commits,
//! and only then answers each caller. It then hands the lead to the caller at the head of the
//! queue, so every caller leads at most one batch and nobody waits behind an endless leader.
//! A lone caller leads a batch of one: no waiting, no savepoint.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Mutex, MutexGuard};

use lease_ports::StoreError;
use r2d2_sqlite::SqliteConnectionManager;

use crate::ops::{self, Op, Reply};

/// Gets a pooled connection, or the error every command of the batch then gets.
type Connect<'a> =
    &'a dyn Fn() -> Result<r2d2::PooledConnection<SqliteConnectionManager>, StoreError>;
type Answer = Result<Reply, StoreError>;

/// What a queued caller is told.
enum Message {
    /// Its command ran; here is the answer.
    Done(Answer),
    /// It is at the head of the queue and must lead the next batch.
    Lead,
}

struct Waiting {
    op: Op,
    reply: SyncSender<Message>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    /// Whether some caller is leading; while false the queue is empty.
    leading: bool,
}

/// What group commit has done so far, for benchmarks and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupCommitStats {
    /// Batches run (each one transaction).
    pub batches: u64,
    /// Batches that carried more than one write.
    pub batches_of_many: u64,
    /// Writes run in all batches.
    pub writes: u64,
    /// The most writes one batch carried.
    pub largest_batch: u64,
}

/// The write queue of one store.
pub(crate) struct GroupCommit {
    queue: Mutex<Queue>,
    max_batch: usize,
    stats: Mutex<GroupCommitStats>,
}

impl GroupCommit {
    pub(crate) fn new(max_batch: usize) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            max_batch: max_batch.max(1),
            stats: Mutex::new(GroupCommitStats::default()),
        }
    }

    pub(crate) fn stats(&self) -> GroupCommitStats {
        *self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count(&self, writes: usize) {
        let writes = u64::try_from(writes).unwrap_or(u64::MAX);
        let mut stats = self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        stats.batches += 1;
        stats.batches_of_many += u64::from(writes > 1);
        stats.writes += writes;
        stats.largest_batch = stats.largest_batch.max(writes);
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding this lock cannot leave the queue half-changed: recover it.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues one op and returns its answer once the batch it ran in has committed.
    pub(crate) fn submit(&self, connect: Connect<'_>, op: Op) -> Answer {
        let (reply, inbox): (SyncSender<Message>, Receiver<Message>) = sync_channel(1);
        let lead_now = {
            let mut queue = self.queue();
            queue.waiting.push_back(Waiting { op, reply });
            !std::mem::replace(&mut queue.leading, true)
        };
        if lead_now {
            self.lead(connect);
        }
        loop {
            match inbox.recv() {
                Ok(Message::Done(answer)) => return answer,
                Ok(Message::Lead) => self.lead(connect),
                Err(_) => {
                    return Err(StoreError::Indeterminate(
                        "the writer that took this command stopped before answering".to_owned(),
                    ));
                }
            }
        }
    }

    /// Runs one batch from the head of the queue, answers it, and passes the lead on.
    fn lead(&self, connect: Connect<'_>) {
        loop {
            let (commands, replies): (Vec<Op>, Vec<SyncSender<Message>>) = {
                let mut queue = self.queue();
                let n = queue.waiting.len().min(self.max_batch);
                queue.waiting.drain(..n).map(|w| (w.op, w.reply)).unzip()
            };
            self.count(commands.len());
            let answers = match connect() {
                Ok(mut conn) => ops::execute_batch(&mut conn, &commands),
                Err(e) => commands
                    .iter()
                    .map(|_| Err(ops::batch_error(&e, "no connection for the batch")))
                    .collect(),
            };
            for (reply, answer) in replies.into_iter().zip(answers) {
                // A caller that went away no longer needs its answer.
                let _ = reply.send(Message::Done(answer));
            }
            let head = {
                let mut queue = self.queue();
                match queue.waiting.front() {
                    Some(head) => head.reply.clone(),
                    None => {
                        queue.leading = false;
                        return;
                    }
                }
            };
            // The head has not been answered and only a leader sends, so its channel is empty.
            // If the head went away, lead the next batch here instead.
            if head.send(Message::Lead).is_ok() {
                return;
            }
        }
    }
}
