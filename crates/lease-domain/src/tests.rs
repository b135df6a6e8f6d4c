//! Unit tests of each rule at its boundaries.

use super::*;
use std::collections::BTreeMap;

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
        ..Job::new()
    }
}

#[test]
fn claim_of_new_job_sets_owner_until_and_fence_one() {
    let job = decide_claim(Some(&Job::new()), &owner("a"), term(10.0, 5.0)).unwrap();
    assert_eq!(
        job,
        Job {
            updated: Some(at(10.0)),
            ..held("a", 1, 15.0)
        }
    );
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
    assert_eq!(
        job,
        Job {
            updated: Some(at(15.0)),
            ..held("b", 2, 20.0)
        }
    );
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
        Err(WriteRefused::Stale {
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
            result_fence: Some(fence(1)),
            updated: Some(at(14.0)),
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
        Err(WriteRefused::Done { result_fence: None })
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
fn a_give_back_releases_and_hands_back_one_attempt_and_only_its_holder_may() {
    let job = Job {
        attempts: 2,
        ..held("a", 3, 15.0)
    };
    let given = decide_give_back(Some(&job), &owner("a"), fence(3)).unwrap();
    assert_eq!(
        given,
        Job {
            fence: fence(3),
            attempts: 1,
            ..Job::new()
        }
    );
    // Never below none.
    let fresh = held("a", 3, 15.0);
    assert_eq!(
        decide_give_back(Some(&fresh), &owner("a"), fence(3))
            .unwrap()
            .attempts,
        0
    );
    assert!(matches!(
        decide_give_back(Some(&job), &owner("b"), fence(3)),
        Err(WriteRefused::NotOwner { .. })
    ));
    assert!(matches!(
        decide_give_back(Some(&job), &owner("a"), fence(2)),
        Err(WriteRefused::Stale { .. })
    ));
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
        Command::Enqueue.decide(&JobId::new("j").unwrap(), None, None),
        (Some(Job::new()), Outcome::Enqueued(true))
    );
    assert_eq!(
        Command::Enqueue.decide(&JobId::new("j").unwrap(), Some(&Job::new()), None),
        (None, Outcome::Enqueued(false))
    );
    let claim = Command::Claim(a.clone(), term(0.0, 5.0));
    let (next, outcome) = claim.decide(&JobId::new("j").unwrap(), Some(&Job::new()), None);
    assert_eq!(outcome, Outcome::Claimed(Ok(fence(1))));
    let next = next.unwrap();
    assert_eq!(
        claim.decide(&JobId::new("j").unwrap(), Some(&next), None).0,
        None,
        "a refused claim writes nothing"
    );
    let release = Command::Release(a.clone(), fence(1));
    assert_eq!(
        release
            .decide(&JobId::new("j").unwrap(), Some(&next), None)
            .1,
        Outcome::Wrote(Ok(()))
    );
    let stale = Command::Complete(a, fence(0), at(1.0), JobResult::new("r").unwrap());
    assert!(matches!(
        stale.decide(&JobId::new("j").unwrap(), Some(&next), None),
        (None, Outcome::Wrote(Err(WriteRefused::Stale { .. })))
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
    let stale = WriteRefused::Stale {
        presented: fence(1),
        current: fence(2),
    };
    assert_eq!(
        stale.to_string(),
        "fence 1 is stale (the current fence is 2)"
    );
    let ahead = WriteRefused::Stale {
        presented: fence(3),
        current: fence(2),
    };
    assert_eq!(
        ahead.to_string(),
        "fence 3 was never issued; the current fence is 2"
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

#[test]
fn every_refused_holder_write_is_audited_under_its_own_name_directly_and_through_the_service() {
    let job = id("j");
    let live = with_token(held("w", 2, 100.0), 7);
    let stale = fence(1);
    let writes = [
        Command::Renew(owner("w"), stale, term(50.0, 10.0)),
        Command::Progress(
            owner("w"),
            stale,
            term(50.0, 10.0).into(),
            ProgressText::new("3 of 4").unwrap(),
        ),
        Command::Complete(owner("w"), stale, at(50.0), JobResult::new("r").unwrap()),
        Command::Release(owner("w"), stale),
        Command::Fail(
            owner("w"),
            stale,
            at(50.0),
            error_text("boom"),
            Retry::default(),
        ),
        Command::HoldGroup(owner("w"), stale, at(50.0), at(90.0)),
        Command::Checkpoint(owner("w"), stale, at(50.0), checkpoint("fetch", "v")),
    ];
    let mut named = Vec::new();
    for direct in writes {
        let through_service = Command::AsHolder(
            credential("ci", Scope::Worker, None, Some(7)),
            Box::new(direct.clone()),
        );
        for command in [direct, through_service] {
            let (next, outcome) = command.decide(&job, Some(&live), None);
            assert_eq!(next, None, "{command:?} wrote");
            let refused = match outcome {
                Outcome::Wrote(Err(r)) | Outcome::Failed(Err(r)) => r,
                other => panic!("{command:?} was not refused: {other:?}"),
            };
            let entry = refusal(&command, Some(&live), &refused)
                .unwrap_or_else(|| panic!("{command:?} is not audited"));
            let write = command.holder_write().unwrap();
            assert_eq!((entry.operation, entry.reason), (write, AuditReason::Stale));
            // What the writer records, every reader reads back.
            assert_eq!(HolderWrite::parse(entry.operation.as_str()), Some(write));
            assert_eq!(command.name(), write.as_str());
            named.push(write);
        }
    }
    named.dedup();
    assert_eq!(named, HolderWrite::ALL);
    for reason in AuditReason::ALL {
        assert_eq!(AuditReason::parse(reason.as_str()), Some(reason));
    }
}

fn checkpoint(name: &str, value: &str) -> Checkpoint {
    Checkpoint {
        name: CheckpointName::new(name).unwrap(),
        value: CheckpointValue::new(value).unwrap(),
    }
}

#[test]
fn only_the_live_current_lease_keeps_a_checkpoint_and_the_job_is_not_rewritten() {
    let j = id("j");
    let live = held("w", 2, 100.0);
    let step = checkpoint("fetch", "rows=3");
    let write = |who: &str, fence_no: u64, now: f64| {
        Command::Checkpoint(owner(who), fence(fence_no), at(now), step.clone())
    };
    let granted = write("w", 2, 50.0);
    let (next, outcome) = granted.decide(&j, Some(&live), None);
    assert_eq!((next, &outcome), (None, &Outcome::Wrote(Ok(()))));
    assert_eq!(
        granted.checkpoint(&outcome),
        Some((&step, fence(2), at(50.0)))
    );
    for (command, why) in [
        (write("w", 1, 50.0), "a stale fence"),
        (write("x", 2, 50.0), "another owner"),
        (write("w", 2, 100.0), "an expired lease"),
    ] {
        let (next, outcome) = command.decide(&j, Some(&live), None);
        assert_eq!(next, None, "{why}");
        assert!(
            matches!(outcome, Outcome::Wrote(Err(_))),
            "{why}: {outcome:?}"
        );
        assert_eq!(command.checkpoint(&outcome), None, "{why} keeps nothing");
    }
    let (_, outcome) = write("w", 2, 50.0).decide(&j, None, None);
    assert_eq!(outcome, Outcome::Wrote(Err(WriteRefused::Missing)));
}

#[test]
fn only_a_run_again_of_a_finished_job_clears_its_checkpoints() {
    let j = id("j");
    let again = Command::EnqueueWith(EnqueueSpec {
        replace_finished: true,
        ..EnqueueSpec::default()
    });
    let claimed = decide_claim(Some(&Job::new()), &owner("A"), term(100.0, 30.0)).unwrap();
    let failed = decide_fail(
        &j,
        Some(&claimed),
        &owner("A"),
        fence(1),
        at(110.0),
        &error_text("boom"),
        Retry::default(),
    )
    .unwrap()
    .0;
    let result = JobResult::new("v").unwrap();
    let done = decide_complete(Some(&claimed), &owner("A"), fence(1), at(110.0), &result).unwrap();
    let (rerun, _) = again.decide(&j, Some(&done), None);
    assert!(again.clears_checkpoints(Some(&done), rerun.as_ref()));
    // A failed attempt, a retry of a dead job and a plain enqueue of a live one keep them.
    let (retried, _) = Command::Retry(at(120.0)).decide(&j, Some(&failed), None);
    assert!(!Command::Retry(at(120.0)).clears_checkpoints(Some(&failed), retried.as_ref()));
    let (kept, _) = again.decide(&j, Some(&claimed), None);
    assert!(!again.clears_checkpoints(Some(&claimed), kept.as_ref()));
    let (inserted, _) = again.decide(&j, None, None);
    assert!(!again.clears_checkpoints(None, inserted.as_ref()));
}

#[test]
fn an_enqueue_sets_the_trace_only_when_it_makes_the_job_or_runs_it_again() {
    let j = id("j");
    let context = TraceContext::new(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        None,
    )
    .unwrap();
    let traced = Command::EnqueueWith(EnqueueSpec {
        replace_finished: true,
        trace: Some(context.clone()),
        ..EnqueueSpec::default()
    });
    let untraced = Command::EnqueueWith(EnqueueSpec {
        replace_finished: true,
        ..EnqueueSpec::default()
    });
    // Made with a context: stored; made without one: nothing to write.
    let (made, _) = traced.decide(&j, None, None);
    assert_eq!(traced.sets_trace(None, made.as_ref()), Some(Some(&context)));
    let (bare, _) = untraced.decide(&j, None, None);
    assert_eq!(untraced.sets_trace(None, bare.as_ref()), None);
    // A live or waiting job keeps the context of the enqueue that made it.
    let claimed = decide_claim(Some(&Job::new()), &owner("A"), term(100.0, 30.0)).unwrap();
    let (kept, _) = traced.decide(&j, Some(&claimed), None);
    assert_eq!(traced.sets_trace(Some(&claimed), kept.as_ref()), None);
    // A run again of a finished job takes the new enqueue's, or none.
    let result = JobResult::new("v").unwrap();
    let done = decide_complete(Some(&claimed), &owner("A"), fence(1), at(110.0), &result).unwrap();
    let (rerun, _) = traced.decide(&j, Some(&done), None);
    assert_eq!(
        traced.sets_trace(Some(&done), rerun.as_ref()),
        Some(Some(&context))
    );
    let (plain_rerun, _) = untraced.decide(&j, Some(&done), None);
    assert_eq!(
        untraced.sets_trace(Some(&done), plain_rerun.as_ref()),
        Some(None)
    );
    // No other command touches it.
    let (retried, _) = Command::Retry(at(120.0)).decide(&j, Some(&done), None);
    assert_eq!(
        Command::Retry(at(120.0)).sets_trace(Some(&done), retried.as_ref()),
        None
    );
}

// ---- The queue rules ----

fn id(name: &str) -> JobId {
    JobId::new(name).unwrap()
}

fn due(max_attempts: u32) -> Job {
    Job {
        max_attempts,
        ..Job::new()
    }
}

fn leased(decision: NextDecision) -> Job {
    match decision {
        NextDecision::Lease(job) => job,
        other => panic!("expected a lease, got {other:?}"),
    }
}

fn error_text(text: &str) -> ErrorText {
    ErrorText::new(text).unwrap()
}

#[test]
fn claim_next_leases_a_due_job_with_the_next_fence_and_one_more_attempt() {
    let job = leased(decide_claim_next(&due(3), &owner("w"), term(10.0, 5.0)));
    assert_eq!(
        (job.owner, job.until, job.fence, job.attempts, job.updated),
        (Some(owner("w")), at(15.0), fence(1), 1, Some(at(10.0)))
    );
}

#[test]
fn claim_next_skips_live_scheduled_done_and_ended_jobs() {
    let w = owner("w");
    let skipped = [
        held("a", 1, 15.0),
        Job {
            run_at: Some(at(10.5)),
            ..Job::new()
        },
        Job {
            done: true,
            ..Job::new()
        },
        Job {
            ended: Some(Ended::Dead),
            ..Job::new()
        },
        Job {
            ended: Some(Ended::Cancelled),
            ..Job::new()
        },
        Job {
            fence: Fence::MAX,
            ..Job::new()
        },
    ];
    for job in skipped {
        assert_eq!(
            decide_claim_next(&job, &w, term(10.0, 5.0)),
            NextDecision::Skip,
            "{job:?}"
        );
    }
    // Due exactly at run_at, and claimable exactly at until.
    let at_run_at = Job {
        run_at: Some(at(10.0)),
        ..Job::new()
    };
    leased(decide_claim_next(&at_run_at, &w, term(10.0, 5.0)));
    leased(decide_claim_next(&held("a", 1, 10.0), &w, term(10.0, 5.0)));
}

#[test]
fn an_expired_lease_with_no_attempts_left_is_buried_by_claim_next() {
    let w = owner("w");
    let mut job = due(2);
    for round in 0..2 {
        let now = f64::from(round) * 10.0;
        job = leased(decide_claim_next(&job, &w, term(now, 5.0)));
    }
    assert_eq!(job.attempts, 2);
    let NextDecision::Bury(dead) = decide_claim_next(&job, &w, term(20.0, 5.0)) else {
        panic!("the job was not buried");
    };
    assert_eq!(
        (dead.ended, dead.error.as_deref(), dead.fence, dead.attempts),
        (Some(Ended::Dead), Some(LEASE_EXPIRED), fence(2), 2)
    );
    assert_eq!(job.status_at(at(20.0)), Status::Dead);
    assert_eq!(job.status_at(at(14.0)), Status::Running);
}

#[test]
fn a_last_attempt_released_at_shutdown_is_buried_as_released_not_as_expired() {
    let w = owner("w");
    let job = leased(decide_claim_next(&due(1), &w, term(0.0, 5.0)));
    let released = decide_release(Some(&job), &w, job.fence).unwrap();
    let NextDecision::Bury(dead) = decide_claim_next(&released, &w, term(1.0, 5.0)) else {
        panic!("the job was not buried");
    };
    assert_eq!(dead.error.as_deref(), Some(RELEASED_AT_LAST_ATTEMPT));
    assert_ne!(dead.error.as_deref(), Some(LEASE_EXPIRED));
}

#[test]
fn zero_max_attempts_means_one_attempt() {
    let job = leased(decide_claim_next(&due(0), &owner("w"), term(0.0, 1.0)));
    assert!(!job.has_attempts_left());
    assert!(matches!(
        decide_claim_next(&job, &owner("w"), term(1.0, 1.0)),
        NextDecision::Bury(_)
    ));
}

#[test]
fn claim_by_id_refuses_dead_cancelled_and_scheduled_jobs_but_never_counts_attempts() {
    let w = owner("w");
    for (ended, refused) in [
        (Ended::Dead, ClaimRefused::Dead),
        (Ended::Cancelled, ClaimRefused::Cancelled),
    ] {
        let job = Job {
            ended: Some(ended),
            ..Job::new()
        };
        assert_eq!(decide_claim(Some(&job), &w, term(0.0, 1.0)), Err(refused));
    }
    let scheduled = Job {
        run_at: Some(at(5.0)),
        ..Job::new()
    };
    assert_eq!(
        decide_claim(Some(&scheduled), &w, term(4.5, 1.0)),
        Err(ClaimRefused::NotDue { run_at: at(5.0) })
    );
    assert!(decide_claim(Some(&scheduled), &w, term(5.0, 1.0)).is_ok());
    // Out of attempts: claim by id is an operator's decision and still leases it.
    let exhausted = Job {
        attempts: 5,
        ..held("a", 5, 1.0)
    };
    let claimed = decide_claim(Some(&exhausted), &w, term(2.0, 1.0)).unwrap();
    assert_eq!((claimed.fence, claimed.attempts), (fence(6), 5));
    // A seed job (no queue fields) is claimable however often it was claimed.
    let mut seed = Job::new();
    for round in 0..10 {
        let now = f64::from(round) * 10.0;
        seed = decide_claim(Some(&seed), &w, term(now, 1.0)).unwrap();
    }
    assert_eq!((seed.fence, seed.attempts), (fence(10), 0));
}

#[test]
fn fail_puts_the_job_back_after_a_backoff_while_attempts_remain_then_kills_it() {
    let w = owner("w");
    let policy = Backoff::new(2.0, 3.0, 100.0, 0.0).unwrap();
    let first = leased(decide_claim_next(&due(2), &w, term(0.0, 10.0)));
    let (pending, failed) = decide_fail(
        &id("j"),
        Some(&first),
        &w,
        fence(1),
        at(1.0),
        &error_text("boom"),
        Retry::Backoff(policy),
    )
    .unwrap();
    assert_eq!(
        failed,
        Failed {
            status: Status::Pending,
            run_at: Some(at(3.0))
        }
    );
    assert_eq!(
        (
            pending.owner.as_ref(),
            pending.until,
            pending.fence,
            pending.error.as_deref()
        ),
        (None, Timestamp::ZERO, fence(1), Some("boom"))
    );
    assert_eq!(pending.status_at(at(2.0)), Status::Pending);
    assert_eq!(
        decide_claim_next(&pending, &w, term(2.9, 10.0)),
        NextDecision::Skip
    );
    // The failed holder's later writes stay refused.
    assert!(
        decide_complete(
            Some(&pending),
            &w,
            fence(1),
            at(1.5),
            &JobResult::new("late").unwrap()
        )
        .is_err()
    );
    let second = leased(decide_claim_next(&pending, &w, term(3.0, 10.0)));
    let (dead, failed) = decide_fail(
        &id("j"),
        Some(&second),
        &w,
        fence(2),
        at(4.0),
        &error_text("boom again"),
        Retry::Backoff(policy),
    )
    .unwrap();
    assert_eq!(failed.status, Status::Dead);
    assert_eq!(
        (dead.ended, dead.error.as_deref()),
        (Some(Ended::Dead), Some("boom again"))
    );
}

#[test]
fn fail_without_retry_kills_the_job_and_only_the_live_holder_may_fail() {
    let w = owner("w");
    let job = leased(decide_claim_next(&due(5), &w, term(0.0, 10.0)));
    let boom = error_text("boom");
    let (dead, failed) = decide_fail(
        &id("j"),
        Some(&job),
        &w,
        fence(1),
        at(1.0),
        &boom,
        Retry::No,
    )
    .unwrap();
    assert_eq!(
        (failed.status, dead.ended),
        (Status::Dead, Some(Ended::Dead))
    );
    let refused = [
        (owner("x"), fence(1), 1.0),
        (w.clone(), fence(0), 1.0),
        (w.clone(), fence(1), 10.0),
    ];
    for (who, f, now) in refused {
        assert!(
            decide_fail(
                &id("j"),
                Some(&job),
                &who,
                f,
                at(now),
                &boom,
                Retry::default()
            )
            .is_err(),
            "{who} {f} {now}"
        );
    }
}

#[test]
fn cancel_stops_pending_and_running_jobs_and_refuses_finished_ones() {
    let w = owner("w");
    let pending = Job::new();
    let cancelled = decide_cancel(Some(&pending), at(1.0)).unwrap();
    assert_eq!(cancelled.status_at(at(1.0)), Status::Cancelled);
    let running = held("w", 3, 10.0);
    let cancelled = decide_cancel(Some(&running), at(1.0)).unwrap();
    assert_eq!(
        decide_renew(Some(&cancelled), &w, fence(3), term(2.0, 5.0)),
        Err(WriteRefused::Cancelled)
    );
    assert_eq!(
        decide_complete(
            Some(&cancelled),
            &w,
            fence(3),
            at(2.0),
            &JobResult::new("r").unwrap()
        ),
        Err(WriteRefused::Cancelled)
    );
    assert_eq!(
        decide_fail(
            &id("j"),
            Some(&cancelled),
            &w,
            fence(3),
            at(2.0),
            &error_text("e"),
            Retry::No
        )
        .unwrap_err(),
        WriteRefused::Cancelled
    );
    assert_eq!(
        decide_claim(Some(&cancelled), &w, term(20.0, 1.0)),
        Err(ClaimRefused::Cancelled)
    );
    let done = Job {
        done: true,
        result_fence: Some(fence(2)),
        ..Job::new()
    };
    assert_eq!(
        decide_cancel(Some(&done), at(1.0)),
        Err(WriteRefused::Done {
            result_fence: Some(fence(2))
        })
    );
    assert_eq!(
        decide_cancel(Some(&cancelled), at(1.0)),
        Err(WriteRefused::Cancelled)
    );
    assert_eq!(decide_cancel(None, at(1.0)), Err(WriteRefused::Missing));
}

#[test]
fn cancelling_a_dead_job_ends_it_cancelled_keeping_its_record_and_error() {
    let buried = Job {
        ended: Some(Ended::Dead),
        attempts: 3,
        error: Some("smtp timeout".into()),
        ..held("w", 3, 100.0)
    };
    // A job whose last allowed lease expired is dead before any claim buries it.
    let expired = Job {
        attempts: 3,
        max_attempts: 3,
        ..held("w", 3, 10.0)
    };
    assert_eq!(expired.status_at(at(20.0)), Status::Dead);
    for dead in [buried, expired] {
        let cancelled = decide_cancel(Some(&dead), at(20.0)).unwrap();
        assert_eq!(cancelled.status_at(at(20.0)), Status::Cancelled);
        assert_eq!(cancelled.ended, Some(Ended::Cancelled));
        assert_eq!(
            (cancelled.fence, cancelled.attempts, cancelled.error.clone()),
            (dead.fence, dead.attempts, dead.error.clone()),
            "the record and its last error are kept"
        );
        assert_eq!(cancelled.updated, Some(at(20.0)));
        assert!(
            !cancelled.bears_on_group(at(20.0)),
            "a cancelled job frees its group"
        );
        assert!(dead.bears_on_group(at(20.0)), "a dead job holds its group");
        assert_eq!(
            decide_cancel(Some(&cancelled), at(21.0)),
            Err(WriteRefused::Cancelled),
            "cancelled once"
        );
    }
}

#[test]
fn retry_revives_dead_and_cancelled_jobs_with_fresh_attempts_and_the_same_fence() {
    for ended in [Ended::Dead, Ended::Cancelled] {
        let job = Job {
            ended: Some(ended),
            attempts: 5,
            error: Some("boom".into()),
            ..held("w", 4, 100.0)
        };
        let revived = decide_retry(Some(&job), at(1.0)).unwrap();
        assert_eq!(
            (
                revived.status_at(at(1.0)),
                revived.attempts,
                revived.fence,
                revived.owner.clone()
            ),
            (Status::Pending, 0, fence(4), None)
        );
        assert_eq!(
            leased(decide_claim_next(&revived, &owner("x"), term(1.0, 1.0))).fence,
            fence(5)
        );
    }
    // A job out of attempts by expiry is dead too, and can be retried.
    let exhausted = Job {
        attempts: 1,
        max_attempts: 1,
        ..held("w", 1, 1.0)
    };
    assert!(decide_retry(Some(&exhausted), at(2.0)).is_ok());
    assert_eq!(
        decide_retry(Some(&Job::new()), at(1.0)),
        Err(WriteRefused::Active {
            status: Status::Pending
        })
    );
    assert_eq!(
        decide_retry(Some(&held("w", 1, 5.0)), at(1.0)),
        Err(WriteRefused::Active {
            status: Status::Running
        })
    );
}

#[test]
fn purge_takes_only_stored_finished_jobs_changed_before_the_cutoff() {
    let all = Status::ALL;
    let done = Job {
        done: true,
        updated: Some(at(10.0)),
        ..Job::new()
    };
    assert!(is_purgeable(&done, at(10.5), &all));
    assert!(
        !is_purgeable(&done, at(10.0), &all),
        "changed exactly at the cutoff"
    );
    assert!(!is_purgeable(&done, at(11.0), &[Status::Dead]));
    let never_changed = Job {
        done: true,
        ..Job::new()
    };
    assert!(is_purgeable(&never_changed, at(-1e9), &all));
    assert!(!is_purgeable(&Job::new(), at(1e9), &all));
    assert!(!is_purgeable(&held("w", 1, 5.0), at(1e9), &all));
}

#[test]
fn an_id_enqueued_again_after_a_purge_continues_from_its_old_fence() {
    let (job, outcome) = Command::Enqueue.decide(&id("j"), None, Some(fence(7)));
    assert_eq!(outcome, Outcome::Enqueued(true));
    let job = job.unwrap();
    assert_eq!(job.fence, fence(7));
    assert_eq!(
        decide_claim(Some(&job), &owner("w"), term(0.0, 1.0))
            .unwrap()
            .fence,
        fence(8)
    );
}

#[test]
fn backoff_grows_exponentially_is_capped_and_jitters_within_bounds_deterministically() {
    let exact = Backoff::new(1.0, 2.0, 10.0, 0.0).unwrap();
    let delays: Vec<f64> = (1..=6).map(|n| exact.delay(&id("j"), n)).collect();
    assert_eq!(delays, [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]);
    let jittered = Backoff::new(8.0, 2.0, 1000.0, 0.5).unwrap();
    let spread: Vec<f64> = (0..50)
        .map(|i| jittered.delay(&id(&format!("job-{i}")), 1))
        .collect();
    assert!(spread.iter().all(|d| (4.0..=8.0).contains(d)), "{spread:?}");
    assert!(
        spread.iter().any(|d| *d != spread[0]),
        "no jitter across jobs"
    );
    assert_eq!(jittered.delay(&id("x"), 3), jittered.delay(&id("x"), 3));
    for (base, factor, max, jitter) in [
        (0.0, 2.0, 1.0, 0.1),
        (1.0, 0.5, 1.0, 0.1),
        (1.0, 2.0, f64::INFINITY, 0.1),
        (1.0, 2.0, 1.0, 1.5),
        (f64::NAN, 2.0, 1.0, 0.1),
    ] {
        assert!(matches!(
            Backoff::new(base, factor, max, jitter),
            Err(InputError::InvalidBackoff(_))
        ));
    }
}

#[test]
fn queue_values_are_checked_at_the_boundary() {
    assert_eq!(QueueName::new(""), Err(InputError::EmptyQueue));
    assert_eq!(QueueName::default().as_str(), "default");
    assert_eq!(QueueName::new("mail").unwrap().to_string(), "mail");
    assert!(Payload::new(vec![0; 10], 10).is_ok());
    assert_eq!(
        Payload::new(vec![0; 11], 10),
        Err(InputError::PayloadTooLarge { len: 11, limit: 10 })
    );
    assert_eq!(Payload::new(vec![1, 2], 10).unwrap().as_bytes(), [1, 2]);
    assert!(ErrorText::new("a\0b").is_err());
    assert_eq!(ErrorText::lossy("a\0b").as_str(), "a\u{FFFD}b");
    assert_eq!(Ttl::new(2.5).unwrap().get(), 2.5);
    assert_eq!(error_text("e").as_str(), "e");
    for status in Status::ALL {
        assert_eq!(Status::parse(status.as_str()), Ok(status));
        assert_eq!(status.to_string(), status.as_str());
    }
    assert!(Status::parse("sleeping").is_err());
    assert_eq!(
        Status::ALL.map(Status::is_finished),
        [false, false, false, true, true, true]
    );
    let spec = EnqueueSpec {
        queue: QueueName::new("mail").unwrap(),
        priority: -3,
        run_at: Some(at(9.0)),
        max_attempts: Some(2),
        payload: Some(Payload::new(b"hi".to_vec(), 10).unwrap()),
        enqueued_at: Some(at(4.0)),
        timeout: Some(Ttl::new(30.0).unwrap()),
        replace_finished: false,
        group: Some(crate::GroupKey::new("acct-1").unwrap()),
        debounce: None,
        after: vec![JobId::new("parent").unwrap()],
        on_parent_failure: crate::OnParentFailure::Run,
        trace: None,
    };
    let job = Job::enqueued(&spec, None);
    assert!(
        job.waiting,
        "a job with parents waits until its store judges them"
    );
    assert_eq!(job.status_at(at(100.0)), Status::Waiting);
    assert!(!job.is_claim_candidate(at(100.0)));
    assert_eq!(job.after, spec.after);
    assert_eq!(job.on_parent_failure, crate::OnParentFailure::Run);
    assert_eq!(job.timeout, Some(Ttl::new(30.0).unwrap()));
    assert_eq!(job.group, spec.group, "the group is set at enqueue");
    assert_eq!(
        job.updated,
        Some(at(4.0)),
        "the enqueue time is the first change"
    );
    assert_eq!(
        (
            job.queue.as_str(),
            job.priority,
            job.run_at,
            job.max_attempts,
            job.payload.as_deref()
        ),
        ("mail", -3, Some(at(9.0)), 2, Some(&b"hi"[..]))
    );
    assert_eq!(Job::enqueued(&EnqueueSpec::default(), None), Job::new());
}

#[test]
fn a_waiting_job_waits_since_its_latest_run_at_lease_end_or_change() {
    let fresh = Job::enqueued(
        &EnqueueSpec {
            enqueued_at: Some(at(5.0)),
            ..EnqueueSpec::default()
        },
        None,
    );
    assert!(fresh.is_waiting_at(at(5.0)));
    assert_eq!(fresh.waiting_since(), Some(at(5.0)));
    // Enqueued without a time and never changed: waiting, since an unknown time.
    assert_eq!(Job::new().waiting_since(), None);
    assert!(Job::new().is_waiting_at(at(0.0)));
    // Scheduled: not waiting before its run_at, waiting since it after.
    let scheduled = Job {
        run_at: Some(at(20.0)),
        ..fresh.clone()
    };
    assert!(!scheduled.is_waiting_at(at(19.0)));
    assert!(scheduled.is_waiting_at(at(20.0)));
    assert_eq!(scheduled.waiting_since(), Some(at(20.0)));
    // A lease that ended at 40 (claimed at 10): waiting since 40; live before it.
    let Ok(leased) = decide_claim(Some(&fresh), &owner("a"), term(10.0, 30.0)) else {
        panic!("a fresh job is claimable");
    };
    assert!(!leased.is_waiting_at(at(39.0)));
    assert!(leased.is_waiting_at(at(40.0)));
    assert_eq!(leased.waiting_since(), Some(at(40.0)));
    // Done, dead and cancelled jobs do not wait.
    for job in [
        Job {
            done: true,
            ..fresh.clone()
        },
        Job {
            ended: Some(Ended::Dead),
            ..fresh.clone()
        },
        Job {
            ended: Some(Ended::Cancelled),
            ..fresh.clone()
        },
        Job {
            attempts: 5,
            max_attempts: 5,
            ..fresh.clone()
        },
    ] {
        assert!(!job.is_waiting_at(at(100.0)), "{job:?}");
    }
}

#[test]
fn claim_order_is_priority_then_run_at_then_enqueue_order() {
    let job = |priority: i64, run_at: Option<f64>| Job {
        priority,
        run_at: run_at.map(at),
        ..Job::new()
    };
    let mut jobs = [
        (job(0, Some(5.0)), 1),
        (job(1, Some(9.0)), 2),
        (job(0, None), 3),
        (job(0, Some(5.0)), 0),
        (job(-2, None), 4),
    ];
    jobs.sort_by(|a, b| claim_order((&a.0, a.1), (&b.0, b.1)));
    let order: Vec<u64> = jobs.iter().map(|(_, seq)| *seq).collect();
    assert_eq!(order, [2, 3, 0, 1, 4]);
}

#[test]
fn only_enqueues_need_the_purge_mark_and_the_payload_limit_is_one_mebibyte() {
    assert!(Command::Enqueue.is_enqueue());
    assert!(Command::EnqueueWith(EnqueueSpec::default()).is_enqueue());
    assert!(!Command::Claim(owner("a"), term(0.0, 1.0)).is_enqueue());
    assert!(!Command::Cancel(at(0.0)).is_enqueue());
    assert_eq!(Payload::DEFAULT_LIMIT, 1_048_576);
}

#[test]
fn backoff_jitter_spreads_evenly_over_its_range() {
    let full_jitter = Backoff::new(1.0, 1.0, 1.0, 1.0).unwrap();
    let delays: Vec<f64> = (0..2000)
        .map(|i| full_jitter.delay(&id(&format!("job-{i}")), 1))
        .collect();
    let mean = delays.iter().sum::<f64>() / 2000.0;
    assert!((0.45..=0.55).contains(&mean), "mean delay {mean}");
    let low = delays.iter().filter(|d| **d < 0.25).count();
    assert!((400..=600).contains(&low), "{low} of 2000 below a quarter");
}

#[test]
fn every_queue_rule_stamps_its_time_and_retry_makes_the_job_due_at_once() {
    let w = owner("w");
    let exhausted = Job {
        attempts: 1,
        max_attempts: 1,
        ..held("w", 1, 5.0)
    };
    let NextDecision::Bury(buried) = decide_claim_next(&exhausted, &w, term(7.0, 1.0)) else {
        panic!("not buried");
    };
    assert_eq!(buried.updated, Some(at(7.0)));
    let running = held("w", 1, 50.0);
    let (failed, _) = decide_fail(
        &id("j"),
        Some(&running),
        &w,
        fence(1),
        at(8.0),
        &error_text("e"),
        Retry::default(),
    )
    .unwrap();
    assert_eq!(failed.updated, Some(at(8.0)));
    assert_eq!(
        decide_cancel(Some(&running), at(9.0)).unwrap().updated,
        Some(at(9.0))
    );
    let dead_and_scheduled = Job {
        ended: Some(Ended::Dead),
        run_at: Some(at(500.0)),
        ..Job::new()
    };
    let retried = decide_retry(Some(&dead_and_scheduled), at(10.0)).unwrap();
    assert_eq!((retried.updated, retried.run_at), (Some(at(10.0)), None));
    assert!(retried.is_due_at(at(10.0)));
}

#[test]
fn names_are_limited_to_max_name_bytes_on_input_but_read_back_whatever_their_length() {
    let at_limit = "é".repeat(MAX_NAME_BYTES / 2);
    let over = format!("{at_limit}x");
    assert!(JobId::new(at_limit.clone()).is_ok());
    assert!(Owner::new(at_limit.clone()).is_ok());
    assert!(QueueName::new(at_limit).is_ok());
    for refused in [
        JobId::new(over.clone()).map(drop),
        Owner::new(over.clone()).map(drop),
        QueueName::new(over.clone()).map(drop),
    ] {
        assert!(
            matches!(refused, Err(InputError::NameTooLong { len, .. }) if len == MAX_NAME_BYTES + 1),
            "{refused:?}"
        );
    }
    assert!(JobId::stored(over.clone()).is_ok());
    assert!(Owner::stored(over.clone()).is_ok());
    assert!(QueueName::stored(over).is_ok());
    assert!(JobId::stored("").is_err());
}

#[test]
fn every_claim_replaces_the_lease_token_and_other_writes_keep_it() {
    let a = TokenDigest::new([1; 32]);
    let b = TokenDigest::new([2; 32]);
    let sealed =
        decide_claim(Some(&Job::new()), &owner("w"), term(0.0, 5.0).with_token(a)).unwrap();
    assert_eq!(sealed.token, Some(a));
    let renewed = decide_renew(Some(&sealed), &owner("w"), fence(1), term(1.0, 5.0)).unwrap();
    assert_eq!(renewed.token, Some(a), "a renewal keeps the lease's token");
    // A later claim by id without a token clears it; one with a token replaces it.
    let plain = decide_claim(Some(&renewed), &owner("x"), term(10.0, 5.0)).unwrap();
    assert_eq!(plain.token, None);
    let NextDecision::Lease(next) =
        decide_claim_next(&plain, &owner("y"), term(20.0, 5.0).with_token(b))
    else {
        panic!("the expired job is leased again");
    };
    assert_eq!((next.token, next.fence), (Some(b), fence(3)));
    // A term moved to the store's clock keeps its token.
    assert_eq!(
        term(0.0, 5.0).with_token(a).at(at(9.0)).unwrap().token(),
        Some(a)
    );
}

fn credential(principal: &str, scope: Scope, named: Option<&str>, token: Option<u8>) -> Credential {
    Credential {
        principal: Principal::new(principal).unwrap(),
        scope,
        named: named.map(owner),
        token: token.map(|b| TokenDigest::new([b; 32])),
    }
}

fn with_token(mut job: Job, byte: u8) -> Job {
    job.token = Some(TokenDigest::new([byte; 32]));
    job
}

/// A holder's write through the service, decided in the store in one pinned order: missing,
/// stale, done, not the owner, no token, a wrong token, then the lease's own rules (expired).
#[test]
fn a_credential_is_judged_in_the_pinned_order_then_the_write_as_the_lease_s_owner() {
    let id = JobId::new("j").unwrap();
    let renew = |cred: Credential, f: u64, now: f64| {
        Command::AsHolder(
            cred,
            Box::new(Command::Renew(owner("stand-in"), fence(f), term(now, 10.0))),
        )
    };
    let worker = |token| credential("ci", Scope::Worker, None, token);
    let live = with_token(held("ci/host-1", 2, 100.0), 7);
    let refused = |cmd: Command, job: Option<&Job>| match cmd.decide(&id, job, None) {
        (None, Outcome::Wrote(Err(why))) => why,
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(
        refused(renew(worker(Some(7)), 2, 50.0), None),
        WriteRefused::Missing
    );
    assert!(matches!(
        refused(renew(worker(Some(7)), 1, 50.0), Some(&live)),
        WriteRefused::Stale { .. }
    ));
    let mut done = live.clone();
    done.done = true;
    assert!(matches!(
        refused(renew(worker(Some(7)), 2, 50.0), Some(&done)),
        WriteRefused::Done { .. }
    ));
    // Outside the key's namespace, and a named owner that is not the lease's.
    let other = credential("cd", Scope::Worker, None, Some(7));
    assert!(matches!(
        refused(renew(other, 2, 50.0), Some(&live)),
        WriteRefused::NotOwner { .. }
    ));
    let misnamed = credential("ci", Scope::Worker, Some("ci/host-2"), Some(7));
    assert!(matches!(
        refused(renew(misnamed, 2, 50.0), Some(&live)),
        WriteRefused::NotOwner { .. }
    ));
    // The stale check comes before the token: a stale writer learns it is stale.
    assert!(matches!(
        refused(renew(worker(None), 1, 50.0), Some(&live)),
        WriteRefused::Stale { .. }
    ));
    assert_eq!(
        refused(renew(worker(None), 2, 50.0), Some(&live)),
        WriteRefused::TokenMissing
    );
    assert_eq!(
        refused(renew(worker(Some(8)), 2, 50.0), Some(&live)),
        WriteRefused::BadToken
    );
    // A lease granted without a token has none that matches.
    let untokened = held("ci/host-1", 2, 100.0);
    assert_eq!(
        refused(renew(worker(Some(7)), 2, 50.0), Some(&untokened)),
        WriteRefused::BadToken
    );
    // Everything passes, but the lease ran out: the lease's own rule, last.
    assert!(matches!(
        refused(renew(worker(Some(7)), 2, 150.0), Some(&live)),
        WriteRefused::Expired { .. }
    ));
    // Accepted: renewed as the lease's owner, whichever owner stood in.
    let (next, outcome) = renew(worker(Some(7)), 2, 50.0).decide(&id, Some(&live), None);
    assert_eq!(outcome, Outcome::Wrote(Ok(())));
    let next = next.unwrap();
    assert_eq!(
        (next.owner, next.until),
        (Some(owner("ci/host-1")), at(60.0))
    );
    // An admin acts as anyone.
    let admin = credential("ops", Scope::Admin, None, Some(7));
    assert_eq!(
        renew(admin, 2, 50.0).decide(&id, Some(&live), None).1,
        Outcome::Wrote(Ok(()))
    );
}

#[test]
fn a_refused_holder_write_through_the_service_is_audited_as_who_wrote() {
    let live = with_token(held("ci/host-1", 2, 100.0), 7);
    let complete = |cred: Credential, now: f64| {
        Command::AsHolder(
            cred,
            Box::new(Command::Complete(
                owner("x"),
                fence(2),
                at(now),
                JobResult::new("r").unwrap(),
            )),
        )
    };
    // A wrong token: the writer is the principal, and the reason is bad_token.
    let bad = complete(credential("ci", Scope::Worker, None, Some(9)), 50.0);
    let entry = refusal(&bad, Some(&live), &WriteRefused::BadToken).unwrap();
    assert_eq!(
        (entry.operation, entry.owner.as_str(), entry.reason),
        (HolderWrite::Complete, "ci", AuditReason::BadToken)
    );
    // Past the credential, an expired lease is the lease's owner's refusal.
    let late = complete(credential("ci", Scope::Worker, None, Some(7)), 130.0);
    let expired = WriteRefused::Expired {
        until: at(100.0),
        now: at(130.0),
    };
    let entry = refusal(&late, Some(&live), &expired).unwrap();
    assert_eq!(
        (entry.owner.as_str(), entry.late_by),
        ("ci/host-1", Some(30.0))
    );
    // No token is the client's mistake, not recorded.
    assert_eq!(
        refusal(&bad, Some(&live), &WriteRefused::TokenMissing),
        None
    );
}

#[test]
fn digests_match_only_when_every_byte_does() {
    let a = TokenDigest::new([1; 32]);
    let mut last = [1; 32];
    last[31] = 2;
    assert!(a.matches(&TokenDigest::new([1; 32])));
    assert!(!a.matches(&TokenDigest::new(last)));
    assert!(!a.matches(&TokenDigest::new([0; 32])));
}

#[test]
fn a_paused_queue_allows_no_lease_until_its_pause_ends_or_it_is_resumed() {
    let free = QueueSettings::default();
    assert_eq!(free.allowance(1_000, at(5.0), 3), 3);
    let paused = decide_queue_change(&free, QueueChange::Pause(None));
    assert!(paused.is_paused_at(at(1e12)));
    assert_eq!(paused.allowance(0, at(5.0), 3), 0);
    let until = decide_queue_change(&free, QueueChange::Pause(Some(at(10.0))));
    assert_eq!(until.allowance(0, at(9.999), 3), 0);
    // The pause ends at its time, as a lease does.
    assert_eq!(until.allowance(0, at(10.0), 3), 3);
    let resumed = decide_queue_change(&paused, QueueChange::Resume);
    assert_eq!(resumed, free);
    assert!(resumed.is_default());
}

#[test]
fn a_limit_and_a_timeout_given_together_are_one_change_that_keeps_the_pause() {
    let paused = decide_queue_change(&QueueSettings::default(), QueueChange::Pause(None));
    let both = QueueChange::limits(Some(Concurrency::new(2)), Some(Ttl::new(9.0).ok()));
    assert_eq!(
        both,
        Some(QueueChange::Limits(crate::Limits::both(
            Concurrency::new(2),
            Ttl::new(9.0).ok()
        )))
    );
    let next = decide_queue_change(&paused, both.unwrap());
    assert_eq!(
        (next.paused, next.concurrency, next.timeout),
        (paused.paused, Concurrency::new(2), Ttl::new(9.0).ok())
    );
    // Both removed at once: back to the pause alone.
    let removed = decide_queue_change(&next, QueueChange::limits(Some(None), Some(None)).unwrap());
    assert_eq!(removed, paused);
    // One given is the single change; neither is no change.
    assert_eq!(
        QueueChange::limits(Some(None), None),
        Some(QueueChange::Concurrency(None))
    );
    assert_eq!(
        QueueChange::limits(None, Some(Ttl::new(1.0).ok())),
        Some(QueueChange::Timeout(Ttl::new(1.0).ok()))
    );
    assert_eq!(QueueChange::limits(None, None), None);
}

#[test]
fn a_concurrency_limit_leaves_room_only_for_the_leases_not_live() {
    let limited = decide_queue_change(
        &QueueSettings::default(),
        QueueChange::Concurrency(Concurrency::new(4)),
    );
    assert!(limited.counts_leases());
    assert_eq!(limited.allowance(0, at(1.0), 10), 4);
    assert_eq!(limited.allowance(3, at(1.0), 10), 1);
    assert_eq!(limited.allowance(4, at(1.0), 10), 0);
    // More live than the limit (it was lowered under them): none, never a negative.
    assert_eq!(limited.allowance(9, at(1.0), 10), 0);
    assert_eq!(limited.allowance(1, at(1.0), 2), 2);
    // 0 is no limit; a stored 0 or a negative is refused, naming the value.
    assert_eq!(Concurrency::new(0), None);
    let removed = decide_queue_change(&limited, QueueChange::Concurrency(None));
    assert!(!removed.counts_leases());
    assert!(
        Concurrency::stored(0)
            .unwrap_err()
            .to_string()
            .contains("concurrency 0")
    );
    assert!(Concurrency::stored(-1).is_err());
    // A change keeps every other setting.
    let paused_too = decide_queue_change(&limited, QueueChange::Pause(None));
    assert_eq!(paused_too.concurrency, Concurrency::new(4));
    let timed = decide_queue_change(&paused_too, QueueChange::Timeout(Ttl::new(30.0).ok()));
    assert_eq!(
        (timed.paused.is_some(), timed.concurrency, timed.timeout),
        (true, Concurrency::new(4), Ttl::new(30.0).ok())
    );
}

#[test]
fn a_job_times_out_by_its_own_timeout_else_its_queues() {
    let queue = QueueSettings {
        timeout: Ttl::new(60.0).ok(),
        ..QueueSettings::default()
    };
    let own = Job {
        timeout: Ttl::new(5.0).ok(),
        ..Job::new()
    };
    assert_eq!(own.timeout_in(&queue), Ttl::new(5.0).ok());
    assert_eq!(Job::new().timeout_in(&queue), Ttl::new(60.0).ok());
    assert_eq!(Job::new().timeout_in(&QueueSettings::default()), None);
}

#[test]
fn progress_is_the_live_holders_and_renews_its_lease() {
    let text = ProgressText::new("40% of the rows").unwrap();
    let job = decide_claim(Some(&Job::new()), &owner("A"), term(100.0, 30.0)).unwrap();
    let reported = decide_progress(
        Some(&job),
        &owner("A"),
        fence(1),
        term(110.0, 30.0).into(),
        &text,
    )
    .unwrap();
    assert_eq!(reported.progress.as_deref(), Some("40% of the rows"));
    assert_eq!(reported.until, at(140.0));
    assert_eq!(reported.fence, job.fence);
    // Without a term the report keeps the lease's end, and is still judged live at its time.
    let kept = decide_progress(
        Some(&job),
        &owner("A"),
        fence(1),
        Renewal::Keep(at(110.0)),
        &text,
    )
    .unwrap();
    assert_eq!(
        (kept.until, kept.progress.as_deref()),
        (at(130.0), Some("40% of the rows"))
    );
    assert!(matches!(
        decide_progress(
            Some(&job),
            &owner("A"),
            fence(1),
            Renewal::Keep(at(130.0)),
            &text
        ),
        Err(WriteRefused::Expired { .. })
    ));
    // Not the holder, a stale fence, an expired lease: refused as a renewal would be.
    assert!(matches!(
        decide_progress(
            Some(&job),
            &owner("B"),
            fence(1),
            term(110.0, 30.0).into(),
            &text
        ),
        Err(WriteRefused::NotOwner { .. })
    ));
    assert!(matches!(
        decide_progress(
            Some(&job),
            &owner("A"),
            fence(2),
            term(110.0, 30.0).into(),
            &text
        ),
        Err(WriteRefused::Stale { .. })
    ));
    assert!(matches!(
        decide_progress(
            Some(&job),
            &owner("A"),
            fence(1),
            term(130.0, 30.0).into(),
            &text
        ),
        Err(WriteRefused::Expired { .. })
    ));
    // The next lease starts without the last one's progress.
    let next = decide_claim(Some(&reported), &owner("B"), term(200.0, 30.0)).unwrap();
    assert_eq!(next.progress, None);
    // Too long, or with a NUL: refused before any rule, naming the value.
    let long = "x".repeat(ProgressText::MAX_BYTES + 1);
    assert!(
        ProgressText::new(long)
            .unwrap_err()
            .to_string()
            .contains("1025 bytes")
    );
    assert!(ProgressText::new("a\0b").is_err());
}

#[test]
fn a_finished_job_is_run_again_only_when_asked_and_keeps_its_fence_and_result() {
    let j = id("report");
    let again = EnqueueSpec {
        queue: QueueName::new("nightly").unwrap(),
        max_attempts: Some(3),
        replace_finished: true,
        ..EnqueueSpec::default()
    };
    let claimed = decide_claim(Some(&Job::new()), &owner("A"), term(100.0, 30.0)).unwrap();
    let result = JobResult::new("v1").unwrap();
    let done = decide_complete(Some(&claimed), &owner("A"), fence(1), at(110.0), &result).unwrap();
    // A plain enqueue never touches it.
    let (kept, outcome) = Command::Enqueue.decide(&j, Some(&done), None);
    assert_eq!((kept, outcome), (None, Outcome::Enqueued(false)));
    let (rerun, outcome) = Command::EnqueueWith(again.clone()).decide(&j, Some(&done), None);
    assert_eq!(outcome, Outcome::Enqueued(true));
    let rerun = rerun.unwrap();
    assert_eq!(rerun.status_at(at(120.0)), Status::Pending);
    assert_eq!(
        (
            rerun.fence,
            rerun.result.as_deref(),
            rerun.result_fence,
            rerun.attempts
        ),
        (fence(1), Some("v1"), Some(fence(1)), 0)
    );
    assert_eq!(rerun.queue.as_str(), "nightly");
    // The old holder's writes stay refused; the new run takes the next fence and its result
    // replaces the old one.
    assert!(decide_complete(Some(&rerun), &owner("A"), fence(1), at(121.0), &result).is_err());
    let next = decide_claim(Some(&rerun), &owner("B"), term(130.0, 30.0)).unwrap();
    assert_eq!(next.fence, fence(2));
    let v2 = JobResult::new("v2").unwrap();
    let done2 = decide_complete(Some(&next), &owner("B"), fence(2), at(131.0), &v2).unwrap();
    assert_eq!(
        (done2.result.as_deref(), done2.result_fence),
        (Some("v2"), Some(fence(2)))
    );
    // Dead and cancelled jobs run again too; a pending or running one never.
    let cancelled = decide_cancel(Some(&Job::new()), at(1.0)).unwrap();
    assert!(
        Command::EnqueueWith(again.clone())
            .decide(&j, Some(&cancelled), None)
            .0
            .is_some()
    );
    for active in [Job::new(), claimed] {
        let (none, outcome) = Command::EnqueueWith(again.clone()).decide(&j, Some(&active), None);
        assert_eq!((none, outcome), (None, Outcome::Enqueued(false)));
    }
}

#[test]
fn a_tick_is_named_by_its_schedule_and_its_utc_time() {
    for (t, text) in [
        (0.0, "1970-01-01T00:00:00Z"),
        (1_764_644_400.0, "2025-12-02T03:00:00Z"),
        (951_782_400.0, "2000-02-29T00:00:00Z"),
        (951_868_799.9, "2000-02-29T23:59:59Z"),
        (4_102_444_800.0, "2100-01-01T00:00:00Z"),
        (-1.0, "1969-12-31T23:59:59Z"),
    ] {
        assert_eq!(utc_text(at(t)), text, "{t}");
    }
    let name = ScheduleName::new("nightly").unwrap();
    assert_eq!(
        tick_job_id(&name, at(1_764_644_400.0)).unwrap().as_str(),
        "nightly@2025-12-02T03:00:00Z"
    );
    for bad in ["", "a@b", "a\0b"] {
        assert!(ScheduleName::new(bad).is_err(), "{bad:?}");
    }
    assert!(
        ScheduleName::new("x".repeat(201))
            .unwrap_err()
            .to_string()
            .contains("201 bytes")
    );
}

#[test]
fn a_run_by_hand_is_its_schedule_s_job_now_under_an_id_no_tick_has() {
    let name = ScheduleName::new("nightly").unwrap();
    let t = 1_764_644_400.0;
    let run = run_job_id(&name, at(t)).unwrap();
    assert_eq!(run.as_str(), "nightly@run-2025-12-02T03:00:00Z");
    assert_ne!(run, tick_job_id(&name, at(t)).unwrap());
    // Within one second, one job; the next second, another.
    assert_eq!(run_job_id(&name, at(t + 0.9)).unwrap(), run);
    assert_ne!(run_job_id(&name, at(t + 1.0)).unwrap(), run);
    let spec = ScheduleSpec {
        name,
        cron: "0 3 * * *".to_owned(),
        zone: "UTC".to_owned(),
        job: EnqueueSpec {
            queue: QueueName::new("reports").unwrap(),
            priority: 4,
            run_at: Some(at(9e9)),
            replace_finished: true,
            ..EnqueueSpec::default()
        },
        catch_up: CatchUp::Latest,
    };
    let job = spec.job_at(at(t));
    assert_eq!(
        (
            job.queue.as_str(),
            job.priority,
            job.enqueued_at,
            job.run_at,
            job.replace_finished
        ),
        ("reports", 4, Some(at(t)), None, false)
    );
}

#[test]
fn a_pass_enqueues_the_ticks_its_catch_up_policy_keeps() {
    let ticks = [at(60.0), at(120.0), at(180.0)];
    assert_eq!(decide_ticks(&[], at(200.0), CatchUp::Latest), vec![]);
    assert_eq!(
        decide_ticks(&ticks, at(200.0), CatchUp::Latest),
        vec![at(180.0)]
    );
    assert_eq!(
        decide_ticks(&ticks, at(200.0), CatchUp::All(2)),
        vec![at(120.0), at(180.0)]
    );
    assert_eq!(
        decide_ticks(&ticks, at(200.0), CatchUp::All(9)),
        ticks.to_vec()
    );
    // `none`: a tick is enqueued only while it is on time.
    assert_eq!(
        decide_ticks(&ticks, at(180.0 + ON_TIME), CatchUp::Skip),
        vec![at(180.0)]
    );
    assert_eq!(
        decide_ticks(&ticks, at(180.1 + ON_TIME), CatchUp::Skip),
        vec![]
    );
    for (text, policy) in [
        ("latest", CatchUp::Latest),
        ("none", CatchUp::Skip),
        ("all", CatchUp::All(MAX_CATCH_UP)),
        ("all:5", CatchUp::All(5)),
    ] {
        assert_eq!(CatchUp::parse(text).unwrap(), policy);
        assert_eq!(CatchUp::parse(&policy.text()).unwrap(), policy);
    }
    for bad in ["", "all:0", "all:1001", "some", "all:x"] {
        assert!(
            CatchUp::parse(bad)
                .unwrap_err()
                .to_string()
                .contains(&format!("{bad:?}"))
        );
    }
}

#[test]
fn a_changed_schedule_keeps_the_ticks_it_fired_and_counts_its_version() {
    let spec = |cron: &str| ScheduleSpec {
        name: ScheduleName::new("s").unwrap(),
        cron: cron.to_owned(),
        zone: "UTC".to_owned(),
        job: EnqueueSpec::default(),
        catch_up: CatchUp::Latest,
    };
    let made = decide_put_schedule(None, spec("@hourly"), at(100.0));
    assert_eq!(
        (made.version, made.created, made.last_tick),
        (1, at(100.0), None)
    );
    assert_eq!(made.since(), at(100.0));
    let fired = Schedule {
        last_tick: Some(at(3600.0)),
        ..made
    };
    let changed = decide_put_schedule(Some(&fired), spec("@daily"), at(5000.0));
    assert_eq!(
        (
            changed.version,
            changed.created,
            changed.last_tick,
            changed.spec.cron.as_str()
        ),
        (2, at(100.0), Some(at(3600.0)), "@daily")
    );
    assert_eq!(changed.since(), at(3600.0));
}

#[test]
fn a_fire_lands_only_on_the_schedule_as_its_pass_read_it() {
    let schedule = Schedule {
        spec: ScheduleSpec {
            name: ScheduleName::new("s").unwrap(),
            cron: "* * * * *".to_owned(),
            zone: "UTC".to_owned(),
            job: EnqueueSpec::default(),
            catch_up: CatchUp::Latest,
        },
        version: 2,
        created: at(0.0),
        last_tick: Some(at(60.0)),
    };
    let fired = decide_fire(Some(&schedule), 2, Some(at(60.0)), at(120.0)).unwrap();
    assert_eq!(fired.last_tick, Some(at(120.0)));
    // Another pass fired first, the schedule changed, or it is gone: nothing.
    assert_eq!(
        decide_fire(Some(&fired), 2, Some(at(60.0)), at(120.0)),
        None
    );
    assert_eq!(
        decide_fire(Some(&schedule), 1, Some(at(60.0)), at(120.0)),
        None
    );
    assert_eq!(decide_fire(None, 2, Some(at(60.0)), at(120.0)), None);
    // A tick never goes back.
    assert_eq!(
        decide_fire(Some(&schedule), 2, Some(at(60.0)), at(60.0)),
        None
    );
}

fn grouped(group: &str) -> Job {
    Job {
        group: Some(GroupKey::new(group).unwrap()),
        ..Job::new()
    }
}

fn gate_of(settings: &QueueSettings, jobs: &[(JobId, Job)], now: f64) -> GroupGate {
    let mut gate = GroupGate::new(settings, at(now));
    let mut groups: Vec<GroupKey> = jobs.iter().filter_map(|(_, j)| j.group.clone()).collect();
    groups.sort();
    groups.dedup();
    gate.learn(&groups, jobs, &[], at(now));
    gate
}

#[test]
fn a_group_key_is_checked_like_a_queue_name() {
    assert_eq!(GroupKey::new(""), Err(InputError::EmptyGroup));
    assert!(matches!(
        GroupKey::new("x".repeat(MAX_NAME_BYTES + 1)),
        Err(InputError::NameTooLong { what: "group", .. })
    ));
    assert_eq!(
        GroupKey::new("a\0b"),
        Err(InputError::NulInText { what: "group" })
    );
    assert_eq!(
        GroupKey::new("x".repeat(MAX_NAME_BYTES))
            .unwrap()
            .as_str()
            .len(),
        1024
    );
}

#[test]
fn per_group_admits_until_the_group_has_its_limit_of_live_leases() {
    let settings = QueueSettings {
        per_group: Concurrency::new(2),
        ..QueueSettings::default()
    };
    let running = Job {
        attempts: 1,
        ..held("w", 1, 50.0)
    };
    let a = JobId::new("a").unwrap();
    let jobs = vec![
        (
            JobId::new("r").unwrap(),
            Job {
                group: grouped("g").group,
                ..running.clone()
            },
        ),
        (a.clone(), grouped("g")),
    ];
    let mut gate = gate_of(&settings, &jobs, 10.0);
    assert!(gate.admits(&a, &grouped("g")), "one live of two");
    gate.leased(grouped("g").group.as_ref());
    assert!(!gate.admits(&a, &grouped("g")), "two live of two");
    assert!(
        gate.admits(&a, &Job::new()),
        "a job without a group is never held back"
    );
    assert_eq!(gate.turn(&GroupKey::new("g").unwrap()), GroupTurn::Closed);
    // A lease that has ended no longer counts.
    let gate = gate_of(&settings, &jobs, 60.0);
    assert!(gate.admits(&a, &grouped("g")));
    // A group the gate was not told of is held back, so a store cannot forget to read one.
    assert!(!gate.admits(&a, &grouped("h")));
    // Without group rules, everything is admitted and nothing need be read.
    let free = GroupGate::new(&QueueSettings::default(), at(0.0));
    assert!(!free.must_learn(&GroupKey::new("g").unwrap()));
    assert!(free.admits(&a, &grouped("h")));
}

#[test]
fn an_ordered_group_runs_its_started_work_first_and_one_job_at_a_time() {
    let settings = QueueSettings {
        ordered: true,
        ..QueueSettings::default()
    };
    let (first, second) = (JobId::new("1").unwrap(), JobId::new("2").unwrap());
    // A started job whose lease ended is due again: only it may be leased.
    let lapsed = Job {
        attempts: 1,
        ..Job {
            group: grouped("g").group,
            ..held("w", 1, 5.0)
        }
    };
    let gate = gate_of(&settings, &[(first.clone(), lapsed.clone())], 10.0);
    assert!(gate.admits(&first, &lapsed));
    assert!(!gate.admits(&second, &grouped("g")));
    assert_eq!(
        gate.turn(&GroupKey::new("g").unwrap()),
        GroupTurn::Only(vec![&first])
    );
    // Running, waiting for a retry, or dead: the group is closed.
    let retrying = Job {
        run_at: Some(at(20.0)),
        ..lapsed.clone()
    };
    let dead = Job {
        ended: Some(Ended::Dead),
        ..lapsed.clone()
    };
    let out_of_attempts = Job {
        max_attempts: 1,
        ..lapsed.clone()
    };
    for holding in [&lapsed, &retrying, &dead, &out_of_attempts] {
        let now = if holding == &lapsed { 1.0 } else { 10.0 };
        let gate = gate_of(&settings, &[(first.clone(), holding.clone())], now);
        assert!(!gate.admits(&second, &grouped("g")), "{holding:?} at {now}");
    }
    // Done and cancelled jobs free the group; a lease taken closes it again.
    for ending in [
        Job {
            done: true,
            ..lapsed.clone()
        },
        Job {
            ended: Some(Ended::Cancelled),
            ..lapsed.clone()
        },
    ] {
        let mut gate = gate_of(&settings, &[(first.clone(), ending)], 10.0);
        assert!(gate.admits(&second, &grouped("g")));
        gate.leased(grouped("g").group.as_ref());
        assert!(!gate.admits(&second, &grouped("g")));
    }
    // A job buried by the claim holds its group.
    let mut gate = gate_of(&settings, &[(second.clone(), grouped("g"))], 10.0);
    gate.buried(grouped("g").group.as_ref());
    assert!(!gate.admits(&second, &grouped("g")));
}

/// A fair claim takes a group's turn (`GroupGate::turn`) by the rules `admits` applies: in an
/// ordered queue a group whose job runs, waits for its retry, is dead or out of attempts is
/// closed, and one whose started work is due again offers only that work; in a queue that is
/// not ordered neither closes a group under its limit, and a full group is closed either way.
#[test]
fn a_groups_turn_follows_the_ordered_rules_only_in_an_ordered_queue() {
    let g = GroupKey::new("g").unwrap();
    let first = JobId::new("1").unwrap();
    // Leased at fence 1 until 5, its first attempt: running before 5, due again after.
    let started = Job {
        attempts: 1,
        ..Job {
            group: Some(g.clone()),
            ..held("w", 1, 5.0)
        }
    };
    let ordered = |per_group| QueueSettings {
        ordered: true,
        per_group: Concurrency::new(per_group),
        ..QueueSettings::default()
    };
    let unordered = |per_group| QueueSettings {
        per_group: Concurrency::new(per_group),
        ..QueueSettings::default()
    };
    let turn = |settings: &QueueSettings, job: &Job, now: f64| {
        gate_of(settings, &[(first.clone(), job.clone())], now)
            .turn(&g)
            .clone_owned()
    };
    // Started work due again: only it, in an ordered queue; any job otherwise.
    assert_eq!(
        turn(&ordered(2), &started, 10.0),
        Owned::Only(vec![first.clone()])
    );
    assert_eq!(turn(&unordered(2), &started, 10.0), Owned::Open);
    // Running (one live lease of two): closed only when ordered.
    assert_eq!(turn(&ordered(2), &started, 1.0), Owned::Closed);
    assert_eq!(turn(&unordered(2), &started, 1.0), Owned::Open);
    // Full: closed either way.
    assert_eq!(turn(&unordered(1), &started, 1.0), Owned::Closed);
    // Waiting for a retry, dead, or out of attempts: closed when ordered, open otherwise.
    let retrying = Job {
        run_at: Some(at(20.0)),
        ..started.clone()
    };
    let dead = Job {
        ended: Some(Ended::Dead),
        ..started.clone()
    };
    let spent = Job {
        max_attempts: 1,
        ..started.clone()
    };
    for holding in [&retrying, &dead, &spent] {
        assert_eq!(
            turn(&ordered(2), holding, 10.0),
            Owned::Closed,
            "{holding:?}"
        );
        assert_eq!(
            turn(&unordered(2), holding, 10.0),
            Owned::Open,
            "{holding:?}"
        );
    }
    // The gate's view for the claim walk agrees: an ordered group with work due again offers
    // only that work, a closed one nothing, and an open one anything.
    let gate = gate_of(&ordered(2), &[(first.clone(), started.clone())], 10.0);
    assert_eq!(gate.turn(&g), GroupTurn::Only(vec![&first]));
    let gate = gate_of(&ordered(2), &[(first.clone(), dead.clone())], 10.0);
    assert_eq!(gate.turn(&g), GroupTurn::Closed);
    let gate = gate_of(&unordered(2), &[(first.clone(), dead)], 10.0);
    assert_eq!(gate.turn(&g), GroupTurn::Open);
}

/// A [`GroupTurn`] without its borrow, to compare.
#[derive(Debug, PartialEq)]
enum Owned {
    Closed,
    Only(Vec<JobId>),
    Open,
}

trait CloneOwned {
    fn clone_owned(&self) -> Owned;
}

impl CloneOwned for GroupTurn<'_> {
    fn clone_owned(&self) -> Owned {
        match self {
            GroupTurn::Closed => Owned::Closed,
            GroupTurn::Only(ids) => Owned::Only(ids.iter().map(|id| (*id).clone()).collect()),
            GroupTurn::Open => Owned::Open,
        }
    }
}

/// A rate's next opening counts only the grants still counting: one that expired is not a
/// place taken, so a rate full of live grants opens when the oldest of them expires.
#[test]
fn a_rate_opens_when_its_oldest_counting_grant_expires_whatever_expired_before() {
    let rate = Rate::new(2, 10.0).unwrap();
    let expiries = [at(5.0), at(15.0), at(12.0)];
    assert_eq!(rate.opens_at(&expiries, at(10.0)), Some(at(12.0)));
    // A place left: open now.
    assert_eq!(rate.opens_at(&[at(5.0), at(15.0)], at(10.0)), None);
    // Three live grants of a rate of 2: the second to expire leaves the place.
    assert_eq!(
        rate.opens_at(&[at(30.0), at(12.0), at(20.0)], at(10.0)),
        Some(at(20.0))
    );
}

/// A queue's throttle says when it opens (its own rate first, else its soonest group) and
/// whether anything is throttled.
#[test]
fn a_throttle_says_when_it_opens_and_whether_it_is_clear() {
    let g = |name: &str| GroupKey::new(name).unwrap();
    let clear = Throttle::default();
    assert!(clear.is_clear());
    assert_eq!(clear.opens_at(), None);
    let groups = Throttle {
        until: None,
        groups: BTreeMap::from([(g("a"), at(30.0)), (g("b"), at(20.0))]),
    };
    assert!(!groups.is_clear());
    assert_eq!(groups.opens_at(), Some(at(20.0)));
    let queue = Throttle {
        until: Some(at(40.0)),
        groups: BTreeMap::new(),
    };
    assert!(!queue.is_clear());
    assert_eq!(queue.opens_at(), Some(at(40.0)));
    // From the grants logged: a rate of 1 a minute granted at 0 opens at 60.
    let settings = QueueSettings {
        rate: Some(Rate::new(1, 60.0).unwrap()),
        rate_per_group: Some(Rate::new(1, 10.0).unwrap()),
        ..QueueSettings::default()
    };
    let grants = [(None, at(60.0)), (Some(g("a")), at(15.0))];
    let of = Throttle::of(&settings, &grants, at(5.0));
    assert_eq!(of.until, Some(at(60.0)));
    assert_eq!(of.groups, BTreeMap::from([(g("a"), at(15.0))]));
    assert_eq!(of.opens_at(), Some(at(60.0)));
    assert!(Throttle::of(&settings, &grants, at(61.0)).is_clear());
}

/// A child is judged against its parents exactly when it names some, can still run, and was
/// just stored, run again or retried; never for a job that was already stored unfinished.
#[test]
fn a_child_is_judged_against_its_parents_only_when_it_starts_waiting_again() {
    let child = Job {
        after: vec![JobId::new("p").unwrap()],
        ..Job::new()
    };
    assert!(judges_parents(None, &child), "just enqueued");
    let finished = Job {
        ended: Some(Ended::Dead),
        ..child.clone()
    };
    assert!(
        judges_parents(Some(&finished), &child),
        "retried or run again"
    );
    assert!(
        !judges_parents(Some(&child), &child),
        "already stored unfinished"
    );
    assert!(!judges_parents(None, &finished), "finished");
    assert!(!judges_parents(None, &Job::new()), "no parents");
}

/// A child's fate changes exactly the fields it names: waiting, due (at the parent's end), or
/// cancelled naming the parent; the rest of the job is kept.
#[test]
fn a_childs_fate_changes_what_it_names_and_keeps_the_rest() {
    let waiting = Job {
        waiting: true,
        priority: 7,
        updated: Some(at(1.0)),
        after: vec![JobId::new("p").unwrap()],
        ..Job::new()
    };
    let parent = JobId::new("p").unwrap();
    assert_eq!(
        waiting.settled(&ChildFate::Due, Some(at(9.0))),
        Some(Job {
            waiting: false,
            updated: Some(at(9.0)),
            ..waiting.clone()
        })
    );
    assert_eq!(
        waiting.settled(&ChildFate::Due, None),
        Some(Job {
            waiting: false,
            ..waiting.clone()
        })
    );
    assert_eq!(
        waiting.settled(
            &ChildFate::Cancel(parent.clone(), Status::Dead),
            Some(at(9.0))
        ),
        Some(Job {
            waiting: false,
            ended: Some(Ended::Cancelled),
            error: Some("cancelled: its parent p ended dead".to_owned()),
            updated: Some(at(9.0)),
            ..waiting.clone()
        })
    );
    assert_eq!(waiting.settled(&ChildFate::Wait, Some(at(9.0))), None);
    let pending = Job {
        waiting: false,
        ..waiting.clone()
    };
    assert_eq!(
        pending.settled(&ChildFate::Wait, Some(at(9.0))),
        Some(Job {
            waiting: true,
            ..pending.clone()
        }),
        "waiting again keeps its last change"
    );
    assert_eq!(pending.settled(&ChildFate::Due, Some(at(9.0))), None);
}

/// The gate holds back nothing in a queue without group rules and no paused group, and then
/// asks a store to read no group's standing; with a rule it asks for each group it does not
/// know, once.
#[test]
fn a_gate_asks_for_the_standing_of_each_unknown_group_once_and_only_when_it_judges_groups() {
    let (a, b) = (GroupKey::new("a").unwrap(), GroupKey::new("b").unwrap());
    let jobs = [grouped("a"), grouped("b"), grouped("a"), Job::new()];
    let free = GroupGate::new(&QueueSettings::default(), at(0.0));
    assert!(!free.is_active());
    assert!(!free.must_learn(&a));
    let paused = QueueSettings {
        paused_groups: BTreeMap::from([(a.clone(), None)]),
        ..QueueSettings::default()
    };
    let only_paused = GroupGate::new(&paused, at(0.0));
    assert!(only_paused.is_active());
    assert!(
        !only_paused.must_learn(&b),
        "a pause alone needs no standing"
    );
    let limited = QueueSettings {
        per_group: Concurrency::new(1),
        ..QueueSettings::default()
    };
    let mut gate = GroupGate::new(&limited, at(0.0));
    assert!(gate.is_active());
    assert!(gate.must_learn(&a) && gate.must_learn(&b));
    let first = JobId::new("1").unwrap();
    gate.learn(
        std::slice::from_ref(&a),
        &[(first, jobs[0].clone())],
        &[],
        at(0.0),
    );
    assert!(!gate.must_learn(&a), "known now");
    assert!(
        gate.must_learn(&b),
        "a group not learned is still asked for"
    );
}

/// A job keeps its group's turn in a fair queue while it is unfinished.
#[test]
fn an_unfinished_job_keeps_its_groups_turn_and_a_finished_one_does_not() {
    let pending = grouped("g");
    assert_eq!(Turn::kept_by(&pending), pending.group.as_ref());
    assert_eq!(Turn::kept_by(&Job::new()), None, "no group, no turn");
    let done = Job {
        done: true,
        ..grouped("g")
    };
    assert_eq!(Turn::kept_by(&done), None);
}

/// A job that comes to an end it had not come to is what releases or cancels its children;
/// one that was already finished, or is not, releases nothing.
#[test]
fn a_job_finishes_when_it_comes_to_its_end_and_only_then() {
    let running = held("w", 1, 10.0);
    let done = Job {
        done: true,
        ..running.clone()
    };
    let dead = Job {
        ended: Some(Ended::Dead),
        ..running.clone()
    };
    assert_eq!(finishes(Some(&running), &done), Some(Status::Done));
    assert_eq!(finishes(Some(&running), &dead), Some(Status::Dead));
    assert_eq!(finishes(Some(&done), &done), None, "already finished");
    assert_eq!(finishes(Some(&running), &running), None, "not finished");
    assert_eq!(finishes(None, &done), None, "never seen unfinished");
}

/// A job may name exactly `MAX_PARENTS` parents; one more is refused naming the count.
#[test]
fn a_job_may_name_max_parents_and_not_one_more() {
    let parents: Vec<JobId> = (0..=MAX_PARENTS)
        .map(|n| JobId::new(format!("p{n}")).unwrap())
        .collect();
    let child = JobId::new("child").unwrap();
    let at_most = [(child.clone(), parents[..MAX_PARENTS].to_vec())];
    assert!(check_workflow(&at_most, |_| true).is_ok());
    let over = [(child.clone(), parents.clone())];
    assert_eq!(
        check_workflow(&over, |_| true),
        Err(WorkflowRefused::TooManyParents {
            child,
            count: MAX_PARENTS + 1
        })
    );
}

/// A checkpoint's name and value read back as given.
#[test]
fn a_checkpoints_name_and_value_read_back_as_given() {
    let name = CheckpointName::new("fetch").unwrap();
    let value = CheckpointValue::new("rows 1-100").unwrap();
    assert_eq!((name.as_str(), value.as_str()), ("fetch", "rows 1-100"));
}

#[test]
fn limits_change_only_what_they_name() {
    let start = QueueSettings {
        concurrency: Concurrency::new(4),
        timeout: Ttl::new(3.0).ok(),
        ..QueueSettings::default()
    };
    let change = QueueChange::set(Limits {
        per_group: Some(Concurrency::new(1)),
        ordered: Some(true),
        ..Limits::default()
    })
    .unwrap();
    let next = decide_queue_change(&start, change);
    assert_eq!(
        next,
        QueueSettings {
            per_group: Concurrency::new(1),
            ordered: true,
            ..start.clone()
        }
    );
    assert!(next.limits_groups() && next.serializes_claims());
    let off = QueueChange::set(Limits {
        per_group: Some(None),
        ordered: Some(false),
        ..Limits::default()
    })
    .unwrap();
    assert_eq!(decide_queue_change(&next, off), start);
    assert_eq!(QueueChange::set(Limits::default()), None);
}

#[test]
fn a_debounced_enqueue_moves_a_waiting_job_and_leaves_a_started_one() {
    let spec = |payload: &[u8], at_: f64| EnqueueSpec {
        debounce: Some(Ttl::new(10.0).unwrap()),
        enqueued_at: Some(at(at_)),
        payload: Some(Payload::new(payload.to_vec(), 16).unwrap()),
        ..EnqueueSpec::default()
    };
    let id = JobId::new("d").unwrap();
    let (first, outcome) = Command::EnqueueWith(spec(b"1", 100.0)).decide(&id, None, None);
    let first = first.unwrap();
    assert_eq!(
        (first.run_at, outcome),
        (Some(at(110.0)), Outcome::Enqueued(true))
    );
    let (moved, outcome) = Command::EnqueueWith(spec(b"2", 105.0)).decide(&id, Some(&first), None);
    let moved = moved.expect("a waiting job is moved");
    assert_eq!(
        outcome,
        Outcome::Enqueued(false),
        "nothing new was inserted"
    );
    assert_eq!(
        (moved.run_at, moved.payload.as_deref()),
        (Some(at(115.0)), Some(&b"2"[..]))
    );
    assert_eq!((moved.fence, moved.priority), (first.fence, first.priority));
    // A started job (leased once) and a finished one are left alone.
    let started = Job {
        attempts: 1,
        ..moved.clone()
    };
    let done = Job {
        done: true,
        ..moved.clone()
    };
    for job in [&started, &done] {
        let (next, outcome) = Command::EnqueueWith(spec(b"3", 106.0)).decide(&id, Some(job), None);
        assert_eq!((next, outcome), (None, Outcome::Enqueued(false)));
    }
    // `run_at` later than the debounce wins; without a debounce an enqueue changes nothing.
    let later = EnqueueSpec {
        run_at: Some(at(500.0)),
        ..spec(b"4", 107.0)
    };
    assert_eq!(later.due(), Some(at(500.0)));
    let plain = EnqueueSpec {
        debounce: None,
        ..spec(b"5", 108.0)
    };
    assert_eq!(
        Command::EnqueueWith(plain).decide(&id, Some(&moved), None),
        (None, Outcome::Enqueued(false))
    );
}

#[test]
fn a_paused_group_is_held_back_until_resumed_or_its_time_and_other_groups_run() {
    let g = GroupKey::new("acct-9").unwrap();
    let paused = decide_queue_change(
        &QueueSettings::default(),
        QueueChange::PauseGroup(g.clone(), Some(at(50.0))),
    );
    assert!(!paused.is_default() && !paused.limits_groups());
    assert!(paused.is_group_paused_at(&g, at(49.9)));
    assert!(
        !paused.is_group_paused_at(&g, at(50.0)),
        "a pause until a time ends at it"
    );
    let (id, job) = (JobId::new("j").unwrap(), grouped("acct-9"));
    let gate = GroupGate::new(&paused, at(10.0));
    assert!(gate.is_active() && !gate.admits(&id, &job));
    assert!(gate.admits(&id, &grouped("acct-1")), "another group runs");
    assert!(gate.admits(&id, &Job::new()), "a job without a group runs");
    assert!(!gate.must_learn(&g), "a pause alone reads no group's jobs");
    assert_eq!(gate.turn(&g), GroupTurn::Closed);
    assert!(GroupGate::new(&paused, at(60.0)).admits(&id, &job));
    let resumed = decide_queue_change(&paused, QueueChange::ResumeGroup(g));
    assert!(resumed.is_default());
}

#[test]
fn a_rate_reads_n_per_period_and_refuses_what_is_not_one_naming_it() {
    let rate = Rate::parse("100/1m").unwrap();
    assert_eq!((rate.count(), rate.period()), (100, 60.0));
    assert_eq!(Rate::parse("5/500ms").unwrap().period(), 0.5);
    assert_eq!(Rate::parse("1/1.5h").unwrap().period(), 5_400.0);
    for shown in ["100/1m", "5/500ms", "3/10s", "1/2h", "7/1500ms"] {
        assert_eq!(Rate::parse(shown).unwrap().to_string(), shown);
    }
    for (bad, says) in [
        ("0/1s", "1 or more"),
        ("5/0s", "more than 0"),
        ("five/1s", "whole number"),
        ("-1/1s", "whole number"),
        ("5", "N/PERIOD"),
        ("5/1", "no unit"),
        ("5/1d", "unknown unit"),
        ("5/s", "not a number"),
        ("5/25h", "1ms to 24h"),
        ("5/NaNs", "unknown unit"),
        ("5/-1s", "more than 0"),
    ] {
        let err = Rate::parse(bad).unwrap_err().to_string();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(err.contains(bad), "{bad}: the error names the value: {err}");
    }
}

#[test]
fn a_rate_counts_the_grants_that_have_not_expired_and_says_when_a_place_opens() {
    let rate = Rate::parse("3/10s").unwrap();
    let grants = [at(11.0), at(12.0), at(15.0), at(9.0)];
    assert_eq!(rate.room(&grants, at(10.0)), 0, "9.0 has expired");
    assert_eq!(rate.opens_at(&grants, at(10.0)), Some(at(11.0)));
    assert_eq!(
        rate.room(&grants, at(11.0)),
        1,
        "a grant stops counting at its expiry"
    );
    assert_eq!(rate.opens_at(&grants, at(11.0)), None);
    // Over the count (the rate was lowered): the place opens when enough have gone.
    let lower = Rate::parse("1/10s").unwrap();
    assert_eq!(
        lower.opens_at(&grants, at(10.0)),
        Some(at(15.0)),
        "all three must go"
    );
    assert_eq!(rate.expiry(at(5.0)), at(15.0));
}

#[test]
fn no_window_of_a_rates_period_holds_more_than_its_count_whatever_the_claims_ask() {
    // Claims at many times (some going back, as callers' clocks do between claims of one
    // store), each granting what the log allows, never put more than N grants in any window.
    let rate = Rate::parse("4/10s").unwrap();
    let mut log: Vec<Timestamp> = Vec::new();
    let mut granted: Vec<f64> = Vec::new();
    let mut seed = 7_u64;
    for step in 0..2_000 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let jitter = f64::from(u32::try_from(seed >> 44).unwrap() % 700) / 100.0;
        let now = f64::from(step) * 0.5 - jitter;
        let wanted = usize::try_from(seed >> 61).unwrap();
        let take = rate.room(&log, at(now)).min(wanted);
        for _ in 0..take {
            log.push(rate.expiry(at(now)));
            granted.push(now);
        }
    }
    granted.sort_by(f64::total_cmp);
    for (i, start) in granted.iter().enumerate() {
        let within = granted[i..]
            .iter()
            .take_while(|t| **t < start + 10.0)
            .count();
        assert!(within <= 4, "{within} grants in the window from {start}");
    }
    assert!(granted.len() > 100, "the claims were granted something");
}

#[test]
fn a_rate_per_group_holds_back_a_group_whose_window_is_full() {
    let settings = QueueSettings {
        rate_per_group: Some(Rate::parse("1/1m").unwrap()),
        ..QueueSettings::default()
    };
    let a = GroupKey::new("a").unwrap();
    let b = GroupKey::new("b").unwrap();
    let mut gate = GroupGate::new(&settings, at(100.0));
    gate.learn(&[a.clone(), b.clone()], &[], &[(a.clone(), 1)], at(100.0));
    let job_of = |g: &GroupKey| Job {
        group: Some(g.clone()),
        ..Job::new()
    };
    let id = JobId::new("j").unwrap();
    assert!(
        !gate.admits(&id, &job_of(&a)),
        "a's one grant is still counting"
    );
    assert!(gate.admits(&id, &job_of(&b)));
    gate.leased(Some(&b));
    assert!(
        !gate.admits(&id, &job_of(&b)),
        "b's lease filled its window"
    );
    assert_eq!(gate.turn(&a), GroupTurn::Closed);
    assert_eq!(gate.turn(&b), GroupTurn::Closed);
}

#[test]
fn a_throttle_says_when_the_queue_and_each_full_group_open_again() {
    let settings = QueueSettings {
        rate: Some(Rate::parse("2/1m").unwrap()),
        rate_per_group: Some(Rate::parse("1/1m").unwrap()),
        ..QueueSettings::default()
    };
    let a = GroupKey::new("a").unwrap();
    let grants = [
        (None, at(150.0)),
        (None, at(140.0)),
        (Some(a.clone()), at(140.0)),
        (Some(GroupKey::new("b").unwrap()), at(90.0)),
    ];
    let throttle = Throttle::of(&settings, &grants, at(100.0));
    assert_eq!(throttle.until, Some(at(140.0)));
    assert_eq!(
        throttle.groups.into_iter().collect::<Vec<_>>(),
        [(a, at(140.0))]
    );
    assert!(Throttle::of(&QueueSettings::default(), &grants, at(100.0)).is_clear());
}

#[test]
fn only_the_live_holder_holds_its_jobs_group_and_a_hold_never_shortens_a_pause() {
    let a = GroupKey::new("acct-a").unwrap();
    let job = Job {
        owner: Some(owner("w")),
        fence: fence(2),
        until: at(100.0),
        group: Some(a.clone()),
        ..Job::new()
    };
    let id = JobId::new("j").unwrap();
    let hold =
        |who: &str, f: u64, now: f64| Command::HoldGroup(owner(who), fence(f), at(now), at(500.0));
    for (command, why) in [
        (hold("w", 1, 50.0), "stale"),
        (hold("x", 2, 50.0), "not the owner"),
        (hold("w", 2, 100.0), "expired"),
    ] {
        let (next, outcome) = command.decide(&id, Some(&job), None);
        assert!(next.is_none());
        let Outcome::Wrote(Err(refused)) = &outcome else {
            panic!("{why}: {outcome:?}");
        };
        assert!(refused.to_string().contains(why), "{refused}");
        assert_eq!(command.queue_change(Some(&job), &outcome), None);
    }
    let granted = hold("w", 2, 50.0);
    let (next, outcome) = granted.decide(&id, Some(&job), None);
    assert_eq!((next, &outcome), (None, &Outcome::Wrote(Ok(()))));
    assert_eq!(
        granted.queue_change(Some(&job), &outcome),
        Some((
            job.queue.clone(),
            QueueChange::HoldGroup(a.clone(), at(500.0))
        ))
    );
    let lonely = Job {
        group: None,
        ..job.clone()
    };
    assert_eq!(
        granted.decide(&id, Some(&lonely), None).1,
        Outcome::Wrote(Err(WriteRefused::NoGroup))
    );
    // The hold keeps the later end; a pause until resumed stays so.
    let held = |existing: Option<Option<f64>>, until: f64| {
        let mut settings = QueueSettings::default();
        if let Some(end) = existing {
            settings.paused_groups.insert(a.clone(), end.map(at));
        }
        decide_queue_change(&settings, QueueChange::HoldGroup(a.clone(), at(until))).paused_groups
            [&a]
    };
    assert_eq!(held(None, 500.0), Some(at(500.0)));
    assert_eq!(held(Some(Some(900.0)), 500.0), Some(at(900.0)));
    assert_eq!(held(Some(Some(100.0)), 500.0), Some(at(500.0)));
    assert_eq!(held(Some(None), 500.0), None);
    assert_eq!(granted.holder_write(), Some(HolderWrite::HoldGroup));
    assert_eq!(
        HolderWrite::parse("hold_group"),
        Some(HolderWrite::HoldGroup)
    );
}

/// A sealed payload of `body_len` bytes after its header, under `key`.
fn sealed_bytes(key: &str, body_len: usize) -> Vec<u8> {
    let mut bytes = sealed_payload_header(key);
    bytes.extend(std::iter::repeat_n(7u8, body_len));
    bytes
}

#[test]
fn a_sealed_payload_is_known_by_its_header_and_names_its_key() {
    let bytes = sealed_bytes("k-2026", SEALED_NONCE_LEN + SEALED_TAG_LEN + 3);
    let sealed = sealed_payload(&bytes).expect("sealed");
    assert_eq!(sealed.key, "k-2026");
    assert_eq!(sealed.body.len(), SEALED_NONCE_LEN + SEALED_TAG_LEN + 3);
    assert_eq!(sealed_label(sealed.key), "encrypted (key k-2026)");
}

#[test]
fn a_plain_or_cut_payload_is_not_sealed() {
    assert_eq!(sealed_payload(b"{\"to\": \"a@example.com\"}"), None);
    assert_eq!(sealed_payload(&[]), None);
    // Shorter than a nonce and a tag: not a sealed payload.
    let short = sealed_bytes("k", SEALED_NONCE_LEN + SEALED_TAG_LEN - 1);
    assert_eq!(sealed_payload(&short), None);
    // A name that is not a key name.
    let mut odd = sealed_bytes("k", 40);
    odd[8] = b' ';
    assert_eq!(sealed_payload(&odd), None);
    // Another version.
    let mut later = sealed_bytes("k", 40);
    later[6] = 2;
    assert_eq!(sealed_payload(&later), None);
}

#[test]
fn a_sealed_result_is_known_by_its_prefix_and_names_its_key() {
    let body = "A".repeat(40);
    let text = format!("lease-sealed:v1:ops.1:{body}");
    let sealed = sealed_result(&text).expect("sealed");
    assert_eq!(sealed.key, "ops.1");
    assert_eq!(sealed.body, body.as_bytes());
    assert_eq!(sealed_result("lease-sealed:v1:ops.1:"), None);
    assert_eq!(sealed_result("lease-sealed:v1:bad name:AAAA"), None);
    assert_eq!(sealed_result("lease-sealed:v1:k:not base64!"), None);
    assert_eq!(sealed_result("done"), None);
}

/// The envelopes' starts are reserved: what begins with one is sealed or malformed, never
/// plain; and the boundary (`Payload::new`, `JobResult::new`) refuses a malformed one, so no
/// plain value can be stored that a reader would take for a sealed one, and no crafted one
/// that a worker would hand on as plain bytes.
#[test]
fn the_envelopes_starts_are_reserved_and_a_malformed_one_is_refused_at_the_boundary() {
    let mut later = sealed_bytes("k", 40);
    later[6] = 2;
    let short = sealed_bytes("k", SEALED_NONCE_LEN + SEALED_TAG_LEN - 1);
    let mut odd = sealed_bytes("k", 40);
    odd[8] = b' ';
    for bad in [later, short, odd, SEALED_PAYLOAD_RESERVED.to_vec()] {
        assert!(
            matches!(payload_envelope(&bad), Envelope::Malformed(_)),
            "{bad:?}"
        );
        assert!(matches!(
            Payload::new(bad, Payload::DEFAULT_LIMIT),
            Err(InputError::Envelope {
                what: "payload",
                ..
            })
        ));
    }
    let good = sealed_bytes("k", 40);
    assert!(matches!(payload_envelope(&good), Envelope::Sealed(_)));
    assert!(Payload::new(good, Payload::DEFAULT_LIMIT).is_ok());
    // Binary plaintext that merely starts with 0xFF is plain.
    assert_eq!(payload_envelope(&[0xFF, b'l', b'a']), Envelope::Plain);
    for bad in [
        "lease-sealed:v2:k:AAAA",
        "lease-sealed:v1:k:AAAA",
        "lease-sealed:v1:k",
        "lease-sealed:",
    ] {
        assert!(
            matches!(result_envelope(bad), Envelope::Malformed(_)),
            "{bad}"
        );
        let refused = JobResult::new(bad).unwrap_err();
        assert!(refused.to_string().contains("reserved"), "{refused}");
    }
    assert!(JobResult::new("lease-sealed is a fine word").is_ok());
}

#[test]
fn key_names_are_short_and_plain() {
    assert!(is_key_name("2026-01_ops.primary"));
    assert!(!is_key_name(""));
    assert!(!is_key_name(&"k".repeat(KEY_NAME_MAX + 1)));
    assert!(!is_key_name("a=b"));
    assert!(!is_key_name("ключ"));
}

#[test]
fn associated_data_binds_the_key_the_kind_and_the_job() {
    let a = sealed_associated_data("k", SealedKind::Payload, "job-1");
    assert_ne!(a, sealed_associated_data("k", SealedKind::Payload, "job-2"));
    assert_ne!(a, sealed_associated_data("k", SealedKind::Result, "job-1"));
    assert_ne!(
        a,
        sealed_associated_data("k2", SealedKind::Payload, "job-1")
    );
}

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn a_w3c_traceparent_is_kept_as_sent_and_read_by_field() {
    let t = TraceContext::new(PARENT, Some(" congo=t61rcWkgMzE ")).unwrap();
    assert_eq!(t.traceparent(), PARENT);
    assert_eq!(t.tracestate(), Some("congo=t61rcWkgMzE"));
    assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(t.parent_id(), "00f067aa0ba902b7");
    assert!(t.sampled());
    let unsampled = TraceContext::new(&PARENT.replace("-01", "-00"), Some("")).unwrap();
    assert!(!unsampled.sampled());
    assert_eq!(unsampled.tracestate(), None);
    // A later version may carry more fields.
    let later = format!("{}-more", PARENT.replacen("00", "01", 1));
    assert!(TraceContext::new(&later, None).is_ok());
}

#[test]
fn a_job_s_first_attempt_continues_its_trace_and_a_retry_links_to_it() {
    use crate::Join;
    assert_eq!(Join::attempt(0), Join::Child, "a claim by id");
    assert_eq!(Join::attempt(1), Join::Child);
    assert_eq!(Join::attempt(2), Join::Link);
    assert_eq!(Join::attempt(u32::MAX), Join::Link);
}

#[test]
fn a_malformed_trace_context_is_refused_naming_what_is_wrong() {
    let told = |parent: &str, state: Option<&str>| {
        TraceContext::new(parent, state).unwrap_err().to_string()
    };
    assert!(told("", None).contains("VERSION-TRACEID-PARENTID-FLAGS"));
    assert!(told(&PARENT.replacen("00", "ff", 1), None).contains("version"));
    assert!(told(&format!("{PARENT}-x"), None).contains("exactly four fields"));
    assert!(told(&PARENT.to_uppercase(), None).contains("trace id"));
    let zero_trace = format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32));
    assert!(told(&zero_trace, None).contains("trace id"));
    let zero_parent = format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01", "0".repeat(16));
    assert!(told(&zero_parent, None).contains("parent id"));
    assert!(told(&PARENT.replace("-01", "-1"), None).contains("flags"));
    let long = "k=".to_owned() + &"v".repeat(TRACESTATE_MAX);
    assert!(told(PARENT, Some(&long)).contains("over the limit"));
    assert!(told(PARENT, Some("k=\u{7}")).contains("printable ASCII"));
}

fn epoch(n: u64) -> Epoch {
    Epoch::new(n).unwrap()
}

#[test]
fn epoch_zero_hands_out_fences_as_before_epochs() {
    assert_eq!(Fence::ZERO.next_in(Epoch::ZERO), Some(fence(1)));
    assert_eq!(fence(7).next_in(Epoch::ZERO), Some(fence(8)));
    assert_eq!(fence(7).epoch(), Epoch::ZERO);
    assert_eq!(fence(7).count(), 7);
}

#[test]
fn a_new_epoch_hands_out_fences_above_every_fence_of_the_earlier_ones() {
    let last_of_epoch_0 = fence(u64::from(u32::MAX));
    let first_of_1 = epoch(1).first_fence();
    assert_eq!(first_of_1, fence((1 << 32) | 1));
    assert!(first_of_1 > last_of_epoch_0);
    // Whatever the job's fence in an earlier epoch, lost or kept, the next one is the first
    // of the store's epoch, then counts up.
    assert_eq!(fence(1).next_in(epoch(1)), Some(first_of_1));
    assert_eq!(fence(2).next_in(epoch(1)), Some(first_of_1));
    assert_eq!(first_of_1.next_in(epoch(1)), Some(fence((1 << 32) | 2)));
    assert_eq!(
        fence((1 << 32) | 2).next_in(epoch(3)),
        Some(epoch(3).first_fence())
    );
    assert_eq!(epoch(3).first_fence().epoch(), epoch(3));
    assert_eq!(epoch(3).first_fence().count(), 1);
}

#[test]
fn a_fence_never_runs_into_the_next_epochs_fences() {
    let last_of_epoch_1 = fence((1 << 32) | u64::from(u32::MAX));
    assert_eq!(last_of_epoch_1.next_in(epoch(1)), None);
    // In a later epoch it starts that epoch's count.
    assert_eq!(
        last_of_epoch_1.next_in(epoch(2)),
        Some(epoch(2).first_fence())
    );
    // A fence of a later epoch than the store's (a store whose epoch was not carried) still
    // only goes up.
    assert_eq!(
        epoch(5).first_fence().next_in(epoch(1)),
        Some(fence((5 << 32) | 2))
    );
    assert_eq!(Fence::MAX.next_in(Epoch::MAX), None);
    assert_eq!(Fence::MAX.epoch(), Epoch::MAX);
}

#[test]
fn an_epoch_above_the_largest_is_out_of_range() {
    let max = u64::from(Epoch::MAX.get());
    assert_eq!(Epoch::new(max), Ok(Epoch::MAX));
    assert_eq!(
        Epoch::new(max + 1),
        Err(InputError::EpochOutOfRange(max + 1))
    );
    assert_eq!(Epoch::MAX.next(), None);
    // The last fence of the largest epoch is the largest fence a store can hold.
    assert_eq!(fence((max << 32) | u64::from(u32::MAX)), Fence::MAX);
}

#[test]
fn a_claim_in_an_epoch_hands_out_that_epochs_next_fence() {
    let job = held("a", 3, 10.0);
    let in_2 = term(20.0, 5.0).in_epoch(epoch(2));
    let claimed = decide_claim(Some(&job), &owner("b"), in_2).unwrap();
    assert_eq!(claimed.fence, epoch(2).first_fence());
    let NextDecision::Lease(next) = decide_claim_next(&job, &owner("b"), in_2) else {
        panic!("a due job with attempts left is leased");
    };
    assert_eq!(next.fence, epoch(2).first_fence());
    // The epoch survives the store's clock re-timing the term.
    assert_eq!(in_2.at(at(30.0)).unwrap().epoch(), epoch(2));
}

#[test]
fn a_claim_whose_epoch_is_used_up_is_refused_and_skipped() {
    let job = held("a", (1 << 32) | u64::from(u32::MAX), 10.0);
    let in_1 = term(20.0, 5.0).in_epoch(epoch(1));
    assert_eq!(
        decide_claim(Some(&job), &owner("b"), in_1),
        Err(ClaimRefused::FenceExhausted)
    );
    assert_eq!(
        decide_claim_next(&job, &owner("b"), in_1),
        NextDecision::Skip
    );
}

// ---- What a decision changes ----

/// The kinds of a decision's changes, in order.
fn kinds(decided: &Decided) -> Vec<u8> {
    decided.changes.iter().map(Change::kind).collect()
}

#[test]
fn an_enqueue_of_a_purged_id_inserts_its_row_and_forgets_the_mark() {
    let j = id("j");
    let decided = Command::Enqueue.decided(&j, None, Some(fence(7)));
    let Some(row) = decided.row().cloned() else {
        panic!("no row: {decided:?}");
    };
    assert_eq!(row.fence, fence(7), "the fence carries on from the mark");
    assert_eq!(
        decided.changes,
        vec![
            Change::Row {
                job: row,
                insert: true
            },
            Change::ForgetPurged
        ]
    );
    // Without a mark there is none to forget; over a stored job nothing is written.
    assert_eq!(kinds(&Command::Enqueue.decided(&j, None, None)), vec![3]);
    let stored = Job::new();
    let again = Command::Enqueue.decided(&j, Some(&stored), None);
    assert_eq!(again.changes, vec![]);
    assert_eq!(again.outcome, Outcome::Enqueued(false));
}

#[test]
fn running_a_finished_child_again_clears_writes_traces_names_parents_and_judges_in_that_order() {
    let j = id("j");
    let context = TraceContext::new(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        None,
    )
    .unwrap();
    let again = Command::EnqueueWith(EnqueueSpec {
        replace_finished: true,
        trace: Some(context.clone()),
        after: vec![id("parent")],
        ..EnqueueSpec::default()
    });
    let claimed = decide_claim(Some(&Job::new()), &owner("A"), term(100.0, 30.0)).unwrap();
    let result = JobResult::new("v").unwrap();
    let done = decide_complete(Some(&claimed), &owner("A"), fence(1), at(110.0), &result).unwrap();
    let decided = again.decided(&j, Some(&done), None);
    let Some(row) = decided.row().cloned() else {
        panic!("no row: {decided:?}");
    };
    assert_eq!(
        decided.changes,
        vec![
            Change::ClearCheckpoints,
            Change::Row {
                job: row,
                insert: false
            },
            Change::Trace(Some(context)),
            Change::Parents,
            Change::Judge,
        ]
    );
    // A live job is left as it is: nothing of it changes.
    assert_eq!(again.decided(&j, Some(&claimed), None).changes, vec![]);
}

#[test]
fn a_completion_writes_the_row_then_settles_the_jobs_waiting_on_it() {
    let j = id("j");
    let claimed = decide_claim(Some(&Job::new()), &owner("A"), term(100.0, 30.0)).unwrap();
    let result = JobResult::new("v").unwrap();
    let complete = Command::Complete(owner("A"), fence(1), at(110.0), result);
    let decided = complete.decided(&j, Some(&claimed), None);
    let Some(row) = decided.row().cloned() else {
        panic!("no row: {decided:?}");
    };
    assert_eq!(
        decided.changes,
        vec![
            Change::Row {
                job: row,
                insert: false
            },
            Change::Release(Status::Done, Some(at(110.0))),
            Change::Attempt(crate::Attempt {
                fence: fence(1),
                owner: owner("A"),
                started: Some(at(100.0)),
                ended: Some(at(110.0)),
                end: crate::AttemptEnd::Done,
                error: None,
            }),
        ]
    );
    // A renewal writes its row alone.
    let renew = Command::Renew(owner("A"), fence(1), term(110.0, 30.0));
    assert_eq!(kinds(&renew.decided(&j, Some(&claimed), None)), vec![3]);
}

#[test]
fn a_refused_holder_write_changes_nothing_but_the_audit_trail() {
    let j = id("j");
    let claimed = decide_claim(Some(&Job::new()), &owner("A"), term(100.0, 30.0)).unwrap();
    let stale = Command::Renew(owner("A"), fence(9), term(110.0, 30.0));
    let decided = stale.decided(&j, Some(&claimed), None);
    assert!(!decided.writes());
    let Some(entry) = decided.refused() else {
        panic!("no refusal: {decided:?}");
    };
    assert_eq!(entry.reason, AuditReason::Stale);
    assert_eq!(decided.changes, vec![Change::Refused(entry.clone())]);
    // A refusal that is not a holder's (a retry of a live job) leaves no trail either.
    let retry = Command::Retry(at(110.0)).decided(&j, Some(&claimed), None);
    assert!(matches!(retry.outcome, Outcome::Wrote(Err(_))));
    assert_eq!(retry.changes, vec![]);
}

#[test]
fn a_hold_changes_only_its_queue_and_a_checkpoint_only_its_own_row() {
    let j = id("j");
    let grouped = Job {
        group: Some(GroupKey::new("g").unwrap()),
        ..held("A", 1, 200.0)
    };
    let hold = Command::HoldGroup(owner("A"), fence(1), at(100.0), at(150.0));
    assert_eq!(
        hold.decided(&j, Some(&grouped), None).changes,
        vec![Change::Queue(
            grouped.queue.clone(),
            QueueChange::HoldGroup(GroupKey::new("g").unwrap(), at(150.0))
        )]
    );
    let step = checkpoint("fetch", "rows=3");
    let keep = Command::Checkpoint(owner("A"), fence(1), at(100.0), step.clone());
    assert_eq!(
        keep.decided(&j, Some(&grouped), None).changes,
        vec![Change::Checkpoint(step, fence(1), at(100.0))]
    );
}

#[test]
fn a_claimed_row_settles_the_jobs_waiting_only_when_the_claim_buried_it() {
    let leased = decide_claim(Some(&Job::new()), &owner("A"), term(100.0, 30.0)).unwrap();
    assert_eq!(
        Change::of_claim(leased.clone(), None),
        vec![Change::Row {
            job: leased,
            insert: false
        }]
    );
    let buried = Job {
        ended: Some(Ended::Dead),
        updated: Some(at(100.0)),
        ..Job::new()
    };
    let changes = Change::of_claim(buried.clone(), None);
    assert_eq!(
        kinds(&Decided {
            outcome: Outcome::Enqueued(false),
            changes: changes.clone()
        }),
        vec![3, 8]
    );
    assert_eq!(changes[1], Change::Release(Status::Dead, Some(at(100.0))));
}

/// How each command ends the attempt a claim at 100 (lease until 130) started.
fn ended_by(command: &Command) -> Option<crate::Attempt> {
    let j = id("j");
    let claimed = decide_claim(Some(&Job::new()), &owner("A"), term(100.0, 30.0)).unwrap();
    command.decided(&j, Some(&claimed), None).attempt().cloned()
}

#[test]
fn each_way_an_attempt_ends_is_told_apart_with_its_time() {
    use crate::AttemptEnd;
    let boom = ErrorText::new("boom").unwrap();
    let timed_out = ErrorText::new(crate::TIMED_OUT).unwrap();
    let end = |c: Command| ended_by(&c).map(|a| (a.end, a.ended.map(Timestamp::get), a.error));
    assert_eq!(
        end(Command::Fail(
            owner("A"),
            fence(1),
            at(110.0),
            boom,
            Retry::No
        )),
        Some((AttemptEnd::Failed, Some(110.0), Some("boom".to_owned())))
    );
    assert_eq!(
        end(Command::Fail(
            owner("A"),
            fence(1),
            at(111.0),
            timed_out,
            Retry::No
        )),
        Some((
            AttemptEnd::TimedOut,
            Some(111.0),
            Some(crate::TIMED_OUT.to_owned())
        ))
    );
    assert_eq!(
        end(Command::Release(owner("A"), fence(1))),
        Some((AttemptEnd::Released, None, None)),
        "a release carries no time: the store stamps it"
    );
    assert_eq!(
        end(Command::Cancel(at(120.0))),
        Some((AttemptEnd::Cancelled, Some(120.0), None)),
        "cancelled while its lease was live"
    );
    assert_eq!(
        end(Command::Cancel(at(140.0))),
        Some((AttemptEnd::LeaseLost, Some(130.0), None)),
        "a cancel after the lease ended finds it lost at its deadline"
    );
    assert_eq!(
        end(Command::Claim(owner("B"), term(135.0, 30.0))),
        Some((AttemptEnd::LeaseLost, Some(130.0), None)),
        "another claim takes the job: the attempt was lost at its deadline"
    );
    assert_eq!(
        end(Command::Renew(owner("A"), fence(1), term(110.0, 30.0))),
        None,
        "a renewal keeps the attempt under way"
    );
    assert_eq!(
        end(Command::Complete(
            owner("A"),
            fence(9),
            at(110.0),
            JobResult::new("x").unwrap()
        )),
        None,
        "a refused write ends nothing"
    );
}
