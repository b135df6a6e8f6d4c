//! `lease demo`: the stale-worker story, replayed step by step on a temporary database.

use lease_domain::{JobId, JobResult, LeaseTerm, Owner, Timestamp};
use lease_ports::{LeaseStore, StoreError};
use serde_json::{Value, json};

use crate::render::Report;

struct Narration {
    lines: Vec<String>,
    steps: Vec<Value>,
}

impl Narration {
    fn say(&mut self, line: String, step: Value) {
        self.lines.push(line);
        self.steps.push(step);
    }
}

fn failed(what: &str) -> String {
    format!("demo went wrong: {what}")
}

fn checked<T>(value: Result<T, lease_domain::InputError>) -> Result<T, String> {
    value.map_err(|e| failed(&e.to_string()))
}

fn stored(err: StoreError) -> String {
    failed(&err.to_string())
}

/// Plays the story on `store` (a fresh database at `db`) and checks every step came out as the
/// lease rules promise.
///
/// # Errors
/// A message naming the step that did not behave, or the storage error.
pub(crate) async fn run(store: &dyn LeaseStore, db: &str) -> Result<Report, String> {
    let job = checked(JobId::new("invoice-42"))?;
    let (a, b) = (
        checked(Owner::new("worker-A"))?,
        checked(Owner::new("worker-B"))?,
    );
    let mut n = Narration {
        lines: Vec::new(),
        steps: Vec::new(),
    };
    n.say(
        format!("The stale-worker story, on a temporary SQLite database at {db}."),
        json!({"step": "start", "db": db}),
    );

    store.enqueue(&job).await.map_err(stored)?;
    n.say(
        format!("1. Job {job} is enqueued."),
        json!({"step": "enqueue", "job": job.as_str()}),
    );

    let fa = store
        .claim(&job, &a, checked(LeaseTerm::new(100.0, 30.0))?)
        .await
        .map_err(stored)?
        .map_err(|r| failed(&format!("A's claim was refused: {r}")))?;
    n.say(
        format!("2. t=100: {a} claims it with a 30 s lease and gets fence {fa}. Then {a} stalls (a long GC pause)."),
        json!({"step": "claim", "owner": a.as_str(), "now": 100.0, "fence": fa.get()}),
    );

    n.say(
        format!("3. t=130: {a}'s lease expires; {a} does not know, it is still paused."),
        json!({"step": "expire", "now": 130.0}),
    );

    let fb = store
        .claim(&job, &b, checked(LeaseTerm::new(130.0, 30.0))?)
        .await
        .map_err(stored)?
        .map_err(|r| failed(&format!("B's claim was refused: {r}")))?;
    if fb <= fa {
        return Err(failed("B's fence did not go up"));
    }
    n.say(
        format!("4. t=130: {b} claims the expired lease and gets fence {fb} (fences only go up)."),
        json!({"step": "claim", "owner": b.as_str(), "now": 130.0, "fence": fb.get()}),
    );

    let result_b = checked(JobResult::new("paid once, by B"))?;
    store
        .complete(&job, &b, fb, checked(Timestamp::new(140.0))?, &result_b)
        .await
        .map_err(stored)?
        .map_err(|r| failed(&format!("B's completion was refused: {r}")))?;
    n.say(
        format!(
            "5. t=140: {b} completes with {:?}: accepted.",
            result_b.as_str()
        ),
        json!({"step": "complete", "owner": b.as_str(), "fence": fb.get(), "accepted": true}),
    );

    let result_a = checked(JobResult::new("paid twice, by A"))?;
    let late = store
        .complete(&job, &a, fa, checked(Timestamp::new(141.0))?, &result_a)
        .await
        .map_err(stored)?;
    let Err(refusal) = late else {
        return Err(failed("A's stale completion was accepted"));
    };
    n.say(
        format!("6. t=141: {a} wakes up and completes with {:?} and its old fence {fa}: rejected ({refusal}).", result_a.as_str()),
        json!({"step": "complete", "owner": a.as_str(), "fence": fa.get(), "accepted": false, "reason": refusal.to_string()}),
    );

    let state = store
        .state(&job)
        .await
        .map_err(stored)?
        .ok_or_else(|| failed("the job vanished"))?;
    if state.result.as_deref() != Some(result_b.as_str()) || !state.done {
        return Err(failed("B's result did not survive"));
    }
    n.say(
        format!(
            "7. Stored: owner {}, fence {}, result {:?}, done. B's result survived; the stale writer was fenced off.",
            state.owner.as_deref().unwrap_or("none"),
            state.fence,
            state.result.as_deref().unwrap_or_default()
        ),
        json!({"step": "state", "owner": state.owner, "fence": state.fence, "result": state.result, "done": state.done}),
    );
    Ok(Report::lines(
        true,
        json!({"steps": n.steps, "survived": true}),
        n.lines,
        "",
    ))
}
