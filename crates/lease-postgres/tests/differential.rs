//! Differential test: random operation sequences against the in-memory reference store and the
//! PostgreSQL store give identical outcomes, stored jobs, `list` and `stats` answers (the
//! harness is `lease_ports::differential`). One fresh database; each case starts from empty
//! tables (`TRUNCATE ... RESTART IDENTITY`, so enqueue order restarts too).

use lease_ports::differential::{op, run};
use lease_ports::memory::MemoryLeaseStore;
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn memory_and_postgres_agree_on_every_step(ops in prop::collection::vec(op(), 1..40)) {
        thread_local! {
            static DB: ScratchDatabase = ScratchDatabase::create();
        }
        let url = DB.with(|db| {
            db.execute(
                "DO $$ BEGIN IF to_regclass('lease.jobs') IS NOT NULL THEN \
                 TRUNCATE lease.jobs, lease.purged RESTART IDENTITY; END IF; END $$",
            )
            .unwrap();
            db.url().to_owned()
        });
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let options = PgOptions {
            pool_size: 2,
            ..PgOptions::default()
        };
        let postgres = runtime.block_on(PgLeaseStore::init(&url, options)).unwrap();
        let memory = MemoryLeaseStore::new();
        for (step, op) in ops.iter().enumerate() {
            let expected = runtime.block_on(run(&memory, op));
            let actual = runtime.block_on(run(&postgres, op));
            prop_assert_eq!(&actual, &expected, "step {} {:?}", step, op);
        }
        postgres.close();
    }
}
