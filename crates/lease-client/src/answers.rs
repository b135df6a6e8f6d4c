//! Reading the server's answers back into the port's types, every value checked: a value the
//! server could not have sent is `Corrupt`, a refusal is the domain's refusal, and any other
//! error status is a `StoreError` that names the server, the status and its reason.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use lease_domain::{
    Backoff, ClaimRefused, Ended, Fence, Job, JobId, Owner, QueueName, Status, Timestamp,
    WriteRefused,
};
use lease_ports::{JobRecord, Lease, StatsRow, StoreError};
use serde_json::{Value, json};

/// One answer of the server.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Value,
    pub(crate) server: String,
}

impl Answer {
    /// An answer that is neither a success nor a refusal by the lease rules, as an error.
    pub(crate) fn error(&self) -> StoreError {
        let reason = self.body["reason"].as_str().unwrap_or("none");
        let detail = self.body["detail"].as_str().unwrap_or("no detail");
        let said = format!("answered {} ({reason}): {detail}", self.status);
        match self.status {
            429 | 502 | 503 | 504 => {
                StoreError::Unavailable(format!("{} {said}", self.server).into())
            }
            500..=599 => StoreError::Indeterminate(format!("{} {said}", self.server).into()),
            // The server is fine and so is its database: it would not take this key.
            401 => StoreError::Denied(
                format!(
                    "the server at {} refused the API key: {detail}",
                    self.server
                )
                .into(),
            ),
            403 => StoreError::Denied(
                format!("the server at {} refused this key: {detail}", self.server).into(),
            ),
            // The caller's input, refused as the store itself would refuse it (a workflow the
            // stored jobs refuse is a 409 `workflow`).
            422 => StoreError::InvalidInput(lease_domain::InputError::Refused(detail.to_owned())),
            409 if reason == "workflow" => {
                StoreError::InvalidInput(lease_domain::InputError::Refused(detail.to_owned()))
            }
            _ => StoreError::Incompatible {
                path: self.server.clone(),
                reason: said.into(),
            },
        }
    }
}

/// A server answer that breaks the API: `what` is missing or malformed.
pub(crate) fn corrupt(answer: &Answer, what: &str) -> StoreError {
    StoreError::Corrupt(
        format!(
            "{} answered {} without a valid `{what}`",
            answer.server, answer.status
        )
        .into(),
    )
}

fn bad(what: &str) -> StoreError {
    StoreError::Corrupt(format!("the server's `{what}` is missing or malformed").into())
}

/// Percent-encodes a path segment or query value: every byte but `A-Za-z0-9-._~`.
pub(crate) fn path(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

pub(crate) fn boolean(value: &Value, what: &str) -> Result<bool, StoreError> {
    value.as_bool().ok_or_else(|| bad(what))
}

fn time(value: &Value, what: &str) -> Result<Timestamp, StoreError> {
    value
        .as_f64()
        .and_then(|t| Timestamp::new(t).ok())
        .ok_or_else(|| bad(what))
}

fn optional_time(value: &Value, what: &str) -> Result<Option<Timestamp>, StoreError> {
    if value.is_null() {
        Ok(None)
    } else {
        time(value, what).map(Some)
    }
}

fn fence(value: &Value, what: &str) -> Result<Fence, StoreError> {
    value
        .as_u64()
        .and_then(|f| Fence::new(f).ok())
        .ok_or_else(|| bad(what))
}

fn count(value: &Value, what: &str) -> Result<u32, StoreError> {
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| bad(what))
}

fn text(value: &Value, what: &str) -> Result<Option<String>, StoreError> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(bad(what)),
    }
}

/// A duration in seconds, or its absence (`null` or missing).
pub(crate) fn seconds(value: &Value, what: &str) -> Result<Option<lease_domain::Ttl>, StoreError> {
    match value {
        Value::Null => Ok(None),
        other => other
            .as_f64()
            .and_then(|t| lease_domain::Ttl::new(t).ok())
            .map(Some)
            .ok_or_else(|| bad(what)),
    }
}

/// A queue's settings from its view.
pub(crate) fn queue(value: &Value) -> Result<(QueueName, lease_domain::QueueSettings), StoreError> {
    let name = QueueName::stored(value["queue"].as_str().ok_or_else(|| bad("queue"))?)
        .map_err(|_| bad("queue"))?;
    let paused = boolean(&value["paused"], "paused")?;
    let until = optional_time(&value["paused_until"], "paused_until")?;
    let limit = |field: &str| match &value[field] {
        Value::Null => Ok(None),
        n => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .and_then(lease_domain::Concurrency::new)
            .map(Some)
            .ok_or_else(|| bad(field)),
    };
    Ok((
        name,
        lease_domain::QueueSettings {
            paused: paused.then_some(lease_domain::Pause { until }),
            concurrency: limit("concurrency")?,
            timeout: seconds(&value["timeout"], "timeout")?,
            per_group: limit("per_group")?,
            ordered: boolean(&value["ordered"], "ordered")?,
            paused_groups: value["paused_groups"]
                .as_array()
                .ok_or_else(|| bad("paused_groups"))?
                .iter()
                .map(|pause| {
                    let group = group(&pause["group"])?.ok_or_else(|| bad("paused_groups"))?;
                    Ok((group, optional_time(&pause["until"], "paused_groups")?))
                })
                .collect::<Result<_, StoreError>>()?,
            rate: rate(&value["rate"], "rate")?,
            rate_per_group: rate(&value["rate_per_group"], "rate_per_group")?,
            fair: boolean(&value["fair"], "fair")?,
        },
    ))
}

/// A rate (`N/PERIOD`), or its absence.
fn rate(value: &Value, what: &str) -> Result<Option<lease_domain::Rate>, StoreError> {
    text(value, what)?
        .map(|t| lease_domain::Rate::parse(&t).map_err(|_| bad(what)))
        .transpose()
}

/// Where a queue's rates stand, from its throttle view.
pub(crate) fn throttle(value: &Value) -> Result<lease_domain::Throttle, StoreError> {
    Ok(lease_domain::Throttle {
        until: optional_time(&value["until"], "until")?,
        groups: value["groups"]
            .as_array()
            .ok_or_else(|| bad("groups"))?
            .iter()
            .map(|g| {
                let group = group(&g["group"])?.ok_or_else(|| bad("groups"))?;
                let until = optional_time(&g["until"], "groups")?.ok_or_else(|| bad("groups"))?;
                Ok((group, until))
            })
            .collect::<Result<_, StoreError>>()?,
    })
}

/// A queue's busiest groups, from its groups view.
pub(crate) fn group_loads(
    value: &Value,
) -> Result<Vec<lease_ports::control::GroupLoad>, StoreError> {
    value["groups"]
        .as_array()
        .ok_or_else(|| bad("groups"))?
        .iter()
        .map(|g| {
            let count = |field: &str| g[field].as_u64().ok_or_else(|| bad("groups"));
            Ok(lease_ports::control::GroupLoad {
                group: group(&g["group"])?.ok_or_else(|| bad("groups"))?,
                backlog: count("backlog")?,
                running: count("running")?,
            })
        })
        .collect()
}

/// A schedule from its view.
pub(crate) fn schedule(value: &Value) -> Result<lease_domain::Schedule, StoreError> {
    let name = lease_domain::ScheduleName::new(value["name"].as_str().ok_or_else(|| bad("name"))?)
        .map_err(|_| bad("name"))?;
    let string = |field: &str| {
        value[field]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| bad(field))
    };
    let job = lease_domain::EnqueueSpec {
        queue: QueueName::stored(string("queue")?).map_err(|_| bad("queue"))?,
        priority: value["priority"].as_i64().ok_or_else(|| bad("priority"))?,
        max_attempts: match &value["max_attempts"] {
            Value::Null => None,
            _ => Some(count(&value["max_attempts"], "max_attempts")?),
        },
        payload: payload(value)?.map(lease_domain::Payload::stored),
        timeout: seconds(&value["timeout"], "timeout")?,
        ..lease_domain::EnqueueSpec::default()
    };
    Ok(lease_domain::Schedule {
        spec: lease_domain::ScheduleSpec {
            name,
            cron: string("cron")?,
            zone: string("zone")?,
            job,
            catch_up: lease_domain::CatchUp::parse(&string("catch_up")?)
                .map_err(|_| bad("catch_up"))?,
        },
        version: value["version"].as_u64().ok_or_else(|| bad("version"))?,
        created: time(&value["created"], "created")?,
        last_tick: optional_time(&value["last_tick"], "last_tick")?,
    })
}

/// A job's group, or none.
fn group(value: &Value) -> Result<Option<lease_domain::GroupKey>, StoreError> {
    text(value, "group")?
        .map(lease_domain::GroupKey::stored)
        .transpose()
        .map_err(|_| bad("group"))
}

fn payload(value: &Value) -> Result<Option<Vec<u8>>, StoreError> {
    if let Some(text) = text(&value["payload"], "payload")? {
        return Ok(Some(text.into_bytes()));
    }
    text(&value["payload_base64"], "payload_base64")?
        .map(|b| {
            STANDARD
                .decode(b.as_bytes())
                .map_err(|_| bad("payload_base64"))
        })
        .transpose()
}

/// A lease of a claim answer, and its token.
pub(crate) fn lease(value: &Value, now: Timestamp) -> Result<(Lease, String), StoreError> {
    let id = value["id"].as_str().ok_or_else(|| bad("id"))?;
    let token = value["lease_token"]
        .as_str()
        .ok_or_else(|| bad("lease_token"))?
        .to_owned();
    Ok((
        Lease {
            job: JobId::stored(id).map_err(|_| bad("id"))?,
            fence: fence(&value["fence"], "fence")?,
            now,
            until: time(&value["until"], "until")?,
            attempt: count(&value["attempt"], "attempt")?,
            payload: payload(value)?,
            timeout: seconds(&value["timeout"], "timeout")?,
            group: group(&value["group"])?,
        },
        token,
    ))
}

/// A job's record from its view.
pub(crate) fn record(value: &Value) -> Result<JobRecord, StoreError> {
    let id = value["id"].as_str().ok_or_else(|| bad("id"))?;
    let ended = match value["ended"].as_str() {
        None => None,
        Some(name) => Some(Ended::parse(name).ok_or_else(|| bad("ended"))?),
    };
    let job = Job {
        owner: text(&value["owner"], "owner")?
            .map(Owner::stored)
            .transpose()
            .map_err(|_| bad("owner"))?,
        until: time(&value["until"], "until")?,
        fence: fence(&value["fence"], "fence")?,
        result: text(&value["result"], "result")?,
        done: boolean(&value["done"], "done")?,
        queue: QueueName::stored(value["queue"].as_str().ok_or_else(|| bad("queue"))?)
            .map_err(|_| bad("queue"))?,
        priority: value["priority"].as_i64().ok_or_else(|| bad("priority"))?,
        run_at: optional_time(&value["run_at"], "run_at")?,
        attempts: count(&value["attempts"], "attempts")?,
        max_attempts: count(&value["max_attempts"], "max_attempts")?,
        payload: payload(value)?,
        ended,
        error: text(&value["error"], "error")?,
        result_fence: if value["result_fence"].is_null() {
            None
        } else {
            Some(fence(&value["result_fence"], "result_fence")?)
        },
        updated: optional_time(&value["updated"], "updated")?,
        // The service never shows a lease's token digest.
        token: None,
        timeout: seconds(&value["timeout"], "timeout")?,
        progress: text(&value["progress"], "progress")?,
        group: group(&value["group"])?,
        waiting: value["status"].as_str() == Some(Status::Waiting.as_str()),
        after: value["after"]
            .as_array()
            .ok_or_else(|| bad("after"))?
            .iter()
            .map(|p| {
                p.as_str()
                    .and_then(|p| JobId::stored(p).ok())
                    .ok_or_else(|| bad("after"))
            })
            .collect::<Result<_, _>>()?,
        on_parent_failure: match value["on_parent_failure"].as_str() {
            None => lease_domain::OnParentFailure::default(),
            Some(policy) => lease_domain::OnParentFailure::parse(policy)
                .map_err(|_| bad("on_parent_failure"))?,
        },
    };
    Ok(JobRecord {
        id: JobId::stored(id).map_err(|_| bad("id"))?,
        job,
    })
}

/// `GET /v1/stats` as rows, queue then status, statuses with no job left out.
pub(crate) fn stats(answer: &Answer) -> Result<Vec<StatsRow>, StoreError> {
    let queues = answer.body["queues"]
        .as_object()
        .ok_or_else(|| corrupt(answer, "queues"))?;
    let mut rows = Vec::new();
    for (queue, counts) in queues {
        let queue = QueueName::stored(queue.as_str()).map_err(|_| corrupt(answer, "queues"))?;
        for status in Status::ALL {
            let count = counts[status.as_str()]
                .as_u64()
                .ok_or_else(|| corrupt(answer, "queues"))?;
            if count > 0 {
                rows.push(StatsRow {
                    queue: queue.clone(),
                    status,
                    count,
                });
            }
        }
    }
    rows.sort_by(|a, b| (&a.queue, a.status).cmp(&(&b.queue, b.status)));
    Ok(rows)
}

/// The checkpoints of `job`, as `GET /v1/jobs/{id}/checkpoints` gives them.
pub(crate) fn checkpoints(
    answer: &Answer,
    job: &JobId,
) -> Result<Vec<lease_domain::KeptCheckpoint>, StoreError> {
    let list = answer.body["checkpoints"]
        .as_array()
        .ok_or_else(|| corrupt(answer, "checkpoints"))?;
    list.iter()
        .map(|c| {
            let text = |key: &str| {
                c[key]
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| bad(&format!("checkpoints.{key}")))
            };
            let fence = c["fence"]
                .as_i64()
                .ok_or_else(|| bad("checkpoints.fence"))?;
            let at = c["at"].as_f64().ok_or_else(|| bad("checkpoints.at"))?;
            lease_ports::codec::checkpoint(job.as_str(), text("name")?, text("value")?, fence, at)
        })
        .collect()
}

/// The ended attempts of `job`, as `GET /v1/jobs/{id}/attempts` gives them (the attempt under
/// way, `running` or `expired`, is the job's row, not kept).
pub(crate) fn attempts(answer: &Answer, job: &JobId) -> Result<lease_domain::Attempts, StoreError> {
    let list = answer.body["attempts"]
        .as_array()
        .ok_or_else(|| corrupt(answer, "attempts"))?;
    let kept = list
        .iter()
        .filter(|a| !matches!(a["outcome"].as_str(), Some("running" | "expired")))
        .map(|a| {
            let row = lease_ports::codec::StoredAttempt {
                fence: a["fence"].as_i64().ok_or_else(|| bad("attempts.fence"))?,
                owner: a["owner"]
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| bad("attempts.owner"))?,
                started: a["started"].as_f64(),
                ended: a["ended"].as_f64(),
                outcome: a["outcome"]
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| bad("attempts.outcome"))?,
                error: a["error"].as_str().map(str::to_owned),
            };
            lease_ports::codec::attempt(job.as_str(), row)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let older = answer.body["older"]
        .as_u64()
        .ok_or_else(|| bad("attempts.older"))?;
    Ok(lease_domain::Attempts { kept, older })
}

/// The children of a job, as `GET /v1/jobs/{id}/children` gives them.
pub(crate) fn children(answer: &Answer) -> Result<Vec<JobId>, StoreError> {
    answer.body["children"]
        .as_array()
        .ok_or_else(|| corrupt(answer, "children"))?
        .iter()
        .map(|id| {
            id.as_str()
                .and_then(|id| JobId::stored(id).ok())
                .ok_or_else(|| corrupt(answer, "children"))
        })
        .collect()
}

/// A refused claim by id (404 or 409).
pub(crate) fn claim_refused(answer: &Answer) -> Result<ClaimRefused, StoreError> {
    Ok(match (answer.status, answer.body["reason"].as_str()) {
        (404, Some("not_found")) => ClaimRefused::Missing,
        (409, Some("done")) => ClaimRefused::Done,
        (409, Some("dead")) => ClaimRefused::Dead,
        (409, Some("cancelled")) => ClaimRefused::Cancelled,
        (409, Some("waiting")) => ClaimRefused::Waiting,
        (409, Some("not_due")) => ClaimRefused::NotDue {
            run_at: time(&answer.body["run_at"], "run_at")?,
        },
        (409, Some("live")) => ClaimRefused::Live {
            owner: text(&answer.body["owner"], "owner")?
                .map(Owner::stored)
                .transpose()
                .map_err(|_| bad("owner"))?,
            until: time(&answer.body["until"], "until")?,
        },
        _ => return Err(answer.error()),
    })
}

/// A refused holder or admin write (404 or 409): `owner`, `fence` and `now` are what the
/// request presented.
pub(crate) fn write_refused(
    answer: &Answer,
    owner: &Owner,
    presented: Fence,
    now: Option<Timestamp>,
) -> Result<WriteRefused, StoreError> {
    let body = &answer.body;
    Ok(match (answer.status, body["reason"].as_str()) {
        (404, Some("not_found")) => WriteRefused::Missing,
        (409, Some("stale")) => WriteRefused::Stale {
            presented: fence(&body["presented_fence"], "presented_fence").unwrap_or(presented),
            current: fence(&body["current_fence"], "current_fence")?,
        },
        (409, Some("expired")) => WriteRefused::Expired {
            until: time(&body["until"], "until")?,
            now: now.unwrap_or(Timestamp::ZERO),
        },
        (409, Some("not_owner")) => WriteRefused::NotOwner {
            presented: owner.clone(),
            current: None,
        },
        (409, Some("done")) => WriteRefused::Done {
            result_fence: if body["result_fence"].is_null() {
                None
            } else {
                Some(fence(&body["result_fence"], "result_fence")?)
            },
        },
        (409, Some("cancelled")) => WriteRefused::Cancelled,
        (409, Some("no_group")) => WriteRefused::NoGroup,
        (409, Some("dead")) => WriteRefused::Dead,
        (409, Some("live")) => WriteRefused::Active {
            status: Status::parse(body["job_status"].as_str().unwrap_or_default())
                .map_err(|_| bad("job_status"))?,
        },
        _ => return Err(answer.error()),
    })
}

/// One row of `GET /v1/refusals`; `None` when a field is missing or of the wrong type.
pub(crate) fn refusal(row: &Value) -> Option<lease_ports::audit::AuditRow> {
    Some(lease_ports::audit::AuditRow {
        time: row["time"].as_f64()?,
        job: row["job"].as_str()?.to_owned(),
        owner: row["owner"].as_str()?.to_owned(),
        operation: row["operation"].as_str()?.to_owned(),
        presented_fence: row["presented_fence"].as_u64()?,
        current_fence: match &row["current_fence"] {
            Value::Null => None,
            v => Some(v.as_u64()?),
        },
        reason: row["reason"].as_str()?.to_owned(),
        late_by: match &row["late_by"] {
            Value::Null => None,
            v => Some(v.as_f64()?),
        },
    })
}

/// A backoff policy as `fail` takes it.
pub(crate) fn backoff(backoff: &Backoff) -> Value {
    let (base, factor, max, jitter) = backoff.parts();
    json!({ "base": base, "factor": factor, "max": max, "jitter": jitter })
}

/// A job's trace context, as `GET /v1/jobs/{id}` gives it (`traceparent` and `tracestate`,
/// null for a job without one).
pub(crate) fn trace(
    answer: &Answer,
    job: &JobId,
) -> Result<Option<lease_domain::TraceContext>, StoreError> {
    let Some(parent) = answer.body["traceparent"].as_str() else {
        return Ok(None);
    };
    lease_domain::TraceContext::new(parent, answer.body["tracestate"].as_str())
        .map(Some)
        .map_err(|e| {
            StoreError::Corrupt(
                format!(
                    "{} answered job {job}'s trace context wrongly: {e}",
                    answer.server
                )
                .into(),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_keep_only_unreserved_bytes() {
        assert_eq!(path("a/b c?ü%"), "a%2Fb%20c%3F%C3%BC%25");
        assert_eq!(path("A-z_0.9~"), "A-z_0.9~");
    }
}
