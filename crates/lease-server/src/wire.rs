//! JSON shapes the service shares with the `lease` command's `--json` output, written once:
//! the counts of `stats` and a row of the audit trail.

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
