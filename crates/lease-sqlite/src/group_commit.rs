//! Group commit: concurrent writers of one store share transactions, and so share syncs.
//!
//! Callers queue their ops. One of them, the leader, takes every queued op (up to a batch
//! limit), runs them in one `BEGIN IMMEDIATE` transaction with a savepoint each, commits, and
//! only then answers each caller. It then hands the lead to the caller at the head of the
//! queue, so every caller leads at most one batch and nobody waits behind an endless leader.
//! A lone caller leads a batch of one: no waiting, no savepoint.
//!
//! Async callers never lead: they queue their ops and await a one-shot answer, so a batch that
//! waits on the database (another process's write lock) cannot hold up their deadlines. If
//! nobody leads, one leader is started on the blocking pool; a leader whose queue head is an
//! async caller leads the next batch itself. So async callers pay a thread hop per burst of
//! writes, not per write.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Mutex, MutexGuard};

use lease_ports::StoreError;
use r2d2_sqlite::SqliteConnectionManager;

use crate::ops::{Op, Reply};
use crate::tx;

/// Gets a pooled connection, or the error every command of the batch then gets.
type Connect<'a> =
    &'a dyn Fn() -> Result<r2d2::PooledConnection<SqliteConnectionManager>, StoreError>;
type Answer = Result<Reply, StoreError>;

/// What a queued caller is told.
enum Message {
    /// Its ops ran; here are the answers.
    Done(Vec<Answer>),
    /// It is at the head of the queue and must lead the next batch.
    Lead,
}

/// Where a queued caller waits.
enum Waiter {
    /// A thread, which can also be asked to lead.
    Thread(SyncSender<Message>),
    /// An async task, which only takes its answers.
    Task(tokio::sync::oneshot::Sender<Vec<Answer>>),
}

/// One caller's ops: they run in order in the same batch (one commit).
struct Waiting {
    ops: Vec<Op>,
    reply: Waiter,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    /// Whether some caller is leading; while false the queue is empty.
    leading: bool,
}

pub use lease_ports::GroupCommitStats;

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

    /// Queues ops (run in order, in one batch) and returns their answers once that batch has
    /// committed; the calling thread may lead batches meanwhile.
    pub(crate) fn submit(&self, connect: Connect<'_>, ops: Vec<Op>) -> Vec<Answer> {
        let count = ops.len();
        let (reply, inbox): (SyncSender<Message>, Receiver<Message>) = sync_channel(1);
        // A thread leads until the head of the queue is another thread (mixing blocking and
        // async callers of one store is rare; then this thread also leads the async ones).
        if self.enqueue(ops, Waiter::Thread(reply)) {
            self.lead(connect);
        }
        loop {
            match inbox.recv() {
                Ok(Message::Done(answers)) => return answers,
                Ok(Message::Lead) => {
                    self.lead(connect);
                }
                Err(_) => return lost(count),
            }
        }
    }

    /// Queues ops for an async caller. Returns the receiver of their answers, and whether the
    /// caller must start a leader (nobody leads).
    pub(crate) fn submit_async(
        &self,
        ops: Vec<Op>,
    ) -> (tokio::sync::oneshot::Receiver<Vec<Answer>>, bool) {
        let (reply, inbox) = tokio::sync::oneshot::channel();
        let lead = self.enqueue(ops, Waiter::Task(reply));
        (inbox, lead)
    }

    /// Queues a caller; says whether it must lead (nobody was leading).
    fn enqueue(&self, ops: Vec<Op>, reply: Waiter) -> bool {
        let mut queue = self.queue();
        queue.waiting.push_back(Waiting { ops, reply });
        !std::mem::replace(&mut queue.leading, true)
    }

    /// Runs batches from the head of the queue, answers them, and passes the lead on to the
    /// thread at the head. While the head is an async caller, this thread leads the next batch
    /// itself: async callers never lead (a task that blocked on SQLite could not see its own
    /// deadlines), so the leader is a blocking caller or a thread started for them.
    pub(crate) fn lead(&self, connect: Connect<'_>) {
        loop {
            let callers: Vec<Waiting> = {
                let mut queue = self.queue();
                // Whole callers, up to the batch limit in ops (at least one caller).
                let mut ops = 0;
                let mut n = 0;
                for waiting in &queue.waiting {
                    if n > 0 && ops + waiting.ops.len() > self.max_batch {
                        break;
                    }
                    ops += waiting.ops.len();
                    n += 1;
                }
                queue.waiting.drain(..n).collect()
            };
            let ops: Vec<Op> = callers.iter().flat_map(|w| w.ops.iter().cloned()).collect();
            self.count(ops.len());
            let mut answers = match connect() {
                Ok(mut conn) => tx::execute_batch(&mut conn, &ops),
                Err(e) => ops
                    .iter()
                    .map(|_| Err(tx::batch_error(&e, "no connection for the batch")))
                    .collect(),
            }
            .into_iter();
            for waiting in callers {
                let mine: Vec<Answer> = answers.by_ref().take(waiting.ops.len()).collect();
                // A caller that went away no longer needs its answers.
                match waiting.reply {
                    Waiter::Thread(reply) => {
                        let _ = reply.send(Message::Done(mine));
                    }
                    Waiter::Task(reply) => {
                        let _ = reply.send(mine);
                    }
                }
            }
            let head = {
                let mut queue = self.queue();
                match queue.waiting.front() {
                    Some(Waiting {
                        reply: Waiter::Thread(head),
                        ..
                    }) => Some(head.clone()),
                    Some(Waiting {
                        reply: Waiter::Task(_),
                        ..
                    }) => None,
                    None => {
                        queue.leading = false;
                        return;
                    }
                }
            };
            // The head has not been answered and only a leader sends, so its channel is empty.
            // If the head went away, lead the next batch here instead.
            if let Some(head) = head
                && head.send(Message::Lead).is_ok()
            {
                return;
            }
        }
    }
}

/// The answers for ops whose leader stopped before answering.
pub(crate) fn lost(count: usize) -> Vec<Answer> {
    (0..count)
        .map(|_| {
            Err(StoreError::Indeterminate(
                "the writer that took this write stopped before answering"
                    .to_owned()
                    .into(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whose_leader_stopped_are_each_answered_as_unknown() {
        let answers = lost(3);
        assert_eq!(answers.len(), 3);
        assert!(
            answers
                .iter()
                .all(|a| matches!(a, Err(StoreError::Indeterminate(_))))
        );
    }
}
