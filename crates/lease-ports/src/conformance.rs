//! The conformance suite: the behaviour every [`LeaseStore`] adapter must show.
//!
//! Each check is a public `async fn` taking a fresh store; [`conformance_tests!`](crate::conformance_tests)
//! turns them into one named `#[tokio::test]` per check in the adapter's own test crate,
//! so a failure names the behaviour that broke. Checks panic with a message on a violation.

use std::sync::Arc;

use crate::control::Fire;
use crate::keys::{KeyRecord, KeyStore};
use crate::memory::MemoryLeaseStore;
use crate::transfer::{Snapshot, Transfer};
use crate::{
    Backoff, CatchUp, ClaimRefused, Concurrency, EnqueueSpec, ErrorText, Fence, GroupKey, Job,
    JobId, JobRecord, JobResult, JobState, Lease, LeaseStore, LeaseTerm, Limits, ListFilter, Owner,
    Payload, ProgressText, QueueChange, QueueName, QueueSettings, Renewal, Retry, ScheduleName,
    ScheduleSpec, StatsRow, Status, Timestamp, Ttl, WriteRefused,
};
use lease_domain::{KeyId, KeyRefused, Principal, Scope, TokenDigest};

pub use crate::workflow_conformance::export_and_import_carry_a_workflow;

/// A shared handle to the store under test.
pub type Store = Arc<dyn LeaseStore>;

/// A store whose contents can also be moved ([`Transfer`]), which the migration checks (and
/// those that plant jobs by importing them) use.
pub type TransferStore = Arc<dyn Transfer>;

/// A shared handle to a store under test with its [`Control`].
pub type ControlStore = Arc<dyn crate::control::Controlled>;

fn job(id: &str) -> JobId {
    JobId::new(id).expect("valid job id")
}

fn owner(name: &str) -> Owner {
    Owner::new(name).expect("valid owner")
}

fn term(now: f64, ttl: f64) -> LeaseTerm {
    LeaseTerm::new(now, ttl).expect("valid term")
}

fn at(now: f64) -> Timestamp {
    Timestamp::new(now).expect("finite time")
}

fn fence(n: u64) -> Fence {
    Fence::new(n).expect("fence in range")
}

fn result(text: &str) -> JobResult {
    JobResult::new(text).expect("valid result")
}

async fn state(store: &Store, id: &JobId) -> JobState {
    store
        .state(id)
        .await
        .expect("state reads")
        .expect("job exists")
}

async fn enqueued(store: &Store, id: &str) -> JobId {
    let id = job(id);
    assert!(store.enqueue(&id).await.expect("enqueue works"));
    id
}

async fn claimed(store: &Store, id: &JobId, who: &str, now: f64, ttl: f64) -> Fence {
    store
        .claim(id, &owner(who), term(now, ttl))
        .await
        .expect("claim reaches the store")
        .expect("claim is granted")
}

async fn complete_granted(store: &Store, id: &JobId, who: &str, f: Fence, now: f64, text: &str) {
    store
        .complete(id, &owner(who), f, at(now), &result(text))
        .await
        .expect("complete reaches the store")
        .expect("complete is granted");
}

/// `enqueue` inserts the default state once and returns `true`; again it returns `false`.
pub async fn enqueue_inserts_default_state_once(store: Store) {
    let id = enqueued(&store, "j").await;
    assert_eq!(
        state(&store, &id).await,
        JobState {
            id: "j".into(),
            owner: None,
            until: 0.0,
            fence: 0,
            result: None,
            done: false
        }
    );
    assert!(!store.enqueue(&id).await.expect("enqueue works"));
}

/// A second `enqueue` resets neither a lease in progress nor a finished job.
pub async fn enqueue_never_resets_a_lease_or_a_result(store: Store) {
    let live = enqueued(&store, "live").await;
    claimed(&store, &live, "a", 10.0, 5.0).await;
    let before = state(&store, &live).await;
    assert!(!store.enqueue(&live).await.expect("enqueue works"));
    assert_eq!(state(&store, &live).await, before);

    let done = enqueued(&store, "done").await;
    let f = claimed(&store, &done, "a", 10.0, 5.0).await;
    complete_granted(&store, &done, "a", f, 11.0, "r").await;
    let before = state(&store, &done).await;
    assert!(!store.enqueue(&done).await.expect("enqueue works"));
    assert_eq!(state(&store, &done).await, before);
}

/// `state` of a job that was never enqueued is `None`.
pub async fn state_of_missing_job_is_none(store: Store) {
    assert_eq!(store.state(&job("nope")).await.expect("state reads"), None);
}

/// A claim of a job that does not exist is refused and creates nothing.
pub async fn claim_of_missing_job_is_refused(store: Store) {
    let id = job("ghost");
    let outcome = store.claim(&id, &owner("a"), term(0.0, 1.0)).await;
    assert_eq!(
        outcome.expect("claim reaches the store"),
        Err(ClaimRefused::Missing)
    );
    assert_eq!(store.state(&id).await.expect("state reads"), None);
}

/// The first claim of a new job returns fence 1 and stores owner and `until = now + ttl`.
pub async fn first_claim_returns_fence_one(store: Store) {
    let id = enqueued(&store, "j").await;
    assert_eq!(claimed(&store, &id, "a", 100.5, 2.25).await, fence(1));
    let s = state(&store, &id).await;
    assert_eq!(
        (s.owner.as_deref(), s.until, s.fence),
        (Some("a"), 102.75, 1)
    );
}

/// A live lease is not claimable, not even by its own owner, and the refusal changes nothing.
pub async fn live_lease_is_not_claimable_even_by_its_owner(store: Store) {
    let id = enqueued(&store, "j").await;
    claimed(&store, &id, "a", 10.0, 5.0).await;
    let before = state(&store, &id).await;
    for who in ["a", "b"] {
        let outcome = store.claim(&id, &owner(who), term(14.999, 5.0)).await;
        assert!(matches!(
            outcome.expect("claim reaches the store"),
            Err(ClaimRefused::Live { .. })
        ));
    }
    assert_eq!(state(&store, &id).await, before);
}

/// A lease whose `until == now` is claimable, and the claim increments the fence.
pub async fn lease_is_claimable_when_until_equals_now(store: Store) {
    let id = enqueued(&store, "j").await;
    claimed(&store, &id, "a", 10.0, 5.0).await;
    assert_eq!(claimed(&store, &id, "b", 15.0, 5.0).await, fence(2));
    let s = state(&store, &id).await;
    assert_eq!((s.owner.as_deref(), s.until), (Some("b"), 20.0));
}

/// A done job is never claimable again.
pub async fn done_job_is_not_claimable(store: Store) {
    let id = enqueued(&store, "j").await;
    let f = claimed(&store, &id, "a", 0.0, 5.0).await;
    complete_granted(&store, &id, "a", f, 1.0, "r").await;
    let outcome = store.claim(&id, &owner("b"), term(1000.0, 5.0)).await;
    assert_eq!(
        outcome.expect("claim reaches the store"),
        Err(ClaimRefused::Done)
    );
}

/// `renew` extends only the live current lease.
pub async fn renew_extends_the_live_current_lease(store: Store) {
    let id = enqueued(&store, "j").await;
    let f = claimed(&store, &id, "a", 10.0, 5.0).await;
    let outcome = store.renew(&id, &owner("a"), f, term(14.0, 10.0)).await;
    assert_eq!(outcome.expect("renew reaches the store"), Ok(()));
    assert_eq!(state(&store, &id).await.until, 24.0);
}

/// `renew` by a wrong owner, a stale fence, after expiry (`until == now`) or of a done job
/// is refused and changes nothing; an expired lease is never revived.
pub async fn renew_is_refused_unless_current_and_live(store: Store) {
    let id = enqueued(&store, "j").await;
    let old = claimed(&store, &id, "a", 0.0, 5.0).await;
    let new = claimed(&store, &id, "a", 5.0, 5.0).await;
    let before = state(&store, &id).await;
    let cases = [
        ("b", new, 6.0, "wrong owner"),
        ("a", old, 6.0, "stale fence"),
        ("a", new, 10.0, "until == now"),
        ("a", new, 11.0, "expired"),
    ];
    for (who, f, now, why) in cases {
        let outcome = store.renew(&id, &owner(who), f, term(now, 100.0)).await;
        assert!(
            outcome.expect("renew reaches the store").is_err(),
            "renew with {why} was accepted"
        );
        assert_eq!(
            state(&store, &id).await,
            before,
            "renew with {why} changed the job"
        );
    }
}

/// `complete` by the live current lease stores the result and marks the job done.
pub async fn complete_stores_result_for_the_current_lease(store: Store) {
    let id = enqueued(&store, "j").await;
    let f = claimed(&store, &id, "a", 0.0, 5.0).await;
    let outcome = store
        .complete(&id, &owner("a"), f, at(4.0), &result("ok"))
        .await;
    assert_eq!(outcome.expect("complete reaches the store"), Ok(()));
    let s = state(&store, &id).await;
    assert_eq!(
        (s.result.as_deref(), s.done, s.fence),
        (Some("ok"), true, 1)
    );
}

/// The stale-worker story: A claims and stalls, B claims after expiry and completes,
/// A's late completion is refused and B's result survives.
pub async fn stale_completion_is_rejected_and_result_survives(store: Store) {
    let id = enqueued(&store, "j").await;
    let fa = claimed(&store, &id, "A", 0.0, 10.0).await;
    let fb = claimed(&store, &id, "B", 10.0, 10.0).await;
    assert!(fb > fa);
    store
        .complete(&id, &owner("B"), fb, at(12.0), &result("from B"))
        .await
        .expect("complete reaches the store")
        .expect("B completes");
    let late = store
        .complete(&id, &owner("A"), fa, at(5.0), &result("from A"))
        .await;
    assert_eq!(
        late.expect("complete reaches the store"),
        Err(WriteRefused::Stale {
            presented: fa,
            current: fb
        }),
        "a stale fence is stale first, whatever became of the job"
    );
    let s = state(&store, &id).await;
    assert_eq!(
        (s.result.as_deref(), s.owner.as_deref()),
        (Some("from B"), Some("B"))
    );
}

/// A stale holder cannot complete while the new holder is still working, either.
pub async fn stale_completion_is_rejected_while_new_lease_is_live(store: Store) {
    let id = enqueued(&store, "j").await;
    let fa = claimed(&store, &id, "A", 0.0, 10.0).await;
    claimed(&store, &id, "B", 10.0, 10.0).await;
    let before = state(&store, &id).await;
    let late = store
        .complete(&id, &owner("A"), fa, at(12.0), &result("from A"))
        .await;
    assert!(late.expect("complete reaches the store").is_err());
    assert_eq!(state(&store, &id).await, before);
}

/// `complete` at `until == now`, by a wrong owner or fence, or of a done job, is refused and the
/// stored result is preserved.
pub async fn complete_is_refused_unless_current_and_live(store: Store) {
    let id = enqueued(&store, "j").await;
    let f = claimed(&store, &id, "a", 0.0, 5.0).await;
    let before = state(&store, &id).await;
    let cases = [
        ("a", f, 5.0, "until == now"),
        ("b", f, 1.0, "wrong owner"),
        ("a", fence(2), 1.0, "wrong fence"),
    ];
    for (who, f, now, why) in cases {
        let outcome = store
            .complete(&id, &owner(who), f, at(now), &result("x"))
            .await;
        assert!(
            outcome.expect("complete reaches the store").is_err(),
            "complete with {why} was accepted"
        );
        assert_eq!(
            state(&store, &id).await,
            before,
            "complete with {why} changed the job"
        );
    }
    complete_granted(&store, &id, "a", f, 1.0, "first").await;
    let again = store
        .complete(&id, &owner("a"), f, at(1.0), &result("second"))
        .await;
    assert_eq!(
        again.expect("complete reaches the store"),
        Err(WriteRefused::Done {
            result_fence: Some(f)
        })
    );
    assert_eq!(state(&store, &id).await.result.as_deref(), Some("first"));
}

/// `release` clears owner and `until` and keeps the fence; the next claim gets a new fence.
pub async fn release_keeps_the_fence_and_next_claim_increments_it(store: Store) {
    let id = enqueued(&store, "j").await;
    let f = claimed(&store, &id, "a", 0.0, 5.0).await;
    let outcome = store.release(&id, &owner("a"), f).await;
    assert_eq!(outcome.expect("release reaches the store"), Ok(()));
    let s = state(&store, &id).await;
    assert_eq!((s.owner, s.until, s.fence, s.done), (None, 0.0, 1, false));
    assert_eq!(claimed(&store, &id, "a", 1.0, 5.0).await, fence(2));
}

/// The holder may release a lease that has expired, as long as nobody claimed it since.
pub async fn expired_lease_can_be_released_by_its_holder(store: Store) {
    let id = enqueued(&store, "j").await;
    let f = claimed(&store, &id, "a", 0.0, 5.0).await;
    let outcome = store.release(&id, &owner("a"), f).await;
    assert_eq!(outcome.expect("release reaches the store"), Ok(()));

    let id = enqueued(&store, "k").await;
    let fa = claimed(&store, &id, "a", 0.0, 5.0).await;
    claimed(&store, &id, "b", 6.0, 5.0).await;
    let before = state(&store, &id).await;
    let outcome = store.release(&id, &owner("a"), fa).await;
    assert!(outcome.expect("release reaches the store").is_err());
    assert_eq!(state(&store, &id).await, before);
}

/// `release` by a wrong owner or fence, of a done job, or of a missing job, is refused.
pub async fn release_is_refused_unless_current_holder(store: Store) {
    let id = enqueued(&store, "j").await;
    let f = claimed(&store, &id, "a", 0.0, 5.0).await;
    let before = state(&store, &id).await;
    for (who, f) in [("b", f), ("a", fence(7))] {
        let outcome = store.release(&id, &owner(who), f).await;
        assert!(outcome.expect("release reaches the store").is_err());
        assert_eq!(state(&store, &id).await, before);
    }
    complete_granted(&store, &id, "a", f, 1.0, "r").await;
    let done = store.release(&id, &owner("a"), f).await;
    assert_eq!(
        done.expect("release reaches the store"),
        Err(WriteRefused::Done {
            result_fence: Some(f)
        })
    );
    let missing = store.release(&job("ghost"), &owner("a"), f).await;
    assert_eq!(
        missing.expect("release reaches the store"),
        Err(WriteRefused::Missing)
    );
}

/// Fences of a job strictly increase across claims, releases and expiries and are never reused.
pub async fn fences_strictly_increase_and_are_never_reused(store: Store) {
    let id = enqueued(&store, "j").await;
    let mut seen = Vec::new();
    for round in 0..12_u32 {
        let now = f64::from(round) * 10.0;
        let who = if round % 2 == 0 { "a" } else { "b" };
        let f = claimed(&store, &id, who, now, 5.0).await;
        if round % 3 == 0 {
            let released = store.release(&id, &owner(who), f).await;
            assert_eq!(released.expect("release reaches the store"), Ok(()));
        }
        seen.push(f.get());
    }
    let expected: Vec<u64> = (1..=12).collect();
    assert_eq!(seen, expected);
}

/// Jobs are independent: a claim of one never changes another.
pub async fn jobs_are_independent(store: Store) {
    let a = enqueued(&store, "a").await;
    let b = enqueued(&store, "b").await;
    claimed(&store, &a, "w", 0.0, 5.0).await;
    claimed(&store, &a, "w", 5.0, 5.0).await;
    assert_eq!(claimed(&store, &b, "w", 0.0, 5.0).await, fence(1));
    assert_eq!(state(&store, &a).await.fence, 2);
}

/// Many concurrent claims of one free job give exactly one fence, in every round.
pub async fn concurrent_claims_have_exactly_one_winner(store: Store) {
    const ROUNDS: usize = 20;
    const CLAIMERS: usize = 8;
    for round in 0..ROUNDS {
        let id = enqueued(&store, &format!("race-{round}")).await;
        let owners: Vec<Owner> = (0..CLAIMERS).map(|i| owner(&format!("w{i}"))).collect();
        let outcomes =
            crate::claim_many(&*store as &dyn LeaseStore, &id, &owners, term(1.0, 30.0)).await;
        let mut winners = Vec::new();
        for (i, outcome) in outcomes.into_iter().enumerate() {
            match outcome.expect("no claim fails with a storage error") {
                Ok(f) => winners.push((i, f)),
                Err(ClaimRefused::Live { .. }) => {}
                Err(other) => panic!("unexpected refusal {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let (winner, f) = winners[0];
        assert_eq!(f, fence(1));
        let s = state(&store, &id).await;
        assert_eq!(s.owner, Some(format!("w{winner}")));
        assert_eq!(s.fence, 1);
    }
}

// ---- The work queue ----

fn queue(name: &str) -> QueueName {
    QueueName::new(name).expect("valid queue")
}

fn spec(queue_name: &str, priority: i64, run_at: Option<f64>, max_attempts: u32) -> EnqueueSpec {
    EnqueueSpec {
        after: Vec::new(),
        on_parent_failure: Default::default(),
        queue: queue(queue_name),
        priority,
        run_at: run_at.map(at),
        max_attempts: Some(max_attempts),
        payload: None,
        enqueued_at: None,
        timeout: None,
        replace_finished: false,
        group: None,
        debounce: None,
        trace: None,
    }
}

fn grouped(queue_name: &str, group: &str) -> EnqueueSpec {
    EnqueueSpec {
        group: Some(GroupKey::new(group).expect("valid group")),
        ..spec(queue_name, 0, None, 5)
    }
}

async fn enqueued_with(store: &Store, id: &str, spec: &EnqueueSpec) -> JobId {
    let id = job(id);
    assert!(store.enqueue_with(&id, spec).await.expect("enqueue works"));
    id
}

async fn cancel_granted(store: &Store, id: &JobId, now: f64) {
    store
        .cancel(id, at(now))
        .await
        .expect("cancel reaches the store")
        .expect("cancel is granted");
}

/// Sets what `limits` gives of queue `q`'s limits, as one change.
async fn limit(store: &ControlStore, q: &str, limits: Limits) -> QueueSettings {
    change(store, q, QueueChange::set(limits).expect("a change")).await
}

async fn next(store: &Store, q: &str, who: &str, now: f64, limit: usize) -> Vec<Lease> {
    store
        .claim_next(&queue(q), &owner(who), term(now, 10.0), limit)
        .await
        .expect("claim_next reaches the store")
}

/// `racers` claims of one lease each from `q` at `now`, all at once, by owners `r0`, `r1`...;
/// the leases they got between them.
async fn racing_claims(store: &Store, q: &str, racers: usize, now: f64) -> Vec<Lease> {
    let racing = (0..racers).map(|w| {
        let store = Arc::clone(store);
        async move {
            store
                .claim_next(&queue(q), &owner(&format!("r{w}")), term(now, 10.0), 1)
                .await
                .expect("claim_next reaches the store")
        }
    });
    futures::future::join_all(racing)
        .await
        .into_iter()
        .flatten()
        .collect()
}

fn ids(leases: &[Lease]) -> Vec<&str> {
    leases.iter().map(|l| l.job.as_str()).collect()
}

async fn status(store: &Store, id: &JobId, now: f64) -> Status {
    store
        .record(id)
        .await
        .expect("record reads")
        .expect("job exists")
        .job
        .status_at(at(now))
}

fn no_jitter(base: f64) -> Retry {
    Retry::Backoff(Backoff::new(base, 2.0, 1000.0, 0.0).expect("valid backoff"))
}

/// `enqueue_with` stores the queue fields; the seed's `state` of that job still shows the
/// default row, and a second enqueue changes nothing.
pub async fn enqueue_with_stores_the_queue_fields(store: Store) {
    let payload = Payload::new(vec![0, 159, 146, 150], 16).expect("small payload");
    let with = EnqueueSpec {
        payload: Some(payload),
        ..spec("mail", 7, Some(50.0), 3)
    };
    let id = enqueued_with(&store, "j", &with).await;
    let record = store
        .record(&id)
        .await
        .expect("record reads")
        .expect("job exists");
    let j = &record.job;
    assert_eq!(
        (
            j.queue.as_str(),
            j.priority,
            j.run_at,
            j.max_attempts,
            j.attempts
        ),
        ("mail", 7, Some(at(50.0)), 3, 0)
    );
    assert_eq!(j.payload.as_deref(), Some(&[0, 159, 146, 150][..]));
    assert_eq!(
        state(&store, &id).await,
        JobState::new(&id, lease_domain::Job::new())
    );
    assert!(
        !store
            .enqueue_with(&id, &EnqueueSpec::default())
            .await
            .expect("enqueue works")
    );
    assert_eq!(store.record(&id).await.expect("record reads"), Some(record));
    let plain = enqueued(&store, "plain").await;
    let record = store
        .record(&plain)
        .await
        .expect("record reads")
        .expect("job exists");
    assert_eq!(record.job, lease_domain::Job::new());
}

/// `claim_next` takes the highest priority first, then the earliest `run_at`, then enqueue order.
pub async fn claim_next_takes_priority_then_run_at_then_enqueue_order(store: Store) {
    for (id, priority, run_at) in [
        ("low", -1, None),
        ("fifo-1", 0, None),
        ("late", 0, Some(5.0)),
        ("fifo-2", 0, None),
        ("early", 0, Some(1.0)),
        ("urgent", 9, Some(8.0)),
    ] {
        enqueued_with(&store, id, &spec("q", priority, run_at, 5)).await;
    }
    let leases = next(&store, "q", "w", 10.0, 10).await;
    assert_eq!(
        ids(&leases),
        ["urgent", "fifo-1", "fifo-2", "early", "late", "low"]
    );
    assert!(leases.iter().all(|l| l.fence == fence(1) && l.attempt == 1));
    assert!(leases.iter().all(|l| l.until == at(20.0)));
}

/// `claim_next` leases only due jobs of its own queue that are not running, done, dead or
/// cancelled, and returns none when there are none.
pub async fn claim_next_leases_only_due_free_jobs_of_its_queue(store: Store) {
    enqueued_with(&store, "other-queue", &spec("elsewhere", 0, None, 5)).await;
    enqueued_with(&store, "scheduled", &spec("q", 0, Some(100.0), 5)).await;
    let running = enqueued_with(&store, "running", &spec("q", 0, None, 5)).await;
    claimed(&store, &running, "a", 0.0, 500.0).await;
    let done = enqueued_with(&store, "done", &spec("q", 0, None, 5)).await;
    let f = claimed(&store, &done, "a", 0.0, 50.0).await;
    complete_granted(&store, &done, "a", f, 1.0, "r").await;
    let cancelled = enqueued_with(&store, "cancelled", &spec("q", 0, None, 5)).await;
    cancel_granted(&store, &cancelled, 1.0).await;
    assert!(next(&store, "q", "w", 10.0, 10).await.is_empty());
    let due = enqueued_with(&store, "due-at-100", &spec("q", 0, Some(100.0), 5)).await;
    let leases = next(&store, "q", "w", 100.0, 10).await;
    assert_eq!(ids(&leases), ["scheduled", "due-at-100"]);
    assert_eq!(status(&store, &due, 100.0).await, Status::Running);
}

/// `claim_next` hands out at most `limit` leases, each job to one holder at a time.
pub async fn claim_next_respects_its_limit_and_never_leases_a_live_job_twice(store: Store) {
    for i in 0..3 {
        enqueued_with(&store, &format!("j{i}"), &spec("q", 0, None, 5)).await;
    }
    assert!(next(&store, "q", "w", 0.0, 0).await.is_empty());
    assert_eq!(ids(&next(&store, "q", "a", 0.0, 2).await), ["j0", "j1"]);
    assert_eq!(ids(&next(&store, "q", "b", 1.0, 2).await), ["j2"]);
    assert!(next(&store, "q", "c", 2.0, 2).await.is_empty());
}

/// An expired lease is claimed again by `claim_next` (a dead worker's job is rescued) and counts
/// as an attempt; once every attempt is used the job goes dead with "lease expired".
pub async fn an_expired_lease_counts_as_an_attempt_and_then_the_job_dies(store: Store) {
    let id = enqueued_with(&store, "j", &spec("q", 0, None, 2)).await;
    let first = next(&store, "q", "a", 0.0, 1).await;
    assert_eq!((first[0].fence, first[0].attempt), (fence(1), 1));
    let second = next(&store, "q", "b", 10.0, 1).await;
    assert_eq!((second[0].fence, second[0].attempt), (fence(2), 2));
    assert!(next(&store, "q", "c", 20.0, 1).await.is_empty());
    let record = store
        .record(&id)
        .await
        .expect("record reads")
        .expect("job exists");
    assert_eq!(record.job.status_at(at(20.0)), Status::Dead);
    assert_eq!(
        record.job.error.as_deref(),
        Some(lease_domain::LEASE_EXPIRED)
    );
    assert_eq!(record.job.fence, fence(2));
    let late = store
        .complete(&id, &owner("b"), fence(2), at(19.0), &result("late"))
        .await;
    assert_eq!(
        late.expect("complete reaches the store"),
        Err(WriteRefused::Dead)
    );
}

/// A lease given back unstarted hands back the attempt its claim counted: a job on its last
/// attempt is leased again (at the next fence, the same attempt), where a plain release of the
/// same lease leaves the job to be buried; only the holder of the current fence can give back.
pub async fn a_lease_given_back_unstarted_hands_back_its_attempt(store: Store) {
    let given = enqueued_with(&store, "given", &spec("g", 0, None, 1)).await;
    let lease = next(&store, "g", "a", 0.0, 1).await;
    assert_eq!((lease[0].fence, lease[0].attempt), (fence(1), 1));
    let stale = store.give_back(&given, &owner("b"), fence(1)).await;
    assert!(
        matches!(
            stale.expect("give back reaches the store"),
            Err(WriteRefused::NotOwner { .. })
        ),
        "another owner cannot give the lease back"
    );
    let back = store.give_back(&given, &owner("a"), fence(1)).await;
    assert_eq!(back.expect("give back reaches the store"), Ok(()));
    let again = next(&store, "g", "b", 1.0, 1).await;
    assert_eq!(
        (again[0].job.as_str(), again[0].fence, again[0].attempt),
        ("given", fence(2), 1),
        "leased again at the next fence, on the attempt it had not used"
    );
    let released = enqueued_with(&store, "released", &spec("r", 0, None, 1)).await;
    let lease = next(&store, "r", "a", 0.0, 1).await;
    let back = store.release(&released, &owner("a"), lease[0].fence).await;
    assert_eq!(back.expect("release reaches the store"), Ok(()));
    assert!(next(&store, "r", "b", 1.0, 1).await.is_empty());
    let record = store
        .record(&released)
        .await
        .expect("record reads")
        .expect("job exists");
    assert_eq!(record.job.status_at(at(1.0)), Status::Dead);
}

/// `claim` by id refuses dead, cancelled and not-yet-due jobs, but never counts or applies the
/// attempt limit.
pub async fn claim_by_id_refuses_dead_cancelled_and_scheduled_jobs_but_ignores_attempts(
    store: Store,
) {
    let scheduled = enqueued_with(&store, "scheduled", &spec("q", 0, Some(5.0), 5)).await;
    let refused = store.claim(&scheduled, &owner("a"), term(4.0, 1.0)).await;
    assert_eq!(
        refused.expect("claim reaches the store"),
        Err(ClaimRefused::NotDue { run_at: at(5.0) })
    );
    let cancelled = enqueued_with(&store, "cancelled", &spec("q", 0, None, 5)).await;
    cancel_granted(&store, &cancelled, 0.0).await;
    let refused = store.claim(&cancelled, &owner("a"), term(1.0, 1.0)).await;
    assert_eq!(
        refused.expect("claim reaches the store"),
        Err(ClaimRefused::Cancelled)
    );
    let once = enqueued_with(&store, "once", &spec("q", 0, None, 1)).await;
    for round in 0..4_u32 {
        let f = claimed(&store, &once, "a", f64::from(round) * 10.0, 5.0).await;
        assert_eq!(f.get(), u64::from(round) + 1);
    }
    let record = store
        .record(&once)
        .await
        .expect("record reads")
        .expect("job exists");
    assert_eq!(record.job.attempts, 0);
    let f = claimed(&store, &once, "a", 100.0, 5.0).await;
    let boom = ErrorText::new("boom").expect("valid error");
    store
        .fail(&once, &owner("a"), f, at(101.0), &boom, Retry::No)
        .await
        .expect("fail reaches the store")
        .expect("fail is granted");
    let refused = store.claim(&once, &owner("a"), term(200.0, 1.0)).await;
    assert_eq!(
        refused.expect("claim reaches the store"),
        Err(ClaimRefused::Dead)
    );
}

/// Every attempt is kept when it ends, with its fence, owner, start, end and how it ended: an
/// expired lease another claim took is lost at its deadline (and a late write of it changes
/// nothing), a failure keeps its error, a release its holder, a completion (with the next
/// claim, the queue loop's way) its time; the attempt under way is the job's row, not kept.
pub async fn each_ended_attempt_is_kept_with_its_fence_owner_times_and_end(store: Store) {
    use lease_domain::AttemptEnd;
    let id = enqueued_with(&store, "j", &spec("q", 0, None, 5)).await;
    let never = enqueued_with(&store, "never", &spec("other", 0, None, 5)).await;
    let first = next(&store, "q", "a", 0.0, 1).await.remove(0);
    assert!(
        store
            .attempts(&id)
            .await
            .expect("attempts read")
            .kept
            .is_empty()
    );
    let second = next(&store, "q", "b", 20.0, 1).await.remove(0);
    let late = store
        .complete(&id, &owner("a"), first.fence, at(21.0), &result("late"))
        .await
        .expect("complete reaches the store");
    assert!(late.is_err(), "a's late completion is refused");
    let boom = ErrorText::new("boom").expect("valid error");
    store
        .fail(
            &id,
            &owner("b"),
            second.fence,
            at(22.0),
            &boom,
            no_jitter(1.0),
        )
        .await
        .expect("fail reaches the store")
        .expect("fail is granted");
    let third = store
        .claim(&id, &owner("c"), term(24.0, 10.0))
        .await
        .expect("claim reaches the store")
        .expect("claim is granted");
    store
        .release(&id, &owner("c"), third)
        .await
        .expect("release reaches the store")
        .expect("release is granted");
    let fourth = next(&store, "q", "d", 25.0, 1).await.remove(0);
    let (done, _) = store
        .complete_and_claim_next(
            &id,
            &owner("d"),
            fourth.fence,
            &result("ok"),
            &queue("q"),
            term(26.0, 10.0),
            1,
        )
        .await
        .expect("complete_and_claim_next reaches the store");
    done.expect("the completion is granted");
    let kept = store.attempts(&id).await.expect("attempts read");
    assert_eq!(kept.older, 0);
    let seen: Vec<_> = kept
        .kept
        .iter()
        .map(|a| {
            (
                a.fence.get(),
                a.owner.as_str(),
                a.started.map(Timestamp::get),
                a.end,
                a.error.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (1, "a", Some(0.0), AttemptEnd::LeaseLost, None),
            (2, "b", Some(20.0), AttemptEnd::Failed, Some("boom")),
            (3, "c", Some(24.0), AttemptEnd::Released, None),
            (4, "d", Some(25.0), AttemptEnd::Done, None),
        ]
    );
    let ends: Vec<Option<f64>> = kept
        .kept
        .iter()
        .map(|a| a.ended.map(Timestamp::get))
        .collect();
    assert_eq!(
        (ends[0], ends[1], ends[3]),
        (Some(10.0), Some(22.0), Some(26.0))
    );
    // A release carries no time: a store with a clock ends it by its own (the memory store
    // reads none).
    let untouched = store.attempts(&never).await.expect("attempts read");
    assert_eq!(untouched, lease_domain::Attempts::default());
    let missing = store
        .attempts(&job("missing"))
        .await
        .expect("attempts read");
    assert_eq!(missing, lease_domain::Attempts::default());
}

/// `fail` puts the job back after the backoff while attempts remain, then dead-letters it; the
/// error is kept and the failed holder's later writes stay refused.
pub async fn fail_retries_with_backoff_then_dead_letters(store: Store) {
    let id = enqueued_with(&store, "j", &spec("q", 0, None, 2)).await;
    let lease = next(&store, "q", "a", 0.0, 1).await.remove(0);
    let boom = ErrorText::new("boom").expect("valid error");
    let failed = store
        .fail(
            &id,
            &owner("a"),
            lease.fence,
            at(1.0),
            &boom,
            no_jitter(10.0),
        )
        .await
        .expect("fail reaches the store")
        .expect("fail is granted");
    assert_eq!(
        (failed.status, failed.run_at),
        (Status::Pending, Some(at(11.0)))
    );
    let late = store
        .complete(&id, &owner("a"), lease.fence, at(2.0), &result("late"))
        .await;
    assert!(late.expect("complete reaches the store").is_err());
    assert!(next(&store, "q", "b", 10.9, 1).await.is_empty());
    let again = next(&store, "q", "b", 11.0, 1).await.remove(0);
    assert_eq!((again.fence, again.attempt), (fence(2), 2));
    let failed = store
        .fail(
            &id,
            &owner("b"),
            again.fence,
            at(12.0),
            &boom,
            no_jitter(10.0),
        )
        .await
        .expect("fail reaches the store")
        .expect("fail is granted");
    assert_eq!((failed.status, failed.run_at), (Status::Dead, None));
    let record = store
        .record(&id)
        .await
        .expect("record reads")
        .expect("job exists");
    assert_eq!(record.job.error.as_deref(), Some("boom"));
    assert_eq!(record.job.status_at(at(1000.0)), Status::Dead);
    assert!(next(&store, "q", "c", 1000.0, 1).await.is_empty());
}

/// `fail` by anyone but the live current holder is refused and changes nothing.
pub async fn fail_is_refused_unless_current_and_live(store: Store) {
    let id = enqueued_with(&store, "j", &spec("q", 0, None, 5)).await;
    let lease = next(&store, "q", "a", 0.0, 1).await.remove(0);
    let before = store.record(&id).await.expect("record reads");
    let boom = ErrorText::new("boom").expect("valid error");
    for (who, f, now, why) in [
        ("b", lease.fence, 1.0, "wrong owner"),
        ("a", fence(0), 1.0, "stale fence"),
        ("a", lease.fence, 10.0, "expired"),
    ] {
        let outcome = store
            .fail(&id, &owner(who), f, at(now), &boom, Retry::No)
            .await;
        assert!(outcome.expect("fail reaches the store").is_err(), "{why}");
        assert_eq!(
            store.record(&id).await.expect("record reads"),
            before,
            "{why}"
        );
    }
}

/// Cancelling a running job refuses every later write of its holder with `Cancelled`, and the
/// job is never leased again.
pub async fn cancel_of_a_running_job_refuses_its_holder(store: Store) {
    let id = enqueued_with(&store, "j", &spec("q", 0, None, 5)).await;
    let lease = next(&store, "q", "a", 0.0, 1).await.remove(0);
    let cancelled = store
        .cancel(&id, at(1.0))
        .await
        .expect("cancel reaches the store");
    assert_eq!(cancelled, Ok(()));
    let a = owner("a");
    let renew = store.renew(&id, &a, lease.fence, term(2.0, 10.0)).await;
    assert_eq!(
        renew.expect("renew reaches the store"),
        Err(WriteRefused::Cancelled)
    );
    let done = store
        .complete(&id, &a, lease.fence, at(2.0), &result("r"))
        .await;
    assert_eq!(
        done.expect("complete reaches the store"),
        Err(WriteRefused::Cancelled)
    );
    let boom = ErrorText::new("boom").expect("valid error");
    let failed = store
        .fail(&id, &a, lease.fence, at(2.0), &boom, Retry::No)
        .await;
    assert_eq!(
        failed.expect("fail reaches the store"),
        Err(WriteRefused::Cancelled)
    );
    assert!(next(&store, "q", "b", 100.0, 1).await.is_empty());
    assert_eq!(status(&store, &id, 100.0).await, Status::Cancelled);
    let again = store
        .cancel(&id, at(2.0))
        .await
        .expect("cancel reaches the store");
    assert_eq!(again, Err(WriteRefused::Cancelled));
    let gone = store
        .cancel(&job("ghost"), at(2.0))
        .await
        .expect("cancel reaches the store");
    assert_eq!(gone, Err(WriteRefused::Missing));
}

/// `retry` puts a dead or cancelled job back to pending with fresh attempts; its fence goes on.
pub async fn retry_revives_dead_and_cancelled_jobs_and_the_fence_continues(store: Store) {
    let id = enqueued_with(&store, "j", &spec("q", 0, None, 1)).await;
    let lease = next(&store, "q", "a", 0.0, 1).await.remove(0);
    let boom = ErrorText::new("boom").expect("valid error");
    store
        .fail(
            &id,
            &owner("a"),
            lease.fence,
            at(1.0),
            &boom,
            Retry::default(),
        )
        .await
        .expect("fail reaches the store")
        .expect("fail is granted");
    assert_eq!(status(&store, &id, 1.0).await, Status::Dead);
    assert_eq!(
        store
            .retry(&id, at(2.0))
            .await
            .expect("retry reaches the store"),
        Ok(())
    );
    let again = next(&store, "q", "b", 2.0, 1).await.remove(0);
    assert_eq!((again.fence, again.attempt), (fence(2), 1));
    let refused = store
        .retry(&id, at(3.0))
        .await
        .expect("retry reaches the store");
    assert_eq!(
        refused,
        Err(WriteRefused::Active {
            status: Status::Running
        })
    );
    cancel_granted(&store, &id, 3.0).await;
    assert_eq!(
        store
            .retry(&id, at(4.0))
            .await
            .expect("retry reaches the store"),
        Ok(())
    );
    assert_eq!(next(&store, "q", "c", 4.0, 1).await[0].fence, fence(3));
}

/// `purge` deletes finished jobs changed before the cutoff; an id enqueued again after a purge
/// never receives a fence it had before.
pub async fn purge_deletes_finished_jobs_and_a_purged_id_never_reuses_a_fence(store: Store) {
    let done = enqueued(&store, "done").await;
    for round in 0..3 {
        claimed(&store, &done, "a", f64::from(round) * 10.0, 5.0).await;
    }
    store
        .complete(&done, &owner("a"), fence(3), at(21.0), &result("r"))
        .await
        .expect("complete reaches the store")
        .expect("complete is granted");
    let cancelled = enqueued(&store, "cancelled").await;
    cancel_granted(&store, &cancelled, 30.0).await;
    let pending = enqueued(&store, "pending").await;
    let all = Status::ALL;
    assert_eq!(store.purge(at(21.0), &all).await.expect("purge works"), 0);
    assert_eq!(
        store
            .purge(at(25.0), &[Status::Dead])
            .await
            .expect("purge works"),
        0
    );
    assert_eq!(store.purge(at(25.0), &all).await.expect("purge works"), 1);
    assert_eq!(store.state(&done).await.expect("state reads"), None);
    assert_eq!(store.purge(at(31.0), &all).await.expect("purge works"), 1);
    assert!(store.state(&pending).await.expect("state reads").is_some());
    assert!(store.enqueue(&done).await.expect("enqueue works"));
    assert_eq!(state(&store, &done).await.fence, 3);
    assert_eq!(claimed(&store, &done, "b", 100.0, 5.0).await, fence(4));
}

/// `list` takes only a group's jobs, or only those whose id starts with a prefix, or both,
/// with a status and page by page, in id order; ids past the prefix's range are never listed.
pub async fn list_filters_by_group_and_id_prefix(store: Store) {
    for (id, group) in [
        ("inv-1", Some("acme")),
        ("inv-10", None),
        ("inv-2", Some("acme")),
        ("inv-3", Some("zeta")),
        ("invoice", Some("acme")),
        ("inw-1", Some("acme")),
        ("mail-1", Some("acme")),
    ] {
        let spec = match group {
            Some(g) => grouped("q", g),
            None => spec("q", 0, None, 5),
        };
        enqueued_with(&store, id, &spec).await;
    }
    claimed(&store, &job("inv-2"), "w", 0.0, 100.0).await;
    let list =
        async |group: Option<&str>, prefix: Option<&str>, status, limit, after: Option<&str>| {
            let filter = ListFilter {
                queue: None,
                status,
                limit,
                after: after.map(job),
                now: at(1.0),
                group: group.map(|g| GroupKey::new(g).expect("valid group")),
                prefix: prefix.map(str::to_owned),
            };
            store
                .list(&filter)
                .await
                .expect("list works")
                .into_iter()
                .map(|r| r.id.as_str().to_owned())
                .collect::<Vec<_>>()
        };
    assert_eq!(
        list(Some("acme"), None, None, 10, None).await,
        ["inv-1", "inv-2", "invoice", "inw-1", "mail-1"]
    );
    assert_eq!(
        list(None, Some("inv-"), None, 10, None).await,
        ["inv-1", "inv-10", "inv-2", "inv-3"]
    );
    assert_eq!(
        list(Some("acme"), Some("inv"), None, 10, None).await,
        ["inv-1", "inv-2", "invoice"]
    );
    assert_eq!(
        list(Some("acme"), Some("inv"), Some(Status::Pending), 10, None).await,
        ["inv-1", "invoice"]
    );
    assert_eq!(
        list(Some("acme"), Some("inv"), Some(Status::Running), 10, None).await,
        ["inv-2"]
    );
    // Page by page.
    assert_eq!(
        list(None, Some("inv-"), None, 2, None).await,
        ["inv-1", "inv-10"]
    );
    assert_eq!(
        list(None, Some("inv-"), None, 2, Some("inv-10")).await,
        ["inv-2", "inv-3"]
    );
    assert!(
        list(None, Some("inv-"), None, 2, Some("inv-3"))
            .await
            .is_empty()
    );
    assert!(list(Some("none"), None, None, 10, None).await.is_empty());
}

/// The status of job `id` at `now`.
async fn status_at(store: &Store, id: &str, now: f64) -> Status {
    store
        .record(&job(id))
        .await
        .expect("record reads")
        .expect("job exists")
        .job
        .status_at(at(now))
}

/// A bulk retry takes every dead job a filter matches (a group's, of a queue), more than one
/// batch of them, and only those; a dry run counts them and changes nothing; a bulk cancel
/// takes a status's jobs.
pub async fn bulk_actions_take_every_job_the_filter_matches_and_no_other(store: Store) {
    use crate::bulk::{BULK_BATCH, BulkAction, bulk};
    let n = BULK_BATCH + 20;
    let mut jobs: Vec<(JobId, EnqueueSpec)> = (0..n)
        .map(|i| (job(&format!("d-{i:04}")), grouped("b", "acme")))
        .collect();
    jobs.push((job("other"), grouped("b", "zeta")));
    store.enqueue_many(&jobs).await.expect("enqueue works");
    // Every job held (a store may grant fewer a claim than asked: the API, 100).
    let mut held = Vec::new();
    loop {
        let leases = store
            .claim_next(&queue("b"), &owner("w"), term(0.0, 100.0), n + 1)
            .await
            .expect("claim works");
        if leases.is_empty() {
            break;
        }
        held.extend(leases);
    }
    assert_eq!(held.len(), n + 1);
    for lease in &held {
        store
            .fail(
                &lease.job,
                &owner("w"),
                lease.fence,
                at(1.0),
                &ErrorText::new("boom").expect("error"),
                Retry::No,
            )
            .await
            .expect("fail works")
            .expect("fail is granted");
    }
    let filter = |status| ListFilter {
        queue: Some(queue("b")),
        status: Some(status),
        limit: 1,
        after: None,
        now: at(2.0),
        group: Some(GroupKey::new("acme").expect("valid group")),
        prefix: None,
    };
    let counted = bulk(
        store.as_ref(),
        &filter(Status::Dead),
        BulkAction::Retry,
        true,
    )
    .await
    .expect("a dry run works");
    assert_eq!((counted.matched, counted.changed), (n as u64, 0));
    assert_eq!(
        status_at(&store, "d-0000", 2.0).await,
        Status::Dead,
        "a dry run changes nothing"
    );
    let retried = bulk(
        store.as_ref(),
        &filter(Status::Dead),
        BulkAction::Retry,
        false,
    )
    .await
    .expect("a bulk retry works");
    assert_eq!((retried.matched, retried.changed), (n as u64, n as u64));
    let pending = store
        .list(&ListFilter {
            limit: n + 10,
            ..filter(Status::Pending)
        })
        .await
        .expect("list works");
    assert_eq!(
        pending.len(),
        n,
        "every dead job of the group is pending again"
    );
    assert_eq!(
        status_at(&store, "other", 2.0).await,
        Status::Dead,
        "another group's job is left alone"
    );
    let cancelled = bulk(
        store.as_ref(),
        &filter(Status::Pending),
        BulkAction::Cancel,
        false,
    )
    .await
    .expect("a bulk cancel works");
    assert_eq!((cancelled.matched, cancelled.changed), (n as u64, n as u64));
    assert_eq!(status_at(&store, "d-0519", 2.0).await, Status::Cancelled);
}

/// `list` and `stats` judge each job's status at the given time.
pub async fn list_and_stats_judge_status_at_now(store: Store) {
    let running = enqueued_with(&store, "running", &spec("q", 0, None, 5)).await;
    claimed(&store, &running, "a", 0.0, 10.0).await;
    enqueued_with(&store, "pending", &spec("q", 0, None, 5)).await;
    enqueued_with(&store, "mail", &spec("mail", 0, None, 5)).await;
    let listed = |status, now, q: Option<&str>| ListFilter {
        queue: q.map(queue),
        status,
        limit: 10,
        now: at(now),
        after: None,
        group: None,
        prefix: None,
    };
    let names = |records: Vec<crate::JobRecord>| -> Vec<String> {
        records
            .into_iter()
            .map(|r| r.id.as_str().to_owned())
            .collect()
    };
    let all = store
        .list(&listed(None, 5.0, None))
        .await
        .expect("list works");
    assert_eq!(names(all), ["mail", "pending", "running"]);
    let run = store
        .list(&listed(Some(Status::Running), 5.0, Some("q")))
        .await
        .expect("list");
    assert_eq!(names(run), ["running"]);
    let later = store
        .list(&listed(Some(Status::Pending), 10.0, Some("q")))
        .await
        .expect("list");
    assert_eq!(names(later), ["pending", "running"]);
    let limited = ListFilter {
        limit: 1,
        ..listed(None, 5.0, None)
    };
    assert_eq!(store.list(&limited).await.expect("list works").len(), 1);
    let row = |q: &str, status, count| StatsRow {
        queue: queue(q),
        status,
        count,
    };
    assert_eq!(
        store.stats(at(5.0)).await.expect("stats works"),
        [
            row("mail", Status::Pending, 1),
            row("q", Status::Pending, 1),
            row("q", Status::Running, 1)
        ]
    );
    assert_eq!(
        store.stats(at(10.0)).await.expect("stats works"),
        [
            row("mail", Status::Pending, 1),
            row("q", Status::Pending, 2)
        ]
    );
}

/// `stats` counts done, dead and cancelled jobs under their own statuses.
pub async fn stats_count_every_status(store: Store) {
    let done = enqueued_with(&store, "done", &spec("q", 0, None, 5)).await;
    let f = claimed(&store, &done, "a", 0.0, 10.0).await;
    complete_granted(&store, &done, "a", f, 1.0, "r").await;
    let dead = enqueued_with(&store, "dead", &spec("q", 0, None, 5)).await;
    let f = claimed(&store, &dead, "a", 0.0, 10.0).await;
    let boom = ErrorText::new("boom").expect("valid error");
    store
        .fail(&dead, &owner("a"), f, at(1.0), &boom, Retry::No)
        .await
        .expect("fail reaches the store")
        .expect("fail is granted");
    let cancelled = enqueued_with(&store, "cancelled", &spec("q", 0, None, 5)).await;
    cancel_granted(&store, &cancelled, 1.0).await;
    let expired = enqueued_with(&store, "expired", &spec("q", 0, None, 1)).await;
    next(&store, "q", "a", 0.0, 1).await;
    let row = |status, count| StatsRow {
        queue: queue("q"),
        status,
        count,
    };
    assert_eq!(
        store.stats(at(20.0)).await.expect("stats works"),
        [
            row(Status::Done, 1),
            row(Status::Dead, 2),
            row(Status::Cancelled, 1)
        ]
    );
    let dead_now = ListFilter {
        queue: None,
        status: Some(Status::Dead),
        limit: 10,
        now: at(20.0),
        after: None,
        group: None,
        prefix: None,
    };
    let names: Vec<String> = store
        .list(&dead_now)
        .await
        .expect("list works")
        .into_iter()
        .map(|r| r.id.as_str().to_owned())
        .collect();
    assert_eq!(names, ["dead", expired.as_str()]);
}

/// Only leases count against `claim_next`'s limit: a job it buries on the way (out of attempts)
/// does not make it lease more or fewer than `limit`.
pub async fn claim_next_counts_only_leases_against_its_limit(store: Store) {
    let once = enqueued_with(&store, "a-once", &spec("q", 5, None, 1)).await;
    next(&store, "q", "w", 0.0, 1).await;
    for id in ["b", "c", "d"] {
        enqueued_with(&store, id, &spec("q", 0, None, 5)).await;
    }
    let leases = next(&store, "q", "w", 20.0, 2).await;
    assert_eq!(ids(&leases), ["b", "c"]);
    assert_eq!(status(&store, &once, 20.0).await, Status::Dead);
}

/// A due job whose fence is at its maximum cannot be leased, and does not hide the due jobs
/// behind it: `claim_next` with limit 1 leases the next one (such a row can come from a merge
/// or from another program).
pub async fn claim_next_reads_past_a_job_whose_fence_is_exhausted(transfer: TransferStore) {
    let store: Store = transfer.clone();
    let exhausted = Job {
        fence: Fence::MAX,
        queue: queue("q"),
        priority: 9,
        ..Job::new()
    };
    let due = Job {
        queue: queue("q"),
        ..Job::new()
    };
    let snapshot = Snapshot {
        jobs: vec![
            JobRecord {
                id: job("a-exhausted"),
                job: exhausted.clone(),
            },
            JobRecord {
                id: job("b"),
                job: due.clone(),
            },
            JobRecord {
                id: job("c"),
                job: due,
            },
        ],
        ..Snapshot::default()
    };
    transfer
        .import(&snapshot, false)
        .await
        .expect("import into an empty store works");
    assert_eq!(ids(&next(&store, "q", "w", 1.0, 1).await), ["b"]);
    assert_eq!(ids(&next(&store, "q", "w", 1.0, 5).await), ["c"]);
    assert!(next(&store, "q", "w", 1.0, 5).await.is_empty());
    let record = store
        .record(&job("a-exhausted"))
        .await
        .expect("record reads")
        .expect("job exists");
    assert_eq!(record.job, exhausted, "the exhausted job is left as it was");
}

/// `enqueue_many` enqueues each job as `enqueue_with` would, in order, in one call: `true` for
/// each job it inserted, `false` for one that existed or that an earlier entry inserted; a
/// purged id continues from its old fence; an empty batch changes nothing.
pub async fn enqueue_many_inserts_each_new_job_once_in_order(store: Store) {
    assert!(
        store
            .enqueue_many(&[])
            .await
            .expect("empty batch")
            .is_empty()
    );
    let old = enqueued(&store, "old").await;
    let gone = enqueued(&store, "gone").await;
    let f = claimed(&store, &gone, "w", 0.0, 5.0).await;
    complete_granted(&store, &gone, "w", f, 1.0, "r").await;
    let purged = store
        .purge(at(100.0), &[Status::Done])
        .await
        .expect("purge works");
    assert_eq!(purged, 1);
    let batch = [
        (job("a"), spec("mail", 3, Some(50.0), 2)),
        (job("b"), spec("mail", 0, None, 5)),
        (job("a"), spec("other", 9, None, 9)),
        (old.clone(), spec("mail", 0, None, 5)),
        (gone.clone(), spec("mail", 0, None, 5)),
    ];
    let inserted = store
        .enqueue_many(&batch)
        .await
        .expect("enqueue_many works");
    assert_eq!(inserted, [true, true, false, false, true]);
    let a = store
        .record(&job("a"))
        .await
        .expect("record reads")
        .expect("a exists");
    assert_eq!(
        (
            a.job.queue.as_str(),
            a.job.priority,
            a.job.run_at,
            a.job.max_attempts
        ),
        ("mail", 3, Some(at(50.0)), 2),
        "the first entry of an id is the one enqueued"
    );
    let old_record = store
        .record(&old)
        .await
        .expect("record reads")
        .expect("old exists");
    assert_eq!(
        old_record.job,
        lease_domain::Job::new(),
        "an existing job is left alone"
    );
    assert_eq!(
        claimed(&store, &gone, "w", 200.0, 5.0).await,
        fence(f.get() + 1),
        "a purged id continues from its old fence"
    );
    assert_eq!(ids(&next(&store, "mail", "w", 10.0, 10).await), ["b"]);
}

/// A held job comes back to `claim_next` the moment its lease ends (`until <= now`), in claim
/// order among the jobs no one holds, and not before: a renewed lease keeps it out until its
/// new end, a released one puts it back at once, and a lease taken by id counts as held.
pub async fn claim_next_finds_each_lease_the_moment_it_ends_in_claim_order(store: Store) {
    for (id, priority) in [("low", 0), ("high", 5), ("renewed", 9), ("released", 1)] {
        enqueued_with(&store, id, &spec("q", priority, None, 5)).await;
    }
    let by_id = enqueued_with(&store, "by-id", &spec("q", 3, None, 5)).await;
    claimed(&store, &by_id, "a", 0.0, 12.0).await;
    let first = next(&store, "q", "a", 0.0, 10).await;
    assert_eq!(ids(&first), ["renewed", "high", "released", "low"]);
    let renewed = store
        .renew(
            &job("renewed"),
            &owner("a"),
            first[0].fence,
            term(5.0, 10.0),
        )
        .await
        .expect("renew reaches the store");
    assert!(renewed.is_ok(), "{renewed:?}");
    let released = store
        .release(&job("released"), &owner("a"), first[2].fence)
        .await
        .expect("release reaches the store");
    assert!(released.is_ok(), "{released:?}");
    assert_eq!(ids(&next(&store, "q", "b", 9.5, 10).await), ["released"]);
    assert!(next(&store, "q", "b", 9.999, 10).await.is_empty());
    assert_eq!(
        ids(&next(&store, "q", "b", 10.0, 10).await),
        ["high", "low"]
    );
    assert_eq!(ids(&next(&store, "q", "b", 12.0, 10).await), ["by-id"]);
    assert!(next(&store, "q", "b", 14.5, 10).await.is_empty());
    assert_eq!(ids(&next(&store, "q", "b", 15.0, 10).await), ["renewed"]);
}

/// A store's contents, moved into the reference store and back into a fresh one, read back
/// exactly: every job in enqueue order with every field, and every purge mark.
pub async fn export_and_import_round_trip_every_job_and_purge_mark(transfer: TransferStore) {
    let store: Store = transfer.clone();
    let done = enqueued(&store, "done").await;
    let f = claimed(&store, &done, "w", 1.0, 10.0).await;
    complete_granted(&store, &done, "w", f, 2.0, "r").await;
    assert_eq!(
        store
            .purge(at(100.0), &[Status::Done])
            .await
            .expect("purge"),
        1
    );
    let mut with_payload = spec("mail", 3, Some(5.0), 2);
    with_payload.payload =
        Some(Payload::new(vec![0, 159, 146, 150], Payload::DEFAULT_LIMIT).expect("payload"));
    enqueued_with(&store, "scheduled", &with_payload).await;
    enqueued_with(&store, "running", &spec("mail", 0, None, 5)).await;
    assert_eq!(ids(&next(&store, "mail", "w", 3.0, 1).await), ["running"]);
    let cancelled = enqueued(&store, "cancelled").await;
    cancel_granted(&store, &cancelled, 4.0).await;
    let exported = transfer.export().await.expect("export works");
    let names: Vec<&str> = exported.jobs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        names,
        ["scheduled", "running", "cancelled"],
        "enqueue order"
    );
    assert_eq!(exported.purged, vec![(done.clone(), f)]);
    let reference = MemoryLeaseStore::new();
    let imported = reference.import(&exported, false).await.expect("import");
    assert_eq!((imported.inserted, imported.marks), (3, 1));
    assert_eq!(reference.export().await.expect("export"), exported);
    assert_eq!(
        transfer
            .import(&exported, false)
            .await
            .map(|_| ())
            .map_err(|e| matches!(e, crate::StoreError::Incompatible { .. })),
        Err(true),
        "a store that holds jobs refuses an import without merge"
    );
    assert_eq!(
        transfer.export().await.expect("export"),
        exported,
        "nothing changed"
    );
}

/// A raised epoch puts every fence handed out after it above every fence handed out before,
/// on every path that hands one out (a claim by id, `claim_next` in a queue with and without
/// settings, `complete_and_claim_next`), and counts up within it; an epoch is never lowered.
pub async fn a_raised_epoch_puts_every_later_fence_above_every_earlier_one(
    transfer: TransferStore,
) {
    let store: Store = transfer.clone();
    let control: ControlStore = transfer.clone();
    let start = transfer.epoch().await.expect("the epoch reads");
    for id in ["byid", "plain-1", "plain-2", "plain-3", "set-1", "set-2"] {
        let q = if id.starts_with("set") {
            "set"
        } else {
            "plain"
        };
        enqueued_with(&store, id, &spec(q, 0, None, 9)).await;
    }
    change(
        &control,
        "set",
        QueueChange::Concurrency(Concurrency::new(5)),
    )
    .await;
    let before = [
        claimed(&store, &job("byid"), "w", 1.0, 10.0).await,
        next(&store, "plain", "w", 1.0, 1).await[0].fence,
        next(&store, "set", "w", 1.0, 1).await[0].fence,
    ];
    let raised = start.next().expect("an epoch to raise to");
    assert_eq!(transfer.raise_epoch(raised).await.expect("raise"), raised);
    assert_eq!(transfer.epoch().await.expect("the epoch reads"), raised);
    assert_eq!(
        transfer.raise_epoch(start).await.expect("raise"),
        raised,
        "an epoch is never lowered"
    );
    let first = raised.first_fence();
    // Each lease taken before has expired by 20.
    assert_eq!(claimed(&store, &job("byid"), "w", 20.0, 10.0).await, first);
    let again = claimed(&store, &job("byid"), "w", 40.0, 10.0).await;
    assert_eq!(
        again,
        first.next().expect("a fence"),
        "it counts up in the epoch"
    );
    let plain = next(&store, "plain", "w", 20.0, 2).await;
    let set = next(&store, "set", "w", 20.0, 2).await;
    for lease in plain.iter().chain(&set) {
        assert_eq!(lease.fence, first, "{} in the raised epoch", lease.job);
    }
    let (completed, leases) = store
        .complete_and_claim_next(
            &plain[0].job,
            &owner("w"),
            plain[0].fence,
            &result("done"),
            &queue("plain"),
            term(21.0, 10.0),
            1,
        )
        .await
        .expect("the call reaches the store");
    assert_eq!(completed, Ok(()));
    let after_completion = leases.expect("the claim reaches the store");
    assert_eq!(ids(&after_completion), ["plain-3"]);
    assert_eq!(after_completion[0].fence, first);
    let (completed, leases) = store
        .complete_and_claim_next(
            &set[0].job,
            &owner("w"),
            set[0].fence,
            &result("done"),
            &queue("set"),
            term(21.0, 10.0),
            1,
        )
        .await
        .expect("the call reaches the store");
    assert_eq!(completed, Ok(()));
    // set-2 is held by the second claim above; set-1 (lease from 1.0) expired and came back.
    for lease in leases.expect("the claim reaches the store") {
        assert_eq!(lease.fence, first, "{} in the raised epoch", lease.job);
    }
    assert!(before.iter().all(|f| *f < first));
}

/// A migration carries the epoch: the target is raised to the source's epoch (and to that of
/// any fence it brings from a later one), so it never hands out a fence the source did.
pub async fn an_import_raises_the_target_to_the_sources_epoch(transfer: TransferStore) {
    let source = Arc::new(MemoryLeaseStore::new());
    let held: Store = source.clone();
    let e = |n| lease_domain::Epoch::new(n).expect("an epoch");
    source.raise_epoch(e(3)).await.expect("raise");
    let id = enqueued(&held, "j").await;
    let f = claimed(&held, &id, "w", 1.0, 10.0).await;
    assert_eq!(f, e(3).first_fence());
    let snapshot = source.export().await.expect("export");
    assert_eq!(snapshot.epoch, e(3));
    transfer.import(&snapshot, false).await.expect("import");
    assert!(transfer.epoch().await.expect("the epoch reads") >= e(3));
    let store: Store = transfer.clone();
    let next_fence = claimed(&store, &id, "v", 20.0, 10.0).await;
    assert_eq!(next_fence, f.next().expect("a fence"));
    // A fence from a later epoch than the snapshot says raises the target to that epoch.
    let late = JobRecord {
        id: job("late"),
        job: Job {
            fence: e(6).first_fence(),
            ..Job::new()
        },
    };
    transfer
        .import(
            &Snapshot {
                jobs: vec![late],
                ..Snapshot::default()
            },
            true,
        )
        .await
        .expect("merge");
    assert!(transfer.epoch().await.expect("the epoch reads") >= e(6));
    assert_eq!(
        claimed(&store, &id, "w", 40.0, 10.0).await.epoch(),
        transfer.epoch().await.expect("the epoch reads")
    );
}

/// `import` with `merge` keeps the larger fence of a job on both sides, raises a target job
/// under a larger purge mark (ending its lease), and answers what it did.
pub async fn import_with_merge_keeps_the_larger_fence(transfer: TransferStore) {
    let store: Store = transfer.clone();
    let low = enqueued(&store, "low").await;
    claimed(&store, &low, "w", 1.0, 10.0).await;
    let high = enqueued(&store, "high").await;
    for now in [1.0, 20.0, 40.0] {
        claimed(&store, &high, "w", now, 10.0).await;
    }
    let raised = enqueued(&store, "raised").await;
    claimed(&store, &raised, "w", 1.0, 100.0).await;
    let incoming = |id: &str, fence_value: u64| JobRecord {
        id: job(id),
        job: Job {
            fence: fence(fence_value),
            ..Job::new()
        },
    };
    let snapshot = Snapshot {
        jobs: vec![incoming("low", 7), incoming("high", 2), incoming("new", 4)],
        purged: vec![(job("raised"), fence(9)), (job("gone"), fence(11))],
        ..Snapshot::default()
    };
    let imported = transfer.import(&snapshot, true).await.expect("merge works");
    assert_eq!((imported.inserted, imported.marks), (1, 2));
    let merged: Vec<(&str, u64, u64, bool)> = imported
        .conflicts
        .iter()
        .map(|c| {
            (
                c.job.as_str(),
                c.source_fence.get(),
                c.target_fence.get(),
                c.replaced,
            )
        })
        .collect();
    assert_eq!(merged, [("low", 7, 1, true), ("high", 2, 3, false)]);
    assert_eq!(state(&store, &low).await.fence, 7);
    assert_eq!(state(&store, &high).await.fence, 3);
    let lifted = state(&store, &raised).await;
    assert_eq!((lifted.fence, lifted.owner, lifted.until), (9, None, 0.0));
    assert_eq!(claimed(&store, &raised, "v", 2.0, 10.0).await, fence(10));
    let exported = transfer.export().await.expect("export");
    assert!(exported.purged.contains(&(job("gone"), fence(11))));
    // A purged id comes back above its mark.
    assert!(store.enqueue(&job("gone")).await.expect("enqueue"));
    assert_eq!(
        claimed(&store, &job("gone"), "v", 2.0, 10.0).await,
        fence(12)
    );
}

/// `purge` judges a job's status as `list` does: a job whose last allowed lease expired is
/// dead, and purged as dead, before `claim_next` has buried it.
pub async fn purge_judges_status_as_list_does(store: Store) {
    let d = enqueued_with(&store, "d", &spec("q", 0, None, 1)).await;
    assert_eq!(ids(&next(&store, "q", "w", 100.0, 1).await), ["d"]);
    let dead = ListFilter {
        queue: None,
        status: Some(Status::Dead),
        limit: 10,
        now: at(200.0),
        after: None,
        group: None,
        prefix: None,
    };
    let listed = store.list(&dead).await.expect("list works");
    assert_eq!(listed.len(), 1, "list shows the job dead");
    assert_eq!(
        store
            .purge(at(105.0), &[Status::Dead])
            .await
            .expect("purge works"),
        0,
        "still running at 105"
    );
    assert_eq!(
        store
            .purge(at(1e12), &[Status::Dead])
            .await
            .expect("purge works"),
        1
    );
    assert!(store.record(&d).await.expect("record reads").is_none());
}

/// `complete` stores the fence of the completing lease with the result.
pub async fn complete_stores_the_result_fence(store: Store) {
    let id = enqueued(&store, "j").await;
    claimed(&store, &id, "a", 0.0, 5.0).await;
    let f = claimed(&store, &id, "b", 5.0, 5.0).await;
    complete_granted(&store, &id, "b", f, 6.0, "r").await;
    let record = store
        .record(&id)
        .await
        .expect("record reads")
        .expect("job exists");
    assert_eq!(record.job.result_fence, Some(fence(2)));
    let again = store
        .complete(&id, &owner("b"), fence(2), at(6.5), &result("x"))
        .await;
    assert_eq!(
        again.expect("complete reaches the store"),
        Err(WriteRefused::Done {
            result_fence: Some(fence(2))
        })
    );
    let late = store
        .complete(&id, &owner("a"), fence(1), at(4.0), &result("x"))
        .await;
    assert_eq!(
        late.expect("complete reaches the store"),
        Err(WriteRefused::Stale {
            presented: fence(1),
            current: fence(2)
        })
    );
}

/// Concurrent `claim_next` callers never get the same job: every job goes to exactly one.
pub async fn concurrent_claim_next_gives_each_job_to_exactly_one_caller(store: Store) {
    const JOBS: usize = 30;
    for i in 0..JOBS {
        enqueued_with(&store, &format!("j{i:02}"), &spec("q", 0, None, 5)).await;
    }
    let callers = (0..8).map(|w| {
        let store = Arc::clone(&store);
        async move {
            store
                .claim_next(&queue("q"), &owner(&format!("w{w}")), term(1.0, 60.0), 4)
                .await
                .expect("claim_next reaches the store")
        }
    });
    let mut leased: Vec<String> = futures::future::join_all(callers)
        .await
        .into_iter()
        .flatten()
        .map(|l| l.job.as_str().to_owned())
        .collect();
    leased.sort();
    let expected: Vec<String> = (0..JOBS).map(|i| format!("j{i:02}")).collect();
    assert_eq!(leased, expected);
}

/// `complete_and_claim_next` completes the job and leases the next due ones in one call; the
/// claim is made even when the completion is refused.
pub async fn complete_and_claim_next_hands_back_one_job_and_takes_the_next(store: Store) {
    for id in ["a", "b", "c"] {
        enqueued_with(&store, id, &spec("q", 0, None, 5)).await;
    }
    let first = next(&store, "q", "w", 0.0, 1).await.remove(0);
    let (completed, leases) = store
        .complete_and_claim_next(
            &first.job,
            &owner("w"),
            first.fence,
            &result("a done"),
            &queue("q"),
            term(1.0, 10.0),
            1,
        )
        .await
        .expect("the call reaches the store");
    assert_eq!(completed, Ok(()));
    let leases = leases.expect("the claim reaches the store");
    assert_eq!(ids(&leases), ["b"]);
    assert_eq!(leases[0].until, at(11.0));
    assert_eq!(
        state(&store, &first.job).await.result.as_deref(),
        Some("a done")
    );
    // A stale completion is refused, and the claim still happens.
    let (completed, leases) = store
        .complete_and_claim_next(
            &first.job,
            &owner("w"),
            first.fence,
            &result("again"),
            &queue("q"),
            term(2.0, 10.0),
            5,
        )
        .await
        .expect("the call reaches the store");
    assert!(completed.is_err());
    assert_eq!(ids(&leases.expect("the claim reaches the store")), ["c"]);
    assert_eq!(
        state(&store, &first.job).await.result.as_deref(),
        Some("a done")
    );
}

/// `apply_many` decides each write as `apply` would and answers each on its own, in order: a
/// completion with the claim that follows it gets its leases, a stale completion is refused
/// while the others stand, a failure and a release apply, and a claim after a command that
/// cannot carry one is refused alone, changing nothing.
pub async fn apply_many_answers_each_write_on_its_own_in_order(store: Store) {
    for id in ["a", "b", "c", "d"] {
        enqueued_with(&store, id, &spec("m", 0, None, 5)).await;
    }
    let mut held = next(&store, "m", "w", 0.0, 4).await;
    assert_eq!(ids(&held), ["a", "b", "c", "d"]);
    // The next due job comes first in claim order whatever the writes beside the claim free
    // (they run at once, so a store may decide d's release before a's claim).
    enqueued_with(&store, "e", &spec("m", 1, None, 5)).await;
    let d = held.pop().expect("d is held");
    let c = held.pop().expect("c is held");
    let b = held.pop().expect("b is held");
    let a = held.pop().expect("a is held");
    let w = owner("w");
    let claim = crate::ClaimNext::new(&queue("m"), &w, term(1.0, 10.0), 1);
    let complete =
        |f: Fence, text: &str| crate::Command::Complete(w.clone(), f, at(1.0), result(text));
    let stale = Fence::new(a.fence.get() + 9).expect("fence in range");
    let answers = store
        .apply_many(vec![
            (
                a.job.clone(),
                complete(a.fence, "a done"),
                Some(claim.clone()),
            ),
            (b.job.clone(), complete(stale, "b stale"), None),
            (
                c.job.clone(),
                crate::Command::Fail(
                    w.clone(),
                    c.fence,
                    at(1.0),
                    ErrorText::new("boom").expect("error"),
                    Retry::No,
                ),
                None,
            ),
            (
                d.job.clone(),
                crate::Command::Release(w.clone(), d.fence),
                Some(claim),
            ),
            (
                d.job.clone(),
                crate::Command::Release(w.clone(), d.fence),
                None,
            ),
        ])
        .await;
    assert_eq!(answers.len(), 5, "one answer per write");
    let mut answers = answers.into_iter();
    let first = answers
        .next()
        .expect("a's answer")
        .expect("a reaches the store");
    assert_eq!(first.outcome, crate::Outcome::Wrote(Ok(())));
    let leases = first
        .claimed
        .expect("a claim was asked")
        .expect("the claim reaches the store");
    assert_eq!(
        ids(&leases),
        ["e"],
        "the completion's claim takes the next due job"
    );
    let second = answers
        .next()
        .expect("b's answer")
        .expect("b reaches the store");
    assert!(
        matches!(second.outcome, crate::Outcome::Wrote(Err(_))),
        "{:?}",
        second.outcome
    );
    let third = answers
        .next()
        .expect("c's answer")
        .expect("c reaches the store");
    assert!(
        matches!(third.outcome, crate::Outcome::Failed(Ok(_))),
        "{:?}",
        third.outcome
    );
    assert!(
        matches!(
            answers.next(),
            Some(Err(crate::StoreError::InvalidInput(_)))
        ),
        "a claim after a release is refused"
    );
    let fifth = answers
        .next()
        .expect("d's answer")
        .expect("d reaches the store");
    assert_eq!(
        fifth.outcome,
        crate::Outcome::Wrote(Ok(())),
        "the release after the refused write applies"
    );
    assert_eq!(
        state(&store, &a.job).await.result.as_deref(),
        Some("a done")
    );
    assert_eq!(
        state(&store, &b.job).await.owner.as_deref(),
        Some("w"),
        "b is still held"
    );
    assert_eq!(
        state(&store, &d.job).await.owner,
        None,
        "d was released once"
    );
}

/// A claim given a lease token's digest stores it with the lease, by id and by `claim_next`;
/// a renewal keeps it, the next claim replaces it (one without a token clears it), and a
/// migration carries it.
pub async fn a_claim_stores_its_lease_token_digest_and_the_next_claim_replaces_it(
    transfer: TransferStore,
) {
    let store: Store = transfer.clone();
    let a = TokenDigest::new([0xa1; 32]);
    let b = TokenDigest::new([0xb2; 32]);
    let token_of = |store: Store, id: JobId| async move {
        store
            .record(&id)
            .await
            .expect("record reads")
            .expect("job exists")
            .job
            .token
    };
    let x = enqueued(&store, "x").await;
    let granted = store
        .claim(&x, &owner("w"), term(0.0, 10.0).with_token(a))
        .await
        .expect("claim reaches the store");
    assert_eq!(granted, Ok(fence(1)));
    assert_eq!(token_of(store.clone(), x.clone()).await, Some(a));
    store
        .renew(&x, &owner("w"), fence(1), term(1.0, 10.0))
        .await
        .expect("renew reaches the store")
        .expect("renew is accepted");
    assert_eq!(token_of(store.clone(), x.clone()).await, Some(a));
    store
        .claim(&x, &owner("v"), term(20.0, 10.0))
        .await
        .expect("claim reaches the store")
        .expect("the expired lease is claimed again");
    assert_eq!(token_of(store.clone(), x.clone()).await, None);
    enqueued_with(&store, "y", &spec("q", 0, None, 5)).await;
    let leases = store
        .claim_next(&queue("q"), &owner("w"), term(30.0, 10.0).with_token(b), 1)
        .await
        .expect("claim_next reaches the store");
    assert_eq!(ids(&leases), ["y"]);
    assert_eq!(token_of(store.clone(), job("y")).await, Some(b));
    let copy = Arc::new(MemoryLeaseStore::new());
    crate::transfer::migrate(transfer.as_ref(), copy.as_ref(), false)
        .await
        .expect("the jobs migrate");
    assert_eq!(token_of(copy, job("y")).await, Some(b));
}

/// Plays the overview's scenario on `store`: jobs waiting since known and unknown times, a
/// scheduled job, a lease that ends, completions in two minutes and a stale write refused at
/// 111 (a refusal the trail records, at its own time, when it is on).
async fn overview_scenario<S: LeaseStore + ?Sized>(store: &S) {
    let with = |queue: &str, enqueued: Option<f64>, run_at: Option<f64>| EnqueueSpec {
        queue: QueueName::new(queue).expect("valid queue"),
        enqueued_at: enqueued.map(at),
        run_at: run_at.map(at),
        ..EnqueueSpec::default()
    };
    for (id, spec) in [
        ("a", with("mail", Some(10.0), None)),
        ("b", with("mail", Some(5.0), Some(50.0))),
        ("c", with("mail", None, None)),
        ("d", with("other", Some(7.0), None)),
        ("e", with("done", Some(1.0), None)),
        ("f", with("done", Some(1.0), None)),
        ("g", with("stale", Some(1.0), None)),
        ("h", with("mail", Some(3.0), None)),
        ("i", with("other", Some(2.0), None)),
    ] {
        assert!(store.enqueue_with(&job(id), &spec).await.expect("enqueue"));
    }
    let leases = store
        .claim(&job("a"), &owner("w"), term(20.0, 10.0))
        .await
        .expect("claim reads");
    assert_eq!(leases.map(|_| ()), Ok(()));
    store
        .cancel(&job("h"), at(21.0))
        .await
        .expect("cancel")
        .expect("cancelled");
    for (id, when) in [("e", 125.0), ("f", 61.0)] {
        let f = store
            .claim(&job(id), &owner("w"), term(when - 1.0, 10.0))
            .await
            .expect("claim reads")
            .expect("claimed");
        store
            .complete(&job(id), &owner("w"), f, at(when), &result("ok"))
            .await
            .expect("complete reads")
            .expect("completed");
    }
    let old = store
        .claim(&job("g"), &owner("w1"), term(100.0, 5.0))
        .await
        .expect("claim reads")
        .expect("claimed");
    store
        .claim(&job("g"), &owner("w2"), term(110.0, 60.0))
        .await
        .expect("claim reads")
        .expect("claimed");
    let late = store
        .complete(&job("g"), &owner("w1"), old, at(111.0), &result("late"))
        .await
        .expect("complete reads");
    assert!(late.is_err(), "the stale completion is refused");
    // A failure at the last attempt: a failed attempt, and a dead job, in minute 60.
    let f = store
        .claim(&job("i"), &owner("w"), term(62.0, 10.0))
        .await
        .expect("claim reads")
        .expect("claimed");
    store
        .fail(
            &job("i"),
            &owner("w"),
            f,
            at(65.0),
            &ErrorText::new("boom").expect("valid error"),
            Retry::No,
        )
        .await
        .expect("fail reads")
        .expect("failed");
}

/// The overview reports what the domain's rules make of the jobs, as the memory store does:
/// waiting jobs per queue (pending and due) with the earliest known waiting time at several
/// times, and completions per minute; refusals per minute in their job's queue (at the time
/// the trail recorded them) when the store keeps an audit trail (`audited`), none otherwise.
///
/// # Panics
/// On any difference.
pub async fn overview_counts_what_the_rules_decide<S>(store: &S, audited: bool)
where
    S: LeaseStore + crate::overview::Overview + ?Sized,
{
    use crate::overview::Overview;
    let reference = MemoryLeaseStore::new();
    overview_scenario(store).await;
    overview_scenario(&reference).await;
    for now in [0.0, 25.0, 30.0, 49.9, 50.0, 200.0] {
        assert_eq!(
            store.due(at(now)).await.expect("due reads"),
            reference.due(at(now)).await.expect("due reads"),
            "waiting jobs at {now}"
        );
    }
    let expected_due = reference.due(at(200.0)).await.expect("due reads");
    let mail = expected_due.iter().find(|r| r.queue.as_str() == "mail");
    assert_eq!(
        mail.map(|r| (r.due, r.oldest_since)),
        Some((3, Some(at(30.0)))),
        "a's lease ended at 30; b waits since its run_at 50; c knows no time"
    );
    for since in [0.0, 60.0, 61.5, 121.0, 180.0] {
        let got = store.activity(at(since)).await.expect("activity reads");
        let want = reference.activity(at(since)).await.expect("activity reads");
        let completed = |rows: &[crate::overview::MinuteRow]| {
            rows.iter()
                .filter(|r| r.completed > 0)
                .map(|r| (r.queue.as_str().to_owned(), r.minute.get(), r.completed))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            completed(&got),
            completed(&want),
            "completions from {since}"
        );
        let ends = |rows: &[crate::overview::MinuteRow]| {
            rows.iter()
                .filter(|r| r.failed + r.dead + r.cancelled > 0)
                .map(|r| {
                    (
                        r.queue.as_str().to_owned(),
                        r.minute.get(),
                        (r.failed, r.dead, r.cancelled),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(ends(&got), ends(&want), "failures and ends from {since}");
        if since <= 60.0 {
            assert!(
                ends(&want).contains(&("other".to_owned(), 60.0, (1, 1, 0))),
                "the failed attempt and the dead job count in their minute: {:?}",
                ends(&want)
            );
        }
        // A refusal is recorded at the store's own time (the wall clock), after every
        // `since` here.
        let refused: Vec<(String, u64)> = got
            .iter()
            .filter(|r| r.refused > 0)
            .map(|r| {
                assert!(
                    r.minute.get() % 60.0 == 0.0
                        && r.minute >= crate::overview::minute_of(at(since)),
                    "a refusal's minute {:?} from {since}",
                    r.minute
                );
                (r.queue.as_str().to_owned(), r.refused)
            })
            .collect();
        let expected = if audited {
            vec![("stale".to_owned(), 1)]
        } else {
            Vec::new()
        };
        assert_eq!(refused, expected, "refusals from {since}");
    }
}

/// The key store's behaviour, which every adapter's tests run on a fresh store: keys are
/// kept and read back whole, a principal holds at most two live keys of one scope, ids are
/// unique, revoking frees a place and keeps the first revocation time, and concurrent adds
/// never break the limit.
pub async fn key_store_keeps_keys_by_the_rules(store: Arc<dyn KeyStore>) {
    let key = |id: &str, principal: &str, scope: Scope| KeyRecord {
        id: KeyId::new(id).expect("valid key id"),
        principal: Principal::new(principal).expect("valid principal"),
        scope,
        digest: TokenDigest::new([id.len().to_le_bytes()[0]; 32]),
        created: at(100.0),
        revoked: None,
    };
    assert_eq!(store.keys().await.expect("keys read"), []);
    let first = key("a1", "ci", Scope::Worker);
    assert_eq!(store.add_key(&first).await.expect("add reaches"), Ok(()));
    assert_eq!(
        store.key(&first.id).await.expect("key reads"),
        Some(first.clone())
    );
    assert_eq!(
        store
            .add_key(&key("a1", "cd", Scope::Worker))
            .await
            .expect("add reaches"),
        Err(KeyRefused::IdTaken(first.id.clone()))
    );
    assert!(matches!(
        store
            .add_key(&key("a2", "ci", Scope::Admin))
            .await
            .expect("add reaches"),
        Err(KeyRefused::ScopeDiffers { .. })
    ));
    assert_eq!(
        store
            .add_key(&key("a2", "ci", Scope::Worker))
            .await
            .expect("add reaches"),
        Ok(())
    );
    assert!(matches!(
        store
            .add_key(&key("a3", "ci", Scope::Worker))
            .await
            .expect("add reaches"),
        Err(KeyRefused::TooManyKeys { live: 2, .. })
    ));
    assert!(
        store
            .revoke_key(&first.id, at(200.0))
            .await
            .expect("revoke reaches")
    );
    assert!(
        store
            .revoke_key(&first.id, at(300.0))
            .await
            .expect("revoke reaches")
    );
    assert!(
        !store
            .revoke_key(&KeyId::new("zz").expect("valid"), at(300.0))
            .await
            .expect("revoke reaches")
    );
    assert_eq!(
        store
            .key(&first.id)
            .await
            .expect("key reads")
            .and_then(|k| k.revoked),
        Some(at(200.0))
    );
    assert_eq!(
        store
            .add_key(&key("a3", "ci", Scope::Worker))
            .await
            .expect("add reaches"),
        Ok(())
    );
    let ids: Vec<String> = store
        .keys()
        .await
        .expect("keys read")
        .into_iter()
        .map(|k| k.id.as_str().to_owned())
        .collect();
    assert_eq!(ids, ["a1", "a2", "a3"]);
    // Eight concurrent adds for a fresh principal: exactly two are taken.
    let adds = (0..8).map(|n| {
        let store = store.clone();
        let candidate = key(&format!("r{n}"), "race", Scope::Viewer);
        tokio::spawn(async move { store.add_key(&candidate).await })
    });
    let mut accepted = 0;
    for add in adds {
        if add.await.expect("task runs").expect("add reaches").is_ok() {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 2);
}

/// `list` pages by key: each page starts after the last id of the one before, in id order,
/// with the queue and status filters applied, and the pages together are the whole list.
pub async fn list_pages_by_the_last_id_of_the_page_before(store: Store) {
    for id in ["e", "a", "d", "b", "f", "c"] {
        enqueued_with(&store, id, &spec("q", 0, None, 5)).await;
    }
    enqueued_with(&store, "bb", &spec("other", 0, None, 5)).await;
    let claimed = next(&store, "q", "w", 0.0, 1).await;
    assert_eq!(ids(&claimed), ["e"]);
    let page = |after: Option<&str>| ListFilter {
        queue: Some(queue("q")),
        status: Some(Status::Pending),
        limit: 2,
        now: at(1.0),
        after: after.map(job),
        group: None,
        prefix: None,
    };
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let records = store
            .list(&page(after.as_deref()))
            .await
            .expect("list works");
        let Some(last) = records.last() else { break };
        after = Some(last.id.as_str().to_owned());
        seen.extend(records.iter().map(|r| r.id.as_str().to_owned()));
    }
    assert_eq!(seen, ["a", "b", "c", "d", "f"]);
}

// ---- Queue control and schedules ----

async fn change(store: &ControlStore, q: &str, change: QueueChange) -> QueueSettings {
    store
        .change_queue(&queue(q), change)
        .await
        .expect("change_queue reaches the store")
}

/// A paused queue leases nothing, though its jobs are due; enqueues go on, a running lease is
/// renewed and completed as before, other queues run; a pause until a time ends at that time,
/// and a resumed queue runs again. `queues` shows the settings.
pub async fn a_paused_queue_leases_nothing_until_it_is_resumed_and_running_leases_stand(
    store: ControlStore,
) {
    let lease_store: Store = store.clone();
    for i in 0..3 {
        enqueued_with(&lease_store, &format!("p{i}"), &spec("q", 0, None, 5)).await;
    }
    enqueued_with(&lease_store, "other", &spec("r", 0, None, 5)).await;
    let running = next(&lease_store, "q", "w", 1.0, 1).await;
    assert_eq!(ids(&running), ["p0"]);
    let paused = change(&store, "q", QueueChange::Pause(None)).await;
    assert!(paused.is_paused_at(at(1e9)));
    assert!(
        next(&lease_store, "q", "w", 2.0, 5).await.is_empty(),
        "a paused queue leased"
    );
    assert_eq!(ids(&next(&lease_store, "r", "w", 2.0, 5).await), ["other"]);
    enqueued_with(&lease_store, "p3", &spec("q", 0, None, 5)).await;
    let held = &running[0];
    store
        .renew(&held.job, &owner("w"), held.fence, term(3.0, 10.0))
        .await
        .expect("renew reaches the store")
        .expect("a running lease is renewed while its queue is paused");
    complete_granted(&lease_store, &held.job, "w", held.fence, 4.0, "done").await;
    let listed = store.queues().await.expect("queues reads");
    assert_eq!(listed, vec![(queue("q"), paused.clone())]);
    assert_eq!(
        store.settings_of(&queue("q")).await.expect("settings read"),
        paused
    );
    assert_eq!(
        store.settings_of(&queue("r")).await.expect("settings read"),
        QueueSettings::default(),
        "a queue without settings has the default"
    );
    // Until a time: nothing before it, the jobs at it.
    change(&store, "q", QueueChange::Pause(Some(at(20.0)))).await;
    assert!(next(&lease_store, "q", "w", 19.5, 5).await.is_empty());
    assert_eq!(ids(&next(&lease_store, "q", "w", 20.0, 1).await), ["p1"]);
    change(&store, "q", QueueChange::Pause(None)).await;
    assert!(next(&lease_store, "q", "w", 22.0, 5).await.is_empty());
    let resumed = change(&store, "q", QueueChange::Resume).await;
    assert!(resumed.is_default());
    assert_eq!(
        ids(&next(&lease_store, "q", "w", 23.0, 5).await),
        ["p2", "p3"]
    );
    assert_eq!(store.queues().await.expect("queues reads"), vec![]);
}

/// A concurrency limit: a claim takes no more than the room the queue's live leases leave,
/// a completion or an expiry frees a slot, and claims racing from many callers never make
/// more leases live at once than the limit.
pub async fn a_concurrency_limit_bounds_the_live_leases_of_a_queue_under_racing_claims(
    store: ControlStore,
) {
    let lease_store: Store = store.clone();
    for i in 0..20 {
        enqueued_with(&lease_store, &format!("c{i:02}"), &spec("q", 0, None, 5)).await;
    }
    let limited = change(&store, "q", QueueChange::Concurrency(Concurrency::new(2))).await;
    assert_eq!(limited.concurrency, Concurrency::new(2));
    let first = next(&lease_store, "q", "a", 1.0, 5).await;
    assert_eq!(first.len(), 2, "a claim took more than the limit");
    assert!(next(&lease_store, "q", "b", 1.5, 5).await.is_empty());
    complete_granted(&lease_store, &first[0].job, "a", first[0].fence, 2.0, "ok").await;
    assert_eq!(next(&lease_store, "q", "b", 2.5, 5).await.len(), 1);
    // The leases of 1.0 end at 11.0, of 2.5 at 12.5: one slot comes back at 11.
    assert!(next(&lease_store, "q", "b", 10.9, 5).await.is_empty());
    assert_eq!(next(&lease_store, "q", "b", 11.0, 5).await.len(), 1);
    // Racing claims at one time, after every lease so far ended: at most two live.
    let racing = (0..8).map(|w| {
        let store = Arc::clone(&lease_store);
        async move {
            store
                .claim_next(&queue("q"), &owner(&format!("r{w}")), term(100.0, 10.0), 1)
                .await
                .expect("claim_next reaches the store")
        }
    });
    let leases: usize = futures::future::join_all(racing)
        .await
        .iter()
        .map(Vec::len)
        .sum();
    assert_eq!(
        leases, 2,
        "racing claims made {leases} leases live under a limit of 2"
    );
    let removed = change(&store, "q", QueueChange::Concurrency(None)).await;
    assert!(removed.is_default());
    assert_eq!(next(&lease_store, "q", "z", 101.0, 3).await.len(), 3);
}

/// A lease carries its job's timeout, else its queue's default, else none.
pub async fn a_lease_carries_its_jobs_timeout_else_its_queues(store: ControlStore) {
    let lease_store: Store = store.clone();
    let own = EnqueueSpec {
        timeout: Some(Ttl::new(5.0).expect("ttl")),
        ..spec("q", 2, None, 5)
    };
    enqueued_with(&lease_store, "own", &own).await;
    enqueued_with(&lease_store, "plain", &spec("q", 1, None, 5)).await;
    enqueued_with(&lease_store, "free", &spec("r", 0, None, 5)).await;
    change(
        &store,
        "q",
        QueueChange::Timeout(Some(Ttl::new(30.0).expect("ttl"))),
    )
    .await;
    let leases = next(&lease_store, "q", "w", 1.0, 2).await;
    let timeouts: Vec<(&str, Option<f64>)> = leases
        .iter()
        .map(|l| (l.job.as_str(), l.timeout.map(Ttl::get)))
        .collect();
    assert_eq!(timeouts, [("own", Some(5.0)), ("plain", Some(30.0))]);
    let free = next(&lease_store, "r", "w", 1.0, 1).await;
    assert_eq!(free[0].timeout, None);
    let record = lease_store
        .record(&job("own"))
        .await
        .expect("record reads")
        .expect("job exists");
    assert_eq!(record.job.timeout, Ttl::new(5.0).ok());
    // A limit and a timeout set in one change, then both removed in one.
    let both = change(
        &store,
        "q",
        QueueChange::Limits(Limits::both(Concurrency::new(3), Ttl::new(7.0).ok())),
    )
    .await;
    assert_eq!(
        (both.concurrency, both.timeout),
        (Concurrency::new(3), Ttl::new(7.0).ok())
    );
    let neither = change(&store, "q", QueueChange::Limits(Limits::both(None, None))).await;
    assert!(neither.is_default(), "{neither:?}");
}

/// An enqueue with `replace_finished` runs a done, dead or cancelled job again: pending, its
/// attempts from 0, its fence going on, its last result kept until the new run completes; a
/// pending or running job is never touched, and a plain enqueue never reruns anything.
pub async fn a_finished_job_runs_again_only_when_asked_keeping_its_fence_and_result(
    store: ControlStore,
) {
    let store: Store = store;
    let again = EnqueueSpec {
        replace_finished: true,
        ..spec("q", 0, None, 3)
    };
    let id = enqueued_with(&store, "report", &spec("q", 0, None, 1)).await;
    let first = next(&store, "q", "w", 1.0, 1).await;
    complete_granted(&store, &id, "w", first[0].fence, 2.0, "v1").await;
    assert!(
        !store
            .enqueue_with(&id, &spec("q", 0, None, 3))
            .await
            .expect("enqueue")
    );
    assert!(store.enqueue_with(&id, &again).await.expect("enqueue"));
    let rerun = store.record(&id).await.expect("record").expect("job");
    assert_eq!(rerun.job.status_at(at(3.0)), Status::Pending);
    assert_eq!(
        (
            rerun.job.fence,
            rerun.job.result.as_deref(),
            rerun.job.attempts,
            rerun.job.max_attempts
        ),
        (fence(1), Some("v1"), 0, 3)
    );
    // Running now: another rerun changes nothing.
    let second = next(&store, "q", "w", 4.0, 1).await;
    assert_eq!(second[0].fence, fence(2));
    assert!(!store.enqueue_with(&id, &again).await.expect("enqueue"));
    // The old run's holder stays refused; the new run's result replaces the old one.
    let refused = store
        .complete(&id, &owner("w"), fence(1), at(5.0), &result("late"))
        .await
        .expect("complete reaches the store");
    assert!(refused.is_err());
    complete_granted(&store, &id, "w", fence(2), 5.0, "v2").await;
    let done = store.record(&id).await.expect("record").expect("job");
    assert_eq!(
        (done.job.result.as_deref(), done.job.result_fence),
        (Some("v2"), Some(fence(2)))
    );
    // A cancelled job, through a batch.
    let c = enqueued_with(&store, "cancelled", &spec("q", 0, None, 3)).await;
    store
        .cancel(&c, at(6.0))
        .await
        .expect("cancel")
        .expect("cancelled");
    let batch = vec![(c.clone(), again.clone()), (job("fresh"), again)];
    assert_eq!(
        store.enqueue_many(&batch).await.expect("batch"),
        [true, true]
    );
    assert_eq!(status(&store, &c, 7.0).await, Status::Pending);
}

/// A progress report by the live holder is stored and renews the lease (or, without a term,
/// keeps its end); a stale or expired holder's is refused and changes nothing; the next lease
/// starts without it.
pub async fn progress_is_the_live_holders_and_renews_its_lease(store: ControlStore) {
    let store: Store = store;
    let id = enqueued(&store, "p").await;
    let f = claimed(&store, &id, "A", 100.0, 30.0).await;
    let text = ProgressText::new("12 of 40 files").expect("progress");
    store
        .progress(&id, &owner("A"), f, term(110.0, 30.0).into(), &text)
        .await
        .expect("progress reaches the store")
        .expect("the holder's progress is stored");
    let record = store.record(&id).await.expect("record").expect("job");
    assert_eq!(record.job.progress.as_deref(), Some("12 of 40 files"));
    assert_eq!(record.job.until, at(140.0));
    let kept = ProgressText::new("13 of 40 files").expect("progress");
    store
        .progress(&id, &owner("A"), f, Renewal::Keep(at(120.0)), &kept)
        .await
        .expect("progress reaches the store")
        .expect("the holder's progress is stored");
    let record = store.record(&id).await.expect("record").expect("job");
    assert_eq!(
        (record.job.progress.as_deref(), record.job.until),
        (Some("13 of 40 files"), at(140.0)),
        "without a term the lease keeps its end"
    );
    let stale = store
        .progress(&id, &owner("B"), f, term(111.0, 30.0).into(), &text)
        .await
        .expect("progress reaches the store");
    assert!(
        matches!(stale, Err(WriteRefused::NotOwner { .. })),
        "{stale:?}"
    );
    let expired = store
        .progress(&id, &owner("A"), f, term(150.0, 30.0).into(), &text)
        .await
        .expect("progress reaches the store");
    assert!(
        matches!(expired, Err(WriteRefused::Expired { .. })),
        "{expired:?}"
    );
    let next_fence = claimed(&store, &id, "B", 200.0, 30.0).await;
    let record = store.record(&id).await.expect("record").expect("job");
    assert_eq!((record.job.progress, record.job.fence), (None, next_fence));
}

fn schedule_spec(name: &str, cron: &str) -> ScheduleSpec {
    ScheduleSpec {
        name: ScheduleName::new(name).expect("name"),
        cron: cron.to_owned(),
        zone: "Europe/Paris".to_owned(),
        job: EnqueueSpec {
            payload: Some(Payload::new(b"tick".to_vec(), 16).expect("payload")),
            ..spec("reports", 3, None, 2)
        },
        catch_up: CatchUp::All(5),
    }
}

fn fire_of(schedule: &crate::Schedule, tick: f64, jobs: &[&str]) -> Fire {
    Fire {
        name: schedule.spec.name.clone(),
        version: schedule.version,
        last_tick: schedule.last_tick,
        tick: at(tick),
        jobs: jobs
            .iter()
            .map(|id| {
                let spec = EnqueueSpec {
                    enqueued_at: Some(at(tick)),
                    ..schedule.spec.job.clone()
                };
                (job(id), spec)
            })
            .collect(),
    }
}

/// A schedule is kept as put, replaced with its making and last tick kept and its version
/// counted, fired only as it was read (a second fire of the same read, or one of an older
/// version, writes nothing), and removed; its ticks' jobs stay.
pub async fn schedules_are_kept_and_a_tick_fires_once(store: ControlStore) {
    let made = store
        .put_schedule(&schedule_spec("nightly", "0 3 * * *"), at(100.0))
        .await
        .expect("put works");
    assert_eq!(
        (made.version, made.created, made.last_tick),
        (1, at(100.0), None)
    );
    assert_eq!(
        store.schedules().await.expect("schedules read"),
        vec![made.clone()]
    );
    assert_eq!(
        store
            .schedule(&made.spec.name)
            .await
            .expect("schedule reads"),
        Some(made.clone())
    );
    let other = ScheduleName::new("weekly").expect("name");
    assert_eq!(store.schedule(&other).await.expect("schedule reads"), None);
    let fired = store
        .fire_schedule(&fire_of(&made, 160.0, &["nightly@1"]))
        .await
        .expect("fire reaches the store");
    assert_eq!(fired, Some(vec![true]));
    assert_eq!(
        store
            .fire_schedule(&fire_of(&made, 160.0, &["nightly@1"]))
            .await
            .expect("fire"),
        None,
        "the same read fired twice"
    );
    let tick_job = store
        .record(&job("nightly@1"))
        .await
        .expect("record")
        .expect("tick job");
    assert_eq!(
        (
            tick_job.job.queue.as_str(),
            tick_job.job.priority,
            tick_job.job.updated
        ),
        ("reports", 3, Some(at(160.0)))
    );
    let stored = store.schedules().await.expect("schedules read");
    assert_eq!(stored[0].last_tick, Some(at(160.0)));
    let replaced = store
        .put_schedule(&schedule_spec("nightly", "@hourly"), at(200.0))
        .await
        .expect("put works");
    assert_eq!(
        (
            replaced.version,
            replaced.created,
            replaced.last_tick,
            replaced.spec.cron.as_str()
        ),
        (2, at(100.0), Some(at(160.0)), "@hourly")
    );
    // A pass that read version 1 fires nothing now.
    let stale = Fire {
        last_tick: Some(at(160.0)),
        ..fire_of(&made, 220.0, &["nightly@2"])
    };
    assert_eq!(store.fire_schedule(&stale).await.expect("fire"), None);
    assert!(
        store
            .record(&job("nightly@2"))
            .await
            .expect("record")
            .is_none()
    );
    assert!(
        store
            .remove_schedule(&replaced.spec.name)
            .await
            .expect("remove")
    );
    assert!(
        !store
            .remove_schedule(&replaced.spec.name)
            .await
            .expect("remove")
    );
    assert_eq!(store.schedules().await.expect("schedules read"), vec![]);
    assert_eq!(
        store
            .fire_schedule(&fire_of(&replaced, 3600.0, &["nightly@3"]))
            .await
            .expect("fire"),
        None
    );
    assert!(
        store
            .record(&job("nightly@1"))
            .await
            .expect("record")
            .is_some()
    );
}

/// Passes racing to fire the same tick of the same read: exactly one fires, and the tick's
/// job is made once.
pub async fn racing_fires_of_one_tick_make_one_job(store: ControlStore) {
    let made = store
        .put_schedule(&schedule_spec("race", "* * * * *"), at(0.0))
        .await
        .expect("put works");
    let fire = fire_of(&made, 60.0, &["race@60"]);
    let racing = (0..8).map(|_| {
        let (store, fire) = (Arc::clone(&store), fire.clone());
        async move {
            store
                .fire_schedule(&fire)
                .await
                .expect("fire reaches the store")
        }
    });
    let fired: Vec<Option<Vec<bool>>> = futures::future::join_all(racing).await;
    assert_eq!(fired.iter().filter(|f| f.is_some()).count(), 1, "{fired:?}");
    assert!(fired.contains(&Some(vec![true])));
}

/// `export` carries every queue's settings and every schedule with its last tick; `import`
/// writes them, and a merge keeps the target's own, taking the later last tick of a schedule
/// both sides have.
pub async fn export_and_import_carry_queue_settings_and_schedules(store: TransferStore) {
    store
        .change_queue(&queue("q"), QueueChange::Concurrency(Concurrency::new(3)))
        .await
        .expect("change works");
    store
        .change_queue(&queue("q"), QueueChange::Pause(Some(at(50.0))))
        .await
        .expect("change works");
    let grouped_rules = Limits {
        per_group: Some(Concurrency::new(2)),
        ordered: Some(true),
        fair: Some(true),
        ..Limits::default()
    };
    let ruled = store
        .change_queue(&queue("q"), QueueChange::Limits(grouped_rules))
        .await
        .expect("change works");
    let held = GroupKey::new("held").expect("group");
    store
        .change_queue(
            &queue("q"),
            QueueChange::PauseGroup(held.clone(), Some(at(90.0))),
        )
        .await
        .expect("change works");
    assert_eq!(
        (ruled.per_group, ruled.ordered),
        (Concurrency::new(2), true)
    );
    let lease_store: Store = store.clone();
    enqueued_with(&lease_store, "in-group", &grouped("q", "g")).await;
    let made = store
        .put_schedule(&schedule_spec("s", "@daily"), at(10.0))
        .await
        .expect("put works");
    store
        .fire_schedule(&fire_of(&made, 86_400.0, &[]))
        .await
        .expect("fire works")
        .expect("fired");
    let snapshot = store.export().await.expect("export works");
    assert_eq!(snapshot.queues.len(), 1);
    assert_eq!(
        (
            snapshot.queues[0].1.per_group,
            snapshot.queues[0].1.ordered,
            snapshot.queues[0].1.fair
        ),
        (Concurrency::new(2), true, true)
    );
    assert_eq!(
        snapshot.queues[0].1.paused_groups.get(&held),
        Some(&Some(at(90.0)))
    );
    assert_eq!(
        snapshot
            .jobs
            .iter()
            .find(|j| j.id.as_str() == "in-group")
            .map(|j| j.job.group.clone()),
        Some(Some(GroupKey::new("g").expect("group")))
    );
    assert_eq!(snapshot.schedules.len(), 1);
    let copy = MemoryLeaseStore::new();
    copy.import(&snapshot, false).await.expect("import works");
    assert_eq!(copy.export().await.expect("export"), snapshot);
    // A merge into the store: its own settings and spec stay; a later last tick is taken.
    let mut newer = snapshot.clone();
    newer.queues[0].1.concurrency = Concurrency::new(9);
    newer.schedules[0].last_tick = Some(at(172_800.0));
    newer.schedules[0].spec.cron = "@hourly".to_owned();
    let imported = store.import(&newer, true).await.expect("merge works");
    assert_eq!((imported.queues, imported.schedules), (0, 1));
    let after = store.export().await.expect("export");
    assert_eq!(after.queues, snapshot.queues);
    assert_eq!(after.schedules[0].spec.cron, "@daily");
    assert_eq!(after.schedules[0].last_tick, Some(at(172_800.0)));
}

// ---- Trace context ----

/// A trace context of its own for `n`.
fn traced(n: u8, state: Option<&str>) -> lease_domain::TraceContext {
    lease_domain::TraceContext::new(&format!("00-{:032x}-{:016x}-01", n, n), state)
        .expect("a valid traceparent")
}

/// A job keeps the trace context of the enqueue that made it (or ran it again), apart from
/// its fields: a later enqueue of a live job leaves it, a run again takes the new enqueue's
/// (or none), a batch keeps each job's, and a purge takes it with the job.
pub async fn a_job_keeps_the_trace_context_it_was_enqueued_with(store: Store) {
    let first = traced(1, Some("vendor=a"));
    let with = |n: Option<&lease_domain::TraceContext>, replace: bool| EnqueueSpec {
        trace: n.cloned(),
        replace_finished: replace,
        ..spec("traced", 0, None, 3)
    };
    let a = enqueued_with(&store, "a", &with(Some(&first), false)).await;
    let b = enqueued_with(&store, "b", &with(None, false)).await;
    assert_eq!(store.trace(&a).await.expect("trace"), Some(first.clone()));
    assert_eq!(store.trace(&b).await.expect("trace"), None);
    assert_eq!(store.trace(&job("missing")).await.expect("trace"), None);
    // An enqueue of a job that exists changes nothing, its trace context included.
    assert!(
        !store
            .enqueue_with(&a, &with(Some(&traced(2, None)), true))
            .await
            .expect("enqueue")
    );
    assert_eq!(store.trace(&a).await.expect("trace"), Some(first.clone()));
    // The trace context is not among the job's fields: a record is the same either way.
    let untraced = enqueued_with(&store, "c", &with(None, false)).await;
    let (ra, rc) = (
        store.record(&a).await.expect("record").expect("job"),
        store.record(&untraced).await.expect("record").expect("job"),
    );
    assert_eq!(ra.job, rc.job);
    // A run again takes the new enqueue's trace context, or none.
    let lease = next(&store, "traced", "w", 1.0, 1).await;
    assert_eq!(lease[0].job, a);
    complete_granted(&store, &a, "w", lease[0].fence, 2.0, "v1").await;
    let second = traced(2, None);
    assert!(
        store
            .enqueue_with(&a, &with(Some(&second), true))
            .await
            .expect("enqueue")
    );
    assert_eq!(store.trace(&a).await.expect("trace"), Some(second));
    let lease = next(&store, "traced", "w", 3.0, 1).await;
    assert_eq!(lease[0].job, a);
    complete_granted(&store, &a, "w", lease[0].fence, 4.0, "v2").await;
    assert!(
        store
            .enqueue_with(&a, &with(None, true))
            .await
            .expect("enqueue")
    );
    assert_eq!(store.trace(&a).await.expect("trace"), None);
    // A batch keeps each job's own.
    let batch = [
        (job("m1"), with(Some(&traced(3, None)), false)),
        (job("m2"), with(None, false)),
        (job("m3"), with(Some(&traced(4, Some("k=v"))), false)),
    ];
    store.enqueue_many(&batch).await.expect("enqueue_many");
    for (id, spec) in &batch {
        assert_eq!(store.trace(id).await.expect("trace"), spec.trace, "{id}");
    }
    // A purge takes it with the job; the id enqueued again has none of it.
    let purged = job("m1");
    let f = claimed(&store, &purged, "w", 5.0, 30.0).await;
    complete_granted(&store, &purged, "w", f, 6.0, "done").await;
    assert!(store.trace(&purged).await.expect("trace").is_some());
    store
        .purge(at(1_000.0), &[Status::Done])
        .await
        .expect("purge");
    assert_eq!(store.trace(&purged).await.expect("trace"), None);
    store
        .enqueue_with(&purged, &with(None, false))
        .await
        .expect("enqueue");
    assert_eq!(store.trace(&purged).await.expect("trace"), None);
}

/// A migration carries each job's trace context: copied jobs keep theirs, and a job replaced
/// by a merge takes the source's.
pub async fn export_and_import_carry_trace_contexts(store: TransferStore) {
    let lease_store: Store = store.clone();
    let with = |t: Option<lease_domain::TraceContext>| EnqueueSpec {
        trace: t,
        ..spec("traced", 0, None, 3)
    };
    enqueued_with(&lease_store, "t1", &with(Some(traced(7, Some("a=b"))))).await;
    enqueued_with(&lease_store, "t2", &with(None)).await;
    let snapshot = store.export().await.expect("export works");
    assert_eq!(snapshot.traces, vec![(job("t1"), traced(7, Some("a=b")))]);
    let copy = MemoryLeaseStore::new();
    copy.import(&snapshot, false).await.expect("import works");
    assert_eq!(copy.export().await.expect("export"), snapshot);
    assert_eq!(
        copy.trace(&job("t1")).await.expect("trace"),
        Some(traced(7, Some("a=b")))
    );
    // Into the store: a merge replaces t2 (the source's fence is larger) with its trace.
    let mut newer = snapshot.clone();
    for record in &mut newer.jobs {
        record.job.fence = fence(5);
    }
    newer.traces = vec![(job("t2"), traced(8, None))];
    store.import(&newer, true).await.expect("merge works");
    assert_eq!(
        lease_store.trace(&job("t2")).await.expect("trace"),
        Some(traced(8, None))
    );
    assert_eq!(
        lease_store.trace(&job("t1")).await.expect("trace"),
        None,
        "t1 was replaced by a job without one"
    );
}

/// A migration carries each job's kept attempts: a copy has them as the source kept them, and
/// a job replaced by a merge takes the source's (here none).
pub async fn export_and_import_carry_attempts(store: TransferStore) {
    let lease_store: Store = store.clone();
    let id = enqueued_with(&lease_store, "a1", &spec("tried", 0, None, 3)).await;
    let first = claimed(&lease_store, &id, "w", 0.0, 10.0).await;
    let second = claimed(&lease_store, &id, "v", 20.0, 10.0).await;
    complete_granted(&lease_store, &id, "v", second, 21.0, "done").await;
    let kept = lease_store.attempts(&id).await.expect("attempts read");
    assert_eq!(
        kept.kept.iter().map(|a| a.fence).collect::<Vec<_>>(),
        vec![first, second]
    );
    let snapshot = store.export().await.expect("export works");
    assert_eq!(
        snapshot.attempts,
        kept.kept
            .iter()
            .map(|a| (id.clone(), a.clone()))
            .collect::<Vec<_>>()
    );
    let copy = MemoryLeaseStore::new();
    copy.import(&snapshot, false).await.expect("import works");
    assert_eq!(copy.attempts(&id).await.expect("attempts read"), kept);
    // Into the store: a merge replaces a1 (the source's fence is larger), and its attempts
    // with the source's.
    let mut newer = snapshot.clone();
    for record in &mut newer.jobs {
        record.job.fence = fence(9);
    }
    newer.attempts = Vec::new();
    store.import(&newer, true).await.expect("merge works");
    assert_eq!(
        lease_store.attempts(&id).await.expect("attempts read"),
        lease_domain::Attempts::default(),
        "a1 was replaced by a job without any"
    );
}

// ---- Groups ----

/// The group of each lease, by job id.
fn groups_of(leases: &[Lease]) -> Vec<(&str, Option<&str>)> {
    leases
        .iter()
        .map(|l| (l.job.as_str(), l.group.as_ref().map(GroupKey::as_str)))
        .collect()
}

/// A job keeps the group it was enqueued with, its record and its lease show it, and a queue
/// without group rules claims in claim order whatever the groups.
pub async fn a_job_keeps_its_group_and_its_lease_carries_it(store: ControlStore) {
    let lease_store: Store = store.clone();
    enqueued_with(&lease_store, "a1", &grouped("q", "acct-a")).await;
    enqueued_with(&lease_store, "a2", &grouped("q", "acct-a")).await;
    enqueued_with(&lease_store, "free", &spec("q", 0, None, 5)).await;
    let record = lease_store
        .record(&job("a1"))
        .await
        .expect("record reads")
        .expect("job exists");
    assert_eq!(
        record.job.group,
        Some(GroupKey::new("acct-a").expect("group"))
    );
    let leases = next(&lease_store, "q", "w", 1.0, 5).await;
    assert_eq!(
        groups_of(&leases),
        [
            ("a1", Some("acct-a")),
            ("a2", Some("acct-a")),
            ("free", None)
        ]
    );
}

/// A per-group limit: a claim takes at most the room each group's live leases leave (jobs
/// without a group are not limited), a completion or an expiry frees a slot of its group, and
/// claims racing from many callers never make more of a group's leases live than the limit.
pub async fn a_per_group_limit_bounds_each_groups_live_leases_under_racing_claims(
    store: ControlStore,
) {
    let lease_store: Store = store.clone();
    for i in 0..4 {
        for g in ["a", "b", "c"] {
            enqueued_with(&lease_store, &format!("{g}{i}"), &grouped("q", g)).await;
        }
    }
    enqueued_with(&lease_store, "x0", &spec("q", 0, None, 5)).await;
    enqueued_with(&lease_store, "x1", &spec("q", 0, None, 5)).await;
    let limited = limit(
        &store,
        "q",
        Limits {
            per_group: Some(Concurrency::new(2)),
            ..Limits::default()
        },
    )
    .await;
    assert_eq!(limited.per_group, Concurrency::new(2));
    let first = next(&lease_store, "q", "w", 1.0, 20).await;
    let mut took = ids(&first);
    took.sort_unstable();
    assert_eq!(took, ["a0", "a1", "b0", "b1", "c0", "c1", "x0", "x1"]);
    assert!(next(&lease_store, "q", "w", 2.0, 20).await.is_empty());
    let a0 = first.iter().find(|l| l.job.as_str() == "a0").expect("a0");
    complete_granted(&lease_store, &a0.job, "w", a0.fence, 3.0, "ok").await;
    assert_eq!(ids(&next(&lease_store, "q", "w", 4.0, 20).await), ["a2"]);
    // Every lease so far ends by 14.0; then claims race, one lease each.
    let leases = racing_claims(&lease_store, "q", 12, 100.0).await;
    for g in ["a", "b", "c"] {
        let live = leases
            .iter()
            .filter(|l| l.group.as_ref().is_some_and(|k| k.as_str() == g))
            .count();
        // Fewer is allowed: a racer may find the rows it would take locked by another.
        assert!(
            live <= 2,
            "racing claims made {live} leases of group {g} live under 2"
        );
    }
    let removed = limit(
        &store,
        "q",
        Limits {
            per_group: Some(None),
            ..Limits::default()
        },
    )
    .await;
    assert!(removed.is_default(), "{removed:?}");
    // Thirteen jobs could run at 100 (a0 is done): the rest of them are leased now.
    assert_eq!(
        next(&lease_store, "q", "z", 101.0, 20).await.len(),
        13 - leases.len()
    );
}

/// Rates: a queue's rate grants at most N leases in any window of its period (sliding: a
/// window opens again as each grant expires, not at a bucket's edge), whatever the claims ask
/// and however many race; a rate per group does the same for each group (jobs without a group
/// are not limited by it); `throttle` says until when; removing a rate frees the queue.
pub async fn a_rate_grants_at_most_n_leases_in_any_window_under_racing_claims(store: ControlStore) {
    let lease_store: Store = store.clone();
    for i in 0..30 {
        enqueued_with(&lease_store, &format!("x{i:02}"), &spec("q", 0, None, 5)).await;
    }
    let rated = limit(
        &store,
        "q",
        Limits {
            rate: Some(Some(lease_domain::Rate::parse("3/10s").expect("a rate"))),
            ..Limits::default()
        },
    )
    .await;
    assert_eq!(rated.rate.map(|r| r.to_string()).as_deref(), Some("3/10s"));
    assert_eq!(next(&lease_store, "q", "w", 1.0, 2).await.len(), 2);
    assert_eq!(next(&lease_store, "q", "w", 4.0, 10).await.len(), 1);
    assert!(next(&lease_store, "q", "w", 5.0, 10).await.is_empty());
    let throttle = store
        .throttle(&queue("q"), at(5.0))
        .await
        .expect("throttle reaches the store");
    assert_eq!(
        throttle.until,
        Some(at(11.0)),
        "the first grant leaves at 11"
    );
    // Sliding: at 11 the two grants of 1.0 have left the window, the one of 4.0 has not.
    assert_eq!(next(&lease_store, "q", "w", 11.0, 10).await.len(), 2);
    assert!(next(&lease_store, "q", "w", 13.0, 10).await.is_empty());
    // Racing claims at a fresh window never grant more than 3 between them.
    let leases = racing_claims(&lease_store, "q", 12, 100.0).await;
    assert!(
        (1..=3).contains(&leases.len()),
        "racing claims under 3/10s granted {}",
        leases.len()
    );
    assert!(next(&lease_store, "q", "w", 105.0, 10).await.len() <= 3 - leases.len());
    // A rate per group instead: each group gets one lease a window, ungrouped jobs run.
    for i in 0..3 {
        for g in ["a", "b"] {
            enqueued_with(&lease_store, &format!("{g}{i}"), &grouped("p", g)).await;
        }
    }
    enqueued_with(&lease_store, "y0", &spec("p", 0, None, 5)).await;
    enqueued_with(&lease_store, "y1", &spec("p", 0, None, 5)).await;
    limit(
        &store,
        "p",
        Limits {
            rate_per_group: Some(Some(lease_domain::Rate::parse("1/1m").expect("a rate"))),
            ..Limits::default()
        },
    )
    .await;
    let mut took = ids(&next(&lease_store, "p", "w", 200.0, 20).await)
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    took.sort_unstable();
    assert_eq!(took, ["a0", "b0", "y0", "y1"]);
    // (At 205 the leases of 200 still run; a0's and b0's groups have no grant left.)
    assert!(next(&lease_store, "p", "w", 205.0, 20).await.is_empty());
    let throttle = store
        .throttle(&queue("p"), at(230.0))
        .await
        .expect("throttle reaches the store");
    assert_eq!(throttle.until, None);
    let groups: Vec<(&str, f64)> = throttle
        .groups
        .iter()
        .map(|(g, t)| (g.as_str(), t.get()))
        .collect();
    assert_eq!(groups, [("a", 260.0), ("b", 260.0)]);
    let mut again = ids(&next(&lease_store, "p", "w", 260.0, 20).await)
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    again.sort_unstable();
    // a0, b0 and the ungrouped jobs' leases ended at 210: in claim order a0 and b0 go again.
    assert_eq!(again, ["a0", "b0", "y0", "y1"]);
    // Removing the rate frees the group at once.
    let removed = limit(
        &store,
        "p",
        Limits {
            rate_per_group: Some(None),
            ..Limits::default()
        },
    )
    .await;
    assert!(removed.is_default(), "{removed:?}");
    assert_eq!(next(&lease_store, "p", "w", 261.0, 20).await.len(), 4);
    assert!(
        store
            .throttle(&queue("p"), at(261.0))
            .await
            .expect("throttle reaches the store")
            .is_clear()
    );
}

/// A lease holder holds its job's group until a time (its upstream answered 429): the group's
/// jobs wait until then while the queue's other groups run; a stale or expired holder, or a
/// job without a group, is refused and pauses nothing; a hold never shortens a longer pause.
pub async fn a_holder_holds_its_group_until_a_time_and_a_stale_holder_cannot(store: ControlStore) {
    let lease_store: Store = store.clone();
    for id in ["a1", "a2"] {
        enqueued_with(&lease_store, id, &grouped("q", "a")).await;
    }
    enqueued_with(&lease_store, "b1", &grouped("q", "b")).await;
    enqueued_with(&lease_store, "x", &spec("q", 0, None, 5)).await;
    let first = next(&lease_store, "q", "w", 1.0, 1).await;
    assert_eq!(ids(&first), ["a1"]);
    let hold = |who: &str, f: Fence, now: f64, until: f64| {
        let store = Arc::clone(&lease_store);
        let who = owner(who);
        async move {
            store
                .hold_group(&job("a1"), &who, f, at(now), at(until))
                .await
                .expect("hold_group reaches the store")
        }
    };
    let fence_now = first[0].fence;
    assert!(matches!(
        hold("w", Fence::ZERO, 2.0, 100.0).await,
        Err(WriteRefused::Stale { .. })
    ));
    assert!(matches!(
        hold("other", fence_now, 2.0, 100.0).await,
        Err(WriteRefused::NotOwner { .. })
    ));
    assert!(matches!(
        hold("w", fence_now, 20.0, 100.0).await,
        Err(WriteRefused::Expired { .. })
    ));
    assert!(
        store
            .settings_of(&queue("q"))
            .await
            .expect("settings")
            .is_default(),
        "a refused hold paused nothing"
    );
    hold("w", fence_now, 2.0, 100.0)
        .await
        .expect("the live holder holds its group");
    let settings = store.settings_of(&queue("q")).await.expect("settings");
    assert_eq!(
        settings
            .paused_groups
            .get(&GroupKey::new("a").expect("group")),
        Some(&Some(at(100.0)))
    );
    // a1 ends at 11; the group waits until 100 while the others run.
    let mut took: Vec<String> = ids(&next(&lease_store, "q", "w", 50.0, 10).await)
        .into_iter()
        .map(str::to_owned)
        .collect();
    took.sort_unstable();
    assert_eq!(took, ["b1", "x"]);
    // A shorter hold from a new lease does not shorten the pause.
    let again = lease_store
        .claim(&job("a1"), &owner("w"), term(60.0, 10.0))
        .await
        .expect("claim reaches the store")
        .expect("a claim by id is not held back");
    lease_store
        .hold_group(&job("a1"), &owner("w"), again, at(61.0), at(80.0))
        .await
        .expect("hold_group reaches the store")
        .expect("held");
    // (b1 and x, whose leases of 50 ended at 60, are leased again meanwhile.)
    let at_90 = next(&lease_store, "q", "w", 90.0, 10).await;
    assert!(
        ids(&at_90).iter().all(|id| !id.starts_with('a')),
        "a held group leased {:?}",
        ids(&at_90)
    );
    assert!(ids(&next(&lease_store, "q", "w", 100.0, 10).await).contains(&"a2"));
    // A job without a group has nothing to hold.
    let x = lease_store
        .claim(&job("x"), &owner("w"), term(200.0, 10.0))
        .await
        .expect("claim reaches the store")
        .expect("claimed");
    assert_eq!(
        lease_store
            .hold_group(&job("x"), &owner("w"), x, at(201.0), at(300.0))
            .await
            .expect("hold_group reaches the store"),
        Err(WriteRefused::NoGroup)
    );
}

/// Ordered groups run one job at a time in claim order: a later job waits while an earlier one
/// runs, waits for its retry (which goes first when due) or is dead (until it is purged, here);
/// completing or cancelling frees the group, and other groups and ungrouped jobs run
/// meanwhile.
pub async fn an_ordered_group_runs_one_job_at_a_time_in_claim_order(store: ControlStore) {
    let lease_store: Store = store.clone();
    for id in ["g1", "g2", "g3"] {
        enqueued_with(&lease_store, id, &grouped("q", "g")).await;
    }
    enqueued_with(&lease_store, "h1", &grouped("q", "h")).await;
    enqueued_with(&lease_store, "x", &spec("q", 0, None, 5)).await;
    let ordered = limit(
        &store,
        "q",
        Limits {
            ordered: Some(true),
            ..Limits::default()
        },
    )
    .await;
    assert!(ordered.ordered);
    let first = next(&lease_store, "q", "w", 1.0, 10).await;
    assert_eq!(ids(&first), ["g1", "h1", "x"]);
    assert!(next(&lease_store, "q", "w", 2.0, 10).await.is_empty());
    for other in &first[1..] {
        complete_granted(&lease_store, &other.job, "w", other.fence, 2.5, "ok").await;
    }
    // g1 fails and waits for its retry at 13: g2 waits too, and g1 goes first when due.
    let boom = ErrorText::new("boom").expect("valid error");
    store
        .fail(
            &job("g1"),
            &owner("w"),
            first[0].fence,
            at(3.0),
            &boom,
            no_jitter(10.0),
        )
        .await
        .expect("fail reaches the store")
        .expect("fail is granted");
    assert!(next(&lease_store, "q", "w", 4.0, 10).await.is_empty());
    let again = next(&lease_store, "q", "w", 13.0, 10).await;
    assert_eq!(ids(&again), ["g1"]);
    // g1 ends dead: the group is held until g1 is retried, cancelled or purged.
    store
        .fail(
            &job("g1"),
            &owner("w"),
            again[0].fence,
            at(14.0),
            &boom,
            Retry::No,
        )
        .await
        .expect("fail reaches the store")
        .expect("fail is granted");
    assert_eq!(status(&lease_store, &job("g1"), 15.0).await, Status::Dead);
    assert!(next(&lease_store, "q", "w", 15.0, 10).await.is_empty());
    let purged = lease_store
        .purge(at(16.0), &[Status::Dead])
        .await
        .expect("purge reaches the store");
    assert_eq!(purged, 1);
    let then = next(&lease_store, "q", "w", 17.0, 10).await;
    assert_eq!(ids(&then), ["g2"]);
    cancel_granted(&lease_store, &then[0].job, 18.0).await;
    let last = next(&lease_store, "q", "w", 19.0, 10).await;
    assert_eq!(ids(&last), ["g3"]);
    complete_granted(&lease_store, &last[0].job, "w", last[0].fence, 20.0, "ok").await;
    enqueued_with(&lease_store, "g4", &grouped("q", "g")).await;
    assert_eq!(ids(&next(&lease_store, "q", "w", 21.0, 10).await), ["g4"]);
}

/// A dead job holds its ordered group; cancelling it ends it as cancelled, keeping its record,
/// attempts and last error, and frees the group for its next job (the operator's way to skip a
/// job that must not run again without purging it). A job buried by an expired last lease is
/// dead before any claim writes it so, and is cancelled the same way.
pub async fn cancelling_a_dead_job_keeps_its_record_and_frees_its_ordered_group(
    store: ControlStore,
) {
    let lease_store: Store = store.clone();
    for id in ["g1", "g2", "g3"] {
        enqueued_with(&lease_store, id, &grouped("q", "g")).await;
    }
    let once = EnqueueSpec {
        max_attempts: Some(1),
        ..grouped("q", "h")
    };
    for id in ["h1", "h2"] {
        enqueued_with(&lease_store, id, &once).await;
    }
    limit(
        &store,
        "q",
        Limits {
            ordered: Some(true),
            ..Limits::default()
        },
    )
    .await;
    let first = next(&lease_store, "q", "w", 1.0, 10).await;
    assert_eq!(ids(&first), ["g1", "h1"]);
    let boom = ErrorText::new("boom").expect("valid error");
    store
        .fail(
            &job("g1"),
            &owner("w"),
            first[0].fence,
            at(2.0),
            &boom,
            Retry::No,
        )
        .await
        .expect("fail reaches the store")
        .expect("fail is granted");
    // h1's only lease ends at 11 without a report: dead from then on, buried or not.
    assert_eq!(status(&lease_store, &job("g1"), 12.0).await, Status::Dead);
    assert_eq!(status(&lease_store, &job("h1"), 12.0).await, Status::Dead);
    assert!(next(&lease_store, "q", "w", 12.0, 10).await.is_empty());
    cancel_granted(&lease_store, &job("g1"), 13.0).await;
    cancel_granted(&lease_store, &job("h1"), 13.0).await;
    let record = lease_store
        .record(&job("g1"))
        .await
        .expect("record reads")
        .expect("a cancelled job keeps its record");
    assert_eq!(record.job.status_at(at(14.0)), Status::Cancelled);
    assert_eq!(record.job.error.as_deref(), Some("boom"));
    assert_eq!((record.job.fence, record.job.attempts), (first[0].fence, 1));
    assert_eq!(
        lease_store
            .cancel(&job("g1"), at(14.0))
            .await
            .expect("cancel reaches the store"),
        Err(WriteRefused::Cancelled),
        "a job is cancelled once"
    );
    let then = next(&lease_store, "q", "w", 15.0, 10).await;
    assert_eq!(ids(&then), ["g2", "h2"], "both groups are free again");
    // A late write of the dead run's holder stays refused.
    let late = lease_store
        .complete(
            &job("h1"),
            &owner("w"),
            first[1].fence,
            at(16.0),
            &result("late"),
        )
        .await
        .expect("complete reaches the store");
    assert_eq!(late, Err(WriteRefused::Cancelled));
}

/// Fair claims serve the groups in turn, the group served least recently first, whatever
/// their backlog and priority: the jobs without a group first, then one lease a group per
/// turn, round the groups; a group enqueued later is served by the next claim; the group
/// rules still hold; `--no-fair` goes back to claim order; racing claims serve one group
/// each.
pub async fn fair_claims_serve_the_groups_in_turn_whatever_their_backlog(store: ControlStore) {
    let lease_store: Store = store.clone();
    for n in 1..=20 {
        let big = EnqueueSpec {
            priority: 9,
            ..grouped("q", "big")
        };
        enqueued_with(&lease_store, &format!("big{n:02}"), &big).await;
    }
    for id in ["a1", "a2"] {
        enqueued_with(&lease_store, id, &grouped("q", "a")).await;
    }
    for id in ["b1", "b2"] {
        enqueued_with(&lease_store, id, &grouped("q", "b")).await;
    }
    enqueued_with(&lease_store, "x", &spec("q", 0, None, 5)).await;
    let fair = |on: bool| Limits {
        fair: Some(on),
        ..Limits::default()
    };
    let settings = limit(&store, "q", fair(true)).await;
    assert!(settings.fair);
    // The job without a group, then a, b and big (never served, by key), then round again.
    let first = next(&lease_store, "q", "w", 1.0, 5).await;
    assert_eq!(ids(&first), ["x", "a1", "b1", "big01", "a2"]);
    // b waited longest, then big; a and b have nothing due (their jobs are running).
    let second = next(&lease_store, "q", "w", 2.0, 4).await;
    assert_eq!(ids(&second), ["b2", "big02", "big03", "big04"]);
    // A group enqueued after big's run is served by the next claim.
    enqueued_with(&lease_store, "late1", &grouped("q", "late")).await;
    enqueued_with(&lease_store, "late2", &grouped("q", "late")).await;
    let third = next(&lease_store, "q", "w", 3.0, 3).await;
    assert_eq!(ids(&third), ["late1", "big05", "late2"]);
    // The group rules still hold: one live lease per group.
    limit(
        &store,
        "q",
        Limits {
            per_group: Some(Concurrency::new(1)),
            ..Limits::default()
        },
    )
    .await;
    for lease in &third {
        complete_granted(&lease_store, &lease.job, "w", lease.fence, 3.5, "ok").await;
    }
    enqueued_with(&lease_store, "a3", &grouped("q", "a")).await;
    for lease in first
        .iter()
        .chain(&second)
        .filter(|l| l.job.as_str() != "x")
    {
        complete_granted(&lease_store, &lease.job, "w", lease.fence, 3.5, "ok").await;
    }
    let limited = next(&lease_store, "q", "w", 4.0, 10).await;
    assert_eq!(ids(&limited), ["a3", "big06"]);
    // Without fair, claim order again: big's priority first once its limit lets it (a fair
    // claim would serve c, never served, first).
    limit(&store, "q", fair(false)).await;
    let late = EnqueueSpec {
        priority: 1,
        ..grouped("q", "c")
    };
    enqueued_with(&lease_store, "c1", &late).await;
    enqueued_with(&lease_store, "c2", &late).await;
    let unfair = next(&lease_store, "q", "w", 5.0, 10).await;
    assert_eq!(ids(&unfair), ["c1"]);
    limit(
        &store,
        "q",
        Limits {
            per_group: Some(None),
            ..Limits::default()
        },
    )
    .await;
    let ordered = next(&lease_store, "q", "w", 6.0, 2).await;
    assert_eq!(ids(&ordered), ["big07", "big08"]);
    // Six claims racing on a fair queue of six groups, enqueued one after another: each
    // serves the group served least recently, so they serve all six, one each.
    for g in 0..6 {
        for n in 0..10 {
            let spec = grouped("race", &format!("g{g}"));
            enqueued_with(&lease_store, &format!("r{g}-{n}"), &spec).await;
        }
    }
    limit(&store, "race", fair(true)).await;
    let raced = racing_claims(&lease_store, "race", 6, 7.0).await;
    let mut served: Vec<&str> = raced
        .iter()
        .filter_map(|l| l.group.as_ref().map(GroupKey::as_str))
        .collect();
    served.sort_unstable();
    assert_eq!(served, ["g0", "g1", "g2", "g3", "g4", "g5"]);
}

/// `group_loads` counts each group's unfinished jobs, running and waiting, busiest first:
/// finished and out-of-attempts jobs, other queues and jobs without a group are left out,
/// and `limit` keeps the busiest.
pub async fn group_loads_show_the_busiest_groups_running_and_waiting(store: ControlStore) {
    let lease_store: Store = store.clone();
    for id in ["a1", "a2", "a3"] {
        enqueued_with(&lease_store, id, &grouped("q", "a")).await;
    }
    for id in ["b1", "b2"] {
        enqueued_with(&lease_store, id, &grouped("q", "b")).await;
    }
    enqueued_with(&lease_store, "c1", &grouped("q", "c")).await;
    enqueued_with(&lease_store, "x", &spec("q", 0, None, 5)).await;
    // A job waiting for its parent cannot run yet: no group's backlog counts it.
    let waiting = EnqueueSpec {
        after: vec![job("x")],
        ..grouped("q", "a")
    };
    enqueued_with(&lease_store, "a-after-x", &waiting).await;
    let once = EnqueueSpec {
        max_attempts: Some(1),
        ..grouped("r", "d")
    };
    enqueued_with(&lease_store, "d1", &once).await;
    let loads = |q: &'static str, now: f64, limit: usize| {
        let store = store.clone();
        async move {
            store
                .group_loads(&queue(q), at(now), limit)
                .await
                .expect("group_loads reaches the store")
                .into_iter()
                .map(|l| (l.group.as_str().to_owned(), l.backlog, l.running))
                .collect::<Vec<_>>()
        }
    };
    let row = |g: &str, backlog: u64, running: u64| (g.to_owned(), backlog, running);
    assert_eq!(
        loads("q", 1.0, 10).await,
        [row("a", 3, 0), row("b", 2, 0), row("c", 1, 0)]
    );
    // b1 and b2 leased until 11, b1 completed, c1 cancelled.
    let mut fences = Vec::new();
    for id in ["b1", "b2"] {
        let fence = store
            .claim(&job(id), &owner("w"), term(1.0, 10.0))
            .await
            .expect("claim reaches the store")
            .expect("claim is granted");
        fences.push(fence);
    }
    complete_granted(&lease_store, &job("b1"), "w", fences[0], 2.0, "ok").await;
    cancel_granted(&lease_store, &job("c1"), 2.0).await;
    assert_eq!(loads("q", 3.0, 10).await, [row("a", 3, 0), row("b", 0, 1)]);
    assert_eq!(loads("q", 3.0, 1).await, [row("a", 3, 0)]);
    // At 12 b2's lease has lapsed: it waits again.
    assert_eq!(loads("q", 12.0, 10).await, [row("a", 3, 0), row("b", 1, 0)]);
    // A job whose only attempt lapsed is out of attempts: its group has nothing left.
    assert_eq!(ids(&next(&lease_store, "r", "w", 1.0, 1).await), ["d1"]);
    assert_eq!(loads("r", 3.0, 10).await, [row("d", 0, 1)]);
    assert!(loads("r", 12.0, 10).await.is_empty());
    assert!(loads("none", 1.0, 10).await.is_empty());
}

/// A paused group: a claim leases none of its jobs while the queue's other groups and its
/// jobs without a group run; a pause until a time ends at that time, a pause given again
/// replaces its time, a resumed group runs again, and `queues` shows the paused groups.
pub async fn a_paused_group_leases_nothing_while_the_queues_other_groups_run(store: ControlStore) {
    let lease_store: Store = store.clone();
    for id in ["a1", "a2"] {
        enqueued_with(&lease_store, id, &grouped("q", "a")).await;
    }
    enqueued_with(&lease_store, "b1", &grouped("q", "b")).await;
    enqueued_with(&lease_store, "x", &spec("q", 0, None, 5)).await;
    let a = GroupKey::new("a").expect("group");
    let paused = change(&store, "q", QueueChange::PauseGroup(a.clone(), None)).await;
    assert!(paused.is_group_paused_at(&a, at(1e9)));
    assert_eq!(
        store.queues().await.expect("queues reads"),
        vec![(queue("q"), paused.clone())]
    );
    let first = next(&lease_store, "q", "w", 1.0, 10).await;
    assert_eq!(ids(&first), ["b1", "x"]);
    assert!(next(&lease_store, "q", "w", 2.0, 10).await.is_empty());
    for other in &first {
        complete_granted(&lease_store, &other.job, "w", other.fence, 2.5, "ok").await;
    }
    // Until a time: nothing of the group before it, its jobs from then on.
    change(
        &store,
        "q",
        QueueChange::PauseGroup(a.clone(), Some(at(20.0))),
    )
    .await;
    assert!(next(&lease_store, "q", "w", 19.5, 1).await.is_empty());
    assert_eq!(ids(&next(&lease_store, "q", "w", 20.0, 1).await), ["a1"]);
    change(&store, "q", QueueChange::PauseGroup(a.clone(), None)).await;
    assert!(next(&lease_store, "q", "w", 21.0, 10).await.is_empty());
    let resumed = change(&store, "q", QueueChange::ResumeGroup(a)).await;
    assert!(resumed.is_default(), "{resumed:?}");
    assert_eq!(ids(&next(&lease_store, "q", "w", 22.0, 10).await), ["a2"]);
    assert_eq!(store.queues().await.expect("queues reads"), vec![]);
}

/// A debounced enqueue: the job is due the debounce after its enqueue; enqueueing its id again
/// while it waits to start takes the new payload and pushes its due time (nothing is
/// inserted); once it has been leased, or is finished, an enqueue leaves it alone.
pub async fn a_debounced_enqueue_moves_a_waiting_job_and_leaves_a_started_one(store: Store) {
    let debounced = |payload: &str, now: f64| EnqueueSpec {
        debounce: Some(Ttl::new(10.0).expect("ttl")),
        enqueued_at: Some(at(now)),
        payload: Some(Payload::new(payload.as_bytes().to_vec(), 64).expect("payload")),
        ..spec("q", 0, None, 5)
    };
    assert!(
        store
            .enqueue_with(&job("d"), &debounced("first", 100.0))
            .await
            .expect("enqueue")
    );
    assert!(
        next(&store, "q", "w", 109.0, 1).await.is_empty(),
        "due at 110"
    );
    let again = store
        .enqueue_with(&job("d"), &debounced("second", 105.0))
        .await;
    assert!(
        !again.expect("enqueue reaches the store"),
        "a debounce inserted a job"
    );
    assert!(
        next(&store, "q", "w", 114.0, 1).await.is_empty(),
        "due at 115 now"
    );
    // Several in one batch: the last one's payload and time win.
    let batch = vec![
        (job("d"), debounced("third", 106.0)),
        (job("d"), debounced("fourth", 107.0)),
    ];
    assert_eq!(
        store.enqueue_many(&batch).await.expect("enqueue_many"),
        [false, false]
    );
    assert!(
        next(&store, "q", "w", 116.5, 1).await.is_empty(),
        "due at 117 now"
    );
    let leased = next(&store, "q", "w", 117.0, 1).await;
    assert_eq!(ids(&leased), ["d"]);
    assert_eq!(leased[0].payload.as_deref(), Some(&b"fourth"[..]));
    // A started job is left alone.
    assert!(
        !store
            .enqueue_with(&job("d"), &debounced("late", 118.0))
            .await
            .expect("enqueue")
    );
    let record = store.record(&job("d")).await.expect("record").expect("job");
    assert_eq!(record.job.payload.as_deref(), Some(&b"fourth"[..]));
    assert_eq!(record.job.fence, leased[0].fence);
}

/// Expands to one `#[tokio::test]` per conformance check, named after the check.
///
/// `$factory` is a function returning `(Arc<dyn Transfer>, guard)`; the guard (for example a
/// temporary directory) is kept alive for the whole check. The calling crate needs `tokio` with
/// the `macros` and `rt-multi-thread` features as a dev-dependency.
///
/// With `async`, `$factory` is an async function (for stores opened inside the runtime).
/// With `lease_store async`, `$factory` returns `(Arc<dyn LeaseStore>, guard)` and only the
/// checks that need no [`Transfer`] run: every rule of the port (a store reached over the
/// network service is one of these).
///
/// ```text
/// lease_ports::conformance_tests!(fresh_store);
/// lease_ports::conformance_tests!(async fresh_store);
/// lease_ports::conformance_tests!(lease_store async fresh_client);
/// ```
#[macro_export]
macro_rules! conformance_tests {
    (async $factory:path) => {
        $crate::conformance_tests!(@lease (async) $factory);
        $crate::conformance_tests!(@control (async) $factory);
        $crate::conformance_tests!(@transfer (async) $factory);
    };
    ($factory:path) => {
        $crate::conformance_tests!(@lease () $factory);
        $crate::conformance_tests!(@control () $factory);
        $crate::conformance_tests!(@transfer () $factory);
    };
    (lease_store async $factory:path) => {
        $crate::conformance_tests!(@lease (async) $factory);
        $crate::conformance_tests!(@control (async) $factory);
    };
    (@control ($($mode:tt)?) $factory:path) => {
        $crate::conformance_tests!(@each ($($mode)?) $factory;
            a_paused_queue_leases_nothing_until_it_is_resumed_and_running_leases_stand,
            a_concurrency_limit_bounds_the_live_leases_of_a_queue_under_racing_claims,
            a_lease_carries_its_jobs_timeout_else_its_queues,
            a_finished_job_runs_again_only_when_asked_keeping_its_fence_and_result,
            progress_is_the_live_holders_and_renews_its_lease,
            a_job_keeps_its_group_and_its_lease_carries_it,
            a_per_group_limit_bounds_each_groups_live_leases_under_racing_claims,
            an_ordered_group_runs_one_job_at_a_time_in_claim_order,
            cancelling_a_dead_job_keeps_its_record_and_frees_its_ordered_group,
            a_paused_group_leases_nothing_while_the_queues_other_groups_run,
            fair_claims_serve_the_groups_in_turn_whatever_their_backlog,
            group_loads_show_the_busiest_groups_running_and_waiting,
            a_rate_grants_at_most_n_leases_in_any_window_under_racing_claims,
            a_holder_holds_its_group_until_a_time_and_a_stale_holder_cannot,
            schedules_are_kept_and_a_tick_fires_once,
            racing_fires_of_one_tick_make_one_job,
        );
    };
    (@lease ($($mode:tt)?) $factory:path) => {
        $crate::conformance_tests!(@each ($($mode)?) $factory;
            enqueue_inserts_default_state_once,
            enqueue_never_resets_a_lease_or_a_result,
            state_of_missing_job_is_none,
            claim_of_missing_job_is_refused,
            first_claim_returns_fence_one,
            live_lease_is_not_claimable_even_by_its_owner,
            lease_is_claimable_when_until_equals_now,
            done_job_is_not_claimable,
            renew_extends_the_live_current_lease,
            renew_is_refused_unless_current_and_live,
            complete_stores_result_for_the_current_lease,
            stale_completion_is_rejected_and_result_survives,
            stale_completion_is_rejected_while_new_lease_is_live,
            complete_is_refused_unless_current_and_live,
            release_keeps_the_fence_and_next_claim_increments_it,
            expired_lease_can_be_released_by_its_holder,
            release_is_refused_unless_current_holder,
            fences_strictly_increase_and_are_never_reused,
            jobs_are_independent,
            concurrent_claims_have_exactly_one_winner,
            enqueue_with_stores_the_queue_fields,
            claim_next_takes_priority_then_run_at_then_enqueue_order,
            claim_next_leases_only_due_free_jobs_of_its_queue,
            claim_next_respects_its_limit_and_never_leases_a_live_job_twice,
            an_expired_lease_counts_as_an_attempt_and_then_the_job_dies,
            a_lease_given_back_unstarted_hands_back_its_attempt,
            claim_by_id_refuses_dead_cancelled_and_scheduled_jobs_but_ignores_attempts,
            fail_retries_with_backoff_then_dead_letters,
            each_ended_attempt_is_kept_with_its_fence_owner_times_and_end,
            fail_is_refused_unless_current_and_live,
            cancel_of_a_running_job_refuses_its_holder,
            retry_revives_dead_and_cancelled_jobs_and_the_fence_continues,
            purge_deletes_finished_jobs_and_a_purged_id_never_reuses_a_fence,
            list_and_stats_judge_status_at_now,
            list_filters_by_group_and_id_prefix,
            bulk_actions_take_every_job_the_filter_matches_and_no_other,
            complete_stores_the_result_fence,
            concurrent_claim_next_gives_each_job_to_exactly_one_caller,
            complete_and_claim_next_hands_back_one_job_and_takes_the_next,
            apply_many_answers_each_write_on_its_own_in_order,
            list_pages_by_the_last_id_of_the_page_before,
            stats_count_every_status,
            claim_next_counts_only_leases_against_its_limit,
            claim_next_finds_each_lease_the_moment_it_ends_in_claim_order,
            enqueue_many_inserts_each_new_job_once_in_order,
            purge_judges_status_as_list_does,
            a_debounced_enqueue_moves_a_waiting_job_and_leaves_a_started_one,
            a_job_keeps_the_trace_context_it_was_enqueued_with,
        );
    };
    (@transfer ($($mode:tt)?) $factory:path) => {
        $crate::conformance_tests!(@each ($($mode)?) $factory;
            claim_next_reads_past_a_job_whose_fence_is_exhausted,
            a_raised_epoch_puts_every_later_fence_above_every_earlier_one,
            an_import_raises_the_target_to_the_sources_epoch,
            export_and_import_round_trip_every_job_and_purge_mark,
            import_with_merge_keeps_the_larger_fence,
            a_claim_stores_its_lease_token_digest_and_the_next_claim_replaces_it,
            export_and_import_carry_queue_settings_and_schedules,
            export_and_import_carry_a_workflow,
            export_and_import_carry_trace_contexts,
            export_and_import_carry_attempts,
        );
    };
    (@each () $factory:path; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let (store, _guard) = $factory();
                $crate::conformance::$check(store).await;
            }
        )*
    };
    (@each (async) $factory:path; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let (store, _guard) = $factory().await;
                $crate::conformance::$check(store).await;
            }
        )*
    };
}
