//! What a worker's slots share: the free slots, the leases held ahead of a free slot (each
//! with its own fence and deadline, renewed while it waits, handed back when the worker stops)
//! and how recent jobs ran, which sets how many are held ahead.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lease_domain::{LeaseTerm, Timestamp, Ttl};
use lease_ports::{Lease, LeaseStore};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::{RECENT_WEIGHT, WorkerConfig, default_ahead, renew_interval, stop_margin};
use crate::context::Handler;
use crate::outcome::{JobOutcome, JobReport};

/// What every job task of one worker shares.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: WorkerConfig,
    /// Jobs that may still be started (`max_jobs`, or unbounded).
    pub(crate) budget: AtomicUsize,
    /// Cancelled when the worker stops claiming.
    pub(crate) stopping: CancellationToken,
    /// Where slots send the report of every job they ran.
    pub(crate) reports: tokio::sync::mpsc::UnboundedSender<JobReport>,
    /// Leases claimed ahead of a free slot ([`WorkerConfig::prefetch`]), oldest first.
    pub(crate) waiting: std::sync::Mutex<std::collections::VecDeque<Held>>,
    /// The recent jobs' average run time in seconds, none before a job has finished
    /// ([`WorkerConfig::prefetch_while_under`]).
    pub(crate) recent: std::sync::Mutex<Option<f64>>,
    /// Completions under way that claim a lease to hold ahead.
    pub(crate) refilling: AtomicUsize,
}

/// A completion that claims a lease to hold ahead, counted while it is under way.
pub(crate) struct Refill(Arc<Shared>);

impl Refill {
    pub(crate) fn new(shared: &Arc<Shared>) -> Self {
        shared.refilling.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(shared))
    }
}

impl Drop for Refill {
    fn drop(&mut self) {
        self.0.refilling.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A lease this worker holds, with when it ends by the worker's clock (the store's `until`
/// measured from when the worker got it, so in store-clock mode too).
pub(crate) struct Held {
    pub(crate) lease: Lease,
    pub(crate) until: f64,
    /// Not renewed before this time, by the worker's clock: after a renewal the store could
    /// not answer, the next try waits a little instead of asking again at once.
    pub(crate) retry_after: f64,
}

impl Held {
    /// A lease just granted.
    pub(crate) fn granted(lease: Lease, now: f64) -> Self {
        let until = now + (lease.until.get() - lease.now.get());
        Self {
            lease,
            until,
            retry_after: now,
        }
    }

    /// When this lease is due a renewal while it waits (an interval after its grant or last
    /// renewal, and not before a retry may be made).
    pub(crate) fn renewal_due(&self, ttl: Ttl, interval: f64) -> f64 {
        (self.until - (ttl.get() - interval)).max(self.retry_after)
    }
}

impl Shared {
    /// Takes up to `wanted` starts from the budget; returns how many were taken.
    pub(crate) fn take(&self, wanted: usize) -> usize {
        let mut taken = 0;
        let _ = self
            .budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                taken = left.min(wanted);
                Some(left - taken)
            });
        taken
    }

    /// Returns starts that were taken but not used.
    pub(crate) fn give_back(&self, unused: usize) {
        self.budget.fetch_add(unused, Ordering::SeqCst);
    }

    pub(crate) fn waiting(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Held>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a job that ran `seconds` in the recent jobs' average.
    pub(crate) fn ran(&self, seconds: f64) {
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seconds = seconds.max(0.0);
        *recent = Some(match *recent {
            Some(avg) => avg + RECENT_WEIGHT * (seconds - avg),
            None => seconds,
        });
    }

    /// How many leases to hold ahead now: the configured number while the recent jobs are
    /// short, else none.
    pub(crate) fn ahead_wanted(&self) -> usize {
        let config = &self.config;
        if config.prefetch == Some(0) {
            return 0;
        }
        let recent = *self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let short = config.prefetch_while_under == Duration::MAX
            || recent.is_some_and(|avg| avg < config.prefetch_while_under.as_secs_f64());
        if !short {
            return 0;
        }
        let slots = config.concurrency.max(1);
        config
            .prefetch
            .unwrap_or_else(|| recent.map_or(slots, |avg| default_ahead(slots, avg)))
    }

    /// The oldest prefetched lease, unless the worker is stopping.
    pub(crate) fn next_waiting(&self) -> Option<Held> {
        if self.stopping.is_cancelled() {
            return None;
        }
        self.waiting().pop_front()
    }

    /// Keeps a lease claimed ahead (or, once the worker stops, gives it back).
    pub(crate) async fn keep_waiting(&self, held: Held) {
        if self.stopping.is_cancelled() {
            self.give_back_lease(&held.lease).await;
        } else {
            self.waiting().push_back(held);
        }
    }

    /// Gives back a lease that was never run (its attempt too), and returns its start to the
    /// budget.
    pub(crate) async fn give_back_lease(&self, lease: &Lease) {
        let _ = self
            .store
            .give_back(&lease.job, &self.config.owner, lease.fence)
            .await;
        self.give_back(1);
    }

    /// Renews every prefetched lease that has waited an interval since it was granted or last
    /// renewed, all at once; a lease refused, or about to end unrenewed, is dropped and reported
    /// lost (it never ran).
    pub(crate) async fn renew_waiting(&self) {
        let config = &self.config;
        let interval = renew_interval(config.ttl, config.renew_fraction);
        let now = self.clock.now();
        let due: Vec<Lease> = self
            .waiting()
            .iter()
            .filter(|h| h.renewal_due(config.ttl, interval) <= now)
            .map(|h| h.lease.clone())
            .collect();
        let Ok(term) = Timestamp::new(now).and_then(|t| LeaseTerm::from_parts(t, config.ttl))
        else {
            return;
        };
        let answers = futures::future::join_all(due.iter().map(|lease| {
            self.store
                .renew(&lease.job, &config.owner, lease.fence, term)
        }))
        .await;
        let margin = stop_margin(config.ttl);
        let mut lost = Vec::new();
        {
            let mut waiting = self.waiting();
            for (lease, answer) in due.iter().zip(answers) {
                let Some(at) = waiting
                    .iter()
                    .position(|h| h.lease.job == lease.job && h.lease.fence == lease.fence)
                else {
                    continue;
                };
                let why = match answer {
                    Ok(Ok(())) => {
                        waiting[at].until = now + config.ttl.get();
                        continue;
                    }
                    Ok(Err(refused)) => {
                        format!("renewal refused while it waited to run: {refused}")
                    }
                    Err(_) if waiting[at].until - margin > self.clock.now() => {
                        waiting[at].retry_after = now + (interval / 4.0).min(1.0);
                        continue;
                    }
                    Err(e) => format!("the lease could not be renewed while it waited to run: {e}"),
                };
                if let Some(held) = waiting.remove(at) {
                    lost.push((held.lease, why));
                }
            }
        }
        for (lease, why) in lost {
            self.give_back(1);
            let _ = self.reports.send(JobReport {
                job: lease.job,
                fence: lease.fence,
                attempt: lease.attempt,
                outcome: JobOutcome::Lost(why),
                seconds: 0.0,
            });
        }
    }

    /// When the next prefetched lease is due a renewal, by the worker's clock.
    pub(crate) fn next_renewal(&self) -> Option<f64> {
        let config = &self.config;
        let interval = renew_interval(config.ttl, config.renew_fraction);
        self.waiting()
            .iter()
            .map(|h| h.renewal_due(config.ttl, interval))
            .reduce(f64::min)
    }
}
