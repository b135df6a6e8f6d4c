//! Forwarding: a store that changes a few of another store's calls and passes the rest on.
//!
//! A test double with a seeded fault, or a decorator that rewrites one argument, implements
//! [`Forward`]: it names the store it wraps ([`Forward::to`]) and overrides only the methods
//! it changes; every other method's default passes the call on unchanged. [`Forwarded`] makes
//! it a store: [`LeaseStore`], [`Control`] and [`Transfer`] (so also
//! [`crate::control::Controlled`]), their provided methods going through the required ones as
//! for any store. A decorator that only watches calls (spans, metrics, counting, faults on the
//! way in) is [`crate::decorate::Decorated`] with hooks instead.

use async_trait::async_trait;
use lease_domain::{
    Command, EnqueueSpec, Epoch, JobId, KeptCheckpoint, QueueChange, QueueName, QueueSettings,
    Schedule, ScheduleName, ScheduleSpec, Status, Throttle, Timestamp,
};

use crate::control::{Control, Fire, GroupLoad};
use crate::transfer::{Imported, Snapshot, Transfer};
use crate::{
    Applied, ClaimNext, JobRecord, Lease, LeaseStore, ListFilter, ManyWrite, StatsRow, StoreError,
};

/// The required methods of [`LeaseStore`], [`Control`] and [`Transfer`], each passing its
/// call to [`Forward::to`] unless overridden.
#[async_trait]
pub trait Forward: Send + Sync {
    /// The store every call that is not overridden goes to.
    fn to(&self) -> &dyn Transfer;

    /// [`LeaseStore::apply`].
    async fn apply(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        self.to().apply(job, command, then).await
    }

    /// [`LeaseStore::apply_many`]: each write through [`Forward::apply`], at once (so a
    /// forwarder that changes `apply` changes every write).
    async fn apply_many(&self, writes: Vec<ManyWrite>) -> Vec<Result<Applied, StoreError>> {
        crate::apply_each(writes, |(job, command, then)| async move {
            self.apply(&job, command, then).await
        })
        .await
    }

    /// [`LeaseStore::claim_next_with`].
    async fn claim_next_with(&self, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError> {
        self.to().claim_next_with(claim).await
    }

    /// [`LeaseStore::enqueue_many`].
    async fn enqueue_many(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError> {
        self.to().enqueue_many(jobs).await
    }

    /// [`LeaseStore::record`].
    async fn record(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError> {
        self.to().record(job).await
    }

    /// [`LeaseStore::purge`].
    async fn purge(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError> {
        self.to().purge(before, statuses).await
    }

    /// [`LeaseStore::list`].
    async fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
        self.to().list(filter).await
    }

    /// [`LeaseStore::stats`].
    async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
        self.to().stats(now).await
    }

    /// [`LeaseStore::checkpoints`].
    async fn checkpoints(&self, job: &JobId) -> Result<Vec<KeptCheckpoint>, StoreError> {
        self.to().checkpoints(job).await
    }

    /// [`LeaseStore::attempts`].
    async fn attempts(&self, job: &JobId) -> Result<lease_domain::Attempts, StoreError> {
        self.to().attempts(job).await
    }

    /// [`LeaseStore::trace`].
    async fn trace(&self, job: &JobId) -> Result<Option<lease_domain::TraceContext>, StoreError> {
        self.to().trace(job).await
    }

    /// [`LeaseStore::children`].
    async fn children(
        &self,
        job: &JobId,
        after: Option<&JobId>,
        limit: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        self.to().children(job, after, limit).await
    }

    /// [`Control::change_queue`].
    async fn change_queue(
        &self,
        queue: &QueueName,
        change: QueueChange,
    ) -> Result<QueueSettings, StoreError> {
        self.to().change_queue(queue, change).await
    }

    /// [`Control::queues`].
    async fn queues(&self) -> Result<Vec<(QueueName, QueueSettings)>, StoreError> {
        self.to().queues().await
    }

    /// [`Control::put_schedule`].
    async fn put_schedule(
        &self,
        spec: &ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        self.to().put_schedule(spec, now).await
    }

    /// [`Control::throttle`].
    async fn throttle(&self, queue: &QueueName, now: Timestamp) -> Result<Throttle, StoreError> {
        self.to().throttle(queue, now).await
    }

    /// [`Control::group_loads`].
    async fn group_loads(
        &self,
        queue: &QueueName,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<GroupLoad>, StoreError> {
        self.to().group_loads(queue, now, limit).await
    }

    /// [`Control::remove_schedule`].
    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool, StoreError> {
        self.to().remove_schedule(name).await
    }

    /// [`Control::schedules`].
    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        self.to().schedules().await
    }

    /// [`Control::fire_schedule`].
    async fn fire_schedule(&self, fire: &Fire) -> Result<Option<Vec<bool>>, StoreError> {
        self.to().fire_schedule(fire).await
    }

    /// [`Transfer::export`].
    async fn export(&self) -> Result<Snapshot, StoreError> {
        self.to().export().await
    }

    /// [`Transfer::import`].
    async fn import(&self, snapshot: &Snapshot, merge: bool) -> Result<Imported, StoreError> {
        self.to().import(snapshot, merge).await
    }

    /// [`Transfer::epoch`].
    async fn epoch(&self) -> Result<Epoch, StoreError> {
        self.to().epoch().await
    }

    /// [`Transfer::raise_epoch`].
    async fn raise_epoch(&self, at_least: Epoch) -> Result<Epoch, StoreError> {
        self.to().raise_epoch(at_least).await
    }

    /// [`Transfer::check_heads`].
    async fn check_heads(&self, rebuild: bool) -> Result<crate::transfer::HeadCheck, StoreError> {
        self.to().check_heads(rebuild).await
    }
}

/// A [`Forward`] as a store.
#[derive(Debug, Clone)]
pub struct Forwarded<F>(pub F);

#[async_trait]
impl<F: Forward> LeaseStore for Forwarded<F> {
    async fn apply(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        self.0.apply(job, command, then).await
    }
    async fn apply_many(&self, writes: Vec<ManyWrite>) -> Vec<Result<Applied, StoreError>> {
        self.0.apply_many(writes).await
    }
    async fn claim_next_with(&self, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError> {
        self.0.claim_next_with(claim).await
    }
    async fn enqueue_many(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError> {
        self.0.enqueue_many(jobs).await
    }
    async fn record(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError> {
        self.0.record(job).await
    }
    async fn purge(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError> {
        self.0.purge(before, statuses).await
    }
    async fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
        self.0.list(filter).await
    }
    async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
        self.0.stats(now).await
    }

    async fn checkpoints(&self, job: &JobId) -> Result<Vec<KeptCheckpoint>, StoreError> {
        self.0.checkpoints(job).await
    }

    async fn attempts(&self, job: &JobId) -> Result<lease_domain::Attempts, StoreError> {
        self.0.attempts(job).await
    }

    async fn trace(&self, job: &JobId) -> Result<Option<lease_domain::TraceContext>, StoreError> {
        self.0.trace(job).await
    }

    async fn children(
        &self,
        job: &JobId,
        after: Option<&JobId>,
        limit: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        self.0.children(job, after, limit).await
    }
}

#[async_trait]
impl<F: Forward> Control for Forwarded<F> {
    async fn change_queue(
        &self,
        queue: &QueueName,
        change: QueueChange,
    ) -> Result<QueueSettings, StoreError> {
        self.0.change_queue(queue, change).await
    }
    async fn queues(&self) -> Result<Vec<(QueueName, QueueSettings)>, StoreError> {
        self.0.queues().await
    }
    async fn put_schedule(
        &self,
        spec: &ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        self.0.put_schedule(spec, now).await
    }
    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool, StoreError> {
        self.0.remove_schedule(name).await
    }
    async fn throttle(&self, queue: &QueueName, now: Timestamp) -> Result<Throttle, StoreError> {
        self.0.throttle(queue, now).await
    }
    async fn group_loads(
        &self,
        queue: &QueueName,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<GroupLoad>, StoreError> {
        self.0.group_loads(queue, now, limit).await
    }
    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        self.0.schedules().await
    }
    async fn fire_schedule(&self, fire: &Fire) -> Result<Option<Vec<bool>>, StoreError> {
        self.0.fire_schedule(fire).await
    }
}

#[async_trait]
impl<F: Forward> Transfer for Forwarded<F> {
    async fn export(&self) -> Result<Snapshot, StoreError> {
        self.0.export().await
    }
    async fn import(&self, snapshot: &Snapshot, merge: bool) -> Result<Imported, StoreError> {
        self.0.import(snapshot, merge).await
    }
    async fn epoch(&self) -> Result<Epoch, StoreError> {
        self.0.epoch().await
    }
    async fn raise_epoch(&self, at_least: Epoch) -> Result<Epoch, StoreError> {
        self.0.raise_epoch(at_least).await
    }
    async fn check_heads(&self, rebuild: bool) -> Result<crate::transfer::HeadCheck, StoreError> {
        self.0.check_heads(rebuild).await
    }
}
