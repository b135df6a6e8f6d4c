//! Property tests: random operation sequences against the rules keep the fence invariants.

use lease_domain::{
    Fence, Job, JobResult, LeaseTerm, Owner, Timestamp, decide_claim, decide_complete,
    decide_release, decide_renew,
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
    ]
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

/// Applies one operation; returns the next job (unchanged when refused) and whether it was accepted.
fn apply(job: &Job, op: &Op) -> (Job, bool) {
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
    };
    match decided {
        Some(next) => (next, true),
        None => (job.clone(), false),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_sequences_keep_the_fence_invariants(ops in prop::collection::vec(op(), 1..60)) {
        let mut job = Job::new();
        // Every (owner, fence) ever granted by a claim.
        let mut granted: Vec<(Owner, Fence)> = Vec::new();
        for op in &ops {
            let before = job.clone();
            let (after, accepted) = apply(&before, op);

            // A refused operation changes nothing.
            if !accepted {
                prop_assert_eq!(&after, &before);
            }
            // Fences never go down; they go up by exactly one, and only on an accepted claim.
            let is_claim = matches!(op, Op::Claim { .. });
            if accepted && is_claim {
                prop_assert_eq!(after.fence.get(), before.fence.get() + 1);
                // A claim is only granted over a lease that is not live.
                if let Op::Claim { now, .. } = op {
                    prop_assert!(!before.is_live_at(Timestamp::new(f64::from(*now)).unwrap()));
                }
                granted.push((after.owner.clone().unwrap(), after.fence));
            } else {
                prop_assert_eq!(after.fence, before.fence);
            }
            // A done job's result never changes, and it stays done.
            if before.done {
                prop_assert!(after.done);
                prop_assert_eq!(&after.result, &before.result);
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
            }
            job = after;
        }
        // Fences are handed out 1, 2, 3, ... and never twice.
        let fences: Vec<u64> = granted.iter().map(|(_, f)| f.get()).collect();
        let expected: Vec<u64> = (1..=u64::try_from(fences.len()).unwrap()).collect();
        prop_assert_eq!(fences, expected);
    }
}
