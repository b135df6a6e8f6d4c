//! Differential test: one random operation sequence (the seed's operations and the queue's:
//! enqueue with fields, claim-next, fail, cancel, retry, purge) against the in-memory reference
//! store and the SQLite store gives identical outcomes, identical stored jobs, and identical
//! `list` and `stats` answers (the harness is `lease_ports::differential`).

use lease_ports::differential::{op, run};
use lease_ports::memory::MemoryLeaseStore;
use lease_sqlite::SqliteLeaseStore;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn memory_and_sqlite_agree_on_every_step(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteLeaseStore::open(dir.path().join("diff.db")).unwrap();
        let memory = MemoryLeaseStore::new();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for (step, op) in ops.iter().enumerate() {
            let expected = runtime.block_on(run(&memory, op));
            let actual = runtime.block_on(run(&sqlite, op));
            prop_assert_eq!(&actual, &expected, "step {} {:?}", step, op);
        }
    }
}
