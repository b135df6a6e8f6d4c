//! Enqueue signals: a store that can carry, across processes, the news that jobs became
//! claimable in a queue, so that every network server's waiting claims look again at once
//! instead of at their next poll. Stores that cannot say so, and the service polls.

use std::sync::Arc;

/// Called with a queue's name and how many jobs became claimable in it.
pub type Wake = Arc<dyn Fn(&str, usize) + Send + Sync>;

/// A store that may carry enqueue signals between processes.
pub trait EnqueueSignal: Send + Sync {
    /// Starts calling `wake` for every signal sent (by any process, this one included) for as
    /// long as the store lives; `false` when this store cannot (then nothing is ever called,
    /// and [`EnqueueSignal::signal`] does nothing). Call it inside a Tokio runtime.
    fn watch(&self, wake: Wake) -> bool {
        let _ = wake;
        false
    }

    /// Sends a signal that `jobs` jobs became claimable in `queue`, after their transaction
    /// committed and outside it, without waiting: a signal is a hint, and one that is lost
    /// costs a waiting claim one poll interval.
    fn signal(&self, queue: &str, jobs: usize) {
        let _ = (queue, jobs);
    }
}
