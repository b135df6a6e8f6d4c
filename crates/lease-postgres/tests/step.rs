//! Migration 7's `step` function, which decides the queue loop's writes in one statement: the
//! store decides every row it answers again with the domain and refuses an answer that differs
//! (a fault seeded in each of its rules is caught), its nested statements keep to the indexes
//! whatever the statistics say (their plans, read through `auto_explain`), and under the
//! store's clock a completion and the claim after it are both decided at the server's now.

use futures::StreamExt;
use lease_domain::{Fence, JobId, JobResult, LeaseTerm, Owner, QueueName};
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

/// A store in a fresh database holding pending jobs `jobs` of the default queue.
async fn store_with(jobs: &[&str], options: PgOptions) -> (ScratchDatabase, PgLeaseStore) {
    let db = ScratchDatabase::create();
    let store = PgLeaseStore::init(db.url(), options).await.unwrap();
    for job in jobs {
        store.enqueue(&id(job)).await.unwrap();
    }
    (db, store)
}

/// The first lease `claim_next` gives `w` at `now`, for ten seconds.
async fn first_lease(store: &PgLeaseStore, now: f64) -> lease_ports::Lease {
    store
        .claim_next(&QueueName::default(), &owner("w"), term(now, 10.0), 1)
        .await
        .unwrap()
        .remove(0)
}

/// Replaces `from` with `to` in the definition of `lease.step` (once, and it must be there).
async fn seed_fault(db: &ScratchDatabase, from: &str, to: &str) {
    let client = db.client().await.unwrap();
    let def: String = client
        .query_one("SELECT pg_get_functiondef('lease.step'::regproc)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(def.matches(from).count(), 1, "{from:?} is not in step once");
    client.batch_execute(&def.replace(from, to)).await.unwrap();
}

fn assert_disagrees<T: std::fmt::Debug>(answer: Result<T, StoreError>, what: &str) {
    match answer {
        Err(StoreError::Corrupt(detail)) => assert!(
            detail
                .to_string()
                .contains("the step function (migration 7) and lease_domain disagree"),
            "{what}: {detail}"
        ),
        other => panic!("{what}: the fault went unseen: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_does_not_count_its_attempt_is_caught() {
    let (db, store) = store_with(&["a"], PgOptions::default()).await;
    seed_fault(&db, "attempts = j.attempts + 1", "attempts = j.attempts").await;
    let q = QueueName::default();
    let answer = store.claim_next(&q, &owner("w"), term(1.0, 10.0), 1).await;
    assert_disagrees(answer, "claim_next");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_out_of_attempts_that_is_leased_instead_of_buried_is_caught() {
    let (db, store) = store_with(&["a"], PgOptions::default()).await;
    db.execute("UPDATE lease.jobs SET max_attempts = 1, attempts = 1")
        .unwrap();
    seed_fault(
        &db,
        "IF o_attempts >= greatest(o_max_attempts, 1) THEN",
        "IF o_attempts > greatest(o_max_attempts, 1) THEN",
    )
    .await;
    let q = QueueName::default();
    let answer = store.claim_next(&q, &owner("w"), term(1.0, 10.0), 1).await;
    assert_disagrees(answer, "claim_next");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_written_otherwise_than_the_domain_decides_is_caught() {
    // (fault seeded, the completion's time: a lease of ten seconds from 1.0)
    let faults = [
        (
            (
                "done = true, result_fence = p_fence,",
                "done = true, result_fence = p_fence + 1,",
            ),
            2.0,
        ),
        // Accepted where the domain refuses it: the lease has expired.
        (("AND o_until > v_done_at THEN", "THEN"), 50.0),
    ];
    let (q, result) = (QueueName::default(), JobResult::new("r").unwrap());
    for ((from, to), at) in faults {
        let (db, store) = store_with(&["a", "b"], PgOptions::default()).await;
        let lease = first_lease(&store, 1.0).await;
        seed_fault(&db, from, to).await;
        let (me, fence, term) = (owner("w"), lease.fence, term(at, 10.0));
        let answer = store
            .complete_and_claim_next(&lease.job, &me, fence, &result, &q, term, 1)
            .await;
        assert_disagrees(answer, to);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_stores_clock_a_completion_and_its_claim_are_decided_at_the_servers_now() {
    let (_db, store) = store_with(&["a", "b"], PgOptions::default().store_clock()).await;
    let q = QueueName::default();
    let server = store.server_now().await.unwrap().get();
    let first = first_lease(&store, 0.0).await;
    // The caller's clock reads an hour ahead: by it the lease (10 s from the server's now)
    // would have ended long ago, and the completion would be refused.
    let result = JobResult::new("r").unwrap();
    let (done, next) = store
        .complete_and_claim_next(
            &first.job,
            &owner("w"),
            first.fence,
            &result,
            &q,
            term(server + 3600.0, 30.0),
            1,
        )
        .await
        .unwrap();
    assert_eq!(done, Ok(()));
    let next = next.unwrap().remove(0);
    assert!((next.now.get() - server).abs() < 60.0, "{next:?}");
    assert!(
        (next.until.get() - next.now.get() - 30.0).abs() < 1e-6,
        "{next:?}"
    );
    let record = store.record(&first.job).await.unwrap().unwrap();
    let updated = record.job.updated.unwrap().get();
    assert!((updated - server).abs() < 60.0, "completed at {updated}");
    assert_eq!(
        record.job.result_fence,
        Some(Fence::try_from(1_i64).unwrap())
    );
}

/// Runs `sql` on a connection of its own and returns every notice the server sent.
async fn notices_of(db: &ScratchDatabase, sql: &str) -> Vec<String> {
    let (client, mut connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let (sent, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    let task = tokio::spawn(async move {
        let mut messages = std::pin::pin!(messages);
        while let Some(message) = messages.next().await {
            if let Ok(tokio_postgres::AsyncMessage::Notice(notice)) = message {
                let _ = sent.send(notice.message().to_owned());
            }
        }
    });
    client.batch_execute(sql).await.unwrap();
    drop(client);
    task.await.unwrap();
    let mut notices = Vec::new();
    while let Ok(notice) = heard.try_recv() {
        notices.push(notice);
    }
    notices
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_steps_statements_keep_to_the_indexes_even_with_stale_statistics() {
    let db = ScratchDatabase::create();
    let store = PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .unwrap();
    // Statistics taken while every job was done, then a burst of enqueues they have not seen,
    // live leases in front and leases that have ended.
    db.execute(
        "INSERT INTO lease.jobs(id, queue, done) SELECT 'a' || g, 'q', true FROM generate_series(1, 5000) g; \
         ANALYZE lease.jobs; \
         INSERT INTO lease.jobs(id, queue) SELECT 'j' || g, 'q' FROM generate_series(1, 100000) g; \
         UPDATE lease.jobs SET owner = 'w', until = 1e12, leased_until = 1e12, fence = 1 \
         WHERE seq BETWEEN 5001 AND 6000; \
         UPDATE lease.jobs SET owner = 'w', until = 1, leased_until = 1, fence = 1 \
         WHERE seq BETWEEN 6001 AND 6010",
    )
    .unwrap();
    // A completion of one of the live leases, then a claim of two.
    let notices = notices_of(
        &db,
        "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; \
         SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice; \
         SELECT * FROM lease.step('j1', 'w', 1, 'r', 5.0, 'q', 'w', 2, '{}'::bytea[], NULL, \
         5.0, 65.0, 60.0, false, 'expired', 'released')",
    )
    .await;
    let plans: Vec<&String> = notices
        .iter()
        .filter(|n| n.contains("Query Text"))
        .collect();
    let find = |text: &str| {
        plans
            .iter()
            .find(|p| p.contains(text))
            .unwrap_or_else(|| panic!("no plan of {text:?} among {plans:#?}"))
    };
    let candidates = find("ORDER BY c.priority DESC");
    assert!(
        candidates.contains("Index Scan using jobs_ready"),
        "{candidates}"
    );
    let refile = find("e.leased_until <= v_now");
    assert!(refile.contains("Index Scan using jobs_leased"), "{refile}");
    assert!(refile.contains("Index Scan using jobs_pkey"), "{refile}");
    let lock = find("WHERE j.id = p_job FOR UPDATE");
    assert!(lock.contains("Index Scan using jobs_pkey"), "{lock}");
    for plan in &plans {
        // The store's epoch is the one row of its table (migration 15): read whole.
        let scans = plan.matches("Seq Scan").count();
        let of_epoch = plan.matches("Seq Scan on epoch").count();
        assert_eq!(scans, of_epoch, "{plan}");
        assert!(!plan.contains("Sort"), "{plan}");
        assert!(!plan.contains("JIT"), "{plan}");
    }
    // The step did what it was asked: the completion and two leases, the ended leases
    // filed with the unheld jobs.
    let done = store.record(&id("j1")).await.unwrap().unwrap();
    assert!(done.job.done);
    let ended = store.record(&id("j1001")).await.unwrap().unwrap();
    assert_eq!(
        ended.job.fence,
        Fence::try_from(2_i64).unwrap(),
        "{ended:?}"
    );
}
