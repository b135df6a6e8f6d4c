//! A queue's flow control: a pause (until resumed, or until a time), a limit on how many of its
//! leases are live at once across every worker, the default timeout of an attempt, and the
//! rules of its groups (a limit of live leases per group, and ordered groups that run one job
//! at a time in claim order). Pure rules, with `now` a parameter: a store reads a queue's
//! settings, the number of its live leases and the standing of the groups it meets inside the
//! claim's own transaction, and asks [`QueueSettings::allowance`] how many leases the claim
//! may take and a [`crate::GroupGate`] which candidates it may lease.

use std::collections::BTreeMap;

use crate::queue::GroupKey;
use crate::rate::Rate;
use crate::values::{InputError, Timestamp, Ttl};

/// How a queue is paused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pause {
    /// Until when; `None`: until it is resumed.
    pub until: Option<Timestamp>,
}

/// The settings of one queue. The default (what a queue without settings has) runs freely.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueSettings {
    /// Whether (and until when) the queue is paused: `claim_next` leases nothing from it.
    pub paused: Option<Pause>,
    /// The most leases of the queue live at once, across every worker (`None`: no limit).
    pub concurrency: Option<Concurrency>,
    /// How long an attempt of a job that names no timeout of its own may run.
    pub timeout: Option<Ttl>,
    /// The most live leases of one group of the queue at once (`None`: no limit per group).
    pub per_group: Option<Concurrency>,
    /// Whether each group runs one job at a time, in claim order: a later job of a group waits
    /// while an earlier one is running, waiting for its retry, or dead.
    pub ordered: bool,
    /// The paused groups of the queue, each until resumed (`None`) or until a time: a claim
    /// leases none of a paused group's jobs; the queue's other groups run.
    pub paused_groups: BTreeMap<GroupKey, Option<Timestamp>>,
    /// The most leases of the queue granted in any window of the rate's period, across every
    /// worker (`None`: no rate).
    pub rate: Option<Rate>,
    /// The most leases of each group of the queue granted in any window of the rate's period
    /// (`None`: no rate per group).
    pub rate_per_group: Option<Rate>,
    /// Whether claims serve the queue's groups in turn, the group served least recently first
    /// ([`crate::Turn`]), instead of in claim order across groups.
    pub fair: bool,
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
    /// Whether `group` of the queue is paused at `now`: a pause until a time ends at that
    /// time.
    #[must_use]
    pub fn is_group_paused_at(&self, group: &GroupKey, now: Timestamp) -> bool {
        self.paused_groups
            .get(group)
            .is_some_and(|until| until.is_none_or(|until| now < until))
    }

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

    /// Whether a claim must know the standing of the groups it meets (a limit per group, or
    /// ordered groups).
    #[must_use]
    pub fn limits_groups(&self) -> bool {
        self.per_group.is_some() || self.ordered || self.rate_per_group.is_some()
    }

    /// Whether a claim must read the log of grants (the queue or its groups have a rate).
    #[must_use]
    pub fn limits_rate(&self) -> bool {
        self.rate.is_some() || self.rate_per_group.is_some()
    }

    /// Whether claims of the queue must take turns: each decides on counts (of the queue's or
    /// a group's live leases) or on the groups' turns that another claim's leases would change.
    #[must_use]
    pub fn serializes_claims(&self) -> bool {
        self.counts_leases() || self.limits_groups() || self.limits_rate() || self.fair
    }
}

/// The limits a change sets: each field given (`Some`) is set, each left out is kept; an inner
/// `None` removes that limit.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Limits {
    /// The limit on the queue's live leases.
    pub concurrency: Option<Option<Concurrency>>,
    /// The default timeout of an attempt.
    pub timeout: Option<Option<Ttl>>,
    /// The limit on each group's live leases.
    pub per_group: Option<Option<Concurrency>>,
    /// Whether groups are ordered.
    pub ordered: Option<bool>,
    /// The queue's rate.
    pub rate: Option<Option<Rate>>,
    /// The rate of each group.
    pub rate_per_group: Option<Option<Rate>>,
    /// Whether claims serve the groups in turn.
    pub fair: Option<bool>,
}

impl Limits {
    /// Sets the queue's limit and its default timeout (the change `lease limit --concurrency N
    /// --timeout S` makes), nothing else.
    #[must_use]
    pub fn both(concurrency: Option<Concurrency>, timeout: Option<Ttl>) -> Self {
        Self {
            concurrency: Some(concurrency),
            timeout: Some(timeout),
            ..Self::default()
        }
    }

    /// Whether the change sets nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    fn apply(&self, settings: &mut QueueSettings) {
        if let Some(limit) = self.concurrency {
            settings.concurrency = limit;
        }
        if let Some(timeout) = self.timeout {
            settings.timeout = timeout;
        }
        if let Some(limit) = self.per_group {
            settings.per_group = limit;
        }
        if let Some(ordered) = self.ordered {
            settings.ordered = ordered;
        }
        if let Some(rate) = self.rate {
            settings.rate = rate;
        }
        if let Some(rate) = self.rate_per_group {
            settings.rate_per_group = rate;
        }
        if let Some(fair) = self.fair {
            settings.fair = fair;
        }
    }
}

/// A change an operator makes to a queue's settings.
#[derive(Debug, Clone, PartialEq)]
pub enum QueueChange {
    /// Pause the queue, until resumed (`None`) or until a time.
    Pause(Option<Timestamp>),
    /// End a pause.
    Resume,
    /// Set (`Some`) or remove (`None`) the limit on live leases.
    Concurrency(Option<Concurrency>),
    /// Set (`Some`) or remove (`None`) the default timeout of an attempt.
    Timeout(Option<Ttl>),
    /// Any of the limits in one change: what is given is applied together or not at all, what
    /// is left out is kept.
    Limits(Limits),
    /// Pause one group of the queue, until resumed (`None`) or until a time (a pause given
    /// again replaces its time).
    PauseGroup(GroupKey, Option<Timestamp>),
    /// End the pause of one group.
    ResumeGroup(GroupKey),
    /// Hold one group until a time, from a job's holder (a fenced write decided by
    /// [`crate::decide_hold_group`]): the group is paused until then, or until later if it
    /// already was (a pause until resumed stays so).
    HoldGroup(GroupKey, Timestamp),
}

impl QueueChange {
    /// The one change that sets what is given of a limit (`Some(None)` removes it) and a
    /// default timeout, keeping what is not (see [`QueueChange::set`]).
    #[must_use]
    pub fn limits(
        concurrency: Option<Option<Concurrency>>,
        timeout: Option<Option<Ttl>>,
    ) -> Option<Self> {
        Self::set(Limits {
            concurrency,
            timeout,
            ..Limits::default()
        })
    }

    /// The one change that sets what `limits` gives, keeping what it does not: the single
    /// change for a limit or a timeout alone, [`QueueChange::Limits`] for anything else,
    /// `None` for nothing.
    #[must_use]
    pub fn set(limits: Limits) -> Option<Self> {
        match limits {
            l if l.is_empty() => None,
            Limits {
                concurrency: Some(limit),
                timeout: None,
                per_group: None,
                ordered: None,
                rate: None,
                rate_per_group: None,
                fair: None,
            } => Some(Self::Concurrency(limit)),
            Limits {
                concurrency: None,
                timeout: Some(timeout),
                per_group: None,
                ordered: None,
                rate: None,
                rate_per_group: None,
                fair: None,
            } => Some(Self::Timeout(timeout)),
            l => Some(Self::Limits(l)),
        }
    }
}

/// The settings after `change`; every other setting is kept. Running leases are never touched:
/// a pause or a lower limit only holds back new leases.
#[must_use]
pub fn decide_queue_change(current: &QueueSettings, change: QueueChange) -> QueueSettings {
    let mut next = current.clone();
    match change {
        QueueChange::Pause(until) => next.paused = Some(Pause { until }),
        QueueChange::Resume => next.paused = None,
        QueueChange::Concurrency(limit) => next.concurrency = limit,
        QueueChange::Timeout(timeout) => next.timeout = timeout,
        QueueChange::Limits(limits) => limits.apply(&mut next),
        QueueChange::PauseGroup(group, until) => {
            next.paused_groups.insert(group, until);
        }
        QueueChange::ResumeGroup(group) => {
            next.paused_groups.remove(&group);
        }
        QueueChange::HoldGroup(group, until) => {
            let end = match next.paused_groups.get(&group) {
                Some(None) => None,
                Some(Some(was)) if was.get() > until.get() => Some(*was),
                _ => Some(until),
            };
            next.paused_groups.insert(group, end);
        }
    }
    next
}

/// One logged grant of a rate-limited queue: the group whose rate it counts against (`None`:
/// the queue's own rate) and when it stops counting.
pub type Grant = (Option<GroupKey>, Timestamp);

/// Where a queue's rates stand at a time: when the queue's rate lets a claim take a lease
/// again, if it lets none now, and the same for each group whose rate lets none now.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Throttle {
    /// When the queue's own rate opens again (`None`: it is not throttled).
    pub until: Option<Timestamp>,
    /// The throttled groups, each with when its rate opens again.
    pub groups: BTreeMap<GroupKey, Timestamp>,
}

impl Throttle {
    /// The standing of a queue with `settings` at `now`, from its logged `grants`.
    #[must_use]
    pub fn of(settings: &QueueSettings, grants: &[Grant], now: Timestamp) -> Self {
        let until = settings.rate.and_then(|rate| {
            let queue: Vec<Timestamp> = grants
                .iter()
                .filter(|(g, _)| g.is_none())
                .map(|(_, at)| *at)
                .collect();
            rate.opens_at(&queue, now)
        });
        let mut groups = BTreeMap::new();
        if let Some(rate) = settings.rate_per_group {
            let mut by_group: BTreeMap<&GroupKey, Vec<Timestamp>> = BTreeMap::new();
            for (group, at) in grants {
                if let Some(group) = group {
                    by_group.entry(group).or_default().push(*at);
                }
            }
            for (group, expiries) in by_group {
                if let Some(at) = rate.opens_at(&expiries, now) {
                    groups.insert(group.clone(), at);
                }
            }
        }
        Self { until, groups }
    }

    /// When a claim that got nothing because of the rates may get something again: when the
    /// queue's rate opens, else when the first of its throttled groups does (`None`: nothing
    /// is throttled).
    #[must_use]
    pub fn opens_at(&self) -> Option<Timestamp> {
        self.until.or_else(|| {
            self.groups
                .values()
                .copied()
                .min_by(|a, b| a.get().total_cmp(&b.get()))
        })
    }

    /// Whether nothing is throttled.
    #[must_use]
    pub fn is_clear(&self) -> bool {
        self.until.is_none() && self.groups.is_empty()
    }
}
