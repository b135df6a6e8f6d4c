//! The conformance suite: the behaviour every [`LeaseStore`] adapter must show.
//!
//! Each check is a public `async fn` taking a fresh store; [`conformance_tests!`](crate::conformance_tests)
//! turns them into one named `#[tokio::test]` per check in the adapter's own test crate,
//! so a failure names the behaviour that broke. Checks panic with a message on a violation.

#![allow(clippy::missing_panics_doc)]

use std::sync::Arc;

use crate::{
    ClaimRefused, Fence, JobId, JobResult, JobState, LeaseStore, LeaseTerm, Owner, Timestamp,
    WriteRefused,
};

/// A shared handle to the store under test.
pub type Store = Arc<dyn LeaseStore>;

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
    store
        .complete(&done, &owner("a"), f, at(11.0), &result("r"))
        .await
        .expect("complete reaches the store")
        .expect("complete is granted");
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
    store
        .complete(&id, &owner("a"), f, at(1.0), &result("r"))
        .await
        .expect("complete reaches the store")
        .expect("complete is granted");
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
        Err(WriteRefused::Done)
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
    store
        .complete(&id, &owner("a"), f, at(1.0), &result("first"))
        .await
        .expect("complete reaches the store")
        .expect("complete is granted");
    let again = store
        .complete(&id, &owner("a"), f, at(1.0), &result("second"))
        .await;
    assert_eq!(
        again.expect("complete reaches the store"),
        Err(WriteRefused::Done)
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
    store
        .complete(&id, &owner("a"), f, at(1.0), &result("r"))
        .await
        .expect("complete reaches the store")
        .expect("complete is granted");
    let done = store.release(&id, &owner("a"), f).await;
    assert_eq!(
        done.expect("release reaches the store"),
        Err(WriteRefused::Done)
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
        let outcomes = crate::claim_many(store.as_ref(), &id, &owners, term(1.0, 30.0)).await;
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

/// Expands to one `#[tokio::test]` per conformance check, named after the check.
///
/// `$factory` is a function returning `(Arc<dyn LeaseStore>, guard)`; the guard (for example a
/// temporary directory) is kept alive for the whole check. The calling crate needs `tokio` with
/// the `macros` and `rt-multi-thread` features as a dev-dependency.
///
/// ```text
/// lease_ports::conformance_tests!(fresh_store);
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($factory:path) => {
        $crate::conformance_tests!(@each $factory;
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
        );
    };
    (@each $factory:path; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let (store, _guard) = $factory();
                $crate::conformance::$check(store).await;
            }
        )*
    };
}
