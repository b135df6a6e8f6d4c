//! The in-memory reference store: the lease rules over a map behind a mutex.
//!
//! It is the model the SQLite store is checked against; it keeps nothing across restarts.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use lease_domain::{
    Fence, Job, JobId, JobResult, LeaseTerm, Owner, Timestamp, decide_claim, decide_complete,
    decide_release, decide_renew,
};

use crate::{ClaimOutcome, JobState, LeaseStore, StoreError, WriteOutcome};

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

    /// Loads, decides and stores one write under the lock; a refusal stores nothing.
    fn write<T, R>(
        &self,
        job: &JobId,
        decide: impl FnOnce(Option<&Job>) -> Result<(Job, T), R>,
    ) -> Result<Result<T, R>, StoreError> {
        let mut jobs = self.jobs()?;
        Ok(decide(jobs.get(job)).map(|(next, answer)| {
            jobs.insert(job.clone(), next);
            answer
        }))
    }
}

#[async_trait]
impl LeaseStore for MemoryLeaseStore {
    async fn enqueue(&self, job: &JobId) -> Result<bool, StoreError> {
        let mut jobs = self.jobs()?;
        if jobs.contains_key(job) {
            return Ok(false);
        }
        jobs.insert(job.clone(), Job::new());
        Ok(true)
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
        self.write(job, |current| {
            decide_claim(current, owner, term).map(|next| {
                let fence = next.fence;
                (next, fence)
            })
        })
    }

    async fn renew(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        term: LeaseTerm,
    ) -> Result<WriteOutcome, StoreError> {
        self.write(job, |current| {
            decide_renew(current, owner, fence, term).map(|next| (next, ()))
        })
    }

    async fn complete(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
        now: Timestamp,
        result: &JobResult,
    ) -> Result<WriteOutcome, StoreError> {
        self.write(job, |current| {
            decide_complete(current, owner, fence, now, result).map(|next| (next, ()))
        })
    }

    async fn release(
        &self,
        job: &JobId,
        owner: &Owner,
        fence: Fence,
    ) -> Result<WriteOutcome, StoreError> {
        self.write(job, |current| {
            decide_release(current, owner, fence).map(|next| (next, ()))
        })
    }
}
