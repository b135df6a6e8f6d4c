//! The groups' heads on PostgreSQL (migration 16): written by the trigger as jobs become ready,
//! moved on by claims that walk by heads, checked and rebuilt by an operator, and a held
//! group's backlog passed by a claim of another group. Each test makes its own database.

use lease_domain::{
    Concurrency, EnqueueSpec, GroupKey, JobId, LeaseTerm, Limits, Owner, QueueChange, QueueName,
};
use lease_ports::control::Control;
use lease_ports::transfer::Transfer;
use lease_ports::{ClaimNext, LeaseStore};
use lease_postgres::{PgLeaseStore, PgOptions, ScratchDatabase};

fn queue() -> QueueName {
    QueueName::new("q").unwrap()
}

fn group(name: &str) -> GroupKey {
    GroupKey::new(name).unwrap()
}

async fn enqueue(store: &PgLeaseStore, id: &str, grp: &str) {
    let spec = EnqueueSpec {
        queue: queue(),
        group: Some(group(grp)),
        ..EnqueueSpec::default()
    };
    store
        .enqueue_with(&JobId::new(id).unwrap(), &spec)
        .await
        .unwrap();
}

async fn claim(store: &PgLeaseStore, now: f64) -> Vec<String> {
    let claim = ClaimNext::new(
        &queue(),
        &Owner::new("w").unwrap(),
        LeaseTerm::new(now, 30.0).unwrap(),
        1,
    );
    store
        .claim_next_with(&claim)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.job.as_str().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_groups_backlog_is_passed_and_a_stray_head_is_found_and_rebuilt() {
    let db = ScratchDatabase::create();
    let store = PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .unwrap();
    let per_group = Limits {
        per_group: Some(Concurrency::new(1)),
        ..Limits::default()
    };
    store
        .change_queue(&queue(), QueueChange::Limits(per_group))
        .await
        .unwrap();
    for n in 0..200 {
        enqueue(&store, &format!("big-{n:03}"), "big").await;
    }
    enqueue(&store, "small-1", "small").await;
    enqueue(&store, "small-2", "small").await;
    let sound = store.check_heads(false).await.unwrap();
    assert_eq!((sound.heads, sound.stray.len()), (2, 0));

    // The first claim takes big's head; then big is full and the next claims pass its
    // backlog for small's jobs, in order, and then nothing.
    assert_eq!(claim(&store, 1.0).await, ["big-000"]);
    assert_eq!(claim(&store, 2.0).await, ["small-1"]);
    assert_eq!(claim(&store, 3.0).await, Vec::<String>::new());
    assert!(store.check_heads(false).await.unwrap().stray.is_empty());

    // A head removed or moved past its group's first ready job is found, and rebuilt.
    db.execute(
        "DELETE FROM lease.group_heads WHERE grp = 'small'; \
         UPDATE lease.group_heads SET seq = 1000000 WHERE grp = 'big'",
    )
    .unwrap();
    let stray = store.check_heads(false).await.unwrap();
    assert_eq!(
        stray.stray,
        [(queue(), group("big")), (queue(), group("small"))]
    );
    let rebuilt = store.check_heads(true).await.unwrap();
    assert_eq!((rebuilt.heads, rebuilt.stray.len()), (2, 0));
}

/// A claim reads ahead by the settings it last read for its queue; settings changed since by
/// another process (another store on the same database) are obeyed, whichever way they
/// changed, and an expired lease is claimed again on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reading_ahead_obeys_settings_another_process_changed() {
    let db = ScratchDatabase::create();
    let store = PgLeaseStore::init(db.url(), PgOptions::default())
        .await
        .unwrap();
    let other = PgLeaseStore::open(db.url(), PgOptions::default())
        .await
        .unwrap();
    let limits = |n: Option<u32>| {
        QueueChange::Limits(Limits {
            per_group: Some(n.and_then(Concurrency::new)),
            ..Limits::default()
        })
    };
    store.change_queue(&queue(), limits(Some(1))).await.unwrap();
    for n in 0..3 {
        enqueue(&store, &format!("a-{n}"), "a").await;
    }
    enqueue(&store, "b-0", "b").await;
    // Under a limit of one per group: a's head, then b's, then nothing (the store now reads
    // ahead for a walk by heads).
    assert_eq!(claim(&store, 1.0).await, ["a-0"]);
    assert_eq!(claim(&store, 2.0).await, ["b-0"]);
    assert_eq!(claim(&store, 3.0).await, Vec::<String>::new());
    // Another process removes the limit: the next claim, read ahead for the limit, takes a's
    // next job as a plain queue does.
    other.change_queue(&queue(), limits(None)).await.unwrap();
    assert_eq!(claim(&store, 4.0).await, ["a-1"]);
    // It puts the limit back: a is full (two running), the claim that last read a plain
    // queue takes nothing.
    other.change_queue(&queue(), limits(Some(1))).await.unwrap();
    assert_eq!(claim(&store, 5.0).await, Vec::<String>::new());
    // At 32 a-0's and b-0's leases have ended (30 s) while a-1 runs: a is still full, b-0 is
    // taken again; once a-1's ends too, the claim read ahead takes a-0 back, in claim order.
    assert_eq!(claim(&store, 32.0).await, ["b-0"]);
    assert_eq!(claim(&store, 35.0).await, ["a-0"]);
}
