//! The workflow checks of the conformance suite (issue 38): jobs that run after other jobs.
//! Each is a public `async fn` taking a fresh store, as in [`crate::conformance`];
//! [`workflow_conformance_tests!`](crate::workflow_conformance_tests) makes one test of each.
//! Checks panic with a message on a violation.

use crate::conformance::Store;
use crate::{
    Checkpoint, CheckpointName, CheckpointValue, ClaimRefused, EnqueueSpec, ErrorText, Fence,
    JobId, JobResult, Lease, LeaseTerm, ListFilter, OnParentFailure, Owner, QueueName, Retry,
    Status, StoreError, Timestamp, WriteRefused,
};

fn job(id: &str) -> JobId {
    JobId::new(id).expect("valid job id")
}

fn at(now: f64) -> Timestamp {
    Timestamp::new(now).expect("finite time")
}

fn term(now: f64) -> LeaseTerm {
    LeaseTerm::new(now, 30.0).expect("valid term")
}

/// A job of queue `flow` that runs after `after`.
fn after(parents: &[&str]) -> EnqueueSpec {
    EnqueueSpec {
        queue: QueueName::new("flow").expect("queue"),
        after: parents.iter().map(|p| job(p)).collect(),
        ..EnqueueSpec::default()
    }
}

fn flow() -> QueueName {
    QueueName::new("flow").expect("queue")
}

async fn status(store: &Store, id: &str, now: f64) -> Status {
    store
        .record(&job(id))
        .await
        .expect("record reads")
        .unwrap_or_else(|| panic!("{id} exists"))
        .job
        .status_at(at(now))
}

async fn statuses(store: &Store, ids: &[&str], now: f64) -> Vec<Status> {
    let mut found = Vec::new();
    for id in ids {
        found.push(status(store, id, now).await);
    }
    found
}

async fn submit(store: &Store, batch: &[(&str, EnqueueSpec)]) {
    let batch: Vec<(JobId, EnqueueSpec)> = batch
        .iter()
        .map(|(id, spec)| (job(id), spec.clone()))
        .collect();
    store
        .enqueue_many(&batch)
        .await
        .expect("the workflow is stored");
}

async fn leases(store: &Store, now: f64, limit: usize) -> Vec<Lease> {
    store
        .claim_next(&flow(), &Owner::new("w").expect("owner"), term(now), limit)
        .await
        .expect("claim_next works")
}

async fn complete(store: &Store, lease: &Lease, now: f64) -> Result<(), WriteRefused> {
    store
        .complete(
            &lease.job,
            &Owner::new("w").expect("owner"),
            lease.fence,
            at(now),
            &JobResult::new(format!("result of {}", lease.job)).expect("result"),
        )
        .await
        .expect("complete reaches the store")
}

/// Claims and completes every due job of the queue at `now`.
async fn run_due(store: &Store, now: f64) -> Vec<String> {
    let mut ran = Vec::new();
    for lease in leases(store, now, 100_000).await {
        complete(store, &lease, now)
            .await
            .expect("the holder completes");
        ran.push(lease.job.as_str().to_owned());
    }
    ran.sort();
    ran
}

/// Fails the job's live lease at `now` without retry, so it ends dead.
async fn kill(store: &Store, lease: &Lease, now: f64) {
    store
        .fail(
            &lease.job,
            &Owner::new("w").expect("owner"),
            lease.fence,
            at(now),
            &ErrorText::lossy("boom"),
            Retry::No,
        )
        .await
        .expect("fail reaches the store")
        .expect("the holder fails it");
}

fn refusal(result: Result<Vec<bool>, StoreError>) -> String {
    match result {
        Err(StoreError::InvalidInput(e)) => e.to_string(),
        other => panic!("expected the workflow refused as invalid input, got {other:?}"),
    }
}

/// A chain submitted in one batch, parents named before or after their children: only the
/// head is due; each child becomes due when its parent completes, not before, and a claim
/// by id of a waiting job is refused as waiting.
pub async fn a_chain_runs_one_job_after_another(store: Store) {
    submit(
        &store,
        &[
            ("c", after(&["b"])),
            ("b", after(&["a"])),
            ("a", after(&[])),
        ],
    )
    .await;
    let a = store.record(&job("a")).await.expect("reads").expect("a");
    assert!(a.job.after.is_empty());
    let c = store.record(&job("c")).await.expect("reads").expect("c");
    assert_eq!(c.job.after, [job("b")], "the record keeps its parents");
    assert_eq!(c.job.on_parent_failure, OnParentFailure::Cancel);
    assert_eq!(
        statuses(&store, &["a", "b", "c"], 1.0).await,
        [Status::Pending, Status::Waiting, Status::Waiting]
    );
    let refused = store
        .claim(&job("b"), &Owner::new("x").expect("owner"), term(1.0))
        .await
        .expect("claim reaches the store");
    assert_eq!(refused, Err(ClaimRefused::Waiting));
    assert_eq!(run_due(&store, 1.0).await, ["a"]);
    assert_eq!(
        statuses(&store, &["a", "b", "c"], 2.0).await,
        [Status::Done, Status::Pending, Status::Waiting]
    );
    assert_eq!(run_due(&store, 2.0).await, ["b"]);
    assert_eq!(run_due(&store, 3.0).await, ["c"]);
    assert!(leases(&store, 4.0, 10).await.is_empty());
    let counted: u64 = store
        .stats(at(4.0))
        .await
        .expect("stats")
        .iter()
        .filter(|row| row.status == Status::Done)
        .map(|row| row.count)
        .sum();
    assert_eq!(counted, 3);
}

/// A parent that does not exist, a job that names itself and a cycle are refused naming the
/// job, and nothing of the batch is stored.
pub async fn a_missing_parent_a_self_parent_and_a_cycle_are_refused_storing_nothing(store: Store) {
    let batch = |entries: &[(&str, &[&str])]| -> Vec<(JobId, EnqueueSpec)> {
        entries
            .iter()
            .map(|(id, parents)| (job(id), after(parents)))
            .collect()
    };
    let text = refusal(
        store
            .enqueue_many(&batch(&[("x", &[]), ("y", &["ghost"])]))
            .await,
    );
    assert!(text.contains("ghost") && text.contains("job y"), "{text}");
    let text = refusal(
        store
            .enqueue_many(&batch(&[("x", &[]), ("s", &["s"])]))
            .await,
    );
    assert!(text.contains("job s names itself"), "{text}");
    let text = refusal(
        store
            .enqueue_many(&batch(&[("x", &[]), ("p", &["q"]), ("q", &["p"])]))
            .await,
    );
    assert!(text.contains("cycle") && text.contains("job p"), "{text}");
    let text = refusal(
        store
            .enqueue_with(&job("one"), &after(&["nobody"]))
            .await
            .map(|b| vec![b]),
    );
    assert!(text.contains("nobody"), "{text}");
    for id in ["x", "y", "s", "p", "q", "one"] {
        assert!(
            store.record(&job(id)).await.expect("reads").is_none(),
            "{id} was stored by a refused batch"
        );
    }
    // A parent stored earlier is fine, and one that has finished releases the child at once.
    submit(&store, &[("root", after(&[]))]).await;
    assert_eq!(run_due(&store, 1.0).await, ["root"]);
    submit(&store, &[("late", after(&["root"]))]).await;
    assert_eq!(status(&store, "late", 2.0).await, Status::Pending);
}

/// One parent with `children` children: they all wait, and the parent's completion makes
/// every one of them due in its own transaction.
pub async fn a_fan_out_is_released_by_its_parents_completion(store: Store, children: usize) {
    let mut batch = vec![("root".to_owned(), after(&[]))];
    batch.extend((0..children).map(|n| (format!("child-{n:05}"), after(&["root"]))));
    let batch: Vec<(JobId, EnqueueSpec)> = batch
        .into_iter()
        .map(|(id, spec)| (job(&id), spec))
        .collect();
    store
        .enqueue_many(&batch)
        .await
        .expect("the fan-out is stored");
    let count = |rows: Vec<crate::StatsRow>, status: Status| -> u64 {
        rows.iter()
            .filter(|r| r.status == status)
            .map(|r| r.count)
            .sum()
    };
    let rows = store.stats(at(1.0)).await.expect("stats");
    assert_eq!(count(rows, Status::Waiting), children as u64);
    // Its children are read in id order, as many as asked for; a child has none.
    let first: Vec<String> = store
        .children(&job("root"), None, 3)
        .await
        .expect("children")
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect();
    assert_eq!(
        first,
        ["child-00000", "child-00001", "child-00002"][..3.min(children)]
    );
    let all = store.children(&job("root"), None, children + 1).await;
    assert_eq!(all.expect("children").len(), children);
    let next = store
        .children(&job("root"), Some(&job("child-00001")), 1)
        .await;
    let next: Vec<JobId> = next.expect("children");
    assert_eq!(
        next,
        [job("child-00002")][..1.min(children.saturating_sub(2))]
    );
    let none = store.children(&job("child-00000"), None, 10).await;
    assert!(none.expect("children").is_empty());
    let lease = leases(&store, 1.0, 10).await;
    assert_eq!(lease.len(), 1, "only the parent is due");
    complete(&store, &lease[0], 2.0).await.expect("completes");
    let rows = store.stats(at(3.0)).await.expect("stats");
    assert_eq!(count(rows.clone(), Status::Waiting), 0);
    assert_eq!(count(rows, Status::Pending), children as u64);
    let listed = store
        .list(&ListFilter {
            queue: Some(flow()),
            status: Some(Status::Pending),
            limit: 3,
            after: None,
            now: at(3.0),
            group: None,
            prefix: None,
        })
        .await
        .expect("list");
    assert_eq!(listed.len(), 3.min(children));
}

/// One child of `parents` parents waits until the last of them completes.
pub async fn a_fan_in_waits_for_its_last_parent(store: Store, parents: usize) {
    let names: Vec<String> = (0..parents).map(|n| format!("parent-{n:04}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut batch: Vec<(JobId, EnqueueSpec)> = vec![(job("sink"), after(&refs))];
    batch.extend(names.iter().map(|n| (job(n), after(&[]))));
    store
        .enqueue_many(&batch)
        .await
        .expect("the fan-in is stored");
    // Claimed in as many claims as it takes (a claim over the network takes at most 100).
    let mut due = Vec::new();
    loop {
        let page = leases(&store, 1.0, parents + 1).await;
        if page.is_empty() {
            break;
        }
        due.extend(page);
    }
    assert_eq!(due.len(), parents, "every parent, not the sink, is due");
    assert!(due.iter().all(|l| l.job.as_str() != "sink"));
    let last = due.pop().expect("a parent");
    for lease in &due {
        complete(&store, lease, 2.0).await.expect("completes");
    }
    assert_eq!(status(&store, "sink", 3.0).await, Status::Waiting);
    complete(&store, &last, 3.0).await.expect("completes");
    assert_eq!(status(&store, "sink", 4.0).await, Status::Pending);
    assert_eq!(run_due(&store, 4.0).await, ["sink"]);
}

/// The children of one parent are settled together, some cancelled and some due by their
/// policies, and every store's counts (`stats`) move with them: none is left counted as
/// waiting, each is counted where it went.
pub async fn a_generation_of_children_is_settled_and_counted_together(store: Store) {
    let anyway = EnqueueSpec {
        on_parent_failure: OnParentFailure::Run,
        ..after(&["p"])
    };
    let mut batch = vec![("p", after(&[]))];
    batch.extend(["c1", "c2", "c3"].map(|c| (c, after(&["p"]))));
    batch.extend(["r1", "r2"].map(|r| (r, anyway.clone())));
    submit(&store, &batch).await;
    let counted = |rows: Vec<crate::StatsRow>| -> Vec<(Status, u64)> {
        let mut found: Vec<(Status, u64)> = rows
            .into_iter()
            .filter(|r| r.queue == flow())
            .map(|r| (r.status, r.count))
            .collect();
        found.sort_by_key(|(status, _)| status.as_str());
        found
    };
    let rows = store.stats(at(1.0)).await.expect("stats");
    assert_eq!(counted(rows), [(Status::Pending, 1), (Status::Waiting, 5)]);
    let lease = leases(&store, 1.0, 10).await;
    assert_eq!(lease.len(), 1, "only the parent is due");
    kill(&store, &lease[0], 2.0).await;
    let rows = store.stats(at(3.0)).await.expect("stats");
    assert_eq!(
        counted(rows),
        [
            (Status::Cancelled, 3),
            (Status::Dead, 1),
            (Status::Pending, 2)
        ]
    );
    assert_eq!(run_due(&store, 3.0).await, ["r1", "r2"]);
}

/// A parent that ends dead cancels its waiting children, transitively, each with an error
/// naming the parent that ended it; a child that runs whatever its parents' end
/// (`on_parent_failure: run`) becomes due instead. Retrying the dead parent does not revive
/// the cancelled children; retrying a child too makes it wait for its parent again.
pub async fn a_failed_parent_cancels_its_children_unless_they_run_anyway(store: Store) {
    let anyway = EnqueueSpec {
        on_parent_failure: OnParentFailure::Run,
        ..after(&["a"])
    };
    submit(
        &store,
        &[
            ("a", after(&[])),
            ("b", after(&["a"])),
            ("c", after(&["b"])),
            ("d", anyway),
        ],
    )
    .await;
    let lease = leases(&store, 1.0, 10).await;
    assert_eq!(lease.len(), 1);
    kill(&store, &lease[0], 2.0).await;
    assert_eq!(
        statuses(&store, &["a", "b", "c", "d"], 3.0).await,
        [
            Status::Dead,
            Status::Cancelled,
            Status::Cancelled,
            Status::Pending
        ]
    );
    let error = |id: &'static str| {
        let store = store.clone();
        async move {
            store
                .record(&job(id))
                .await
                .expect("reads")
                .expect("exists")
                .job
                .error
                .unwrap_or_default()
        }
    };
    assert_eq!(error("b").await, "cancelled: its parent a ended dead");
    assert_eq!(error("c").await, "cancelled: its parent b ended cancelled");
    assert_eq!(run_due(&store, 3.0).await, ["d"]);
    // Retrying the parent leaves its cancelled children cancelled.
    store
        .retry(&job("a"), at(4.0))
        .await
        .expect("retry reaches the store")
        .expect("a dead job can be retried");
    assert_eq!(status(&store, "b", 4.0).await, Status::Cancelled);
    // Retrying a child too makes it wait for its parent again, then run after it.
    store
        .retry(&job("b"), at(4.0))
        .await
        .expect("retry reaches the store")
        .expect("a cancelled job can be retried");
    assert_eq!(status(&store, "b", 4.0).await, Status::Waiting);
    assert_eq!(run_due(&store, 5.0).await, ["a"]);
    assert_eq!(run_due(&store, 6.0).await, ["b"]);
    assert_eq!(status(&store, "c", 7.0).await, Status::Cancelled);
    // Cancelling a waiting job cancels it, and its own children with it.
    submit(
        &store,
        &[
            ("e", after(&[])),
            ("f", after(&["e"])),
            ("g", after(&["f"])),
        ],
    )
    .await;
    store
        .cancel(&job("f"), at(8.0))
        .await
        .expect("cancel reaches the store")
        .expect("a waiting job can be cancelled");
    assert_eq!(
        statuses(&store, &["e", "f", "g"], 8.0).await,
        [Status::Pending, Status::Cancelled, Status::Cancelled]
    );
}

/// Only the current holder's completion releases the children: a stalled worker whose lease
/// expired and was taken over completes too late, is refused, and releases nothing.
pub async fn a_stale_completion_releases_no_child(store: Store) {
    submit(&store, &[("p", after(&[])), ("child", after(&["p"]))]).await;
    let old = leases(&store, 1.0, 1).await.pop().expect("a lease");
    // The old lease expires at 31; a new worker takes the job.
    let new = leases(&store, 40.0, 1).await.pop().expect("a new lease");
    assert!(new.fence > old.fence);
    let stale = complete(&store, &old, 41.0).await;
    assert!(
        matches!(
            stale,
            Err(WriteRefused::Stale { .. } | WriteRefused::NotOwner { .. })
        ),
        "{stale:?}"
    );
    assert_eq!(status(&store, "child", 42.0).await, Status::Waiting);
    complete(&store, &new, 42.0)
        .await
        .expect("the holder completes");
    assert_eq!(status(&store, "child", 43.0).await, Status::Pending);
    let record = store.record(&job("p")).await.expect("reads").expect("p");
    assert_eq!(record.job.result_fence, Some(new.fence));
    assert_ne!(record.job.result_fence, Some(Fence::ZERO));
}

/// Waiting jobs are kept by `purge` (they have not finished) and listed by their status.
pub async fn waiting_jobs_are_listed_and_never_purged(store: Store) {
    submit(&store, &[("p", after(&[])), ("w", after(&["p"]))]).await;
    let purged = store
        .purge(at(1e9), &Status::ALL)
        .await
        .expect("purge works");
    assert_eq!(purged, 0);
    let listed = store
        .list(&ListFilter {
            queue: None,
            status: Some(Status::Waiting),
            limit: 10,
            after: None,
            now: at(1.0),
            group: None,
            prefix: None,
        })
        .await
        .expect("list");
    let ids: Vec<&str> = listed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["w"]);
}

/// Keeps a checkpoint as `lease`'s holder at `now`.
async fn keep(
    store: &Store,
    lease: &Lease,
    now: f64,
    name: &str,
    value: &str,
) -> Result<(), WriteRefused> {
    let checkpoint = Checkpoint {
        name: CheckpointName::new(name).expect("name"),
        value: CheckpointValue::new(value).expect("value"),
    };
    store
        .checkpoint(
            &lease.job,
            &Owner::new("w").expect("owner"),
            lease.fence,
            at(now),
            &checkpoint,
        )
        .await
        .expect("checkpoint reaches the store")
}

/// What `id` keeps: (name, value, fence) in name order.
async fn kept(store: &Store, id: &str) -> Vec<(String, String, u64)> {
    store
        .checkpoints(&job(id))
        .await
        .expect("checkpoints read")
        .into_iter()
        .map(|c| {
            (
                c.name.as_str().to_owned(),
                c.value.as_str().to_owned(),
                c.fence.get(),
            )
        })
        .collect()
}

fn step(name: &str, value: &str, fence: u64) -> (String, String, u64) {
    (name.to_owned(), value.to_owned(), fence)
}

/// A checkpoint is a fenced write: only the live current lease keeps one (a lapsed or stale
/// attempt is refused and changes nothing); a name written again is replaced; checkpoints
/// outlive an expired lease, a failed attempt and a retry of a dead job; a run again of the
/// finished job starts without them, and a purge takes them with the job.
pub async fn checkpoints_are_fenced_and_kept_across_attempts(store: Store) {
    submit(&store, &[("s", after(&[]))]).await;
    let [first] = <[Lease; 1]>::try_from(leases(&store, 1.0, 1).await).expect("one lease");
    assert_eq!(first.job.as_str(), "s");
    keep(&store, &first, 2.0, "fetch", "v1")
        .await
        .expect("kept");
    keep(&store, &first, 2.0, "parse", "p1")
        .await
        .expect("kept");
    // Its lease lapses: it may not write, and the next attempt's claim makes it stale.
    let late = keep(&store, &first, 40.0, "fetch", "late").await;
    assert!(
        matches!(late, Err(WriteRefused::Expired { .. })),
        "{late:?}"
    );
    let second = leases(&store, 40.0, 1).await;
    let second = second.first().expect("s again");
    let stale = keep(&store, &first, 41.0, "fetch", "stale").await;
    assert!(
        matches!(stale, Err(WriteRefused::Stale { .. })),
        "{stale:?}"
    );
    assert_eq!(
        kept(&store, "s").await,
        [step("fetch", "v1", 1), step("parse", "p1", 1)]
    );
    keep(&store, second, 41.0, "fetch", "v2")
        .await
        .expect("kept");
    assert_eq!(
        kept(&store, "s").await,
        [step("fetch", "v2", 2), step("parse", "p1", 1)]
    );
    let owner = Owner::new("w").expect("owner");
    store
        .fail(
            &second.job,
            &owner,
            second.fence,
            at(42.0),
            &ErrorText::lossy("flaky"),
            Retry::default(),
        )
        .await
        .expect("fail reaches the store")
        .expect("the holder fails it");
    let third = leases(&store, 100.0, 1).await;
    let third = third.first().expect("s is due again");
    kill(&store, third, 101.0).await;
    let dead = keep(&store, third, 102.0, "fetch", "v3").await;
    assert!(matches!(dead, Err(WriteRefused::Dead)), "{dead:?}");
    store
        .retry(&job("s"), at(103.0))
        .await
        .expect("retry reaches the store")
        .expect("a dead job is retried");
    let kept_so_far = [step("fetch", "v2", 2), step("parse", "p1", 1)];
    assert_eq!(kept(&store, "s").await, kept_so_far);
    let fourth = leases(&store, 200.0, 1).await;
    let fourth = fourth.first().expect("s is due after its retry");
    complete(&store, fourth, 201.0).await.expect("completed");
    let done = keep(&store, fourth, 202.0, "fetch", "after").await;
    assert!(matches!(done, Err(WriteRefused::Done { .. })), "{done:?}");
    assert_eq!(kept(&store, "s").await, kept_so_far);
    // A run again starts without them.
    let again = EnqueueSpec {
        replace_finished: true,
        ..after(&[])
    };
    assert!(
        store
            .enqueue_with(&job("s"), &again)
            .await
            .expect("enqueue")
    );
    assert_eq!(kept(&store, "s").await, []);
    // A purge takes them with the job: the id enqueued again starts without them.
    complete(&store, &leases(&store, 250.0, 1).await[0], 251.0)
        .await
        .expect("s completed again");
    submit(&store, &[("t", after(&[]))]).await;
    let t = leases(&store, 300.0, 1).await;
    let t = t.iter().find(|l| l.job.as_str() == "t").expect("t leased");
    keep(&store, t, 301.0, "fetch", "t1").await.expect("kept");
    complete(&store, t, 302.0).await.expect("completed");
    store
        .purge(at(1e9), &[Status::Done])
        .await
        .expect("purge works");
    assert_eq!(kept(&store, "t").await, []);
    submit(&store, &[("t", after(&[]))]).await;
    assert_eq!(kept(&store, "t").await, []);
    let missing = Lease {
        job: job("nobody"),
        ..t.clone()
    };
    let gone = keep(&store, &missing, 303.0, "fetch", "x").await;
    assert!(matches!(gone, Err(WriteRefused::Missing)), "{gone:?}");
}

/// A job keeps at most [`lease_domain::MAX_CHECKPOINTS`] names: a new one past them is
/// refused naming the limit and nothing is kept; a name it keeps may always be written again.
pub async fn a_job_keeps_at_most_the_checkpoint_limit(store: Store) {
    submit(&store, &[("s", after(&[]))]).await;
    let lease = leases(&store, 1.0, 1).await;
    let lease = lease.first().expect("s leased");
    for n in 0..lease_domain::MAX_CHECKPOINTS {
        keep(&store, lease, 2.0, &format!("step-{n:04}"), "ok")
            .await
            .expect("kept");
    }
    let over = store
        .checkpoint(
            &lease.job,
            &Owner::new("w").expect("owner"),
            lease.fence,
            at(2.0),
            &Checkpoint {
                name: CheckpointName::new("one-more").expect("name"),
                value: CheckpointValue::new("x").expect("value"),
            },
        )
        .await;
    match over {
        Err(StoreError::InvalidInput(e)) => {
            assert!(e.to_string().contains("1000 checkpoints"), "{e}");
        }
        other => panic!("a checkpoint past the limit was not refused: {other:?}"),
    }
    keep(&store, lease, 3.0, "step-0000", "again")
        .await
        .expect("a kept name is written again");
    let all = kept(&store, "s").await;
    assert_eq!(all.len(), lease_domain::MAX_CHECKPOINTS);
    assert_eq!(all[0], step("step-0000", "again", 1));
    assert!(all.iter().all(|(name, _, _)| name != "one-more"));
}

/// `migrate` carries a workflow: each job's parents, its policy and whether it waits, so the
/// copy goes on as the source would (its children released by the same completion). Run by
/// [`conformance_tests!`](crate::conformance_tests) on every store that can be moved.
pub async fn export_and_import_carry_a_workflow(transfer: crate::conformance::TransferStore) {
    use crate::transfer::Transfer;
    let store: Store = transfer.clone();
    let anyway = EnqueueSpec {
        on_parent_failure: OnParentFailure::Run,
        ..after(&["a", "b"])
    };
    submit(
        &store,
        &[("a", after(&[])), ("b", after(&["a"])), ("c", anyway)],
    )
    .await;
    // A job of another queue keeps checkpoints.
    let steps = EnqueueSpec {
        queue: QueueName::new("steps").expect("queue"),
        ..EnqueueSpec::default()
    };
    assert!(
        store
            .enqueue_with(&job("k"), &steps)
            .await
            .expect("enqueue")
    );
    let owner = Owner::new("w").expect("owner");
    let k = store
        .claim_next(&steps.queue, &owner, term(0.5), 1)
        .await
        .expect("claim");
    let k = k.first().expect("k leased");
    keep(&store, k, 0.6, "fetch", "rows=3").await.expect("kept");
    keep(&store, k, 0.6, "parse", "ok").await.expect("kept");
    let exported = transfer.export().await.expect("export works");
    assert_eq!(exported.checkpoints.len(), 2);
    let c = exported
        .jobs
        .iter()
        .find(|r| r.id.as_str() == "c")
        .expect("c exported");
    assert_eq!(c.job.after, [job("a"), job("b")]);
    assert_eq!(c.job.on_parent_failure, OnParentFailure::Run);
    assert!(c.job.waiting);
    // Into a fresh store of the same kind as the reference: it goes on as the source would.
    let copy = crate::memory::MemoryLeaseStore::new();
    copy.import(&exported, false).await.expect("import");
    assert_eq!(copy.export().await.expect("export"), exported);
    let copy: Store = std::sync::Arc::new(copy);
    // And back into the source, merged over itself: nothing changes.
    transfer.import(&exported, true).await.expect("merge");
    assert_eq!(transfer.export().await.expect("export"), exported);
    for moved in [&store, &copy] {
        assert_eq!(run_due(moved, 1.0).await, ["a"]);
        assert_eq!(
            statuses(moved, &["b", "c"], 2.0).await,
            [Status::Pending, Status::Waiting]
        );
        assert_eq!(run_due(moved, 2.0).await, ["b"]);
        assert_eq!(status(moved, "c", 3.0).await, Status::Pending);
        assert_eq!(
            kept(moved, "k").await,
            [step("fetch", "rows=3", 1), step("parse", "ok", 1)]
        );
    }
}

/// Makes one `#[tokio::test]` for each workflow check, on the store `$factory()` returns (as
/// [`conformance_tests!`](crate::conformance_tests) does), with a fan-out of 10,000 children
/// and a fan-in of 1,000 parents.
#[macro_export]
macro_rules! workflow_conformance_tests {
    (async $factory:path) => {
        $crate::workflow_conformance_tests!(@all (async) $factory);
    };
    // The checks but the two large ones, for a second configuration of a store whose first
    // runs them all.
    (small async $factory:path) => {
        mod workflow {
            use super::*;
            $crate::workflow_conformance_tests!(@each (async) $factory;
                a_chain_runs_one_job_after_another,
                a_missing_parent_a_self_parent_and_a_cycle_are_refused_storing_nothing,
                a_failed_parent_cancels_its_children_unless_they_run_anyway,
                a_generation_of_children_is_settled_and_counted_together,
                a_stale_completion_releases_no_child,
                waiting_jobs_are_listed_and_never_purged,
                checkpoints_are_fenced_and_kept_across_attempts,
            );
        }
    };
    ($factory:path) => {
        $crate::workflow_conformance_tests!(@all () $factory);
    };
    (@all $mode:tt $factory:path) => {
        mod workflow {
            use super::*;
            $crate::workflow_conformance_tests!(@each $mode $factory;
                a_chain_runs_one_job_after_another,
                a_missing_parent_a_self_parent_and_a_cycle_are_refused_storing_nothing,
                a_failed_parent_cancels_its_children_unless_they_run_anyway,
                a_generation_of_children_is_settled_and_counted_together,
                a_stale_completion_releases_no_child,
                waiting_jobs_are_listed_and_never_purged,
                checkpoints_are_fenced_and_kept_across_attempts,
                a_job_keeps_at_most_the_checkpoint_limit,
            );
            $crate::workflow_conformance_tests!(@sized $mode $factory;
                a_fan_out_is_released_by_its_parents_completion, 10_000;
                a_fan_in_waits_for_its_last_parent, 1_000;
            );
        }
    };
    (@each $mode:tt $factory:path; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let (store, _guard) = $crate::workflow_conformance_tests!(@make $mode $factory);
                $crate::workflow_conformance::$check(store).await;
            }
        )*
    };
    (@sized $mode:tt $factory:path; $($check:ident, $size:expr;)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                let (store, _guard) = $crate::workflow_conformance_tests!(@make $mode $factory);
                $crate::workflow_conformance::$check(store, $size).await;
            }
        )*
    };
    (@make () $factory:path) => { $factory() };
    (@make (async) $factory:path) => { $factory().await };
}
