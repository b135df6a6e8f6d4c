//! The operator page's rows: at a million jobs (most done), how long the overview's first
//! data takes (the three reads the page makes at once: stats with the due counts, the newest
//! refusals and the last hour's activity), how long a page of 50 jobs takes, and what 100 open
//! event streams cost the server while nothing changes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_domain::Timestamp;
use lease_sqlite::{SqliteLeaseStore, SqliteOptions};
use rusqlite::Connection;

use lease_domain::{JobId, QueueName, Status};
use lease_ports::overview::Overview;
use lease_ports::{LeaseStore, ListFilter};
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

use crate::harness::{Caller, Plan, Row, Run, summarize};

fn wall_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A lease database of `total` jobs in five queues: 1% pending (enqueued over the last two
/// hours), the rest done over the last two hours.
fn build(path: &Path, total: u64, now: f64) {
    let options = SqliteOptions {
        audit: Some(1_000),
        ..SqliteOptions::default()
    };
    drop(SqliteLeaseStore::open_with(path, options).expect("create the database"));
    let conn = Connection::open(path).expect("open for loading");
    conn.execute_batch("PRAGMA synchronous = OFF; BEGIN")
        .expect("begin");
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1) \
         INSERT INTO jobs(id, owner, until, fence, result, done) \
         SELECT printf('job-%08d', i), CASE WHEN i % 100 = 0 THEN NULL ELSE 'w' END, \
         CASE WHEN i % 100 = 0 THEN 0 ELSE ?2 - (i % 7200) END, \
         CASE WHEN i % 100 = 0 THEN 0 ELSE 1 END, \
         CASE WHEN i % 100 = 0 THEN NULL ELSE 'ok' END, i % 100 <> 0 FROM n",
        rusqlite::params![i64::try_from(total).unwrap_or(i64::MAX), now],
    )
    .expect("insert jobs");
    conn.execute(
        "UPDATE jobs_queue SET queue = 'q' || (CAST(substr(id, 5) AS INTEGER) % 5), \
         updated = ?1 - (CAST(substr(id, 5) AS INTEGER) % 7200), \
         result_fence = CASE WHEN finished = 'done' THEN 1 END, \
         attempts = CASE WHEN finished = 'done' THEN 1 ELSE 0 END",
        [now],
    )
    .expect("queue fields");
    conn.execute_batch("COMMIT; ANALYZE").expect("commit");
}

/// `n` timed rounds of `round`, each answered in full before the next.
fn rounds<F, Fut>(runtime: &tokio::runtime::Runtime, n: usize, round: F) -> Run
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    let mut caller = Caller::default();
    runtime.block_on(async {
        for _ in 0..n {
            let began = Instant::now();
            round().await;
            caller.latencies.push(began.elapsed());
        }
    });
    Run {
        callers: vec![caller],
        wall: start.elapsed(),
    }
}

async fn get(client: &reqwest::Client, url: &str, key: &str) -> String {
    let response = client
        .get(url)
        .bearer_auth(key)
        .send()
        .await
        .expect("the server answers");
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    response.text().await.expect("a body")
}

pub(crate) fn rows(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    let total: u64 = if plan.big_table > 10_000 {
        1_000_000
    } else {
        20_000
    };
    let now = wall_now();
    let path = dir.join("overview.db");
    let built = Instant::now();
    build(&path, total, now);
    println!(
        "overview: {total} jobs built in {:.1} s",
        built.elapsed().as_secs_f64()
    );
    let options = SqliteOptions {
        audit: Some(1_000),
        ..SqliteOptions::default()
    };
    let store = SqliteLeaseStore::open_with(&path, options).expect("open store");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (base, key) = crate::api::serve_with(
        &runtime,
        &store,
        Arc::new(|| Timestamp::new(wall_now()).expect("finite")),
    );
    let client = reqwest::Client::new();
    let n = if total > 100_000 { 20 } else { 5 };
    let label = |what: &str| format!("{what}, {total} jobs (1% pending)");

    let (stats, refusals, activity) = (
        format!("{base}/v1/stats"),
        format!("{base}/v1/refusals?limit=50"),
        format!("{base}/v1/activity?minutes=60"),
    );
    let overview = rounds(&runtime, n, || async {
        tokio::join!(
            get(&client, &stats, &key),
            get(&client, &refusals, &key),
            get(&client, &activity, &key),
        );
    });
    rows.push(summarize(
        &label("page: overview's first data (stats + due, refusals, activity)"),
        1,
        total,
        &[overview],
        true,
    ));
    for (what, url) in [
        ("page: stats with the due counts alone", &stats),
        ("page: the newest 50 refusals alone", &refusals),
        ("page: the last hour's activity alone", &activity),
    ] {
        let one = rounds(&runtime, n, || async {
            get(&client, url, &key).await;
        });
        rows.push(summarize(&label(what), 1, total, &[one], true));
    }
    for (what, query) in [
        ("page: 50 jobs, no filter", "limit=50"),
        (
            "page: 50 pending jobs of one queue",
            "limit=50&queue=q1&status=pending",
        ),
        (
            "page: 50 done jobs of one queue, a later page",
            "limit=50&queue=q2&status=done&after=job-00500000",
        ),
    ] {
        let url = format!("{base}/v1/jobs?{query}");
        let page = rounds(&runtime, n, || async {
            get(&client, &url, &key).await;
        });
        rows.push(summarize(&label(what), 1, total, &[page], true));
    }

    // 100 event streams open, nothing changing: the server's CPU (the process's; the clients
    // only hold their sockets).
    let streams: Vec<reqwest::Response> = runtime.block_on(async {
        let mut open = Vec::new();
        for _ in 0..100 {
            let response = client
                .get(format!("{base}/v1/events"))
                .bearer_auth(&key)
                .send()
                .await
                .expect("a stream");
            assert!(response.status().is_success());
            open.push(response);
        }
        open
    });
    std::thread::sleep(Duration::from_secs(2));
    let window = if total > 100_000 {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(2)
    };
    let cpu = crate::cpu_seconds();
    let start = Instant::now();
    std::thread::sleep(window);
    let share = (crate::cpu_seconds() - cpu) / start.elapsed().as_secs_f64();
    drop(streams);
    println!(
        "overview: 100 idle event streams cost {:.1}% of one core over {:.0} s",
        share * 100.0,
        window.as_secs_f64()
    );
    let mut idle = Caller::default();
    idle.latencies.push(window);
    rows.push(Row {
        operation: format!(
            "{} [server CPU {:.1}% of one core]",
            label("page: 100 idle event streams"),
            share * 100.0
        ),
        ..summarize(
            "",
            100,
            total,
            &[Run {
                callers: vec![idle],
                wall: window,
            }],
            false,
        )
    });
    drop(runtime);
}

/// The same reads on PostgreSQL, through the store (no HTTP): the overview's (`stats` with
/// `due`, the newest refusals, the last hour's activity) and a page of 50 pending jobs of one
/// queue, over `total` jobs made by one `INSERT ... SELECT` (1% pending). Skipped, with a
/// note, when no server answers.
pub(crate) fn pg_rows(plan: &Plan, rows: &mut Vec<Row>) -> Option<String> {
    if std::net::TcpStream::connect("127.0.0.1:5432").is_err() {
        return Some("PostgreSQL overview rows skipped: no server on 127.0.0.1:5432".to_owned());
    }
    let total: u64 = if plan.big_table > 10_000 {
        1_000_000
    } else {
        20_000
    };
    let now = wall_now();
    let db = ScratchDatabase::create();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let options = PgOptions {
        audit: Some(1_000),
        ..PgOptions::default()
    };
    let store = runtime
        .block_on(PgLeaseStore::init(db.url(), options))
        .expect("init");
    let built = Instant::now();
    db.execute(&format!(
        "INSERT INTO lease.jobs(id, queue, owner, until, fence, result, done, updated, \
         result_fence, attempts) SELECT 'job-' || lpad(i::text, 8, '0'), 'q' || (i % 5), \
         CASE WHEN i % 100 = 0 THEN NULL ELSE 'w' END, \
         CASE WHEN i % 100 = 0 THEN 0 ELSE {now} - (i % 7200) END, \
         CASE WHEN i % 100 = 0 THEN 0 ELSE 1 END, CASE WHEN i % 100 = 0 THEN NULL ELSE 'ok' END, \
         i % 100 <> 0, {now} - (i % 7200), CASE WHEN i % 100 = 0 THEN NULL ELSE 1 END, \
         CASE WHEN i % 100 = 0 THEN 0 ELSE 1 END FROM generate_series(0, {}) i; ANALYZE lease.jobs",
        total - 1
    ))
    .expect("insert jobs");
    let at = Timestamp::new(now).expect("finite");
    let n = if total > 100_000 { 10 } else { 3 };
    let label = |what: &str| format!("pg {what}, {total} jobs (1% pending)");
    let overview = rounds(&runtime, n, || async {
        let refusals = lease_ports::audit::AuditFilter {
            job: None,
            since: None,
            limit: 50,
        };
        let (stats, due, refused, activity) = tokio::join!(
            store.stats(at),
            store.due(at),
            lease_ports::audit::AuditTrail::refusals(&store, &refusals),
            store.activity(Timestamp::new(now - 3600.0).expect("finite")),
        );
        drop((
            stats.expect("stats"),
            due.expect("due"),
            refused.expect("refusals"),
            activity.expect("activity"),
        ));
    });
    rows.push(summarize(
        &label("store: the overview's reads (stats, due, refusals, activity)"),
        1,
        total,
        &[overview],
        true,
    ));
    let filter = ListFilter {
        queue: Some(QueueName::new("q1").expect("queue")),
        status: Some(Status::Pending),
        limit: 50,
        after: None,
        now: at,
        group: None,
        prefix: None,
    };
    let page = rounds(&runtime, n, || async {
        drop(store.list(&filter).await.expect("list"));
    });
    rows.push(summarize(
        &label("store: 50 pending jobs of one queue"),
        1,
        total,
        &[page],
        true,
    ));
    let done = ListFilter {
        queue: Some(QueueName::new("q1").expect("queue")),
        status: Some(Status::Done),
        limit: 50,
        after: Some(JobId::new(format!("job-{:08}", total / 2)).expect("id")),
        now: at,
        group: None,
        prefix: None,
    };
    let later = rounds(&runtime, n, || async {
        let page = store.list(&done).await.expect("list");
        assert_eq!(page.len(), 50, "a page of done jobs");
    });
    rows.push(summarize(
        &label("store: a later page of 50 done jobs of one queue"),
        1,
        total,
        &[later],
        true,
    ));
    Some(format!(
        "PostgreSQL overview: {total} jobs built in {:.1} s",
        built.elapsed().as_secs_f64()
    ))
}
