//! Property tests: random operation sequences against the rules keep the fence invariants.

use lease_domain::{
    Backoff, Command, Ended, EnqueueSpec, ErrorText, Fence, Job, JobId, JobResult, LeaseTerm,
    NextDecision, Owner, ProgressText, Retry, Timestamp, decide_cancel, decide_claim,
    decide_claim_next, decide_complete, decide_fail, decide_give_back, decide_progress,
    decide_release, decide_renew, decide_retry,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Claim {
        owner: u8,
        now: i8,
        ttl: u8,
    },
    Renew {
        owner: u8,
        fence: u8,
        now: i8,
        ttl: u8,
    },
    Complete {
        owner: u8,
        fence: u8,
        now: i8,
        result: u8,
    },
    Release {
        owner: u8,
        fence: u8,
    },
    GiveBack {
        owner: u8,
        fence: u8,
    },
    ClaimNext {
        owner: u8,
        now: i8,
        ttl: u8,
    },
    Fail {
        owner: u8,
        fence: u8,
        now: i8,
        retry: bool,
    },
    Cancel {
        now: i8,
    },
    Retry {
        now: i8,
    },
    Progress {
        owner: u8,
        fence: u8,
        now: i8,
        ttl: u8,
    },
    /// An enqueue of the job's id; with `replace`, one that runs a finished job again.
    Enqueue {
        replace: bool,
        max_attempts: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    // Small ranges so owners, fences and times collide often; times may go backwards.
    prop_oneof![
        (0..3u8, -5..40i8, 1..10u8).prop_map(|(owner, now, ttl)| Op::Claim { owner, now, ttl }),
        (0..3u8, 0..6u8, -5..40i8, 1..10u8).prop_map(|(owner, fence, now, ttl)| Op::Renew {
            owner,
            fence,
            now,
            ttl
        }),
        (0..3u8, 0..6u8, -5..40i8, 0..4u8).prop_map(|(owner, fence, now, result)| Op::Complete {
            owner,
            fence,
            now,
            result
        }),
        (0..3u8, 0..6u8).prop_map(|(owner, fence)| Op::Release { owner, fence }),
        (0..3u8, 0..6u8).prop_map(|(owner, fence)| Op::GiveBack { owner, fence }),
        (0..3u8, -5..40i8, 1..10u8).prop_map(|(owner, now, ttl)| Op::ClaimNext { owner, now, ttl }),
        (0..3u8, 0..6u8, -5..40i8, any::<bool>()).prop_map(|(owner, fence, now, retry)| Op::Fail {
            owner,
            fence,
            now,
            retry
        }),
        (-5..40i8).prop_map(|now| Op::Cancel { now }),
        (-5..40i8).prop_map(|now| Op::Retry { now }),
        (0..3u8, 0..6u8, -5..40i8, 1..10u8).prop_map(|(owner, fence, now, ttl)| Op::Progress {
            owner,
            fence,
            now,
            ttl
        }),
        (any::<bool>(), 0..4u8).prop_map(|(replace, max_attempts)| Op::Enqueue {
            replace,
            max_attempts
        }),
    ]
}

/// A job as `enqueue` may make it: sometimes scheduled, with 0 to 3 attempts allowed.
fn enqueued() -> impl Strategy<Value = Job> {
    (proptest::option::of(-5..30i8), 0..4u32).prop_map(|(run_at, max_attempts)| {
        Job::enqueued(
            &EnqueueSpec {
                run_at: run_at.map(|t| Timestamp::new(f64::from(t)).unwrap()),
                max_attempts: Some(max_attempts),
                ..EnqueueSpec::default()
            },
            None,
        )
    })
}

fn owner(n: u8) -> Owner {
    Owner::new(format!("w{n}")).unwrap()
}

fn fence(n: u8) -> Fence {
    Fence::new(u64::from(n)).unwrap()
}

fn term(now: i8, ttl: u8) -> LeaseTerm {
    LeaseTerm::new(f64::from(now), f64::from(ttl)).unwrap()
}

fn at(now: i8) -> Timestamp {
    Timestamp::new(f64::from(now)).unwrap()
}

/// Applies one operation; returns the next job (unchanged when refused) and whether it was accepted.
fn apply(job: &Job, op: &Op) -> (Job, bool) {
    let id = JobId::new("j").unwrap();
    let decided = match *op {
        Op::Claim { owner: o, now, ttl } => decide_claim(Some(job), &owner(o), term(now, ttl)).ok(),
        Op::Renew {
            owner: o,
            fence: f,
            now,
            ttl,
        } => decide_renew(Some(job), &owner(o), fence(f), term(now, ttl)).ok(),
        Op::Complete {
            owner: o,
            fence: f,
            now,
            result,
        } => {
            let result = JobResult::new(format!("r{result}")).unwrap();
            decide_complete(
                Some(job),
                &owner(o),
                fence(f),
                Timestamp::new(f64::from(now)).unwrap(),
                &result,
            )
            .ok()
        }
        Op::Release { owner: o, fence: f } => decide_release(Some(job), &owner(o), fence(f)).ok(),
        Op::GiveBack { owner: o, fence: f } => {
            let given = decide_give_back(Some(job), &owner(o), fence(f)).ok();
            // A give-back is a release that hands back one counted attempt, nothing else.
            let released = decide_release(Some(job), &owner(o), fence(f)).ok();
            assert_eq!(
                given.as_ref().map(|g| (g.attempts + 1).min(job.attempts)),
                released.as_ref().map(|r| r.attempts)
            );
            given
        }
        Op::ClaimNext { owner: o, now, ttl } => {
            match decide_claim_next(job, &owner(o), term(now, ttl)) {
                NextDecision::Lease(next) | NextDecision::Bury(next) => Some(next),
                NextDecision::Skip => None,
            }
        }
        Op::Fail {
            owner: o,
            fence: f,
            now,
            retry,
        } => {
            let retry = if retry {
                Retry::Backoff(Backoff::new(1.0, 2.0, 8.0, 0.5).unwrap())
            } else {
                Retry::No
            };
            let error = ErrorText::new("e").unwrap();
            decide_fail(&id, Some(job), &owner(o), fence(f), at(now), &error, retry)
                .ok()
                .map(|(next, _)| next)
        }
        Op::Cancel { now } => decide_cancel(Some(job), at(now)).ok(),
        Op::Retry { now } => decide_retry(Some(job), at(now)).ok(),
        Op::Progress {
            owner: o,
            fence: f,
            now,
            ttl,
        } => {
            let text = ProgressText::new(format!("{now}%")).unwrap();
            decide_progress(Some(job), &owner(o), fence(f), term(now, ttl).into(), &text).ok()
        }
        Op::Enqueue {
            replace,
            max_attempts,
        } => {
            let spec = EnqueueSpec {
                max_attempts: Some(u32::from(max_attempts)),
                replace_finished: replace,
                ..EnqueueSpec::default()
            };
            Command::EnqueueWith(spec).decide(&id, Some(job), None).0
        }
    };
    match decided {
        Some(next) => (next, true),
        None => (job.clone(), false),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_sequences_keep_the_fence_invariants(
        start in enqueued(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut job = start;
        // Every (owner, fence) ever granted by a claim.
        let mut granted: Vec<(Owner, Fence)> = Vec::new();
        for op in &ops {
            let before = job.clone();
            let (after, accepted) = apply(&before, op);

            // A refused operation changes nothing.
            if !accepted {
                prop_assert_eq!(&after, &before);
            }
            // Fences never go down; they go up by exactly one, and only on an accepted claim
            // (by id, or a lease of claim_next).
            let claimed_at = match op {
                Op::Claim { now, .. } | Op::ClaimNext { now, .. } => Some(at(*now)),
                _ => None,
            };
            let leased = accepted && claimed_at.is_some() && after.fence != before.fence;
            if let (true, Some(now)) = (leased, claimed_at) {
                prop_assert_eq!(after.fence.get(), before.fence.get() + 1);
                // A lease is only granted over a lease that is not live, to a job that is due,
                // neither done nor dead nor cancelled.
                prop_assert!(!before.is_live_at(now));
                prop_assert!(before.is_due_at(now), "leased before run_at");
                prop_assert!(!before.done && before.ended.is_none());
                granted.push((after.owner.clone().unwrap(), after.fence));
            } else {
                prop_assert_eq!(after.fence, before.fence);
            }
            // claim_next never leases a job more than its max_attempts (0 counts as 1) times.
            prop_assert!(after.attempts <= after.max_attempts.max(1));
            if matches!(op, Op::Claim { .. }) {
                prop_assert_eq!(after.attempts, before.attempts, "claim by id counted an attempt");
            }
            // done = 1 if and only if the job completed, and never together with dead/cancelled.
            prop_assert!(!(after.done && after.ended.is_some()));
            if after.done && !before.done {
                let completed = matches!(op, Op::Complete { .. });
                prop_assert!(completed, "done without a completion");
            }
            if before.ended == Some(Ended::Cancelled) && after.ended == Some(Ended::Cancelled) {
                prop_assert_eq!(after.fence, before.fence, "a cancelled job was leased");
            }
            // A done job's result never changes, and it stays done, unless it is run again:
            // then it keeps its result (until the new run completes) and its fence.
            let rerun = matches!(op, Op::Enqueue { replace: true, .. }) && accepted;
            if before.done && !rerun {
                prop_assert!(after.done);
                prop_assert_eq!(&after.result, &before.result);
            }
            // Only a finished job is run again, and it comes back pending from its first
            // attempt with its fence and last result; an enqueue changes nothing else.
            if matches!(op, Op::Enqueue { .. }) {
                prop_assert_eq!(accepted, rerun);
                if rerun {
                    prop_assert!(before.finished().is_some(), "an unfinished job was run again");
                    prop_assert_eq!(after.fence, before.fence);
                    prop_assert_eq!(&after.result, &before.result);
                    prop_assert_eq!(after.result_fence, before.result_fence);
                    prop_assert_eq!(after.attempts, 0);
                    prop_assert!(after.owner.is_none() && !after.done && after.ended.is_none());
                }
            }
            // Progress is the current lease's: a new lease starts without any.
            if leased {
                prop_assert_eq!(&after.progress, &None);
            }
            // At most one holder: every fence but the current one is refused for every write,
            // whatever time the stale holder believes it is.
            for (stale_owner, stale_fence) in granted.iter().filter(|(_, f)| *f != after.fence) {
                let result = JobResult::new("stale").unwrap();
                for now in [-100.0, 0.0, 1e9] {
                    let now = Timestamp::new(now).unwrap();
                    prop_assert!(decide_complete(Some(&after), stale_owner, *stale_fence, now, &result).is_err());
                    prop_assert!(decide_renew(Some(&after), stale_owner, *stale_fence, LeaseTerm::from_parts(now, lease_domain::Ttl::new(1.0).unwrap()).unwrap()).is_err());
                }
                prop_assert!(decide_release(Some(&after), stale_owner, *stale_fence).is_err());
                let text = ProgressText::new("stale").unwrap();
                let stale_term = LeaseTerm::new(0.0, 1.0).unwrap();
                prop_assert!(decide_progress(Some(&after), stale_owner, *stale_fence, stale_term.into(), &text).is_err());
                let error = ErrorText::new("stale").unwrap();
                let id = JobId::new("j").unwrap();
                prop_assert!(decide_fail(&id, Some(&after), stale_owner, *stale_fence, Timestamp::new(0.0).unwrap(), &error, Retry::No).is_err());
            }
            // The ready set never hides a candidate: at any time a job can be claimed, it is
            // either filed with the unheld jobs or its lease's end has passed.
            for now in -10..50i8 {
                let now = at(now);
                if after.is_claim_candidate(now) {
                    prop_assert!(after.leased_until().is_none_or(|t| t <= now), "{after:?} hidden at {now}");
                }
            }
            // A new lease takes the job out of claim order until it ends; a release, a
            // completion or a failure puts it back (or finishes it).
            if leased {
                prop_assert_eq!(after.leased_until(), Some(after.until));
            }
            let let_go = matches!(
                op,
                Op::Release { .. } | Op::GiveBack { .. } | Op::Complete { .. } | Op::Fail { .. }
            );
            if accepted && let_go {
                prop_assert_eq!(after.leased_until(), None);
            }
            job = after;
        }
        // Fences are handed out 1, 2, 3, ... and never twice.
        let fences: Vec<u64> = granted.iter().map(|(_, f)| f.get()).collect();
        let expected: Vec<u64> = (1..=u64::try_from(fences.len()).unwrap()).collect();
        prop_assert_eq!(fences, expected);
    }
}
