//! How a worker is set up: its [`WorkerConfig`] and the defaults a user gets
//! (the leases held ahead, the renewal interval and the margin before a lease ends).

use std::sync::Arc;
use std::time::Duration;

use lease_domain::{Owner, QueueName, Retry, Ttl};

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The queue it takes jobs from.
    pub queue: QueueName,
    /// Its name as a lease holder.
    pub owner: Owner,
    /// How many jobs run at once.
    pub concurrency: usize,
    /// The lease duration of each claim and renewal.
    pub ttl: Ttl,
    /// Renew every `ttl * renew_fraction` (default one third), bounded to
    /// [`MIN_RENEW_INTERVAL`]..=[`MAX_RENEW_INTERVAL`] seconds.
    pub renew_fraction: f64,
    /// How long to wait before looking again when no job is due.
    pub idle_poll: Duration,
    /// What a failure does while attempts remain.
    pub retry: Retry,
    /// Stop after starting this many jobs (and finishing them).
    pub max_jobs: Option<usize>,
    /// Stop when no job is due and none is running.
    pub exit_when_empty: bool,
    /// At shutdown, how long running jobs may go on before they are cancelled and released.
    pub drain: Duration,
    /// After a job's token is cancelled, how long its handler may run before it is dropped.
    pub cancel_grace: Duration,
    /// How many leases the worker holds beyond its busy slots, ready to run, while its jobs
    /// are short ([`Self::prefetch_while_under`]); `Some(0)` none. `None` (the default) holds
    /// as many as the slots run in [`DEFAULT_AHEAD_WINDOW`] at the recent jobs' average run
    /// time, at least one per slot (as many as [`Self::concurrency`]) and at most
    /// [`DEFAULT_AHEAD_MOST`] beyond that, so no lease waits ahead much longer than that
    /// window while the jobs keep their pace.
    /// A prefetched lease is a real lease: it counts against the queue's limits, is renewed
    /// while it waits, and is given back unstarted at shutdown. With any, a slot whose job
    /// finished starts the next prefetched one while the finished job's completion commits
    /// (as many completions of a slot committing at once as leases are held ahead), so
    /// completions share commits even at one slot; each is reported once it has committed,
    /// in the order its slot ran them.
    pub prefetch: Option<usize>,
    /// Leases are held ahead only while the worker's recent jobs ran shorter than this on
    /// average (the handler's run time, averaged with more weight on the last ones; default
    /// [`DEFAULT_PREFETCH_WHILE_UNDER`]), and not before a job has finished. A lease held
    /// ahead of long jobs would only keep it from other workers; of short ones it saves the
    /// wait for a commit between jobs. When jobs grow long, the leases already held ahead run
    /// as slots free and no more are taken. [`Duration::MAX`] holds them ahead whatever the
    /// jobs take, from the first claim on.
    pub prefetch_while_under: Duration,
    /// The keys that open sealed payloads (docs/ENCRYPTION.md; default none). A handler is
    /// given a sealed payload opened; a payload that does not open (no keys, a key not among
    /// them, a key that does not open it) fails the job with that error, and its handler does
    /// not run. A plain payload is given as it is.
    pub keys: Option<Arc<lease_seal::Keyring>>,
    /// Seal each handler's result under `keys` before it is stored (docs/ENCRYPTION.md;
    /// default false). Without keys, a result to be sealed fails its job instead of being
    /// stored in the clear.
    pub seal_results: bool,
    /// Refuse a plain payload (default false): a job whose payload is not sealed fails naming
    /// it, and its handler does not run, so a plaintext payload swapped into a sealed queue by
    /// whoever can enqueue or write the store is never run. A worker that requires sealed
    /// values also seals its results ([`Self::seal_results`] is implied).
    pub require_sealed: bool,
    /// Joins each attempt's span to the trace its job was enqueued in (default none). Given,
    /// the worker reads the job's trace context ([`LeaseStore::trace`](lease_ports::LeaseStore::trace)) as it starts an
    /// attempt, and calls this with the attempt's span, the context and the attempt; without
    /// it the worker reads nothing, so tracing off costs nothing.
    pub trace: Option<TraceJoin>,
}

/// How a worker joins an attempt's span (`lease.attempt`) to the trace its job was enqueued
/// in (defined in `lease-ports`, where the server's request spans use it too).
use lease_ports::observe::TraceJoin;

impl WorkerConfig {
    /// One job at a time, renewing every third of `ttl`, the store's default backoff.
    #[must_use]
    pub fn new(queue: QueueName, owner: Owner, ttl: Ttl) -> Self {
        Self {
            queue,
            owner,
            concurrency: 1,
            ttl,
            renew_fraction: 1.0 / 3.0,
            idle_poll: Duration::from_millis(500),
            retry: Retry::default(),
            max_jobs: None,
            exit_when_empty: false,
            drain: Duration::from_secs(30),
            cancel_grace: Duration::from_secs(5),
            prefetch: None,
            prefetch_while_under: DEFAULT_PREFETCH_WHILE_UNDER,
            keys: None,
            seal_results: false,
            require_sealed: false,
            trace: None,
        }
    }
}

/// The average run time under which a worker holds leases ahead by default
/// ([`WorkerConfig::prefetch_while_under`]).
pub const DEFAULT_PREFETCH_WHILE_UNDER: Duration = Duration::from_millis(50);

/// How much of its slots' work a worker holds ahead by default ([`WorkerConfig::prefetch`]):
/// the leases its slots would run in this time at the recent jobs' average run time.
pub const DEFAULT_AHEAD_WINDOW: Duration = Duration::from_millis(20);

/// The most leases a worker holds ahead by default beyond one per slot, however short its jobs
/// ([`WorkerConfig::prefetch`]).
pub const DEFAULT_AHEAD_MOST: usize = 128;

/// How many leases to hold ahead by default, for `slots` slots whose recent jobs ran `recent`
/// seconds on average: as many as they run in [`DEFAULT_AHEAD_WINDOW`], at least one per slot
/// and at most [`DEFAULT_AHEAD_MOST`] (or one per slot, when there are more slots).
pub(crate) fn default_ahead(slots: usize, recent: f64) -> usize {
    // Jobs of no measurable time count as a microsecond each (the cap decides then); a time
    // too long to be a `Duration` as one window.
    let each = Duration::try_from_secs_f64(recent)
        .unwrap_or(DEFAULT_AHEAD_WINDOW)
        .as_nanos()
        .max(1_000);
    let per_slot = DEFAULT_AHEAD_WINDOW.as_nanos().div_ceil(each);
    let per_slot = usize::try_from(per_slot).unwrap_or(DEFAULT_AHEAD_MOST);
    per_slot
        .saturating_mul(slots)
        .min(DEFAULT_AHEAD_MOST)
        .max(slots)
}

/// The weight of the last job in the average of run times that decides prefetching.
pub(crate) const RECENT_WEIGHT: f64 = 0.25;

/// The shortest time between two renewals of one lease, whatever the ttl: a tiny ttl does not
/// turn the heartbeat into a busy loop of commits.
pub const MIN_RENEW_INTERVAL: f64 = 0.05;

/// The longest time between two renewals of one lease, whatever the ttl (a huge ttl is renewed
/// hourly, not never).
pub const MAX_RENEW_INTERVAL: f64 = 3600.0;

/// How often a lease of `ttl` seconds is renewed.
#[must_use]
pub fn renew_interval(ttl: Ttl, renew_fraction: f64) -> f64 {
    let interval = ttl.get() * renew_fraction;
    if interval.is_nan() {
        return (ttl.get() / 3.0).clamp(MIN_RENEW_INTERVAL, MAX_RENEW_INTERVAL);
    }
    interval.clamp(MIN_RENEW_INTERVAL, MAX_RENEW_INTERVAL)
}

/// How long before its lease ends, by the worker's own clock, a job is stopped when the lease
/// could not be renewed (whatever the store is doing): a tenth of the ttl, at most 2 s.
#[must_use]
pub fn stop_margin(ttl: Ttl) -> f64 {
    (ttl.get() / 10.0).min(2.0)
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_AHEAD_MOST, default_ahead};

    #[test]
    fn the_default_holds_ahead_what_the_slots_run_in_the_window_within_its_bounds() {
        // 20 ms of 1 ms jobs at one slot; of 10 ms jobs at four slots.
        assert_eq!(default_ahead(1, 0.001), 20);
        assert_eq!(default_ahead(4, 0.010), 8);
        // Jobs as long as the window or longer: one per slot.
        assert_eq!(default_ahead(4, 0.040), 4);
        // Jobs of no measurable time: the most, however few the slots.
        assert_eq!(default_ahead(1, 0.0), DEFAULT_AHEAD_MOST);
        assert_eq!(default_ahead(16, 1e-5), DEFAULT_AHEAD_MOST);
        // More slots than the most: one per slot still.
        assert_eq!(default_ahead(300, 1e-5), 300);
    }
}
