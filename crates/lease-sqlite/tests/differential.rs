//! Differential test: one random operation sequence (the seed's operations and the queue's:
//! enqueue with fields, claim-next, complete-and-claim-next, fail, cancel, retry, purge,
//! imports at fences next to `i64::MAX`, and migrations into fresh files mid-sequence) against
//! the in-memory reference store and the SQLite store gives identical outcomes, identical
//! stored jobs, and identical `list` and `stats` answers (the harness is
//! `lease_ports::differential`). Also in store-clock mode (both stores read one manual clock)
//! and with rows another program inserts into the file.

use std::sync::{Arc, Mutex};

use lease_domain::{ClockMode, Timestamp};
use lease_ports::differential::{Fresh, Harness, fresh_now, op, op_with_foreign_writes};
use lease_ports::memory::MemoryLeaseStore;
use lease_sqlite::{HostClock, SqliteLeaseStore, SqliteOptions};
use proptest::prelude::*;
use tempfile::TempDir;

/// Fresh SQLite stores, each a new file in `dir`.
fn sqlite_stores(dir: Arc<TempDir>, options: SqliteOptions) -> Fresh {
    let mut made = 0;
    fresh_now(move || {
        made += 1;
        let path = dir.path().join(format!("diff-{made}.db"));
        Box::new(SqliteLeaseStore::open_with(path, options.clone()).unwrap())
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn memory_and_sqlite_agree_on_every_step(ops in prop::collection::vec(op(), 1..40)) {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let runtime = runtime();
        let mut harness =
            runtime.block_on(Harness::against_memory(sqlite_stores(dir, SqliteOptions::default())));
        runtime.block_on(harness.run_all(&ops)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn in_store_clock_mode_memory_and_sqlite_agree(ops in prop::collection::vec(op(), 1..30)) {
        // One manual clock both stores read, set from each operation's time (a quarter second
        // later, so it never equals a caller's time by accident).
        let clock = Arc::new(Mutex::new(0.0_f64));
        let read = {
            let clock = Arc::clone(&clock);
            move || Timestamp::new(*clock.lock().unwrap()).unwrap()
        };
        let reference: Fresh = {
            let read = read.clone();
            fresh_now(move || {
                Box::new(MemoryLeaseStore::with_clock(ClockMode::Store, Arc::new(read.clone())))
            })
        };
        let options = SqliteOptions {
            clock: ClockMode::Store,
            host_clock: Some(HostClock::new(read)),
            ..SqliteOptions::default()
        };
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let runtime = runtime();
        let mut harness = runtime.block_on(Harness::new(reference, sqlite_stores(dir, options)));
        for (step, op) in ops.iter().enumerate() {
            if let Some(time) = op.time() {
                *clock.lock().unwrap() = f64::from(time) + 0.25;
            }
            runtime
                .block_on(harness.step(op))
                .map_err(|diff| TestCaseError::fail(format!("step {step} {op:?}: {diff}")))?;
        }
    }

    #[test]
    fn rows_another_program_inserts_are_read_as_the_reference_reads_them(
        ops in prop::collection::vec(op_with_foreign_writes(), 1..40)
    ) {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let path = dir.path().join("diff-1.db");
        let foreign = rusqlite::Connection::open(&path).unwrap();
        let runtime = runtime();
        let mut harness = runtime
            .block_on(Harness::against_memory(sqlite_stores(dir, SqliteOptions::default())))
            .with_foreign_writes(Box::new(move |id, fence| {
                foreign
                    .execute(
                        "INSERT INTO jobs(id, fence) VALUES (?1, ?2)",
                        rusqlite::params![id.as_str(), i64::from(fence)],
                    )
                    .unwrap();
            }));
        runtime.block_on(harness.run_all(&ops)).map_err(TestCaseError::fail)?;
    }
}
