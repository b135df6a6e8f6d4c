//! A scripted stale-worker story whose metrics and audit rows every adapter must produce:
//! claims that take over expired leases, a stale renewal, a completion after its lease
//! expired, a renewal by a worker that is not the owner, and a completion after the job was
//! done.

use std::collections::HashMap;
use std::sync::Arc;

use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use crate::audit::{AuditFilter, AuditRow, AuditTrail};
use crate::observe::{Observed, names};
use crate::{Fence, JobId, JobResult, LeaseStore, LeaseTerm, Owner, Timestamp};

/// Installs a debugging recorder as the process's recorder and returns its snapshotter. Call it
/// once per test binary, before the store is used.
#[must_use]
pub fn capture() -> Snapshotter {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the first recorder of this process");
    snapshotter
}

/// An audit row without its time: job, owner, operation, presented, current, reason, late by.
type Shape = (
    String,
    String,
    String,
    u64,
    Option<u64>,
    String,
    Option<f64>,
);

fn key_of(key: &CompositeKey) -> String {
    let mut labels: Vec<String> = key
        .key()
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.key().name(), labels.join(","))
}

/// Runs the story on `store` (through [`Observed`]) and checks what `snapshotter` counted and
/// what `trail` recorded.
pub async fn check(store: Arc<dyn LeaseStore>, trail: &dyn AuditTrail, snapshotter: &Snapshotter) {
    let (job, fences) = tell_the_story(store).await;
    check_the_metrics(snapshotter);
    check_the_trail(trail, &job, fences).await;
}

/// The fences of the story's three claims: A's, A's again after its restart, and C's.
type StoryFences = (Fence, Fence, Fence);

/// The story, through `Observed`: every refusal it meets, each once.
async fn tell_the_story(store: Arc<dyn LeaseStore>) -> (JobId, StoryFences) {
    let store = Observed::new(store);
    let job = JobId::new("story").unwrap();
    let (a, b, c) = (
        Owner::new("A").unwrap(),
        Owner::new("B").unwrap(),
        Owner::new("C").unwrap(),
    );
    let term = |now: f64, ttl: f64| LeaseTerm::new(now, ttl).unwrap();
    let at = |now: f64| Timestamp::new(now).unwrap();
    assert!(store.enqueue(&job).await.unwrap());
    let fa = store
        .claim(&job, &a, term(100.0, 10.0))
        .await
        .unwrap()
        .unwrap();
    // A's process stalls; its lease runs out at 110; A restarted takes the job again 1 s later.
    let fa2 = store
        .claim(&job, &a, term(111.0, 10.0))
        .await
        .unwrap()
        .unwrap();
    // The stalled A wakes and renews with its old fence: stale.
    assert!(
        store
            .renew(&job, &a, fa, term(111.5, 10.0))
            .await
            .unwrap()
            .is_err()
    );
    // The restarted A stalls past its lease (until 121) and completes 4 s late: expired.
    let late = JobResult::new("A late").unwrap();
    assert!(
        store
            .complete(&job, &a, fa2, at(125.0), &late)
            .await
            .unwrap()
            .is_err()
    );
    // C takes over 4 s after that lease ran out; B, who never held it, tries to renew.
    let fc = store
        .claim(&job, &c, term(125.0, 10.0))
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .renew(&job, &b, fc, term(125.5, 10.0))
            .await
            .unwrap()
            .is_err()
    );
    let done = JobResult::new("C").unwrap();
    store
        .complete(&job, &c, fc, at(126.0), &done)
        .await
        .unwrap()
        .unwrap();
    // The stalled A writes once more, with its first fence: stale (whatever became of the job).
    let a_result = JobResult::new("A").unwrap();
    assert!(
        store
            .complete(&job, &a, fa, at(127.0), &a_result)
            .await
            .unwrap()
            .is_err()
    );
    // C, whose fence is still the current one, completes again: the job is done.
    assert!(
        store
            .complete(&job, &c, fc, at(127.5), &done)
            .await
            .unwrap()
            .is_err()
    );
    (job, (fa, fa2, fc))
}

/// What the story counted and timed, as the metrics recorder saw it.
fn check_the_metrics(snapshotter: &Snapshotter) {
    let snapshot: HashMap<String, DebugValue> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key_of(&key), value))
        .collect();
    let counter = |name: &str| match snapshot.get(name) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        other => panic!("{name} is {other:?}"),
    };
    let histogram = |name: &str| -> Vec<f64> {
        match snapshot.get(name) {
            Some(DebugValue::Histogram(values)) => {
                let mut v: Vec<f64> = values.iter().map(|x| x.into_inner()).collect();
                v.sort_by(f64::total_cmp);
                v
            }
            None => Vec::new(),
            other => panic!("{name} is {other:?}"),
        }
    };
    let refusals = names::REFUSALS;
    assert_eq!(
        counter(&format!("{refusals}{{operation=renew,reason=stale}}")),
        1,
        "{snapshot:?}"
    );
    assert_eq!(
        counter(&format!("{refusals}{{operation=complete,reason=expired}}")),
        1
    );
    assert_eq!(
        counter(&format!("{refusals}{{operation=complete,reason=done}}")),
        1
    );
    assert_eq!(
        counter(&format!("{refusals}{{operation=complete,reason=stale}}")),
        1
    );
    assert_eq!(
        counter(&format!("{refusals}{{operation=renew,reason=not_owner}}")),
        1
    );
    let ops = names::OPERATIONS;
    assert_eq!(
        counter(&format!("{ops}{{operation=claim,outcome=accepted}}")),
        3
    );
    assert_eq!(
        counter(&format!("{ops}{{operation=complete,outcome=refused}}")),
        3
    );
    assert_eq!(
        counter(&format!("{ops}{{operation=complete,outcome=accepted}}")),
        1
    );
    assert_eq!(
        counter(&format!("{ops}{{operation=renew,outcome=refused}}")),
        2
    );
    assert_eq!(
        histogram(&format!("{}{{}}", names::REFUSED_LATE_SECONDS)),
        [4.0]
    );
    assert_eq!(
        histogram(&format!("{}{{}}", names::RECLAIM_DELAY_SECONDS)),
        [1.0, 4.0]
    );
    assert_eq!(
        histogram(&format!("{}{{operation=claim}}", names::OPERATION_SECONDS)).len(),
        3,
        "every claim is timed"
    );
}

/// What the story's refusals left in the audit trail, in order, and the trail's filters.
async fn check_the_trail(trail: &dyn AuditTrail, job: &JobId, (fa, fa2, fc): StoryFences) {
    let rows = trail.refusals(&AuditFilter::default()).await.unwrap();
    let shape: Vec<Shape> = rows
        .iter()
        .map(|r: &AuditRow| {
            (
                r.job.clone(),
                r.owner.clone(),
                r.operation.clone(),
                r.presented_fence,
                r.current_fence,
                r.reason.clone(),
                r.late_by,
            )
        })
        .collect();
    let row = |owner: &str,
               op: &str,
               presented: Fence,
               current: Fence,
               reason: &str,
               late: Option<f64>| {
        (
            "story".to_owned(),
            owner.to_owned(),
            op.to_owned(),
            presented.get(),
            Some(current.get()),
            reason.to_owned(),
            late,
        )
    };
    assert_eq!(
        shape,
        vec![
            row("A", "renew", fa, fa2, "stale", None),
            row("A", "complete", fa2, fa2, "expired", Some(4.0)),
            row("B", "renew", fc, fc, "not_owner", None),
            row("A", "complete", fa, fc, "stale", None),
            row("C", "complete", fc, fc, "done", None),
        ]
    );
    assert!(
        rows.iter().all(|r| r.time > 1e9),
        "times are the store's clock: {rows:?}"
    );
    let only_b = trail
        .refusals(&AuditFilter {
            job: Some(job.clone()),
            since: Some(Timestamp::new(rows[3].time).unwrap()),
            limit: 1,
        })
        .await
        .unwrap();
    assert_eq!(only_b.len(), 1);
    assert_eq!(only_b[0].reason, "done", "limit keeps the newest");
}

/// A stale holder's `complete_and_claim_next` on a store with the audit trail on: its
/// completion is refused and recorded, the job's new holder keeps it, and the claim half still
/// leases the next due job to the stale holder, in the same call.
pub async fn a_refused_completion_is_audited_and_its_claim_goes_on(
    store: Arc<dyn LeaseStore>,
    trail: &dyn AuditTrail,
) {
    let spec = crate::EnqueueSpec {
        queue: crate::QueueName::new("audited").expect("queue"),
        ..crate::EnqueueSpec::default()
    };
    let (job, next) = (
        JobId::new("a-first").expect("id"),
        JobId::new("b-next").expect("id"),
    );
    store.enqueue_with(&job, &spec).await.expect("enqueue");
    store.enqueue_with(&next, &spec).await.expect("enqueue");
    let (a, b) = (
        Owner::new("A").expect("owner"),
        Owner::new("B").expect("owner"),
    );
    let term = |now: f64| LeaseTerm::new(now, 10.0).expect("term");
    let first = store
        .claim_next(&spec.queue, &a, term(0.0), 1)
        .await
        .expect("claim");
    assert_eq!(first[0].job, job);
    let taken = store.claim(&job, &b, term(20.0)).await.expect("claim");
    assert_eq!(taken, Ok(Fence::new(2).expect("fence")));
    let result = JobResult::new("stale").expect("result");
    let (completed, claimed) = store
        .complete_and_claim_next(
            &job,
            &a,
            first[0].fence,
            &result,
            &spec.queue,
            term(21.0),
            1,
        )
        .await
        .expect("the call reaches the store");
    assert!(
        completed.is_err(),
        "a stale completion is refused: {completed:?}"
    );
    let claimed = claimed.expect("the claim half runs");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].job, next);
    let state = store.state(&job).await.expect("state").expect("job exists");
    assert_eq!((state.owner.as_deref(), state.result), (Some("B"), None));
    let rows = trail
        .refusals(&AuditFilter {
            job: Some(job.clone()),
            ..AuditFilter::default()
        })
        .await
        .expect("the trail reads");
    let shapes: Vec<(String, String, u64, Option<u64>, String)> = rows
        .into_iter()
        .map(|r| {
            (
                r.owner,
                r.operation,
                r.presented_fence,
                r.current_fence,
                r.reason,
            )
        })
        .collect();
    assert_eq!(
        shapes,
        [(
            "A".to_owned(),
            "complete".to_owned(),
            1,
            Some(2),
            "stale".to_owned()
        )]
    );
}

/// A holder's write through the network service with the wrong lease token is refused by the
/// store itself (`Command::AsHolder`) and recorded in its audit trail in the refusing
/// transaction, as the key's principal, with the store's clock; a write with no token is
/// refused too, and not recorded (the client's mistake, not a stale holder).
pub async fn a_wrong_lease_token_is_refused_and_audited_by_the_store(
    store: &dyn LeaseStore,
    trail: &dyn AuditTrail,
) {
    use lease_domain::{Command, Credential, Principal, Scope, TokenDigest, WriteRefused};
    let job = JobId::new("outside/ü").expect("valid id");
    let owner = Owner::new("svc-principal/host").expect("valid owner");
    store.enqueue(&job).await.expect("enqueue");
    let term = LeaseTerm::new(1.0e9, 1.0e6)
        .expect("term")
        .with_token(TokenDigest::new([7; 32]));
    let fence = store
        .claim(&job, &owner, term)
        .await
        .expect("claim")
        .expect("claimed");
    let credential = |token: Option<u8>| Credential {
        principal: Principal::new("svc-principal").expect("valid principal"),
        scope: Scope::Worker,
        named: None,
        token: token.map(|b| TokenDigest::new([b; 32])),
    };
    let complete = |token| {
        let credential = credential(token);
        let stand_in = credential.writer();
        let result = JobResult::new("r").expect("result");
        Command::AsHolder(
            credential,
            Box::new(Command::Complete(
                stand_in,
                fence,
                Timestamp::new(1.0e9 + 1.0).expect("now"),
                result,
            )),
        )
    };
    for (token, refused) in [
        (Some(8), WriteRefused::BadToken),
        (None, WriteRefused::TokenMissing),
    ] {
        let applied = store
            .apply(&job, complete(token), None)
            .await
            .expect("apply");
        assert_eq!(applied.outcome, lease_domain::Outcome::Wrote(Err(refused)));
    }
    let rows = trail
        .refusals(&AuditFilter {
            job: Some(job.clone()),
            ..AuditFilter::default()
        })
        .await
        .expect("the trail reads");
    let [row] = rows.as_slice() else {
        panic!("one row for the job (the wrong token, not the missing one), got {rows:?}");
    };
    assert_eq!(
        (
            row.job.as_str(),
            row.owner.as_str(),
            row.operation.as_str(),
            row.presented_fence,
            row.current_fence,
            row.reason.as_str(),
            row.late_by
        ),
        (
            "outside/ü",
            "svc-principal",
            "complete",
            fence.get(),
            Some(fence.get()),
            "bad_token",
            None
        )
    );
    assert!(
        row.time > 1.0e9,
        "the store's clock, not a caller's: {}",
        row.time
    );
    // The right token completes, as the lease's owner.
    let applied = store
        .apply(&job, complete(Some(7)), None)
        .await
        .expect("apply");
    assert_eq!(applied.outcome, lease_domain::Outcome::Wrote(Ok(())));
    let stored = store.record(&job).await.expect("record").expect("the job");
    assert_eq!(stored.job.owner, Some(owner));
}

/// Every kind of holder's write ([`lease_domain::HolderWrite`]), refused for a stale fence, is
/// recorded under its own name, directly and through the network service (a wrong lease
/// token), and the trail reads every row back: nothing a store writes is a name its reader
/// does not know.
pub async fn every_refused_holder_write_is_audited_and_read_back(
    store: &dyn LeaseStore,
    trail: &dyn AuditTrail,
) {
    use lease_domain::{
        Command, Credential, ErrorText, HolderWrite, Principal, ProgressText, Retry, Scope,
        TokenDigest,
    };
    let job = JobId::new("every-holder-write").expect("valid id");
    let owner = Owner::new("svc/host").expect("valid owner");
    store.enqueue(&job).await.expect("enqueue");
    let term = |now: f64| {
        LeaseTerm::new(now, 1.0e6)
            .expect("term")
            .with_token(TokenDigest::new([7; 32]))
    };
    let first = store
        .claim(&job, &owner, term(1.0e9))
        .await
        .expect("claim")
        .expect("claimed");
    // A second claim (the first lease released) makes the first fence stale.
    store
        .release(&job, &owner, first)
        .await
        .expect("release")
        .expect("released");
    let current = store
        .claim(&job, &owner, term(1.0e9 + 1.0))
        .await
        .expect("claim")
        .expect("claimed");
    let now = Timestamp::new(1.0e9 + 2.0).expect("now");
    let write = |kind: HolderWrite, fence: Fence| match kind {
        HolderWrite::Renew => Command::Renew(owner.clone(), fence, term(now.get())),
        HolderWrite::Progress => Command::Progress(
            owner.clone(),
            fence,
            term(now.get()).into(),
            ProgressText::new("1 of 2").expect("text"),
        ),
        HolderWrite::Complete => Command::Complete(
            owner.clone(),
            fence,
            now,
            JobResult::new("r").expect("result"),
        ),
        HolderWrite::Release => Command::Release(owner.clone(), fence),
        HolderWrite::HoldGroup => Command::HoldGroup(owner.clone(), fence, now, now),
        HolderWrite::Checkpoint => Command::Checkpoint(
            owner.clone(),
            fence,
            now,
            lease_domain::Checkpoint {
                name: lease_domain::CheckpointName::new("fetch").expect("name"),
                value: lease_domain::CheckpointValue::new("rows=3").expect("value"),
            },
        ),
        HolderWrite::Fail => Command::Fail(
            owner.clone(),
            fence,
            now,
            ErrorText::new("boom").expect("error"),
            Retry::default(),
        ),
    };
    let credential = Credential {
        principal: Principal::new("svc").expect("valid principal"),
        scope: Scope::Worker,
        named: None,
        token: Some(TokenDigest::new([8; 32])),
    };
    let mut expected = Vec::new();
    for kind in HolderWrite::ALL {
        // Directly with a stale fence, and through the service with the current fence and a
        // wrong token.
        for (command, fence, reason) in [
            (write(kind, first), first, "stale"),
            (
                Command::AsHolder(credential.clone(), Box::new(write(kind, current))),
                current,
                "bad_token",
            ),
        ] {
            let applied = store.apply(&job, command, None).await.expect("apply");
            assert!(
                matches!(
                    applied.outcome,
                    lease_domain::Outcome::Wrote(Err(_)) | lease_domain::Outcome::Failed(Err(_))
                ),
                "{} ({reason}) is refused: {:?}",
                kind.as_str(),
                applied.outcome
            );
            expected.push((kind.as_str().to_owned(), fence.get(), reason.to_owned()));
        }
    }
    let rows = trail
        .refusals(&AuditFilter {
            job: Some(job.clone()),
            ..AuditFilter::default()
        })
        .await
        .expect("the trail reads every row it holds");
    let shapes: Vec<(String, u64, String)> = rows
        .into_iter()
        .map(|r| (r.operation, r.presented_fence, r.reason))
        .collect();
    assert_eq!(shapes, expected);
}
