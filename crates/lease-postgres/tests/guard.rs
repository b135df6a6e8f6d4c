//! The PostgreSQL fence guard: the Rust `admit` inside a tokio-postgres transaction and the SQL
//! function `admit_fence` (for code in any language) agree with `lease_domain::decide_guard`,
//! and the whole stale-worker story with a ledger in another PostgreSQL database ends with
//! exactly the new holder's entry.

use std::collections::HashMap;

use lease_domain::{Fence, JobId, JobResult, LeaseTerm, Owner, Timestamp, decide_guard};
use lease_ports::LeaseStore;
use lease_ports::history::Rng;
use lease_postgres::guard::{STALE_FENCE_SQLSTATE, admit, install};
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

async fn connect(db: &ScratchDatabase) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

fn fence(n: u64) -> Fence {
    Fence::new(n).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_function_the_rust_guard_and_the_domain_rule_agree() {
    let db = ScratchDatabase::create();
    let mut client = connect(&db).await;
    install(&client, "by_rust").await.unwrap();
    install(&client, "by_sql").await.unwrap();
    install(&client, "by_sql").await.unwrap(); // idempotent
    let mut model: HashMap<String, Fence> = HashMap::new();
    let mut rng = Rng::new(11);
    let mut refusals = 0;
    for step in 0..300 {
        let key = format!("k{}", rng.below(3));
        let presented = fence(rng.below(7));
        let expected = decide_guard(model.get(&key).copied(), presented);
        if let Ok(keep) = expected {
            model.insert(key.clone(), keep);
        }
        let tx = client.transaction().await.unwrap();
        let by_rust = admit(&tx, "by_rust", &key, presented).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(by_rust, expected.map(drop), "step {step}: the Rust guard");
        let tx = client.transaction().await.unwrap();
        let by_sql = tx
            .query_one(
                "SELECT by_sql.admit_fence($1, $2)",
                &[&key, &i64::from(presented)],
            )
            .await;
        match (&by_sql, &expected) {
            (Ok(row), Ok(_)) => assert_eq!(row.get::<_, i64>(0), i64::from(presented)),
            (Err(e), Err(refused)) => {
                refusals += 1;
                let db = e.as_db_error().expect("a server error");
                assert_eq!(db.code().code(), STALE_FENCE_SQLSTATE);
                assert_eq!(
                    db.detail(),
                    Some(
                        format!(
                            "presented={} current={}",
                            refused.presented, refused.current
                        )
                        .as_str()
                    )
                );
            }
            other => panic!("step {step}: the SQL function and the rule disagree: {other:?}"),
        }
        if by_sql.is_ok() {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
    }
    assert!(
        refusals > 20,
        "only {refusals} refusals: the sequence did not test staleness"
    );
    // A malformed call is an error of its own, not a refusal.
    let err = client
        .query_one("SELECT by_sql.admit_fence('', 1)", &[])
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "22023");
}

/// One ledger write: the guard's check and the entry in one transaction.
async fn write(
    ledger: &mut tokio_postgres::Client,
    job: &JobId,
    fence: Fence,
    text: &str,
) -> Result<(), lease_domain::GuardRefused> {
    let tx = ledger.transaction().await.unwrap();
    match admit(&tx, "lease", job.as_str(), fence).await.unwrap() {
        Ok(()) => {
            tx.execute(
                "INSERT INTO entries VALUES ($1, $2, $3)",
                &[&job.as_str(), &text, &i64::from(fence)],
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            Ok(())
        }
        Err(refused) => {
            tx.rollback().await.unwrap();
            Err(refused)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_worker_is_refused_by_a_postgres_ledger_and_by_the_store() {
    let store_db = ScratchDatabase::create();
    let ledger_db = ScratchDatabase::create();
    let store = PgLeaseStore::init(store_db.url(), PgOptions::default())
        .await
        .unwrap();
    let mut ledger = connect(&ledger_db).await;
    install(&ledger, "lease").await.unwrap();
    ledger
        .batch_execute("CREATE TABLE entries(job text, text text, fence bigint)")
        .await
        .unwrap();
    let job = JobId::new("payment-7").unwrap();
    store.enqueue(&job).await.unwrap();
    let (a, b) = (Owner::new("A").unwrap(), Owner::new("B").unwrap());
    let fa = store
        .claim(&job, &a, LeaseTerm::new(100.0, 10.0).unwrap())
        .await
        .unwrap()
        .unwrap();
    // A stalls before writing; B takes over, writes to the ledger and completes.
    let fb = store
        .claim(&job, &b, LeaseTerm::new(111.0, 10.0).unwrap())
        .await
        .unwrap()
        .unwrap();
    write(&mut ledger, &job, fb, "paid by B").await.unwrap();
    store
        .complete(
            &job,
            &b,
            fb,
            Timestamp::new(112.0).unwrap(),
            &JobResult::new("paid").unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    // A wakes: the ledger refuses its write, and the store its completion.
    let refused = write(&mut ledger, &job, fa, "paid by A").await.unwrap_err();
    assert_eq!((refused.presented, refused.current), (fa, fb));
    let late = store
        .complete(
            &job,
            &a,
            fa,
            Timestamp::new(113.0).unwrap(),
            &JobResult::new("A").unwrap(),
        )
        .await
        .unwrap();
    assert!(late.is_err());
    let rows = ledger
        .query("SELECT text, fence FROM entries", &[])
        .await
        .unwrap();
    let entries: Vec<(String, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(entries, vec![("paid by B".to_owned(), i64::from(fb))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_schema_carries_the_guard_so_sql_in_its_database_can_call_it() {
    let db = ScratchDatabase::create();
    PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .unwrap();
    let client = connect(&db).await;
    client
        .batch_execute("CREATE TABLE public.notes(text text)")
        .await
        .unwrap();
    client
        .batch_execute("BEGIN; SELECT lease.admit_fence('job-1', 3); INSERT INTO public.notes VALUES ('three'); COMMIT")
        .await
        .unwrap();
    // A stale call aborts its transaction: the note it wanted to write is not stored.
    let stale = client
        .batch_execute("BEGIN; SELECT lease.admit_fence('job-1', 2); INSERT INTO public.notes VALUES ('two'); COMMIT")
        .await
        .unwrap_err();
    assert_eq!(stale.code().unwrap().code(), STALE_FENCE_SQLSTATE);
    client.batch_execute("ROLLBACK").await.unwrap();
    let notes: Vec<String> = client
        .query("SELECT text FROM public.notes", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(notes, ["three"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_schema_gains_the_guard_when_opened_and_keeps_its_jobs() {
    let db = ScratchDatabase::create();
    // What version 1 made, before checksums were recorded: its frozen migration, run by hand.
    db.execute(&format!(
        "CREATE SCHEMA lease; CREATE TABLE lease.migrations \
         (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now()); {} \
         INSERT INTO lease.migrations(version) VALUES (1); \
         INSERT INTO lease.jobs(id) VALUES ('kept');",
        include_str!("../migrations/0001_jobs.sql").replace("{s}", "lease")
    ))
    .unwrap();
    let store = PgLeaseStore::open(db.url(), PgOptions::default())
        .await
        .unwrap();
    assert!(
        store
            .state(&JobId::new("kept").unwrap())
            .await
            .unwrap()
            .is_some()
    );
    let client = connect(&db).await;
    let admitted: i64 = client
        .query_one("SELECT lease.admit_fence('k', 1)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(admitted, 1);
    let recorded: Vec<(i32, Option<String>)> = client
        .query(
            "SELECT version, checksum FROM lease.migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        recorded.len(),
        usize::try_from(lease_postgres::CURRENT_VERSION).unwrap()
    );
    assert!(
        recorded
            .iter()
            .all(|(_, c)| c.as_ref().is_some_and(|c| c.len() == 64)),
        "every migration has its checksum: {recorded:?}"
    );
}
