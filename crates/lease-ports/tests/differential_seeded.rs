//! The differential harness catches a seeded disagreement in each area it covers beyond the
//! single-job operations: fences next to `i64::MAX`, the store clock, `complete_and_claim_next`,
//! `stats` judged at several times, a migration mid-sequence, rows another program writes, and
//! a queue's settings.
//! Each fault sits in a store that is otherwise the reference store; the same sequence passes
//! against an honest copy, so the fault is what the harness saw.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use lease_ports::control::{Control, Fire};
use lease_ports::differential::{Fresh, Harness, Op, fresh_now};
use lease_ports::forward::{Forward, Forwarded};
use lease_ports::memory::MemoryLeaseStore;
use lease_ports::transfer::{Imported, Snapshot, Transfer};
use lease_ports::{
    Applied, ClaimNext, ClockMode, Command, Concurrency, EnqueueSpec, Fence, JobId, JobRecord,
    QueueChange, QueueName, QueueSettings, ScheduleName, ScheduleSpec, StatsRow, StoreError,
    Timestamp,
};

/// Where a [`Seeded`] store goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// None: the reference store as it is.
    Honest,
    /// An import stores `i64::MAX` as one less.
    FenceBelowMax,
    /// `complete_and_claim_next` completes but claims nothing.
    NoClaimAfterComplete,
    /// `stats` judges every status at time 10, whatever it is asked.
    StatsAtOneTime,
    /// `export` leaves out the purge marks.
    ExportWithoutMarks,
    /// A concurrency limit is stored one higher than asked.
    LimitOneHigher,
    /// An import leaves out the schedules' last ticks.
    ImportWithoutLastTicks,
}

/// The reference store with one fault.
struct Seeded {
    inner: Arc<MemoryLeaseStore>,
    fault: Fault,
}

fn seeded(fault: Fault) -> Fresh {
    fresh_now(move || {
        Box::new(Forwarded(Seeded {
            inner: Arc::new(MemoryLeaseStore::new()),
            fault,
        }))
    })
}

/// Only what each fault changes; every other call goes to the reference store as it is.
#[async_trait]
impl Forward for Seeded {
    fn to(&self) -> &dyn Transfer {
        &*self.inner
    }

    async fn apply(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        let then = then.map(|claim| ClaimNext {
            limit: match self.fault {
                Fault::NoClaimAfterComplete => 0,
                _ => claim.limit,
            },
            ..claim.clone()
        });
        self.to().apply(job, command, then).await
    }

    async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
        let now = match self.fault {
            Fault::StatsAtOneTime => Timestamp::new(10.0)?,
            _ => now,
        };
        self.to().stats(now).await
    }

    async fn export(&self) -> Result<Snapshot, StoreError> {
        let mut snapshot = self.to().export().await?;
        if self.fault == Fault::ExportWithoutMarks {
            snapshot.purged.clear();
        }
        Ok(snapshot)
    }

    async fn import(&self, snapshot: &Snapshot, merge: bool) -> Result<Imported, StoreError> {
        let mut snapshot = snapshot.clone();
        if self.fault == Fault::ImportWithoutLastTicks {
            for schedule in &mut snapshot.schedules {
                schedule.last_tick = None;
            }
        }
        if self.fault == Fault::FenceBelowMax {
            for record in &mut snapshot.jobs {
                if record.job.fence == Fence::MAX {
                    record.job.fence = Fence::new(Fence::MAX.get() - 1)?;
                }
            }
        }
        self.to().import(&snapshot, merge).await
    }

    async fn change_queue(
        &self,
        queue: &QueueName,
        change: QueueChange,
    ) -> Result<QueueSettings, StoreError> {
        let change = match (self.fault, change) {
            (Fault::LimitOneHigher, QueueChange::Concurrency(Some(n))) => {
                QueueChange::Concurrency(Concurrency::new(n.get() + 1))
            }
            (_, change) => change,
        };
        self.to().change_queue(queue, change).await
    }
}

/// Runs `ops` with the honest store and with `fault`: the first must agree, the second not.
async fn caught(fault: Fault, ops: &[Op]) {
    let honest = Harness::against_memory(seeded(Fault::Honest))
        .await
        .run_all(ops)
        .await;
    assert_eq!(honest, Ok(()), "the honest store disagrees");
    let seeded = Harness::against_memory(seeded(fault))
        .await
        .run_all(ops)
        .await;
    assert!(seeded.is_err(), "{fault:?} was not caught");
}

#[tokio::test]
async fn a_fence_stored_one_below_the_maximum_is_caught() {
    caught(Fault::FenceBelowMax, &[Op::Import(0, 2, 0)]).await;
}

#[tokio::test]
async fn complete_and_claim_next_that_claims_nothing_is_caught() {
    let ops = [
        Op::EnqueueWith(0, 0, 0, None, 3),
        Op::EnqueueWith(1, 0, 0, None, 3),
        Op::ClaimNext(0, 0, 0, 5, 1),
        Op::CompleteAndClaimNext(0, 0, 1, 1, 0, 1),
    ];
    caught(Fault::NoClaimAfterComplete, &ops).await;
}

#[tokio::test]
async fn stats_judged_at_the_wrong_time_are_caught() {
    let ops = [Op::Enqueue(0), Op::Claim(0, 0, 0, 7)];
    caught(Fault::StatsAtOneTime, &ops).await;
}

#[tokio::test]
async fn a_migration_that_loses_purge_marks_is_caught() {
    let ops = [
        Op::Enqueue(0),
        Op::Claim(0, 0, 0, 5),
        Op::Complete(0, 0, 1, 1, 0),
        Op::Purge(30, 1),
        Op::Migrate,
    ];
    caught(Fault::ExportWithoutMarks, &ops).await;
}

#[tokio::test]
async fn a_concurrency_limit_stored_otherwise_is_caught() {
    let ops = [
        Op::Queue(0, 3, 1),
        Op::EnqueueWith(0, 0, 0, None, 3),
        Op::EnqueueWith(1, 0, 0, None, 3),
        Op::ClaimNext(0, 0, 0, 5, 2),
    ];
    caught(Fault::LimitOneHigher, &ops).await;
}

#[tokio::test]
async fn a_migration_that_loses_a_schedules_last_tick_is_caught() {
    // A schedule is made and fired outside the op set; the migration must carry its last tick.
    let store = Arc::new(MemoryLeaseStore::new());
    let spec = ScheduleSpec {
        name: ScheduleName::new("s").unwrap(),
        cron: "* * * * *".to_owned(),
        zone: "UTC".to_owned(),
        job: EnqueueSpec::default(),
        catch_up: lease_ports::CatchUp::Latest,
    };
    let made = store
        .put_schedule(&spec, Timestamp::new(0.0).unwrap())
        .await
        .unwrap();
    let fire = Fire {
        name: spec.name.clone(),
        version: made.version,
        last_tick: None,
        tick: Timestamp::new(60.0).unwrap(),
        jobs: Vec::new(),
    };
    assert_eq!(store.fire_schedule(&fire).await.unwrap(), Some(Vec::new()));
    let lossy = Forwarded(Seeded {
        inner: Arc::new(MemoryLeaseStore::new()),
        fault: Fault::ImportWithoutLastTicks,
    });
    let honest = MemoryLeaseStore::new();
    lease_ports::transfer::migrate(&*store, &honest, false)
        .await
        .expect("an honest target keeps the last tick");
    let err = lease_ports::transfer::migrate(&*store, &lossy, false)
        .await
        .expect_err("the verification sees the lost tick");
    assert!(err.to_string().contains("schedule s"), "{err}");
}

#[tokio::test]
async fn a_store_that_ignores_its_clock_is_caught() {
    let clock: lease_ports::memory::StoreClock = Arc::new(|| Timestamp::new(5.25).unwrap());
    let store_clock = |clock: lease_ports::memory::StoreClock| -> Fresh {
        fresh_now(move || {
            Box::new(MemoryLeaseStore::with_clock(
                ClockMode::Store,
                Arc::clone(&clock),
            ))
        })
    };
    let ops = [Op::Enqueue(0), Op::Claim(0, 0, 5, 3)];
    let honest = Harness::new(
        store_clock(Arc::clone(&clock)),
        store_clock(Arc::clone(&clock)),
    )
    .await
    .run_all(&ops)
    .await;
    assert_eq!(honest, Ok(()));
    // The store under test decides with the caller's clock instead.
    let ignoring = Harness::new(store_clock(clock), seeded(Fault::Honest))
        .await
        .run_all(&ops)
        .await;
    assert!(
        ignoring.is_err(),
        "a store ignoring its clock was not caught"
    );
}

#[tokio::test]
async fn a_foreign_row_read_with_another_fence_is_caught() {
    let ops = [Op::Foreign(0, 1)];
    // The foreign writer's row as the store under test holds it: as written, or with its
    // fence lost.
    let honest_store = Arc::new(MemoryLeaseStore::new());
    let writer = Arc::clone(&honest_store);
    let mut honest = Harness::against_memory(shared(Arc::clone(&honest_store)))
        .await
        .with_foreign_writes(Box::new(move |id, fence| import(&writer, id, fence)));
    assert_eq!(honest.run_all(&ops).await, Ok(()));
    let lossy_store = Arc::new(MemoryLeaseStore::new());
    let writer = Arc::clone(&lossy_store);
    let mut lossy = Harness::against_memory(shared(lossy_store))
        .await
        .with_foreign_writes(Box::new(move |id, _| import(&writer, id, Fence::ZERO)));
    assert!(
        lossy.run_all(&ops).await.is_err(),
        "a lost fence was not caught"
    );
}

/// A harness factory that hands out the same memory store every time (so the test can write
/// to it as another program would).
fn shared(store: Arc<MemoryLeaseStore>) -> Fresh {
    fresh_now(move || {
        Box::new(Forwarded(Seeded {
            inner: Arc::clone(&store),
            fault: Fault::Honest,
        }))
    })
}

/// What a foreign writer's row amounts to, written into a memory store.
fn import(store: &MemoryLeaseStore, id: &JobId, fence: Fence) {
    let snapshot = Snapshot {
        jobs: vec![JobRecord {
            id: id.clone(),
            job: lease_ports::Job {
                fence,
                ..lease_ports::Job::new()
            },
        }],
        ..Snapshot::default()
    };
    // The memory store never waits, so one poll finishes the import.
    let mut import = std::pin::pin!(store.import(&snapshot, true));
    let waker = std::task::Waker::noop();
    let polled = import
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker));
    assert!(
        matches!(polled, std::task::Poll::Ready(Ok(_))),
        "{polled:?}"
    );
}
