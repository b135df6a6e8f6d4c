//! The raw baselines: the same SQL the SQLite store runs, by hand over one rusqlite connection
//! (a write in its own `BEGIN IMMEDIATE` transaction), and the raw two-transaction queue loop.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{Caller, Run};
use crate::id;
use lease_domain::JobId;
use lease_sqlite::SqliteLeaseStore;
use lease_sqlite::sql::{
    INSERT_JOB as INSERT, REFILE_ENDED_LEASES, SELECT_CANDIDATES, SELECT_JOB as SELECT,
    UPDATE_JOB as UPDATE, UPDATE_QUEUE, UPSERT_QUEUE,
};
use rusqlite::Connection;

/// Creates a lease database with `fresh` new jobs (`job-00000000`...) and `done` finished jobs.
pub(crate) fn populate(path: &Path, fresh: u64, done: u64) {
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
pub(crate) fn raw_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("open raw");
    conn.busy_timeout(Duration::from_secs(30))
        .expect("busy timeout");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    conn.pragma_update(None, "synchronous", 2).expect("full");
    conn
}

type RawRow = (Option<String>, f64, i64, Option<String>, i64);

pub(crate) fn raw_select(conn: &Connection, job: &JobId) -> Option<RawRow> {
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
pub(crate) fn raw_write(conn: &Connection, job: &JobId, now: f64) {
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
    raw_update_queue(conn, job, now, None, Some(now + 0.5));
    run(conn, "COMMIT");
}

/// The queue row of a new job (default queue fields, no lease), as the store inserts it.
pub(crate) fn raw_insert_queue(conn: &Connection, job: &JobId) {
    queue_row(conn, UPSERT_QUEUE, job, 0.0, None, None);
}

/// The queue row's half of a store write on an existing job, with the job's finished status
/// (`done` once completed: it leaves the ready index) and the end of its lease while held (it
/// leaves claim order).
pub(crate) fn raw_update_queue(
    conn: &Connection,
    job: &JobId,
    now: f64,
    finished: Option<&str>,
    leased_until: Option<f64>,
) {
    queue_row(conn, UPDATE_QUEUE, job, now, finished, leased_until);
}

/// Writes a job's queue row with `sql`: an existing row is updated and a new one inserted, as
/// the store does.
fn queue_row(
    conn: &Connection,
    sql: &str,
    job: &JobId,
    now: f64,
    finished: Option<&str>,
    leased_until: Option<f64>,
) {
    conn.prepare_cached(sql)
        .expect("prepare queue row")
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
            now,
            leased_until,
            // The lease token's digest: raw claims are made without one.
            None::<Vec<u8>>,
            // No timeout, and a claim clears the progress.
            None::<f64>,
            None::<&str>,
            // No group, no parents (so no policy when one fails).
            None::<&str>,
            None::<&str>
        ])
        .expect("upsert queue row");
}

/// Runs a statement from the connection's cache, as the store does for BEGIN and COMMIT.
pub(crate) fn run(conn: &Connection, sql: &str) {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .expect(sql);
}

pub(crate) fn raw_insert(conn: &Connection, job: &JobId) {
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
    raw_insert_queue(conn, job);
    run(conn, "COMMIT");
}

/// The raw baseline of a worker's loop: per job, the store's claim-next SQL in one FULL
/// transaction and the completion's SQL in another (two syncs per job).
pub(crate) fn raw_queue_loop(path: &Path, jobs: u64) -> Run {
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
        conn.prepare_cached(REFILE_ENDED_LEASES)
            .expect("prepare refile")
            .execute(rusqlite::params!["default", now])
            .expect("refile");
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
        raw_update_queue(&conn, &job, now, None, Some(now + 60.0));
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
        raw_update_queue(&conn, &job, now, Some("done"), None);
        run(&conn, "COMMIT");
        me.latencies.push(began.elapsed());
    }
    Run {
        callers: vec![me],
        wall: start.elapsed(),
    }
}
