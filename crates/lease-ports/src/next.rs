//! The one `claim_next` loop every store runs: how many candidates to read, when to read more
//! and when to stop. A store only reads pages of candidates (in claim order, as
//! [`lease_domain::Job::is_claim_candidate`] selects them) and writes the rows this loop
//! returns, so no two stores can stop on different rules.

use std::collections::HashSet;

use lease_domain::{
    Grant, GroupGate, GroupKey, GroupTurn, Job, JobId, LeaseTerm, NextDecision, Owner,
    QueueSettings, Rate, Timestamp, Ttl, decide_claim_next,
};

use crate::Lease;

/// One `claim_next` call: feed it pages of candidates until [`ClaimNextLoop::want`] says
/// stop, write the rows each page returns, then take the leases.
///
/// The stopping rule: a page asks for as many candidates as leases are still wanted, plus one
/// for each candidate the domain skipped (a skipped job stays a candidate, so the next page
/// must reach past it). After a page the loop stops when it has `limit` leases, when the page
/// came back shorter than asked (no candidate is left), or when the page changed nothing and
/// showed no candidate it had not seen (another page would read the same rows). Each page
/// that goes on leases or buries a job (which leaves the candidates) or sees a new one, so the
/// loop ends.
#[derive(Debug)]
pub struct ClaimNextLoop {
    owner: Owner,
    limit: usize,
    /// The queue's default timeout of an attempt.
    timeout: Option<Ttl>,
    tokens: Vec<lease_domain::TokenDigest>,
    leases: Vec<Lease>,
    /// The jobs buried, with when.
    buried: Vec<(JobId, Option<lease_domain::Timestamp>)>,
    skipped: HashSet<JobId>,
    over: bool,
    /// The queue's group rules, with the standing of each group met so far.
    gate: GroupGate,
    /// The queue's rate and its groups' rate, whose grants this claim logs.
    rates: (Option<Rate>, Option<Rate>),
    /// Whether the queue serves its groups in turn.
    fair: bool,
}

/// What [`ClaimNextLoop`] did with one candidate.
// Returned once per candidate and taken apart at once: boxing the row would cost an
// allocation per lease for nothing.
#[allow(clippy::large_enum_variant)]
enum Decided {
    /// Leased (`true`) or buried: the row to write.
    Wrote((JobId, Job), bool),
    /// Left alone; whether for the first time.
    Skipped(bool),
}

impl ClaimNextLoop {
    /// The loop of `claim`: leasing up to its limit of jobs to its owner, the `n`th lease with
    /// its `n`th token when it has tokens.
    #[must_use]
    pub fn of(claim: &crate::ClaimNext) -> Self {
        Self::new(&claim.owner, claim.limit).with_tokens(claim.tokens.clone())
    }

    /// The loop of `claim` in a queue with `settings`, `held` of whose leases are live at the
    /// claim's now and `counting` of whose logged grants still count against its own rate
    /// (read when it has one: [`QueueSettings::limits_rate`]): it leases no more than
    /// [`QueueSettings::allowance`] allows (none while the queue is paused) and the queue's
    /// rate leaves room for, and each lease carries its job's timeout, else the queue's.
    #[must_use]
    pub fn in_queue(
        claim: &crate::ClaimNext,
        settings: &QueueSettings,
        held: u64,
        counting: u64,
    ) -> Self {
        let now = claim.term.now();
        let mut limit = settings.allowance(held, now, claim.limit);
        if let Some(rate) = settings.rate {
            limit = limit.min(rate.room_after(counting));
        }
        let mut next = Self::new(&claim.owner, limit).with_tokens(claim.tokens.clone());
        next.timeout = settings.timeout;
        next.gate = GroupGate::new(settings, now);
        next.rates = (settings.rate, settings.rate_per_group);
        next.fair = settings.fair;
        next
    }

    /// The grants to log for the leases taken (empty when the queue has no rate): one against
    /// the queue's rate for each lease, one against its group's rate for each lease of a job
    /// with a group, each with when it stops counting.
    #[must_use]
    pub fn grants(&self) -> Vec<Grant> {
        let (queue, group) = self.rates;
        let mut grants = Vec::new();
        for lease in &self.leases {
            if let Some(rate) = queue {
                grants.push((None, rate.expiry(lease.now)));
            }
            if let (Some(rate), Some(g)) = (group, &lease.group) {
                grants.push((Some(g.clone()), rate.expiry(lease.now)));
            }
        }
        grants
    }

    /// A loop leasing up to `limit` jobs to `owner`.
    #[must_use]
    pub fn new(owner: &Owner, limit: usize) -> Self {
        Self {
            timeout: None,
            tokens: Vec::new(),
            owner: owner.clone(),
            limit,
            leases: Vec::new(),
            buried: Vec::new(),
            skipped: HashSet::new(),
            over: limit == 0,
            gate: GroupGate::default(),
            rates: (None, None),
            fair: false,
        }
    }

    /// Whether the claim judges its candidates by group (the queue limits its groups, or a
    /// group of it is paused): the store must then read, before it hands a page
    /// to [`ClaimNextLoop::page`], the standing of the page's groups
    /// ([`ClaimNextLoop::unknown_groups`], [`ClaimNextLoop::learn`]), and may leave the groups
    /// [`ClaimNextLoop::held_back`] out of the candidates it reads.
    #[must_use]
    pub fn limits_groups(&self) -> bool {
        self.gate.is_active()
    }

    /// The groups of `page` whose standing the loop does not know yet (none when the queue
    /// does not limit its groups).
    #[must_use]
    pub fn unknown_groups(&self, page: &[(JobId, Job)]) -> Vec<GroupKey> {
        self.gate.unknown(page.iter().map(|(_, job)| job))
    }

    /// Learns the standing of `groups` at `now` from their jobs that bear on the group rules
    /// ([`Job::bears_on_group`]) and, under a rate per group, how many of each one's logged
    /// grants still count, read in the claim's transaction.
    pub fn learn(
        &mut self,
        groups: &[GroupKey],
        jobs: &[(JobId, Job)],
        counting: &[(GroupKey, u64)],
        now: Timestamp,
    ) {
        self.gate.learn(groups, jobs, counting, now);
    }

    /// Whether the store must read the grants of the groups it meets (a rate per group).
    #[must_use]
    pub fn rates_groups(&self) -> bool {
        self.rates.1.is_some()
    }

    /// The groups whose jobs the next page need not read, and the jobs of those groups it
    /// must still read (see [`GroupGate::held_back`]).
    #[must_use]
    pub fn held_back(&self) -> (Vec<&GroupKey>, Vec<&JobId>) {
        self.gate.held_back()
    }

    /// Gives the `n`th lease the `n`th token (a lease past the last keeps the page's term's).
    #[must_use]
    pub fn with_tokens(mut self, tokens: Vec<lease_domain::TokenDigest>) -> Self {
        self.tokens = tokens;
        self
    }

    /// How many candidates the next page should read, or `None` when the loop is over.
    #[must_use]
    pub fn want(&self) -> Option<usize> {
        if self.over {
            return None;
        }
        Some(
            (self.limit - self.leases.len())
                .saturating_add(self.skipped.len())
                .max(1),
        )
    }

    /// Decides a page of candidates read with [`ClaimNextLoop::want`] (in claim order, at
    /// `term`), and returns the jobs to write: those leased and those buried, in page order.
    pub fn page(&mut self, term: LeaseTerm, candidates: Vec<(JobId, Job)>) -> Vec<(JobId, Job)> {
        let asked = self.want().unwrap_or(0);
        let read = candidates.len();
        let mut writes = Vec::new();
        let mut progressed = false;
        for (id, job) in candidates {
            if self.is_full() {
                break;
            }
            match self.decide(term, id, &job) {
                Decided::Wrote(write, _) => {
                    writes.push(write);
                    progressed = true;
                }
                Decided::Skipped(new) => progressed |= new,
            }
        }
        self.over = self.is_full() || read < asked || !progressed;
        writes
    }

    /// Whether the queue serves its groups in turn ([`lease_domain::Turn`]): the store then
    /// offers the candidates without a group first, then each group's on its turn, with
    /// [`ClaimNextLoop::offer`], instead of reading pages.
    #[must_use]
    pub fn is_fair(&self) -> bool {
        self.fair
    }

    /// Whether the claim has all the leases it may take.
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.leases.len() >= self.limit
    }

    /// What a fair claim may take from `group` on its turn (learn its standing first when
    /// [`ClaimNextLoop::must_learn`] says so).
    #[must_use]
    pub fn group_turn(&self, group: &GroupKey) -> GroupTurn<'_> {
        self.gate.turn(group)
    }

    /// Whether the store must read the standing of `group` ([`ClaimNextLoop::learn`]) before
    /// offering its jobs.
    #[must_use]
    pub fn must_learn(&self, group: &GroupKey) -> bool {
        self.gate.must_learn(group)
    }

    /// Decides candidates offered on a fair claim's turn (in claim order, at `term`): leases
    /// or buries each in order while the claim wants leases and the group rules admit them.
    /// Returns the jobs to write (those leased and those buried) and how many it leased.
    pub fn offer(
        &mut self,
        term: LeaseTerm,
        candidates: Vec<(JobId, Job)>,
    ) -> (Vec<(JobId, Job)>, usize) {
        let mut writes = Vec::new();
        let mut leased = 0;
        for (id, job) in candidates {
            if self.is_full() {
                break;
            }
            if let Decided::Wrote(write, lease) = self.decide(term, id, &job) {
                writes.push(write);
                leased += usize::from(lease);
            }
        }
        (writes, leased)
    }

    /// Decides one candidate: leased or buried (the row to write, and whether it was a lease),
    /// or skipped (and whether it was skipped for the first time).
    fn decide(&mut self, term: LeaseTerm, id: JobId, job: &Job) -> Decided {
        let term = match self.tokens.get(self.leases.len()) {
            Some(token) => term.with_token(*token),
            None => term,
        };
        if !self.gate.admits(&id, job) {
            return Decided::Skipped(self.skipped.insert(id));
        }
        match decide_claim_next(job, &self.owner, term) {
            NextDecision::Lease(next) => {
                self.gate.leased(job.group.as_ref());
                crate::observe::leased_next(job, term.now());
                self.leases.push(Lease {
                    job: id.clone(),
                    now: term.now(),
                    fence: next.fence,
                    until: next.until,
                    attempt: next.attempts,
                    payload: next.payload.clone(),
                    timeout: next.timeout.or(self.timeout),
                    group: next.group.clone(),
                });
                Decided::Wrote((id, next), true)
            }
            NextDecision::Bury(next) => {
                self.gate.buried(job.group.as_ref());
                self.buried.push((id.clone(), next.updated));
                Decided::Wrote((id, next), false)
            }
            NextDecision::Skip => Decided::Skipped(self.skipped.insert(id)),
        }
    }

    /// The jobs this claim buried (out of attempts, now dead), each with the time it was
    /// buried: a store settles the jobs waiting on each before it commits.
    #[must_use]
    pub fn buried(&self) -> &[(JobId, Option<lease_domain::Timestamp>)] {
        &self.buried
    }

    /// The leases handed out, in claim order.
    #[must_use]
    pub fn into_leases(self) -> Vec<Lease> {
        self.leases
    }
}

#[cfg(test)]
mod tests {
    use lease_domain::Fence;

    use super::*;

    fn term(now: f64) -> LeaseTerm {
        LeaseTerm::new(now, 10.0).unwrap()
    }

    fn due(id: &str) -> (JobId, Job) {
        (JobId::new(id).unwrap(), Job::new())
    }

    fn exhausted(id: &str) -> (JobId, Job) {
        let job = Job {
            fence: Fence::MAX,
            ..Job::new()
        };
        (JobId::new(id).unwrap(), job)
    }

    /// Runs the loop over a candidate list that, like a store's query, drops leased and
    /// buried jobs and keeps skipped ones; returns the leased ids and the pages read.
    fn run(mut jobs: Vec<(JobId, Job)>, limit: usize) -> (Vec<String>, usize) {
        let mut next = ClaimNextLoop::new(&Owner::new("w").unwrap(), limit);
        let mut pages = 0;
        while let Some(want) = next.want() {
            pages += 1;
            let page: Vec<_> = jobs.iter().take(want).cloned().collect();
            for (id, _) in next.page(term(100.0), page) {
                jobs.retain(|(j, _)| *j != id);
            }
        }
        let leased = next
            .into_leases()
            .into_iter()
            .map(|l| l.job.as_str().to_owned())
            .collect();
        (leased, pages)
    }

    #[test]
    fn a_skipped_head_does_not_hide_the_jobs_behind_it() {
        let (leased, pages) = run(vec![exhausted("a"), due("b"), due("c")], 1);
        assert_eq!(leased, ["b"]);
        assert_eq!(pages, 2, "the second page reads past the skipped head");
    }

    #[test]
    fn the_loop_stops_at_the_limit_and_when_the_candidates_run_out() {
        assert_eq!(
            run(vec![due("a"), due("b"), due("c")], 2),
            (vec!["a".into(), "b".into()], 1)
        );
        let (leased, pages) = run(vec![due("a")], 5);
        assert_eq!((leased, pages), (vec!["a".to_owned()], 1));
        assert_eq!(run(vec![exhausted("a"), exhausted("b")], 1), (vec![], 3));
        assert_eq!(run(vec![due("a")], 0), (vec![], 0));
    }

    #[test]
    fn a_page_that_repeats_only_skipped_rows_ends_the_loop() {
        // A store that ignores `want` and returns the same skipped row forever.
        let mut next = ClaimNextLoop::new(&Owner::new("w").unwrap(), 3);
        let mut pages = 0;
        while let Some(want) = next.want() {
            pages += 1;
            let page = vec![exhausted("a"); want];
            assert!(next.page(term(1.0), page).is_empty());
        }
        assert_eq!(pages, 2);
    }
}
