//! The operator's reads at any size on PostgreSQL (migration 6): the finished jobs counted by
//! a trigger in rows per server process, the completions per minute, and `list` by status
//! from the index of ends and the open jobs. Checked against a recount of every job, under
//! concurrent writers on many connections, across a purge (which folds the counts), across
//! an upgrade from version 5, and in the plans.
//! Each test makes its own database and drops it.

use std::sync::Arc;

use lease_domain::{
    EnqueueSpec, ErrorText, JobId, JobResult, LeaseTerm, Owner, QueueName, Retry, Status, Timestamp,
};
use lease_ports::overview::{MinuteRow, Overview};
use lease_ports::{JobRecord, LeaseStore, ListFilter};
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

const NOW: f64 = 1_000_000.0;
const QUEUES: [&str; 3] = ["a", "b", "c"];

fn at(t: f64) -> Timestamp {
    Timestamp::new(t).unwrap()
}

fn queue(q: &str) -> QueueName {
    QueueName::new(q).unwrap()
}

/// Every job, read page by page without a status (the whole table in id order, which no
/// count or index of ends serves).
async fn every_job(store: &PgLeaseStore) -> Vec<JobRecord> {
    let mut all = Vec::new();
    loop {
        let page = store
            .list(&ListFilter {
                queue: None,
                status: None,
                limit: 100,
                after: all.last().map(|r: &JobRecord| r.id.clone()),
                now: at(NOW),
                group: None,
                prefix: None,
            })
            .await
            .unwrap();
        if page.is_empty() {
            return all;
        }
        all.extend(page);
    }
}

/// Every job `list` gives for the queue and status, in pages of 7.
async fn listed(store: &PgLeaseStore, q: Option<&str>, status: Status) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    loop {
        let page = store
            .list(&ListFilter {
                queue: q.map(queue),
                status: Some(status),
                limit: 7,
                after: ids.last().map(|i| JobId::new(i.clone()).unwrap()),
                now: at(NOW),
                group: None,
                prefix: None,
            })
            .await
            .unwrap();
        if page.is_empty() {
            return ids;
        }
        ids.extend(page.into_iter().map(|r| r.id.as_str().to_owned()));
    }
}

/// The completions per queue and minute a recount of `jobs` gives (in the queue each job is
/// in; the store counts a completion in the queue the job completed in, and keeps it when
/// the job is purged).
fn completions(jobs: &[JobRecord]) -> Vec<MinuteRow> {
    lease_ports::overview::tally_activity(jobs.iter().map(|r| &r.job), [], [], at(0.0))
}

/// One count of activity rows, where it is not 0: (queue, minute, count).
fn counted(rows: &[MinuteRow], count: fn(&MinuteRow) -> u64) -> Vec<(String, f64, u64)> {
    rows.iter()
        .filter(|r| count(r) > 0)
        .map(|r| (r.queue.as_str().to_owned(), r.minute.get(), count(r)))
        .collect()
}

/// `stats` and `list` of every status and queue agree with a recount of `jobs`, and
/// `activity` gives the completions of `completed` (kept counts, which outlive a job), and
/// the jobs dead and cancelled and the failed attempts a recount of `jobs` gives.
async fn agree_with_a_recount(store: &PgLeaseStore, jobs: &[JobRecord], completed: &[MinuteRow]) {
    assert_eq!(
        store.stats(at(NOW)).await.unwrap(),
        lease_ports::tally(jobs.iter().map(|r| &r.job), at(NOW))
    );
    let got = store.activity(at(0.0)).await.unwrap();
    assert_eq!(
        counted(&got, |r| r.completed),
        counted(completed, |r| r.completed)
    );
    let mut failed = Vec::new();
    for r in jobs {
        for a in store.attempts(&r.id).await.unwrap().kept {
            if a.end.is_failure() {
                failed.push((r.job.queue.clone(), a.ended.unwrap()));
            }
        }
    }
    let ends =
        lease_ports::overview::tally_activity(jobs.iter().map(|r| &r.job), failed, [], at(0.0));
    for count in [
        (|r: &MinuteRow| r.failed) as fn(&MinuteRow) -> u64,
        |r| r.dead,
        |r| r.cancelled,
    ] {
        assert_eq!(counted(&got, count), counted(&ends, count));
    }
    for status in [
        Status::Pending,
        Status::Running,
        Status::Done,
        Status::Dead,
        Status::Cancelled,
    ] {
        for q in [None, Some("a"), Some("b"), Some("c")] {
            let mut expected: Vec<String> = jobs
                .iter()
                .filter(|r| q.is_none_or(|q| r.job.queue.as_str() == q))
                .filter(|r| r.job.status_at(at(NOW)) == status)
                .map(|r| r.id.as_str().to_owned())
                .collect();
            expected.sort();
            assert_eq!(
                listed(store, q, status).await,
                expected,
                "{status:?} in {q:?}"
            );
        }
    }
}

/// 240 jobs over three queues (a third with one attempt), worked by 8 tasks on 8 connections:
/// each job completed, failed (retried or dead) or left running, and some cancelled while
/// pending.
async fn worked(db: &ScratchDatabase) -> PgLeaseStore {
    let options = PgOptions {
        pool_size: 8,
        ..PgOptions::default()
    };
    let store = PgLeaseStore::init(db.url(), options).await.unwrap();
    let jobs: Vec<(JobId, EnqueueSpec)> = (0..240)
        .map(|i| {
            let spec = EnqueueSpec {
                queue: queue(QUEUES[i % 3]),
                max_attempts: Some(if i % 4 == 0 { 1 } else { 3 }),
                enqueued_at: Some(at(NOW - 500.0)),
                ..EnqueueSpec::default()
            };
            // Ids whose byte order and numeric order differ, so merged pages are checked.
            (JobId::new(format!("j{}", i * 7 % 240)).unwrap(), spec)
        })
        .collect();
    store.enqueue_many(&jobs).await.unwrap();
    for (n, (id, _)) in jobs.iter().enumerate().filter(|(n, _)| n % 11 == 5) {
        let cancelled = store.cancel(id, at(NOW - 400.0 + n as f64)).await.unwrap();
        assert!(cancelled.is_ok(), "{cancelled:?}");
    }
    let store = Arc::new(store);
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..8 {
        let store = store.clone();
        tasks.spawn(async move {
            let owner = Owner::new(format!("w{w}")).unwrap();
            let mut n = 0_u32;
            loop {
                let q = queue(QUEUES[(w + n as usize) % 3]);
                // Spread over the last few minutes, so completions fall in several.
                let now = NOW - 300.0 + f64::from(n % 5) * 60.0;
                let term = LeaseTerm::new(now, 1e6).unwrap();
                let leases = store.claim_next(&q, &owner, term, 1).await.unwrap();
                let Some(lease) = leases.first() else {
                    let mut empty = 0;
                    for q in QUEUES {
                        let term = LeaseTerm::new(now, 1e6).unwrap();
                        let more = store.claim_next(&queue(q), &owner, term, 1).await.unwrap();
                        if more.is_empty() {
                            empty += 1;
                        } else {
                            let l = &more[0];
                            let result = JobResult::new("late").unwrap();
                            let done = store
                                .complete(&l.job, &owner, l.fence, at(now), &result)
                                .await
                                .unwrap();
                            assert!(done.is_ok(), "{done:?}");
                        }
                    }
                    if empty == 3 {
                        return;
                    }
                    continue;
                };
                match n % 6 {
                    0..=2 => {
                        let result = JobResult::new(format!("by {w}")).unwrap();
                        let done = store
                            .complete(&lease.job, &owner, lease.fence, at(now), &result)
                            .await
                            .unwrap();
                        assert!(done.is_ok(), "{done:?}");
                    }
                    3 | 4 => {
                        let error = ErrorText::new("no").unwrap();
                        store
                            .fail(&lease.job, &owner, lease.fence, at(now), &error, Retry::No)
                            .await
                            .unwrap()
                            .unwrap();
                    }
                    // Left running: its lease outlives NOW.
                    _ => {}
                }
                n += 1;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    Arc::into_inner(store).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_kept_per_connection_agree_with_every_job_and_survive_a_purge_folded() {
    let db = ScratchDatabase::create();
    let store = worked(&db).await;
    let client = db.client().await.unwrap();
    let shards: i64 = client
        .query_one(
            "SELECT count(DISTINCT shard) FROM lease.finished WHERE shard <> 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(shards > 1, "the counts were kept by {shards} connections");
    let jobs = every_job(&store).await;
    for status in [
        Status::Done,
        Status::Dead,
        Status::Cancelled,
        Status::Running,
    ] {
        assert!(
            jobs.iter().any(|r| r.job.status_at(at(NOW)) == status),
            "no {status:?} job to count"
        );
    }
    let completed = completions(&jobs);
    assert!(!completed.is_empty());
    agree_with_a_recount(&store, &jobs, &completed).await;

    // A purge of the dead and cancelled jobs takes them out of the counts; the completions
    // stay in the chart; every process's rows are folded into one per queue and end.
    let purged = store
        .purge(at(NOW + 1.0), &[Status::Dead, Status::Cancelled])
        .await
        .unwrap();
    assert!(purged > 0);
    let left = every_job(&store).await;
    assert_eq!(left.len() as u64, jobs.len() as u64 - purged);
    agree_with_a_recount(&store, &left, &completed).await;
    for table in ["finished", "completions"] {
        let unfolded: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM lease.{table} WHERE shard <> 0"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(unfolded, 0, "{table}");
    }
    // A purge of the done ones as well: nothing finished is left to count.
    store.purge(at(NOW + 1.0), &[Status::Done]).await.unwrap();
    let left = every_job(&store).await;
    agree_with_a_recount(&store, &left, &completed).await;
    assert!(
        store
            .stats(at(NOW))
            .await
            .unwrap()
            .iter()
            .all(|row| !row.status.is_finished())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_by_another_program_are_counted_as_the_stores_own() {
    let db = ScratchDatabase::create();
    let store = PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .unwrap();
    // Inserted done, moved from queue to queue while done, made dead, deleted, truncated.
    db.execute(
        "INSERT INTO lease.jobs(id, queue, done, fence, updated) \
         SELECT 'x' || g, 'a', true, 1, 1000 + g FROM generate_series(1, 50) g",
    )
    .unwrap();
    let completed = completions(&every_job(&store).await);
    db.execute(
        "UPDATE lease.jobs SET queue = 'b' WHERE id IN ('x1', 'x2', 'x3'); \
         UPDATE lease.jobs SET done = false, ended = 'dead' WHERE id IN ('x4', 'x5'); \
         DELETE FROM lease.jobs WHERE id IN ('x6', 'x1')",
    )
    .unwrap();
    let jobs = every_job(&store).await;
    assert_eq!(jobs.len(), 48);
    agree_with_a_recount(&store, &jobs, &completed).await;
    // Emptied at once, and filled again.
    db.execute(
        "TRUNCATE lease.jobs; INSERT INTO lease.jobs(id, queue, ended) VALUES ('y', 'c', 'cancelled')",
    )
    .unwrap();
    let jobs = every_job(&store).await;
    assert_eq!(jobs.len(), 1);
    agree_with_a_recount(&store, &jobs, &completed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_at_version_5_is_counted_when_it_is_brought_up_to_date() {
    let db = ScratchDatabase::create();
    let store = worked(&db).await;
    drop(store);
    // Back to version 5, as a database made before migration 6 is (without what migrations 7,
    // 8, 9, 10, 11, 12, 13, 14, 15, 16 and 17 made too).
    db.execute(
        "DROP TABLE lease.finished, lease.completions, lease.queues, lease.schedules, \
         lease.group_pauses, lease.grants, lease.grant_counts, lease.group_turns, \
         lease.parents, lease.checkpoints, lease.traces, lease.epoch, lease.group_heads, \
         lease.attempts; DROP FUNCTION lease.forget_attempts() CASCADE; \
         DROP FUNCTION lease.keep_attempt(text, bigint, text, double precision, \
         double precision, text); DROP INDEX lease.jobs_ends; \
         DROP FUNCTION lease.lower_group_head() CASCADE; \
         DROP FUNCTION lease.repair_group_heads(text, text[]); \
         DROP FUNCTION lease.epoch(); DROP FUNCTION lease.next_fence(bigint, bigint); \
         DROP FUNCTION lease.keep_group_turn() CASCADE; \
         DROP FUNCTION lease.forget_parents() CASCADE; \
         DROP FUNCTION lease.forget_checkpoints() CASCADE; \
         DROP FUNCTION lease.forget_traces() CASCADE; \
         DROP FUNCTION lease.count_finished() CASCADE; DROP INDEX lease.jobs_ended; \
         DROP FUNCTION lease.step; ALTER TABLE lease.jobs DROP COLUMN timeout, \
         DROP COLUMN progress, DROP COLUMN grp, DROP COLUMN on_parent_failure; \
         DELETE FROM lease.migrations WHERE version >= 6",
    )
    .unwrap();
    let store = PgLeaseStore::open(db.url(), PgOptions::default())
        .await
        .unwrap();
    let jobs = every_job(&store).await;
    agree_with_a_recount(&store, &jobs, &completions(&jobs)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_and_a_page_of_one_status_read_no_finished_job() {
    let db = ScratchDatabase::create();
    PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .unwrap();
    // 100,000 finished jobs, 1,000 open ones (a tenth of them leased), then statistics.
    db.execute(
        "INSERT INTO lease.jobs(id, queue, done, fence, updated) \
         SELECT 'd' || g, 'q', true, 1, g FROM generate_series(1, 100000) g; \
         INSERT INTO lease.jobs(id, queue) SELECT 'p' || g, 'q' FROM generate_series(1, 1000) g; \
         UPDATE lease.jobs SET owner = 'w', until = 1e12, leased_until = 1e12, fence = 1 \
         WHERE id LIKE 'p%' AND seq % 10 = 0; \
         ANALYZE lease.jobs",
    )
    .unwrap();
    let client = db.client().await.unwrap();
    let sql = lease_postgres::StatementTexts::new("lease");
    let explain = async |statement: &str, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]| {
        let rows = client
            .query(&format!("EXPLAIN {statement}"), params)
            .await
            .unwrap();
        rows.iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let now = 5.0_f64;
    for (name, plan) in [
        ("stats", explain(&sql.stats, &[&now]).await),
        ("due", explain(&sql.due, &[&now]).await),
        ("completions", explain(&sql.completions, &[&now]).await),
        (
            "open page",
            explain(&sql.open_page, &[&"q", &"", &512_i64]).await,
        ),
        (
            "open page, any queue",
            explain(&sql.open_page_any, &[&"", &512_i64]).await,
        ),
    ] {
        assert!(!plan.contains("Seq Scan on jobs"), "{name}: {plan}");
    }
    // As `list` reads an end's page: with sorting off, so the range is read in order.
    client.batch_execute("SET enable_sort = off").await.unwrap();
    let ended = explain(&sql.ended_page, &[&"q", &"d5", &"done", &512_i64]).await;
    assert!(ended.contains("Index Scan using jobs_ended"), "{ended}");
    assert!(!ended.contains("Sort"), "{ended}");
}
