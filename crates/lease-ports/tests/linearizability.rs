//! The linearizability checker: it accepts what the contract allows, and it catches seeded bugs
//! (a complete that skips the fence check; a claim answered before its write commits).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lease_ports::forward::{Forward, Forwarded};
use lease_ports::history::{Answer, Call, Event, Workload, check_linearizable, record};
use lease_ports::memory::MemoryLeaseStore;
use lease_ports::transfer::Transfer;
use lease_ports::{
    Applied, ClaimNext, Fence, JobId, JobResult, LeaseStore, LeaseTerm, Owner, StoreError,
    Timestamp,
};

fn job() -> JobId {
    JobId::new("j").unwrap()
}

fn owner(name: &str) -> Owner {
    Owner::new(name).unwrap()
}

fn claim(name: &str, now: f64) -> Call {
    Call::Claim(owner(name), LeaseTerm::new(now, 10.0).unwrap())
}

fn event(call: Call, answer: Option<Answer>, invoked: u64, returned: u64) -> Event {
    Event {
        job: job(),
        call,
        answer,
        invoked,
        returned,
    }
}

fn fence(n: u64) -> Fence {
    Fence::new(n).unwrap()
}

#[test]
fn overlapping_claims_may_be_ordered_either_way() {
    let history = [
        event(Call::Enqueue, Some(Answer::Enqueued(true)), 0, 1),
        event(claim("a", 0.0), Some(Answer::Claimed(None)), 2, 10),
        event(claim("b", 0.0), Some(Answer::Claimed(Some(fence(1)))), 3, 9),
    ];
    assert_eq!(check_linearizable(&history), Ok(1));
}

#[test]
fn two_winners_of_one_free_job_are_caught() {
    let history = [
        event(Call::Enqueue, Some(Answer::Enqueued(true)), 0, 1),
        event(
            claim("a", 0.0),
            Some(Answer::Claimed(Some(fence(1)))),
            2,
            10,
        ),
        event(claim("b", 0.0), Some(Answer::Claimed(Some(fence(1)))), 3, 9),
    ];
    assert!(check_linearizable(&history).is_err());
}

#[test]
fn real_time_order_is_respected() {
    // b's claim started after a's returned, so it cannot go first.
    let history = [
        event(Call::Enqueue, Some(Answer::Enqueued(true)), 0, 1),
        event(claim("a", 0.0), Some(Answer::Claimed(None)), 2, 3),
        event(claim("b", 0.0), Some(Answer::Claimed(Some(fence(1)))), 4, 5),
    ];
    assert!(check_linearizable(&history).is_err());
}

#[test]
fn a_call_that_never_returned_may_or_may_not_have_happened() {
    let took_effect = [
        event(Call::Enqueue, Some(Answer::Enqueued(true)), 0, 1),
        event(claim("a", 0.0), None, 2, 0),
        event(claim("b", 0.0), Some(Answer::Claimed(Some(fence(2)))), 3, 4),
    ];
    assert!(
        check_linearizable(&took_effect).is_err(),
        "b cannot get fence 2 at now 0 after a's live claim"
    );
    let took_effect = [
        event(Call::Enqueue, Some(Answer::Enqueued(true)), 0, 1),
        event(claim("a", 0.0), None, 2, 0),
        event(
            claim("b", 20.0),
            Some(Answer::Claimed(Some(fence(2)))),
            3,
            4,
        ),
    ];
    assert_eq!(check_linearizable(&took_effect), Ok(1));
    let never = [
        event(Call::Enqueue, Some(Answer::Enqueued(true)), 0, 1),
        event(claim("a", 0.0), None, 2, 0),
        event(claim("b", 0.0), Some(Answer::Claimed(Some(fence(1)))), 3, 4),
    ];
    assert_eq!(check_linearizable(&never), Ok(1));
}

#[test]
fn a_stale_completion_that_was_accepted_is_caught() {
    let history = [
        event(Call::Enqueue, Some(Answer::Enqueued(true)), 0, 1),
        event(claim("a", 0.0), Some(Answer::Claimed(Some(fence(1)))), 2, 3),
        event(
            claim("a", 10.0),
            Some(Answer::Claimed(Some(fence(2)))),
            4,
            5,
        ),
        event(
            Call::Complete(
                owner("a"),
                fence(1),
                Timestamp::new(11.0).unwrap(),
                JobResult::new("x").unwrap(),
            ),
            Some(Answer::Wrote(true)),
            6,
            7,
        ),
    ];
    assert!(check_linearizable(&history).is_err());
}

/// A store with one seeded bug, over the correct in-memory store.
struct Buggy {
    inner: Arc<MemoryLeaseStore>,
    bug: Bug,
}

#[derive(Clone, Copy)]
enum Bug {
    /// `complete` presents whatever fence is stored, so the caller's fence is never checked.
    NoFenceCheckOnComplete,
    /// `claim` answers from a snapshot at once and writes a moment later.
    AnswerBeforeCommit,
}

/// Only the bug's call changes; every other call goes to the correct store.
#[async_trait]
impl Forward for Buggy {
    fn to(&self) -> &dyn Transfer {
        &*self.inner
    }

    async fn apply(
        &self,
        job: &JobId,
        command: Call,
        then: Option<ClaimNext>,
    ) -> Result<Applied, StoreError> {
        let command = match (self.bug, command) {
            (Bug::AnswerBeforeCommit, Call::Claim(owner, term)) => {
                let snapshot = self.inner.record(job).await?.map(|r| r.job);
                let answer = lease_domain::decide_claim(snapshot.as_ref(), &owner, term)
                    .map(|next| next.fence);
                let (inner, job) = (Arc::clone(&self.inner), job.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let _ = inner.claim(&job, &owner, term).await;
                });
                return Ok(Applied {
                    outcome: lease_ports::Outcome::Claimed(answer),
                    claimed: None,
                });
            }
            // `complete` presents whatever fence is stored.
            (Bug::NoFenceCheckOnComplete, Call::Complete(owner, fence, now, result)) => {
                let fence = match self.inner.state(job).await? {
                    Some(state) => Fence::new(state.fence).unwrap(),
                    None => fence,
                };
                Call::Complete(owner, fence, now, result)
            }
            (_, command) => command,
        };
        self.inner.apply(job, command, then).await
    }
}

fn workload(seed: u64) -> Workload {
    Workload {
        workers: 6,
        calls_per_worker: 40,
        jobs: 3,
        seed,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn histories_of_the_memory_store_are_linearizable() {
    for seed in 1..=20 {
        let history = record(Arc::new(MemoryLeaseStore::new()), workload(seed)).await;
        assert_eq!(history.len(), 240);
        assert!(history.iter().all(|e| e.answer.is_some()));
        check_linearizable(&history).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
    }
}

async fn caught(bug: Bug) -> usize {
    let mut caught = 0;
    for seed in 1..=20 {
        let store = Forwarded(Buggy {
            inner: Arc::new(MemoryLeaseStore::new()),
            bug,
        });
        let history = record(Arc::new(store), workload(seed)).await;
        if check_linearizable(&history).is_err() {
            caught += 1;
        }
    }
    eprintln!("caught {caught} of 20 histories");
    caught
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_catches_a_complete_without_fence_check() {
    let caught = caught(Bug::NoFenceCheckOnComplete).await;
    assert!(caught > 0, "no history out of 20 was flagged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_catches_an_answer_before_commit() {
    let caught = caught(Bug::AnswerBeforeCommit).await;
    assert!(caught > 0, "no history out of 20 was flagged");
}
