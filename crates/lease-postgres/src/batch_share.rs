//! What group commit's batches share, below the kinds of write they carry: the runners'
//! shared state (the batch bound, the queues remembered as declining, the counts) and how a
//! batch answers its callers, after its commit or with an error each caller is told in its
//! own words. `crate::batch` queues and runs the batches; `crate::renewals` and
//! `crate::enqueues` settle their kinds.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lease_domain::QueueName;
use lease_ports::{GroupCommitStats, StoreError};
use tokio::sync::oneshot;

/// How long a queue whose write `step` declined goes around batching.
pub(crate) const DECLINED_FOR: Duration = Duration::from_secs(10);

/// The most queues remembered as declining; past it the memory starts over.
const DECLINED_KEPT: usize = 1024;

/// What a store's batcher and its runners share.
pub(crate) struct Shared {
    max_batch: usize,
    /// Whether a batch of one write is settled as a batch too (for tests).
    alone_in_batch: bool,
    /// Queues whose write `step` declined, with when.
    declined: Mutex<HashMap<QueueName, Instant>>,
    stats: Mutex<GroupCommitStats>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn new(max_batch: usize, alone_in_batch: bool) -> Self {
        Self {
            max_batch,
            alone_in_batch,
            declined: Mutex::new(HashMap::new()),
            stats: Mutex::new(GroupCommitStats::default()),
        }
    }

    /// The most writes one batch takes.
    pub(crate) fn max_batch(&self) -> usize {
        self.max_batch
    }

    pub(crate) fn stats(&self) -> GroupCommitStats {
        *lock(&self.stats)
    }

    /// Whether writes to `queue` go into batches: not while it is remembered as declining.
    pub(crate) fn takes(&self, queue: &QueueName) -> bool {
        let mut declined = lock(&self.declined);
        match declined.get(queue) {
            Some(at) if at.elapsed() < DECLINED_FOR => false,
            Some(_) => {
                declined.remove(queue);
                true
            }
            None => true,
        }
    }

    /// Whether a batch of one write is settled as a batch too (for tests).
    pub(crate) fn alone_in_batch(&self) -> bool {
        self.alone_in_batch
    }

    pub(crate) fn remember_declined(&self, queue: &QueueName) {
        let mut declined = lock(&self.declined);
        if declined.len() >= DECLINED_KEPT {
            declined.clear();
        }
        declined.insert(queue.clone(), Instant::now());
    }

    pub(crate) fn count(&self, writes: usize) {
        let mut stats = lock(&self.stats);
        let writes = writes as u64;
        stats.batches += 1;
        stats.writes += writes;
        if writes > 1 {
            stats.batches_of_many += 1;
        }
        stats.largest_batch = stats.largest_batch.max(writes);
    }
}

/// A caller's answer, or, when the batch carrying its write stopped before answering, an
/// error saying the write may have committed.
pub(crate) async fn answered<T>(
    answer: oneshot::Receiver<Result<T, StoreError>>,
) -> Result<T, StoreError> {
    answer.await.unwrap_or_else(|_| {
        Err(StoreError::Indeterminate(
            "the batch carrying this write stopped before it answered (its runtime shut \
             down), so it may have committed"
                .into(),
        ))
    })
}

/// Answers every one of `replies` with `error`, each told in its own words.
pub(crate) fn tell_all<T>(
    replies: impl IntoIterator<Item = oneshot::Sender<Result<T, StoreError>>>,
    error: &StoreError,
) {
    for reply in replies {
        let _ = reply.send(Err(retold(error)));
    }
}

/// The same failure for another caller of the batch.
pub(crate) fn retold(error: &StoreError) -> StoreError {
    error
        .retold(|d| {
            d.retold(format!(
                "{} (this write was one of a batch sharing one commit)",
                d.message()
            ))
        })
        .unwrap_or_else(|| StoreError::Unavailable(error.to_string().into()))
}
