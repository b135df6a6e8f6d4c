//! Criterion micro-benchmarks: the pure lease rules, and each store operation on SQLite from one caller.
#![allow(missing_docs)] // The criterion macros generate undocumented items.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
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

fn term(now: f64, ttl: f64) -> LeaseTerm {
    LeaseTerm::new(now, ttl).expect("valid term")
}

fn sqlite(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteLeaseStore::open(dir.path().join("bench.db")).expect("open store");
    let b = store.blocking();
    let id = JobId::new("bench").expect("valid id");
    let owner = Owner::new("worker").expect("valid owner");
    b.enqueue(&id).expect("enqueue");
    let mut group = c.benchmark_group("sqlite (one caller, synchronous=FULL)");
    let mut n = 0_u64;
    let mut fresh = || {
        n += 1;
        JobId::new(format!("new-{n}")).expect("valid id")
    };
    group.bench_function("enqueue", |bench| {
        bench.iter(|| b.enqueue(&fresh()).expect("enqueue"))
    });
    group.bench_function("state", |bench| bench.iter(|| b.state(&id).expect("state")));
    let mut now = 0.0;
    group.bench_function("claim", |bench| {
        bench.iter(|| {
            // Each claim starts after the previous lease expired, so every claim commits.
            now += 1.0;
            b.claim(&id, &owner, term(now, 0.5)).expect("claim")
        });
    });
    now += 1.0;
    let fence = b
        .claim(&id, &owner, term(now, 1e12))
        .expect("claim")
        .expect("claimable");
    group.bench_function("renew", |bench| {
        bench.iter(|| {
            now += 1.0;
            b.renew(&id, &owner, fence, term(now, 1e12)).expect("renew")
        });
    });
    let mut claimed = || {
        let job = fresh();
        b.enqueue(&job).expect("enqueue");
        let f = b
            .claim(&job, &owner, term(0.0, 1e9))
            .expect("claim")
            .expect("claimable");
        (job, f)
    };
    let result = lease_domain::JobResult::new("done").expect("valid result");
    let at = lease_domain::Timestamp::new(1.0).expect("finite");
    group.bench_function("complete", |bench| {
        bench.iter_batched(
            &mut claimed,
            |(job, f)| b.complete(&job, &owner, f, at, &result).expect("complete"),
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

criterion_group!(benches, domain, sqlite);
criterion_main!(benches);
