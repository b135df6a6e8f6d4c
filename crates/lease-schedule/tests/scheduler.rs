//! The scheduler over a real store (SQLite): a pass fires each due tick once, as the catch-up
//! policy says after downtime; passes racing over one schedule (many tasks of one store, and
//! many stores of one file, as separate processes would be) make one job per tick; and a
//! schedule another program stored wrong is named, not fatal.

use std::sync::Arc;

use lease_domain::{CatchUp, EnqueueSpec, QueueName, ScheduleName, ScheduleSpec, Timestamp};
use lease_ports::LeaseStore;
use lease_ports::control::Control;
use lease_schedule::{run_due, run_now};
use lease_sqlite::SqliteLeaseStore;

fn at(t: f64) -> Timestamp {
    Timestamp::new(t).unwrap()
}

/// 2026-01-01T00:00:00Z.
const NEW_YEAR: f64 = 1_767_225_600.0;

fn spec(name: &str, cron: &str, catch_up: CatchUp) -> ScheduleSpec {
    ScheduleSpec {
        name: ScheduleName::new(name).unwrap(),
        cron: cron.to_owned(),
        zone: "UTC".to_owned(),
        job: EnqueueSpec {
            queue: QueueName::new("ticks").unwrap(),
            priority: 4,
            ..EnqueueSpec::default()
        },
        catch_up,
    }
}

fn store(dir: &tempfile::TempDir) -> SqliteLeaseStore {
    let path = dir.path().join("s.db");
    lease_sqlite::init_db(&path).unwrap();
    SqliteLeaseStore::open(&path).unwrap()
}

async fn ids(store: &SqliteLeaseStore) -> Vec<String> {
    let filter = lease_ports::ListFilter {
        queue: Some(QueueName::new("ticks").unwrap()),
        status: None,
        limit: 10_000,
        after: None,
        now: at(NEW_YEAR),
        group: None,
        prefix: None,
    };
    store
        .list(&filter)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id.as_str().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_fires_each_due_tick_once_with_the_schedules_job() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    store
        .put_schedule(&spec("m", "*/5 * * * *", CatchUp::Latest), at(NEW_YEAR))
        .await
        .unwrap();
    // Nothing before the first tick after its making.
    let pass = run_due(&store, at(NEW_YEAR + 299.0)).await.unwrap();
    assert!(pass.fired.is_empty());
    assert_eq!(pass.next, Some(at(NEW_YEAR + 300.0)));
    let pass = run_due(&store, at(NEW_YEAR + 300.0)).await.unwrap();
    assert_eq!(pass.fired.len(), 1);
    assert_eq!(ids(&store).await, ["m@2026-01-01T00:05:00Z"]);
    // The same tick again, from this pass or a later one, fires nothing.
    assert!(
        run_due(&store, at(NEW_YEAR + 300.0))
            .await
            .unwrap()
            .fired
            .is_empty()
    );
    assert!(
        run_due(&store, at(NEW_YEAR + 599.0))
            .await
            .unwrap()
            .fired
            .is_empty()
    );
    let job = store
        .record(&lease_domain::JobId::new("m@2026-01-01T00:05:00Z").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (job.job.priority, job.job.updated),
        (4, Some(at(NEW_YEAR + 300.0)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_by_hand_enqueues_the_schedules_job_now_and_leaves_its_ticks_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let made = store
        .put_schedule(&spec("m", "*/5 * * * *", CatchUp::Latest), at(NEW_YEAR))
        .await
        .unwrap();
    let missing = ScheduleName::new("nope").unwrap();
    assert_eq!(
        run_now(&store, &missing, at(NEW_YEAR + 10.0))
            .await
            .unwrap(),
        None
    );
    let ran = run_now(&store, &made.spec.name, at(NEW_YEAR + 10.0))
        .await
        .unwrap()
        .expect("the schedule exists");
    assert_eq!(
        (ran.id.as_str(), ran.queue.as_str(), ran.inserted),
        ("m@run-2026-01-01T00:00:10Z", "ticks", true)
    );
    // Asked again within the second: the same job, not a second one.
    let again = run_now(&store, &made.spec.name, at(NEW_YEAR + 10.5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.id, again.inserted), (ran.id.clone(), false));
    let job = store.record(&ran.id).await.unwrap().unwrap();
    assert_eq!(
        (job.job.priority, job.job.updated),
        (4, Some(at(NEW_YEAR + 10.0)))
    );
    // The schedule is as it was, and its first tick still fires.
    assert_eq!(store.schedules().await.unwrap(), vec![made]);
    run_due(&store, at(NEW_YEAR + 300.0)).await.unwrap();
    assert_eq!(
        ids(&store).await,
        ["m@2026-01-01T00:05:00Z", "m@run-2026-01-01T00:00:10Z"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_downtime_each_catch_up_policy_enqueues_what_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    for (name, policy) in [
        ("latest", CatchUp::Latest),
        ("none", CatchUp::Skip),
        ("all", CatchUp::All(3)),
    ] {
        store
            .put_schedule(&spec(name, "* * * * *", policy), at(NEW_YEAR))
            .await
            .unwrap();
    }
    // Ten minutes down, back 30 s after a tick.
    run_due(&store, at(NEW_YEAR + 630.0)).await.unwrap();
    let mut made = ids(&store).await;
    made.sort();
    assert_eq!(
        made,
        [
            "all@2026-01-01T00:08:00Z",
            "all@2026-01-01T00:09:00Z",
            "all@2026-01-01T00:10:00Z",
            "latest@2026-01-01T00:10:00Z",
            "none@2026-01-01T00:10:00Z",
        ]
    );
    // `none` after a longer silence: the minutes missed never fire; the one just due does.
    run_due(&store, at(NEW_YEAR + 960.0 + 1.0)).await.unwrap();
    let none: Vec<String> = ids(&store)
        .await
        .into_iter()
        .filter(|id| id.starts_with("none@"))
        .collect();
    assert_eq!(
        none,
        ["none@2026-01-01T00:10:00Z", "none@2026-01-01T00:16:00Z"]
    );
    // An hourly `none` whose tick is two minutes old by the time a pass comes: no job, and its
    // last tick moves on, so that tick never fires later.
    store
        .put_schedule(&spec("hourly", "@hourly", CatchUp::Skip), at(NEW_YEAR))
        .await
        .unwrap();
    run_due(&store, at(NEW_YEAR + 3600.0 + 120.0))
        .await
        .unwrap();
    assert!(!ids(&store).await.iter().any(|id| id.starts_with("hourly@")));
    let schedules = store.schedules().await.unwrap();
    let skipped = schedules
        .iter()
        .find(|s| s.spec.name.as_str() == "hourly")
        .unwrap();
    assert_eq!(skipped.last_tick, Some(at(NEW_YEAR + 3600.0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_schedulers_racing_over_one_schedule_make_one_job_per_tick() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    lease_sqlite::init_db(&path).unwrap();
    // Eight schedulers, each with a store of its own over the file (as eight processes would
    // have), and eight tasks sharing one store: every minute of an hour, all at once.
    let own: Vec<Arc<SqliteLeaseStore>> = (0..8)
        .map(|_| Arc::new(SqliteLeaseStore::open(&path).unwrap()))
        .collect();
    let shared = Arc::new(SqliteLeaseStore::open(&path).unwrap());
    shared
        .put_schedule(&spec("race", "* * * * *", CatchUp::All(5)), at(NEW_YEAR))
        .await
        .unwrap();
    let mut fires = 0;
    for minute in 1..=60 {
        let now = at(NEW_YEAR + f64::from(minute) * 60.0 + 1.0);
        let passes: Vec<_> = own
            .iter()
            .cloned()
            .chain(std::iter::repeat_n(Arc::clone(&shared), 8))
            .map(|store| tokio::spawn(async move { run_due(&*store, now).await.unwrap() }))
            .collect();
        for pass in passes {
            fires += pass.await.unwrap().fired.len();
        }
    }
    let made = ids(&shared).await;
    assert_eq!(made.len(), 60, "{made:?}");
    assert_eq!(fires, 60, "a tick fired more than once");
    let unique: std::collections::BTreeSet<&String> = made.iter().collect();
    assert_eq!(unique.len(), 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_stored_wrong_is_named_and_the_others_fire() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    store
        .put_schedule(&spec("good", "@hourly", CatchUp::Latest), at(NEW_YEAR))
        .await
        .unwrap();
    store
        .put_schedule(&spec("bad", "@hourly", CatchUp::Latest), at(NEW_YEAR))
        .await
        .unwrap();
    rusqlite::Connection::open(dir.path().join("s.db"))
        .unwrap()
        .execute(
            "UPDATE lease_schedules SET cron = 'every tuesday' WHERE name = 'bad'",
            [],
        )
        .unwrap();
    let pass = run_due(&store, at(NEW_YEAR + 3600.0)).await.unwrap();
    assert_eq!(pass.fired.len(), 1);
    assert_eq!(pass.unreadable.len(), 1);
    assert!(
        pass.unreadable[0].1.contains("\"every tuesday\""),
        "{pass:?}"
    );
}
