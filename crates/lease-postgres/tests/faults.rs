//! Faults on the store's own connections: a backend terminated while its transaction waits
//! (nothing applied: a determinate error) and one terminated while its COMMIT runs (the answer
//! is lost: `Indeterminate`). After each, the store serves the next call on a new connection.

use std::time::Duration;

use lease_domain::{Fence, JobId, LeaseTerm, Owner};
use lease_ports::{LeaseStore, StoreError};
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

fn id(s: &str) -> JobId {
    JobId::new(s).unwrap()
}

fn owner(s: &str) -> Owner {
    Owner::new(s).unwrap()
}

fn term(now: f64, ttl: f64) -> LeaseTerm {
    LeaseTerm::new(now, ttl).unwrap()
}

/// Terminates the store's backends that match `condition` once one does; returns how many.
async fn terminate_when(admin: &tokio_postgres::Client, condition: &str) -> i64 {
    for _ in 0..200 {
        let row = admin
            .query_one(
                &format!(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = current_database() AND application_name = 'lease' \
                     AND pid <> pg_backend_pid() AND {condition}"
                ),
                &[],
            )
            .await
            .unwrap();
        let n: i64 = row.get(0);
        if n > 0 {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no backend of the store matched {condition}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_terminated_inside_its_transaction_applies_nothing_and_the_store_recovers() {
    let db = ScratchDatabase::create();
    let store = PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .unwrap();
    let job = id("j");
    store.enqueue(&job).await.unwrap();
    let holder = db.client().await.unwrap();
    holder
        .batch_execute("BEGIN; SELECT * FROM lease.jobs WHERE id = 'j' FOR UPDATE")
        .await
        .unwrap();
    let killer = db.client().await.unwrap();
    let a = owner("a");
    let (claimed, killed) = tokio::join!(
        store.claim(&job, &a, term(10.0, 5.0)),
        terminate_when(&killer, "wait_event_type = 'Lock'"),
    );
    assert_eq!(killed, 1);
    let err = claimed.unwrap_err();
    assert!(err.is_determinate(), "{err}");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(
        err.to_string()
            .contains("the connection to PostgreSQL failed before commit, nothing was applied"),
        "the lost connection is named as such: {err}"
    );
    holder.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        store.state(&job).await.unwrap().unwrap().fence,
        0,
        "nothing was applied"
    );
    let next = store
        .claim(&job, &owner("b"), term(11.0, 5.0))
        .await
        .unwrap();
    assert_eq!(next, Ok(Fence::new(1).unwrap()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_terminated_during_commit_is_indeterminate_and_the_store_recovers() {
    let db = ScratchDatabase::create();
    let store = PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .unwrap();
    let job = id("j");
    store.enqueue(&job).await.unwrap();
    // A deferred trigger makes every COMMIT that updated a job take a while, so the
    // termination lands while COMMIT runs.
    db.execute(
        "CREATE FUNCTION public.slow_commit() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep(2); RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER slow AFTER UPDATE ON lease.jobs \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.slow_commit()",
    )
    .unwrap();
    let killer = db.client().await.unwrap();
    let a = owner("a");
    let (claimed, killed) = tokio::join!(
        store.claim(&job, &a, term(10.0, 5.0)),
        terminate_when(&killer, "query = 'COMMIT' AND state = 'active'"),
    );
    assert_eq!(killed, 1);
    let err = claimed.unwrap_err();
    assert!(matches!(err, StoreError::Indeterminate(_)), "{err}");
    db.execute("DROP TRIGGER slow ON lease.jobs").unwrap();
    // Whatever happened, the next claim gets a fence no acknowledged claim had.
    let next = store
        .claim(&job, &owner("b"), term(20.0, 5.0))
        .await
        .unwrap()
        .unwrap();
    let stored = store.state(&job).await.unwrap().unwrap();
    assert_eq!(
        (stored.owner.as_deref(), stored.fence),
        (Some("b"), next.get())
    );
}
