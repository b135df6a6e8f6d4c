//! The problem statement's functions as its own `service.py` calls them, a connection per call:
//! `lease_sqlite`'s path API (WAL, FULL) against the same calls written plainly with rusqlite
//! (a connection per call, `BEGIN IMMEDIATE` around each read and write, SQLite's defaults: the
//! rollback journal, FULL), in alternating runs. Each operation is the next of enqueue, claim,
//! renew and complete on the next job. The Python side of the same comparison is
//! `cargo xtask bench --python`.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, OptionalExtension};

use crate::harness::{Paired, Plan, Row, timed};

/// The statement's `service.py` written plainly: every call opens the file and closes it.
struct Plain<'a>(&'a Path);

impl Plain<'_> {
    fn open(&self) -> Connection {
        let conn = Connection::open(self.0).expect("open");
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .expect("busy timeout");
        conn
    }

    fn init(&self) {
        self.open()
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS jobs(id TEXT PRIMARY KEY, owner TEXT, until REAL NOT \
                 NULL DEFAULT 0, fence INTEGER NOT NULL DEFAULT 0, result TEXT, done INTEGER NOT \
                 NULL DEFAULT 0)",
            )
            .expect("create");
    }

    fn enqueue(&self, id: &str) -> bool {
        self.open()
            .execute("INSERT OR IGNORE INTO jobs(id) VALUES (?1)", [id])
            .expect("insert")
            == 1
    }

    fn claim(&self, id: &str, owner: &str, now: f64, ttl: f64) -> Option<i64> {
        let conn = self.open();
        conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
        let row: Option<(f64, i64, i64)> = conn
            .query_row(
                "SELECT until, fence, done FROM jobs WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .expect("select");
        let fence = match row {
            Some((until, fence, 0)) if until <= now => fence + 1,
            _ => {
                conn.execute_batch("ROLLBACK").expect("rollback");
                return None;
            }
        };
        conn.execute(
            "UPDATE jobs SET owner = ?1, until = ?2, fence = ?3 WHERE id = ?4",
            rusqlite::params![owner, now + ttl, fence, id],
        )
        .expect("update");
        conn.execute_batch("COMMIT").expect("commit");
        Some(fence)
    }

    /// Renew (`result` None) or complete, for the current holder only.
    fn write(&self, id: &str, owner: &str, fence: i64, now: f64, result: Option<&str>) -> bool {
        let conn = self.open();
        conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
        let row: Option<(Option<String>, f64, i64, i64)> = conn
            .query_row(
                "SELECT owner, until, fence, done FROM jobs WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
            .expect("select");
        let live =
            matches!(row, Some((Some(o), until, f, 0)) if o == owner && f == fence && until > now);
        if !live {
            conn.execute_batch("ROLLBACK").expect("rollback");
            return false;
        }
        match result {
            None => conn.execute(
                "UPDATE jobs SET until = ?1 WHERE id = ?2",
                rusqlite::params![now + 30.0, id],
            ),
            Some(result) => conn.execute(
                "UPDATE jobs SET result = ?1, done = 1 WHERE id = ?2",
                rusqlite::params![result, id],
            ),
        }
        .expect("update");
        conn.execute_batch("COMMIT").expect("commit");
        true
    }
}

/// The `k`th operation: enqueue, claim, renew or complete of job `k / 4`, through `lease`.
fn through_lease(path: &Path, k: u64) {
    let job = format!("job-{}", k / 4);
    let done = match k % 4 {
        0 => lease_sqlite::enqueue(path, &job).expect("enqueue"),
        1 => lease_sqlite::claim(path, &job, "w", 100.0, 30.0)
            .expect("claim")
            .is_some(),
        2 => lease_sqlite::renew(path, &job, "w", 1, 101.0, 30.0).expect("renew"),
        _ => lease_sqlite::complete(path, &job, "w", 1, 102.0, "r").expect("complete"),
    };
    assert!(done, "operation {k} was refused");
}

/// The same operation through the plain service.
fn through_plain(plain: &Plain<'_>, k: u64) {
    let job = format!("job-{}", k / 4);
    let done = match k % 4 {
        0 => plain.enqueue(&job),
        1 => plain.claim(&job, "w", 100.0, 30.0).is_some(),
        2 => plain.write(&job, "w", 1, 101.0, None),
        _ => plain.write(&job, "w", 1, 102.0, Some("r")),
    };
    assert!(done, "operation {k} was refused");
}

pub(crate) fn rows(plan: &Plan, dir: &Path, rows: &mut Vec<Row>) {
    let ours = dir.join("statement-lease.db");
    lease_sqlite::init_db(&ours).expect("init");
    let plain_path = dir.join("statement-plain.db");
    let plain = Plain(&plain_path);
    plain.init();
    let (next_ours, next_plain) = (AtomicU64::new(0), AtomicU64::new(0));
    let mut paired = Paired {
        plan,
        raw_runs: Vec::new(),
    };
    rows.push(paired.measure(
        "the statement's functions through lease_sqlite (a connection per call, WAL, FULL), ops/s",
        &|_, _| {
            let k = next_ours.fetch_add(1, Ordering::SeqCst);
            timed(|| through_lease(&ours, k))
        },
        false,
        "plain service",
        &|_, _| {
            let k = next_plain.fetch_add(1, Ordering::SeqCst);
            timed(|| through_plain(&plain, k))
        },
    ));
    rows.extend(paired.baseline_rows(&[(
        "plain service",
        "the statement's functions written plainly with rusqlite (a connection per call, rollback journal, FULL), ops/s",
    )]));
}
