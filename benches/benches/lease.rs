//! Criterion benchmarks: the pure lease rules, and single-caller store operations on SQLite.
#![allow(missing_docs)] // criterion_group! and criterion_main! generate undocumented items.

use criterion::{Criterion, criterion_group, criterion_main};
use lease_domain::{Job, JobId, LeaseTerm, Owner, decide_claim};
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

fn sqlite(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteLeaseStore::open(dir.path().join("bench.db")).expect("open store");
    let id = JobId::new("bench").expect("valid id");
    let owner = Owner::new("worker").expect("valid owner");
    store.blocking().enqueue(&id).expect("enqueue");
    let mut now = 0.0;
    c.bench_function("sqlite/claim (one caller, synchronous=FULL)", |b| {
        b.iter(|| {
            // Each claim starts after the previous lease expired, so every claim commits.
            now += 1.0;
            let term = LeaseTerm::new(now, 0.5).expect("valid term");
            store.blocking().claim(&id, &owner, term).expect("claim")
        });
    });
    c.bench_function("sqlite/state (one caller)", |b| {
        b.iter(|| store.blocking().state(&id).expect("state"));
    });
}

criterion_group!(benches, domain, sqlite);
criterion_main!(benches);
