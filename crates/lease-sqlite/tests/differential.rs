//! Differential test: one random operation sequence (the seed's operations and the queue's:
//! enqueue with fields, claim-next, fail, cancel, retry, purge) against the in-memory reference
//! store and the SQLite store gives identical outcomes, identical stored jobs, and identical
//! `list` and `stats` answers. This also checks the SQL candidate filter of `claim_next` against
//! the domain rule: a job the filter missed, or let through out of order, changes the leases.

use lease_domain::{
    Backoff, EnqueueSpec, ErrorText, Fence, JobId, JobResult, LeaseTerm, Owner, Payload, QueueName,
    Retry, Status, Timestamp,
};
use lease_ports::memory::MemoryLeaseStore;
use lease_ports::{LeaseStore, ListFilter};
use lease_sqlite::SqliteLeaseStore;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
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

fn op() -> impl Strategy<Value = Op> {
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

/// Runs one operation and renders its outcome, refusal reason included, as text.
async fn run(store: &dyn LeaseStore, op: &Op) -> String {
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn memory_and_sqlite_agree_on_every_step(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteLeaseStore::open(dir.path().join("diff.db")).unwrap();
        let memory = MemoryLeaseStore::new();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for (step, op) in ops.iter().enumerate() {
            let expected = runtime.block_on(run(&memory, op));
            let actual = runtime.block_on(run(&sqlite, op));
            prop_assert_eq!(&actual, &expected, "step {} {:?}", step, op);
        }
    }
}
