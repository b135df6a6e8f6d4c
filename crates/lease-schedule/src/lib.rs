//! Periodic schedules over any lease store: the calendar (`calendar.rs`: cron expressions in
//! IANA time zones) and the scheduler, which fires each due tick of each schedule as one job.
//!
//! Any number of schedulers may run (in every `lease serve` and `lease work`, and `lease
//! schedule run-due` from cron) without a leader: each pass reads the schedules, decides with
//! the domain which due ticks to enqueue (`lease_domain::decide_ticks`, by the catch-up
//! policy), and fires them through the store's `fire_schedule`, which enqueues the ticks' jobs
//! and records the last tick in one transaction only while the schedule is as the pass read
//! it. A pass that lost the race writes nothing; a tick's job id is its schedule's name and the
//! tick's time, so even a job enqueued twice would be one job.

// Library and binary code may not unwrap, expect or panic on what it meets, nor export what is
// unreachable (each exception allowed in place with its reason); tests may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        unreachable_pub
    )
)]

mod calendar;

use std::sync::Arc;
use std::time::Duration;

use lease_domain::{
    EnqueueSpec, JobId, QueueName, Schedule, ScheduleName, Timestamp, decide_ticks, run_job_id,
    tick_job_id,
};
use lease_ports::StoreError;
use lease_ports::control::{Controlled, Fire};
use tokio_util::sync::CancellationToken;

pub use calendar::{Calendar, MAX_CRON_BYTES, is_zone};

/// What one tick made.
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    /// The schedule.
    pub schedule: ScheduleName,
    /// The newest due tick, now the schedule's last.
    pub tick: Timestamp,
    /// The jobs enqueued, each with whether it was new (by the catch-up policy, none for a
    /// skipped tick).
    pub jobs: Vec<(JobId, bool)>,
}

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pass {
    /// The schedules this pass fired.
    pub fired: Vec<Fired>,
    /// Schedules this pass could not read (a cron expression or zone another program stored),
    /// each with why.
    pub unreadable: Vec<(ScheduleName, String)>,
    /// The earliest tick after the pass's time, of every schedule.
    pub next: Option<Timestamp>,
}

/// The job of a schedule's tick: its spec, enqueued at the tick.
fn tick_job(schedule: &Schedule, tick: Timestamp) -> Result<(JobId, EnqueueSpec), StoreError> {
    Ok((
        tick_job_id(&schedule.spec.name, tick)?,
        schedule.spec.job_at(tick),
    ))
}

/// A run of schedule `name` asked for by hand at `now`, outside its ticks: its job, enqueued
/// now under [`run_job_id`] (runs asked for within one second are one job). The schedule's
/// ticks are untouched. `None` when there is no such schedule; else the job's id and whether
/// it was new.
///
/// # Errors
/// The store's error for reading the schedules or enqueueing the job.
pub async fn run_now<S: Controlled + ?Sized>(
    store: &S,
    name: &ScheduleName,
    now: Timestamp,
) -> Result<Option<Ran>, StoreError> {
    let Some(schedule) = store.schedule(name).await? else {
        return Ok(None);
    };
    let id = run_job_id(name, now)?;
    let inserted = store.enqueue_with(&id, &schedule.spec.job_at(now)).await?;
    Ok(Some(Ran {
        queue: schedule.spec.job.queue,
        id,
        inserted,
    }))
}

/// What a run by hand made.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    /// The queue of the job.
    pub queue: QueueName,
    /// The job's id.
    pub id: JobId,
    /// `false` when a run asked for in the same second had made it already.
    pub inserted: bool,
}

/// A schedule as every reader shows it (the API, the page, Python): its fields in plain values,
/// with its next tick as of a time. Each surface names these fields its own way; this is the
/// one place they are read out of a [`Schedule`].
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "openapi", derive(serde::Serialize, utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = ScheduleFields))]
pub struct ScheduleView {
    /// Its name.
    pub name: String,
    /// Its cron expression.
    pub cron: String,
    /// Its time zone.
    pub zone: String,
    /// The queue of its jobs.
    pub queue: String,
    /// Their priority.
    pub priority: i64,
    /// Their attempts, if set.
    pub max_attempts: Option<u32>,
    /// Their timeout in seconds, if set.
    pub timeout: Option<f64>,
    /// `latest`, `none` or `all:N`.
    pub catch_up: String,
    /// Counted by every change.
    pub version: u64,
    /// When it was made (Unix seconds).
    pub created: f64,
    /// The last tick fired, if any.
    pub last_tick: Option<f64>,
    /// The next tick after `now`, if its calendar has one.
    pub next_tick: Option<f64>,
    /// Its jobs' payload, if they have one (each surface shows it its own way).
    #[cfg_attr(feature = "openapi", serde(skip))]
    pub payload: Option<Vec<u8>>,
}

impl ScheduleView {
    /// `schedule` as read at `now`.
    #[must_use]
    pub fn of(schedule: &Schedule, now: Timestamp) -> Self {
        let spec = &schedule.spec;
        Self {
            name: spec.name.as_str().to_owned(),
            cron: spec.cron.clone(),
            zone: spec.zone.clone(),
            queue: spec.job.queue.as_str().to_owned(),
            priority: spec.job.priority,
            max_attempts: spec.job.max_attempts,
            timeout: spec.job.timeout.map(lease_domain::Ttl::get),
            catch_up: spec.catch_up.text(),
            version: schedule.version,
            created: schedule.created.get(),
            last_tick: schedule.last_tick.map(Timestamp::get),
            next_tick: next_tick(schedule, now).map(Timestamp::get),
            payload: spec.job.payload.as_ref().map(|p| p.as_bytes().to_vec()),
        }
    }
}

/// The next tick of a schedule after `now`, if its calendar can be read.
#[must_use]
pub fn next_tick(schedule: &Schedule, now: Timestamp) -> Option<Timestamp> {
    Calendar::of(&schedule.spec)
        .ok()?
        .next_after(if schedule.since() > now {
            schedule.since()
        } else {
            now
        })
}

/// One pass at `now` over every schedule of `store`.
///
/// # Errors
/// The store's error for reading the schedules or firing one (the schedules before it have
/// fired).
pub async fn run_due(store: &dyn Controlled, now: Timestamp) -> Result<Pass, StoreError> {
    let mut pass = Pass::default();
    for schedule in store.schedules().await? {
        let calendar = match Calendar::of(&schedule.spec) {
            Ok(calendar) => calendar,
            Err(e) => {
                pass.unreadable
                    .push((schedule.spec.name.clone(), e.to_string()));
                continue;
            }
        };
        if let Some(next) = calendar.next_after(now) {
            pass.next = Some(pass.next.map_or(next, |n| if next < n { next } else { n }));
        }
        let catch_up = schedule.spec.catch_up;
        let recent = calendar.recent(schedule.since(), now, catch_up.ticks_wanted());
        let Some(&newest) = recent.last() else {
            continue;
        };
        let jobs = decide_ticks(&recent, now, catch_up)
            .into_iter()
            .map(|tick| tick_job(&schedule, tick))
            .collect::<Result<Vec<_>, _>>()?;
        let fire = Fire {
            name: schedule.spec.name.clone(),
            version: schedule.version,
            last_tick: schedule.last_tick,
            tick: newest,
            jobs,
        };
        if let Some(inserted) = store.fire_schedule(&fire).await? {
            pass.fired.push(Fired {
                schedule: fire.name,
                tick: newest,
                jobs: fire
                    .jobs
                    .into_iter()
                    .map(|(id, _)| id)
                    .zip(inserted)
                    .collect(),
            });
        }
    }
    Ok(pass)
}

/// The clock a scheduler reads.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Runs passes until `shutdown`: each pass at the clock's time, then a sleep until the next
/// tick of any schedule, at most `recheck` (so a schedule made or changed since is seen within
/// it). A pass that failed (the store unreachable) is tried again after `recheck`; `observe`
/// sees every pass's result.
pub async fn run(
    store: Arc<dyn Controlled>,
    clock: Clock,
    recheck: Duration,
    shutdown: CancellationToken,
    observe: impl Fn(&Result<Pass, StoreError>) + Send,
) {
    loop {
        let now = clock();
        let answer = run_due(&*store, now).await;
        observe(&answer);
        let wait = match &answer {
            Ok(pass) => pass
                .next
                .map(|next| Duration::try_from_secs_f64(next.get() - now.get()).unwrap_or_default())
                .map_or(recheck, |until| until.min(recheck)),
            Err(_) => recheck,
        };
        // A tick is fired from its own time on: wake just after it, never in a tight loop.
        let wait = wait.max(Duration::from_millis(10)) + Duration::from_millis(5);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.cancelled() => return,
        }
    }
}
