//! The benchmark report: every store operation on SQLite against a raw rusqlite baseline run in
//! the same process, concurrent callers with and without group commit, and tables of 1k to 1M
//! jobs. Prints one table and writes it to `target/bench-report.md`. `-- --quick` shortens it.

#[path = "support/pg.rs"]
mod pg;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lease_domain::{Fence, Job, JobId, JobResult, LeaseTerm, Owner, Timestamp, decide_claim};
use lease_ports::{LeaseStore, QueueName};
use lease_sqlite::sql::{
    INSERT_JOB as INSERT, SELECT_CANDIDATES, SELECT_JOB as SELECT, UPDATE_JOB as UPDATE,
    UPSERT_QUEUE,
};
use lease_sqlite::{SqliteLeaseStore, SqliteOptions, Synchronous};
use lease_worker::{CancellationToken, JobContext, Worker, WorkerConfig};
use rusqlite::Connection;
use std::sync::Arc;

/// How long each measured run lasts, and how many runs give the median.
struct Plan {
    window: Duration,
    runs: usize,
    big_table: u64,
}

/// The width of the slots in which each caller's progress is counted, in milliseconds.
const SLOT_MS: u128 = 100;

/// One caller's share of a run.
#[derive(Clone, Default)]
struct Caller {
    latencies: Vec<Duration>,
    /// Completed operations in each whole 100 ms slot of the run.
    per_slot: Vec<u64>,
}

/// One measured run: every caller's latencies over the run's wall time.
struct Run {
    callers: Vec<Caller>,
    wall: Duration,
}

impl Run {
    fn ops(&self) -> usize {
        self.callers.iter().map(|c| c.latencies.len()).sum()
    }

    /// Operations per second of measured time: wall time, or for a single caller whose loop also
    /// does untimed set-up work, the summed time of the measured calls.
    fn rate(&self, timed_only: bool) -> f64 {
        let secs = if timed_only {
            self.callers
                .iter()
                .flat_map(|c| &c.latencies)
                .sum::<Duration>()
                .as_secs_f64()
        } else {
            self.wall.as_secs_f64()
        };
        to_f64(self.ops()) / secs.max(1e-9)
    }
}

fn to_f64(n: usize) -> f64 {
    u32::try_from(n).map_or(f64::from(u32::MAX), f64::from)
}

/// Runs `callers` threads for one window; each calls `op(caller, i)`, which returns the time of
/// the measured part of its iteration.
fn measure(callers: usize, window: Duration, op: &(dyn Fn(usize, u64) -> Duration + Sync)) -> Run {
    let start = Instant::now();
    let results: Vec<Caller> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..callers)
            .map(|c| {
                scope.spawn(move || {
                    let mut me = Caller::default();
                    let mut i = 0;
                    while start.elapsed() < window {
                        let took = op(c, i);
                        i += 1;
                        me.latencies.push(took);
                        let slot =
                            usize::try_from(start.elapsed().as_millis() / SLOT_MS).unwrap_or(0);
                        if me.per_slot.len() <= slot {
                            me.per_slot.resize(slot + 1, 0);
                        }
                        me.per_slot[slot] += 1;
                    }
                    me
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    Run {
        callers: results,
        wall: start.elapsed(),
    }
}

fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// A row of the report.
struct Row {
    operation: String,
    callers: usize,
    rows: u64,
    ops_per_sec: f64,
    p50: Duration,
    p99: Duration,
    /// Median wait, worst wait, fewest operations of any caller in any whole 100 ms slot.
    worst_wait: Duration,
    median_wait: Duration,
    min_caller_ops: u64,
    min_ops_in_a_slot: Option<u64>,
    baseline: Option<&'static str>,
    /// The ratio to the baseline measured in alternating runs, when it was.
    ratio: Option<f64>,
}

fn summarize(operation: &str, callers: usize, rows: u64, runs: &[Run], timed_only: bool) -> Row {
    let mut rates: Vec<f64> = runs.iter().map(|r| r.rate(timed_only)).collect();
    rates.sort_by(f64::total_cmp);
    let mut all: Vec<Duration> = runs
        .iter()
        .flat_map(|r| r.callers.iter().flat_map(|c| c.latencies.iter().copied()))
        .collect();
    all.sort();
    let pick = |q: f64| {
        let last = all.len().saturating_sub(1);
        // q in 0..=1 times a length that fits in f64: the index rounds down on purpose.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let i = ((to_f64(last)) * q) as usize;
        all.get(i).copied().unwrap_or_default()
    };
    let min_caller_ops = runs
        .iter()
        .flat_map(|r| {
            r.callers
                .iter()
                .map(|c| u64::try_from(c.latencies.len()).unwrap_or(0))
        })
        .min()
        .unwrap_or(0);
    // Only whole slots count: the last, partial slot of a run is left out.
    let min_ops_in_a_slot = runs
        .iter()
        .flat_map(|r| {
            let whole = usize::try_from(r.wall.as_millis() / SLOT_MS).unwrap_or(0);
            r.callers
                .iter()
                .flat_map(move |c| (0..whole).map(move |s| c.per_slot.get(s).copied().unwrap_or(0)))
        })
        .min();
    Row {
        operation: operation.to_owned(),
        callers,
        rows,
        ops_per_sec: rates[rates.len() / 2],
        p50: pick(0.5),
        p99: pick(0.99),
        worst_wait: all.last().copied().unwrap_or_default(),
        median_wait: pick(0.5),
        min_caller_ops,
        min_ops_in_a_slot,
        baseline: None,
        ratio: None,
    }
}

fn id(n: u64) -> JobId {
    JobId::new(format!("job-{n:08}")).expect("valid id")
}

fn owner(n: usize) -> Owner {
    Owner::new(format!("worker-{n}")).expect("valid owner")
}

fn term(now: f64, ttl: f64) -> LeaseTerm {
    LeaseTerm::new(now, ttl).expect("valid term")
}

/// Creates a lease database with `fresh` new jobs (`job-00000000`...) and `done` finished jobs.
fn populate(path: &Path, fresh: u64, done: u64) {
    drop(SqliteLeaseStore::open(path).expect("create the database"));
    let mut conn = Connection::open(path).expect("open for loading");
    let tx = conn.transaction().expect("begin");
    {
        let mut insert = tx
            .prepare("INSERT INTO jobs(id) VALUES (?1)")
            .expect("prepare");
        for n in 0..fresh {
            insert.execute([id(n).as_str()]).expect("insert fresh");
        }
        let mut finished = tx
            .prepare("INSERT INTO jobs(id, owner, until, fence, result, done) VALUES (?1, 'old', 1, 1, 'r', 1)")
            .expect("prepare");
        for n in 0..done {
            finished
                .execute([format!("done-{n:08}")])
                .expect("insert done");
        }
    }
    tx.commit().expect("commit");
}

/// The baseline: one raw rusqlite connection with the store's settings and the store's SQL.
fn raw_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("open raw");
    conn.busy_timeout(Duration::from_secs(30))
        .expect("busy timeout");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    conn.pragma_update(None, "synchronous", 2).expect("full");
    conn
}

type RawRow = (Option<String>, f64, i64, Option<String>, i64);

fn raw_select(conn: &Connection, job: &JobId) -> Option<RawRow> {
    let mut stmt = conn.prepare_cached(SELECT).expect("prepare select");
    let mut rows = stmt.query([job.as_str()]).expect("query");
    rows.next().expect("step").map(|r| {
        (
            r.get(0).expect("owner"),
            r.get(1).expect("until"),
            r.get(2).expect("fence"),
            r.get(3).expect("result"),
            r.get(4).expect("done"),
        )
    })
}

/// One durable single-job write, as the store's claim runs it: BEGIN IMMEDIATE, SELECT (jobs
/// joined with its queue row), UPDATE jobs, upsert the queue row, COMMIT.
fn raw_write(conn: &Connection, job: &JobId, now: f64) {
    run(conn, "BEGIN IMMEDIATE");
    let (_, _, fence, result, _) = raw_select(conn, job).expect("row");
    conn.prepare_cached(UPDATE)
        .expect("prepare update")
        .execute(rusqlite::params![
            job.as_str(),
            "raw",
            now + 0.5,
            fence + 1,
            result,
            false
        ])
        .expect("update");
    raw_upsert_queue(conn, job, now);
    run(conn, "COMMIT");
}

/// The queue row's half of every store write (default queue fields), as the store runs it.
fn raw_upsert_queue(conn: &Connection, job: &JobId, now: f64) {
    raw_upsert_queue_as(conn, job, now, None);
}

/// The same, with the job's finished status (`done` once completed: it leaves the ready index).
fn raw_upsert_queue_as(conn: &Connection, job: &JobId, now: f64, finished: Option<&str>) {
    conn.prepare_cached(UPSERT_QUEUE)
        .expect("prepare upsert")
        .execute(rusqlite::params![
            job.as_str(),
            "default",
            0,
            None::<f64>,
            0,
            5,
            None::<Vec<u8>>,
            finished,
            None::<&str>,
            None::<i64>,
            now
        ])
        .expect("upsert queue row");
}

/// Runs a statement from the connection's cache, as the store does for BEGIN and COMMIT.
fn run(conn: &Connection, sql: &str) {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .expect(sql);
}

fn raw_insert(conn: &Connection, job: &JobId) {
    run(conn, "BEGIN IMMEDIATE");
    assert!(raw_select(conn, job).is_none());
    conn.prepare_cached(INSERT)
        .expect("prepare insert")
        .execute(rusqlite::params![
            job.as_str(),
            None::<&str>,
            0.0,
            0,
            None::<&str>,
            false
        ])
        .expect("insert");
    raw_upsert_queue(conn, job, 0.0);
    run(conn, "COMMIT");
}

type Op<'a> = &'a (dyn Fn(usize, u64) -> Duration + Sync);

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Measures a store operation and its raw baseline in alternating runs, so drift in the disk's
/// sync latency hits both alike; the ratio is the median of the per-pair ratios.
struct Paired<'p> {
    plan: &'p Plan,
    raw_runs: Vec<(&'static str, Run)>,
}

impl Paired<'_> {
    #[allow(clippy::too_many_arguments)] // The two sides of a pair and how to run and report them.
    fn measure(
        &mut self,
        name: &str,
        op: Op<'_>,
        timed_only: bool,
        raw_name: &'static str,
        raw: Op<'_>,
    ) -> Row {
        let (mut runs, mut ratios) = (Vec::new(), Vec::new());
        for _ in 0..self.plan.runs {
            let baseline = measure(1, self.plan.window, raw);
            let run = measure(1, self.plan.window, op);
            ratios.push(run.rate(timed_only) / baseline.rate(false));
            runs.push(run);
            self.raw_runs.push((raw_name, baseline));
        }
        Row {
            ratio: Some(median(ratios)),
            baseline: Some(raw_name),
            ..summarize(name, 1, 1_000, &runs, timed_only)
        }
    }

    /// One row per baseline, over every run of it.
    fn baseline_rows(self, labels: &[(&'static str, &str)]) -> Vec<Row> {
        labels
            .iter()
            .map(|(raw_name, label)| {
                let runs: Vec<Run> = self
                    .raw_runs
                    .iter()
                    .filter(|(n, _)| n == raw_name)
                    .map(|(_, r)| Run {
                        callers: r.callers.clone(),
                        wall: r.wall,
                    })
                    .collect();
                summarize(label, 1, 1_000, &runs, false)
            })
            .collect()
    }
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

/// The raw baseline of a worker's loop: per job, the store's claim-next SQL in one FULL
/// transaction and the completion's SQL in another (two syncs per job).
fn raw_queue_loop(path: &Path, jobs: u64) -> Run {
    let _ = std::fs::remove_file(path);
    populate(path, jobs, 0);
    let conn = raw_connection(path);
    let mut me = Caller::default();
    let start = Instant::now();
    let mut now = 1.0;
    loop {
        now += 1e-6;
        let began = Instant::now();
        run(&conn, "BEGIN IMMEDIATE");
        let next: Option<String> = conn
            .prepare_cached(SELECT_CANDIDATES)
            .expect("prepare candidates")
            .query_row(rusqlite::params!["default", now, 1], |r| r.get(0))
            .ok();
        let Some(next) = next else {
            run(&conn, "ROLLBACK");
            break;
        };
        let job = JobId::new(next).expect("id");
        let (_, _, fence, _, _) = raw_select(&conn, &job).expect("row");
        conn.prepare_cached(UPDATE)
            .expect("prepare update")
            .execute(rusqlite::params![
                job.as_str(),
                "raw",
                now + 60.0,
                fence + 1,
                None::<&str>,
                false
            ])
            .expect("claim");
        raw_upsert_queue(&conn, &job, now);
        run(&conn, "COMMIT");
        run(&conn, "BEGIN IMMEDIATE");
        drop(raw_select(&conn, &job));
        conn.prepare_cached(UPDATE)
            .expect("prepare update")
            .execute(rusqlite::params![
                job.as_str(),
                "raw",
                now + 60.0,
                fence + 1,
                "done",
                true
            ])
            .expect("complete");
        raw_upsert_queue_as(&conn, &job, now, Some("done"));
        run(&conn, "COMMIT");
        me.latencies.push(began.elapsed());
    }
    Run {
        callers: vec![me],
        wall: start.elapsed(),
    }
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
                tokio::spawn(async move {
                    let (me, queue) = (owner(w), QueueName::default());
                    let mut caller = Caller::default();
                    let now = || 1.0 + start.elapsed().as_secs_f64();
                    let mut lease = store
                        .claim_next(&queue, &me, term(now(), 60.0), 1)
                        .await
                        .expect("claim_next")
                        .pop();
                    while let Some(held) = lease {
                        let began = Instant::now();
                        let result = JobResult::new("r").expect("result");
                        let (done, next) = store
                            .complete_and_claim_next(
                                &held.job,
                                &me,
                                held.fence,
                                &result,
                                &queue,
                                term(now(), 60.0),
                                1,
                            )
                            .await
                            .expect("complete and claim");
                        done.expect("completed");
                        lease = next.expect("claimed").pop();
                        caller.latencies.push(began.elapsed());
                    }
                    caller
                })
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

/// The worker runtime with `workers` slots and an immediate handler, until the queue is empty.
fn runtime_worker(store: &SqliteLeaseStore, workers: usize) -> Run {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let start = Instant::now();
    let mut config = WorkerConfig::new(
        QueueName::default(),
        owner(0),
        lease_domain::Ttl::new(60.0).expect("ttl"),
    );
    config.concurrency = workers;
    config.exit_when_empty = true;
    let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&latencies);
    let worker = Worker::new(
        Arc::new(store.clone()),
        |_job: JobContext| async { Ok::<_, String>("r".to_owned()) },
        config,
    )
    .on_report(move |report| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(Duration::try_from_secs_f64(report.seconds).unwrap_or_default());
        }
    });
    runtime
        .block_on(worker.run(CancellationToken::new()))
        .expect("worker");
    // The runtime reports each job's time from lease to report; all slots count as one caller.
    let latencies = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    Run {
        callers: vec![Caller {
            latencies,
            per_slot: Vec::new(),
        }],
        wall: start.elapsed(),
    }
}

/// One way to drive the queue loop: the blocking API, the async port, or the worker runtime.
type Drive = fn(&SqliteLeaseStore, usize) -> Run;

/// Jobs per second of a run that processed `jobs` jobs.
fn jobs_row(operation: String, callers: usize, jobs: u64, run: &Run, baseline: Option<f64>) -> Row {
    let per_second =
        to_f64(usize::try_from(jobs).unwrap_or(usize::MAX)) / run.wall.as_secs_f64().max(1e-9);
    let base = summarize(&operation, callers, jobs, std::slice::from_ref(run), false);
    Row {
        operation,
        ops_per_sec: per_second,
        ratio: baseline.map(|b| per_second / b),
        baseline: baseline.map(|_| "raw queue loop"),
        ..base
    }
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
                let store = queue_store(&path, jobs, sync);
                let run = drive(&store, workers);
                rows.push(jobs_row(
                    format!("claim-next + complete, {path_label}, {label}, jobs/s"),
                    workers,
                    jobs,
                    &run,
                    Some(raw_rate),
                ));
            }
        }
    }
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
        let b = store.blocking();
        let (me, queue) = (owner(0), QueueName::default());
        let clock = AtomicU64::new(0);
        let runs: Vec<Run> = (0..plan.runs)
            .map(|_| {
                measure(1, plan.window, &|_, _| {
                    // Each lease lasts one tick, so the queue never runs dry.
                    let now = f64::from(
                        u32::try_from(clock.fetch_add(1, Ordering::SeqCst)).unwrap_or(u32::MAX),
                    );
                    timed(|| {
                        drop(
                            b.claim_next(&queue, &me, term(now, 0.5), 1)
                                .expect("claim_next"),
                        )
                    })
                })
            })
            .collect();
        rows.push(summarize(
            &format!("claim_next, {pending} pending and {done} done jobs"),
            1,
            pending + done,
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

fn human(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1.0 {
        format!("{:.0} ns", us * 1000.0)
    } else if us < 1000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

fn render(rows: &[Row]) -> String {
    let base = |name: &str| {
        rows.iter()
            .find(|r| r.operation.starts_with(name))
            .map(|r| r.ops_per_sec)
    };
    let mut out = String::from(
        "| operation | callers | rows | ops/s (median) | p50 | p99 | ratio to raw | per caller: fewest ops, fewest in any 0.1 s, worst wait / median wait |\n|---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        let ratio = r
            .ratio
            .or_else(|| r.baseline.and_then(base).map(|raw| r.ops_per_sec / raw));
        let ratio = match (ratio, r.baseline) {
            (Some(x), Some(name)) => format!("{x:.2}x {name}"),
            _ => "—".to_owned(),
        };
        let fairness = if r.callers > 1 {
            format!(
                "{}, {}, {} / {} ({:.1}x)",
                r.min_caller_ops,
                r.min_ops_in_a_slot
                    .map_or_else(|| "n/a".to_owned(), |n| n.to_string()),
                human(r.worst_wait),
                human(r.median_wait),
                r.worst_wait.as_secs_f64() / r.median_wait.as_secs_f64().max(1e-12)
            )
        } else {
            format!("worst wait {}", human(r.worst_wait))
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} |",
            r.operation,
            r.callers,
            r.rows,
            r.ops_per_sec,
            human(r.p50),
            human(r.p99),
            ratio,
            fairness
        );
    }
    out
}

fn report_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    target.join("bench-report.md")
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
        },
        (false, true) => Plan {
            window: Duration::from_millis(750),
            runs: 3,
            big_table: 1_000_000,
        },
        (false, false) => Plan {
            window: Duration::from_secs(3),
            runs: 5,
            big_table: 1_000_000,
        },
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let started = Instant::now();
    let mut rows = Vec::new();
    // `-- --pg-only` runs the PostgreSQL rows alone.
    if !args.iter().any(|a| a == "--pg-only") {
        domain(&plan, &mut rows);
        single_caller(&plan, dir.path(), &mut rows);
        concurrent(&plan, dir.path(), &mut rows);
        table_sizes(&plan, dir.path(), &mut rows);
        queue(&plan, dir.path(), &mut rows);
        claim_next_sizes(&plan, dir.path(), &mut rows);
    }
    let pg_note = pg::rows(&plan, &mut rows);
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
