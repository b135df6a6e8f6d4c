//! What a worker reports: each run's `JobOutcome` and `JobReport`, the run's `Summary`,
//! and how a handler's result reaches the store (a completion, with the next claim when one is
//! wanted; a failure; a transient error retried until the lease would run out).

use std::sync::Arc;

use lease_domain::{ErrorText, JobId, JobResult, LeaseTerm, Timestamp};
use lease_ports::{Lease, StoreError};

use crate::ahead::{Held, Refill, Shared};
use crate::config::WorkerConfig;
use crate::context::HandlerResult;
use crate::context::Sealing;
use crate::outcome::{JobOutcome, JobReport};

/// What became of a job, told now or once its completion has committed.
pub(crate) enum Reported {
    Now(JobReport),
    /// The report, whose outcome the completion still committing answers (with prefetch, the
    /// slot runs its next job meanwhile).
    Later(JobReport, tokio::task::JoinHandle<JobOutcome>),
}

/// The outcome of a job's result, known now or once its completion has committed.
pub(crate) enum Finished {
    Now(JobOutcome),
    Later(tokio::task::JoinHandle<JobOutcome>),
}

/// The report of a completion that was committing, once it has.
pub(crate) async fn committed(
    mut report: JobReport,
    completion: tokio::task::JoinHandle<JobOutcome>,
) -> JobReport {
    report.outcome = completion.await.unwrap_or_else(|e| {
        JobOutcome::Unreported(format!(
            "the completion's task ended without an answer: {e}"
        ))
    });
    report
}

/// Stores the handler's result. While the worker is still claiming, the completion and the
/// claim of this slot's next job share one transaction (one commit); the next lease, if any,
/// is returned for the slot to run. With a lease claimed ahead, that one is returned at once and
/// the completion commits while it runs; the lease the completion claims is kept ahead.
pub(crate) async fn report_result(
    shared: &Arc<Shared>,
    lease: &Lease,
    result: &JobResult,
) -> (Finished, Option<Held>) {
    let config = &shared.config;
    let Ok(now) = Timestamp::new(shared.clock.now()) else {
        return (
            Finished::Now(JobOutcome::Unreported(
                "the clock is not a finite time".to_owned(),
            )),
            None,
        );
    };
    let term = match LeaseTerm::from_parts(now, config.ttl) {
        Ok(term) if !shared.stopping.is_cancelled() && shared.take(1) == 1 => term,
        _ => {
            let outcome = match shared
                .store
                .complete(&lease.job, &config.owner, lease.fence, now, result)
                .await
            {
                Ok(Ok(())) => JobOutcome::Completed,
                Ok(Err(refused)) => JobOutcome::Lost(format!("completion refused: {refused}")),
                Err(e) => JobOutcome::Unreported(e.to_string()),
            };
            return (Finished::Now(outcome), None);
        }
    };
    let ahead = shared.next_waiting();
    // The completion claims the slot's next job, or, when a lease held ahead runs next, one to
    // hold ahead in its place: none while the jobs are not short, so those held drain.
    let limit = usize::from(ahead.is_none() || shared.ahead_wanted() > 0);
    let pipelined = ahead.is_some();
    // A lease this completion claims to hold ahead counts as held while it is claimed, so the
    // claims ahead never hold more than `prefetch`.
    let refill = (pipelined && limit == 1).then(|| Refill::new(shared));
    let completion = {
        let (shared, lease, result) = (Arc::clone(shared), lease.clone(), result.clone());
        async move {
            let refill = refill;
            let config = &shared.config;
            let answer = shared
                .store
                .complete_and_claim_next(
                    &lease.job,
                    &config.owner,
                    lease.fence,
                    &result,
                    &config.queue,
                    term,
                    limit,
                )
                .await;
            let (completed, next) = match answer {
                Ok(answer) => answer,
                Err(e) => {
                    shared.give_back(1);
                    return (JobOutcome::Unreported(e.to_string()), None);
                }
            };
            let mut next = next
                .unwrap_or_default()
                .pop()
                .map(|next| Held::granted(next, shared.clock.now()));
            if next.is_none() {
                shared.give_back(1);
            }
            if pipelined && let Some(held) = next.take() {
                shared.keep_waiting(held).await;
            }
            drop(refill);
            let outcome = match completed {
                Ok(()) => JobOutcome::Completed,
                Err(refused) => JobOutcome::Lost(format!("completion refused: {refused}")),
            };
            (outcome, next)
        }
    };
    match ahead {
        Some(ahead) => {
            let completion = tokio::spawn(async move { completion.await.0 });
            (Finished::Later(completion), Some(ahead))
        }
        None => {
            let (outcome, next) = completion.await;
            (Finished::Now(outcome), next)
        }
    }
}

/// Reports what the handler answered: complete, or fail (a panic is a failure too).
pub(crate) async fn finish(
    shared: &Arc<Shared>,
    lease: &Lease,
    joined: Result<HandlerResult, tokio::task::JoinError>,
) -> (Finished, Option<Held>) {
    let outcome = match joined {
        Ok(Ok(result)) => match stored_result(&shared.config, &lease.job, result) {
            Ok(result) => match JobResult::new(result) {
                Ok(result) => return report_result(shared, lease, &result).await,
                Err(e) => format!("the handler's result cannot be stored: {e}"),
            },
            Err(e) => e,
        },
        Ok(Err(error)) => error,
        Err(e) if e.is_panic() => format!("the handler panicked: {}", panic_text(e)),
        Err(e) => format!("the handler did not finish: {e}"),
    };
    (
        Finished::Now(report_failure(shared, lease, outcome).await),
        None,
    )
}

/// The handler's result as it is stored: sealed for its job when the worker seals results.
pub(crate) fn stored_result(
    config: &WorkerConfig,
    job: &JobId,
    result: String,
) -> Result<String, String> {
    match Sealing::of(config).sealer("result", job)? {
        Some(keys) => keys
            .seal_result(job.as_str(), &result)
            .map_err(|e| e.to_string()),
        None => Ok(result),
    }
}

/// Fails the job with the handler's error (retried or dead by the store's rules).
pub(crate) async fn report_failure(shared: &Shared, lease: &Lease, error: String) -> JobOutcome {
    let config = &shared.config;
    let error = ErrorText::lossy(error);
    let now = match Timestamp::new(shared.clock.now()) {
        Ok(now) => now,
        Err(e) => return JobOutcome::Unreported(e.to_string()),
    };
    match shared
        .store
        .fail(
            &lease.job,
            &config.owner,
            lease.fence,
            now,
            &error,
            config.retry,
        )
        .await
    {
        Ok(Ok(failed)) => JobOutcome::Failed(failed),
        Ok(Err(refused)) => JobOutcome::Lost(format!("failure refused: {refused}")),
        Err(e) => JobOutcome::Unreported(e.to_string()),
    }
}

/// Whether a store error is worth waiting out (the store is unreachable or busy), rather than
/// one that will not change by waiting.
pub(crate) fn is_transient(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Unavailable(_) | StoreError::Indeterminate(_)
    )
}

pub(crate) fn panic_text(error: tokio::task::JoinError) -> String {
    let payload = error.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".to_owned())
}
