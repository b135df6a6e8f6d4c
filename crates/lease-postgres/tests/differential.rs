//! Differential test: random operation sequences (the seed's operations and the queue's,
//! imports at fences next to `i64::MAX`, complete-and-claim-next, and migrations into a fresh
//! schema mid-sequence) against the in-memory reference store and the PostgreSQL store give
//! identical outcomes, stored jobs, `list` and `stats` answers (the harness is
//! `lease_ports::differential`). One database; each case starts from empty tables
//! (`TRUNCATE ... RESTART IDENTITY`, so enqueue order restarts too, and epoch 0) and drops the schemas its
//! migrations made. A third of the cases run the queue loop's writes through group commit
//! (each, though alone, settled as a batch is: decided set by set in Rust), a third as one
//! call of the `step` function each, a third as separate statements. The store-clock mode is not compared here: the server's clock cannot be
//! set, and the SQLite differential test covers the mode against the same reference.

use std::sync::Arc;

use lease_ports::differential::{Fresh, Harness, op};
use lease_ports::transfer::Transfer;
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};
use proptest::prelude::*;

/// The first store is schema `lease`, emptied; each migration makes schema `m1`, `m2`, ...
/// (`step`, `max_batch`: see `PgOptions`).
fn postgres_stores(url: Arc<str>, step: bool, max_batch: usize) -> Fresh {
    let mut made = 0;
    Box::new(move || {
        let schema = if made == 0 {
            "lease".to_owned()
        } else {
            format!("m{made}")
        };
        made += 1;
        let url = Arc::clone(&url);
        Box::pin(async move {
            let options = PgOptions {
                pool_size: 2,
                schema,
                step,
                max_batch,
                // A lone write through the batch statement too, so that it is compared.
                alone_in_batch: true,
                ..PgOptions::default()
            };
            let store = PgLeaseStore::init(&url, options).await.unwrap();
            Box::new(store) as Box<dyn Transfer>
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn memory_and_postgres_agree_on_every_step(ops in prop::collection::vec(op(), 1..40)) {
        thread_local! {
            static DB: ScratchDatabase = ScratchDatabase::create();
        }
        let url: Arc<str> = DB.with(|db| {
            db.execute(
                "DO $$ DECLARE s text; BEGIN \
                 IF to_regclass('lease.jobs') IS NOT NULL THEN \
                 TRUNCATE lease.jobs, lease.purged, lease.queues, lease.schedules, \
                 lease.group_pauses, lease.grants, lease.grant_counts, lease.group_turns, \
                 lease.parents, lease.finished, lease.completions, lease.group_heads RESTART IDENTITY; \
                 UPDATE lease.epoch SET raised = 0; END IF; \
                 FOR s IN SELECT nspname FROM pg_namespace WHERE nspname ~ '^m[0-9]+$' LOOP \
                 EXECUTE format('DROP SCHEMA %I CASCADE', s); END LOOP; END $$",
            )
            .unwrap();
            db.url().into()
        });
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut harness = runtime.block_on(Harness::against_memory(postgres_stores(url, ops.len() % 3 != 2, if ops.len() % 3 == 0 { 128 } else { 1 })));
        let outcome = runtime.block_on(harness.run_all(&ops));
        drop(harness);
        outcome.map_err(TestCaseError::fail)?;
    }
}
