//! A queue's flow control: a pause (until resumed, or until a time), a limit on how many of its
//! leases are live at once across every worker, and the default timeout of an attempt. Pure
//! rules, with `now` a parameter: a store reads a queue's settings and the number of its live
//! leases inside the claim's own transaction and asks [`QueueSettings::allowance`] how many
//! leases the claim may take.

use crate::values::{InputError, Timestamp, Ttl};

/// How a queue is paused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pause {
    /// Until when; `None`: until it is resumed.
    pub until: Option<Timestamp>,
}

/// The settings of one queue. The default (what a queue without settings has) runs freely.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QueueSettings {
    /// Whether (and until when) the queue is paused: `claim_next` leases nothing from it.
    pub paused: Option<Pause>,
    /// The most leases of the queue live at once, across every worker (`None`: no limit).
    pub concurrency: Option<Concurrency>,
    /// How long an attempt of a job that names no timeout of its own may run.
    pub timeout: Option<Ttl>,
}

/// A limit on live leases: at least 1 (a limit of 0 is no limit, and is written as `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Concurrency(u32);

impl Concurrency {
    /// The limit `n`, or `None` for 0 (no limit).
    #[must_use]
    pub fn new(n: u32) -> Option<Self> {
        (n > 0).then_some(Self(n))
    }

    /// Reads a stored limit back.
    ///
    /// # Errors
    /// [`InputError::InvalidSetting`] for 0 or a value that is not a `u32`.
    pub fn stored(n: i64) -> Result<Self, InputError> {
        u32::try_from(n)
            .ok()
            .and_then(Self::new)
            .ok_or_else(|| InputError::InvalidSetting(format!("concurrency {n} is not 1 or more")))
    }

    /// The limit.
    #[must_use]
    pub fn get(self) -> u32 {
        self.0
    }
}

impl QueueSettings {
    /// Whether the queue is paused at `now`: a pause until a time ends at that time.
    #[must_use]
    pub fn is_paused_at(&self, now: Timestamp) -> bool {
        self.paused
            .is_some_and(|pause| pause.until.is_none_or(|until| now < until))
    }

    /// Whether these are the settings of a queue that has none (a store may forget them).
    #[must_use]
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// How many leases a claim that wants `wanted` may take at `now`, when `held` leases of the
    /// queue are live (`Job::status_at` running): none while the queue is paused, and never so
    /// many that more than the concurrency limit would be live.
    #[must_use]
    pub fn allowance(&self, held: u64, now: Timestamp, wanted: usize) -> usize {
        if self.is_paused_at(now) {
            return 0;
        }
        match self.concurrency {
            Some(limit) => {
                let room = u64::from(limit.get()).saturating_sub(held);
                usize::try_from(room).map_or(wanted, |room| room.min(wanted))
            }
            None => wanted,
        }
    }

    /// Whether a claim needs the number of live leases of the queue to be decided.
    #[must_use]
    pub fn counts_leases(&self) -> bool {
        self.concurrency.is_some()
    }
}

/// A change an operator makes to a queue's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QueueChange {
    /// Pause the queue, until resumed (`None`) or until a time.
    Pause(Option<Timestamp>),
    /// End a pause.
    Resume,
    /// Set (`Some`) or remove (`None`) the limit on live leases.
    Concurrency(Option<Concurrency>),
    /// Set (`Some`) or remove (`None`) the default timeout of an attempt.
    Timeout(Option<Ttl>),
    /// Both of the above in one change: the limit and the default timeout are applied
    /// together or not at all.
    Limits(Option<Concurrency>, Option<Ttl>),
}

impl QueueChange {
    /// The one change that sets what is given of a limit (`Some(None)` removes it) and a
    /// default timeout, keeping what is not: [`QueueChange::Limits`] for both, the single
    /// change for one, `None` for neither.
    #[must_use]
    pub fn limits(
        concurrency: Option<Option<Concurrency>>,
        timeout: Option<Option<Ttl>>,
    ) -> Option<Self> {
        match (concurrency, timeout) {
            (Some(limit), Some(timeout)) => Some(Self::Limits(limit, timeout)),
            (Some(limit), None) => Some(Self::Concurrency(limit)),
            (None, Some(timeout)) => Some(Self::Timeout(timeout)),
            (None, None) => None,
        }
    }
}

/// The settings after `change`; every other setting is kept. Running leases are never touched:
/// a pause or a lower limit only holds back new leases.
#[must_use]
pub fn decide_queue_change(current: &QueueSettings, change: QueueChange) -> QueueSettings {
    let mut next = *current;
    match change {
        QueueChange::Pause(until) => next.paused = Some(Pause { until }),
        QueueChange::Resume => next.paused = None,
        QueueChange::Concurrency(limit) => next.concurrency = limit,
        QueueChange::Timeout(timeout) => next.timeout = timeout,
        QueueChange::Limits(limit, timeout) => {
            next.concurrency = limit;
            next.timeout = timeout;
        }
    }
    next
}
