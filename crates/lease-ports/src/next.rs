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
    ClaimKey, Grant, GroupGate, GroupKey, GroupTurn, Job, JobId, LeaseTerm, NextDecision, Owner,
    QueueSettings, Rate, Timestamp, Ttl, decide_claim_next,
};

use crate::Lease;

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

/// The candidates of one group (or of the jobs without one) read so far.
#[derive(Debug, Default)]
struct Stream {
    buffered: VecDeque<(LeaseTerm, Candidate)>,
    skipped: HashSet<JobId>,
    done: bool,
    /// Only these jobs (an ordered group's started work), read once.
    only: Option<Vec<JobId>>,
    /// The group's head, as the walk met it.
    head: Option<ClaimKey>,
    /// Whether the head is at the group's first candidate (so at its first ready job).
    exact: bool,
    /// Whether the walk leased or buried one of its jobs.
    touched: bool,
}

impl Stream {
    fn at(head: ClaimKey) -> Self {
        Self {
            head: Some(head),
            ..Self::default()
        }
    }

    /// Whether the store's head of the group is where it should be and stays there: the
    /// walk need not have it moved.
    fn head_stays(&self) -> bool {
        self.exact && !self.touched
    }

    fn only(ids: Vec<JobId>) -> Self {
        Self {
            only: Some(ids),
            ..Self::default()
        }
    }

    fn needs_read(&self) -> bool {
        self.buffered.is_empty() && !self.done
    }

    fn read(&self, group: Option<&GroupKey>, remaining: usize) -> Read {
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
    fn want(&self, remaining: usize) -> usize {
        remaining.max(1).saturating_add(self.skipped.len())
    }

    /// Takes the answer to [`Stream::read`] asked with `remaining`.
    fn answered(&mut self, remaining: usize, term: LeaseTerm, mut read: Vec<Candidate>) {
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

    fn front(&self) -> Option<ClaimKey> {
        self.buffered.front().map(|(_, c)| c.key())
    }
}

/// The walk by heads: the jobs without a group merged with the groups met in head order.
#[derive(Debug)]
struct Merge {
    ungrouped: Stream,
    groups: HashMap<GroupKey, Stream>,
    heads: VecDeque<Head>,
    heads_done: bool,
    heads_want: usize,
    /// The key of the last head read: every head not read yet is after it.
    heads_floor: Option<ClaimKey>,
    /// Every group met (the walk reads its jobs, or passed it).
    met: HashSet<GroupKey>,
    /// The groups met and passed (held back when met).
    passed: HashSet<GroupKey>,
    /// The first due jobs of groups not met yet, read with their heads.
    due: HashMap<GroupKey, (LeaseTerm, usize, Vec<Candidate>)>,
    asked: Option<Asked>,
    /// Whether the walk handed out [`Effect::RepairHeads`].
    repaired: bool,
}

/// Which read of a [`Merge`] an answer is for.
#[derive(Debug, Clone)]
enum Asked {
    Ungrouped(usize),
    Group(GroupKey, usize),
    Heads,
    Standing(Vec<GroupKey>),
    Many(Vec<Asked>),
}

/// Where the next candidate of a [`Merge`] comes from.
enum Front {
    Ungrouped,
    Group(GroupKey),
    Head,
}

/// The fair walk.
#[derive(Debug)]
struct Fair {
    phase: Phase,
    after: Option<(u64, GroupKey)>,
}

#[derive(Debug)]
enum Phase {
    /// Offering the jobs without a group.
    Ungrouped,
    /// Looking for the next turn.
    Turns,
    /// Reading a group's standing before its turn.
    Learn(GroupKey),
    /// A group's turn.
    Group {
        group: GroupKey,
        only: Option<Vec<JobId>>,
        leased: usize,
        found: bool,
        /// The last read left nothing to decide: the turn ends.
        over: bool,
    },
    Over,
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

    /// The next step of the walk by heads: the candidate first in claim order among the jobs
    /// without a group, the groups met so far and the next head is decided (a head's group is
    /// met: its standing read, and passed if it is held back), until the claim is full or no
    /// candidate is left.
    fn merge_step(&mut self, m: &mut Merge) -> Option<Read> {
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

    fn merge_answer(&mut self, m: &mut Merge, answer: Answer) -> Result<(), crate::StoreError> {
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

    /// The next step of a fair walk ([`lease_domain::Turn`]): the due jobs without a group
    /// first, then each group's on its turn, the group served least recently first, one lease
    /// a turn; each lease moves its group behind every other, and a group found with no
    /// candidate loses its turn when it has no unfinished job.
    fn fair_step(&mut self, fair: &mut Fair) -> Option<Read> {
        loop {
            if self.is_full() && !matches!(fair.phase, Phase::Group { .. }) {
                fair.phase = Phase::Over;
            }
            match &mut fair.phase {
                Phase::Over => return None,
                Phase::Ungrouped => {
                    return Some(Read::Due {
                        group: None,
                        want: self.limit - self.leases.len(),
                    });
                }
                Phase::Turns => {
                    return Some(Read::Turn {
                        after: fair.after.clone(),
                    });
                }
                Phase::Learn(group) => return Some(Read::Standing(vec![group.clone()])),
                Phase::Group {
                    group,
                    only,
                    leased,
                    found,
                    over,
                } => {
                    if !*over && *leased == 0 && !self.is_full() {
                        return Some(match only {
                            Some(ids) => Read::Jobs(ids.clone()),
                            None => Read::Due {
                                group: Some(group.clone()),
                                want: 1,
                            },
                        });
                    }
                    if *leased > 0 {
                        self.effects.push(Effect::ServeTurn(group.clone()));
                    } else if !*found {
                        self.effects.push(Effect::DropTurn(group.clone()));
                    }
                    fair.phase = Phase::Turns;
                }
            }
        }
    }

    fn fair_answer(&mut self, fair: &mut Fair, answer: Answer) -> Result<(), crate::StoreError> {
        match (&mut fair.phase, answer) {
            (Phase::Ungrouped, Answer::Candidates(term, read)) => {
                self.term = term;
                if !self.offer(term, read, usize::MAX) {
                    fair.phase = Phase::Turns;
                }
            }
            (Phase::Turns, Answer::Turn(turn)) => match turn {
                None => fair.phase = Phase::Over,
                Some(turn) => {
                    let group = turn.1.clone();
                    fair.after = Some(turn);
                    fair.phase = if self.gate.must_learn(&group) {
                        Phase::Learn(group)
                    } else {
                        self.enter_turn(group)
                    };
                }
            },
            (Phase::Learn(group), Answer::Standing { bearing, counting }) => {
                let group = group.clone();
                self.gate.learn(
                    std::slice::from_ref(&group),
                    &bearing,
                    &counting,
                    self.term.now(),
                );
                fair.phase = self.enter_turn(group);
            }
            (
                Phase::Group {
                    only,
                    leased,
                    found,
                    over,
                    ..
                },
                Answer::Candidates(term, mut read),
            ) => {
                self.term = term;
                if only.is_some() {
                    read.retain(|c| c.job.is_claim_candidate(term.now()));
                    read.sort_by_key(Candidate::key);
                }
                *found |= !read.is_empty();
                let before = self.leases.len();
                // One lease a turn.
                *over = !self.offer(term, read, 1);
                *leased += self.leases.len() - before;
            }
            (phase, other) => {
                return Err(wrong_answer(&format!("the answer in {phase:?}"), &other));
            }
        }
        Ok(())
    }

    /// What a fair walk does on `group`'s turn.
    fn enter_turn(&self, group: GroupKey) -> Phase {
        let only = match self.gate.turn(&group) {
            GroupTurn::Closed => return Phase::Turns,
            GroupTurn::Only(ids) => Some(ids.into_iter().cloned().collect()),
            GroupTurn::Open => None,
        };
        Phase::Group {
            group,
            only,
            leased: 0,
            found: false,
            over: false,
        }
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
mod tests {
    use lease_domain::{Concurrency, Ended, Fence, Timestamp};
    use proptest::prelude::*;

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

    /// Runs a plain walk over a candidate list that, like a store's query, drops leased and
    /// buried jobs and keeps skipped ones; returns the leased ids and the pages read.
    fn run(mut jobs: Vec<(JobId, Job)>, limit: usize) -> (Vec<String>, usize) {
        let mut walk = ClaimWalk::new(&Owner::new("w").unwrap(), limit, term(100.0));
        let mut pages = 0;
        while let Some(read) = walk.next_read() {
            let Read::Page { want } = read else {
                panic!("a plain walk asked for {read:?}")
            };
            pages += 1;
            let page: Vec<_> = jobs.iter().take(want).cloned().collect();
            walk.answer(Answer::Page(term(100.0), page)).unwrap();
            for effect in walk.take_effects() {
                let Effect::Job(id, ..) = effect else {
                    panic!("a plain walk wrote {effect:?}")
                };
                jobs.retain(|(j, _)| *j != id);
            }
        }
        let leased = walk
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
    fn the_walk_stops_at_the_limit_and_when_the_candidates_run_out() {
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
    fn a_page_that_repeats_only_skipped_rows_ends_the_walk() {
        // A store that ignores `want` and returns the same skipped row forever.
        let mut walk = ClaimWalk::new(&Owner::new("w").unwrap(), 3, term(1.0));
        let mut pages = 0;
        while let Some(Read::Page { want }) = walk.next_read() {
            pages += 1;
            let page = vec![exhausted("a"); want];
            walk.answer(Answer::Page(term(1.0), page)).unwrap();
            assert!(walk.take_effects().is_empty());
        }
        assert_eq!(pages, 2);
    }

    /// A store in a vector, answering the walk's reads as the stores do, and counting the
    /// job rows it read.
    struct Toy {
        jobs: Vec<(JobId, Job, u64)>,
        now: Timestamp,
        rows_read: usize,
        /// Reads the walk asked for, reads sent together counted once.
        round_trips: usize,
        /// Whether heads come with their groups' standing ([`Answer::HeadsWithStanding`]).
        heads_with_standing: bool,
    }

    impl Toy {
        fn candidates(&self, group: Option<Option<&GroupKey>>) -> Vec<Candidate> {
            let mut found: Vec<Candidate> = self
                .jobs
                .iter()
                .filter(|(_, job, _)| job.is_claim_candidate(self.now))
                .filter(|(_, job, _)| group.is_none_or(|g| job.group.as_ref() == g))
                .map(|(id, job, seq)| Candidate {
                    id: id.clone(),
                    job: job.clone(),
                    seq: *seq,
                })
                .collect();
            found.sort_by_key(Candidate::key);
            found
        }

        fn bearing(&self, groups: &[GroupKey]) -> Vec<(JobId, Job)> {
            self.jobs
                .iter()
                .filter(|(_, job, _)| {
                    job.group.as_ref().is_some_and(|g| groups.contains(g))
                        && job.bears_on_group(self.now)
                })
                .map(|(id, job, _)| (id.clone(), job.clone()))
                .collect()
        }

        fn answer(&mut self, read: Read) -> Answer {
            let t = term(self.now.get());
            match read {
                Read::Page { want } => {
                    let page: Vec<_> = self.candidates(None).into_iter().take(want).collect();
                    self.rows_read += page.len();
                    Answer::Page(t, page.into_iter().map(|c| (c.id, c.job)).collect())
                }
                Read::Due { group, want } => {
                    let due: Vec<_> = self
                        .candidates(Some(group.as_ref()))
                        .into_iter()
                        .take(want)
                        .collect();
                    self.rows_read += due.len();
                    Answer::Candidates(t, due)
                }
                Read::Jobs(ids) => {
                    let found: Vec<_> = self
                        .candidates(None)
                        .into_iter()
                        .filter(|c| ids.contains(&c.id))
                        .collect();
                    self.rows_read += found.len();
                    Answer::Candidates(t, found)
                }
                Read::Heads { want, skip } => {
                    let mut heads: Vec<Head> = Vec::new();
                    for c in self.candidates(None) {
                        let Some(group) = &c.job.group else { continue };
                        if skip.contains(group) || heads.iter().any(|h| h.group == *group) {
                            continue;
                        }
                        heads.push(Head {
                            group: group.clone(),
                            key: c.key(),
                        });
                    }
                    heads.truncate(want);
                    if self.heads_with_standing {
                        let groups: Vec<GroupKey> = heads.iter().map(|h| h.group.clone()).collect();
                        // The first due job of each, as a store that reads them with the heads.
                        let due: Vec<Candidate> = groups
                            .iter()
                            .filter_map(|g| self.candidates(Some(Some(g))).into_iter().next())
                            .collect();
                        self.rows_read += due.len();
                        Answer::HeadsWithStanding {
                            heads,
                            bearing: self.bearing(&groups),
                            counting: Vec::new(),
                            due: Some((t, 1, due)),
                        }
                    } else {
                        Answer::Heads(heads)
                    }
                }
                Read::Standing(groups) => Answer::Standing {
                    bearing: self.bearing(&groups),
                    counting: Vec::new(),
                },
                Read::Turn { .. } => Answer::Turn(None),
                Read::Many(reads) => {
                    Answer::Many(reads.into_iter().map(|read| self.answer(read)).collect())
                }
            }
        }

        fn claim(&mut self, settings: &QueueSettings, limit: usize) -> Vec<String> {
            let claim = crate::ClaimNext::new(
                &QueueName::default(),
                &Owner::new("w").unwrap(),
                term(self.now.get()),
                limit,
            );
            let mut walk = ClaimWalk::in_queue(&claim, settings, 0, 0);
            while let Some(read) = walk.next_read() {
                self.round_trips += 1;
                self.write(walk.take_effects());
                let answer = self.answer(read);
                walk.answer(answer).unwrap();
            }
            self.write(walk.take_effects());
            walk.into_leases()
                .into_iter()
                .map(|l| l.job.as_str().to_owned())
                .collect()
        }

        fn write(&mut self, effects: Vec<Effect>) {
            for effect in effects {
                if let Effect::Job(id, job, _) = effect {
                    let row = self.jobs.iter_mut().find(|(j, _, _)| *j == id).unwrap();
                    row.1 = job;
                }
            }
        }
    }

    use lease_domain::QueueName;

    /// The claim as the group rules define it: every candidate in claim order, each leased
    /// when the gate (knowing every group's standing) admits it.
    fn reference(toy: &Toy, settings: &QueueSettings, limit: usize) -> Vec<String> {
        let now = toy.now;
        let mut gate = GroupGate::new(settings, now);
        let groups: Vec<GroupKey> = toy
            .jobs
            .iter()
            .filter_map(|(_, j, _)| j.group.clone())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let jobs: Vec<(JobId, Job)> = toy
            .jobs
            .iter()
            .map(|(id, job, _)| (id.clone(), job.clone()))
            .collect();
        gate.learn(&groups, &jobs, &[], now);
        let owner = Owner::new("w").unwrap();
        let mut leased = Vec::new();
        for c in toy.candidates(None) {
            if leased.len() >= limit {
                break;
            }
            if !gate.admits(&c.id, &c.job) {
                continue;
            }
            match decide_claim_next(&c.job, &owner, term(now.get())) {
                NextDecision::Lease(_) => {
                    gate.leased(c.job.group.as_ref());
                    leased.push(c.id.as_str().to_owned());
                }
                NextDecision::Bury(_) => gate.buried(c.job.group.as_ref()),
                NextDecision::Skip => {}
            }
        }
        leased
    }

    fn group(name: &str) -> GroupKey {
        GroupKey::new(name).unwrap()
    }

    #[test]
    fn a_held_group_is_passed_in_one_step_whatever_its_backlog() {
        let mut jobs = Vec::new();
        let running = Job {
            owner: Some(Owner::new("other").unwrap()),
            until: Timestamp::new(200.0).unwrap(),
            fence: Fence::new(1).unwrap(),
            attempts: 1,
            group: Some(group("big")),
            ..Job::new()
        };
        jobs.push((JobId::new("big-running").unwrap(), running, 0));
        for n in 1..=10_000 {
            let job = Job {
                group: Some(group("big")),
                ..Job::new()
            };
            jobs.push((JobId::new(format!("big-{n}")).unwrap(), job, n));
        }
        let small = Job {
            group: Some(group("small")),
            ..Job::new()
        };
        jobs.push((JobId::new("small-1").unwrap(), small, 20_000));
        let settings = QueueSettings {
            per_group: Concurrency::new(1),
            ..QueueSettings::default()
        };
        for heads_with_standing in [false, true] {
            let mut toy = Toy {
                jobs: jobs.clone(),
                now: Timestamp::new(100.0).unwrap(),
                rows_read: 0,
                round_trips: 0,
                heads_with_standing,
            };
            assert_eq!(toy.claim(&settings, 1), ["small-1"]);
            assert!(toy.rows_read <= 2, "read {} job rows", toy.rows_read);
            // The jobs without a group and the heads together, the groups' standing and
            // small's jobs (unless they came with the heads).
            let expected = if heads_with_standing { 1 } else { 3 };
            assert_eq!(
                toy.round_trips, expected,
                "heads with standing: {heads_with_standing}"
            );
        }
    }

    fn job_strategy() -> impl Strategy<Value = (Option<u8>, i64, u8, u8, bool)> {
        // (group, priority, state, attempts, run_at later)
        (
            prop::option::of(0_u8..4),
            0_i64..3,
            0_u8..5,
            0_u8..3,
            any::<bool>(),
        )
    }

    fn toy_of(specs: &[(Option<u8>, i64, u8, u8, bool)]) -> Toy {
        let now = Timestamp::new(100.0).unwrap();
        let jobs = specs
            .iter()
            .enumerate()
            .map(|(n, (g, priority, state, attempts, later))| {
                let mut job = Job {
                    group: g.map(|g| group(&format!("g{g}"))),
                    priority: *priority,
                    max_attempts: 2,
                    attempts: u32::from(*attempts),
                    run_at: Timestamp::new(if *later { 150.0 } else { 50.0 + n as f64 }).ok(),
                    ..Job::new()
                };
                if job.attempts > 0 {
                    job.fence = Fence::new(u64::from(job.attempts)).unwrap();
                }
                match state {
                    0 => {
                        job.owner = Some(Owner::new("other").unwrap());
                        job.until = Timestamp::new(200.0).unwrap();
                        job.attempts = job.attempts.max(1);
                        job.fence = Fence::new(u64::from(job.attempts)).unwrap();
                    }
                    1 => job.ended = Some(Ended::Dead),
                    2 => job.done = true,
                    _ => {}
                }
                (JobId::new(format!("j{n:03}")).unwrap(), job, n as u64)
            })
            .collect();
        Toy {
            jobs,
            now,
            rows_read: 0,
            round_trips: 0,
            heads_with_standing: false,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn the_walk_by_heads_leases_what_claim_order_and_the_group_rules_say(
            specs in prop::collection::vec(job_strategy(), 0..40),
            per_group in prop::option::of(1_u32..3),
            ordered in any::<bool>(),
            paused in prop::option::of(0_u8..4),
            limit in 0_usize..6,
        ) {
            let mut settings = QueueSettings {
                per_group: per_group.and_then(Concurrency::new),
                ordered,
                ..QueueSettings::default()
            };
            if let Some(g) = paused {
                settings.paused_groups.insert(group(&format!("g{g}")), None);
            }
            let mut toy = toy_of(&specs);
            let expected = reference(&toy, &settings, limit);
            prop_assert_eq!(toy.claim(&settings, limit), expected.clone());
            // The same when the heads come with their groups' standing.
            let mut toy = toy_of(&specs);
            toy.heads_with_standing = true;
            prop_assert_eq!(toy.claim(&settings, limit), expected);
        }
    }
}
