//! Long polling: claims that wait for a job to come due. Each queue with waiting claims has a
//! `Notify`; a new job wakes one of them (`notify_one`), not all. Waiters also look again every
//! poll interval, for jobs that came due by time (a `run_at`, an ended lease) or were enqueued
//! elsewhere (another process or server). A bound on open waits keeps memory bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The waiting claims of one server.
#[derive(Debug)]
pub struct Waiters {
    queues: Mutex<HashMap<String, Arc<Notify>>>,
    open: Arc<Semaphore>,
}

/// A claim's place among the waiters of its queue; dropping it leaves.
#[derive(Debug)]
pub struct Waiting<'a> {
    waiters: &'a Waiters,
    queue: String,
    notify: Arc<Notify>,
    _permit: OwnedSemaphorePermit,
}

impl Waiters {
    /// Room for `max_open` waiting claims at once.
    #[must_use]
    pub fn new(max_open: usize) -> Self {
        Self {
            queues: Mutex::default(),
            open: Arc::new(Semaphore::new(max_open)),
        }
    }

    /// Joins the waiters of `queue`; `None` when `max_open` claims already wait.
    #[must_use]
    pub fn join(&self, queue: &str) -> Option<Waiting<'_>> {
        let permit = Arc::clone(&self.open).try_acquire_owned().ok()?;
        let notify = {
            let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(queues.entry(queue.to_owned()).or_default())
        };
        Some(Waiting {
            waiters: self,
            queue: queue.to_owned(),
            notify,
            _permit: permit,
        })
    }

    /// Wakes one waiting claim of `queue` for each of `jobs` new jobs (none if none wait).
    pub fn wake(&self, queue: &str, jobs: usize) {
        let notify = {
            let queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            queues.get(queue).cloned()
        };
        if let Some(notify) = notify {
            for _ in 0..jobs {
                notify.notify_one();
            }
        }
    }

    /// How many claims wait now, on every queue.
    #[must_use]
    pub fn open(&self, max_open: usize) -> usize {
        max_open.saturating_sub(self.open.available_permits())
    }
}

impl Waiting<'_> {
    /// Waits until woken or `at_most` has passed.
    pub async fn wait(&self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.notify.notified()).await;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut queues = self
            .waiters
            .queues
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // The map and this waiter hold the last two references: no one else waits here.
        if Arc::strong_count(&self.notify) == 2 {
            queues.remove(&self.queue);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_new_job_wakes_one_waiter_and_an_empty_queue_is_forgotten() {
        let waiters = Arc::new(Waiters::new(10));
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..5 {
            let (waiters, woken) = (waiters.clone(), woken.clone());
            tasks.push(tokio::spawn(async move {
                let waiting = waiters.join("q").unwrap();
                waiting.wait(Duration::from_millis(600)).await;
                woken.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }));
        }
        while waiters.open(10) < 5 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        waiters.wake("q", 1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(waiters.open(10), 0);
        assert!(waiters.queues.lock().unwrap().is_empty());
    }

    #[test]
    fn no_more_than_the_bound_wait_at_once() {
        let waiters = Waiters::new(2);
        let a = waiters.join("q");
        let b = waiters.join("r");
        assert!(a.is_some() && b.is_some());
        assert!(waiters.join("q").is_none());
        drop(a);
        assert!(waiters.join("q").is_some());
    }
}
