//! The server restarted in the middle of a load (`pg_ctlcluster ... restart`, as DEVELOPERS.md
//! gives it): callers see `Unavailable` or `Indeterminate`, never a wrong answer; no
//! acknowledged fence is handed out twice, no acknowledged result is lost, and the store
//! serves again once the server is back. It restarts the machine's PostgreSQL, so it lives in
//! a test binary of its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lease_domain::{JobId, JobResult, LeaseTerm, Owner, QueueName, Timestamp};
use lease_ports::{LeaseStore, StoreError};
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

/// One restart at a time: the tests of this binary run on threads of one process.
static ONE_RESTART: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn restart_server() {
    let version = std::fs::read_dir("/etc/postgresql")
        .expect("/etc/postgresql lists the cluster versions")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .max()
        .expect("one cluster version");
    let status = std::process::Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, "main", "restart"])
        .status()
        .expect("pg_ctlcluster runs");
    assert!(status.success(), "pg_ctlcluster restart failed: {status}");
}

#[derive(Default)]
struct Seen {
    /// (job, fence) of every acknowledged lease.
    leases: BTreeMap<(String, u64), usize>,
    /// job -> acknowledged result.
    results: HashMap<String, String>,
    unavailable: usize,
    indeterminate: usize,
    other: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_restart_under_load_loses_no_acknowledged_write_and_the_store_comes_back() {
    let _one = ONE_RESTART.lock().await;
    let db = ScratchDatabase::create();
    let options = PgOptions {
        pool_size: 8,
        wait_timeout: Duration::from_secs(5),
        ..PgOptions::default()
    };
    let store = Arc::new(PgLeaseStore::init(db.url(), options).await.unwrap());
    // More jobs than the load can finish, inserted in one statement (the defaults are a
    // pending job's).
    db.execute("INSERT INTO lease.jobs(id) SELECT 'job-' || g FROM generate_series(0, 49999) g")
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let clock = Arc::new(AtomicUsize::new(1));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let (store, stop, clock) = (Arc::clone(&store), Arc::clone(&stop), Arc::clone(&clock));
        workers.spawn(async move {
            let me = Owner::new(format!("w{w}")).unwrap();
            let mut seen = Seen::default();
            let note = |e: StoreError, seen: &mut Seen| match e {
                StoreError::Unavailable(_) => seen.unavailable += 1,
                StoreError::Indeterminate(_) => seen.indeterminate += 1,
                other => seen.other.push(other.to_string()),
            };
            while !stop.load(Ordering::SeqCst) {
                // A logical clock: leases of 3 ticks expire while the server is down, so
                // jobs are taken again after it and fences must keep rising.
                let now =
                    f64::from(u32::try_from(clock.fetch_add(1, Ordering::SeqCst) / 8).unwrap());
                let term = LeaseTerm::new(now, 3.0).unwrap();
                let leases = match store.claim_next(&QueueName::default(), &me, term, 1).await {
                    Ok(leases) => leases,
                    Err(e) => {
                        note(e, &mut seen);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let Some(lease) = leases.into_iter().next() else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                *seen
                    .leases
                    .entry((lease.job.as_str().to_owned(), lease.fence.get()))
                    .or_default() += 1;
                let result = JobResult::new(format!("{me}:{}", lease.fence)).unwrap();
                match store
                    .complete(
                        &lease.job,
                        &me,
                        lease.fence,
                        Timestamp::new(now).unwrap(),
                        &result,
                    )
                    .await
                {
                    Ok(Ok(())) => {
                        let previous = seen
                            .results
                            .insert(lease.job.as_str().to_owned(), result.as_str().to_owned());
                        assert!(
                            previous.is_none(),
                            "job {} completed twice by {me}",
                            lease.job
                        );
                    }
                    Ok(Err(_)) => {}
                    Err(e) => note(e, &mut seen),
                }
            }
            seen
        });
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    tokio::task::spawn_blocking(restart_server).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    stop.store(true, Ordering::SeqCst);
    let mut all = Seen::default();
    while let Some(seen) = workers.join_next().await {
        let seen = seen.unwrap();
        for (key, n) in seen.leases {
            *all.leases.entry(key).or_default() += n;
        }
        for (job, result) in seen.results {
            assert!(
                all.results.insert(job.clone(), result).is_none(),
                "job {job} acknowledged as completed twice"
            );
        }
        all.unavailable += seen.unavailable;
        all.indeterminate += seen.indeterminate;
        all.other.extend(seen.other);
    }
    assert!(
        all.other.is_empty(),
        "errors other than unavailable/indeterminate: {:?}",
        all.other
    );
    assert!(
        all.unavailable + all.indeterminate > 0,
        "the restart was not seen by any call"
    );
    let twice: Vec<_> = all.leases.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "fences acknowledged twice: {twice:?}");
    // The store serves again (new connections), and every acknowledged result is stored.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.state(&JobId::new("job-0").unwrap()).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("waiting for the server: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the store did not come back: {e}"),
        }
    }
    assert!(!all.results.is_empty(), "no job was completed");
    for (job, result) in &all.results {
        let state = store
            .state(&JobId::new(job.clone()).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            state.result.as_deref(),
            Some(result.as_str()),
            "acknowledged result of {job} lost"
        );
        assert!(state.done);
    }
    // Every stored fence is at least every acknowledged fence of its job.
    for (job, fence) in all.leases.keys() {
        let state = store
            .state(&JobId::new(job.clone()).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(
            state.fence >= *fence,
            "job {job}: stored fence {} below acknowledged {fence}",
            state.fence
        );
    }
    eprintln!(
        "{} leases, {} results acknowledged; {} unavailable, {} indeterminate",
        all.leases.len(),
        all.results.len(),
        all.unavailable,
        all.indeterminate
    );
}

fn system_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Six workers claim (two at a time) from a queue limited to three live leases while the
/// server restarts; a reader counts the queue's running jobs all along. The limit is decided in
/// each claim's own transaction, so no reading ever sees more than three, before, through and
/// after the restart, and claims go on once the server is back.
///
/// The reader counts leases that are still live a second after its own clock's reading (a
/// claim whose worker read its clock a little later may have counted a lease that ends in
/// between as gone), and a reading that took over half a second is not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_against_a_limit_while_the_server_restarts_never_hold_more_than_it() {
    let _one = ONE_RESTART.lock().await;
    const LIMIT: u64 = 3;
    let db = ScratchDatabase::create();
    let options = PgOptions {
        pool_size: 8,
        wait_timeout: Duration::from_secs(5),
        ..PgOptions::default()
    };
    let store = Arc::new(PgLeaseStore::init(db.url(), options).await.unwrap());
    db.execute(
        "INSERT INTO lease.jobs(id, queue) SELECT 'job-' || g, 'limited' FROM generate_series(0, 19999) g",
    )
    .unwrap();
    let queue = QueueName::new("limited").unwrap();
    lease_ports::control::Control::change_queue(
        store.as_ref(),
        &queue,
        lease_domain::QueueChange::Concurrency(lease_domain::Concurrency::new(3)),
    )
    .await
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let restarted = Arc::new(AtomicBool::new(false));
    let claimed_after = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..6 {
        let (store, stop, queue) = (Arc::clone(&store), Arc::clone(&stop), queue.clone());
        let (restarted, claimed_after, errors) = (
            Arc::clone(&restarted),
            Arc::clone(&claimed_after),
            Arc::clone(&errors),
        );
        tasks.spawn(async move {
            let me = Owner::new(format!("w{w}")).unwrap();
            while !stop.load(Ordering::SeqCst) {
                let term = LeaseTerm::new(system_now(), 3.0).unwrap();
                let leases = match store.claim_next(&queue, &me, term, 2).await {
                    Ok(leases) => leases,
                    Err(_) => {
                        errors.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                if leases.is_empty() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                if restarted.load(Ordering::SeqCst) {
                    claimed_after.fetch_add(leases.len(), Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(15)).await;
                for lease in leases {
                    // A completion whose answer was lost is sent again until one answers (a
                    // second one is refused as done): the slot is given back, not left to expire.
                    let result = JobResult::new("ok").unwrap();
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while Instant::now() < deadline {
                        let now = Timestamp::new(system_now()).unwrap();
                        match store
                            .complete(&lease.job, &me, lease.fence, now, &result)
                            .await
                        {
                            Ok(_) => break,
                            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                        }
                    }
                }
            }
        });
    }
    let readings = Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let (store, stop, readings) =
            (Arc::clone(&store), Arc::clone(&stop), Arc::clone(&readings));
        tasks.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let asked = Instant::now();
                let at = Timestamp::new(system_now() + 1.0).unwrap();
                if let Ok(rows) = store.stats(at).await {
                    if asked.elapsed() < Duration::from_millis(500) {
                        let running = rows
                            .iter()
                            .filter(|r| {
                                r.queue.as_str() == "limited"
                                    && r.status == lease_domain::Status::Running
                            })
                            .map(|r| r.count)
                            .sum::<u64>();
                        readings.lock().unwrap().push(running);
                    }
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    tokio::task::spawn_blocking(restart_server).await.unwrap();
    restarted.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    stop.store(true, Ordering::SeqCst);
    while tasks.join_next().await.is_some() {}
    let readings = readings.lock().unwrap().clone();
    let most = readings.iter().copied().max().unwrap_or(0);
    assert!(
        most <= LIMIT,
        "{most} live leases in a queue limited to {LIMIT}"
    );
    assert!(
        most >= 1,
        "the reader never saw a lease: the test shows nothing"
    );
    assert!(
        errors.load(Ordering::SeqCst) > 0,
        "the restart was not seen by any claim"
    );
    assert!(
        claimed_after.load(Ordering::SeqCst) > 0,
        "no claim went through after the restart"
    );
    eprintln!(
        "{} readings, at most {most} live; {} claim errors; {} leases after the restart",
        readings.len(),
        errors.load(Ordering::SeqCst),
        claimed_after.load(Ordering::SeqCst)
    );
}
