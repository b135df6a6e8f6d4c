//! A store that another process keeps busy cannot keep a handler running past its lease: the
//! runtime's deadline fires while a renewal is still waiting on SQLite's write lock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_domain::{JobId, Owner, QueueName, Ttl};
use lease_ports::LeaseStore;
use lease_sqlite::SqliteLeaseStore;
use lease_sqlite::testing::WriteLockHolder;
use lease_worker::{CancellationToken, Clock, JobContext, SystemClock, Worker, WorkerConfig};

/// The lease is 1.5 s; another process takes the write lock once the job runs and holds it for
/// 6 s, so every renewal waits (the store's busy timeout is 30 s). The handler must be told to
/// stop by the lease's end (it was told at about `until + 4.9 s` while the renewal held the
/// worker's task), and the runtime reports the lease as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_stuck_behind_another_process_s_write_lock_cannot_keep_a_handler_past_its_lease()
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let store = Arc::new(SqliteLeaseStore::open(&path).unwrap());
    let job = JobId::new("j").unwrap();
    store.enqueue(&job).await.unwrap();

    let told_to_stop = Arc::new(Mutex::new(None::<f64>));
    let (running, mut started) = tokio::sync::mpsc::unbounded_channel();
    let handler = {
        let told_to_stop = Arc::clone(&told_to_stop);
        move |ctx: JobContext| {
            let told_to_stop = Arc::clone(&told_to_stop);
            let running = running.clone();
            async move {
                let _ = running.send(());
                ctx.cancel.cancelled().await;
                *told_to_stop.lock().unwrap() = Some(SystemClock.now());
                Ok::<_, String>("never stored".to_owned())
            }
        }
    };
    let mut config = WorkerConfig::new(
        QueueName::default(),
        Owner::new("w").unwrap(),
        Ttl::new(1.5).unwrap(),
    );
    config.max_jobs = Some(1);
    config.cancel_grace = Duration::from_millis(200);
    let worker =
        tokio::spawn(Worker::new(store.clone(), handler, config).run(CancellationToken::new()));

    started.recv().await.unwrap();
    let until = store.state(&job).await.unwrap().unwrap().until;
    let holder = tokio::task::spawn_blocking(move || {
        let holder = WriteLockHolder::start(&path, Duration::from_secs(6)).unwrap();
        holder.finish()
    });

    let summary = worker.await.unwrap().unwrap();
    assert!(holder.await.unwrap().unwrap(), "the lock holder failed");
    let stopped = told_to_stop
        .lock()
        .unwrap()
        .expect("the handler was never told to stop");
    assert!(
        stopped <= until + 0.5,
        "the handler was told to stop {:.2} s after its lease ended at {until}",
        stopped - until
    );
    assert_eq!(summary.lost, 1, "{summary:?}");
    assert_eq!(summary.completed, 0, "{summary:?}");
}

/// A worker polling an empty queue while another process holds the write lock for 6 s has a
/// claim waiting on it; cancelling the worker ends its run at once, without waiting for the
/// lock (before, the run ended only when the claim returned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_stuck_behind_another_process_s_write_lock_cannot_hold_up_the_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let store = Arc::new(SqliteLeaseStore::open(&path).unwrap());
    let mut config = WorkerConfig::new(
        QueueName::default(),
        Owner::new("w").unwrap(),
        Ttl::new(30.0).unwrap(),
    );
    config.idle_poll = Duration::from_millis(20);
    let holder = tokio::task::spawn_blocking(move || {
        WriteLockHolder::start(&path, Duration::from_secs(6)).unwrap()
    })
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    let handler = |_: JobContext| async { Ok::<_, String>(String::new()) };
    let worker = tokio::spawn(Worker::new(store, handler, config).run(shutdown.clone()));
    // Long enough for the worker's first claim to be waiting on the lock.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = std::time::Instant::now();
    shutdown.cancel();
    let summary = worker.await.unwrap().unwrap();
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "the worker stopped {took:?} after it was told to, with the lock held for 6 s"
    );
    assert_eq!(summary.completed + summary.lost + summary.released, 0);
    drop(holder);
}
