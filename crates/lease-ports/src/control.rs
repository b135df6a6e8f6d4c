//! Control of queues and schedules, the operator's side of a store: a queue's settings (a
//! pause, a concurrency limit, a default timeout), which every `claim_next` of every store
//! reads in its own transaction, and periodic schedules, whose ticks a scheduler fires through
//! [`Control::fire_schedule`] (`lease-schedule` is the scheduler).

use async_trait::async_trait;
use lease_domain::{
    EnqueueSpec, GroupKey, Job, JobId, QueueChange, QueueName, QueueSettings, Schedule,
    ScheduleName, ScheduleSpec, Status, Throttle, Timestamp,
};

use crate::StoreError;

/// A scheduler's pass over one schedule: the ticks it decided to enqueue, as jobs, and the tick
/// to record as the schedule's last, provided the schedule is still as the pass read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fire {
    /// The schedule.
    pub name: ScheduleName,
    /// The version the pass read ([`Schedule::version`]).
    pub version: u64,
    /// The last tick the pass read ([`Schedule::last_tick`]).
    pub last_tick: Option<Timestamp>,
    /// The tick to record as the last one fired (the newest due tick).
    pub tick: Timestamp,
    /// The jobs of the ticks enqueued, each with its tick's id.
    pub jobs: Vec<(JobId, EnqueueSpec)>,
}

/// A store's queue settings and schedules.
///
/// # Contract
/// - A queue's settings MUST be read by every `claim_next` of that queue in the claim's own
///   transaction: no lease of a paused queue is granted once the pause is committed, and no
///   claim makes more of a queue's leases live at once than its concurrency limit, however many
///   claims race (running leases are never touched by a change).
/// - A queue's rates MUST be judged by every `claim_next` of that queue in the claim's own
///   transaction, from a log of the grants made that the claim extends before it commits: no
///   window of a rate's period holds more grants than its count, however many claims race.
/// - [`Control::fire_schedule`] MUST enqueue its jobs and record its tick in one transaction, and
///   only while the schedule has the version and last tick the pass read: of two passes that
///   read the same schedule, at most one fires.
///
/// # Errors
/// [`StoreError`]; every kind but [`StoreError::Indeterminate`] means "not applied".
#[async_trait]
pub trait Control: Send + Sync {
    /// Changes a queue's settings as [`lease_domain::decide_queue_change`] decides and returns
    /// them. Settings back at the default may be forgotten.
    async fn change_queue(
        &self,
        queue: &QueueName,
        change: QueueChange,
    ) -> Result<QueueSettings, StoreError>;

    /// The settings of every queue that has any (not the default), by queue name.
    async fn queues(&self) -> Result<Vec<(QueueName, QueueSettings)>, StoreError>;

    /// The settings of one queue: the default when it has none.
    async fn settings_of(&self, queue: &QueueName) -> Result<QueueSettings, StoreError> {
        Ok(self
            .queues()
            .await?
            .into_iter()
            .find(|(q, _)| q == queue)
            .map(|(_, s)| s)
            .unwrap_or_default())
    }

    /// Where the queue's rates stand at `now` ([`Throttle::of`] over the grants the store has
    /// logged): when the queue's rate lets a claim lease again, if it lets none now, and the
    /// same for each of its throttled groups. Clear for a queue without a rate.
    async fn throttle(&self, queue: &QueueName, now: Timestamp) -> Result<Throttle, StoreError>;

    /// The groups of `queue` with unfinished jobs at `now`, the busiest first
    /// ([`busiest`]), at most `limit`: how many of each group's jobs are running and how many
    /// wait (every other unfinished job: due, scheduled or waiting for a retry).
    async fn group_loads(
        &self,
        queue: &QueueName,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<GroupLoad>, StoreError>;

    /// Makes or replaces a schedule as [`lease_domain::decide_put_schedule`] decides, and
    /// returns it.
    async fn put_schedule(
        &self,
        spec: &ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError>;

    /// Removes a schedule; `false` when there was none. Jobs its ticks made are kept.
    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool, StoreError>;

    /// Every schedule, by name.
    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError>;

    /// One schedule, by name, or `None`.
    async fn schedule(&self, name: &ScheduleName) -> Result<Option<Schedule>, StoreError> {
        Ok(self
            .schedules()
            .await?
            .into_iter()
            .find(|s| &s.spec.name == name))
    }

    /// Fires a schedule as the contract says: `Some` with, per job, whether it was inserted
    /// (an id already there is left as it is), or `None` when the schedule changed since the
    /// pass read it (another pass fired first, or it was changed or removed): nothing written.
    async fn fire_schedule(&self, fire: &Fire) -> Result<Option<Vec<bool>>, StoreError>;
}

/// How loaded one group of a queue is: its unfinished jobs, running and waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLoad {
    /// The group.
    pub group: GroupKey,
    /// Its jobs that wait: unfinished and not held by a live lease (due, scheduled, waiting
    /// for a retry); a job waiting for its parents is not counted (it cannot run yet).
    pub backlog: u64,
    /// Its jobs held by a live lease.
    pub running: u64,
}

impl GroupLoad {
    /// Counts `job` (of this load's group) at `now`: running, waiting, or (finished) not at
    /// all.
    pub fn count(&mut self, job: &Job, now: Timestamp) {
        match job.status_at(now) {
            Status::Running => self.running += 1,
            Status::Waiting | Status::Done | Status::Dead | Status::Cancelled => {}
            Status::Pending => self.backlog += 1,
        }
    }
}

/// One of a queue's busiest groups as an operator sees it: its load, and whether it is
/// paused or throttled now.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupStanding {
    /// Its jobs waiting and running.
    pub load: GroupLoad,
    /// Whether it is paused now.
    pub paused: bool,
    /// When its pause ends, if it is paused until a time.
    pub paused_until: Option<Timestamp>,
    /// When its rate lets a claim lease its jobs again, if it lets none now.
    pub throttled_until: Option<Timestamp>,
}

/// The busiest `limit` groups of `queue` at `now` ([`Control::group_loads`]), each with
/// whether it is paused (by the queue's settings) or throttled (by its rate per group): what
/// `lease groups`, the API, Python and the page show.
///
/// # Errors
/// The store's error.
pub async fn busiest_groups(
    store: &(impl Control + ?Sized),
    queue: &QueueName,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<GroupStanding>, StoreError> {
    let loads = store.group_loads(queue, now, limit).await?;
    let settings = store.settings_of(queue).await?;
    let throttle = if settings.rate_per_group.is_some() {
        store.throttle(queue, now).await?
    } else {
        Throttle::default()
    };
    Ok(loads
        .into_iter()
        .map(|load| {
            let paused = settings.is_group_paused_at(&load.group, now);
            GroupStanding {
                paused,
                paused_until: settings
                    .paused_groups
                    .get(&load.group)
                    .copied()
                    .flatten()
                    .filter(|_| paused),
                throttled_until: throttle.groups.get(&load.group).copied(),
                load,
            }
        })
        .collect())
}

/// The busiest `limit` of `loads`: most unfinished jobs (running and waiting) first, then
/// most running, then by group; groups with none are left out.
#[must_use]
pub fn busiest(mut loads: Vec<GroupLoad>, limit: usize) -> Vec<GroupLoad> {
    loads.retain(|l| l.backlog + l.running > 0);
    loads.sort_by(|a, b| {
        (b.backlog + b.running)
            .cmp(&(a.backlog + a.running))
            .then(b.running.cmp(&a.running))
            .then_with(|| a.group.cmp(&b.group))
    });
    loads.truncate(limit);
    loads
}

impl Fire {
    /// The schedule as this fire leaves `current`, or `None` when it no longer is as the pass
    /// read it ([`lease_domain::decide_fire`]).
    #[must_use]
    pub fn decide(&self, current: Option<&Schedule>) -> Option<Schedule> {
        lease_domain::decide_fire(current, self.version, self.last_tick, self.tick)
    }
}

/// Every queue with settings, with where its rates stand at `now` (read only for a queue
/// that has a rate; clear for the others): what the gauges and the operators' page show.
///
/// # Errors
/// The store's error.
pub async fn queues_and_throttles(
    store: &(impl Control + ?Sized),
    now: Timestamp,
) -> Result<Vec<(QueueName, QueueSettings, lease_domain::Throttle)>, StoreError> {
    let mut out = Vec::new();
    for (queue, settings) in store.queues().await? {
        let throttle = if settings.limits_rate() {
            store.throttle(&queue, now).await?
        } else {
            lease_domain::Throttle::default()
        };
        out.push((queue, settings, throttle));
    }
    Ok(out)
}

/// A store with its queue settings and schedules: what the scheduler, the CLI and the network
/// service take.
pub trait Controlled: crate::LeaseStore + Control {}

impl<T: crate::LeaseStore + Control + ?Sized> Controlled for T {}
