//! Decorators: a store wrapped by another that sees every call on its way in and its answer on
//! its way out. [`Decorated`] implements the whole surface ([`crate::Store`] and
//! [`Transfer`]) once, from the one list of the store's methods (`surface.rs`), passing
//! each call to the wrapped store; what a decorator adds is its
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
    Command, EnqueueSpec, JobId, KeyId, QueueChange, QueueName, ScheduleName, ScheduleSpec, Status,
    Timestamp,
};
use tracing::Instrument;

use crate::audit::{AuditFilter, AuditTrail};
use crate::control::{Control, Fire};
use crate::keys::{KeyRecord, KeyStore};
use crate::overview::Overview;
use crate::signal::{EnqueueSignal, Wake};
use crate::surface::surface;
use crate::transfer::{Snapshot, Transfer};
use crate::{Applied, ClaimNext, LeaseStore, ListFilter, ManyWrite, StoreError};

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
    /// Runs `run` (the wrapped store's answer to the call [`Hooks::before`] let through with
    /// `ticket`) in the hooks' span, and gives [`Hooks::after`] its answer.
    async fn finish<T: Any + Send>(
        &self,
        ticket: H::Ticket,
        run: impl Future<Output = Result<T, StoreError>> + Send,
    ) -> Result<T, StoreError> {
        let span = self.hooks.span(&ticket);
        let started = Instant::now();
        let answer = run.instrument(span).await;
        let shown = answer.as_ref().map(|value| value as &dyn Any);
        self.hooks.after(ticket, shown, started.elapsed());
        answer
    }
}

/// Makes [`Decorated`]'s impls from the list of the store's methods: each method with a
/// [`Call`] goes through the hooks (what it is given is moved into the wrapped store, not
/// copied: the call the hooks saw ends before the work starts), each without one passes
/// straight through.
macro_rules! decorating {
    ({ $($trait:ident [$($required:tt)*] [$($provided:tt)*])* }
     { $($watched:ident [$($only:tt)*] [])* }) => {
        $(decorating!(@impl $trait [$($required)* $($provided)*]);)*
        $(decorating!(@impl $watched [$($only)*]);)*
    };
    (@impl LeaseStore [$($listed:tt)*]) => {
        decorating!(@methods LeaseStore [$($listed)*] [
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
                self.finish(ticket, self.inner.apply(job, command, then)).await
            }

            /// Each write goes through the hooks as an `apply` would, and those they let
            /// through go to the wrapped store together, so it can take them together (their
            /// work runs in no one write's span; each write's span still gets its answer).
            async fn apply_many(
                &self,
                writes: Vec<ManyWrite>,
            ) -> Vec<Result<Applied, StoreError>> {
                self.apply_together(writes).await
            }
        ]);
    };
    (@impl $trait:ident [$($listed:tt)*]) => {
        decorating!(@methods $trait [$($listed)*] []);
    };
    (@methods $trait:ident [$(
        fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty
            $(=> $variant:ident $(($($hook:expr),*))?)? $(, now $now:ident)?;
    )*] [$($written:tt)*]) => {
        #[async_trait]
        impl<S: $trait + ?Sized, H: Hooks> $trait for Decorated<S, H> {
            $($written)*
            $(
                async fn $name(&self, $($arg: $ty),*) -> Result<$ret, StoreError> {
                    decorating!(@call self $name($($arg),*) [$($variant $(($($hook),*))?)?])
                }
            )*
        }
    };
    (@call $self:ident $name:ident($($arg:ident),*) []) => {
        $self.inner.$name($($arg),*).await
    };
    (@call $self:ident $name:ident($($arg:ident),*) [$variant:ident $(($($hook:expr),*))?]) => {{
        let ticket = $self.hooks.before(&Call::$variant $(($($hook),*))?).await?;
        $self.finish(ticket, $self.inner.$name($($arg),*)).await
    }};
}

surface!(decorating);

impl<S: LeaseStore + ?Sized, H: Hooks> Decorated<S, H> {
    /// [`LeaseStore::apply_many`] through the hooks (see the impl).
    async fn apply_together(&self, writes: Vec<ManyWrite>) -> Vec<Result<Applied, StoreError>> {
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
