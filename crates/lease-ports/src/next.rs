//! The claim engine: the one walk that decides what a `claim_next` takes, for every store.
//!
//! [`ClaimWalk`] is a step machine. It asks its store for the next read it needs ([`Read`]:
//! a page of candidates in claim order, one group's due jobs, the next group heads, a group's
//! standing, the next fair turn), decides each candidate with the domain's rules
//! ([`lease_domain::decide_claim_next`], [`GroupGate`], [`lease_domain::Turn`]) and hands back
//! what to write as [`Effect`] values. A store only answers reads with its own statements and
//! writes the effects; none keeps a loop of rules of its own, so a new queue rule is written
//! here once and every store follows it.
//!
//! It walks a queue in one of three ways:
//! - **plain** (no group rule is on): pages of the queue's candidates in claim order;
//! - **by heads** (a limit per group, ordered groups, a rate per group, or a paused group):
//!   the jobs without a group, merged in claim order with the groups met in the order of their
//!   heads ([`Read::Heads`]). A group is met once per claim: its standing is read, and a group
//!   held back (full, ordered and busy, paused, throttled, held by its handler) is passed in
//!   that one step, whatever its backlog. Only the groups it may lease from are read further;
//! - **fair** (the queue serves its groups in turn): the jobs without a group, then one lease
//!   per group on its turn ([`Read::Turn`]).

use std::collections::{HashMap, HashSet, VecDeque};

use lease_domain::{
    ClaimKey, Grant, GroupGate, GroupKey, Job, JobId, LeaseTerm, NextDecision, Owner,
    QueueSettings, Rate, Timestamp, Ttl, decide_claim_next,
};

use crate::Lease;

mod fair;
mod heads;

use fair::{Fair, Phase};
use heads::{Merge, Stream};

/// A candidate a store read for the walk: a job and its enqueue order (`seq`), which places it
/// in claim order among the candidates of other reads ([`ClaimKey`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The job's id.
    pub id: JobId,
    /// The job as read.
    pub job: Job,
    /// Its enqueue order.
    pub seq: u64,
}

impl Candidate {
    fn key(&self) -> ClaimKey {
        ClaimKey::of(&self.job, self.seq)
    }
}

/// A group's head as a store keeps it: the claim key of the first of the group's ready jobs
/// (unfinished, held by no one), or one before it. A head is never after the group's first
/// candidate, so a claim that meets the groups in the order of their heads meets each in time.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    /// The group.
    pub group: GroupKey,
    /// Where its first ready job stands in claim order.
    pub key: ClaimKey,
}

/// What the walk asks its store to read next, inside the claim's transaction (after writing
/// the effects the walk has handed out so far: [`ClaimWalk::take_effects`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// A page of the queue's candidates ([`Job::is_claim_candidate`]) in claim order, at most
    /// `want`: answered with [`Answer::Page`].
    Page {
        /// How many.
        want: usize,
    },
    /// The candidates of one group (`None`: the jobs without a group), in claim order, at most
    /// `want`: answered with [`Answer::Candidates`]. A store that keeps heads may bring the
    /// group's head up to its first ready job here.
    Due {
        /// The group, or none.
        group: Option<GroupKey>,
        /// How many.
        want: usize,
    },
    /// These jobs (an ordered group's started work), in any order: answered with
    /// [`Answer::Candidates`] (the walk keeps the candidates among them, in claim order).
    Jobs(Vec<JobId>),
    /// The first `want` heads of the queue's groups in claim order, leaving out the groups
    /// `skip`: answered with [`Answer::Heads`].
    Heads {
        /// How many.
        want: usize,
        /// The groups already met.
        skip: Vec<GroupKey>,
    },
    /// The standing of these groups: their jobs that bear on the group rules
    /// ([`Job::bears_on_group`]) and, when [`ClaimWalk::rates_groups`], how many of each one's
    /// logged grants still count; answered with [`Answer::Standing`].
    Standing(Vec<GroupKey>),
    /// The next group's turn of a fair queue after `after` (served, group), in turn order:
    /// answered with [`Answer::Turn`].
    Turn {
        /// The turn visited last, or none.
        after: Option<(u64, GroupKey)>,
    },
    /// Reads that do not depend on each other (only [`Read::Due`], [`Read::Jobs`] and
    /// [`Read::Heads`]), which a store may send together: answered with [`Answer::Many`], one
    /// answer per read, in order.
    Many(Vec<Read>),
}

/// A store's answer to a [`Read`].
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// To [`Read::Page`]: the candidates, at the term of the store's clock reading.
    Page(LeaseTerm, Vec<(JobId, Job)>),
    /// To [`Read::Due`] and [`Read::Jobs`]: the jobs, at the term of the store's clock reading.
    Candidates(LeaseTerm, Vec<Candidate>),
    /// To [`Read::Heads`].
    Heads(Vec<Head>),
    /// To [`Read::Heads`], from a store that reads the standing of the heads' groups in the
    /// same statement: the heads, every job of their groups that bears on the group rules
    /// ([`Job::bears_on_group`]) and, when [`ClaimWalk::rates_groups`], how many of each
    /// one's logged grants still count. The walk learns the groups it had yet to learn from
    /// it and asks no [`Read::Standing`] for them.
    HeadsWithStanding {
        /// The heads.
        heads: Vec<Head>,
        /// The heads' groups' jobs that bear on the group rules.
        bearing: Vec<(JobId, Job)>,
        /// How many logged grants of each of the heads' groups still count.
        counting: Vec<(GroupKey, u64)>,
        /// The first due jobs of each of the heads' groups, read as [`Read::Due`] reads them,
        /// when the store read them too: the term of its clock reading, how many it read at
        /// most of each group, and the jobs. The walk takes them as a group's first read
        /// when it opens the group.
        due: Option<(LeaseTerm, usize, Vec<Candidate>)>,
    },
    /// To [`Read::Standing`].
    Standing {
        /// The groups' jobs that bear on the group rules.
        bearing: Vec<(JobId, Job)>,
        /// How many logged grants of each group still count (under a rate per group).
        counting: Vec<(GroupKey, u64)>,
    },
    /// To [`Read::Turn`]: the turn (served, group), if one is left.
    Turn(Option<(u64, GroupKey)>),
    /// To [`Read::Many`]: one answer per read, in order.
    Many(Vec<Answer>),
}

/// What the walk decided to write, in order.
// Almost every effect is a job's row, taken apart at once: boxing it would cost an
// allocation per lease for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// A job leased or buried (out of attempts): its row as decided, and the attempt that
    /// ended when it did (an expired lease's). A buried job's waiting children are settled by
    /// the store before it commits ([`ClaimWalk::buried`]).
    Job(JobId, Job, Option<lease_domain::Attempt>),
    /// A fair queue served this group: it goes behind every other ([`lease_domain::Turn`]).
    ServeTurn(GroupKey),
    /// A fair queue found no candidate of this group on its turn: it loses its turn if it has
    /// no unfinished job left.
    DropTurn(GroupKey),
    /// The walk by heads read from these groups and cannot tell their heads are where they
    /// belong (it took their first job, or found their head before their first candidate): a
    /// store that keeps heads sets each one's head to the group's first ready job (removing
    /// it when there is none), so a head a lease left behind moves on. A group the walk passed
    /// (held back) keeps its head, which is never after its first ready job. The last effect
    /// of a walk by heads.
    RepairHeads(Vec<GroupKey>),
}

/// One `claim_next` call: answer its reads until [`ClaimWalk::next_read`] says it is over,
/// writing its effects before each read and at the end; then log its grants and take the
/// leases.
#[derive(Debug)]
pub struct ClaimWalk {
    owner: Owner,
    limit: usize,
    /// The queue's default timeout of an attempt.
    timeout: Option<Ttl>,
    tokens: Vec<lease_domain::TokenDigest>,
    leases: Vec<Lease>,
    /// The jobs buried, with when.
    buried: Vec<(JobId, Option<Timestamp>)>,
    /// The queue's group rules, with the standing of each group met so far.
    gate: GroupGate,
    /// The queue's rate and its groups' rate, whose grants this claim logs.
    rates: (Option<Rate>, Option<Rate>),
    /// The term of the last answer (the claim's until one comes).
    term: LeaseTerm,
    effects: Vec<Effect>,
    way: Way,
}

/// How the walk goes through the queue.
#[derive(Debug)]
enum Way {
    Plain(Plain),
    Heads(Box<Merge>),
    Fair(Fair),
}

/// The plain walk: pages of candidates.
#[derive(Debug, Default)]
struct Plain {
    skipped: HashSet<JobId>,
    over: bool,
}

/// What [`ClaimWalk`] did with one candidate.
// Returned once per candidate and taken apart at once: boxing the row would cost an
// allocation per lease for nothing.
#[allow(clippy::large_enum_variant)]
enum Decided {
    /// Leased or buried: the row to write.
    Wrote((JobId, Job, Option<lease_domain::Attempt>)),
    /// Left alone (it stays a candidate).
    Skipped(JobId),
}

impl ClaimWalk {
    /// The walk of `claim` over plain pages, with no queue settings: leasing up to its limit
    /// of jobs to its owner, the `n`th lease with its `n`th token when it has tokens.
    #[must_use]
    pub fn of(claim: &crate::ClaimNext) -> Self {
        Self::new(&claim.owner, claim.limit, claim.term).with_tokens(claim.tokens.clone())
    }

    /// The walk of `claim` in a queue with `settings`, `held` of whose leases are live at the
    /// claim's now and `counting` of whose logged grants still count against its own rate
    /// (read when it has one: [`QueueSettings::limits_rate`]): it leases no more than
    /// [`QueueSettings::allowance`] allows (none while the queue is paused) and the queue's
    /// rate leaves room for, each lease carries its job's timeout, else the queue's, and it
    /// walks by heads when a group rule is on, in turn when the queue is fair.
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
        let mut walk = Self::new(&claim.owner, limit, claim.term).with_tokens(claim.tokens.clone());
        walk.timeout = settings.timeout;
        walk.gate = GroupGate::new(settings, now);
        walk.rates = (settings.rate, settings.rate_per_group);
        if limit == 0 {
            return walk;
        }
        walk.way = if settings.fair {
            Way::Fair(Fair {
                phase: Phase::Ungrouped,
                after: None,
            })
        } else if walk.gate.is_active() {
            Way::Heads(Box::new(Merge {
                ungrouped: Stream::default(),
                groups: HashMap::new(),
                heads: VecDeque::new(),
                heads_done: false,
                heads_want: limit.saturating_add(1),
                heads_floor: None,
                met: HashSet::new(),
                passed: HashSet::new(),
                due: HashMap::new(),
                asked: None,
                repaired: false,
            }))
        } else {
            Way::Plain(Plain::default())
        };
        walk
    }

    /// A plain walk leasing up to `limit` jobs to `owner` over `term`.
    #[must_use]
    pub fn new(owner: &Owner, limit: usize, term: LeaseTerm) -> Self {
        Self {
            timeout: None,
            tokens: Vec::new(),
            owner: owner.clone(),
            limit,
            leases: Vec::new(),
            buried: Vec::new(),
            gate: GroupGate::default(),
            rates: (None, None),
            term,
            effects: Vec::new(),
            way: Way::Plain(Plain {
                over: limit == 0,
                ..Plain::default()
            }),
        }
    }

    /// Gives the `n`th lease the `n`th token (a lease past the last keeps the answer's term's).
    #[must_use]
    pub fn with_tokens(mut self, tokens: Vec<lease_domain::TokenDigest>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Whether the walk is by heads: a store that keeps heads may then skip work the plain
    /// walk needs (the first page it reads ahead is not asked for).
    #[must_use]
    pub fn by_heads(&self) -> bool {
        matches!(self.way, Way::Heads(_))
    }

    /// Whether the store must read the grants of the groups whose standing it reads (a rate
    /// per group).
    #[must_use]
    pub fn rates_groups(&self) -> bool {
        self.rates.1.is_some()
    }

    /// Whether the claim has all the leases it may take.
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.leases.len() >= self.limit
    }

    /// How many leases the walk has handed out so far.
    #[must_use]
    pub fn leased(&self) -> usize {
        self.leases.len()
    }

    /// The term the walk decides at now: the last answer's (the claim's before any).
    #[must_use]
    pub fn term(&self) -> LeaseTerm {
        self.term
    }

    /// The next read the walk needs, or `None` when the claim is decided. Decides everything
    /// it can before asking; write [`ClaimWalk::take_effects`] before reading.
    pub fn next_read(&mut self) -> Option<Read> {
        match std::mem::replace(&mut self.way, Way::Plain(Plain::default())) {
            Way::Plain(plain) => {
                let read = (!plain.over && !self.is_full()).then(|| Read::Page {
                    want: self.plain_want(&plain),
                });
                self.way = Way::Plain(plain);
                read
            }
            Way::Heads(mut merge) => {
                let read = self.merge_step(&mut merge);
                if read.is_none() && !merge.repaired {
                    merge.repaired = true;
                    // Every group the walk read from but those whose head is at their first
                    // candidate and stays there (one whose head a lease moved, or was not at
                    // its first candidate, is set). A group passed keeps its head: passing it
                    // changed none of its jobs, and a head is never after its group's first
                    // ready job.
                    let mut moved: Vec<GroupKey> = merge
                        .met
                        .iter()
                        .filter(|g| !merge.passed.contains(*g))
                        .filter(|g| !merge.groups.get(*g).is_some_and(Stream::head_stays))
                        .cloned()
                        .collect();
                    if !moved.is_empty() {
                        moved.sort();
                        self.effects.push(Effect::RepairHeads(moved));
                    }
                }
                self.way = Way::Heads(merge);
                read
            }
            Way::Fair(mut fair) => {
                let read = self.fair_step(&mut fair);
                self.way = Way::Fair(fair);
                read
            }
        }
    }

    /// Takes the store's answer to the read [`ClaimWalk::next_read`] asked for.
    ///
    /// # Errors
    /// When the answer is not of the kind the read asks for (a store's bug), naming both.
    pub fn answer(&mut self, answer: Answer) -> Result<(), crate::StoreError> {
        match std::mem::replace(&mut self.way, Way::Plain(Plain::default())) {
            Way::Plain(mut plain) => {
                let result = match answer {
                    Answer::Page(term, page) => {
                        let writes = self.plain_page(&mut plain, term, page);
                        self.effects.extend(
                            writes
                                .into_iter()
                                .map(|(id, job, ended)| Effect::Job(id, job, ended)),
                        );
                        Ok(())
                    }
                    other => Err(wrong_answer("a page", &other)),
                };
                self.way = Way::Plain(plain);
                result
            }
            Way::Heads(mut merge) => {
                let result = self.merge_answer(&mut merge, answer);
                self.way = Way::Heads(merge);
                result
            }
            Way::Fair(mut fair) => {
                let result = self.fair_answer(&mut fair, answer);
                self.way = Way::Fair(fair);
                result
            }
        }
    }

    /// The effects decided since the last call, in order: write them before the next read and
    /// before the claim commits.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Whether effects wait to be written.
    #[must_use]
    pub fn has_effects(&self) -> bool {
        !self.effects.is_empty()
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

    /// The jobs this claim buried (out of attempts, now dead), each with the time it was
    /// buried: a store settles the jobs waiting on each before it commits.
    #[must_use]
    pub fn buried(&self) -> &[(JobId, Option<Timestamp>)] {
        &self.buried
    }

    /// The leases handed out, in claim order.
    #[must_use]
    pub fn into_leases(self) -> Vec<Lease> {
        self.leases
    }

    /// Decides one plain page of candidates (in claim order, at `term`) as the walk would,
    /// returning the rows to write: how a store checks a claim it decided in one statement
    /// (PostgreSQL's `step`) against the walk.
    pub fn page(&mut self, term: LeaseTerm, candidates: Vec<(JobId, Job)>) -> Vec<(JobId, Job)> {
        let mut plain = Plain::default();
        self.plain_page(&mut plain, term, candidates)
            .into_iter()
            .map(|(id, job, _)| (id, job))
            .collect()
    }

    fn plain_want(&self, plain: &Plain) -> usize {
        (self.limit - self.leases.len())
            .saturating_add(plain.skipped.len())
            .max(1)
    }

    /// The plain page rule: a page asks for as many candidates as leases are still wanted,
    /// plus one for each candidate skipped (a skipped job stays a candidate, so the next page
    /// must reach past it). After a page the walk stops when it has `limit` leases, when the
    /// page came back shorter than asked (no candidate is left), or when the page changed
    /// nothing and showed no candidate it had not seen (another page would read the same
    /// rows). Each page that goes on leases or buries a job (which leaves the candidates) or
    /// sees a new one, so the walk ends.
    fn plain_page(
        &mut self,
        plain: &mut Plain,
        term: LeaseTerm,
        candidates: Vec<(JobId, Job)>,
    ) -> Vec<(JobId, Job, Option<lease_domain::Attempt>)> {
        self.term = term;
        let asked = self.plain_want(plain);
        let read = candidates.len();
        let mut writes = Vec::new();
        let mut progressed = false;
        for (id, job) in candidates {
            if self.is_full() {
                break;
            }
            match self.decide(term, id, &job) {
                Decided::Wrote(write) => {
                    writes.push(write);
                    progressed = true;
                }
                Decided::Skipped(id) => progressed |= plain.skipped.insert(id),
            }
        }
        plain.over = self.is_full() || read < asked || !progressed;
        writes
    }

    /// Decides candidates in order while the claim wants leases, taking at most `most` of
    /// them; says whether it wrote (a lease or a burial).
    fn offer(&mut self, term: LeaseTerm, candidates: Vec<Candidate>, most: usize) -> bool {
        let mut wrote = false;
        let until = self.leases.len().saturating_add(most);
        for candidate in candidates {
            if self.is_full() || self.leases.len() >= until {
                break;
            }
            wrote |= self.decide_into(term, candidate).is_none();
        }
        wrote
    }

    /// Decides one candidate, keeping what it wrote as an effect; the id back when it was
    /// skipped.
    fn decide_into(&mut self, term: LeaseTerm, candidate: Candidate) -> Option<JobId> {
        match self.decide(term, candidate.id, &candidate.job) {
            Decided::Wrote((id, job, ended)) => {
                self.effects.push(Effect::Job(id, job, ended));
                None
            }
            Decided::Skipped(id) => Some(id),
        }
    }

    /// Decides one candidate: leased or buried (the row to write, and whether it was a lease),
    /// or skipped.
    fn decide(&mut self, term: LeaseTerm, id: JobId, job: &Job) -> Decided {
        let term = match self.tokens.get(self.leases.len()) {
            Some(token) => term.with_token(*token),
            None => term,
        };
        if !self.gate.admits(&id, job) {
            return Decided::Skipped(id);
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
                let ended = job.ended_attempt(None, &next);
                Decided::Wrote((id, next, ended))
            }
            NextDecision::Bury(next) => {
                self.gate.buried(job.group.as_ref());
                self.buried.push((id.clone(), next.updated));
                let ended = job.ended_attempt(None, &next);
                Decided::Wrote((id, next, ended))
            }
            NextDecision::Skip => Decided::Skipped(id),
        }
    }
}

/// The most heads one read asks for.
const MAX_HEADS: usize = 1024;

fn wrong_answer(asked: &str, answer: &Answer) -> crate::StoreError {
    let kind = match answer {
        Answer::Page(..) => "a page",
        Answer::Candidates(..) => "candidates",
        Answer::Heads(_) | Answer::HeadsWithStanding { .. } => "heads",
        Answer::Standing { .. } => "a standing",
        Answer::Turn(_) => "a turn",
        Answer::Many(_) => "several answers",
    };
    crate::StoreError::Corrupt(
        format!("the claim walk asked for {asked} and was answered with {kind}").into(),
    )
}

#[cfg(test)]
mod tests;
