//! The PostgreSQL store against the real server: the stale-worker story, what it refuses to
//! open, concurrent creators, durable settings, clock modes, and calls cancelled mid-transaction.
//! Each test makes its own database and drops it.

use std::sync::Arc;
use std::time::Duration;

use lease_domain::{
    ClaimRefused, ClockMode, JobId, JobResult, LeaseTerm, Owner, QueueName, Ttl, WriteRefused,
};
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

async fn init(db: &ScratchDatabase, options: PgOptions) -> PgLeaseStore {
    PgLeaseStore::init(db.url(), options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_worker_cannot_overwrite_the_result_of_the_worker_that_took_over() {
    let db = ScratchDatabase::create();
    let store = init(&db, PgOptions::default()).await;
    let job = id("invoice-42");
    assert!(store.enqueue(&job).await.unwrap());
    let a = store
        .claim(&job, &owner("A"), term(100.0, 10.0))
        .await
        .unwrap()
        .unwrap();
    // A stalls past its lease; B takes over and completes.
    let b = store
        .claim(&job, &owner("B"), term(111.0, 10.0))
        .await
        .unwrap()
        .unwrap();
    assert!(b > a);
    let from_b = JobResult::new("paid by B").unwrap();
    store
        .complete(
            &job,
            &owner("B"),
            b,
            lease_domain::Timestamp::new(112.0).unwrap(),
            &from_b,
        )
        .await
        .unwrap()
        .unwrap();
    // A wakes and writes: refused as stale, and B's result survives.
    let late = store
        .complete(
            &job,
            &owner("A"),
            a,
            lease_domain::Timestamp::new(113.0).unwrap(),
            &JobResult::new("paid by A").unwrap(),
        )
        .await
        .unwrap();
    assert!(
        matches!(
            late,
            Err(WriteRefused::Done { .. }) | Err(WriteRefused::Stale { .. })
        ),
        "{late:?}"
    );
    let state = store.state(&job).await.unwrap().unwrap();
    assert_eq!(
        (state.result.as_deref(), state.fence, state.done),
        (Some("paid by B"), 2, true)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_without_init_is_not_found_and_creates_nothing() {
    let db = ScratchDatabase::create();
    let err = PgLeaseStore::open(db.url(), PgOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("init"), "{err}");
    let missing = PgLeaseStore::open(&format!("{}_nope", db.url()), PgOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(missing, StoreError::NoSuchDatabase { .. }),
        "{missing}"
    );
    assert!(missing.to_string().contains("does not exist"), "{missing}");
    assert!(missing.to_string().contains("createdb"), "{missing}");
    let cause = std::error::Error::source(&missing).expect("the server's error as the source");
    assert!(
        cause.downcast_ref::<tokio_postgres::Error>().is_some(),
        "{cause}"
    );
    assert!(
        !missing.to_string().contains("create it with init"),
        "{missing}"
    );
    // Still nothing there: init works from scratch.
    init(&db, PgOptions::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_holding_anything_else_is_refused_and_left_untouched() {
    let db = ScratchDatabase::create();
    db.execute("CREATE SCHEMA lease; CREATE TABLE lease.invoices(n int); INSERT INTO lease.invoices VALUES (7)").unwrap();
    let err = PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("invoices"), "{err}");
    // Untouched: the foreign table is there with its row, and no lease table was added.
    db.execute("DO $$ BEGIN IF (SELECT n FROM lease.invoices) <> 7 OR to_regclass('lease.jobs') IS NOT NULL THEN RAISE EXCEPTION 'touched'; END IF; END $$").unwrap();
    // Another schema name in the same database is fine.
    let options = PgOptions {
        schema: "work".into(),
        ..PgOptions::default()
    };
    init(&db, options).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_from_a_newer_lease_is_refused() {
    let db = ScratchDatabase::create();
    init(&db, PgOptions::default()).await;
    db.execute("INSERT INTO lease.migrations(version) VALUES (99)")
        .unwrap();
    let err = PgLeaseStore::open(db.url(), PgOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Incompatible { .. }), "{err}");
    let known = lease_postgres::CURRENT_VERSION;
    assert!(
        err.to_string().contains(&format!(
            "at version 99, made by a newer lease (this one knows up to {known})"
        )),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_holding_a_jobs_table_but_no_migration_record_is_refused_untouched() {
    let db = ScratchDatabase::create();
    db.execute("CREATE SCHEMA lease; CREATE TABLE lease.jobs(id text); INSERT INTO lease.jobs VALUES ('theirs')")
        .unwrap();
    let err = PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Incompatible { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("holds tables (jobs) but no lease migration record"),
        "{err}"
    );
    db.execute("DO $$ BEGIN IF (SELECT id FROM lease.jobs) <> 'theirs' OR to_regclass('lease.migrations') IS NOT NULL THEN RAISE EXCEPTION 'touched'; END IF; END $$").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creators_apply_each_migration_once() {
    let db = ScratchDatabase::create();
    let url = db.url().to_owned();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let url = url.clone();
        tasks.spawn(async move {
            let options = PgOptions {
                pool_size: 1,
                ..PgOptions::default()
            };
            let store = PgLeaseStore::init(&url, options).await?;
            store.enqueue(&id("shared")).await
        });
    }
    let mut inserted = 0;
    while let Some(done) = tasks.join_next().await {
        inserted += usize::from(done.unwrap().unwrap());
    }
    assert_eq!(inserted, 1, "exactly one creator inserted the shared job");
    db.execute(&format!(
        "DO $$ BEGIN IF (SELECT count(*) FROM lease.migrations) <> {} THEN RAISE EXCEPTION 'migrated twice'; END IF; END $$",
        lease_postgres::CURRENT_VERSION
    ))
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_commits_synchronously_even_when_the_database_says_otherwise() {
    let db = ScratchDatabase::create();
    db.execute(&format!(
        "ALTER DATABASE {} SET synchronous_commit = off",
        db.name()
    ))
    .unwrap();
    let store = init(&db, PgOptions::default()).await;
    assert_eq!(store.setting("synchronous_commit").await.unwrap(), "on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_store_clock_mode_a_fast_caller_clock_cannot_reclaim_a_live_lease() {
    let db = ScratchDatabase::create();
    let store = init(&db, PgOptions::default().store_clock()).await;
    let server = store.server_now().await.unwrap().get();
    // The server runs on this machine: its clock is this one's.
    let here = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((server - here).abs() < 60.0, "server {server}, here {here}");
    let job = id("j");
    store.enqueue(&job).await.unwrap();
    // A's clock is an hour slow, B's an hour fast: the store's clock decides both.
    store
        .claim(&job, &owner("A"), term(server - 3600.0, 30.0))
        .await
        .unwrap()
        .unwrap();
    let stolen = store
        .claim(&job, &owner("B"), term(server + 3600.0, 30.0))
        .await
        .unwrap();
    assert!(
        matches!(stolen, Err(ClaimRefused::Live { .. })),
        "{stolen:?}"
    );
    let state = store.state(&job).await.unwrap().unwrap();
    assert_eq!(state.owner.as_deref(), Some("A"));
    // The lease runs 30 s from the server's clock, not from A's.
    assert!(
        (state.until - (server + 30.0)).abs() < 5.0,
        "until {} vs server {server}",
        state.until
    );
    // claim_next answers with the store's now and until.
    store.enqueue(&id("k")).await.unwrap();
    let leases = store
        .claim_next(&QueueName::default(), &owner("C"), term(0.0, 10.0), 1)
        .await
        .unwrap();
    assert_eq!(leases.len(), 1);
    assert!((leases[0].now.get() - server).abs() < 5.0);
    assert!((leases[0].until.get() - leases[0].now.get() - 10.0).abs() < 1e-6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_skew_bound_a_skewed_caller_is_refused_naming_both_clocks_and_nothing_changes() {
    let db = ScratchDatabase::create();
    let store = init(&db, PgOptions::default().skew_bound(Ttl::new(5.0).unwrap())).await;
    let server = store.server_now().await.unwrap().get();
    let job = id("j");
    store.enqueue(&job).await.unwrap();
    let fence = store
        .claim(&job, &owner("A"), term(server, 30.0))
        .await
        .unwrap()
        .unwrap();
    let before = store.record(&job).await.unwrap();
    let err = store
        .claim(&job, &owner("B"), term(server + 120.0, 30.0))
        .await
        .unwrap_err();
    let StoreError::ClockSkew(skew) = &err else {
        panic!("expected a clock skew, got {err}")
    };
    assert_eq!(skew.caller, server + 120.0);
    assert!((skew.store - server).abs() < 5.0);
    assert!(
        err.to_string().contains(&format!("{}", server + 120.0)),
        "{err}"
    );
    let release = store.release(&job, &owner("A"), fence).await;
    assert!(
        release.is_ok(),
        "release carries no time and is never refused for skew"
    );
    let err = store
        .claim_next(
            &QueueName::default(),
            &owner("B"),
            term(server - 60.0, 30.0),
            1,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ClockSkew(_)), "{err}");
    let after = store.record(&job).await.unwrap().unwrap();
    assert_eq!(
        after.job.fence,
        before.unwrap().job.fence,
        "no claim went through"
    );
    assert_eq!(
        store.clock_mode(),
        ClockMode::Caller {
            max_skew: Some(Ttl::new(5.0).unwrap())
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_inside_its_transaction_leaves_no_lock_behind() {
    let db = ScratchDatabase::create();
    let store = Arc::new(init(&db, PgOptions::default()).await);
    let job = id("j");
    store.enqueue(&job).await.unwrap();
    // Someone else holds the row, so the claim waits inside its transaction; it is then
    // cancelled there, and the row is given back.
    let holder = db.client().await.unwrap();
    holder
        .batch_execute("BEGIN; SELECT * FROM lease.jobs WHERE id = 'j' FOR UPDATE")
        .await
        .unwrap();
    let waiting = {
        let (s, job) = (Arc::clone(&store), job.clone());
        tokio::spawn(async move { s.claim(&job, &owner("gone"), term(1e9, 1.0)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    waiting.abort();
    let _ = waiting.await;
    holder.batch_execute("COMMIT").await.unwrap();
    // Another process (its own pool) can take the row at once: the cancelled transaction did
    // not get the lock after the holder let go and keep it while idle in the pool.
    let other = PgLeaseStore::open(db.url(), PgOptions::default())
        .await
        .unwrap();
    let claimed = tokio::time::timeout(
        Duration::from_secs(5),
        other.claim(&job, &owner("next"), term(2e9, 1.0)),
    )
    .await
    .expect("the cancelled call left the row locked")
    .unwrap();
    assert!(claimed.is_ok(), "{claimed:?}");
    assert_eq!(
        store.state(&job).await.unwrap().unwrap().owner.as_deref(),
        Some("next")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_next_reads_candidates_in_index_order_even_with_stale_statistics() {
    let db = ScratchDatabase::create();
    init(&db, PgOptions::default()).await;
    // Statistics taken while every job was done, then a burst of enqueues they have not
    // seen, and live leases in front.
    db.execute(
        "INSERT INTO lease.jobs(id, queue, done) SELECT 'a' || g, 'q', true FROM generate_series(1, 5000) g; \
         ANALYZE lease.jobs; \
         INSERT INTO lease.jobs(id, queue) SELECT 'j' || g, 'q' FROM generate_series(1, 100000) g; \
         UPDATE lease.jobs SET owner = 'w', until = 1e12, leased_until = 1e12, fence = 1 \
         WHERE seq <= 1000",
    )
    .unwrap();
    let client = db.client().await.unwrap();
    client
        .batch_execute(&format!(
            // The store's settings, which take the generic plan.
            "SET {}",
            lease_postgres::CLAIM_NEXT_SETTINGS.join("; SET ")
        ))
        .await
        .unwrap();
    let candidates = lease_postgres::StatementTexts::new("lease").candidates;
    let plan: Vec<String> = client
        .query(
            &format!("EXPLAIN {candidates}"),
            &[&"q", &Some(5.0_f64), &1_i64],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let plan = plan.join("\n");
    // The unheld jobs come from the ready index in claim order, the ended leases from the
    // index of lease ends; the one sort merges what those two returned (at most the limit
    // from the first).
    assert!(plan.contains("Index Scan using jobs_ready"), "{plan}");
    assert!(plan.contains("Index Scan using jobs_leased"), "{plan}");
    // The ended leases are updated by primary key, never by scanning the table.
    assert!(plan.contains("Index Scan using jobs_pkey"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "{plan}");
    assert_eq!(plan.matches("Sort Key").count(), 1, "{plan}");
    assert!(plan.contains("Sort Key: unheld.priority DESC"), "{plan}");
    // That sort is costed as disabled; the statement must not be compiled for it.
    assert!(!plan.contains("JIT"), "{plan}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_error_stays_as_the_source_of_the_store_error() {
    let db = ScratchDatabase::create();
    let store = init(&db, PgOptions::default()).await;
    store.enqueue(&id("j")).await.unwrap();
    db.client()
        .await
        .unwrap()
        .batch_execute("ALTER TABLE lease.jobs ADD CONSTRAINT low CHECK (fence < 1) NOT VALID")
        .await
        .unwrap();
    let err = store
        .claim(&id("j"), &owner("a"), term(1.0, 5.0))
        .await
        .expect_err("the constraint refuses fence 1");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    let source = std::error::Error::source(&err).expect("the server's error is the source");
    let server = source
        .downcast_ref::<tokio_postgres::Error>()
        .expect("a tokio-postgres error");
    assert_eq!(
        server.code(),
        Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_edited_after_it_was_applied_is_refused_at_open() {
    let db = ScratchDatabase::create();
    let store = init(&db, PgOptions::default()).await;
    store.enqueue(&id("kept")).await.unwrap();
    store.close();
    let client = db.client().await.unwrap();
    client
        .batch_execute("UPDATE lease.migrations SET checksum = repeat('0', 64) WHERE version = 2")
        .await
        .unwrap();
    let err = PgLeaseStore::open(db.url(), PgOptions::default())
        .await
        .expect_err("an edited migration is refused");
    assert!(matches!(err, StoreError::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("migration 2 was changed"), "{err}");
    // Nothing was touched: the recorded checksum and the job stay.
    let recorded: String = client
        .query_one(
            "SELECT checksum FROM lease.migrations WHERE version = 2",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(recorded, "0".repeat(64));
    let jobs: i64 = client
        .query_one("SELECT count(*) FROM lease.jobs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(jobs, 1);
    // A migration no build of this one knows is refused the same way.
    client
        .batch_execute(
            "UPDATE lease.migrations SET checksum = NULL WHERE version = 2; \
             INSERT INTO lease.migrations(version, checksum) VALUES (2, NULL) ON CONFLICT DO NOTHING",
        )
        .await
        .unwrap();
    PgLeaseStore::open(db.url(), PgOptions::default())
        .await
        .expect("a missing checksum is recorded, not refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_another_program_inserts_gets_the_domains_defaults() {
    let db = ScratchDatabase::create();
    let store = init(&db, PgOptions::default()).await;
    db.client()
        .await
        .unwrap()
        .batch_execute("INSERT INTO lease.jobs(id) VALUES ('foreign')")
        .await
        .unwrap();
    let record = store.record(&id("foreign")).await.unwrap().unwrap();
    assert_eq!(record.job.queue, QueueName::default());
    assert_eq!(record.job.queue.as_str(), QueueName::DEFAULT);
    assert_eq!(
        record.job.max_attempts,
        lease_domain::EnqueueSpec::DEFAULT_MAX_ATTEMPTS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_holding_a_function_a_type_a_view_or_a_sequence_is_refused_untouched() {
    let cases = [
        (
            "CREATE FUNCTION lease.admit_fence(text, bigint) RETURNS bigint LANGUAGE sql \
             AS 'select 42'",
            "admit_fence",
            "SELECT lease.admit_fence('k', 1) = 42",
        ),
        (
            "CREATE TYPE lease.mood AS ENUM ('ok')",
            "mood",
            "SELECT 'ok'::lease.mood = 'ok'",
        ),
        (
            "CREATE PROCEDURE lease.tidy() LANGUAGE sql AS 'select 1'",
            "tidy",
            "SELECT count(*) = 1 FROM pg_proc WHERE proname = 'tidy'",
        ),
        (
            "CREATE VIEW lease.v AS SELECT 1 AS one",
            "\"v\"",
            "SELECT one = 1 FROM lease.v",
        ),
        (
            "CREATE SEQUENCE lease.counter",
            "counter",
            "SELECT to_regclass('lease.counter') IS NOT NULL",
        ),
    ];
    for (make, named, still) in cases {
        let db = ScratchDatabase::create();
        db.execute(&format!("CREATE SCHEMA lease; {make}")).unwrap();
        let err = PgLeaseStore::init(db.url(), PgOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Incompatible { .. }), "{err}");
        assert!(err.to_string().contains(named), "{make}: {err}");
        let client = db.client().await.unwrap();
        let kept: bool = client.query_one(still, &[]).await.unwrap().get(0);
        assert!(kept, "{make}: the object was changed");
        let tables: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = 'lease' AND c.relkind = 'r'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(tables, 0, "{make}: lease added its tables");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_complete_and_claim_next_is_audited_and_still_claims() {
    let db = ScratchDatabase::create();
    let options = PgOptions {
        audit: Some(100),
        ..PgOptions::default()
    };
    let store = std::sync::Arc::new(init(&db, options).await);
    lease_ports::observed_story::a_refused_completion_is_audited_and_its_claim_goes_on(
        store.clone(),
        store.as_ref(),
    )
    .await;
    lease_ports::observed_story::a_wrong_lease_token_is_refused_and_audited_by_the_store(
        store.as_ref(),
        store.as_ref(),
    )
    .await;
    lease_ports::observed_story::every_refused_holder_write_is_audited_and_read_back(
        store.as_ref(),
        store.as_ref(),
    )
    .await;
    // A newer writer's row (an operation and a reason this version does not know) reads as
    // unknown, and the rest of the trail still reads.
    db.execute(
        "INSERT INTO lease.audit(time, job, owner, operation, presented, current, reason, \
         late_by) VALUES (2e9, 'later', 'w', 'rewind', 3, 4, 'overtaken', NULL)",
    )
    .expect("insert a newer writer's row");
    let rows = lease_ports::audit::AuditTrail::refusals(
        store.as_ref(),
        &lease_ports::audit::AuditFilter::default(),
    )
    .await
    .expect("the trail reads");
    let last = rows.last().expect("rows");
    assert_eq!(
        (
            last.job.as_str(),
            last.operation.as_str(),
            last.reason.as_str()
        ),
        ("later", "unknown", "unknown")
    );
}
