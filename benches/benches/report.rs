//! The benchmark report: every store operation on SQLite against a raw rusqlite baseline run in
//! the same process, concurrent callers with and without group commit, and tables of 1k to 1M
//! jobs. Prints one table and writes it to `target/bench-report.md`. `-- --quick` shortens it.

#[path = "support/api.rs"]
mod api;
#[path = "support/guards.rs"]
mod guards;
#[path = "support/harness.rs"]
mod harness;
#[path = "support/overview.rs"]
mod overview;
#[path = "support/pg.rs"]
mod pg;
#[path = "support/raw.rs"]
mod raw;
#[path = "support/statement.rs"]
mod statement;
#[path = "support/workflow.rs"]
mod workflow;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::harness::{
    Caller, Paired, Plan, Row, Run, jobs_row, measure, next_complete_loop, render, summarize,
    timed, to_f64,
};
use crate::raw::{populate, raw_connection, raw_insert, raw_queue_loop, raw_select, raw_write};
use lease_domain::{Fence, Job, JobId, JobResult, LeaseTerm, Owner, Timestamp, decide_claim};
use lease_ports::{LeaseStore, QueueName};
use lease_sqlite::{SqliteLeaseStore, SqliteOptions, Synchronous};
use rusqlite::Connection;
use std::sync::Arc;

fn id(n: u64) -> JobId {
    JobId::new(format!("job-{n:08}")).expect("valid id")
}

fn owner(n: usize) -> Owner {
    Owner::new(format!("worker-{n}")).expect("valid owner")
}

fn term(now: f64, ttl: f64) -> LeaseTerm {
    LeaseTerm::new(now, ttl).expect("valid term")
}

fn single_caller(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    const FRESH: u64 = 1_000;
    // The baseline, on its own copy of the table, and the store, on the same kind of table.
    let raw_path = dir.join("raw.db");
    populate(&raw_path, FRESH, 0);
    let raw = std::sync::Mutex::new(raw_connection(&raw_path));
    let path = dir.join("store.db");
    populate(&path, FRESH, 0);
    let store = SqliteLeaseStore::open(&path).expect("open store");
    let b = store.blocking();
    let me = owner(0);
    let clock = AtomicU64::new(0);
    let tick =
        || f64::from(u32::try_from(clock.fetch_add(1, Ordering::SeqCst)).unwrap_or(u32::MAX));

    let raw_write_op = |_, i| {
        let conn = raw.lock().expect("raw lock");
        let now = tick();
        timed(|| raw_write(&conn, &id(i % FRESH), now))
    };
    let raw_read_op = |_, i| {
        let conn = raw.lock().expect("raw lock");
        timed(|| drop(raw_select(&conn, &id(i % FRESH))))
    };
    let inserted = AtomicU64::new(0);
    let raw_insert_op = |_, _| {
        let conn = raw.lock().expect("raw lock");
        let job = JobId::new(format!(
            "raw-new-{}",
            inserted.fetch_add(1, Ordering::SeqCst)
        ))
        .expect("id");
        timed(|| raw_insert(&conn, &job))
    };
    let mut paired = Paired {
        plan,
        raw_runs: Vec::new(),
    };
    let mut measured = Vec::new();

    measured.push(paired.measure(
        "state",
        &|_, i| timed(|| drop(b.state(&id(i % FRESH)).expect("state"))),
        false,
        "raw read",
        &raw_read_op,
    ));
    measured.push(paired.measure(
        "claim",
        &|_, i| {
            let now = tick();
            timed(|| {
                b.claim(&id(i % FRESH), &me, term(now, 0.5))
                    .expect("claim")
                    .expect("claimable");
            })
        },
        false,
        "raw write",
        &raw_write_op,
    ));

    // Renew one live lease over and over.
    let held = id(0);
    let fence = b
        .claim(&held, &me, term(tick() + 1e6, 1e9))
        .expect("claim")
        .expect("claimable");
    measured.push(paired.measure(
        "renew",
        &|_, _| {
            let t = tick() + 1e6;
            timed(|| {
                b.renew(&held, &me, fence, term(t, 1e9))
                    .expect("renew")
                    .expect("renewed")
            })
        },
        false,
        "raw write",
        &raw_write_op,
    ));

    // complete and release each need a fresh claim first; only the measured call is timed.
    let next_job = AtomicU64::new(1);
    let claim_fresh = || -> (JobId, Fence) {
        let job =
            JobId::new(format!("fresh-{}", next_job.fetch_add(1, Ordering::SeqCst))).expect("id");
        b.enqueue(&job).expect("enqueue");
        let fence = b
            .claim(&job, &me, term(0.0, 1e9))
            .expect("claim")
            .expect("claimable");
        (job, fence)
    };
    let result = JobResult::new("done").expect("result");
    measured.push(paired.measure(
        "complete",
        &|_, _| {
            let (job, fence) = claim_fresh();
            timed(|| {
                b.complete(&job, &me, fence, Timestamp::new(1.0).expect("now"), &result)
                    .expect("complete")
                    .expect("completed")
            })
        },
        true,
        "raw write",
        &raw_write_op,
    ));
    measured.push(paired.measure(
        "release",
        &|_, _| {
            let (job, fence) = claim_fresh();
            timed(|| {
                b.release(&job, &me, fence)
                    .expect("release")
                    .expect("released")
            })
        },
        true,
        "raw write",
        &raw_write_op,
    ));
    // Last, because it grows the table, which the rows column says holds 1,000 jobs.
    let added = AtomicU64::new(0);
    measured.push(paired.measure(
        "enqueue",
        &|_, _| {
            let job =
                JobId::new(format!("new-{}", added.fetch_add(1, Ordering::SeqCst))).expect("id");
            timed(|| assert!(b.enqueue(&job).expect("enqueue")))
        },
        false,
        "raw insert",
        &raw_insert_op,
    ));
    rows.extend(paired.baseline_rows(&[
        (
            "raw write",
            "raw write (BEGIN IMMEDIATE; SELECT; UPDATE x2; COMMIT)",
        ),
        ("raw read", "raw read (prepared SELECT)"),
        (
            "raw insert",
            "raw insert (BEGIN IMMEDIATE; SELECT; INSERT; UPSERT; COMMIT)",
        ),
    ]));
    rows.extend(measured);
}

fn concurrent(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    const FRESH: u64 = 20_000;
    let path = dir.join("concurrent.db");
    populate(&path, FRESH, 0);
    // One clock for every scenario on this table, so no claim meets a lease an earlier one left.
    let clock = AtomicU64::new(0);
    for (label, max_batch) in [
        ("claim, distinct jobs", 128),
        ("claim, distinct jobs, group commit off", 1),
    ] {
        let options = SqliteOptions {
            max_batch,
            pool_size: 64,
            ..SqliteOptions::default()
        };
        let store = SqliteLeaseStore::open_with(&path, options).expect("open store");
        let b = store.blocking();
        let callers: &[usize] = if max_batch == 1 {
            &[8, 64]
        } else {
            &[1, 8, 64]
        };
        for &n in callers {
            let owners: Vec<Owner> = (0..n).map(owner).collect();
            let runs: Vec<Run> = (0..plan.runs)
                .map(|_| {
                    measure(n, plan.window, &|c, i| {
                        // Caller c claims jobs c, c+n, c+2n, ...; now moves past every lease.
                        let job = id((u64::try_from(c).unwrap_or(0)
                            + i * u64::try_from(n).unwrap_or(1))
                            % FRESH);
                        let now = f64::from(
                            u32::try_from(clock.fetch_add(1, Ordering::SeqCst)).unwrap_or(u32::MAX),
                        );
                        timed(|| {
                            drop(
                                b.claim(&job, &owners[c], term(now + 1e7, 0.5))
                                    .expect("claim"),
                            )
                        })
                    })
                })
                .collect();
            rows.push(Row {
                baseline: Some("raw write"),
                ..summarize(label, n, FRESH, &runs, false)
            });
        }
    }
    // Everyone on one job: each claim comes after the previous lease expired, so each one writes.
    let store = SqliteLeaseStore::open_with(
        &path,
        SqliteOptions {
            pool_size: 64,
            ..SqliteOptions::default()
        },
    )
    .expect("open store");
    let b = store.blocking();
    let clock = AtomicU64::new(0);
    let job = id(0);
    for n in [8, 64] {
        let owners: Vec<Owner> = (0..n).map(owner).collect();
        let runs: Vec<Run> = (0..plan.runs)
            .map(|_| {
                measure(n, plan.window, &|c, _| {
                    let now = f64::from(
                        u32::try_from(clock.fetch_add(1, Ordering::SeqCst)).unwrap_or(u32::MAX),
                    );
                    timed(|| {
                        drop(
                            b.claim(&job, &owners[c], term(now + 2e7, 0.5))
                                .expect("claim"),
                        )
                    })
                })
            })
            .collect();
        rows.push(Row {
            baseline: Some("raw write"),
            ..summarize("claim, all on one job", n, FRESH, &runs, false)
        });
    }
}

fn table_sizes(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    for (total, done) in [
        (1_000, 0),
        (100_000, 100_000 - 1_000),
        (plan.big_table, plan.big_table - 1_000),
    ] {
        let path = dir.join(format!("size-{total}.db"));
        populate(&path, 1_000, done);
        let store = SqliteLeaseStore::open(&path).expect("open store");
        let b = store.blocking();
        let me = owner(0);
        let clock = AtomicU64::new(0);
        let runs: Vec<Run> = (0..plan.runs)
            .map(|_| {
                measure(1, plan.window, &|_, i| {
                    let now = f64::from(
                        u32::try_from(clock.fetch_add(1, Ordering::SeqCst)).unwrap_or(u32::MAX),
                    );
                    timed(|| drop(b.claim(&id(i % 1_000), &me, term(now, 0.5)).expect("claim")))
                })
            })
            .collect();
        rows.push(Row {
            baseline: Some("raw write"),
            ..summarize(
                &format!("claim, {done} done jobs in the table"),
                1,
                total,
                &runs,
                false,
            )
        });
        let runs: Vec<Run> = (0..plan.runs)
            .map(|_| {
                measure(1, plan.window, &|_, i| {
                    timed(|| drop(b.state(&id(i % 1_000)).expect("state")))
                })
            })
            .collect();
        rows.push(Row {
            baseline: Some("raw read"),
            ..summarize(
                &format!("state, {done} done jobs in the table"),
                1,
                total,
                &runs,
                false,
            )
        });
    }
}

/// Jobs of the end-to-end queue rows.
fn queue_jobs(plan: &Plan) -> u64 {
    // `LEASE_BENCH_QUEUE_JOBS` sets it (the issue's figures used 30,000).
    if let Some(n) = std::env::var("LEASE_BENCH_QUEUE_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        return n;
    }
    if plan.runs == 1 && plan.window < Duration::from_millis(100) {
        200
    } else {
        5_000
    }
}

/// A store with `jobs` pending jobs in the default queue.
fn queue_store(path: &Path, jobs: u64, synchronous: Synchronous) -> SqliteLeaseStore {
    let _ = std::fs::remove_file(path);
    populate(path, jobs, 0);
    let options = SqliteOptions {
        synchronous,
        pool_size: 64,
        ..SqliteOptions::default()
    };
    SqliteLeaseStore::open_with(path, options).expect("open store")
}

/// W threads, each taking one job with claim_next and then looping
/// complete_and_claim_next (one commit per job) until the queue is empty.
fn blocking_workers(store: &SqliteLeaseStore, workers: usize) -> Run {
    let queue = QueueName::default();
    let start = Instant::now();
    let callers: Vec<Caller> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (b, queue) = (store.blocking(), &queue);
                scope.spawn(move || {
                    let me = owner(w);
                    let mut caller = Caller::default();
                    let now = || 1.0 + start.elapsed().as_secs_f64();
                    let mut lease = b
                        .claim_next(queue, &me, term(now(), 60.0), 1)
                        .expect("claim_next")
                        .pop();
                    while let Some(held) = lease {
                        let began = Instant::now();
                        let (done, next) = b
                            .complete_and_claim_next(
                                &held.job,
                                &me,
                                held.fence,
                                &JobResult::new("r").expect("result"),
                                queue,
                                term(now(), 60.0),
                                1,
                            )
                            .expect("complete and claim");
                        done.expect("completed");
                        lease = next.expect("claimed").pop();
                        caller.latencies.push(began.elapsed());
                    }
                    caller
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    Run {
        callers,
        wall: start.elapsed(),
    }
}

/// The same loop through the async port: W tasks on a multi-threaded runtime.
fn async_workers(store: &SqliteLeaseStore, workers: usize) -> Run {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let start = Instant::now();
    let callers = runtime.block_on(async {
        let store: Arc<dyn LeaseStore> = Arc::new(store.clone());
        let tasks: Vec<_> = (0..workers)
            .map(|w| {
                let store = Arc::clone(&store);
                tokio::spawn(next_complete_loop(
                    store,
                    QueueName::default(),
                    owner(w),
                    start,
                ))
            })
            .collect();
        let mut callers = Vec::new();
        for task in tasks {
            callers.push(task.await.expect("task"));
        }
        callers
    });
    Run {
        callers,
        wall: start.elapsed(),
    }
}

/// The SQLite worker-runtime rows' prefetch: `LEASE_BENCH_PREFETCH`, else `None` (the
/// default of `WorkerConfig`: 20 ms of work held ahead while the jobs are short).
fn bench_prefetch() -> Option<usize> {
    std::env::var("LEASE_BENCH_PREFETCH")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// The worker runtime with `workers` slots and an immediate handler, until the queue is empty.
fn runtime_worker(store: &SqliteLeaseStore, workers: usize) -> Run {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(crate::harness::worker_run(
        Arc::new(store.clone()),
        QueueName::default(),
        workers,
        bench_prefetch(),
    ))
}

/// The CPU time this process has used, user and system, in seconds (`/proc/self/stat`, in
/// ticks of 10 ms; 0 where it cannot be read).
fn cpu_seconds() -> f64 {
    cpu_seconds_of("/proc/self/stat")
}

/// The CPU time, user and system, in seconds, of the process whose `stat` file is at `path`
/// (0 where it cannot be read).
fn cpu_seconds_of(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // utime and stime are fields 14 and 15; `fields` starts at field 3.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|t| t.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// One way to drive the queue loop: the blocking API, the async port, or the worker runtime.
type Drive = fn(&SqliteLeaseStore, usize) -> Run;

/// `LEASE_BENCH_QUEUE_ROW="worker runtime, FULL@64"` runs that queue row alone, without its
/// baseline or the other rows (to profile it).
fn one_row() -> Option<String> {
    std::env::var("LEASE_BENCH_QUEUE_ROW").ok()
}

fn queue(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    let jobs = queue_jobs(plan);
    let raw = raw_queue_loop(&dir.join("raw-queue.db"), jobs);
    let raw_rate =
        to_f64(usize::try_from(jobs).unwrap_or(usize::MAX)) / raw.wall.as_secs_f64().max(1e-9);
    rows.push(jobs_row(
        "raw queue loop (claim-next SQL; COMMIT; complete SQL; COMMIT), jobs/s".to_owned(),
        1,
        jobs,
        &raw,
        None,
    ));
    let path = dir.join("queue.db");
    for (sync, label) in [(Synchronous::Full, "FULL"), (Synchronous::Normal, "NORMAL")] {
        for workers in [1, 4, 16, 64] {
            let paths: [(&str, Drive); 3] = [
                ("blocking", blocking_workers),
                ("async port", async_workers),
                ("worker runtime", runtime_worker),
            ];
            for (path_label, drive) in paths {
                let row = format!("{path_label}, {label}@{workers}");
                if one_row().is_some_and(|only| only != row) {
                    continue;
                }
                let store = queue_store(&path, jobs, sync);
                let cpu = cpu_seconds();
                let run = drive(&store, workers);
                if one_row().is_some() {
                    if let Some(stats) = store.group_commit_stats() {
                        println!(
                            "group commit: {} batches, {:.1} writes per batch, largest {}",
                            stats.batches,
                            stats.writes as f64 / stats.batches.max(1) as f64,
                            stats.largest_batch
                        );
                    }
                }
                let cpu_per_job =
                    (cpu_seconds() - cpu) / to_f64(usize::try_from(jobs).unwrap_or(1));
                if one_row().is_some() {
                    // Read by `cargo xtask bench --peers`.
                    println!(
                        "queue row {row:?}: {:.0} jobs/s, {:.1} µs CPU per job",
                        run.rate(false),
                        cpu_per_job * 1e6
                    );
                }
                rows.push(jobs_row(
                    format!(
                        "claim-next + complete, {path_label}, {label}, jobs/s [CPU {:.0} µs/job]",
                        cpu_per_job * 1e6
                    ),
                    workers,
                    jobs,
                    &run,
                    Some(raw_rate),
                ));
            }
        }
    }
}

/// The rollback-journal fallback (FUSE and unknown file systems) syncs the directory after
/// every commit's unlink (synchronous=EXTRA): its cost against FULL on the same journal, one
/// caller claiming, in alternating runs. Both stores are switched to the rollback journal by
/// a connect hook (this disk is not a FUSE mount).
fn rollback_journal(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    const FRESH: u64 = 1_000;
    let open = |name: &str, synchronous: u8| {
        let path = dir.join(name);
        populate(&path, FRESH, 0);
        let hook = move |conn: &rusqlite::Connection| {
            conn.execute_batch(&format!(
                "PRAGMA journal_mode=DELETE; PRAGMA synchronous={synchronous}"
            ))
        };
        let options = SqliteOptions {
            pool_size: 1,
            on_connect: Some(lease_sqlite::ConnectHook(std::sync::Arc::new(hook))),
            ..SqliteOptions::default()
        };
        SqliteLeaseStore::open_with(&path, options).expect("open store")
    };
    let (extra, full) = (open("journal-extra.db", 3), open("journal-full.db", 2));
    let clock = AtomicU64::new(0);
    let claim = |store: &SqliteLeaseStore, i: u64| {
        let now = f64::from(u32::try_from(clock.fetch_add(1, Ordering::SeqCst)).unwrap_or(0));
        let term = LeaseTerm::new(now, 0.5).expect("term");
        timed(|| {
            drop(
                store
                    .blocking()
                    .claim(&id(i % FRESH), &owner(0), term)
                    .expect("claim"),
            )
        })
    };
    let mut paired = Paired {
        plan,
        raw_runs: Vec::new(),
    };
    rows.push(paired.measure(
        "claim, rollback journal, synchronous=EXTRA (the fallback)",
        &|_, i| claim(&extra, i),
        false,
        "journal FULL",
        &|_, i| claim(&full, i),
    ));
    rows.extend(paired.baseline_rows(&[(
        "journal FULL",
        "claim, rollback journal, synchronous=FULL (before)",
    )]));
}

/// `claim_next` latency with a small table, and with 100k pending and many finished jobs.
fn claim_next_sizes(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    let big_pending = if plan.big_table > 10_000 {
        100_000
    } else {
        2_000
    };
    for (pending, done) in [(1_000, 0), (big_pending, plan.big_table)] {
        let path = dir.join(format!("next-{pending}-{done}.db"));
        populate(&path, pending, done);
        // Every call leases a job whose last lease expired: give them attempts to spare.
        Connection::open(&path)
            .and_then(|c| c.execute("UPDATE jobs_queue SET max_attempts = 1000000000", []))
            .expect("raise max_attempts");
        let store = SqliteLeaseStore::open(&path).expect("open store");
        let runs = claim_next_each_tick(plan, &store);
        rows.push(summarize(
            &format!("claim_next, {pending} pending and {done} done jobs"),
            1,
            pending + done,
            &runs,
            false,
        ));
    }
}

/// The group rules' cost: `claim_next(limit 1)` on a queue of many groups, one of them holding
/// a backlog ahead of the rest in claim order (100,000 groups and a backlog of 1,000,000 in
/// quick and full mode; 200 and 2,000 in the smoke pass), beside the same number of jobs
/// without groups, then the same queue under `--per-group 1` and under `--ordered`, each
/// twice: with the backlog's group free (each call leases its head again: what a claim pays
/// to read and judge a group) and with the backlog's group full, its head held by a lease
/// that outlasts the run (each call must reach past the whole backlog to the other groups);
/// then under a queue's rate and a rate per group, each with 10,000 grants in its window (a
/// claim reads the grants that still count); the backlog's group paused, and throttled by a
/// rate per group whose window its grants fill (each call must reach past the backlog, as
/// when it is full: the ways a group is held that issue 54's group heads are to pass in one
/// step); then `--fair`, with the backlog's group free and, under `--per-group 1`, full.
fn claim_next_groups(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    let (groups, backlog) = if plan.big_table > 10_000 {
        (100_000_u64, 1_000_000_u64)
    } else {
        (200, 2_000)
    };
    let total = groups + backlog;
    let plain = dir.join("groups-none.db");
    populate(&plain, total, 0);
    // Both files are loaded the same way and checkpointed before they are measured.
    Connection::open(&plain)
        .and_then(|c| {
            c.execute("UPDATE jobs_queue SET max_attempts = 1000000000", [])?;
            c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        })
        .expect("raise max_attempts");
    let store = SqliteLeaseStore::open(&plain).expect("open store");
    let runs = claim_next_each_tick(plan, &store);
    rows.push(summarize(
        &format!("claim_next, {total} jobs without groups"),
        1,
        total,
        &runs,
        false,
    ));
    drop(store);
    let grouped = dir.join("groups.db");
    populate(&grouped, total, 0);
    let conn = Connection::open(&grouped).expect("open for loading");
    conn.execute(
        "UPDATE jobs_queue SET max_attempts = 1000000000, \
         grp = CASE WHEN seq <= ?1 THEN 'backlog' ELSE 'g' || seq END",
        [i64::try_from(backlog).unwrap_or(i64::MAX)],
    )
    .expect("put the jobs in groups");
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .expect("checkpoint");
    let store = SqliteLeaseStore::open(&grouped).expect("open store");
    let b = store.blocking();
    // Rates: `(count, period)` of the queue and of each group, and how many grants that
    // still count the log holds before the run (against the queue, or the backlog's group).
    let none = (None::<i64>, None::<f64>);
    let wide = (Some(1_000_000_i64), Some(3_600.0_f64));
    // A rate per group whose window the logged grants fill: the backlog's group has no room.
    let tight = (Some(10_000_i64), Some(3_600.0_f64));
    for (rule, per_group, ordered, full, rate, group_rate, logged, fair, paused) in [
        (
            "no group rule",
            None,
            false,
            false,
            none,
            none,
            0,
            false,
            false,
        ),
        (
            "--per-group 1, its group free",
            Some(1),
            false,
            false,
            none,
            none,
            0,
            false,
            false,
        ),
        (
            "--per-group 1, its group full",
            Some(1),
            false,
            true,
            none,
            none,
            0,
            false,
            false,
        ),
        (
            "--ordered, its group free",
            None,
            true,
            false,
            none,
            none,
            0,
            false,
            false,
        ),
        (
            "--ordered, its group running",
            None,
            true,
            true,
            none,
            none,
            0,
            false,
            false,
        ),
        (
            "--rate 1000000/1h, 10000 grants counting",
            None,
            false,
            false,
            wide,
            none,
            10_000,
            false,
            false,
        ),
        (
            "a paused group",
            None,
            false,
            false,
            none,
            none,
            0,
            false,
            true,
        ),
        (
            "--rate-per-group 1000000/1h, 10000 grants of its group counting",
            None,
            false,
            false,
            none,
            wide,
            10_000,
            false,
            false,
        ),
        (
            "--fair, the backlog's group first in turn",
            None,
            false,
            false,
            none,
            none,
            0,
            true,
            false,
        ),
        (
            "--rate-per-group 10000/1h, its group throttled (10000 grants counting)",
            None,
            false,
            false,
            none,
            tight,
            10_000,
            false,
            false,
        ),
        (
            "--fair --per-group 1, its group full",
            Some(1),
            false,
            true,
            none,
            none,
            0,
            true,
            false,
        ),
    ] {
        // Every lease of the run before ends; the attempts start again.
        conn.execute_batch(
            "UPDATE jobs SET owner = NULL, until = 0 WHERE owner IS NOT NULL; \
             UPDATE jobs_queue SET leased_until = NULL, attempts = 0 \
             WHERE leased_until IS NOT NULL OR attempts > 0; DELETE FROM lease_grants; \
             DELETE FROM lease_grant_counts; DELETE FROM lease_group_pauses",
        )
        .expect("end the leases of the run before");
        conn.execute(
            "INSERT OR REPLACE INTO lease_queues(queue, per_group, ordered, rate_count, \
             rate_period, group_rate_count, group_rate_period, fair) \
             VALUES ('default', ?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            rusqlite::params![
                per_group,
                ordered,
                rate.0,
                rate.1,
                group_rate.0,
                group_rate.1,
                fair
            ],
        )
        .expect("set the group rule");
        let grp = if group_rate.0.is_some() {
            Some("backlog")
        } else {
            None
        };
        for _ in 0..logged {
            conn.execute(
                "INSERT INTO lease_grants(queue, grp, expires) VALUES ('default', ?1, 1e12)",
                [grp],
            )
            .expect("log a grant");
        }
        if logged > 0 {
            conn.execute(
                "INSERT INTO lease_grant_counts(queue, grp, n) VALUES ('default', ?1, ?2)",
                rusqlite::params![grp.unwrap_or(""), logged],
            )
            .expect("count the grants");
        }
        if paused {
            conn.execute(
                "INSERT INTO lease_group_pauses(queue, grp, until) VALUES ('default', 'backlog', NULL)",
                [],
            )
            .expect("pause the backlog's group");
        }
        if full {
            // In claim order (not in turn), so that the lease is the backlog's head.
            conn.execute("UPDATE lease_queues SET fair = 0", [])
                .expect("claim order");
            let held = b
                .claim_next(&QueueName::default(), &owner(1), term(0.0, 1e12), 1)
                .expect("hold the backlog's head");
            assert_eq!(held.len(), 1, "the backlog's head is leased");
            assert_eq!(
                held[0].group.as_ref().map(|g| g.as_str()),
                Some("backlog"),
                "the backlog's group is full"
            );
            conn.execute("UPDATE lease_queues SET fair = ?1", [fair])
                .expect("back in turn");
        }
        let runs = claim_next_each_tick(plan, &store);
        rows.push(summarize(
            &format!("claim_next, {groups} groups and a backlog of {backlog} in one, {rule}"),
            1,
            total,
            &runs,
            false,
        ));
        if fair {
            served_in_one_round(&b, &conn, groups.min(1_000));
        }
    }
}

/// Under `--fair`, after the timed run: `claims` claims of one lease each, held (1,000; as
/// many as there are groups in the smoke pass), and how many of them the backlog's group got
/// (the round: every other group with a due job is served before it is served again).
/// Printed for docs/PERFORMANCE.md, not timed.
fn served_in_one_round(
    b: &lease_ports::blocking::Blocking<SqliteLeaseStore>,
    conn: &Connection,
    claims: u64,
) {
    let mut groups = std::collections::HashMap::<String, u32>::new();
    for n in 0..usize::try_from(claims).unwrap_or(usize::MAX) {
        let leases = b
            .claim_next(&QueueName::default(), &owner(n), term(0.0, 1e12), 1)
            .expect("a fair claim");
        for lease in leases {
            let group = lease
                .group
                .map_or_else(String::new, |g| g.as_str().to_owned());
            *groups.entry(group).or_default() += 1;
        }
    }
    let backlog = groups.get("backlog").copied().unwrap_or(0);
    println!(
        "--fair: {claims} claims served {} groups; the backlog's group {backlog} time(s)",
        groups.len()
    );
    conn.execute_batch("UPDATE lease_queues SET fair = 0")
        .expect("fair off");
}

/// Enqueue throughput: `jobs` new jobs by W threads one job per call, and by one caller with
/// `enqueue_many` in batches of 1,000; FULL, process CPU per job alongside.
/// Workflows' cost (`support/workflow.rs`) on SQLite, and on PostgreSQL when a server answers.
fn workflow_rows(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    let (jobs, children) = if queue_jobs(plan) < 1_000 {
        (200, 500)
    } else {
        (5_000, 10_000)
    };
    workflow::rows(
        "sqlite",
        jobs,
        children,
        &workflow::sqlite(dir),
        &cpu_seconds,
        rows,
    );
    if std::net::TcpStream::connect("127.0.0.1:5432").is_ok() {
        workflow::rows(
            "pg",
            jobs,
            children,
            &workflow::postgres,
            &cpu_seconds,
            rows,
        );
    }
}

fn enqueue_rows(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    let jobs: u64 = if queue_jobs(plan) < 1_000 {
        400
    } else {
        20_000
    };
    let open = |name: &str| {
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        let options = SqliteOptions {
            pool_size: 64,
            ..SqliteOptions::default()
        };
        SqliteLeaseStore::open_with(&path, options).expect("open store")
    };
    for workers in [1_u64, 64] {
        let store = open(&format!("enqueue-{workers}.db"));
        let cpu = cpu_seconds();
        let start = Instant::now();
        let callers: Vec<Caller> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|w| {
                    let b = store.blocking();
                    scope.spawn(move || {
                        let mut caller = Caller::default();
                        for k in (w..jobs).step_by(usize::try_from(workers).unwrap_or(1)) {
                            let id = JobId::new(format!("e-{k}")).expect("id");
                            let began = Instant::now();
                            assert!(b.enqueue(&id).expect("enqueue"), "a new job");
                            caller.latencies.push(began.elapsed());
                        }
                        caller
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("caller"))
                .collect()
        });
        let run = Run {
            callers,
            wall: start.elapsed(),
        };
        let cpu = (cpu_seconds() - cpu) / to_f64(usize::try_from(jobs).unwrap_or(1));
        rows.push(jobs_row(
            format!(
                "enqueue, one job per call, FULL, jobs/s [CPU {:.0} µs/job]",
                cpu * 1e6
            ),
            usize::try_from(workers).unwrap_or(1),
            jobs,
            &run,
            None,
        ));
    }
    let store = open("enqueue-many.db");
    let b = store.blocking();
    let spec = lease_domain::EnqueueSpec::default();
    let all: Vec<(JobId, lease_domain::EnqueueSpec)> = (0..jobs)
        .map(|k| (JobId::new(format!("m-{k}")).expect("id"), spec.clone()))
        .collect();
    let cpu = cpu_seconds();
    let start = Instant::now();
    let mut caller = Caller::default();
    for batch in all.chunks(1_000) {
        let began = Instant::now();
        let inserted = b.enqueue_many(batch).expect("enqueue_many");
        assert!(inserted.iter().all(|&new| new), "new jobs");
        caller.latencies.push(began.elapsed());
    }
    let run = Run {
        callers: vec![caller],
        wall: start.elapsed(),
    };
    let cpu = (cpu_seconds() - cpu) / to_f64(usize::try_from(jobs).unwrap_or(1));
    rows.push(jobs_row(
        format!(
            "enqueue_many, 1,000 jobs per call, FULL, jobs/s [CPU {:.0} µs/job]",
            cpu * 1e6
        ),
        1,
        jobs,
        &run,
        None,
    ));
}

/// Enqueues with and without a W3C trace context, alternated round by round on fresh stores:
/// one job per call (one commit each) and 1,000 per call. The traced row's ratio is to the
/// untraced median of the same run: what keeping a trace context costs an enqueue (a row in
/// `lease_traces` in the same transaction); tracing off is the untraced row, whose path reads
/// and writes no trace at all.
fn trace_rows(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    let (single, batched): (u64, u64) = if queue_jobs(plan) < 1_000 {
        (200, 2_000)
    } else {
        (3_000, 40_000)
    };
    let trace = lease_domain::TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("vendor=1"),
    )
    .expect("a valid traceparent");
    let mut runs: [[Vec<Run>; 2]; 2] = Default::default();
    for round in 0..plan.runs.max(3) {
        for (traced, slot) in [(false, 0), (true, 1)] {
            let spec = lease_domain::EnqueueSpec {
                trace: traced.then(|| trace.clone()),
                ..lease_domain::EnqueueSpec::default()
            };
            let path = dir.join(format!("trace-{round}-{traced}.db"));
            let store = SqliteLeaseStore::open(&path).expect("open store");
            let b = store.blocking();
            let mut caller = Caller::default();
            let start = Instant::now();
            for k in 0..single {
                let id = JobId::new(format!("t-{k}")).expect("id");
                let began = Instant::now();
                assert!(b.enqueue_with(&id, &spec).expect("enqueue"), "a new job");
                caller.latencies.push(began.elapsed());
            }
            runs[0][slot].push(Run {
                callers: vec![caller],
                wall: start.elapsed(),
            });
            let all: Vec<(JobId, lease_domain::EnqueueSpec)> = (0..batched)
                .map(|k| (JobId::new(format!("b-{k}")).expect("id"), spec.clone()))
                .collect();
            let mut caller = Caller::default();
            let start = Instant::now();
            for batch in all.chunks(1_000) {
                let began = Instant::now();
                let inserted = b.enqueue_many(batch).expect("enqueue_many");
                assert!(inserted.iter().all(|&new| new), "new jobs");
                caller.latencies.push(began.elapsed());
            }
            runs[1][slot].push(Run {
                callers: vec![caller],
                wall: start.elapsed(),
            });
            drop(store);
            let _ = std::fs::remove_file(&path);
        }
    }
    for (shape, jobs, label) in [
        (0, single, "enqueue, one job per call, FULL"),
        (1, batched, "enqueue_many, 1,000 jobs per call, FULL"),
    ] {
        let median = |slot: usize| {
            let mut these: Vec<&Run> = runs[shape][slot].iter().collect();
            these.sort_by_key(|r| r.wall);
            let run = these[these.len() / 2];
            Run {
                callers: run.callers.clone(),
                wall: run.wall,
            }
        };
        let (plain, traced) = (median(0), median(1));
        let plain = jobs_row(
            format!("{label}, no trace context, jobs/s"),
            1,
            jobs,
            &plain,
            None,
        );
        let traced = jobs_row(
            format!("{label}, with a traceparent, jobs/s"),
            1,
            jobs,
            &traced,
            None,
        );
        let ratio = traced.ops_per_sec / plain.ops_per_sec.max(1e-9);
        rows.push(plain);
        rows.push(Row {
            ratio: Some(ratio),
            baseline: Some("no trace context"),
            ..traced
        });
    }
}

/// Runs of `claim_next(limit 1)` on the default queue at a clock that ticks once per call;
/// each lease lasts one tick, so the queue never runs dry.
fn claim_next_each_tick(plan: &Plan, store: &SqliteLeaseStore) -> Vec<Run> {
    let (b, me, queue) = (store.blocking(), owner(0), QueueName::default());
    let clock = AtomicU64::new(1);
    (0..plan.runs)
        .map(|_| {
            measure(1, plan.window, &|_, _| {
                let now = f64::from(
                    u32::try_from(clock.fetch_add(1, Ordering::SeqCst)).unwrap_or(u32::MAX),
                );
                timed(|| {
                    let leases = b
                        .claim_next(&queue, &me, term(now, 0.5), 1)
                        .expect("claim_next");
                    assert_eq!(leases.len(), 1, "a due job each call");
                })
            })
        })
        .collect()
}

/// Live leases held ahead of the next due job in claim order: 100,000 (2,000 in the smoke
/// pass) in quick and full mode.
pub(crate) fn live_leases(plan: &Plan) -> u64 {
    if plan.big_table > 10_000 {
        100_000
    } else {
        2_000
    }
}

/// `claim_next(limit 1)` latency with no live lease, and with [`live_leases`] live leases
/// ahead of the next due job in claim order (taken through the store with a lease that
/// outlasts the run); 1,000 pending jobs behind them in both. Each measured lease lasts one
/// tick, so it has ended (and is found again) by the next call.
fn claim_next_live_leases(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    let pending = 1_000;
    for live in [0, live_leases(plan)] {
        let path = dir.join(format!("live-{live}.db"));
        populate(&path, live + pending, 0);
        Connection::open(&path)
            .and_then(|c| c.execute("UPDATE jobs_queue SET max_attempts = 1000000000", []))
            .expect("raise max_attempts");
        let store = SqliteLeaseStore::open(&path).expect("open store");
        let b = store.blocking();
        let (holder, queue) = (owner(1), QueueName::default());
        let mut held = 0;
        while held < live {
            let want = usize::try_from((live - held).min(1_000)).unwrap_or(1_000);
            let taken = b
                .claim_next(&queue, &holder, term(0.0, 1e12), want)
                .expect("take the live leases");
            held += u64::try_from(taken.len()).unwrap_or(0);
        }
        let runs = claim_next_each_tick(plan, &store);
        rows.push(summarize(
            &format!("claim_next, {live} live leases ahead, {pending} pending jobs"),
            1,
            live + pending,
            &runs,
            false,
        ));
    }
}

fn domain(plan: &Plan, rows: &mut Vec<Row>) {
    let me = owner(0);
    let job = Job::new();
    let runs: Vec<Run> = (0..plan.runs)
        .map(|_| {
            measure(1, plan.window, &|_, i| {
                let now = f64::from(u32::try_from(i % 1_000_000).unwrap_or(0));
                timed(|| {
                    drop(std::hint::black_box(decide_claim(
                        Some(&job),
                        &me,
                        term(now, 0.5),
                    )))
                })
            })
        })
        .collect();
    rows.push(summarize("domain decide_claim (no I/O)", 1, 0, &runs, true));
}

fn report_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    target.join("bench-report.md")
}

/// Runs one family of rows, saying on stderr how long it took (where a run's time goes).
fn family<T>(name: &str, run: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = run();
    eprintln!("{name} rows: {:.1} s", started.elapsed().as_secs_f64());
    out
}

fn main() {
    if pg::child() {
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes --bench; `cargo test --benches` runs this as a test: do one tiny pass.
    let quick = args.iter().any(|a| a == "--quick");
    let smoke = !args.iter().any(|a| a == "--bench");
    let plan = match (smoke, quick) {
        (true, _) => Plan {
            window: Duration::from_millis(50),
            runs: 1,
            big_table: 2_000,
            loop_jobs: 200,
        },
        (false, true) => Plan {
            window: Duration::from_millis(750),
            runs: 3,
            big_table: 1_000_000,
            loop_jobs: 3_000,
        },
        (false, false) => Plan {
            window: Duration::from_secs(3),
            runs: 5,
            big_table: 1_000_000,
            loop_jobs: 3_000,
        },
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let mut rows = Vec::new();
    // `-- --pg-only` runs the PostgreSQL rows alone; `-- --queue-only` the SQLite queue rows.
    let queue_only = args.iter().any(|a| a == "--queue-only");
    // `-- --live-only` runs the live-lease claim_next rows alone, on SQLite and PostgreSQL.
    let live_only = args.iter().any(|a| a == "--live-only");
    // `-- --enqueue-only` runs the enqueue rows alone.
    let enqueue_only = args.iter().any(|a| a == "--enqueue-only");
    // `-- --pg-loop-only` runs the PostgreSQL queue-loop rows alone.
    let pg_loop_only = args.iter().any(|a| a == "--pg-loop-only");
    // `-- --api-only` runs the network service's rows alone.
    let api_only = args.iter().any(|a| a == "--api-only");
    // `-- --pg-signal-only` runs the PostgreSQL enqueue-signal row alone.
    let pg_signal_only = args.iter().any(|a| a == "--pg-signal-only");
    // `-- --overview-only` runs the operator page's rows alone.
    let overview_only = args.iter().any(|a| a == "--overview-only");
    // `-- --journal-only` runs the rollback-journal rows alone.
    let journal_only = args.iter().any(|a| a == "--journal-only");
    // `-- --guards-only` runs the guarded-write rows alone (the services this machine runs).
    let guards_only = args.iter().any(|a| a == "--guards-only");
    // `-- --groups-only` runs the group rules' claim_next rows alone, on SQLite and PostgreSQL.
    let groups_only = args.iter().any(|a| a == "--groups-only");
    // `-- --workflow-only` runs the workflow rows alone.
    let workflow_only = args.iter().any(|a| a == "--workflow-only");
    // `-- --statement-only` runs the problem statement's functions' rows alone.
    let statement_only = args.iter().any(|a| a == "--statement-only");
    // `-- --trace-only` runs the rows with and without a trace context alone.
    let trace_only = args.iter().any(|a| a == "--trace-only");
    let mut signal_note = None;
    if trace_only {
        trace_rows(&plan, dir.path(), &mut rows);
    } else if guards_only {
        signal_note = guards::rows(&plan, dir.path(), &mut rows);
    } else if groups_only {
        claim_next_groups(&plan, dir.path(), &mut rows);
        pg::group_rows_only(&plan, &mut rows);
    } else if workflow_only {
        workflow_rows(&plan, dir.path(), &mut rows);
    } else if statement_only {
        statement::rows(&plan, dir.path(), &mut rows);
    } else if journal_only {
        rollback_journal(&plan, dir.path(), &mut rows);
    } else if api_only {
        api::rows(&plan, dir.path(), queue_jobs(&plan), queue_store, &mut rows);
    } else if overview_only {
        overview::rows(&plan, dir.path(), &mut rows);
        signal_note = overview::pg_rows(&plan, &mut rows);
    } else if pg_signal_only {
        signal_note = pg::signal_rows_only(&plan, &mut rows);
    } else if pg_loop_only {
        pg::loop_rows_only(&plan, &mut rows);
    } else if enqueue_only {
        enqueue_rows(&plan, dir.path(), &mut rows);
    } else if live_only {
        claim_next_live_leases(&plan, dir.path(), &mut rows);
        pg::live_rows_only(&plan, &mut rows);
    } else if !args.iter().any(|a| a == "--pg-only") {
        let p = dir.path();
        if !queue_only {
            family("domain", || domain(&plan, &mut rows));
            family("single caller", || single_caller(&plan, p, &mut rows));
            family("concurrent", || concurrent(&plan, p, &mut rows));
            family("table sizes", || table_sizes(&plan, p, &mut rows));
        }
        family("queue", || queue(&plan, p, &mut rows));
        if one_row().is_none() {
            family("api", || {
                api::rows(&plan, p, queue_jobs(&plan), queue_store, &mut rows);
            });
            family("overview", || overview::rows(&plan, p, &mut rows));
            family("enqueue", || enqueue_rows(&plan, p, &mut rows));
            family("trace", || trace_rows(&plan, p, &mut rows));
            family("claim_next sizes", || claim_next_sizes(&plan, p, &mut rows));
            family("live leases", || {
                claim_next_live_leases(&plan, p, &mut rows)
            });
            family("groups", || claim_next_groups(&plan, p, &mut rows));
            family("workflow", || workflow_rows(&plan, p, &mut rows));
            family("statement", || statement::rows(&plan, p, &mut rows));
            family("rollback journal", || rollback_journal(&plan, p, &mut rows));
        }
    }
    let pg_note = if pg_signal_only || overview_only || guards_only {
        signal_note
    } else if groups_only
        || workflow_only
        || statement_only
        || queue_only
        || live_only
        || enqueue_only
        || pg_loop_only
        || api_only
        || overview_only
        || journal_only
        || trace_only
    {
        None
    } else {
        family("postgres", || pg::rows(&plan, &mut rows))
    };
    let mut table = render(&rows);
    if let Some(note) = pg_note {
        table.push_str(&format!("\nPostgreSQL: {note}\n"));
    }
    let header = format!(
        "Bench report ({} mode, {} runs of {:.1} s each, median shown; SQLite {}, synchronous=FULL, WAL), took {:.0} s\n\n",
        if smoke {
            "smoke"
        } else if quick {
            "quick"
        } else {
            "full"
        },
        plan.runs,
        plan.window.as_secs_f64(),
        rusqlite::version(),
        started.elapsed().as_secs_f64()
    );
    println!("{header}{table}");
    if !smoke {
        let path = report_path();
        if let Err(e) = std::fs::write(&path, format!("{header}{table}")) {
            eprintln!("cannot write {}: {e}", path.display());
        } else {
            println!("written to {}", path.display());
        }
    }
}
