//! The measuring harness of the report: runs of an operation by concurrent callers in time
//! slots, medians, paired runs that alternate the store and its baseline, and the table.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_domain::{JobResult, LeaseTerm, Owner, QueueName};
use lease_ports::LeaseStore;

/// How long each measured run lasts, and how many runs give the median.
pub(crate) struct Plan {
    pub(crate) window: Duration,
    pub(crate) runs: usize,
    pub(crate) big_table: u64,
    /// Jobs of each PostgreSQL queue-loop run (`LEASE_BENCH_PG_LOOP_JOBS` overrides it).
    pub(crate) loop_jobs: u64,
}

/// The width of the slots in which each caller's progress is counted, in milliseconds.
pub(crate) const SLOT_MS: u128 = 100;

/// One caller's share of a run.
#[derive(Clone, Default)]
pub(crate) struct Caller {
    pub(crate) latencies: Vec<Duration>,
    /// Completed operations in each whole 100 ms slot of the run.
    pub(crate) per_slot: Vec<u64>,
}

/// One measured run: every caller's latencies over the run's wall time.
pub(crate) struct Run {
    pub(crate) callers: Vec<Caller>,
    pub(crate) wall: Duration,
}

impl Run {
    pub(crate) fn ops(&self) -> usize {
        self.callers.iter().map(|c| c.latencies.len()).sum()
    }

    /// Operations per second of measured time: wall time, or for a single caller whose loop also
    /// does untimed set-up work, the summed time of the measured calls.
    pub(crate) fn rate(&self, timed_only: bool) -> f64 {
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

pub(crate) fn to_f64(n: usize) -> f64 {
    u32::try_from(n).map_or(f64::from(u32::MAX), f64::from)
}

/// Runs `callers` threads for one window; each calls `op(caller, i)`, which returns the time of
/// the measured part of its iteration.
pub(crate) fn measure(
    callers: usize,
    window: Duration,
    op: &(dyn Fn(usize, u64) -> Duration + Sync),
) -> Run {
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

pub(crate) fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// A row of the report.
pub(crate) struct Row {
    pub(crate) operation: String,
    pub(crate) callers: usize,
    pub(crate) rows: u64,
    pub(crate) ops_per_sec: f64,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    /// Median wait, worst wait, fewest operations of any caller in any whole 100 ms slot.
    pub(crate) worst_wait: Duration,
    pub(crate) median_wait: Duration,
    pub(crate) min_caller_ops: u64,
    pub(crate) min_ops_in_a_slot: Option<u64>,
    pub(crate) baseline: Option<&'static str>,
    /// The ratio to the baseline measured in alternating runs, when it was.
    pub(crate) ratio: Option<f64>,
}

pub(crate) fn summarize(
    operation: &str,
    callers: usize,
    rows: u64,
    runs: &[Run],
    timed_only: bool,
) -> Row {
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

type Op<'a> = &'a (dyn Fn(usize, u64) -> Duration + Sync);

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Measures a store operation and its raw baseline in alternating runs, so drift in the disk's
/// sync latency hits both alike; the ratio is the median of the per-pair ratios.
pub(crate) struct Paired<'p> {
    pub(crate) plan: &'p Plan,
    pub(crate) raw_runs: Vec<(&'static str, Run)>,
}

impl Paired<'_> {
    #[allow(clippy::too_many_arguments)] // The two sides of a pair and how to run and report them.
    pub(crate) fn measure(
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
    pub(crate) fn baseline_rows(self, labels: &[(&'static str, &str)]) -> Vec<Row> {
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

/// Jobs per second of a run that processed `jobs` jobs.
pub(crate) fn jobs_row(
    operation: String,
    callers: usize,
    jobs: u64,
    run: &Run,
    baseline: Option<f64>,
) -> Row {
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

pub(crate) fn human(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1.0 {
        format!("{:.0} ns", us * 1000.0)
    } else if us < 1000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

pub(crate) fn render(rows: &[Row]) -> String {
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

/// One worker of the queue loop through the port: `claim_next`, then `complete_and_claim_next`
/// per job (one commit per job) until nothing is due; leases of 60 s from `start`'s clock.
pub(crate) async fn next_complete_loop(
    store: Arc<dyn LeaseStore>,
    queue: QueueName,
    me: Owner,
    start: Instant,
) -> Caller {
    let now = || LeaseTerm::new(1.0 + start.elapsed().as_secs_f64(), 60.0).expect("term");
    let result = JobResult::new("r").expect("result");
    let mut caller = Caller::default();
    let mut lease = store
        .claim_next(&queue, &me, now(), 1)
        .await
        .expect("claim_next")
        .pop();
    while let Some(held) = lease {
        let began = Instant::now();
        let (done, next) = store
            .complete_and_claim_next(&held.job, &me, held.fence, &result, &queue, now(), 1)
            .await
            .expect("complete and claim");
        done.expect("completed");
        lease = next.expect("claimed").pop();
        caller.latencies.push(began.elapsed());
    }
    caller
}

/// The worker runtime (`lease_worker::Worker`) with `workers` slots and a handler that answers
/// at once, on `queue` until it is empty; each job's time from lease to report, all slots as one
/// caller.
pub(crate) async fn worker_run(
    store: Arc<dyn LeaseStore>,
    queue: QueueName,
    workers: usize,
    prefetch: Option<usize>,
) -> Run {
    use lease_worker::{CancellationToken, JobContext, Worker, WorkerConfig};
    let start = Instant::now();
    let owner = Owner::new("worker-0").expect("owner");
    let mut config = WorkerConfig::new(queue, owner, lease_domain::Ttl::new(60.0).expect("ttl"));
    config.concurrency = workers;
    if prefetch.is_some() {
        config.prefetch = prefetch;
    }
    config.exit_when_empty = true;
    let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&latencies);
    let worker = Worker::new(
        store,
        |_job: JobContext| async { Ok::<_, String>("r".to_owned()) },
        config,
    )
    .on_report(move |report| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(Duration::try_from_secs_f64(report.seconds).unwrap_or_default());
        }
    });
    worker.run(CancellationToken::new()).await.expect("worker");
    let latencies = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    Run {
        callers: vec![Caller {
            latencies,
            per_slot: Vec::new(),
        }],
        wall: start.elapsed(),
    }
}
