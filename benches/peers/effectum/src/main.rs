//! effectum's worker drains a queue of jobs that answer at once: `effectum-peer JOBS WORKERS
//! [wal]` enqueues JOBS jobs (untimed), then times one `Worker` with WORKERS slots until every
//! job has run, and prints one line: `effectum jobs=N workers=W jobs_per_s=X cpu_us_per_job=Y
//! journal_mode=M synchronous=normal` (the process's CPU over the timed part; the journal mode
//! as the file keeps it; effectum sets `synchronous=normal` on its writer).
//!
//! effectum 0.7 asks SQLite for the write-ahead log with `PRAGMA journal = wal`, which is not a
//! pragma (SQLite ignores it), so as published it runs on the rollback journal. With `wal` the
//! file is made in WAL mode before effectum opens it (the mode is kept in the file), which is
//! what effectum meant: WAL with `synchronous=normal`, no sync at a commit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use effectum::{Job, JobRunner, Queue, RunningJob, Worker};
use tokio::sync::Notify;

#[derive(Debug, Clone)]
struct Counter {
    done: Arc<AtomicUsize>,
    target: usize,
    finished: Arc<Notify>,
}

async fn answer(_job: RunningJob, counter: Counter) -> Result<(), String> {
    if counter.done.fetch_add(1, Ordering::SeqCst) + 1 == counter.target {
        counter.finished.notify_one();
    }
    Ok(())
}

/// The process's user and system CPU time in seconds (`/proc/self/stat`, ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|t| t.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |a: &String| a.parse::<usize>().expect("JOBS and WORKERS are numbers");
    let (jobs, workers, wal) = match &args[..] {
        [jobs, workers] => (number(jobs), number(workers), false),
        [jobs, workers, mode] if mode == "wal" => (number(jobs), number(workers), true),
        _ => panic!("usage: effectum-peer JOBS WORKERS [wal]"),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("effectum.db");
    if wal {
        let conn = rusqlite::Connection::open(&path).expect("create");
        let mode: String = conn
            .query_row("PRAGMA journal_mode = wal", [], |r| r.get(0))
            .expect("journal_mode");
        assert_eq!(mode, "wal");
    }
    let queue = Queue::new(&path).await.expect("queue");
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
        let batch = chunk
            .iter()
            .map(|_| Job::builder("answer").build())
            .collect();
        queue.add_jobs(batch).await.expect("add jobs");
    }
    let counter = Counter {
        done: Arc::new(AtomicUsize::new(0)),
        target: jobs,
        finished: Arc::new(Notify::new()),
    };
    let runner = JobRunner::builder("answer", answer).build();
    let cpu = cpu_seconds();
    let start = Instant::now();
    let worker = Worker::builder(&queue, counter.clone())
        .max_concurrency(u16::try_from(workers).expect("at most 65535 workers"))
        .jobs([runner])
        .build()
        .await
        .expect("worker");
    counter.finished.notified().await;
    let wall = start.elapsed();
    let cpu = cpu_seconds() - cpu;
    worker
        .unregister(Some(Duration::from_secs(5)))
        .await
        .expect("unregister");
    queue.close(Duration::from_secs(5)).await.expect("close");
    let conn = rusqlite::Connection::open(&path).expect("reopen");
    let journal: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode");
    println!(
        "effectum jobs={jobs} workers={workers} jobs_per_s={:.0} cpu_us_per_job={:.1} \
         journal_mode={journal} synchronous=normal",
        jobs as f64 / wall.as_secs_f64(),
        cpu * 1e6 / jobs as f64
    );
}
