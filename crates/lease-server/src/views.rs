//! JSON shapes the service shares with the `lease` command's `--json` output, written once:
//! the counts of `stats`, a row of the audit trail, a queue's settings, a schedule and a job.

use lease_domain::Status;
use lease_ports::StatsRow;
use lease_ports::audit::AuditRow;
use serde_json::{Map, Value, json};

/// `{queue: {status: count}}` with every status of every queue that has jobs (0 when none).
#[must_use]
pub fn stats_json(rows: &[StatsRow]) -> Map<String, Value> {
    let mut queues = Map::new();
    for row in rows {
        let counts = queues
            .entry(row.queue.as_str().to_owned())
            .or_insert_with(|| {
                Value::Object(
                    Status::ALL
                        .iter()
                        .map(|s| (s.as_str().to_owned(), json!(0)))
                        .collect(),
                )
            });
        counts[row.status.as_str()] = json!(row.count);
    }
    queues
}

/// Adds to each queue of [`stats_json`] how many jobs wait for a worker (`due`) and since
/// when the longest-waiting one has waited (`oldest_due_since`, Unix seconds, or null when
/// no waiting job knows).
pub fn with_due(queues: &mut Map<String, Value>, due: &[lease_ports::overview::DueRow]) {
    for counts in queues.values_mut() {
        counts["due"] = json!(0);
        counts["oldest_due_since"] = Value::Null;
    }
    for row in due {
        if let Some(counts) = queues.get_mut(row.queue.as_str()) {
            counts["due"] = json!(row.due);
            counts["oldest_due_since"] = json!(row.oldest_since.map(|t| t.get()));
        }
    }
}

/// Completions, failed attempts, jobs dead and cancelled, and refusals per minute for
/// `minutes` minutes from the minute `from`, one array of each per queue with any:
/// `{"since", "minutes", "queues": {q: {"completed": [..], "failed": [..], "dead": [..],
/// "cancelled": [..], "refused": [..]}}}`.
#[must_use]
pub fn activity_json(
    rows: &[lease_ports::overview::MinuteRow],
    from: lease_domain::Timestamp,
    minutes: usize,
) -> Value {
    let mut queues = Map::new();
    for row in rows {
        let offset = (row.minute.get() - from.get()) / 60.0;
        let Some(index) =
            (0..minutes).find(|i| u32::try_from(*i).is_ok_and(|i| f64::from(i) == offset))
        else {
            continue;
        };
        let entry = queues
            .entry(row.queue.as_str().to_owned())
            .or_insert_with(|| {
                json!({
                    "completed": vec![0; minutes],
                    "failed": vec![0; minutes],
                    "dead": vec![0; minutes],
                    "cancelled": vec![0; minutes],
                    "refused": vec![0; minutes],
                })
            });
        entry["completed"][index] = json!(row.completed);
        entry["failed"][index] = json!(row.failed);
        entry["dead"][index] = json!(row.dead);
        entry["cancelled"][index] = json!(row.cancelled);
        entry["refused"][index] = json!(row.refused);
    }
    json!({ "since": from.get(), "minutes": minutes, "queues": queues })
}

/// One refused write, with the fields of `lease audit --json` and `GET /v1/refusals`.
#[must_use]
pub fn refusal_json(row: &AuditRow) -> Value {
    json!({
        "time": row.time,
        "job": row.job,
        "owner": row.owner,
        "operation": row.operation,
        "presented_fence": row.presented_fence,
        "current_fence": row.current_fence,
        "reason": row.reason,
        "late_by": row.late_by,
    })
}

/// A queue's settings as `GET /v1/queues` answers each (`paused`, `paused_until`,
/// `concurrency`, `timeout`, `per_group`, `ordered`), judged at `now`.
#[must_use]
pub fn queue_json(
    queue: &lease_domain::QueueName,
    settings: &lease_domain::QueueSettings,
    now: lease_domain::Timestamp,
) -> Value {
    serde_json::to_value(crate::queues::QueueView::of(queue, settings, now)).unwrap_or_default()
}

/// A queue's busiest groups as `GET /v1/queues/{queue}/groups` answers them.
#[must_use]
pub fn groups_json(
    queue: &lease_domain::QueueName,
    standings: &[lease_ports::control::GroupStanding],
) -> Value {
    serde_json::to_value(crate::queues::GroupsView::of(queue, standings)).unwrap_or_default()
}

/// A schedule as `GET /v1/schedules` answers each, with its next tick after `now`.
#[must_use]
pub fn schedule_json(schedule: &lease_domain::Schedule, now: lease_domain::Timestamp) -> Value {
    serde_json::to_value(crate::schedules::ScheduleView::of(schedule, now)).unwrap_or_default()
}

/// A job as `GET /v1/jobs/{id}` and `lease state --json` show it (the API's `JobView`), its
/// status judged at `now`; the trace context is the caller's to fill (`null` here).
#[must_use]
pub fn job_json(record: &lease_ports::JobRecord, now: lease_domain::Timestamp) -> Value {
    serde_json::to_value(crate::jobs::JobView::of(record, now)).unwrap_or_default()
}

/// A job's attempts as `GET /v1/jobs/{id}/attempts` and `lease state --json` show them: each
/// ended one the store keeps (fence, owner, started, ended, outcome, error), then the one
/// under way in the job's row (`running` while its lease is live at `now`, `expired` after,
/// with its `until`); with `refusals`, each attempt's refused writes (those that presented
/// its fence) as `refused`. `older` counts the earlier attempts no longer kept.
#[must_use]
pub fn attempts_json(
    job: Option<&lease_domain::Job>,
    attempts: &lease_domain::Attempts,
    refusals: Option<&[AuditRow]>,
    now: lease_domain::Timestamp,
) -> Value {
    let time = |t: Option<lease_domain::Timestamp>| t.map(lease_domain::Timestamp::get);
    let mut all: Vec<Value> = attempts
        .kept
        .iter()
        .map(|a| {
            json!({
                "fence": a.fence.get(),
                "owner": a.owner.as_str(),
                "started": time(a.started),
                "ended": time(a.ended),
                "outcome": a.end.as_str(),
                "error": a.error,
                "until": Value::Null,
            })
        })
        .collect();
    if let Some(open) = job.and_then(lease_domain::Job::open_attempt) {
        let outcome = open.outcome_at(now);
        all.push(json!({
            "fence": open.fence.get(),
            "owner": open.owner.as_str(),
            "started": time(open.started),
            "ended": Value::Null,
            "outcome": outcome,
            "error": Value::Null,
            "until": open.until.get(),
        }));
    }
    if let Some(refusals) = refusals {
        for attempt in &mut all {
            let fence = attempt["fence"].as_u64();
            let refused: Vec<Value> = refusals
                .iter()
                .filter(|r| Some(r.presented_fence) == fence)
                .map(|r| {
                    json!({
                        "time": r.time,
                        "owner": r.owner,
                        "operation": r.operation,
                        "reason": r.reason,
                        "late_by": r.late_by,
                    })
                })
                .collect();
            attempt["refused"] = Value::Array(refused);
        }
    }
    json!({ "attempts": all, "older": attempts.older })
}
