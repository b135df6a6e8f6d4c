//! Decorators: a store wrapped by another that sees every call on its way in and its answer on
//! its way out. [`Decorated`] implements the whole surface ([`crate::Store`] and
//! [`Transfer`]) once, passing each call to the wrapped store; what a decorator adds is its
//! [`Hooks`]: [`crate::observe::Observed`] (spans and metrics), the server tests' counting
//! store and the worker tests' faulty store are each a few lines of hooks, not a restatement
//! of every method.
//!
//! A hook sees a [`Call`] (the method and its arguments, borrowed) before the call is passed
//! on, and may answer it itself with an error (a fault) or wait (a slow or hung store); it then
//! sees the answer (downcast it to the method's return type) and how long the call took.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lease_domain::{
    Command, EnqueueSpec, Epoch, JobId, KeptCheckpoint, KeyId, KeyRefused, QueueChange, QueueName,
    QueueSettings, Schedule, ScheduleName, ScheduleSpec, Status, Throttle, Timestamp,
};
use tracing::Instrument;

use crate::audit::{AuditFilter, AuditRow, AuditTrail};
use crate::control::{Control, Fire};
use crate::keys::{KeyRecord, KeyStore};
use crate::overview::{DueRow, MinuteRow, Overview};
use crate::signal::{EnqueueSignal, Wake};
use crate::transfer::{Imported, Snapshot, Transfer};
use crate::{
    Applied, ClaimNext, JobRecord, Lease, LeaseStore, ListFilter, ManyWrite, StatsRow, StoreError,
};

/// One call to a store's surface, with its arguments, as a decorator's hooks see it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Call<'a> {
    /// [`LeaseStore::apply`].
    Apply {
        /// The job.
        job: &'a JobId,
        /// The command.
        command: &'a Command,
        /// The claim that follows it, if any.
        then: Option<&'a ClaimNext>,
    },
    /// [`LeaseStore::claim_next_with`].
    ClaimNext(&'a ClaimNext),
    /// [`LeaseStore::enqueue_many`].
    EnqueueMany(&'a [(JobId, EnqueueSpec)]),
    /// [`LeaseStore::record`].
    Record(&'a JobId),
    /// [`LeaseStore::purge`].
    Purge(Timestamp, &'a [Status]),
    /// [`LeaseStore::list`].
    List(&'a ListFilter),
    /// [`LeaseStore::stats`].
    Stats(Timestamp),
    /// [`LeaseStore::checkpoints`].
    Checkpoints(&'a JobId),
    /// [`LeaseStore::attempts`].
    Attempts(&'a JobId),
    /// [`LeaseStore::trace`].
    Trace(&'a JobId),
    /// [`LeaseStore::children`].
    Children(&'a JobId, usize),
    /// [`Control::change_queue`].
    ChangeQueue(&'a QueueName, &'a QueueChange),
    /// [`Control::queues`].
    Queues,
    /// [`Control::settings_of`].
    SettingsOf(&'a QueueName),
    /// [`Control::throttle`].
    Throttle(&'a QueueName, Timestamp),
    /// [`Control::group_loads`].
    GroupLoads(&'a QueueName, Timestamp, usize),
    /// [`Control::put_schedule`].
    PutSchedule(&'a ScheduleSpec, Timestamp),
    /// [`Control::remove_schedule`].
    RemoveSchedule(&'a ScheduleName),
    /// [`Control::schedules`].
    Schedules,
    /// [`Control::schedule`].
    Schedule(&'a ScheduleName),
    /// [`Control::fire_schedule`].
    FireSchedule(&'a Fire),
    /// [`AuditTrail::refusals`].
    Refusals(&'a AuditFilter),
    /// [`Overview::due`].
    Due(Timestamp),
    /// [`Overview::activity`].
    Activity(Timestamp),
    /// [`KeyStore::add_key`].
    AddKey(&'a KeyRecord),
    /// [`KeyStore::key`].
    Key(&'a KeyId),
    /// [`KeyStore::keys`].
    Keys,
    /// [`KeyStore::revoke_key`].
    RevokeKey(&'a KeyId, Timestamp),
    /// [`Transfer::export`].
    Export,
    /// [`Transfer::import`].
    Import(&'a Snapshot, bool),
}

/// What a decorator adds around the calls it passes on.
#[async_trait]
pub trait Hooks: Send + Sync {
    /// What [`Hooks::before`] hands on to [`Hooks::after`] (`()` when nothing).
    type Ticket: Send;

    /// Runs before `call` is passed on. An error is the call's answer, and the wrapped store
    /// never sees the call; a hook that waits delays it.
    async fn before(&self, call: &Call<'_>) -> Result<Self::Ticket, StoreError>;

    /// The span the wrapped store's work runs in (none by default).
    fn span(&self, ticket: &Self::Ticket) -> tracing::Span {
        let _ = ticket;
        tracing::Span::none()
    }

    /// Runs after the call with its answer (the method's return value as [`Any`]) and how
    /// long the wrapped store took.
    fn after(&self, ticket: Self::Ticket, answer: Result<&dyn Any, &StoreError>, took: Duration) {
        let _ = (ticket, answer, took);
    }
}

/// A store wrapped with hooks: every method of the surface goes through [`Hooks::before`],
/// the wrapped store and [`Hooks::after`]. The provided methods of each trait are not
/// restated: they call the required ones, which go through the hooks.
#[derive(Debug)]
pub struct Decorated<S: ?Sized, H> {
    inner: Arc<S>,
    hooks: H,
}

impl<S: ?Sized, H: Clone> Clone for Decorated<S, H> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            hooks: self.hooks.clone(),
        }
    }
}

impl<S: ?Sized, H> Decorated<S, H> {
    /// `inner` with `hooks` around every call.
    pub fn with(inner: Arc<S>, hooks: H) -> Self {
        Self { inner, hooks }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The hooks.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }
}

impl<S: ?Sized, H: Hooks> Decorated<S, H> {
    /// Runs `run` (the wrapped store's answer to `call`) between the hooks.
    async fn around<T: Any + Send>(
        &self,
        call: Call<'_>,
        run: impl Future<Output = Result<T, StoreError>> + Send,
    ) -> Result<T, StoreError> {
        let ticket = self.hooks.before(&call).await?;
        let span = self.hooks.span(&ticket);
        let started = Instant::now();
        let answer = run.instrument(span).await;
        let shown = answer.as_ref().map(|value| value as &dyn Any);
        self.hooks.after(ticket, shown, started.elapsed());
        answer
    }
}

#[async_trait]
impl<S: LeaseStore + ?Sized, H: Hooks> LeaseStore for Decorated<S, H> {
    async fn apply(
        &self,
        job: &JobId,
        command: Command,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        let ticket = self
            .hooks
            .before(&Call::Apply {
                job,
                command: &command,
                then: then.as_ref(),
            })
            .await?;
        // The command and the claim are moved into the wrapped store, not copied: the call
        // the hooks saw ends before the work starts.
        let span = self.hooks.span(&ticket);
        let started = Instant::now();
        let answer = self.inner.apply(job, command, then).instrument(span).await;
        let shown = answer.as_ref().map(|value| value as &dyn Any);
        self.hooks.after(ticket, shown, started.elapsed());
        answer
    }

    async fn claim_next_with(&self, claim: &ClaimNext) -> Result<Vec<Lease>, StoreError> {
        self.around(Call::ClaimNext(claim), self.inner.claim_next_with(claim))
            .await
    }

    /// Each write goes through the hooks as an `apply` would, and those they let through go to
    /// the wrapped store together, so it can take them together (their work runs in no one
    /// write's span; each write's span still gets its answer).
    async fn apply_many(&self, writes: Vec<ManyWrite>) -> Vec<Result<Applied, StoreError>> {
        let mut tickets = Vec::with_capacity(writes.len());
        let mut passed = Vec::with_capacity(writes.len());
        for (job, command, then) in writes {
            let call = Call::Apply {
                job: &job,
                command: &command,
                then: then.as_ref(),
            };
            match self.hooks.before(&call).await {
                Ok(ticket) => {
                    tickets.push(Ok(ticket));
                    passed.push((job, command, then));
                }
                Err(e) => tickets.push(Err(e)),
            }
        }
        let started = Instant::now();
        let mut answers = self.inner.apply_many(passed).await.into_iter();
        let took = started.elapsed();
        tickets
            .into_iter()
            .map(|ticket| {
                let ticket = ticket?;
                let answer = answers.next().unwrap_or_else(|| {
                    Err(StoreError::Corrupt(
                        "the store answered fewer writes than it was sent".into(),
                    ))
                });
                let shown = answer.as_ref().map(|value| value as &dyn Any);
                self.hooks.after(ticket, shown, took);
                answer
            })
            .collect()
    }

    async fn enqueue_many(&self, jobs: &[(JobId, EnqueueSpec)]) -> Result<Vec<bool>, StoreError> {
        self.around(Call::EnqueueMany(jobs), self.inner.enqueue_many(jobs))
            .await
    }

    async fn record(&self, job: &JobId) -> Result<Option<JobRecord>, StoreError> {
        self.around(Call::Record(job), self.inner.record(job)).await
    }

    async fn purge(&self, before: Timestamp, statuses: &[Status]) -> Result<u64, StoreError> {
        self.around(
            Call::Purge(before, statuses),
            self.inner.purge(before, statuses),
        )
        .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<JobRecord>, StoreError> {
        self.around(Call::List(filter), self.inner.list(filter))
            .await
    }

    async fn stats(&self, now: Timestamp) -> Result<Vec<StatsRow>, StoreError> {
        self.around(Call::Stats(now), self.inner.stats(now)).await
    }

    async fn checkpoints(&self, job: &JobId) -> Result<Vec<KeptCheckpoint>, StoreError> {
        self.around(Call::Checkpoints(job), self.inner.checkpoints(job))
            .await
    }

    async fn attempts(&self, job: &JobId) -> Result<lease_domain::Attempts, StoreError> {
        self.around(Call::Attempts(job), self.inner.attempts(job))
            .await
    }

    async fn trace(&self, job: &JobId) -> Result<Option<lease_domain::TraceContext>, StoreError> {
        self.around(Call::Trace(job), self.inner.trace(job)).await
    }

    async fn children(
        &self,
        job: &JobId,
        after: Option<&JobId>,
        limit: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        self.around(
            Call::Children(job, limit),
            self.inner.children(job, after, limit),
        )
        .await
    }
}

#[async_trait]
impl<S: Control + ?Sized, H: Hooks> Control for Decorated<S, H> {
    async fn change_queue(
        &self,
        queue: &QueueName,
        change: QueueChange,
    ) -> Result<QueueSettings, StoreError> {
        self.around(
            Call::ChangeQueue(queue, &change),
            self.inner.change_queue(queue, change.clone()),
        )
        .await
    }

    async fn queues(&self) -> Result<Vec<(QueueName, QueueSettings)>, StoreError> {
        self.around(Call::Queues, self.inner.queues()).await
    }

    // Provided, but a store may answer it without reading every queue: passed on as such.
    async fn settings_of(&self, queue: &QueueName) -> Result<QueueSettings, StoreError> {
        self.around(Call::SettingsOf(queue), self.inner.settings_of(queue))
            .await
    }

    async fn throttle(&self, queue: &QueueName, now: Timestamp) -> Result<Throttle, StoreError> {
        self.around(Call::Throttle(queue, now), self.inner.throttle(queue, now))
            .await
    }

    async fn group_loads(
        &self,
        queue: &QueueName,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<crate::control::GroupLoad>, StoreError> {
        self.around(
            Call::GroupLoads(queue, now, limit),
            self.inner.group_loads(queue, now, limit),
        )
        .await
    }

    async fn put_schedule(
        &self,
        spec: &ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        self.around(
            Call::PutSchedule(spec, now),
            self.inner.put_schedule(spec, now),
        )
        .await
    }

    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool, StoreError> {
        self.around(Call::RemoveSchedule(name), self.inner.remove_schedule(name))
            .await
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        self.around(Call::Schedules, self.inner.schedules()).await
    }

    // Provided, and passed on like `settings_of`.
    async fn schedule(&self, name: &ScheduleName) -> Result<Option<Schedule>, StoreError> {
        self.around(Call::Schedule(name), self.inner.schedule(name))
            .await
    }

    async fn fire_schedule(&self, fire: &Fire) -> Result<Option<Vec<bool>>, StoreError> {
        self.around(Call::FireSchedule(fire), self.inner.fire_schedule(fire))
            .await
    }
}

#[async_trait]
impl<S: AuditTrail + ?Sized, H: Hooks> AuditTrail for Decorated<S, H> {
    async fn refusals(&self, filter: &AuditFilter) -> Result<Vec<AuditRow>, StoreError> {
        self.around(Call::Refusals(filter), self.inner.refusals(filter))
            .await
    }
}

#[async_trait]
impl<S: Overview + ?Sized, H: Hooks> Overview for Decorated<S, H> {
    async fn due(&self, now: Timestamp) -> Result<Vec<DueRow>, StoreError> {
        self.around(Call::Due(now), self.inner.due(now)).await
    }

    async fn activity(&self, since: Timestamp) -> Result<Vec<MinuteRow>, StoreError> {
        self.around(Call::Activity(since), self.inner.activity(since))
            .await
    }
}

#[async_trait]
impl<S: KeyStore + ?Sized, H: Hooks> KeyStore for Decorated<S, H> {
    async fn add_key(&self, key: &KeyRecord) -> Result<Result<(), KeyRefused>, StoreError> {
        self.around(Call::AddKey(key), self.inner.add_key(key))
            .await
    }

    async fn key(&self, id: &KeyId) -> Result<Option<KeyRecord>, StoreError> {
        self.around(Call::Key(id), self.inner.key(id)).await
    }

    async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.around(Call::Keys, self.inner.keys()).await
    }

    async fn revoke_key(&self, id: &KeyId, now: Timestamp) -> Result<bool, StoreError> {
        self.around(Call::RevokeKey(id, now), self.inner.revoke_key(id, now))
            .await
    }
}

/// Signals are hints sent outside any transaction: passed on as they are, without hooks.
impl<S: EnqueueSignal + ?Sized, H: Send + Sync> EnqueueSignal for Decorated<S, H> {
    fn watch(&self, wake: Wake) -> bool {
        self.inner.watch(wake)
    }

    fn signal(&self, queue: &str, jobs: usize) {
        self.inner.signal(queue, jobs);
    }
}

#[async_trait]
impl<S: Transfer + ?Sized, H: Hooks> Transfer for Decorated<S, H> {
    async fn export(&self) -> Result<Snapshot, StoreError> {
        self.around(Call::Export, self.inner.export()).await
    }

    async fn import(&self, snapshot: &Snapshot, merge: bool) -> Result<Imported, StoreError> {
        self.around(
            Call::Import(snapshot, merge),
            self.inner.import(snapshot, merge),
        )
        .await
    }

    async fn epoch(&self) -> Result<Epoch, StoreError> {
        self.inner.epoch().await
    }

    async fn raise_epoch(&self, at_least: Epoch) -> Result<Epoch, StoreError> {
        self.inner.raise_epoch(at_least).await
    }

    async fn check_heads(&self, rebuild: bool) -> Result<crate::transfer::HeadCheck, StoreError> {
        self.inner.check_heads(rebuild).await
    }
}

/// Hooks that change nothing: a store passed through, as a base to test against.
#[derive(Debug, Clone, Copy, Default)]
pub struct PassThrough;

#[async_trait]
impl Hooks for PassThrough {
    type Ticket = ();

    async fn before(&self, _call: &Call<'_>) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryLeaseStore;
    use std::sync::Mutex;

    /// Hooks that refuse every stats call and note every call's name and answer.
    #[derive(Default)]
    struct Noting(Mutex<Vec<String>>);

    #[async_trait]
    impl Hooks for Noting {
        type Ticket = String;

        async fn before(&self, call: &Call<'_>) -> Result<String, StoreError> {
            match call {
                Call::Stats(_) => Err(StoreError::Unavailable("stats are off".into())),
                Call::Apply { job, .. } if job.as_str() == "faulty" => {
                    Err(StoreError::Unavailable("this job is off".into()))
                }
                Call::Apply { command, .. } => Ok(command.name().to_owned()),
                other => Ok(format!("{other:?}").chars().take(6).collect()),
            }
        }

        fn after(&self, ticket: String, answer: Result<&dyn Any, &StoreError>, _took: Duration) {
            let inserted = answer
                .ok()
                .and_then(|a| a.downcast_ref::<Applied>())
                .map(|a| format!(" {:?}", a.outcome));
            self.0
                .lock()
                .unwrap()
                .push(format!("{ticket}{}", inserted.unwrap_or_default()));
        }
    }

    #[tokio::test]
    async fn a_decorated_store_passes_every_call_through_its_hooks_and_a_fault_never_reaches_it() {
        let store = Decorated::with(Arc::new(MemoryLeaseStore::new()), Noting::default());
        let job = JobId::new("j").unwrap();
        assert!(store.enqueue(&job).await.unwrap());
        assert!(store.record(&job).await.unwrap().is_some());
        let refused = store.stats(Timestamp::new(1.0).unwrap()).await;
        assert!(
            matches!(refused, Err(StoreError::Unavailable(_))),
            "{refused:?}"
        );
        assert_eq!(
            *store.hooks().0.lock().unwrap(),
            ["enqueue Enqueued(true)", "Record"]
        );
        // A provided method goes through the required one, and so through the hooks.
        assert_eq!(store.state(&job).await.unwrap().unwrap().fence, 0);
        assert_eq!(store.hooks().0.lock().unwrap().len(), 3);
    }

    #[tokio::test]
    async fn many_writes_each_go_through_the_hooks_and_a_faulted_one_alone_never_reaches_the_store()
    {
        let store = Decorated::with(Arc::new(MemoryLeaseStore::new()), Noting::default());
        let (a, faulty) = (JobId::new("a").unwrap(), JobId::new("faulty").unwrap());
        let answers = store
            .apply_many(vec![
                (a.clone(), Command::Enqueue, None),
                (faulty.clone(), Command::Enqueue, None),
            ])
            .await;
        assert!(answers[0].is_ok(), "{:?}", answers[0]);
        assert!(
            matches!(answers[1], Err(StoreError::Unavailable(_))),
            "{:?}",
            answers[1]
        );
        assert!(store.inner().record(&a).await.unwrap().is_some());
        assert!(
            store.inner().record(&faulty).await.unwrap().is_none(),
            "the faulted write never reached the store"
        );
        assert_eq!(*store.hooks().0.lock().unwrap(), ["enqueue Enqueued(true)"]);
    }
}
