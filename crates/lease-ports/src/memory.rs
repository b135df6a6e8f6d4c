//! The in-memory reference store: the lease rules over a map behind a mutex.
//!
//! It is the model the SQLite store is checked against; it keeps nothing across restarts.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use lease_domain::{Command, Fence, Job, JobId, JobResult, LeaseTerm, Owner, Timestamp};

use crate::{
    ClaimOutcome, FromOutcome, JobState, LeaseStore, StoreError, WriteOutcome, outcome_as,
};

/// A lease store held in process memory.
#[derive(Debug, Default)]
pub struct MemoryLeaseStore {
    jobs: Mutex<HashMap<JobId, Job>>,
}

impl MemoryLeaseStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn jobs(&self) -> Result<MutexGuard<'_, HashMap<JobId, Job>>, StoreError> {
        self.jobs
            .lock()
            .map_err(|_| StoreError::Unavailable("the in-memory store's lock is poisoned".into()))
    }

    /// Decides and stores one command under the lock; a refusal stores nothing.
    fn apply<T: FromOutcome>(&self, job: &JobId, command: Command) -> Result<T, StoreError> {
        let mut jobs = self.jobs()?;
        let (next, outcome) = command.decide(jobs.get(job));
        if let Some(next) = next {
            jobs.insert(job.clone(), next);
        }
        outcome_as(outcome)
    }
}

#[async_trait]
impl LeaseStore for MemoryLeaseStore {
    async fn enqueue(&self, job: &JobId) -> Result<bool, StoreError> {
        self.apply(job, Command::Enqueue)
    }

    async fn state(&self, job: &JobId) -> Result<Option<JobState>, StoreError> {
        Ok(self.jobs()?.get(job).map(|j| JobState::new(job, j.clone())))
    }

    async fn claim(
        &self,
        job: &JobId,
        owner: &Owner,
        term: LeaseTerm,
    ) -> Result<ClaimOutcome, StoreError> {
        self.apply(job, Command::Claim(owner.clone(), term))
    }

    async fn renew(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        term: LeaseTerm,
    ) -> Result<WriteOutcome, StoreError> {
        self.apply(job, Command::Renew(owner.clone(), fence, term))
    }

    async fn complete(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        result: &JobResult,
    ) -> Result<WriteOutcome, StoreError> {
        self.apply(
            job,
            Command::Complete(owner.clone(), fence, now, result.clone()),
        )
    }

    async fn release(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
    ) -> Result<WriteOutcome, StoreError> {
        self.apply(job, Command::Release(owner.clone(), fence))
    }
}
