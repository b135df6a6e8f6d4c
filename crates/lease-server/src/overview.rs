//! What an operator reads: every queue's counts with what is due, the last hour's activity,
//! and the audit trail of refused writes.

use crate::App;
use crate::extract::{Params, Viewer};
use crate::fields::{Name, StatsQuery, Time};
use crate::problem::{Problem, ProblemBody};
use crate::respond::{Answer, AppState, count, json_response, query, query_now};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use lease_domain::Timestamp;
use lease_ports::audit::AuditFilter;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

/// Counts of jobs by queue and status.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Stats {
    /// For each queue, the number of jobs in each status (pending, running, done, dead,
    /// cancelled), now.
    pub(crate) queues: serde_json::Map<String, Value>,
}

#[utoipa::path(get, path = "/v1/stats", tag = "queue", params(StatsQuery),
    responses(
        (status = 200, description = "Counts", body = Stats),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn stats(
    State(app): AppState,
    _: Viewer,
    Params: Params,
    asked: Result<Query<StatsQuery>, QueryRejection>,
) -> Answer {
    let now = query_now(&app, query(asked)?.now.as_deref())?;
    Ok(json_response(StatusCode::OK, stats_body(&app, now).await?))
}

/// `{"queues": ...}`: each queue's counts by status, how many jobs wait for a worker
/// (`due`) and since when the longest-waiting one has (`oldest_due_since`).
pub(crate) async fn stats_body(app: &App, now: Timestamp) -> Result<Value, Problem> {
    let (rows, due) = futures::try_join!(app.store.stats(now), app.store.due(now))?;
    let mut queues = crate::views::stats_json(&rows);
    crate::views::with_due(&mut queues, &due);
    Ok(json!({ "queues": queues }))
}

/// Which minutes of activity to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ActivityQuery {
    /// How many minutes, the current one last (default 60).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1440)]
    pub(crate) minutes: Option<String>,
    /// The time to count back from, taken only by a server that trusts caller clocks.
    #[param(value_type = Option<Time>)]
    pub(crate) now: Option<String>,
}

/// Completions, failed attempts, jobs dead and cancelled, and refused writes per queue and
/// minute.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Activity {
    /// The first minute's start (Unix seconds, a multiple of 60).
    pub(crate) since: f64,
    /// How many minutes each array holds.
    pub(crate) minutes: u64,
    /// Per queue with any: `{"completed": [...], "failed": [...], "dead": [...],
    /// "cancelled": [...], "refused": [...]}`, one number per minute.
    #[schema(value_type = Object)]
    pub(crate) queues: Value,
}

#[utoipa::path(get, path = "/v1/activity", tag = "queue", params(ActivityQuery),
    responses(
        (status = 200, description = "Completions (done jobs by their completion time), failed attempts (by their end), jobs now dead or cancelled (by their last change) and refused writes (from the audit trail, in their job's queue) per minute", body = Activity),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn activity(
    State(app): AppState,
    _: Viewer,
    Params: Params,
    asked: Result<Query<ActivityQuery>, QueryRejection>,
) -> Answer {
    let asked = query(asked)?;
    let minutes = count(asked.minutes.as_deref(), "minutes", 60)?;
    let now = query_now(&app, asked.now.as_deref())?;
    Ok(json_response(
        StatusCode::OK,
        activity_body(&app, now, minutes).await?,
    ))
}

/// The activity of the `minutes` minutes that end with `now`'s.
pub(crate) async fn activity_body(
    app: &App,
    now: Timestamp,
    minutes: usize,
) -> Result<Value, Problem> {
    let back = u32::try_from(minutes.saturating_sub(1)).unwrap_or(0);
    let from = lease_ports::overview::minute_of(
        Timestamp::new(now.get() - f64::from(back) * 60.0).unwrap_or(now),
    );
    let rows = app.store.activity(from).await?;
    Ok(crate::views::activity_json(&rows, from, minutes))
}

/// Which refusals to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct RefusalsQuery {
    /// Only refusals at or after this time (Unix seconds).
    #[param(value_type = Option<Time>)]
    pub(crate) since: Option<String>,
    /// At most this many, the newest (default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<String>,
    /// Only this job.
    #[param(value_type = Option<Name>)]
    pub(crate) job: Option<String>,
}

/// One refused write of a lease holder, from the audit trail.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RefusalView {
    /// When it was refused (Unix seconds).
    pub(crate) time: f64,
    /// The job.
    pub(crate) job: String,
    /// The writer.
    pub(crate) owner: String,
    /// renew, progress, complete, release or fail; unknown for a stored name this server does
    /// not know (a newer server's).
    pub(crate) operation: String,
    /// The fence it presented.
    pub(crate) presented_fence: u64,
    /// The job's fence then (null: no such job).
    pub(crate) current_fence: Option<u64>,
    /// stale, expired, not_owner, done, cancelled, dead, missing or bad_token; unknown for a
    /// stored name this server does not know.
    pub(crate) reason: String,
    /// For an expired lease, how late the write came.
    pub(crate) late_by: Option<f64>,
}

/// Refused writes, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Refusals {
    /// The refusals.
    pub(crate) refusals: Vec<RefusalView>,
}

#[utoipa::path(get, path = "/v1/refusals", tag = "audit", params(RefusalsQuery),
    responses(
        (status = 200, description = "Refused writes (empty when the audit trail is off)", body = Refusals),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn refusals(
    State(app): AppState,
    _: Viewer,
    Params: Params,
    asked: Result<Query<RefusalsQuery>, QueryRejection>,
) -> Answer {
    let asked = query(asked)?;
    let limit = count(asked.limit.as_deref(), "limit", 100)?;
    let since = asked
        .since
        .map(|t| {
            t.parse::<f64>()
                .ok()
                .and_then(|t| Timestamp::new(t).ok())
                .ok_or_else(|| Problem::invalid("parameter `since` must be a number"))
        })
        .transpose()?;
    let job = asked.job.map(|j| Name(j).job()).transpose()?;
    let rows = app
        .store
        .refusals(&AuditFilter { job, since, limit })
        .await?;
    let refusals: Vec<Value> = rows.iter().map(crate::views::refusal_json).collect();
    Ok(json_response(
        StatusCode::OK,
        json!({ "refusals": refusals }),
    ))
}
