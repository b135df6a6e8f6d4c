//! Unit tests of each rule at its boundaries.

use super::*;

fn owner(name: &str) -> Owner {
    Owner::new(name).unwrap()
}

fn term(now: f64, ttl: f64) -> LeaseTerm {
    LeaseTerm::new(now, ttl).unwrap()
}

fn at(t: f64) -> Timestamp {
    Timestamp::new(t).unwrap()
}

fn fence(n: u64) -> Fence {
    Fence::new(n).unwrap()
}

fn held(by: &str, fence_no: u64, until: f64) -> Job {
    Job {
        owner: Some(owner(by)),
        until: at(until),
        fence: fence(fence_no),
        result: None,
        done: false,
    }
}

#[test]
fn claim_of_new_job_sets_owner_until_and_fence_one() {
    let job = decide_claim(Some(&Job::new()), &owner("a"), term(10.0, 5.0)).unwrap();
    assert_eq!(job, held("a", 1, 15.0));
}

#[test]
fn claim_of_missing_job_is_refused() {
    assert_eq!(
        decide_claim(None, &owner("a"), term(0.0, 1.0)),
        Err(ClaimRefused::Missing)
    );
}

#[test]
fn claim_of_done_job_is_refused_even_when_expired() {
    let done = Job {
        done: true,
        ..held("a", 1, 0.0)
    };
    assert_eq!(
        decide_claim(Some(&done), &owner("b"), term(100.0, 1.0)),
        Err(ClaimRefused::Done)
    );
}

#[test]
fn claim_while_live_is_refused_even_for_the_owner() {
    let job = held("a", 1, 15.0);
    for who in ["a", "b"] {
        assert_eq!(
            decide_claim(Some(&job), &owner(who), term(14.999, 5.0)),
            Err(ClaimRefused::Live {
                owner: Some(owner("a")),
                until: at(15.0)
            })
        );
    }
}

#[test]
fn claim_at_until_equal_now_succeeds_with_next_fence() {
    let job = decide_claim(Some(&held("a", 1, 15.0)), &owner("b"), term(15.0, 5.0)).unwrap();
    assert_eq!(job, held("b", 2, 20.0));
}

#[test]
fn claim_at_largest_fence_is_refused_as_exhausted() {
    let job = Job {
        fence: Fence::MAX,
        ..Job::new()
    };
    assert_eq!(
        decide_claim(Some(&job), &owner("a"), term(0.0, 1.0)),
        Err(ClaimRefused::FenceExhausted)
    );
}

#[test]
fn renew_extends_live_current_lease() {
    let job = decide_renew(
        Some(&held("a", 1, 15.0)),
        &owner("a"),
        fence(1),
        term(14.0, 10.0),
    );
    assert_eq!(job, Ok(held("a", 1, 24.0)));
}

#[test]
fn renew_at_until_equal_now_is_refused_as_expired() {
    assert_eq!(
        decide_renew(
            Some(&held("a", 1, 15.0)),
            &owner("a"),
            fence(1),
            term(15.0, 10.0)
        ),
        Err(WriteRefused::Expired {
            until: at(15.0),
            now: at(15.0)
        })
    );
}

#[test]
fn renew_with_wrong_owner_or_stale_fence_is_refused() {
    let job = held("a", 2, 15.0);
    assert!(matches!(
        decide_renew(Some(&job), &owner("b"), fence(2), term(10.0, 1.0)),
        Err(WriteRefused::NotOwner { .. })
    ));
    assert_eq!(
        decide_renew(Some(&job), &owner("a"), fence(1), term(10.0, 1.0)),
        Err(WriteRefused::StaleFence {
            presented: fence(1),
            current: fence(2)
        })
    );
}

#[test]
fn complete_stores_result_and_done_for_live_current_lease() {
    let result = JobResult::new("r").unwrap();
    let job = decide_complete(
        Some(&held("a", 1, 15.0)),
        &owner("a"),
        fence(1),
        at(14.0),
        &result,
    );
    assert_eq!(
        job,
        Ok(Job {
            result: Some("r".into()),
            done: true,
            ..held("a", 1, 15.0)
        })
    );
}

#[test]
fn complete_at_until_equal_now_is_refused() {
    let result = JobResult::new("r").unwrap();
    assert!(matches!(
        decide_complete(
            Some(&held("a", 1, 15.0)),
            &owner("a"),
            fence(1),
            at(15.0),
            &result
        ),
        Err(WriteRefused::Expired { .. })
    ));
}

#[test]
fn complete_of_done_job_is_refused_even_for_its_holder() {
    let done = Job {
        done: true,
        result: Some("first".into()),
        ..held("a", 1, 15.0)
    };
    let result = JobResult::new("second").unwrap();
    assert_eq!(
        decide_complete(Some(&done), &owner("a"), fence(1), at(1.0), &result),
        Err(WriteRefused::Done)
    );
}

#[test]
fn release_clears_owner_and_until_and_keeps_fence() {
    let job = decide_release(Some(&held("a", 3, 15.0)), &owner("a"), fence(3)).unwrap();
    assert_eq!(
        job,
        Job {
            fence: fence(3),
            ..Job::new()
        }
    );
}

#[test]
fn release_of_expired_lease_by_its_holder_succeeds() {
    // No time condition: until 15 is long past, but nobody claimed since.
    assert!(decide_release(Some(&held("a", 1, 15.0)), &owner("a"), fence(1)).is_ok());
}

#[test]
fn release_of_released_job_is_refused() {
    let released = decide_release(Some(&held("a", 1, 15.0)), &owner("a"), fence(1)).unwrap();
    assert!(matches!(
        decide_release(Some(&released), &owner("a"), fence(1)),
        Err(WriteRefused::NotOwner { current: None, .. })
    ));
}

#[test]
fn claim_after_release_gets_a_new_fence() {
    let released = decide_release(Some(&held("a", 1, 15.0)), &owner("a"), fence(1)).unwrap();
    let job = decide_claim(Some(&released), &owner("a"), term(1.0, 1.0)).unwrap();
    assert_eq!(job.fence, fence(2));
}

#[test]
fn ttl_zero_negative_nan_and_infinite_are_errors() {
    assert_eq!(Ttl::new(0.0), Err(InputError::NonPositiveTtl(0.0)));
    assert_eq!(Ttl::new(-5.0), Err(InputError::NonPositiveTtl(-5.0)));
    assert!(matches!(
        Ttl::new(f64::NAN),
        Err(InputError::NonFiniteTtl(_))
    ));
    assert_eq!(
        Ttl::new(f64::INFINITY),
        Err(InputError::NonFiniteTtl(f64::INFINITY))
    );
}

#[test]
fn now_nan_or_infinite_is_an_error() {
    assert!(matches!(
        Timestamp::new(f64::NAN),
        Err(InputError::NonFiniteNow(_))
    ));
    assert_eq!(
        Timestamp::new(f64::NEG_INFINITY),
        Err(InputError::NonFiniteNow(f64::NEG_INFINITY))
    );
    assert!(matches!(
        LeaseTerm::new(f64::NAN, 1.0),
        Err(InputError::NonFiniteNow(_))
    ));
}

#[test]
fn ttl_that_does_not_move_until_past_now_is_an_error() {
    assert_eq!(
        LeaseTerm::new(1e20, 1.0),
        Err(InputError::TtlBelowResolution {
            now: 1e20,
            ttl: 1.0
        })
    );
}

#[test]
fn ttl_that_overflows_until_is_an_error() {
    assert_eq!(
        LeaseTerm::new(f64::MAX, f64::MAX),
        Err(InputError::UntilOverflow {
            now: f64::MAX,
            ttl: f64::MAX
        })
    );
}

#[test]
fn fence_above_i64_max_is_out_of_range() {
    let too_big = Fence::MAX.get() + 1;
    assert_eq!(
        Fence::new(too_big),
        Err(InputError::FenceOutOfRange(too_big))
    );
    assert_eq!(Fence::MAX.next(), None);
}

#[test]
fn negative_stored_fence_is_rejected() {
    assert_eq!(Fence::try_from(-1_i64), Err(-1));
    assert_eq!(i64::from(Fence::MAX), i64::MAX);
}

#[test]
fn empty_or_nul_text_is_an_error() {
    assert_eq!(JobId::new(""), Err(InputError::EmptyJobId));
    assert_eq!(Owner::new(""), Err(InputError::EmptyOwner));
    assert_eq!(
        Owner::new("a\0b"),
        Err(InputError::NulInText { what: "owner" })
    );
    assert!(JobResult::new("").is_ok());
}

#[test]
fn commands_decide_like_the_rules_and_write_only_when_accepted() {
    let a = owner("a");
    assert_eq!(
        Command::Enqueue.decide(None),
        (Some(Job::new()), Outcome::Enqueued(true))
    );
    assert_eq!(
        Command::Enqueue.decide(Some(&Job::new())),
        (None, Outcome::Enqueued(false))
    );
    let claim = Command::Claim(a.clone(), term(0.0, 5.0));
    let (next, outcome) = claim.decide(Some(&Job::new()));
    assert_eq!(outcome, Outcome::Claimed(Ok(fence(1))));
    let next = next.unwrap();
    assert_eq!(
        claim.decide(Some(&next)).0,
        None,
        "a refused claim writes nothing"
    );
    let release = Command::Release(a.clone(), fence(1));
    assert_eq!(release.decide(Some(&next)).1, Outcome::Wrote(Ok(())));
    let stale = Command::Complete(a, fence(0), at(1.0), JobResult::new("r").unwrap());
    assert!(matches!(
        stale.decide(Some(&next)),
        (None, Outcome::Wrote(Err(WriteRefused::StaleFence { .. })))
    ));
}

#[test]
fn values_show_and_give_back_exactly_what_was_checked() {
    let id = JobId::new("invoice-42").unwrap();
    assert_eq!(
        (id.as_str(), id.to_string().as_str()),
        ("invoice-42", "invoice-42")
    );
    let who = owner("worker-A");
    assert_eq!(
        (who.as_str(), who.to_string().as_str()),
        ("worker-A", "worker-A")
    );
    assert_eq!(JobResult::new("paid").unwrap().as_str(), "paid");
    assert_eq!(fence(17).to_string(), "17");
    assert_eq!(at(-2.5).get(), -2.5);
    assert_eq!(at(130.25).to_string(), "130.25");
    let term = term(100.0, 30.5);
    assert_eq!((term.now().get(), term.until().get()), (100.0, 130.5));
}

#[test]
fn refusals_name_the_holder_fences_and_times() {
    let live = ClaimRefused::Live {
        owner: Some(owner("a")),
        until: at(15.0),
    };
    assert_eq!(live.to_string(), "the job is leased to a until 15");
    let released = ClaimRefused::Live {
        owner: None,
        until: at(15.0),
    };
    assert_eq!(released.to_string(), "the job is leased until 15");
    let stale = WriteRefused::StaleFence {
        presented: fence(1),
        current: fence(2),
    };
    assert_eq!(
        stale.to_string(),
        "fence 1 is stale (the current fence is 2)"
    );
    let not_owner = WriteRefused::NotOwner {
        presented: owner("b"),
        current: Some(owner("a")),
    };
    assert_eq!(not_owner.to_string(), "b is not the owner (the owner is a)");
    let expired = WriteRefused::Expired {
        until: at(10.0),
        now: at(12.5),
    };
    assert_eq!(expired.to_string(), "the lease expired at 10 (now is 12.5)");
}
