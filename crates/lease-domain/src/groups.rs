//! The group rules of one claim: which candidates of a queue with a limit per group, or with
//! ordered groups, a claim may lease, judged from the standing of each group it meets (read in
//! the claim's own transaction) and the leases it has taken so far. Pure, with `now` a
//! parameter.

use std::collections::{HashMap, HashSet};

use crate::control::{Concurrency, QueueSettings};
use crate::queue::GroupKey;
use crate::rate::Rate;
use crate::rules::Job;
use crate::values::{JobId, Timestamp};

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

/// What a fair claim may take from a group on its turn ([`GroupGate::turn`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupTurn<'a> {
    /// None of its jobs.
    Closed,
    /// Only these jobs (an ordered group's started work, due again).
    Only(Vec<&'a JobId>),
    /// Any of its jobs, in claim order.
    Open,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Standing {
    live: u64,
    turn: Turn,
    /// How many more leases the group's rate lets the claim grant (`usize::MAX` without a
    /// rate per group).
    room: usize,
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
    rate: Option<Rate>,
    /// The groups paused at the claim's now: none of their jobs is leased.
    paused: HashSet<GroupKey>,
    groups: HashMap<GroupKey, Standing>,
}

impl GroupGate {
    /// The gate of a queue with `settings`, for a claim at `now`.
    #[must_use]
    pub fn new(settings: &QueueSettings, now: Timestamp) -> Self {
        Self {
            per_group: settings.per_group,
            ordered: settings.ordered,
            rate: settings.rate_per_group,
            paused: settings
                .paused_groups
                .keys()
                .filter(|g| settings.is_group_paused_at(g, now))
                .cloned()
                .collect(),
            groups: HashMap::new(),
        }
    }

    /// Whether the gate holds anything back (the queue limits its groups, or a group of it is
    /// paused).
    #[must_use]
    pub fn is_active(&self) -> bool {
        self.judges_standing() || !self.paused.is_empty()
    }

    /// Whether a group's standing must be read to judge its jobs (a limit per group, ordered
    /// groups, or a rate per group).
    fn judges_standing(&self) -> bool {
        self.per_group.is_some() || self.ordered || self.rate.is_some()
    }

    /// Learns the standing of `groups` at `now` from `jobs`: every job of those groups that
    /// [bears on the group rules](Job::bears_on_group) (others are ignored), and, under a rate
    /// per group, how many of each group's logged grants still count (`counting`; a group not
    /// named has none). A group with no such job and no grant is free.
    pub fn learn(
        &mut self,
        groups: &[GroupKey],
        jobs: &[(JobId, Job)],
        counting: &[(GroupKey, u64)],
        now: Timestamp,
    ) {
        for group in groups {
            let room = self.rate.map_or(usize::MAX, |rate| {
                let n = counting
                    .iter()
                    .find(|(g, _)| g == group)
                    .map_or(0, |(_, n)| *n);
                rate.room_after(n)
            });
            self.groups.insert(
                group.clone(),
                Standing {
                    live: 0,
                    turn: Turn::Open,
                    room,
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
            // Running, waiting for its retry, dead (none of which a claim acts on) or out of
            // attempts (which a claim would bury): the group is closed.
            let closes = !job.has_attempts_left() || !job.is_claim_candidate(now);
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
        if self.paused.contains(group) {
            return false;
        }
        if !self.judges_standing() {
            return true;
        }
        let Some(standing) = self.groups.get(group) else {
            return false;
        };
        let under = self
            .per_group
            .is_none_or(|limit| standing.live < u64::from(limit.get()))
            && standing.room > 0;
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
            standing.room = standing.room.saturating_sub(1);
        }
        if self.ordered {
            standing.turn = Turn::Closed;
        }
    }

    /// What a fair claim may take from `group` on its turn: nothing (paused, full, out of its
    /// rate, not its turn in an ordered queue, or a group whose standing the gate was not
    /// told of while it judges standing), only some started jobs (an ordered group's), or any
    /// of its jobs in claim order.
    #[must_use]
    pub fn turn(&self, group: &GroupKey) -> GroupTurn<'_> {
        if self.paused.contains(group) {
            return GroupTurn::Closed;
        }
        if !self.judges_standing() {
            return GroupTurn::Open;
        }
        match self.groups.get(group) {
            Some(standing) => self.standing_turn(standing),
            None => GroupTurn::Closed,
        }
    }

    /// What the claim may take from a group that stands so.
    fn standing_turn<'a>(&self, standing: &'a Standing) -> GroupTurn<'a> {
        let full = self
            .per_group
            .is_some_and(|limit| standing.live >= u64::from(limit.get()))
            || standing.room == 0;
        match &standing.turn {
            _ if full => GroupTurn::Closed,
            Turn::Closed if self.ordered => GroupTurn::Closed,
            Turn::Only(ids) if self.ordered => GroupTurn::Only(ids.iter().collect()),
            _ => GroupTurn::Open,
        }
    }

    /// Whether the gate must learn the standing of `group` before judging its jobs.
    #[must_use]
    pub fn must_learn(&self, group: &GroupKey) -> bool {
        self.judges_standing() && !self.groups.contains_key(group)
    }
}
