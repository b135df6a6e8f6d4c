//! Workflows' cost (issue 38), on SQLite and PostgreSQL, each row beside its plain counterpart
//! in the same run: the queue loop (claim_next, then complete) over independent jobs and over
//! a chain (each job after the one before, released by its completion), one completion that
//! releases a fan-out of children, and a checkpoint beside a progress report (both fenced
//! holder writes). Each store is driven through `LeaseStore`, one caller.

use std::any::Any;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use lease_domain::{
    Checkpoint, CheckpointName, CheckpointValue, EnqueueSpec, JobId, JobResult, LeaseTerm, Owner,
    ProgressText, QueueName, Renewal,
};
use lease_ports::LeaseStore;

use crate::harness::{Caller, Row, Run, jobs_row, to_f64};

/// A fresh store and what keeps it alive (a scratch database).
type Opened = (Arc<dyn LeaseStore>, Box<dyn Any>);

fn id(n: u64) -> JobId {
    JobId::new(format!("job-{n:08}")).expect("valid id")
}

fn run_of(caller: Caller, start: Instant) -> Run {
    Run {
        callers: vec![caller],
        wall: start.elapsed(),
    }
}

/// The rows on the stores `open` makes (each call a fresh, empty one), labelled `store`;
/// `jobs` jobs in the loops, `children` in the fan-out. `cpu` reads the process's CPU seconds.
pub(crate) fn rows(
    store: &str,
    jobs: u64,
    children: u64,
    open: &dyn Fn(&str, &tokio::runtime::Runtime) -> Opened,
    cpu: &dyn Fn() -> f64,
    rows: &mut Vec<Row>,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let w = Owner::new("worker-0").expect("owner");
    let term = LeaseTerm::new(1.0, 600.0).expect("term");
    let result = JobResult::new("r").expect("result");
    let q = QueueName::default();
    for chained in [false, true] {
        let (s, _keep) = open(if chained { "chain" } else { "flat" }, &rt);
        let batch: Vec<(JobId, EnqueueSpec)> = (0..jobs)
            .map(|k| {
                let spec = EnqueueSpec {
                    after: if chained && k > 0 {
                        vec![id(k - 1)]
                    } else {
                        Vec::new()
                    },
                    ..EnqueueSpec::default()
                };
                (id(k), spec)
            })
            .collect();
        rt.block_on(s.enqueue_many(&batch)).expect("enqueue_many");
        let mut caller = Caller::default();
        let used = cpu();
        let start = Instant::now();
        rt.block_on(async {
            for _ in 0..jobs {
                let began = Instant::now();
                let leases = s.claim_next(&q, &w, term, 1).await.expect("claim_next");
                let lease = leases.first().expect("a due job");
                s.complete(&lease.job, &w, lease.fence, term.now(), &result)
                    .await
                    .expect("complete")
                    .expect("completed");
                caller.latencies.push(began.elapsed());
            }
        });
        let run = run_of(caller, start);
        let used = (cpu() - used) / to_f64(usize::try_from(jobs).unwrap_or(1));
        let what = if chained {
            "a chain (each job after the one before)"
        } else {
            "independent jobs"
        };
        rows.push(jobs_row(
            format!(
                "{store} workflow: claim_next + complete, {what}, jobs/s [CPU {:.0} µs/job]",
                used * 1e6
            ),
            1,
            jobs,
            &run,
            None,
        ));
    }
    // One completion that releases a fan-out: children released per second.
    let (s, _keep) = open("fan-out", &rt);
    let parent = JobId::new("parent").expect("id");
    let mut batch = vec![(parent.clone(), EnqueueSpec::default())];
    batch.extend((0..children).map(|k| {
        let spec = EnqueueSpec {
            after: vec![parent.clone()],
            ..EnqueueSpec::default()
        };
        (id(k), spec)
    }));
    rt.block_on(s.enqueue_many(&batch)).expect("enqueue_many");
    let leases = rt
        .block_on(s.claim_next(&q, &w, term, 1))
        .expect("claim_next");
    let lease = leases.first().expect("the parent");
    let start = Instant::now();
    rt.block_on(s.complete(&lease.job, &w, lease.fence, term.now(), &result))
        .expect("complete")
        .expect("completed");
    let wall = start.elapsed();
    let run = Run {
        callers: vec![Caller {
            latencies: vec![wall],
            per_slot: Vec::new(),
        }],
        wall,
    };
    rows.push(jobs_row(
        format!("{store} workflow: one completion releasing {children} children, children/s"),
        1,
        children,
        &run,
        None,
    ));
    // A checkpoint beside a progress report, each a fenced write of the live lease.
    let (s, _keep) = open("steps", &rt);
    rt.block_on(s.enqueue(&id(0))).expect("enqueue");
    let leases = rt
        .block_on(s.claim_next(&q, &w, term, 1))
        .expect("claim_next");
    let lease = leases.first().expect("a lease");
    let writes = jobs.min(2_000);
    for checkpoint in [false, true] {
        let mut caller = Caller::default();
        let start = Instant::now();
        rt.block_on(async {
            for k in 0..writes {
                let began = Instant::now();
                let written = if checkpoint {
                    let step = Checkpoint {
                        name: CheckpointName::new(format!("step-{}", k % 100)).expect("name"),
                        value: CheckpointValue::new(format!("value {k}")).expect("value"),
                    };
                    s.checkpoint(&lease.job, &w, lease.fence, term.now(), &step)
                        .await
                } else {
                    let text = ProgressText::new(format!("{k}")).expect("text");
                    s.progress(
                        &lease.job,
                        &w,
                        lease.fence,
                        Renewal::Keep(term.now()),
                        &text,
                    )
                    .await
                };
                written.expect("write").expect("written");
                caller.latencies.push(began.elapsed());
            }
        });
        let run = run_of(caller, start);
        let what = if checkpoint {
            "checkpoint (100 names, rewritten)"
        } else {
            "progress (the lease keeps its end)"
        };
        rows.push(jobs_row(
            format!("{store} workflow: {what}, writes/s"),
            1,
            writes,
            &run,
            None,
        ));
    }
}

/// A fresh SQLite store in `dir` for each name.
pub(crate) fn sqlite(dir: &Path) -> impl Fn(&str, &tokio::runtime::Runtime) -> Opened + '_ {
    move |name: &str, _: &tokio::runtime::Runtime| {
        let path = dir.join(format!("workflow-{name}.db"));
        let _ = std::fs::remove_file(&path);
        let store = lease_sqlite::SqliteLeaseStore::open(&path).expect("open store");
        (
            Arc::new(store) as Arc<dyn LeaseStore>,
            Box::new(()) as Box<dyn Any>,
        )
    }
}

/// A fresh PostgreSQL store (its own scratch database) for each name.
pub(crate) fn postgres(_name: &str, rt: &tokio::runtime::Runtime) -> Opened {
    let db = lease_postgres::ScratchDatabase::create();
    let store = rt
        .block_on(lease_postgres::PgLeaseStore::init(
            db.url(),
            lease_postgres::PgOptions::default(),
        ))
        .expect("open store");
    (
        Arc::new(store) as Arc<dyn LeaseStore>,
        Box::new(db) as Box<dyn Any>,
    )
}
