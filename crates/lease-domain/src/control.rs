//! A queue's flow control: a pause (until resumed, or until a time), a limit on how many of its
//! leases are live at once across every worker, the default timeout of an attempt, and the
//! rules of its groups (a limit of live leases per group, and ordered groups that run one job
//! at a time in claim order). Pure rules, with `now` a parameter: a store reads a queue's
//! settings, the number of its live leases and the standing of the groups it meets inside the
//! claim's own transaction, and asks [`QueueSettings::allowance`] how many leases the claim
//! may take and a [`GroupGate`] which candidates it may lease.

use std::collections::{HashMap, HashSet};

use crate::queue::{Ended, GroupKey};
use crate::rules::Job;
use crate::values::{InputError, JobId, Timestamp, Ttl};

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
    /// The most live leases of one group of the queue at once (`None`: no limit per group).
    pub per_group: Option<Concurrency>,
    /// Whether each group runs one job at a time, in claim order: a later job of a group waits
    /// while an earlier one is running, waiting for its retry, or dead.
    pub ordered: bool,
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

    /// Whether a claim must know the standing of the groups it meets (a limit per group, or
    /// ordered groups).
    #[must_use]
    pub fn limits_groups(&self) -> bool {
        self.per_group.is_some() || self.ordered
    }

    /// Whether claims of the queue must take turns: each decides on counts (of the queue's or
    /// a group's live leases) that another claim's leases would change.
    #[must_use]
    pub fn serializes_claims(&self) -> bool {
        self.counts_leases() || self.limits_groups()
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
    /// Any of the limits in one change: what is given is applied together or not at all, what
    /// is left out is kept.
    Limits(Limits),
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
            } => Some(Self::Concurrency(limit)),
            Limits {
                concurrency: None,
                timeout: Some(timeout),
                per_group: None,
                ordered: None,
            } => Some(Self::Timeout(timeout)),
            l => Some(Self::Limits(l)),
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
        QueueChange::Limits(limits) => limits.apply(&mut next),
    }
    next
}

/// Where a group stands for a claim: how many of its leases are live, and, in an ordered
/// queue, whose turn it is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Turn {
    /// Any of its jobs may be leased (in claim order).
    Open,
    /// Only these jobs, which have started and are due again (a lease that ended, a retry that
    /// is due): the group's earlier work goes first.
    Only(HashSet<JobId>),
    /// None: a job of the group is running, waiting for its retry, or dead.
    Closed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Standing {
    live: u64,
    turn: Turn,
}

/// The group rules of one claim: which candidates it may lease, given the standing of each
/// group as read in the claim's transaction and the leases the claim has taken so far.
///
/// A store gives the gate, for every group it meets among the candidates, the group's jobs
/// that bear on the rules ([`Job::bears_on_group`]: started and not finished, or dead); the
/// gate then [`admits`](GroupGate::admits) candidates and counts each lease taken.
#[derive(Debug, Clone, Default)]
pub struct GroupGate {
    per_group: Option<Concurrency>,
    ordered: bool,
    groups: HashMap<GroupKey, Standing>,
}

impl GroupGate {
    /// The gate of a queue with `settings`.
    #[must_use]
    pub fn new(settings: &QueueSettings) -> Self {
        Self {
            per_group: settings.per_group,
            ordered: settings.ordered,
            groups: HashMap::new(),
        }
    }

    /// Whether the gate holds anything back (the queue limits its groups).
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.per_group.is_some() || self.ordered
    }

    /// The groups among `jobs` whose standing the gate does not know yet (none when it is not
    /// active), each once.
    #[must_use]
    pub fn unknown<'a>(&self, jobs: impl IntoIterator<Item = &'a Job>) -> Vec<GroupKey> {
        if !self.is_active() {
            return Vec::new();
        }
        let mut seen = HashSet::new();
        jobs.into_iter()
            .filter_map(|job| job.group.as_ref())
            .filter(|g| !self.groups.contains_key(*g) && seen.insert(*g))
            .cloned()
            .collect()
    }

    /// Learns the standing of `groups` at `now` from `jobs`: every job of those groups that
    /// [bears on the group rules](Job::bears_on_group) (others are ignored). A group with no
    /// such job is free.
    pub fn learn(&mut self, groups: &[GroupKey], jobs: &[(JobId, Job)], now: Timestamp) {
        for group in groups {
            self.groups.insert(
                group.clone(),
                Standing {
                    live: 0,
                    turn: Turn::Open,
                },
            );
        }
        for (id, job) in jobs {
            let Some(group) = &job.group else { continue };
            let Some(standing) = self.groups.get_mut(group) else {
                continue;
            };
            if !job.bears_on_group(now) {
                continue;
            }
            if job.is_live_at(now) {
                standing.live += 1;
            }
            let closes = job.is_live_at(now)
                || job.ended == Some(Ended::Dead)
                || !job.has_attempts_left()
                || !job.is_claim_candidate(now);
            standing.turn = match (std::mem::replace(&mut standing.turn, Turn::Closed), closes) {
                (_, true) | (Turn::Closed, _) => Turn::Closed,
                (Turn::Open, false) => Turn::Only(HashSet::from([id.clone()])),
                (Turn::Only(mut ids), false) => {
                    ids.insert(id.clone());
                    Turn::Only(ids)
                }
            };
        }
    }

    /// Whether the claim may lease `job` (`id`) now: a job without a group always; a job of a
    /// group whose standing the gate knows while the group is under its limit and, in an
    /// ordered queue, has its turn. A group the gate was not told of is held back.
    #[must_use]
    pub fn admits(&self, id: &JobId, job: &Job) -> bool {
        if !self.is_active() {
            return true;
        }
        let Some(group) = &job.group else {
            return true;
        };
        let Some(standing) = self.groups.get(group) else {
            return false;
        };
        let under = self
            .per_group
            .is_none_or(|limit| standing.live < u64::from(limit.get()));
        let turn = !self.ordered
            || match &standing.turn {
                Turn::Open => true,
                Turn::Only(ids) => ids.contains(id),
                Turn::Closed => false,
            };
        under && turn
    }

    /// Counts a lease the claim took of a job of `group`: one more live lease, and in an
    /// ordered queue the group's turn is taken.
    pub fn leased(&mut self, group: Option<&GroupKey>) {
        self.hold(group, true);
    }

    /// Counts a job of `group` the claim buried (dead, no attempt left): in an ordered queue
    /// it now holds its group.
    pub fn buried(&mut self, group: Option<&GroupKey>) {
        self.hold(group, false);
    }

    fn hold(&mut self, group: Option<&GroupKey>, live: bool) {
        let Some(standing) = group.and_then(|g| self.groups.get_mut(g)) else {
            return;
        };
        if live {
            standing.live += 1;
        }
        if self.ordered {
            standing.turn = Turn::Closed;
        }
    }

    /// The groups none of whose jobs the claim may lease now, and the jobs of those groups it
    /// still may (an ordered group's started work): a store leaves the rest out of the
    /// candidates it reads, so a group's backlog is not read again and again.
    #[must_use]
    pub fn held_back(&self) -> (Vec<&GroupKey>, Vec<&JobId>) {
        let mut groups = Vec::new();
        let mut except = Vec::new();
        for (group, standing) in &self.groups {
            let full = self
                .per_group
                .is_some_and(|limit| standing.live >= u64::from(limit.get()));
            match &standing.turn {
                _ if full => groups.push(group),
                Turn::Closed if self.ordered => groups.push(group),
                Turn::Only(ids) if self.ordered => {
                    groups.push(group);
                    except.extend(ids);
                }
                _ => {}
            }
        }
        (groups, except)
    }
}
