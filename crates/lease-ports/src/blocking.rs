//! The synchronous face of a store, for callers that have no async runtime and must not pay
//! for one per call (the problem statement's path functions, benchmarks of the raw loop, the
//! tests of synchronous callers). It is written once, here, from the one list of the store's
//! methods (`surface.rs`): a store that can answer on the caller's thread implements the small
//! [`BlockingCore`], and [`Blocking`] provides every other operation on top of it, as
//! [`LeaseStore`] provides its conveniences on top of its required core, each with the contract of
//! the [`LeaseStore`] method of the same name.

use lease_domain::{
    Command, EnqueueSpec, ErrorText, Fence, JobId, JobResult, LeaseTerm, Owner, ProgressText,
    QueueName, Renewal, Retry, Timestamp,
};

use crate::surface::surface;
use crate::{
    Applied, ClaimNext, ClaimOutcome, CompleteAndClaim, FailOutcome, JobState, Lease, StoreError,
    WriteOutcome, outcome_as,
};

#[cfg(doc)]
use crate::LeaseStore;

/// Makes [`BlockingCore`] and [`Blocking`]'s passing on from the list of the store's methods:
/// each [`LeaseStore`] method listed with a synchronous name (`now`) is required of the core
/// and passed on by the face.
macro_rules! blocking_face {
    ({ LeaseStore [$($listed:tt)*] [] $($others:tt)* } $watched:tt) => {
        blocking_face!(@face [$($listed)*]);
    };
    (@face [$(
        fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty
            $(=> $variant:ident $(($($hook:expr),*))?)? $(, now $now:ident)?;
    )*]) => {
        /// The required part of a store's synchronous face: what [`LeaseStore`] requires,
        /// answered on the caller's thread.
        pub trait BlockingCore: Send + Sync {
            /// As [`LeaseStore::apply`].
            ///
            /// # Errors
            /// As [`LeaseStore::apply`].
            fn apply_now(
                &self,
                job: &JobId,
                command: Command,
                then: Option<ClaimNext>,
            ) -> Result<Applied, StoreError>;

            /// As [`LeaseStore::state`]: provided through [`BlockingCore::record_now`]; a store
            /// that reads the contract's row alone more cheaply says so.
            ///
            /// # Errors
            /// As [`LeaseStore::state`].
            fn state_now(&self, job: &JobId) -> Result<Option<JobState>, StoreError> {
                Ok(self.record_now(job)?.map(|record| record.state()))
            }

            $(blocking_face!(@core $name($($arg: $ty),*) -> $ret $(, $now)?);)*
        }

        impl<S: BlockingCore + ?Sized> Blocking<'_, S> {
            $(blocking_face!(@pass $name($($arg: $ty),*) -> $ret $(, $now)?);)*
        }
    };
    (@core $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty) => {};
    (@core $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty, $now:ident) => {
        #[doc = concat!(
            "As [`LeaseStore::", stringify!($name), "`].\n\n",
            "# Errors\nAs [`LeaseStore::", stringify!($name), "`]."
        )]
        fn $now(&self, $($arg: $ty),*) -> Result<$ret, StoreError>;
    };
    (@pass $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty) => {};
    (@pass $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty, $now:ident) => {
        #[doc = concat!("See [`LeaseStore::", stringify!($name), "`].")]
        pub fn $name(&self, $($arg: $ty),*) -> Result<$ret, StoreError> {
            self.0.$now($($arg),*)
        }
    };
}

surface!(blocking_face);

/// A store's synchronous face (see the module documentation): every method has the contract
/// of the [`LeaseStore`] method of the same name, and its errors.
#[derive(Debug)]
pub struct Blocking<'a, S: ?Sized>(pub &'a S);

impl<S: ?Sized> Clone for Blocking<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: ?Sized> Copy for Blocking<'_, S> {}

impl<S: BlockingCore + ?Sized> Blocking<'_, S> {
    fn command<T: crate::FromOutcome>(
        &self,
        job: &JobId,
        command: Command,
    ) -> Result<T, StoreError> {
        outcome_as(self.0.apply_now(job, command, None)?.outcome)
    }

    /// See [`LeaseStore::enqueue`].
    pub fn enqueue(&self, job: &JobId) -> Result<bool, StoreError> {
        self.command(job, Command::Enqueue)
    }

    /// See [`LeaseStore::enqueue_with`].
    pub fn enqueue_with(&self, job: &JobId, spec: &EnqueueSpec) -> Result<bool, StoreError> {
        self.command(job, Command::EnqueueWith(spec.clone()))
    }

    /// See [`LeaseStore::state`].
    pub fn state(&self, job: &JobId) -> Result<Option<JobState>, StoreError> {
        self.0.state_now(job)
    }

    /// See [`LeaseStore::claim`].
    pub fn claim(
        &self,
        job: &JobId,
        owner: &Owner,
        term: LeaseTerm,
    ) -> Result<ClaimOutcome, StoreError> {
        self.command(job, Command::Claim(owner.clone(), term))
    }

    /// See [`LeaseStore::renew`].
    pub fn renew(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        term: LeaseTerm,
    ) -> Result<WriteOutcome, StoreError> {
        self.command(job, Command::Renew(owner.clone(), fence, term))
    }

    /// See [`LeaseStore::progress`].
    pub fn progress(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        renewal: Renewal,
        text: &ProgressText,
    ) -> Result<WriteOutcome, StoreError> {
        self.command(
            job,
            Command::Progress(owner.clone(), fence, renewal, text.clone()),
        )
    }

    /// See [`LeaseStore::hold_group`].
    pub fn hold_group(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<WriteOutcome, StoreError> {
        self.command(job, Command::HoldGroup(owner.clone(), fence, now, until))
    }

    /// See [`LeaseStore::complete`].
    pub fn complete(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        result: &JobResult,
    ) -> Result<WriteOutcome, StoreError> {
        self.command(
            job,
            Command::Complete(owner.clone(), fence, now, result.clone()),
        )
    }

    /// See [`LeaseStore::release`].
    pub fn release(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
    ) -> Result<WriteOutcome, StoreError> {
        self.command(job, Command::Release(owner.clone(), fence))
    }

    /// See [`LeaseStore::claim_next`].
    pub fn claim_next(
        &self,
        queue: &QueueName,
        owner: &Owner,
        term: LeaseTerm,
        limit: usize,
    ) -> Result<Vec<Lease>, StoreError> {
        self.0
            .claim_next_now(&ClaimNext::new(queue, owner, term, limit))
    }

    /// See [`LeaseStore::fail`].
    pub fn fail(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        error: &ErrorText,
        retry: Retry,
    ) -> Result<FailOutcome, StoreError> {
        self.command(
            job,
            Command::Fail(owner.clone(), fence, now, error.clone(), retry),
        )
    }

    /// See [`LeaseStore::cancel`].
    pub fn cancel(&self, job: &JobId, now: Timestamp) -> Result<WriteOutcome, StoreError> {
        self.command(job, Command::Cancel(now))
    }

    /// See [`LeaseStore::retry`].
    pub fn retry(&self, job: &JobId, now: Timestamp) -> Result<WriteOutcome, StoreError> {
        self.command(job, Command::Retry(now))
    }

    /// See [`LeaseStore::complete_and_claim_next`].
    #[allow(clippy::too_many_arguments)] // The port method's arguments, as they are there.
    pub fn complete_and_claim_next(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        result: &JobResult,
        queue: &QueueName,
        term: LeaseTerm,
        limit: usize,
    ) -> Result<CompleteAndClaim, StoreError> {
        let command = Command::Complete(owner.clone(), fence, term.now(), result.clone());
        let claim = ClaimNext::new(queue, owner, term, limit);
        let applied = self.0.apply_now(job, command, Some(claim))?;
        Ok((
            outcome_as(applied.outcome)?,
            applied.claimed.unwrap_or_else(|| Ok(Vec::new())),
        ))
    }
}
