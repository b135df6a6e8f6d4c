//! Moving every job between stores (SQLite to PostgreSQL and back) with its fence, result,
//! queue fields and the fence of every purged id, so that no fence is ever handed out twice.
//!
//! Adapters implement [`Transfer`] (read everything; write everything in one transaction, each
//! job as [`lease_domain::decide_import`] decides); [`migrate`] copies, then verifies the copy.

use std::collections::HashMap;

use async_trait::async_trait;
use lease_domain::{
    Epoch, Fence, ImportDecision, Job, JobId, KeptCheckpoint, QueueName, QueueSettings, Schedule,
    ScheduleName, TraceContext, carried_epoch, decide_import, raise_fence,
};

use crate::{JobRecord, StoreError};

/// Everything a store holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Every job, in enqueue order (the order `claim_next` breaks ties by).
    pub jobs: Vec<JobRecord>,
    /// The fence each purged id had.
    pub purged: Vec<(JobId, Fence)>,
    /// The settings of every queue that has any.
    pub queues: Vec<(QueueName, QueueSettings)>,
    /// Every schedule.
    pub schedules: Vec<Schedule>,
    /// Every job's checkpoints, in job then name order.
    pub checkpoints: Vec<(JobId, KeptCheckpoint)>,
    /// The trace context of every job that has one, in job order.
    pub traces: Vec<(JobId, TraceContext)>,
    /// Every job's kept attempts, in job then fence order.
    pub attempts: Vec<(JobId, lease_domain::Attempt)>,
    /// The store's epoch ([`Transfer::epoch`]); an import raises the target's to it.
    pub epoch: Epoch,
}

impl Snapshot {
    /// Whether the store holds no job, purge mark, queue setting or schedule.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.purged.is_empty()
            && self.queues.is_empty()
            && self.schedules.is_empty()
    }
}

/// A job present on both sides of a merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The job.
    pub job: JobId,
    /// Its fence in the source.
    pub source_fence: Fence,
    /// Its fence in the target before the merge.
    pub target_fence: Fence,
    /// Whether the source's job replaced the target's (its fence was larger).
    pub replaced: bool,
}

/// What an import wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imported {
    /// Jobs the target did not have.
    pub inserted: u64,
    /// Jobs present on both sides.
    pub conflicts: Vec<Conflict>,
    /// Purge marks written or raised.
    pub marks: u64,
    /// Queue settings written.
    pub queues: u64,
    /// Schedules written (or, merged, a target's schedule whose last tick was raised).
    pub schedules: u64,
}

/// A store whose whole contents can be read and written for a migration.
#[async_trait]
pub trait Transfer: crate::control::Controlled {
    /// Every job and purge mark, read in one snapshot.
    async fn export(&self) -> Result<Snapshot, StoreError>;

    /// Writes `snapshot` in one transaction: each job as [`lease_domain::decide_import`]
    /// decides against the target's job and purge mark, each purge mark raised to the larger
    /// fence (and a target job under a mark raised with [`lease_domain::raise_fence`]). Unless
    /// `merge` is set, a target that holds anything is refused and left as it is.
    async fn import(&self, snapshot: &Snapshot, merge: bool) -> Result<Imported, StoreError>;

    /// The store's epoch: every fence it hands out now is in it ([`lease_domain::Epoch`]). On
    /// PostgreSQL it follows the server's timeline; a standby in recovery answers
    /// [`StoreError::ReadOnly`].
    async fn epoch(&self) -> Result<Epoch, StoreError>;

    /// Raises the store's epoch to `at_least` where it is below, and answers the epoch after:
    /// an import raises it to its source's ([`ImportPlan::epoch`]), `lease restore` and
    /// `lease epoch --raise` to one more than it was, after a restore the store cannot see.
    async fn raise_epoch(&self, at_least: Epoch) -> Result<Epoch, StoreError>;

    /// Checks the store's group heads (the ready set a claim walks by, one row per queue and
    /// group with ready jobs: [`crate::next::Head`]) against its jobs, after rebuilding them
    /// from the jobs when `rebuild` is set. A store that keeps no heads (the memory store
    /// reads each group's first job) answers an empty check.
    async fn check_heads(&self, rebuild: bool) -> Result<HeadCheck, StoreError>;
}

/// What [`Transfer::check_heads`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeadCheck {
    /// How many heads the store keeps.
    pub heads: u64,
    /// The groups (queue, group) with a ready job whose head is missing or after that job in
    /// claim order: a claim could pass them by. None in a sound store.
    pub stray: Vec<(lease_domain::QueueName, lease_domain::GroupKey)>,
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// Jobs read from the source.
    pub source_jobs: u64,
    /// Purge marks read from the source.
    pub source_marks: u64,
    /// What the import wrote.
    pub imported: Imported,
    /// Jobs the target holds afterwards.
    pub target_jobs: u64,
}

/// Copies `from` into `to` and verifies the copy: the target holds every source job with a
/// fence at least as large (equal, with the same record, unless merged with a larger one), and
/// every purge mark at least as large; job counts add up.
///
/// # Errors
/// The store's errors; [`StoreError::Incompatible`] for a non-empty target without `merge`;
/// [`StoreError::Corrupt`] when the verification finds a difference (naming the job).
pub async fn migrate(
    from: &dyn Transfer,
    to: &dyn Transfer,
    merge: bool,
) -> Result<Migration, StoreError> {
    let source = from.export().await?;
    refuse_long_names(&source)?;
    let before = to.export().await?;
    let imported = to.import(&source, merge).await?;
    let after = to.export().await?;
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let merged: std::collections::HashSet<&JobId> =
        imported.conflicts.iter().map(|c| &c.job).collect();
    let stored: std::collections::HashMap<&JobId, &JobRecord> =
        after.jobs.iter().map(|r| (&r.id, r)).collect();
    let marks: std::collections::HashMap<&JobId, Fence> =
        after.purged.iter().map(|(id, f)| (id, *f)).collect();
    for record in &source.jobs {
        let Some(copy) = stored.get(&record.id) else {
            return Err(StoreError::Corrupt(
                format!(
                    "verification: job {} is missing from the target after the copy",
                    record.id
                )
                .into(),
            ));
        };
        if copy.job.fence < record.job.fence {
            return Err(StoreError::Corrupt(
                format!(
                    "verification: job {} has fence {} in the target but {} in the source",
                    record.id, copy.job.fence, record.job.fence
                )
                .into(),
            ));
        }
        if !merged.contains(&record.id) && copy.job.fence == record.job.fence && *copy != record {
            return Err(StoreError::Corrupt(
                format!(
                    "verification: job {} differs between source and target",
                    record.id
                )
                .into(),
            ));
        }
    }
    verify_beside(&source, &after, &merged)?;
    for (id, fence) in &source.purged {
        let floor = stored
            .get(id)
            .map(|r| r.job.fence)
            .or_else(|| marks.get(id).copied());
        if floor.is_none_or(|f| f < *fence) {
            return Err(StoreError::Corrupt(
                format!(
                    "verification: purged job {id} had fence {fence} in the source; the target \
                 keeps {floor:?}"
                )
                .into(),
            ));
        }
    }
    // Every schedule arrived, and none would fire a tick the source fired already.
    for schedule in &source.schedules {
        let copy = after
            .schedules
            .iter()
            .find(|s| s.spec.name == schedule.spec.name);
        if copy.is_none_or(|c| c.last_tick < schedule.last_tick) {
            return Err(StoreError::Corrupt(
                format!(
                    "verification: schedule {} is missing from the target or behind the source's \
                     last tick",
                    schedule.spec.name
                )
                .into(),
            ));
        }
    }
    for (queue, _) in &source.queues {
        if !after.queues.iter().any(|(q, _)| q == queue) {
            return Err(StoreError::Corrupt(
                format!("verification: queue {queue}'s settings are missing from the target")
                    .into(),
            ));
        }
    }
    if after.epoch < source.epoch {
        return Err(StoreError::Corrupt(
            format!(
                "verification: the target is at epoch {} but the source at {}, so the target \
                 could hand out a fence the source handed out",
                after.epoch, source.epoch
            )
            .into(),
        ));
    }
    let expected = count(before.jobs.len()).saturating_add(imported.inserted);
    if count(after.jobs.len()) != expected {
        return Err(StoreError::Corrupt(
            format!(
                "verification: the target holds {} jobs, expected {expected}",
                after.jobs.len()
            )
            .into(),
        ));
    }
    Ok(Migration {
        source_jobs: count(source.jobs.len()),
        source_marks: count(source.purged.len()),
        imported,
        target_jobs: count(after.jobs.len()),
    })
}

/// Verifies what a job copied as it was (not merged with a larger fence) keeps beside its
/// row: the source's checkpoints and its trace context.
fn verify_beside(
    source: &Snapshot,
    after: &Snapshot,
    merged: &std::collections::HashSet<&JobId>,
) -> Result<(), StoreError> {
    // A job copied as it was (not merged with a larger fence) has the source's checkpoints.
    let mut kept: HashMap<&JobId, Vec<&KeptCheckpoint>> = HashMap::new();
    for (id, checkpoint) in &after.checkpoints {
        kept.entry(id).or_default().push(checkpoint);
    }
    let mut wanted: HashMap<&JobId, Vec<&KeptCheckpoint>> = HashMap::new();
    for (id, checkpoint) in &source.checkpoints {
        wanted.entry(id).or_default().push(checkpoint);
    }
    for record in &source.jobs {
        if merged.contains(&record.id) {
            continue;
        }
        let (copy, want) = (kept.get(&record.id), wanted.get(&record.id));
        if copy.map_or(0, Vec::len) != want.map_or(0, Vec::len) || copy != want {
            return Err(StoreError::Corrupt(
                format!(
                    "verification: job {}'s checkpoints differ between source and target",
                    record.id
                )
                .into(),
            ));
        }
    }
    // And its trace context.
    let traced: HashMap<&JobId, &TraceContext> = after.traces.iter().map(|(i, t)| (i, t)).collect();
    let sent: HashMap<&JobId, &TraceContext> = source.traces.iter().map(|(i, t)| (i, t)).collect();
    for record in source.jobs.iter().filter(|r| !merged.contains(&r.id)) {
        if traced.get(&record.id) != sent.get(&record.id) {
            return Err(StoreError::Corrupt(
                format!(
                    "verification: job {}'s trace context differs between source and target",
                    record.id
                )
                .into(),
            ));
        }
    }
    Ok(())
}

/// What the target of an import holds of the ids a snapshot names, read inside the import's
/// transaction, with how much it holds in all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetView {
    /// The target's jobs among the snapshot's ids (jobs and purge marks).
    pub jobs: HashMap<JobId, Job>,
    /// The target's purge marks among the snapshot's ids.
    pub marks: HashMap<JobId, Fence>,
    /// How many jobs the target holds in all.
    pub total_jobs: u64,
    /// How many purge marks the target holds in all.
    pub total_marks: u64,
    /// The target's queue settings (all of them).
    pub queues: HashMap<QueueName, QueueSettings>,
    /// The target's schedules (all of them).
    pub schedules: HashMap<ScheduleName, Schedule>,
}

impl TargetView {
    /// The view of a whole store's snapshot.
    #[must_use]
    pub fn of(snapshot: &Snapshot) -> Self {
        Self {
            jobs: snapshot
                .jobs
                .iter()
                .map(|r| (r.id.clone(), r.job.clone()))
                .collect(),
            marks: snapshot.purged.iter().cloned().collect(),
            total_jobs: count(snapshot.jobs.len()),
            total_marks: count(snapshot.purged.len()),
            queues: snapshot.queues.iter().cloned().collect(),
            schedules: snapshot
                .schedules
                .iter()
                .map(|s| (s.spec.name.clone(), s.clone()))
                .collect(),
        }
    }
}

/// The writes of one import, in the order they are to be made, and what they amount to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportPlan {
    /// New jobs, in the snapshot's enqueue order (a store gives them the next enqueue order in
    /// that order); each one's purge mark in the target goes.
    pub inserts: Vec<(JobId, Job)>,
    /// Existing jobs to overwrite (replaced by a larger fence, or raised to a purge mark),
    /// after the inserts, in order.
    pub updates: Vec<(JobId, Job)>,
    /// Purge marks to record (keeping the larger fence where one exists).
    pub marks: Vec<(JobId, Fence)>,
    /// Queue settings to write (replacing the target's).
    pub queues: Vec<(QueueName, QueueSettings)>,
    /// Schedules to write (replacing the target's of the same name).
    pub schedules: Vec<Schedule>,
    /// Jobs whose checkpoints in the target go before [`ImportPlan::checkpoints`] are
    /// written: those replaced by the source's.
    pub cleared: Vec<JobId>,
    /// The source's checkpoints of every job inserted or replaced, to write after the jobs.
    pub checkpoints: Vec<(JobId, KeptCheckpoint)>,
    /// The source's trace contexts of every job inserted or replaced, to write after the jobs
    /// (a replaced job's own goes with its checkpoints, [`ImportPlan::cleared`]).
    pub traces: Vec<(JobId, TraceContext)>,
    /// The source's attempts of every job inserted or replaced, to write after the jobs (a
    /// replaced job's own go with its checkpoints, [`ImportPlan::cleared`]).
    pub attempts: Vec<(JobId, lease_domain::Attempt)>,
    /// The summary the import answers.
    pub imported: Imported,
    /// The epoch the target is raised to, at least, in the import's transaction
    /// ([`lease_domain::carried_epoch`] of the snapshot).
    pub epoch: Epoch,
}

/// Plans an import of `incoming` into a target that holds `target`: each job as
/// [`decide_import`] decides against the target's job and purge mark (the larger fence wins),
/// then each purge mark, raising a job under it with [`raise_fence`] or recording the mark.
/// This is the one import algorithm; every store's `import` reads the view, calls this and
/// writes the plan in one transaction.
///
/// # Errors
/// [`StoreError::Incompatible`] for a target that holds anything when `merge` is not set.
pub fn plan_import(
    target_name: &str,
    target: TargetView,
    incoming: &Snapshot,
    merge: bool,
) -> Result<ImportPlan, StoreError> {
    let settled = count(target.queues.len() + target.schedules.len());
    refuse_unless_empty(
        target_name,
        target.total_jobs.saturating_add(settled),
        target.total_marks,
        merge,
    )?;
    let TargetView {
        jobs: mut existing,
        marks,
        queues,
        schedules,
        ..
    } = target;
    let mut plan = ImportPlan {
        epoch: carried_epoch(
            incoming.epoch,
            incoming
                .jobs
                .iter()
                .map(|r| r.job.fence)
                .chain(incoming.purged.iter().map(|(_, f)| *f)),
        ),
        ..ImportPlan::default()
    };
    // A queue's settings: the source's, unless a merge finds the target's own.
    for (queue, settings) in &incoming.queues {
        if !queues.contains_key(queue) {
            plan.queues.push((queue.clone(), settings.clone()));
            plan.imported.queues += 1;
        }
    }
    // A schedule: the source's, unless a merge finds the target's own, which keeps its spec and
    // takes the later of the two last ticks, so that no tick fires twice.
    for schedule in &incoming.schedules {
        match schedules.get(&schedule.spec.name) {
            None => plan.schedules.push(schedule.clone()),
            Some(own) if schedule.last_tick > own.last_tick => plan.schedules.push(Schedule {
                last_tick: schedule.last_tick,
                ..own.clone()
            }),
            Some(_) => continue,
        }
        plan.imported.schedules += 1;
    }
    for record in &incoming.jobs {
        let current = existing.get(&record.id);
        let conflict = |replaced| Conflict {
            job: record.id.clone(),
            source_fence: record.job.fence,
            target_fence: current.map_or(Fence::ZERO, |j| j.fence),
            replaced,
        };
        match decide_import(&record.job, current, marks.get(&record.id).copied()) {
            ImportDecision::Insert(job) => {
                plan.imported.inserted += 1;
                plan.inserts.push((record.id.clone(), job.clone()));
                existing.insert(record.id.clone(), job);
            }
            ImportDecision::Replace(job) => {
                plan.imported.conflicts.push(conflict(true));
                plan.updates.push((record.id.clone(), job.clone()));
                existing.insert(record.id.clone(), job);
            }
            ImportDecision::Keep => plan.imported.conflicts.push(conflict(false)),
        }
    }
    // A job copied (inserted or replaced) takes the source's checkpoints; one kept keeps its own.
    let copied: std::collections::HashSet<&JobId> = plan
        .inserts
        .iter()
        .chain(&plan.updates)
        .map(|(id, _)| id)
        .collect();
    plan.checkpoints = incoming
        .checkpoints
        .iter()
        .filter(|(id, _)| copied.contains(id))
        .cloned()
        .collect();
    plan.traces = incoming
        .traces
        .iter()
        .filter(|(id, _)| copied.contains(id))
        .cloned()
        .collect();
    plan.attempts = incoming
        .attempts
        .iter()
        .filter(|(id, _)| copied.contains(id))
        .cloned()
        .collect();
    plan.cleared = plan.updates.iter().map(|(id, _)| id.clone()).collect();
    for (id, fence) in &incoming.purged {
        match existing.get(id) {
            Some(job) if job.fence < *fence => {
                let raised = raise_fence(job, Some(*fence));
                plan.updates.push((id.clone(), raised.clone()));
                existing.insert(id.clone(), raised);
                plan.imported.marks += 1;
            }
            Some(_) => {}
            None => {
                plan.marks.push((id.clone(), *fence));
                plan.imported.marks += 1;
            }
        }
    }
    Ok(plan)
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Refuses a snapshot that holds a job id, owner or queue name longer than
/// [`lease_domain::MAX_NAME_BYTES`] (stored before the limit existed): no store accepts one
/// now, so it is named before anything is copied.
///
/// # Errors
/// [`StoreError::Incompatible`] naming each long name (its start and its length).
pub fn refuse_long_names(snapshot: &Snapshot) -> Result<(), StoreError> {
    let max = lease_domain::MAX_NAME_BYTES;
    let mut long = Vec::new();
    let mut note = |what: &str, name: &str| {
        if name.len() > max {
            let start: String = name.chars().take(24).collect();
            long.push(format!("{what} {start:?}... ({} bytes)", name.len()));
        }
    };
    for record in &snapshot.jobs {
        note("job id", record.id.as_str());
        note("queue", record.job.queue.as_str());
        if let Some(owner) = &record.job.owner {
            note("owner", owner.as_str());
        }
    }
    for (id, _) in &snapshot.purged {
        note("purged job id", id.as_str());
    }
    if long.is_empty() {
        return Ok(());
    }
    Err(StoreError::Incompatible {
        path: "the source".to_owned(),
        reason: format!(
            "it holds {} name(s) longer than {max} bytes, which no store accepts: {}; shorten \
             or purge them, then migrate again (nothing was copied)",
            long.len(),
            long.join(", ")
        )
        .into(),
    })
}

/// Refuses a non-empty target of an import without `merge`.
///
/// # Errors
/// [`StoreError::Incompatible`] naming what the target holds.
pub fn refuse_unless_empty(
    target: &str,
    jobs: u64,
    marks: u64,
    merge: bool,
) -> Result<(), StoreError> {
    if merge || (jobs == 0 && marks == 0) {
        return Ok(());
    }
    Err(StoreError::Incompatible {
        path: target.to_owned(),
        reason: format!(
            "the target already holds {jobs} jobs and {marks} purge marks; migrate into an \
             empty store, or pass --merge to keep the larger fence of each job on both sides"
        )
        .into(),
    })
}
