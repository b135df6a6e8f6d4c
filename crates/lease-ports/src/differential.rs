//! The differential harness: random operation sequences (the seed's operations and the
//! queue's) whose every outcome, stored job, `list` and `stats` answer an adapter must render
//! exactly as the in-memory reference store does. Adapters drive it from a `proptest!`.
//!
//! It also checks an adapter's SQL candidate filter of `claim_next` against the domain rule:
//! a job the filter missed, or let through out of order, changes the leases.

use proptest::prelude::*;

use crate::{
    Backoff, EnqueueSpec, ErrorText, Fence, JobId, JobResult, LeaseStore, LeaseTerm, ListFilter,
    Owner, Payload, QueueName, Retry, Status, Timestamp,
};

/// One operation of a random sequence, with small numbers for ids, owners, fences and times.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // Each variant is the port method of the same name.
pub enum Op {
    Enqueue(u8),
    Claim(u8, u8, i8, u8),
    Renew(u8, u8, u8, i8, u8),
    Complete(u8, u8, u8, i8, u8),
    Release(u8, u8, u8),
    EnqueueWith(u8, u8, i8, Option<i8>, u8),
    ClaimNext(u8, u8, i8, u8, u8),
    Fail(u8, u8, u8, i8, bool),
    Cancel(u8, i8),
    Retry(u8, i8),
    Purge(i8, u8),
}

/// Random operations over three jobs, three owners and two queues.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3u8).prop_map(Op::Enqueue),
        (0..3u8, 0..3u8, -5..30i8, 1..8u8).prop_map(|(j, o, n, t)| Op::Claim(j, o, n, t)),
        (0..3u8, 0..3u8, 0..5u8, -5..30i8, 1..8u8)
            .prop_map(|(j, o, f, n, t)| Op::Renew(j, o, f, n, t)),
        (0..3u8, 0..3u8, 0..5u8, -5..30i8, 0..3u8)
            .prop_map(|(j, o, f, n, r)| Op::Complete(j, o, f, n, r)),
        (0..3u8, 0..3u8, 0..5u8).prop_map(|(j, o, f)| Op::Release(j, o, f)),
        (
            0..3u8,
            0..2u8,
            -2..3i8,
            proptest::option::of(-5..30i8),
            0..4u8
        )
            .prop_map(|(j, q, p, r, m)| Op::EnqueueWith(j, q, p, r, m)),
        (0..2u8, 0..3u8, -5..30i8, 1..8u8, 0..4u8)
            .prop_map(|(q, o, n, t, l)| Op::ClaimNext(q, o, n, t, l)),
        (0..3u8, 0..3u8, 0..5u8, -5..30i8, any::<bool>())
            .prop_map(|(j, o, f, n, r)| Op::Fail(j, o, f, n, r)),
        (0..3u8, -5..30i8).prop_map(|(j, n)| Op::Cancel(j, n)),
        (0..3u8, -5..30i8).prop_map(|(j, n)| Op::Retry(j, n)),
        (-5..40i8, 0..4u8).prop_map(|(b, s)| Op::Purge(b, s)),
    ]
}

fn queue(n: u8) -> QueueName {
    QueueName::new(format!("q{n}")).unwrap()
}

fn at(n: i8) -> Timestamp {
    Timestamp::new(f64::from(n)).unwrap()
}

fn job(n: u8) -> JobId {
    JobId::new(format!("job-{n}")).unwrap()
}

fn owner(n: u8) -> Owner {
    Owner::new(format!("w{n}")).unwrap()
}

fn fence(n: u8) -> Fence {
    Fence::new(u64::from(n)).unwrap()
}

/// Runs one operation and renders its outcome, refusal reason included, then every job's
/// record, a `list` and the `stats`, as text: two stores agree iff the texts are equal.
pub async fn run(store: &dyn LeaseStore, op: &Op) -> String {
    let outcome = match *op {
        Op::Enqueue(j) => format!("{:?}", store.enqueue(&job(j)).await),
        Op::Claim(j, o, n, t) => {
            let term = LeaseTerm::new(f64::from(n), f64::from(t)).unwrap();
            format!("{:?}", store.claim(&job(j), &owner(o), term).await)
        }
        Op::Renew(j, o, f, n, t) => {
            let term = LeaseTerm::new(f64::from(n), f64::from(t)).unwrap();
            format!(
                "{:?}",
                store.renew(&job(j), &owner(o), fence(f), term).await
            )
        }
        Op::Complete(j, o, f, n, r) => {
            let now = Timestamp::new(f64::from(n)).unwrap();
            let result = JobResult::new(format!("result-{r}")).unwrap();
            format!(
                "{:?}",
                store
                    .complete(&job(j), &owner(o), fence(f), now, &result)
                    .await
            )
        }
        Op::Release(j, o, f) => format!("{:?}", store.release(&job(j), &owner(o), fence(f)).await),
        Op::EnqueueWith(j, q, priority, run_at, max_attempts) => {
            let spec = EnqueueSpec {
                queue: queue(q),
                priority: i64::from(priority),
                run_at: run_at.map(at),
                max_attempts: Some(u32::from(max_attempts)),
                payload: Some(Payload::new(vec![j, q], 16).unwrap()),
            };
            format!("{:?}", store.enqueue_with(&job(j), &spec).await)
        }
        Op::ClaimNext(q, o, n, t, limit) => {
            let term = LeaseTerm::new(f64::from(n), f64::from(t)).unwrap();
            let leases = store
                .claim_next(&queue(q), &owner(o), term, usize::from(limit))
                .await;
            format!("{leases:?}")
        }
        Op::Fail(j, o, f, n, retry) => {
            let retry = if retry {
                Retry::Backoff(Backoff::new(2.0, 2.0, 20.0, 0.5).unwrap())
            } else {
                Retry::No
            };
            let error = ErrorText::new(format!("e{j}")).unwrap();
            format!(
                "{:?}",
                store
                    .fail(&job(j), &owner(o), fence(f), at(n), &error, retry)
                    .await
            )
        }
        Op::Cancel(j, n) => format!("{:?}", store.cancel(&job(j), at(n)).await),
        Op::Retry(j, n) => format!("{:?}", store.retry(&job(j), at(n)).await),
        Op::Purge(before, which) => {
            let statuses: Vec<Status> = match which {
                0 => Status::ALL.to_vec(),
                1 => vec![Status::Done],
                2 => vec![Status::Dead, Status::Cancelled],
                _ => Vec::new(),
            };
            format!("{:?}", store.purge(at(before), &statuses).await)
        }
    };
    let mut states = Vec::new();
    for j in 0..3 {
        states.push(format!("{:?}", store.record(&job(j)).await));
    }
    let now = at(10);
    let filter = ListFilter {
        queue: None,
        status: Some(Status::Pending),
        limit: 10,
        now,
    };
    let listed = store.list(&filter).await.map(|records| {
        records
            .into_iter()
            .map(|r| r.id.as_str().to_owned())
            .collect::<Vec<_>>()
    });
    let stats = store.stats(now).await;
    format!(
        "{outcome} then {} listed {listed:?} stats {stats:?}",
        states.join(" ")
    )
}
