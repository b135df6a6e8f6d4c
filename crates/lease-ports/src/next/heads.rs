//! The walk by heads: the jobs without a group merged, in claim order, with the groups met in
//! the order of their heads; each group met once, its standing read, a group held back passed
//! in that one step.

use std::collections::{HashMap, HashSet, VecDeque};

use lease_domain::{ClaimKey, GroupKey, GroupTurn, Job, JobId, LeaseTerm};

use super::*;

/// The candidates of one group (or of the jobs without one) read so far.
#[derive(Debug, Default)]
pub(super) struct Stream {
    pub(super) buffered: VecDeque<(LeaseTerm, Candidate)>,
    pub(super) skipped: HashSet<JobId>,
    pub(super) done: bool,
    /// Only these jobs (an ordered group's started work), read once.
    pub(super) only: Option<Vec<JobId>>,
    /// The group's head, as the walk met it.
    pub(super) head: Option<ClaimKey>,
    /// Whether the head is at the group's first candidate (so at its first ready job).
    pub(super) exact: bool,
    /// Whether the walk leased or buried one of its jobs.
    pub(super) touched: bool,
}

impl Stream {
    pub(super) fn at(head: ClaimKey) -> Self {
        Self {
            head: Some(head),
            ..Self::default()
        }
    }

    /// Whether the store's head of the group is where it should be and stays there: the
    /// walk need not have it moved.
    pub(super) fn head_stays(&self) -> bool {
        self.exact && !self.touched
    }

    pub(super) fn only(ids: Vec<JobId>) -> Self {
        Self {
            only: Some(ids),
            ..Self::default()
        }
    }

    pub(super) fn needs_read(&self) -> bool {
        self.buffered.is_empty() && !self.done
    }

    pub(super) fn read(&self, group: Option<&GroupKey>, remaining: usize) -> Read {
        match &self.only {
            Some(ids) => Read::Jobs(ids.clone()),
            None => Read::Due {
                group: group.cloned(),
                want: self.want(remaining),
            },
        }
    }

    /// How many to read: as many as leases are still wanted, plus the candidates skipped
    /// (a skipped job stays a candidate, so a read must reach past it).
    pub(super) fn want(&self, remaining: usize) -> usize {
        remaining.max(1).saturating_add(self.skipped.len())
    }

    /// Takes the answer to [`Stream::read`] asked with `remaining`.
    pub(super) fn answered(&mut self, remaining: usize, term: LeaseTerm, mut read: Vec<Candidate>) {
        if self.only.is_some() {
            read.retain(|c| c.job.is_claim_candidate(term.now()));
            read.sort_by_key(Candidate::key);
            self.done = true;
        } else if read.len() < self.want(remaining) {
            self.done = true;
        }
        if self.buffered.is_empty() && self.skipped.is_empty() {
            self.exact = self.head.is_some() && read.first().map(Candidate::key) == self.head;
        }
        let before = self.buffered.len();
        self.buffered.extend(
            read.into_iter()
                .filter(|c| !self.skipped.contains(&c.id))
                .map(|c| (term, c)),
        );
        // A read that brings nothing new ends the stream (a store that ignored `want`).
        if self.buffered.len() == before {
            self.done = true;
        }
    }

    pub(super) fn front(&self) -> Option<ClaimKey> {
        self.buffered.front().map(|(_, c)| c.key())
    }
}

/// The walk by heads: the jobs without a group merged with the groups met in head order.
#[derive(Debug)]
pub(super) struct Merge {
    pub(super) ungrouped: Stream,
    pub(super) groups: HashMap<GroupKey, Stream>,
    pub(super) heads: VecDeque<Head>,
    pub(super) heads_done: bool,
    pub(super) heads_want: usize,
    /// The key of the last head read: every head not read yet is after it.
    pub(super) heads_floor: Option<ClaimKey>,
    /// Every group met (the walk reads its jobs, or passed it).
    pub(super) met: HashSet<GroupKey>,
    /// The groups met and passed (held back when met).
    pub(super) passed: HashSet<GroupKey>,
    /// The first due jobs of groups not met yet, read with their heads.
    pub(super) due: HashMap<GroupKey, (LeaseTerm, usize, Vec<Candidate>)>,
    pub(super) asked: Option<Asked>,
    /// Whether the walk handed out [`Effect::RepairHeads`].
    pub(super) repaired: bool,
}

/// Which read of a [`Merge`] an answer is for.
#[derive(Debug, Clone)]
pub(super) enum Asked {
    Ungrouped(usize),
    Group(GroupKey, usize),
    Heads,
    Standing(Vec<GroupKey>),
    Many(Vec<Asked>),
}

/// Where the next candidate of a [`Merge`] comes from.
pub(super) enum Front {
    Ungrouped,
    Group(GroupKey),
    Head,
}

impl ClaimWalk {
    /// The next step of the walk by heads: the candidate first in claim order among the jobs
    /// without a group, the groups met so far and the next head is decided (a head's group is
    /// met: its standing read, and passed if it is held back), until the claim is full or no
    /// candidate is left.
    pub(super) fn merge_step(&mut self, m: &mut Merge) -> Option<Read> {
        loop {
            if self.is_full() {
                return None;
            }
            let remaining = self.limit - self.leases.len();
            while m.heads.front().is_some_and(|h| m.met.contains(&h.group)) {
                m.heads.pop_front();
            }
            // Every read the next decision needs, asked together.
            let mut asked = Vec::new();
            let mut reads = Vec::new();
            if m.ungrouped.needs_read() {
                asked.push(Asked::Ungrouped(remaining));
                reads.push(m.ungrouped.read(None, remaining));
            }
            let mut waiting: Vec<&GroupKey> = m
                .groups
                .iter()
                .filter(|(_, s)| s.needs_read())
                .map(|(g, _)| g)
                .collect();
            waiting.sort();
            for group in waiting {
                asked.push(Asked::Group(group.clone(), remaining));
                reads.push(m.groups[group].read(Some(group), remaining));
            }
            // More heads are read only when one could come first: every head not read yet is
            // after the last one read (`heads_floor`); with other reads out, they go along.
            let first_read = m
                .groups
                .values()
                .filter_map(Stream::front)
                .chain(m.ungrouped.front())
                .min();
            if m.heads.is_empty()
                && !m.heads_done
                && (!reads.is_empty()
                    || first_read.is_none_or(|k| m.heads_floor.is_none_or(|floor| k > floor)))
            {
                asked.push(Asked::Heads);
                let mut skip: Vec<GroupKey> = m.met.iter().cloned().collect();
                skip.sort();
                reads.push(Read::Heads {
                    want: m.heads_want,
                    skip,
                });
            }
            if reads.len() == 1 {
                m.asked = asked.pop();
                return reads.pop();
            }
            if !reads.is_empty() {
                m.asked = Some(Asked::Many(asked));
                return Some(Read::Many(reads));
            }
            let mut best: Option<(ClaimKey, Front)> = None;
            let mut consider = |key: Option<ClaimKey>, front: Front| {
                if let Some(key) = key {
                    if best.as_ref().is_none_or(|(b, _)| key < *b) {
                        best = Some((key, front));
                    }
                }
            };
            consider(m.ungrouped.front(), Front::Ungrouped);
            consider(m.heads.front().map(|h| h.key), Front::Head);
            for (group, stream) in &m.groups {
                consider(stream.front(), Front::Group(group.clone()));
            }
            match best?.1 {
                Front::Head => {
                    let group = m.heads.front().map(|h| h.group.clone())?;
                    if self.gate.must_learn(&group) {
                        // Learn every head read whose group is still to meet, in one read.
                        let mut groups: Vec<GroupKey> = m
                            .heads
                            .iter()
                            .map(|h| &h.group)
                            .filter(|g| !m.met.contains(*g) && self.gate.must_learn(g))
                            .cloned()
                            .collect();
                        groups.dedup();
                        m.asked = Some(Asked::Standing(groups.clone()));
                        return Some(Read::Standing(groups));
                    }
                    let head = m.heads.pop_front()?;
                    m.met.insert(group.clone());
                    match self.gate.turn(&group) {
                        GroupTurn::Closed => {
                            m.passed.insert(group);
                        }
                        GroupTurn::Only(ids) => {
                            let ids: Vec<JobId> = ids.into_iter().cloned().collect();
                            let mut stream = Stream::only(ids.clone());
                            // Its started work, when every job of it came with the heads as
                            // one of the group's first due jobs (else it is read).
                            if let Some((term, _, read)) = m.due.remove(&group) {
                                if ids.iter().all(|id| read.iter().any(|c| c.id == *id)) {
                                    let read = read.into_iter().filter(|c| ids.contains(&c.id));
                                    stream.answered(0, term, read.collect());
                                }
                            }
                            m.groups.insert(group, stream);
                        }
                        GroupTurn::Open => {
                            let mut stream = Stream::at(head.key);
                            // Its first due jobs, when they came with the heads.
                            if let Some((term, each, mut read)) = m.due.remove(&group) {
                                read.sort_by_key(Candidate::key);
                                stream.answered(each, term, read);
                            }
                            m.groups.insert(group, stream);
                        }
                    }
                }
                Front::Ungrouped => {
                    let (term, candidate) = m.ungrouped.buffered.pop_front()?;
                    if let Some(id) = self.decide_into(term, candidate) {
                        m.ungrouped.skipped.insert(id);
                    }
                }
                Front::Group(group) => {
                    let stream = m.groups.get_mut(&group)?;
                    let (term, candidate) = stream.buffered.pop_front()?;
                    match self.decide_into(term, candidate) {
                        Some(id) => {
                            stream.skipped.insert(id);
                        }
                        None => stream.touched = true,
                    }
                    if self.gate.turn(&group) == GroupTurn::Closed {
                        // Full, or an ordered group's turn taken: none of its jobs is leased.
                        m.groups.remove(&group);
                    }
                }
            }
        }
    }

    pub(super) fn merge_answer(
        &mut self,
        m: &mut Merge,
        answer: Answer,
    ) -> Result<(), crate::StoreError> {
        match (m.asked.take(), answer) {
            (Some(Asked::Many(asked)), Answer::Many(answers)) if asked.len() == answers.len() => {
                for (asked, answer) in asked.into_iter().zip(answers) {
                    m.asked = Some(asked);
                    self.merge_answer(m, answer)?;
                }
            }
            (Some(Asked::Ungrouped(remaining)), Answer::Candidates(term, read)) => {
                self.term = term;
                m.ungrouped.answered(remaining, term, read);
            }
            (Some(Asked::Group(group, remaining)), Answer::Candidates(term, read)) => {
                self.term = term;
                if let Some(stream) = m.groups.get_mut(&group) {
                    stream.answered(remaining, term, read);
                }
            }
            (
                Some(Asked::Heads),
                Answer::HeadsWithStanding {
                    heads,
                    bearing,
                    counting,
                    due,
                },
            ) => {
                if let Some((term, each, found)) = due {
                    for head in heads.iter().filter(|h| !m.met.contains(&h.group)) {
                        m.due.insert(head.group.clone(), (term, each, Vec::new()));
                    }
                    for candidate in found {
                        let group = candidate.job.group.as_ref();
                        if let Some((_, _, read)) = group.and_then(|g| m.due.get_mut(g)) {
                            read.push(candidate);
                        }
                    }
                }
                // Only the groups still to learn: a group learned before may have leases
                // of this claim counted in its standing.
                let mut groups: Vec<GroupKey> = heads
                    .iter()
                    .map(|h| &h.group)
                    .filter(|g| !m.met.contains(*g) && self.gate.must_learn(g))
                    .cloned()
                    .collect();
                groups.sort();
                groups.dedup();
                if !groups.is_empty() {
                    let of = |g: Option<&GroupKey>| g.is_some_and(|g| groups.contains(g));
                    let bearing: Vec<(JobId, Job)> = bearing
                        .into_iter()
                        .filter(|(_, job)| of(job.group.as_ref()))
                        .collect();
                    let counting: Vec<(GroupKey, u64)> =
                        counting.into_iter().filter(|(g, _)| of(Some(g))).collect();
                    self.gate
                        .learn(&groups, &bearing, &counting, self.term.now());
                }
                m.asked = Some(Asked::Heads);
                return self.merge_answer(m, Answer::Heads(heads));
            }
            (Some(Asked::Heads), Answer::Heads(heads)) => {
                let fresh: Vec<Head> = heads
                    .into_iter()
                    .filter(|h| !m.met.contains(&h.group))
                    .collect();
                m.heads_done = fresh.len() < m.heads_want;
                if let Some(last) = fresh.iter().map(|h| h.key).max() {
                    m.heads_floor = Some(last);
                }
                m.heads_want = m.heads_want.saturating_mul(2).min(MAX_HEADS);
                m.heads.extend(fresh);
                m.heads.make_contiguous().sort_by_key(|h| h.key);
            }
            (Some(Asked::Standing(groups)), Answer::Standing { bearing, counting }) => {
                self.gate
                    .learn(&groups, &bearing, &counting, self.term.now());
            }
            (asked, other) => {
                return Err(wrong_answer(&format!("the answer to {asked:?}"), &other));
            }
        }
        Ok(())
    }
}
