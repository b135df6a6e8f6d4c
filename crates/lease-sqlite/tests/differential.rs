//! Differential test: one random operation sequence against the in-memory reference store and
//! the SQLite store gives identical outcomes and identical stored jobs.

use lease_domain::{Fence, JobId, JobResult, LeaseTerm, Owner, Timestamp};
use lease_ports::LeaseStore;
use lease_ports::memory::MemoryLeaseStore;
use lease_sqlite::SqliteLeaseStore;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Enqueue(u8),
    Claim(u8, u8, i8, u8),
    Renew(u8, u8, u8, i8, u8),
    Complete(u8, u8, u8, i8, u8),
    Release(u8, u8, u8),
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
    ]
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
    };
    let mut states = Vec::new();
    for j in 0..3 {
        states.push(format!("{:?}", store.state(&job(j)).await));
    }
    format!("{outcome} then {}", states.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

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
