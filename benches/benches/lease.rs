//! Criterion benchmarks: the pure lease rules, and single-caller store operations on SQLite.
#![allow(missing_docs)] // criterion_group! and criterion_main! generate undocumented items.

use criterion::{Criterion, criterion_group, criterion_main};
use lease_domain::{Job, JobId, LeaseTerm, Owner, decide_claim};
use lease_ports::LeaseStore;
use lease_sqlite::SqliteLeaseStore;

fn domain(c: &mut Criterion) {
    let owner = Owner::new("worker").expect("valid owner");
    let job = Job::new();
    let mut now = 0.0;
    c.bench_function("domain/decide_claim", |b| {
        b.iter(|| {
            now += 1.0;
            decide_claim(
                Some(&job),
                &owner,
                LeaseTerm::new(now, 0.5).expect("valid term"),
            )
        });
    });
}

/// Polls a future that never waits: the SQLite store runs inline outside a Tokio runtime.
fn ready<T>(future: impl std::future::Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => unreachable!("the SQLite store completes inline"),
    }
}

fn sqlite(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteLeaseStore::open(dir.path().join("bench.db")).expect("open store");
    let id = JobId::new("bench").expect("valid id");
    let owner = Owner::new("worker").expect("valid owner");
    ready(store.enqueue(&id)).expect("enqueue");
    let mut now = 0.0;
    c.bench_function("sqlite/claim (one caller, synchronous=FULL)", |b| {
        b.iter(|| {
            // Each claim starts after the previous lease expired, so every claim commits.
            now += 1.0;
            let term = LeaseTerm::new(now, 0.5).expect("valid term");
            ready(store.claim(&id, &owner, term)).expect("claim")
        });
    });
    c.bench_function("sqlite/state (one caller)", |b| {
        b.iter(|| ready(store.state(&id)).expect("state"));
    });
}

criterion_group!(benches, domain, sqlite);
criterion_main!(benches);
