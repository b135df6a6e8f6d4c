//! The in-memory reference store: the lease and queue rules over a map behind a mutex.
//!
//! It is the model the SQLite store is checked against; it keeps nothing across restarts.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use lease_domain::{Change, CheckpointName, KeptCheckpoint, KeyId, KeyRefused, decide_new_key};
use lease_domain::{
    ClaimKey, ClockMode, Command, EnqueueSpec, Epoch, Fence, GroupKey, InputError, Job, JobId,
    LeaseTerm, Outcome, QueueChange, QueueName, QueueSettings, Schedule, ScheduleName,
    ScheduleSpec, Status, Timestamp, Turn, Waiting, check_workflow, checkpoint_fits, decide_child,
    decide_put_schedule, decide_queue_change, is_purgeable, propagate,
};

use crate::keys::{KeyRecord, KeyStore, live_scopes};
use crate::next::{Answer, Candidate, ClaimWalk, Effect, Head, Read};
use crate::transfer::{Imported, Snapshot, TargetView, plan_import};
use crate::{
    Applied, ClaimNext, JobRecord, Lease, LeaseStore, ListFilter, StatsRow, StoreError, outcome_as,
    tally,
};

#[derive(Debug, Default)]
struct Jobs {
    /// Each job with its enqueue order.
    jobs: HashMap<JobId, (Job, u64)>,
    /// The fence each purged id had, until it is enqueued again.
    purged: HashMap<JobId, Fence>,
    next_seq: u64,
    /// The queues that have settings.
    queues: BTreeMap<QueueName, QueueSettings>,
    /// The schedules.
    schedules: BTreeMap<ScheduleName, Schedule>,
    /// The grants logged against each rate-limited queue's rates, until they expire.
    grants: BTreeMap<QueueName, Vec<lease_domain::Grant>>,
    /// The turn of each group with an unfinished job, per queue: the number of the lease that
    /// last served it (0: never), as fair claims keep them (`lease_domain::Turn`).
    turns: BTreeMap<QueueName, BTreeMap<GroupKey, u64>>,
    /// The checkpoints each job keeps, by name.
    checkpoints: HashMap<JobId, BTreeMap<CheckpointName, KeptCheckpoint>>,
    /// The ended attempts each job keeps, by fence.
    attempts: HashMap<JobId, BTreeMap<Fence, lease_domain::Attempt>>,
    /// The trace context each job was enqueued with (`Command::sets_trace`).
    traces: HashMap<JobId, lease_domain::TraceContext>,
    /// The store's epoch, in which every claim hands out its fence.
    epoch: Epoch,
}

impl Jobs {
    /// The queues that have settings, as owned pairs.
    fn queue_settings(&self) -> impl Iterator<Item = (QueueName, QueueSettings)> + '_ {
        self.queues.iter().map(|(q, s)| (q.clone(), s.clone()))
    }

    /// Writes the changes of one decision on job `id`, in their order, judging the job (if
    /// it is) at the end.
    fn write_all(&mut self, id: &JobId, changes: Vec<Change>) -> Result<(), StoreError> {
        let mut judged = Vec::new();
        for change in changes {
            self.write_change(id, change, &mut judged)?;
        }
        for id in judged {
            self.judge(&id);
        }
        Ok(())
    }

    /// Writes one change of a decision on job `id` (the memory store's arm of every
    /// [`Change`]); a job to judge goes to `judged`, judged once its batch is written. A
    /// checkpoint that does not fit is refused before anything is written.
    fn write_change(
        &mut self,
        id: &JobId,
        change: Change,
        judged: &mut Vec<JobId>,
    ) -> Result<(), StoreError> {
        match change {
            Change::Queue(queue, change) => {
                let settings = self.queues.get(&queue).cloned().unwrap_or_default();
                let next = decide_queue_change(&settings, change);
                if next.is_default() {
                    self.queues.remove(&queue);
                } else {
                    self.queues.insert(queue, next);
                }
            }
            Change::Checkpoint(checkpoint, fence, at) => {
                let kept = self.checkpoints.entry(id.clone()).or_default();
                checkpoint_fits(id, kept.len(), kept.contains_key(&checkpoint.name))
                    .map_err(|refused| StoreError::InvalidInput(refused.into()))?;
                kept.insert(
                    checkpoint.name.clone(),
                    KeptCheckpoint {
                        name: checkpoint.name,
                        value: checkpoint.value,
                        fence,
                        at,
                    },
                );
            }
            Change::ClearCheckpoints => {
                self.checkpoints.remove(id);
            }
            Change::Row { job, .. } => self.store(id, job),
            Change::ForgetPurged => {
                self.purged.remove(id);
            }
            Change::Trace(Some(trace)) => {
                self.traces.insert(id.clone(), trace);
            }
            Change::Trace(None) => {
                self.traces.remove(id);
            }
            // The parents are in the job's row; the memory store keeps no audit trail.
            Change::Parents | Change::Refused(_) => {}
            Change::Judge => judged.push(id.clone()),
            Change::Release(end, at) => self.release(id, end, at),
            Change::Attempt(attempt) => self.keep_attempt(id, attempt),
        }
        Ok(())
    }

    /// Keeps an ended attempt of job `id` (a release's without its end: this store reads no
    /// clock), and drops the oldest beyond [`lease_domain::ATTEMPTS_KEPT`].
    fn keep_attempt(&mut self, id: &JobId, attempt: lease_domain::Attempt) {
        let kept = self.attempts.entry(id.clone()).or_default();
        let trims = lease_domain::trims_attempts(attempt.fence);
        kept.insert(attempt.fence, attempt);
        let bound = usize::try_from(lease_domain::ATTEMPTS_KEPT).unwrap_or(usize::MAX);
        while trims && kept.len() > bound {
            kept.pop_first();
        }
    }

    /// How each of `parents` stands: its finished status, `None` while it can still run (a
    /// parent that is gone was purged after it finished, and counts as done).
    fn stands(&self, parents: &[JobId]) -> Vec<(JobId, Option<Status>)> {
        parents
            .iter()
            .map(|p| {
                let stands = self
                    .jobs
                    .get(p)
                    .map_or(Some(Status::Done), |(j, _)| j.finished());
                (p.clone(), stands)
            })
            .collect()
    }

    /// Judges the job `id` against its parents and stores what that decides.
    fn judge(&mut self, id: &JobId) {
        let Some((job, _)) = self.jobs.get(id) else {
            return;
        };
        let fate = decide_child(job.on_parent_failure, &self.stands(&job.after));
        if let Some(next) = job.settled(&fate, job.updated) {
            let (at, end) = (next.updated, next.finished());
            self.store(id, next);
            if let Some(end) = end {
                self.release(id, end, at);
            }
        }
    }

    /// Settles the jobs waiting on `finished`, which ended as `end` at `at`, transitively.
    fn release(&mut self, finished: &JobId, end: Status, at: Option<Timestamp>) {
        let fates = propagate(finished, end, &mut |parent| {
            self.jobs
                .iter()
                .filter(|(_, (job, _))| job.waiting && job.after.contains(parent))
                .map(|(id, (job, _))| Waiting {
                    id: id.clone(),
                    policy: job.on_parent_failure,
                    parents: self.stands(&job.after),
                })
                .collect()
        });
        for (child, fate) in fates {
            let settled = self
                .jobs
                .get(&child)
                .and_then(|(j, _)| j.settled(&fate, at));
            if let Some(next) = settled {
                self.store(&child, next);
            }
        }
    }

    fn store(&mut self, id: &JobId, job: Job) {
        if let Some(group) = Turn::kept_by(&job) {
            self.turns
                .entry(job.queue.clone())
                .or_default()
                .entry(group.clone())
                .or_insert(0);
        }
        match self.jobs.get_mut(id) {
            Some(slot) => slot.0 = job,
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.purged.remove(id);
                self.jobs.insert(id.clone(), (job, seq));
            }
        }
    }
}

/// The clock a [`MemoryLeaseStore`] reads in store-clock mode or to bound a caller's skew.
pub type StoreClock = std::sync::Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// A lease store held in process memory.
#[derive(Default)]
pub struct MemoryLeaseStore {
    jobs: Mutex<Jobs>,
    clock: Option<(ClockMode, StoreClock)>,
    keys: Mutex<std::collections::BTreeMap<KeyId, KeyRecord>>,
}

impl std::fmt::Debug for MemoryLeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLeaseStore")
            .field("clock", &self.clock.as_ref().map(|(mode, _)| mode))
            .finish_non_exhaustive()
    }
}

impl MemoryLeaseStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn keys(
        &self,
    ) -> Result<MutexGuard<'_, std::collections::BTreeMap<KeyId, KeyRecord>>, StoreError> {
        self.keys
            .lock()
            .map_err(|_| StoreError::Unavailable("the in-memory store's lock is poisoned".into()))
    }

    fn jobs(&self) -> Result<MutexGuard<'_, Jobs>, StoreError> {
        self.jobs
            .lock()
            .map_err(|_| StoreError::Unavailable("the in-memory store's lock is poisoned".into()))
    }

    /// An empty store whose `now` is decided by `mode`, with `clock` as the store's clock.
    #[must_use]
    pub fn with_clock(mode: ClockMode, clock: StoreClock) -> Self {
        Self {
            jobs: Mutex::default(),
            keys: Mutex::default(),
            clock: Some((mode, clock)),
        }
    }

    /// The command and the claim's term as the clock mode decides them, from one reading of
    /// the clock (taken under the lock).
    fn timed(
        &self,
        command: Command,
        term: Option<LeaseTerm>,
    ) -> Result<(Command, Option<LeaseTerm>), StoreError> {
        let Some((mode, clock)) = &self.clock else {
            return Ok((command, term));
        };
        let wanted = mode.needs_clock(&command) || (term.is_some() && mode.needs_clock_for_term());
        if !wanted {
            return Ok((command, term));
        }
        let now = clock();
        let command = if mode.needs_clock(&command) {
            mode.resolve(&command, now)?
        } else {
            command
        };
        let term = match term {
            Some(term) if mode.needs_clock_for_term() => Some(mode.resolve_term(term, now)?),
            other => other,
        };
        Ok((command, term))
    }
}

/// Enqueues a batch over the locked jobs, all or nothing: the batch's workflow is checked
/// first ([`check_workflow`]), then each job is decided and stored, then each new job with
/// parents is judged against them (a parent may come later in the batch).
fn enqueue(jobs: &mut Jobs, batch: &[(JobId, EnqueueSpec)]) -> Result<Vec<Outcome>, StoreError> {
    if batch.iter().any(|(_, spec)| !spec.after.is_empty()) {
        let named: Vec<(JobId, Vec<JobId>)> = batch
            .iter()
            .map(|(id, spec)| (id.clone(), spec.after.clone()))
            .collect();
        check_workflow(&named, |p| jobs.jobs.contains_key(p)).map_err(InputError::from)?;
    }
    // Each job is decided and written in order (an id given twice sees its first entry's
    // row); the jobs to judge are judged once the batch is written (a parent may come later).
    let mut judged = Vec::new();
    let mut outcomes = Vec::with_capacity(batch.len());
    for (id, spec) in batch {
        let current = jobs.jobs.get(id).map(|(j, _)| j);
        let purged = current.map_or_else(|| jobs.purged.get(id).copied(), |_| None);
        let command = Command::EnqueueWith(spec.clone());
        let decided = command.decided(id, current, purged);
        crate::observe::decided(&command, current, &decided);
        for change in decided.changes {
            jobs.write_change(id, change, &mut judged)?;
        }
        outcomes.push(decided.outcome);
    }
    for id in judged {
        jobs.judge(&id);
    }
    Ok(outcomes)
}

/// Decides and stores one command over the locked jobs; a refusal stores nothing.
fn apply(jobs: &mut Jobs, job: &JobId, command: &Command) -> Result<Outcome, StoreError> {
    if let Command::EnqueueWith(spec) = command {
        let mut outcomes = enqueue(jobs, &[(job.clone(), spec.clone())])?;
        return outcomes
            .pop()
            .ok_or_else(|| StoreError::Corrupt("an enqueue of one job gave no outcome".into()));
    }
    let current = jobs.jobs.get(job).map(|(j, _)| j);
    let purged = match current {
        None if command.is_enqueue() => jobs.purged.get(job).copied(),
        _ => None,
    };
    let decided = command.decided(job, current, purged);
    crate::observe::decided(command, current, &decided);
    jobs.write_all(job, decided.changes)?;
    Ok(decided.outcome)
}

#[async_trait]
impl LeaseStore for MemoryLeaseStore {
    async fn apply(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        crate::claim_may_follow(&command, then.as_ref())?;
        let mut jobs = self.jobs()?;
        let (command, term) = self.timed(command, then.as_ref().map(|claim| claim.term))?;
        let epoch = jobs.epoch;
        let outcome = apply(&mut jobs, job, &command.in_epoch(epoch))?;
        let claimed = then.map(|claim| {
            let claim = ClaimNext {
                term: term.unwrap_or(claim.term).in_epoch(epoch),
                ..claim
            };
            claim_next(&mut jobs, &claim)
        });
        Ok(Applied { outcome, claimed })
    }

    async fn claim_next_with(&self, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError> {
        let mut jobs = self.jobs()?;
        let (_, term) = self.timed(Command::Enqueue, Some(claim.term))?;
        let claim = ClaimNext {
            term: term.unwrap_or(claim.term).in_epoch(jobs.epoch),
            ..claim.clone()
        };
        claim_next(&mut jobs, &claim)
    }

    async fn enqueue_many(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError> {
        // One lock for the batch: no other call sees part of it. Enqueue cannot fail once the
        // lock is held, so the batch is stored whole.
        let mut stored = self.jobs()?;
        enqueue(&mut stored, jobs)?
            .into_iter()
            .map(outcome_as)
            .collect()
    }

    async fn record(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError> {
        Ok(self.jobs()?.jobs.get(job).map(|(j, _)| JobRecord {
            id: job.clone(),
            job: j.clone(),
        }))
    }

    async fn purge(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError> {
        let mut jobs = self.jobs()?;
        let doomed: Vec<(JobId, Fence)> = jobs
            .jobs
            .iter()
            .filter(|(_, (job, _))| is_purgeable(job, before, statuses))
            .map(|(id, (job, _))| (id.clone(), job.fence))
            .collect();
        for (id, fence) in &doomed {
            jobs.jobs.remove(id);
            jobs.checkpoints.remove(id);
            jobs.traces.remove(id);
            jobs.attempts.remove(id);
            jobs.purged.insert(id.clone(), *fence);
        }
        Ok(u64::try_from(doomed.len()).unwrap_or(u64::MAX))
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
        let jobs = self.jobs()?;
        let mut found: Vec<JobRecord> = jobs
            .jobs
            .iter()
            .filter(|(id, _)| filter.after.as_ref().is_none_or(|after| *id > after))
            .filter(|(_, (job, _))| filter.queue.as_ref().is_none_or(|q| job.queue == *q))
            .filter(|(id, (job, _))| filter.admits(id, job))
            .map(|(id, (job, _))| JobRecord {
                id: id.clone(),
                job: job.clone(),
            })
            .collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        found.truncate(filter.limit);
        Ok(found)
    }

    async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
        let jobs = self.jobs()?;
        Ok(tally(jobs.jobs.values().map(|(job, _)| job), now))
    }

    async fn checkpoints(&self, job: &JobId) -> Result<Vec<KeptCheckpoint>, StoreError> {
        let jobs = self.jobs()?;
        Ok(jobs
            .checkpoints
            .get(job)
            .map(|kept| kept.values().cloned().collect())
            .unwrap_or_default())
    }

    async fn attempts(&self, job: &JobId) -> Result<lease_domain::Attempts, StoreError> {
        let jobs = self.jobs()?;
        let kept = jobs
            .attempts
            .get(job)
            .map(|kept| kept.values().cloned().collect())
            .unwrap_or_default();
        Ok(lease_domain::Attempts::of(kept))
    }

    async fn trace(&self, job: &JobId) -> Result<Option<lease_domain::TraceContext>, StoreError> {
        Ok(self.jobs()?.traces.get(job).cloned())
    }
}

/// The candidates of `queue` at `now` in claim order: of one group when `group` is given
/// (`Some(None)`: the jobs without a group).
fn candidates_in(
    jobs: &Jobs,
    queue: &QueueName,
    group: Option<Option<&GroupKey>>,
    now: Timestamp,
) -> Vec<Candidate> {
    let mut due: Vec<Candidate> = jobs
        .jobs
        .iter()
        .filter(|(_, (job, _))| {
            job.queue == *queue
                && group.is_none_or(|g| job.group.as_ref() == g)
                && job.is_claim_candidate(now)
        })
        .map(|(id, (job, seq))| Candidate {
            id: id.clone(),
            job: job.clone(),
            seq: *seq,
        })
        .collect();
    due.sort_by_key(|c| ClaimKey::of(&c.job, c.seq));
    due
}

/// Answers one read of the claim walk from the locked jobs: the memory store keeps no index,
/// so it reads exact heads (each group's first candidate).
fn answer(
    jobs: &Jobs,
    queue: &QueueName,
    read: Read,
    term: LeaseTerm,
    counting: &dyn Fn(Option<&GroupKey>) -> u64,
) -> Answer {
    let now = term.now();
    match read {
        Read::Many(reads) => Answer::Many(
            reads
                .into_iter()
                .map(|read| answer(jobs, queue, read, term, counting))
                .collect(),
        ),
        Read::Page { want } => Answer::Page(
            term,
            candidates_in(jobs, queue, None, now)
                .into_iter()
                .take(want)
                .map(|c| (c.id, c.job))
                .collect(),
        ),
        Read::Due { group, want } => {
            let mut due = candidates_in(jobs, queue, Some(group.as_ref()), now);
            due.truncate(want);
            Answer::Candidates(term, due)
        }
        Read::Jobs(ids) => Answer::Candidates(
            term,
            ids.into_iter()
                .filter_map(|id| {
                    let (job, seq) = jobs.jobs.get(&id)?;
                    let job = job.clone();
                    Some(Candidate { id, job, seq: *seq })
                })
                .collect(),
        ),
        Read::Heads { want, skip } => {
            let mut heads: BTreeMap<&GroupKey, ClaimKey> = BTreeMap::new();
            for (job, seq) in jobs.jobs.values() {
                let Some(group) = &job.group else { continue };
                if job.queue != *queue || !job.is_claim_candidate(now) || skip.contains(group) {
                    continue;
                }
                let key = ClaimKey::of(job, *seq);
                let head = heads.entry(group).or_insert(key);
                *head = (*head).min(key);
            }
            let mut heads: Vec<Head> = heads
                .into_iter()
                .map(|(group, key)| Head {
                    group: group.clone(),
                    key,
                })
                .collect();
            heads.sort_by_key(|h| h.key);
            heads.truncate(want);
            Answer::Heads(heads)
        }
        Read::Standing(groups) => Answer::Standing {
            bearing: jobs
                .jobs
                .iter()
                .filter(|(_, (job, _))| {
                    job.queue == *queue
                        && job.group.as_ref().is_some_and(|g| groups.contains(g))
                        && job.bears_on_group(now)
                })
                .map(|(id, (job, _))| (id.clone(), job.clone()))
                .collect(),
            counting: groups
                .iter()
                .map(|g| (g.clone(), counting(Some(g))))
                .collect(),
        },
        Read::Turn { after } => {
            let after = after.map(|(served, group)| Turn { served, group });
            let turn = jobs.turns.get(queue).and_then(|turns| {
                turns
                    .iter()
                    .map(|(group, served)| Turn {
                        served: *served,
                        group: group.clone(),
                    })
                    .filter(|turn| after.as_ref().is_none_or(|a| turn > a))
                    .min()
            });
            Answer::Turn(turn.map(|t| (t.served, t.group)))
        }
    }
}

/// Writes one effect of the claim walk.
fn write_effect(jobs: &mut Jobs, queue: &QueueName, effect: Effect) -> Result<(), StoreError> {
    match effect {
        Effect::Job(id, job, ended) => jobs.write_all(&id, Change::of_claim(job, ended))?,
        Effect::ServeTurn(group) => {
            let turns = jobs.turns.entry(queue.clone()).or_default();
            let last = turns.values().copied().max().unwrap_or(0);
            turns.insert(group, Turn::next_served(last));
        }
        // The memory store keeps no heads: it reads each group's first candidate.
        Effect::RepairHeads(_) => {}
        Effect::DropTurn(group) => {
            let open = jobs
                .jobs
                .values()
                .any(|(job, _)| job.queue == *queue && Turn::kept_by(job) == Some(&group));
            if !open {
                if let Some(turns) = jobs.turns.get_mut(queue) {
                    turns.remove(&group);
                }
            }
        }
    }
    Ok(())
}

/// `claim_next` over the locked jobs: the claim walk under the queue's settings, its reads
/// answered from the jobs and its effects written to them.
fn claim_next(jobs: &mut Jobs, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError> {
    let (queue, term) = (&claim.queue, claim.term);
    let settings = jobs.queues.get(queue).cloned().unwrap_or_default();
    let held = if settings.counts_leases() {
        let running = jobs
            .jobs
            .values()
            .filter(|(job, _)| job.queue == *queue && job.status_at(term.now()) == Status::Running);
        u64::try_from(running.count()).unwrap_or(u64::MAX)
    } else {
        0
    };
    // Under a rate, the claim forgets the grants expired by its clock, then counts the rest
    // (as every store does, so that all agree on what a claim at an earlier time still counts).
    let now = term.now();
    if settings.limits_rate() && claim.limit > 0 {
        if let Some(log) = jobs.grants.get_mut(queue) {
            log.retain(|(_, at)| at.get() > now.get());
        }
    }
    let grants = jobs.grants.get(queue).cloned().unwrap_or_default();
    let counting = |group: Option<&GroupKey>| {
        let n = grants.iter().filter(|(g, _)| g.as_ref() == group).count();
        u64::try_from(n).unwrap_or(u64::MAX)
    };
    let mut walk = ClaimWalk::in_queue(claim, &settings, held, counting(None));
    while let Some(read) = walk.next_read() {
        for effect in walk.take_effects() {
            write_effect(jobs, queue, effect)?;
        }
        let answered = answer(jobs, queue, read, term, &counting);
        walk.answer(answered)?;
    }
    for effect in walk.take_effects() {
        write_effect(jobs, queue, effect)?;
    }
    let granted = walk.grants();
    if !granted.is_empty() {
        jobs.grants
            .entry(queue.clone())
            .or_default()
            .extend(granted);
    }
    Ok(walk.into_leases())
}

#[async_trait]
impl crate::transfer::Transfer for MemoryLeaseStore {
    async fn export(&self) -> Result<Snapshot, StoreError> {
        let jobs = self.jobs()?;
        let mut ordered: Vec<(&JobId, &(Job, u64))> = jobs.jobs.iter().collect();
        ordered.sort_by_key(|(_, (_, seq))| *seq);
        let mut purged: Vec<(JobId, Fence)> =
            jobs.purged.iter().map(|(id, f)| (id.clone(), *f)).collect();
        purged.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Snapshot {
            jobs: ordered
                .into_iter()
                .map(|(id, (job, _))| JobRecord {
                    id: id.clone(),
                    job: job.clone(),
                })
                .collect(),
            purged,
            queues: jobs.queue_settings().collect(),
            schedules: jobs.schedules.values().cloned().collect(),
            checkpoints: {
                let mut all: Vec<(JobId, KeptCheckpoint)> = jobs
                    .checkpoints
                    .iter()
                    .flat_map(|(id, kept)| kept.values().map(|c| (id.clone(), c.clone())))
                    .collect();
                all.sort_by(|a, b| (&a.0, &a.1.name).cmp(&(&b.0, &b.1.name)));
                all
            },
            traces: {
                let mut all: Vec<(JobId, lease_domain::TraceContext)> = jobs
                    .traces
                    .iter()
                    .map(|(id, t)| (id.clone(), t.clone()))
                    .collect();
                all.sort_by(|a, b| a.0.cmp(&b.0));
                all
            },
            attempts: {
                let mut all: Vec<(JobId, lease_domain::Attempt)> = jobs
                    .attempts
                    .iter()
                    .flat_map(|(id, kept)| kept.values().map(|a| (id.clone(), a.clone())))
                    .collect();
                all.sort_by(|a, b| (&a.0, a.1.fence).cmp(&(&b.0, b.1.fence)));
                all
            },
            epoch: jobs.epoch,
        })
    }

    async fn epoch(&self) -> Result<Epoch, StoreError> {
        Ok(self.jobs()?.epoch)
    }

    async fn raise_epoch(&self, at_least: Epoch) -> Result<Epoch, StoreError> {
        let mut jobs = self.jobs()?;
        jobs.epoch = jobs.epoch.max(at_least);
        Ok(jobs.epoch)
    }

    async fn check_heads(&self, _rebuild: bool) -> Result<crate::transfer::HeadCheck, StoreError> {
        // No heads are kept: a claim reads each group's first candidate.
        drop(self.jobs()?);
        Ok(crate::transfer::HeadCheck::default())
    }

    async fn import(&self, incoming: &Snapshot, merge: bool) -> Result<Imported, StoreError> {
        let mut jobs = self.jobs()?;
        let view = TargetView {
            jobs: jobs
                .jobs
                .iter()
                .map(|(id, (job, _))| (id.clone(), job.clone()))
                .collect(),
            marks: jobs.purged.clone(),
            total_jobs: u64::try_from(jobs.jobs.len()).unwrap_or(u64::MAX),
            total_marks: u64::try_from(jobs.purged.len()).unwrap_or(u64::MAX),
            queues: jobs.queue_settings().collect(),
            schedules: jobs
                .schedules
                .iter()
                .map(|(n, s)| (n.clone(), s.clone()))
                .collect(),
        };
        let plan = plan_import("the memory store", view, incoming, merge)?;
        // `store` gives a new job the next enqueue order and drops its purge mark.
        for (id, job) in plan.inserts.into_iter().chain(plan.updates) {
            jobs.store(&id, job);
        }
        for (id, fence) in plan.marks {
            let mark = jobs.purged.entry(id).or_insert(fence);
            *mark = (*mark).max(fence);
        }
        jobs.queues.extend(plan.queues);
        for schedule in plan.schedules {
            jobs.schedules.insert(schedule.spec.name.clone(), schedule);
        }
        for id in &plan.cleared {
            jobs.checkpoints.remove(id);
        }
        for (id, checkpoint) in plan.checkpoints {
            jobs.checkpoints
                .entry(id)
                .or_default()
                .insert(checkpoint.name.clone(), checkpoint);
        }
        for id in &plan.cleared {
            jobs.traces.remove(id);
        }
        jobs.traces.extend(plan.traces);
        for id in &plan.cleared {
            jobs.attempts.remove(id);
        }
        for (id, attempt) in plan.attempts {
            jobs.attempts
                .entry(id)
                .or_default()
                .insert(attempt.fence, attempt);
        }
        jobs.epoch = jobs.epoch.max(plan.epoch);
        Ok(plan.imported)
    }
}

#[async_trait]
impl KeyStore for MemoryLeaseStore {
    async fn add_key(&self, key: &KeyRecord) -> Result<Result<(), KeyRefused>, StoreError> {
        let mut keys = self.keys()?;
        let live = live_scopes(keys.values(), &key.principal);
        let taken = keys.contains_key(&key.id);
        Ok(
            decide_new_key(&key.id, taken, &key.principal, key.scope, &live).map(|()| {
                keys.insert(key.id.clone(), key.clone());
            }),
        )
    }

    async fn key(&self, id: &KeyId) -> Result<Option<KeyRecord>, StoreError> {
        Ok(self.keys()?.get(id).cloned())
    }

    async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        Ok(self.keys()?.values().cloned().collect())
    }

    async fn revoke_key(&self, id: &KeyId, now: Timestamp) -> Result<bool, StoreError> {
        Ok(self.keys()?.get_mut(id).is_some_and(|key| {
            key.revoked.get_or_insert(now);
            true
        }))
    }
}

/// The overview of the jobs held (no audit trail: no refusals are counted).
#[async_trait]
impl crate::overview::Overview for MemoryLeaseStore {
    async fn due(&self, now: Timestamp) -> Result<Vec<crate::overview::DueRow>, StoreError> {
        let jobs = self.jobs()?;
        Ok(crate::overview::tally_due(
            jobs.jobs.values().map(|(job, _)| job),
            now,
        ))
    }

    async fn activity(
        &self,
        since: Timestamp,
    ) -> Result<Vec<crate::overview::MinuteRow>, StoreError> {
        let jobs = self.jobs()?;
        let failed = jobs.attempts.iter().flat_map(|(id, kept)| {
            let queue = jobs.jobs.get(id).map(|(job, _)| job.queue.clone());
            kept.values()
                .filter(|a| a.end.is_failure())
                .filter_map(move |a| Some((queue.clone()?, a.ended?)))
        });
        Ok(crate::overview::tally_activity(
            jobs.jobs.values().map(|(job, _)| job),
            failed,
            [],
            since,
        ))
    }
}

/// The memory store keeps no audit trail: it reads as a store never opened with it on.
#[async_trait]
impl crate::audit::AuditTrail for MemoryLeaseStore {
    async fn refusals(
        &self,
        _filter: &crate::audit::AuditFilter,
    ) -> Result<Vec<crate::audit::AuditRow>, StoreError> {
        Ok(Vec::new())
    }
}

#[async_trait]
impl crate::control::Control for MemoryLeaseStore {
    async fn change_queue(
        &self,
        queue: &QueueName,
        change: QueueChange,
    ) -> Result<QueueSettings, StoreError> {
        let mut jobs = self.jobs()?;
        let current = jobs.queues.get(queue).cloned().unwrap_or_default();
        let next = decide_queue_change(&current, change);
        if next.is_default() {
            jobs.queues.remove(queue);
        } else {
            jobs.queues.insert(queue.clone(), next.clone());
        }
        Ok(next)
    }

    async fn queues(&self) -> Result<Vec<(QueueName, QueueSettings)>, StoreError> {
        let jobs = self.jobs()?;
        Ok(jobs.queue_settings().collect())
    }

    async fn settings_of(&self, queue: &QueueName) -> Result<QueueSettings, StoreError> {
        Ok(self.jobs()?.queues.get(queue).cloned().unwrap_or_default())
    }

    async fn throttle(
        &self,
        queue: &QueueName,
        now: Timestamp,
    ) -> Result<lease_domain::Throttle, StoreError> {
        let jobs = self.jobs()?;
        let settings = jobs.queues.get(queue).cloned().unwrap_or_default();
        let grants = jobs.grants.get(queue).map_or(&[][..], Vec::as_slice);
        Ok(lease_domain::Throttle::of(&settings, grants, now))
    }

    async fn group_loads(
        &self,
        queue: &QueueName,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<crate::control::GroupLoad>, StoreError> {
        let jobs = self.jobs()?;
        let mut loads = BTreeMap::<GroupKey, crate::control::GroupLoad>::new();
        for (job, _) in jobs.jobs.values() {
            let Some(group) = job.group.as_ref().filter(|_| job.queue == *queue) else {
                continue;
            };
            loads
                .entry(group.clone())
                .or_insert_with(|| crate::control::GroupLoad {
                    group: group.clone(),
                    backlog: 0,
                    running: 0,
                })
                .count(job, now);
        }
        Ok(crate::control::busiest(
            loads.into_values().collect(),
            limit,
        ))
    }

    async fn put_schedule(
        &self,
        spec: &ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        let mut jobs = self.jobs()?;
        let schedule = decide_put_schedule(jobs.schedules.get(&spec.name), spec.clone(), now);
        jobs.schedules.insert(spec.name.clone(), schedule.clone());
        Ok(schedule)
    }

    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool, StoreError> {
        Ok(self.jobs()?.schedules.remove(name).is_some())
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        Ok(self.jobs()?.schedules.values().cloned().collect())
    }

    async fn fire_schedule(
        &self,
        fire: &crate::control::Fire,
    ) -> Result<Option<Vec<bool>>, StoreError> {
        let mut jobs = self.jobs()?;
        let Some(fired) = fire.decide(jobs.schedules.get(&fire.name)) else {
            return Ok(None);
        };
        let inserted = enqueue(&mut jobs, &fire.jobs)?
            .into_iter()
            .map(outcome_as)
            .collect::<Result<Vec<bool>, StoreError>>()?;
        jobs.schedules.insert(fire.name.clone(), fired);
        Ok(Some(inserted))
    }
}

/// The memory store lives in one process: it carries no signal between processes.
impl crate::signal::EnqueueSignal for MemoryLeaseStore {}
