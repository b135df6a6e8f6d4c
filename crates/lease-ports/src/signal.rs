//! Enqueue signals: a store that can tell, across processes, when jobs became claimable in a
//! queue (a new job, a retried one), so the network service's waiting claims look again at
//! once instead of at their next poll. Stores that cannot tell say so, and the service polls.

use std::sync::Arc;

/// Called with a queue's name when jobs became claimable in it.
pub type Wake = Arc<dyn Fn(&str) + Send + Sync>;

/// A store that may signal enqueues made by anyone.
pub trait EnqueueSignal: Send + Sync {
    /// Starts calling `wake` for every committed enqueue or retry into a queue, whoever made
    /// it, for as long as the store lives; `false` when this store cannot (then nothing is
    /// ever called). Call it inside a Tokio runtime.
    fn watch(&self, wake: Wake) -> bool {
        let _ = wake;
        false
    }
}

impl EnqueueSignal for crate::memory::MemoryLeaseStore {}

impl<S: EnqueueSignal + ?Sized> EnqueueSignal for crate::observe::Observed<S> {
    fn watch(&self, wake: Wake) -> bool {
        self.inner().watch(wake)
    }
}
