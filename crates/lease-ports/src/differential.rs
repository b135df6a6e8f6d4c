//! The differential harness: random operation sequences (the seed's operations and the
//! queue's) whose every outcome, stored job, `list` and `stats` answer an adapter must render
//! exactly as the in-memory reference store does. Adapters drive it from a `proptest!`.
//!
//! It also checks an adapter's SQL candidate filter of `claim_next` against the domain rule:
//! a job the filter missed, or let through out of order, changes the leases. Imports put jobs
//! at fences next to `i64::MAX`; `complete_and_claim_next` runs as one call; `stats` is judged
//! at three times; and a [`Harness`] can move both stores into fresh ones mid-sequence
//! ([`crate::transfer::migrate`]) and go on with the copies. Queues are paused, limited and
//! given timeouts, per-group limits, ordered groups, rates and fair claims (most jobs have one
//! of three groups), finished jobs run again and progress reported, and each store's queue
//! settings are rendered with its jobs.

use futures::future::LocalBoxFuture;
use proptest::prelude::*;

use crate::memory::MemoryLeaseStore;
use crate::transfer::{Snapshot, Transfer, migrate};
use crate::{
    Backoff, Concurrency, EnqueueSpec, ErrorText, Fence, GroupKey, Job, JobId, JobRecord,
    JobResult, LeaseTerm, Limits, ListFilter, Owner, Payload, ProgressText, QueueChange, QueueName,
    Renewal, Retry, Status, Timestamp, Ttl,
};

/// One operation of a random sequence, with small numbers for ids, owners, fences and times.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // Each variant is the port method of the same name.
pub enum Op {
    Enqueue(u8),
    Claim(u8, u8, i8, u8),
    Renew(u8, u8, u8, i8, u8),
    Complete(u8, u8, u8, i8, u8),
    /// A release, or (`true`) the give-back of a lease never started.
    Release(u8, u8, u8, bool),
    EnqueueWith(u8, u8, i8, Option<i8>, u8),
    ClaimNext(u8, u8, i8, u8, u8),
    Fail(u8, u8, u8, i8, bool),
    Cancel(u8, i8),
    Retry(u8, i8),
    Purge(i8, u8),
    /// A merge import of one job at a fence picked from [`IMPORTED_FENCES`], in a queue.
    Import(u8, u8, u8),
    CompleteAndClaimNext(u8, u8, u8, i8, u8, u8),
    /// Both stores moved into fresh ones, which the sequence goes on with.
    Migrate,
    /// Another program inserts a row for a job that does not exist yet, with a fence from
    /// [`FOREIGN_FENCES`] (through [`Harness::with_foreign_writes`]; the reference imports it).
    Foreign(u8, u8),
    /// An enqueue that runs a finished job again (job, queue; every other one with a timeout).
    Rerun(u8, u8),
    /// A progress report (job, owner, fence, now, ttl; a ttl of 0 keeps the lease's end).
    Progress(u8, u8, u8, i8, u8),
    /// A change of a queue's settings (queue, which, a time or a limit): 0 pause, 1 pause until
    /// the time, 2 resume, 3 a limit of the number mod 3 (0 removes it), 4 a timeout, 5 none,
    /// 6-9 limits and group rules, 10 a rate of the number mod 3 a 5 s window (0 removes it),
    /// 11 the same per group.
    Queue(u8, u8, i8),
    /// A checkpoint (job, owner, fence, now, which of three names; its value names the op).
    Checkpoint(u8, u8, u8, i8, u8),
}

/// The fences an [`Op::Import`] gives its job: a small one, and the two at the top of the range.
pub const IMPORTED_FENCES: [u64; 3] = [3, Fence::MAX.get() - 1, Fence::MAX.get()];

/// The fences an [`Op::Foreign`] row has: a small one, and the last two of epoch 0. A row
/// written by another program raises no store's epoch, where an import raises it to that of
/// the fences it brings, so the reference (which imports the row) agrees with the store only
/// for fences of the epoch both are at.
pub const FOREIGN_FENCES: [u64; 3] = [3, u32::MAX as u64 - 1, u32::MAX as u64];

impl Op {
    /// The time the operation carries (its `now`), if any.
    #[must_use]
    pub fn time(&self) -> Option<i8> {
        match *self {
            Op::Claim(_, _, n, _)
            | Op::Renew(_, _, _, n, _)
            | Op::Complete(_, _, _, n, _)
            | Op::ClaimNext(_, _, n, _, _)
            | Op::Fail(_, _, _, n, _)
            | Op::Cancel(_, n)
            | Op::Retry(_, n)
            | Op::Progress(_, _, _, n, _)
            | Op::Checkpoint(_, _, _, n, _)
            | Op::CompleteAndClaimNext(_, _, _, n, _, _) => Some(n),
            _ => None,
        }
    }
}

/// Random operations over three jobs, three owners and two queues.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3u8).prop_map(Op::Enqueue),
        (0..3u8, 0..3u8, -5..30i8, 1..8u8).prop_map(|(j, o, n, t)| Op::Claim(j, o, n, t)),
        (0..3u8, 0..3u8, 0..5u8, -5..30i8, 1..8u8)
            .prop_map(|(j, o, f, n, t)| Op::Renew(j, o, f, n, t)),
        (0..3u8, 0..3u8, 0..5u8, -5..30i8, 0..3u8)
            .prop_map(|(j, o, f, n, r)| Op::Complete(j, o, f, n, r)),
        (0..3u8, 0..3u8, 0..5u8, proptest::bool::ANY)
            .prop_map(|(j, o, f, unstarted)| Op::Release(j, o, f, unstarted)),
        (
            0..3u8,
            0..2u8,
            -2..3i8,
            proptest::option::of(-5..30i8),
            0..4u8
        )
            .prop_map(|(j, q, p, r, m)| Op::EnqueueWith(j, q, p, r, m)),
        (0..2u8, 0..3u8, -5..30i8, 1..8u8, 0..4u8)
            .prop_map(|(q, o, n, t, l)| Op::ClaimNext(q, o, n, t, l)),
        (0..3u8, 0..3u8, 0..5u8, -5..30i8, any::<bool>())
            .prop_map(|(j, o, f, n, r)| Op::Fail(j, o, f, n, r)),
        (0..3u8, -5..30i8).prop_map(|(j, n)| Op::Cancel(j, n)),
        (0..3u8, -5..30i8).prop_map(|(j, n)| Op::Retry(j, n)),
        (-5..40i8, 0..4u8).prop_map(|(b, s)| Op::Purge(b, s)),
        (0..3u8, 0..3u8, 0..2u8).prop_map(|(j, k, q)| Op::Import(j, k, q)),
        (0..3u8, 0..3u8, 0..5u8, -5..30i8, 0..2u8, 0..4u8)
            .prop_map(|(j, o, f, n, q, l)| Op::CompleteAndClaimNext(j, o, f, n, q, l)),
        Just(Op::Migrate),
        (0..3u8, 0..2u8).prop_map(|(j, q)| Op::Rerun(j, q)),
        (0..3u8, 0..3u8, 0..5u8, -5..30i8, 0..8u8)
            .prop_map(|(j, o, f, n, t)| Op::Progress(j, o, f, n, t)),
        (0..2u8, 0..13u8, -5..30i8).prop_map(|(q, k, n)| Op::Queue(q, k, n)),
        (0..3u8, 0..3u8, 0..5u8, -5..30i8, 0..3u8)
            .prop_map(|(j, o, f, n, k)| Op::Checkpoint(j, o, f, n, k)),
    ]
}

/// [`op`] with rows another program inserts ([`Op::Foreign`]), without purges (a foreign row
/// under a purged id is outside every store's guarantee) or migrations (the foreign writer
/// knows one store).
pub fn op_with_foreign_writes() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => op().prop_filter("no purge or migration", |op| {
            !matches!(op, Op::Purge(..) | Op::Migrate)
        }),
        1 => (0..3u8, 0..3u8).prop_map(|(j, k)| Op::Foreign(j, k)),
    ]
}

fn queue(n: u8) -> QueueName {
    QueueName::new(format!("q{n}")).unwrap()
}

fn at(n: i8) -> Timestamp {
    Timestamp::new(f64::from(n)).unwrap()
}

fn job(n: u8) -> JobId {
    JobId::new(format!("job-{n}")).unwrap()
}

fn owner(n: u8) -> Owner {
    Owner::new(format!("w{n}")).unwrap()
}

fn fence(n: u8) -> Fence {
    Fence::new(u64::from(n)).unwrap()
}

/// Runs one operation and renders its outcome, refusal reason included, then every job's
/// record, a `list` and the `stats` at three times, as text: two stores agree iff the texts
/// are equal. [`Op::Migrate`] needs fresh stores: run it through a [`Harness`].
pub async fn run(store: &dyn Transfer, op: &Op) -> String {
    let outcome = outcome(store, op).await;
    format!("{outcome} then {}", contents(store).await)
}

async fn outcome(store: &dyn Transfer, op: &Op) -> String {
    match *op {
        Op::Enqueue(j) => format!("{:?}", store.enqueue(&job(j)).await),
        Op::Claim(j, o, n, t) => {
            let term = LeaseTerm::new(f64::from(n), f64::from(t)).unwrap();
            format!("{:?}", store.claim(&job(j), &owner(o), term).await)
        }
        Op::Renew(j, o, f, n, t) => {
            let term = LeaseTerm::new(f64::from(n), f64::from(t)).unwrap();
            format!(
                "{:?}",
                store.renew(&job(j), &owner(o), fence(f), term).await
            )
        }
        Op::Complete(j, o, f, n, r) => {
            let now = Timestamp::new(f64::from(n)).unwrap();
            let result = JobResult::new(format!("result-{r}")).unwrap();
            format!(
                "{:?}",
                store
                    .complete(&job(j), &owner(o), fence(f), now, &result)
                    .await
            )
        }
        Op::Release(j, o, f, false) => {
            format!("{:?}", store.release(&job(j), &owner(o), fence(f)).await)
        }
        Op::Release(j, o, f, true) => {
            format!("{:?}", store.give_back(&job(j), &owner(o), fence(f)).await)
        }
        Op::EnqueueWith(j, q, priority, run_at, max_attempts) => {
            let spec = EnqueueSpec {
                // A random DAG: a job of queue 1 runs after the other jobs its max_attempts
                // picks (bit 0 the next job, bit 1 the one after); a parent that is missing is
                // refused, those that are there decide whether it waits; half the time it runs
                // whatever its parents' end. (A cycle cannot be formed: a parent must be
                // stored first.)
                after: [(1u8, 1u8), (2, 2)]
                    .into_iter()
                    .filter(|(bit, _)| q == 1 && max_attempts & bit != 0)
                    .map(|(_, step)| job((j + step) % 3))
                    .collect(),
                on_parent_failure: if priority % 2 == 0 {
                    lease_domain::OnParentFailure::Run
                } else {
                    lease_domain::OnParentFailure::Cancel
                },
                queue: queue(q),
                priority: i64::from(priority),
                run_at: run_at.map(at),
                max_attempts: Some(u32::from(max_attempts)),
                payload: Some(Payload::new(vec![j, q], 16).unwrap()),
                // Every other job says when it was enqueued (kept as its `updated`).
                enqueued_at: (j % 2 == 0).then(|| at(priority / 2)),
                timeout: (j % 3 == 1).then(|| Ttl::new(5.5).unwrap()),
                replace_finished: false,
                // Three of four jobs are in one of three groups.
                group: (j % 4 != 0).then(|| GroupKey::new(format!("g{}", j % 3)).unwrap()),
                // Some are debounced (those that say when they were enqueued move).
                debounce: (j % 5 == 2).then(|| Ttl::new(3.0).unwrap()),
                // Every third enqueue carries a trace context of its own (the store keeps it
                // when the enqueue makes the job or runs it again).
                trace: (priority % 3 == 0).then(|| {
                    lease_domain::TraceContext::new(
                        &format!("00-{:032x}-{:016x}-01", u128::from(j) + 1, u64::from(q) + 1),
                        (q == 1).then_some("lease=1"),
                    )
                    .unwrap()
                }),
            };
            format!("{:?}", store.enqueue_with(&job(j), &spec).await)
        }
        Op::ClaimNext(q, o, n, t, limit) => {
            let term = LeaseTerm::new(f64::from(n), f64::from(t)).unwrap();
            let leases = store
                .claim_next(&queue(q), &owner(o), term, usize::from(limit))
                .await;
            format!("{leases:?}")
        }
        Op::Fail(j, o, f, n, retry) => {
            let retry = if retry {
                Retry::Backoff(Backoff::new(2.0, 2.0, 20.0, 0.5).unwrap())
            } else {
                Retry::No
            };
            let error = ErrorText::new(format!("e{j}")).unwrap();
            format!(
                "{:?}",
                store
                    .fail(&job(j), &owner(o), fence(f), at(n), &error, retry)
                    .await
            )
        }
        Op::Cancel(j, n) => format!("{:?}", store.cancel(&job(j), at(n)).await),
        Op::Retry(j, n) => format!("{:?}", store.retry(&job(j), at(n)).await),
        Op::Purge(before, which) => {
            let statuses: Vec<Status> = match which {
                0 => Status::ALL.to_vec(),
                1 => vec![Status::Done],
                2 => vec![Status::Dead, Status::Cancelled],
                _ => Vec::new(),
            };
            format!("{:?}", store.purge(at(before), &statuses).await)
        }
        Op::Import(j, k, q) => {
            let fence = Fence::new(IMPORTED_FENCES[usize::from(k % 3)]).unwrap();
            let snapshot = Snapshot {
                jobs: vec![JobRecord {
                    id: job(j),
                    job: Job {
                        fence,
                        queue: queue(q),
                        ..Job::new()
                    },
                }],
                ..Snapshot::default()
            };
            format!("{:?}", store.import(&snapshot, true).await)
        }
        Op::CompleteAndClaimNext(j, o, f, n, q, limit) => {
            let term = LeaseTerm::new(f64::from(n), 5.0).unwrap();
            let result = JobResult::new(format!("result-{j}")).unwrap();
            format!(
                "{:?}",
                store
                    .complete_and_claim_next(
                        &job(j),
                        &owner(o),
                        fence(f),
                        &result,
                        &queue(q),
                        term,
                        usize::from(limit)
                    )
                    .await
            )
        }
        Op::Rerun(j, q) => {
            let spec = EnqueueSpec {
                queue: queue(q),
                max_attempts: Some(2),
                timeout: (j % 2 == 0).then(|| Ttl::new(7.0).unwrap()),
                replace_finished: true,
                ..EnqueueSpec::default()
            };
            format!("{:?}", store.enqueue_with(&job(j), &spec).await)
        }
        Op::Progress(j, o, f, n, t) => {
            let renewal = if t == 0 {
                Renewal::Keep(at(n))
            } else {
                LeaseTerm::new(f64::from(n), f64::from(t)).unwrap().into()
            };
            let text = ProgressText::new(format!("{n} of {t}")).unwrap();
            format!(
                "{:?}",
                store
                    .progress(&job(j), &owner(o), fence(f), renewal, &text)
                    .await
            )
        }
        Op::Queue(q, kind, n) => {
            let change = match kind {
                0 => QueueChange::Pause(None),
                1 => QueueChange::Pause(Some(at(n))),
                2 => QueueChange::Resume,
                3 => QueueChange::Concurrency(Concurrency::new(u32::from(n.unsigned_abs() % 3))),
                4 => QueueChange::Timeout(Some(Ttl::new(3.0).unwrap())),
                5 => QueueChange::Timeout(None),
                6 => QueueChange::Limits(Limits::both(
                    Concurrency::new(u32::from(n.unsigned_abs() % 3)),
                    Ttl::new(2.0).ok(),
                )),
                7 => QueueChange::Limits(Limits {
                    per_group: Some(Concurrency::new(u32::from(n.unsigned_abs() % 3))),
                    ..Limits::default()
                }),
                8 => QueueChange::Limits(Limits {
                    ordered: Some(n % 2 == 0),
                    ..Limits::default()
                }),
                10 => QueueChange::Limits(Limits {
                    rate: Some(lease_domain::Rate::new(u32::from(n.unsigned_abs() % 3), 5.0).ok()),
                    ..Limits::default()
                }),
                12 => QueueChange::Limits(Limits {
                    fair: Some(n % 3 != 0),
                    ..Limits::default()
                }),
                11 => QueueChange::Limits(Limits {
                    rate_per_group: Some(
                        lease_domain::Rate::new(u32::from(n.unsigned_abs() % 3), 5.0).ok(),
                    ),
                    ..Limits::default()
                }),
                _ => QueueChange::Limits(Limits {
                    concurrency: Some(Concurrency::new(3)),
                    per_group: Some(Concurrency::new(1)),
                    ordered: Some(n > 10),
                    ..Limits::default()
                }),
            };
            format!("{:?}", store.change_queue(&queue(q), change).await)
        }
        Op::Checkpoint(j, o, f, n, k) => {
            let checkpoint = lease_domain::Checkpoint {
                name: lease_domain::CheckpointName::new(format!("step-{k}")).unwrap(),
                value: lease_domain::CheckpointValue::new(format!("{o}/{f}@{n}")).unwrap(),
            };
            format!(
                "{:?}",
                store
                    .checkpoint(&job(j), &owner(o), fence(f), at(n), &checkpoint)
                    .await
            )
        }
        Op::Migrate | Op::Foreign(..) => format!("{op:?} needs a harness"),
    }
}

/// Every job's record, checkpoints and trace context, the pending jobs `list` shows at 10, and the `stats` at -5, 10 and 30.
async fn contents(store: &dyn Transfer) -> String {
    let mut states = Vec::new();
    for j in 0..3 {
        states.push(format!("{:?}", store.record(&job(j)).await));
        states.push(format!("{:?}", store.checkpoints(&job(j)).await));
        states.push(format!("{:?}", store.trace(&job(j)).await));
    }
    let now = at(10);
    let filter = ListFilter {
        queue: None,
        status: Some(Status::Pending),
        limit: 10,
        now,
        after: None,
        group: None,
        prefix: None,
    };
    let listed = store.list(&filter).await.map(|records| {
        records
            .into_iter()
            .map(|r| r.id.as_str().to_owned())
            .collect::<Vec<_>>()
    });
    let mut stats = Vec::new();
    for when in [-5, 10, 30] {
        stats.push(format!("{:?}", store.stats(at(when)).await));
    }
    let mut throttles = Vec::new();
    for q in 0..2 {
        for when in [0, 10, 30] {
            throttles.push(format!("{:?}", store.throttle(&queue(q), at(when)).await));
        }
    }
    format!(
        "{} listed {listed:?} stats {} queues {:?} throttles {}",
        states.join(" "),
        stats.join(" "),
        store.queues().await,
        throttles.join(" ")
    )
}

/// Makes a fresh, empty store of one kind (the same clock mode as the first).
pub type Fresh = Box<dyn FnMut() -> LocalBoxFuture<'static, Box<dyn Transfer>>>;

/// A [`Fresh`] from a function that makes the store at once.
pub fn fresh_now(mut make: impl FnMut() -> Box<dyn Transfer> + 'static) -> Fresh {
    Box::new(move || {
        let store = make();
        Box::pin(async move { store })
    })
}

/// Inserts a row as another program would (the job id and its fence) into the store under test.
pub type ForeignWrite = Box<dyn FnMut(&JobId, Fence)>;

/// A reference store and a store under test, run through the same operations; on
/// [`Op::Migrate`] each is migrated into a fresh store of its kind, which takes its place.
pub struct Harness {
    reference: Box<dyn Transfer>,
    subject: Box<dyn Transfer>,
    fresh_reference: Fresh,
    fresh_subject: Fresh,
    foreign: Option<ForeignWrite>,
}

impl Harness {
    /// A harness over fresh stores from the two factories.
    pub async fn new(mut fresh_reference: Fresh, mut fresh_subject: Fresh) -> Self {
        Self {
            reference: fresh_reference().await,
            subject: fresh_subject().await,
            fresh_reference,
            fresh_subject,
            foreign: None,
        }
    }

    /// The same harness, running [`Op::Foreign`] on the store under test through `write`.
    #[must_use]
    pub fn with_foreign_writes(mut self, write: ForeignWrite) -> Self {
        self.foreign = Some(write);
        self
    }

    /// A harness whose reference is a plain [`MemoryLeaseStore`].
    pub async fn against_memory(fresh_subject: Fresh) -> Self {
        Self::new(
            fresh_now(|| Box::new(MemoryLeaseStore::new())),
            fresh_subject,
        )
        .await
    }

    /// Runs `op` on both stores and compares what they render.
    ///
    /// # Errors
    /// The two renderings, when they differ.
    pub async fn step(&mut self, op: &Op) -> Result<(), String> {
        let (expected, actual) = if let Op::Migrate = op {
            let expected = moved(&mut self.reference, &mut self.fresh_reference).await;
            let actual = moved(&mut self.subject, &mut self.fresh_subject).await;
            (expected, actual)
        } else if let Op::Foreign(j, k) = *op {
            let (id, fence) = (
                job(j),
                Fence::new(FOREIGN_FENCES[usize::from(k % 3)]).unwrap(),
            );
            let write = self
                .foreign
                .as_mut()
                .ok_or("Op::Foreign needs with_foreign_writes")?;
            if self.reference.record(&id).await.ok().flatten().is_none() {
                write(&id, fence);
                let snapshot = Snapshot {
                    jobs: vec![JobRecord {
                        id,
                        job: Job {
                            fence,
                            ..Job::new()
                        },
                    }],
                    ..Snapshot::default()
                };
                // What the foreign row amounts to, in the reference.
                let _ = self.reference.import(&snapshot, true).await;
            }
            (
                contents(&*self.reference).await,
                contents(&*self.subject).await,
            )
        } else {
            (
                run(&*self.reference, op).await,
                run(&*self.subject, op).await,
            )
        };
        if expected != actual {
            return Err(format!("expected {expected}\n  actual {actual}"));
        }
        // Every group with a ready job has a head at or before it, in each store that keeps
        // heads: a claim walking by heads meets every group in time.
        for store in [&self.reference, &self.subject] {
            let check = store.check_heads(false).await.map_err(|e| e.to_string())?;
            if !check.stray.is_empty() {
                return Err(format!(
                    "heads behind their group's first ready job: {check:?}"
                ));
            }
        }
        Ok(())
    }

    /// Runs every op in order, stopping at the first disagreement.
    ///
    /// # Errors
    /// The step, the op and both renderings of the first disagreement.
    pub async fn run_all(&mut self, ops: &[Op]) -> Result<(), String> {
        for (step, op) in ops.iter().enumerate() {
            self.step(op)
                .await
                .map_err(|diff| format!("step {step} {op:?}: {diff}"))?;
        }
        Ok(())
    }
}

/// Migrates `store` into a fresh one, which replaces it; renders what the migration did and
/// what the copy holds.
async fn moved(store: &mut Box<dyn Transfer>, fresh: &mut Fresh) -> String {
    let target = fresh().await;
    let migration = migrate(&**store, &*target, false).await;
    *store = target;
    format!("{migration:?} then {}", contents(&**store).await)
}
