//! A queue's flow control: its settings (read by any key), and a pause, a resume and limits
//! (admin keys).

use crate::App;
use crate::extract::{Admin, Checked, Param, TwoParams, Viewer};
use crate::fields::{Name, Seconds, Time};
use crate::problem::{Problem, ProblemBody};
use crate::respond::{Answer, AppState, EmptyBody, json_response, now};
use axum::extract::State;
use axum::http::StatusCode;
use lease_domain::{Concurrency, QueueChange, QueueName, QueueSettings, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A queue's settings.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueueView {
    /// The queue.
    pub(crate) queue: String,
    /// Whether claims take nothing from it now.
    pub(crate) paused: bool,
    /// When its pause ends (Unix seconds), if it ends at a time.
    pub(crate) paused_until: Option<f64>,
    /// The most of its leases live at once, across every worker, if it is limited.
    pub(crate) concurrency: Option<u32>,
    /// How long an attempt of a job that names no timeout may run, in seconds, if limited.
    pub(crate) timeout: Option<f64>,
    /// The most live leases of one group of the queue at once, if limited.
    pub(crate) per_group: Option<u32>,
    /// Whether each group runs one job at a time, in claim order.
    pub(crate) ordered: bool,
    /// The groups paused now, in group order.
    pub(crate) paused_groups: Vec<GroupPauseView>,
    /// The most leases of the queue granted in any window of a period, as `N/PERIOD` (such
    /// as `100/1m`), if it has a rate.
    pub(crate) rate: Option<String>,
    /// The most leases of each group granted in any window of a period, as `N/PERIOD`, if
    /// its groups have a rate.
    pub(crate) rate_per_group: Option<String>,
    /// Whether claims serve its groups in turn, the group served least recently first.
    pub(crate) fair: bool,
}

/// Where a queue's rates stand now.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ThrottleView {
    /// The queue.
    pub(crate) queue: String,
    /// When the queue's rate lets a claim lease again (Unix seconds), if it lets none now.
    pub(crate) until: Option<f64>,
    /// The groups whose rate lets none of their jobs be leased now, in group order.
    pub(crate) groups: Vec<GroupPauseView>,
}

/// A paused group of a queue.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GroupPauseView {
    /// The group.
    pub(crate) group: String,
    /// When its pause ends (Unix seconds), if it ends at a time.
    pub(crate) until: Option<f64>,
}

impl QueueView {
    pub(crate) fn of(queue: &QueueName, settings: &QueueSettings, now: Timestamp) -> Self {
        Self {
            queue: queue.as_str().to_owned(),
            paused: settings.is_paused_at(now),
            paused_until: settings
                .paused
                .and_then(|p| p.until)
                .map(Timestamp::get)
                .filter(|_| settings.is_paused_at(now)),
            concurrency: settings.concurrency.map(Concurrency::get),
            timeout: settings.timeout.map(lease_domain::Ttl::get),
            per_group: settings.per_group.map(Concurrency::get),
            ordered: settings.ordered,
            paused_groups: settings
                .paused_groups
                .iter()
                .filter(|(group, _)| settings.is_group_paused_at(group, now))
                .map(|(group, until)| GroupPauseView {
                    group: group.as_str().to_owned(),
                    until: until.map(Timestamp::get),
                })
                .collect(),
            rate: settings.rate.map(|r| r.to_string()),
            rate_per_group: settings.rate_per_group.map(|r| r.to_string()),
            fair: settings.fair,
        }
    }
}

#[utoipa::path(get, path = "/v1/queues/{queue}/throttle", tag = "queue",
    params(("queue" = Name, Path, description = "The queue, percent-encoded"), crate::fields::StatsQuery),
    responses(
        (status = 200, description = "Where the queue's rates stand now (nothing throttled for a queue without a rate)", body = ThrottleView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn throttle(
    State(app): AppState,
    _: Viewer,
    Param(queue): Param,
    asked: Result<
        axum::extract::Query<crate::fields::StatsQuery>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Answer {
    let name = Name(queue).queue("queue")?;
    let now = crate::respond::query_now(&app, crate::respond::query(asked)?.now.as_deref())?;
    let throttle = app.store.throttle(&name, now).await?;
    Ok(json_response(
        StatusCode::OK,
        ThrottleView {
            queue: name.as_str().to_owned(),
            until: throttle.until.map(Timestamp::get),
            groups: throttle
                .groups
                .iter()
                .map(|(group, until)| GroupPauseView {
                    group: group.as_str().to_owned(),
                    until: Some(until.get()),
                })
                .collect(),
        },
    ))
}

/// Which of a queue's groups to show.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct GroupsQuery {
    /// At most this many, the busiest first (default 10).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<String>,
    /// The time to judge at, taken only by a server that trusts caller clocks.
    #[param(value_type = Option<Time>)]
    pub(crate) now: Option<String>,
}

/// A queue's busiest groups.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GroupsView {
    /// The queue.
    pub(crate) queue: String,
    /// Its groups with unfinished jobs, the most unfinished jobs first.
    pub(crate) groups: Vec<GroupView>,
}

/// How one group of a queue stands.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GroupView {
    /// The group.
    pub(crate) group: String,
    /// Its jobs that wait: unfinished and not held by a live lease (due, scheduled, or
    /// waiting for a retry).
    pub(crate) backlog: u64,
    /// Its jobs held by a live lease.
    pub(crate) running: u64,
    /// Whether it is paused now.
    pub(crate) paused: bool,
    /// When its pause ends (Unix seconds), if it is paused until a time.
    pub(crate) paused_until: Option<f64>,
    /// When its rate lets a claim lease its jobs again (Unix seconds), if it lets none now.
    pub(crate) throttled_until: Option<f64>,
}

#[utoipa::path(get, path = "/v1/queues/{queue}/groups", tag = "queue",
    params(("queue" = Name, Path, description = "The queue, percent-encoded"), GroupsQuery),
    responses(
        (status = 200, description = "The queue's busiest groups now, each paused or throttled or not", body = GroupsView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn groups(
    State(app): AppState,
    _: Viewer,
    Param(queue): Param,
    asked: Result<axum::extract::Query<GroupsQuery>, axum::extract::rejection::QueryRejection>,
) -> Answer {
    let name = Name(queue).queue("queue")?;
    let asked = crate::respond::query(asked)?;
    let limit = crate::respond::count(asked.limit.as_deref(), "limit", 10)?;
    if !(1..=1000).contains(&limit) {
        return Err(Problem::invalid("parameter `limit` must be 1 to 1000"));
    }
    let now = crate::respond::query_now(&app, asked.now.as_deref())?;
    let standings = lease_ports::control::busiest_groups(&*app.store, &name, now, limit).await?;
    Ok(json_response(
        StatusCode::OK,
        GroupsView::of(&name, &standings),
    ))
}

impl GroupsView {
    /// The view of `queue`'s busiest groups.
    pub(crate) fn of(queue: &QueueName, standings: &[lease_ports::control::GroupStanding]) -> Self {
        Self {
            queue: queue.as_str().to_owned(),
            groups: standings
                .iter()
                .map(|s| GroupView {
                    group: s.load.group.as_str().to_owned(),
                    backlog: s.load.backlog,
                    running: s.load.running,
                    paused: s.paused,
                    paused_until: s.paused_until.map(Timestamp::get),
                    throttled_until: s.throttled_until.map(Timestamp::get),
                })
                .collect(),
        }
    }
}

/// Every queue with settings.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Queues {
    /// The queues, by name.
    pub(crate) queues: Vec<QueueView>,
}

#[utoipa::path(get, path = "/v1/queues", tag = "queue",
    responses(
        (status = 200, description = "Every queue with settings (a queue without is free)", body = Queues),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn queues(State(app): AppState, _: Viewer) -> Answer {
    let now = now(&app, None)?;
    let body = queues_body(&app, now).await?;
    Ok(json_response(StatusCode::OK, body))
}

#[utoipa::path(get, path = "/v1/queues/{queue}/limits", tag = "queue",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    responses(
        (status = 200, description = "The queue's settings (a queue without any is free)", body = QueueView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn queue_limits(State(app): AppState, _: Viewer, Param(queue): Param) -> Answer {
    let name = Name(queue).queue("queue")?;
    let now = now(&app, None)?;
    let current = app.store.settings_of(&name).await?;
    Ok(json_response(
        StatusCode::OK,
        QueueView::of(&name, &current, now),
    ))
}

/// Every queue's settings judged at `now`, as `GET /v1/queues` and the event stream's
/// `queues` event give them.
pub(crate) async fn queues_body(app: &App, now: Timestamp) -> Result<Queues, Problem> {
    let queues = app.store.queues().await?;
    let queues = queues
        .iter()
        .map(|(queue, settings)| QueueView::of(queue, settings, now))
        .collect();
    Ok(Queues { queues })
}

/// Pause a queue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"until": 1900000000}))]
pub(crate) struct PauseBody {
    /// Until when (Unix seconds); absent, until it is resumed.
    pub(crate) until: Option<Time>,
}

pub(crate) async fn change(app: &App, queue: String, change: QueueChange) -> Answer {
    let queue = Name(queue).queue("queue")?;
    let settings = app.store.change_queue(&queue, change).await?;
    let now = now(app, None)?;
    if !settings.is_paused_at(now) {
        // Claims waiting on a queue that runs again may find their jobs now.
        app.wake(queue.as_str(), usize::MAX);
    }
    Ok(json_response(
        StatusCode::OK,
        QueueView::of(&queue, &settings, now),
    ))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/pause", tag = "admin",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    request_body(content = Option<PauseBody>, description = "Empty, {} or {\"until\": time}"),
    responses(
        (status = 200, description = "Paused: no new lease from now on; running leases go on", body = QueueView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn pause(
    State(app): AppState,
    _: Admin,
    Param(queue): Param,
    Checked(body): Checked<PauseBody>,
) -> Answer {
    let until = body.until.map(|t| t.at("until")).transpose()?;
    change(&app, queue, QueueChange::Pause(until)).await
}

#[utoipa::path(post, path = "/v1/queues/{queue}/resume", tag = "admin",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    request_body(content = Option<EmptyBody>, description = "Empty, or {}"),
    responses(
        (status = 200, description = "Claims take its jobs again", body = QueueView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn resume(
    State(app): AppState,
    _: Admin,
    Param(queue): Param,
    Checked(_): Checked<EmptyBody>,
) -> Answer {
    change(&app, queue, QueueChange::Resume).await
}

#[utoipa::path(post, path = "/v1/queues/{queue}/groups/{group}/pause", tag = "admin",
    params(
        ("queue" = Name, Path, description = "The queue, percent-encoded"),
        ("group" = Name, Path, description = "The group, percent-encoded"),
    ),
    request_body(content = Option<PauseBody>, description = "Empty, {} or {\"until\": time}"),
    responses(
        (status = 200, description = "The group is paused: no new lease of its jobs from now on; its running leases and the queue's other groups go on", body = QueueView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn pause_group(
    State(app): AppState,
    _: Admin,
    TwoParams(queue, group): TwoParams,
    Checked(body): Checked<PauseBody>,
) -> Answer {
    let until = body.until.map(|t| t.at("until")).transpose()?;
    let group = Name(group).group()?;
    change(&app, queue, QueueChange::PauseGroup(group, until)).await
}

#[utoipa::path(post, path = "/v1/queues/{queue}/groups/{group}/resume", tag = "admin",
    params(
        ("queue" = Name, Path, description = "The queue, percent-encoded"),
        ("group" = Name, Path, description = "The group, percent-encoded"),
    ),
    request_body(content = Option<EmptyBody>, description = "Empty, or {}"),
    responses(
        (status = 200, description = "Claims take the group's jobs again", body = QueueView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn resume_group(
    State(app): AppState,
    _: Admin,
    TwoParams(queue, group): TwoParams,
    Checked(_): Checked<EmptyBody>,
) -> Answer {
    let group = Name(group).group()?;
    // `change` wakes the claims waiting on the queue (when it is not paused itself): they may
    // find the group's jobs now.
    change(&app, queue, QueueChange::ResumeGroup(group)).await
}

/// A queue's limits; a field left out is left as it is.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"concurrency": 4, "timeout": 300, "per_group": 1}))]
pub(crate) struct LimitsBody {
    /// The most of its leases live at once, across every worker; 0 removes the limit.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 4_294_967_295_i64)]
    pub(crate) concurrency: Option<u32>,
    /// How long an attempt of a job that names no timeout may run, in seconds.
    pub(crate) timeout: Option<Seconds>,
    /// `true` removes the queue's default timeout (with no `timeout`).
    pub(crate) no_timeout: Option<bool>,
    /// The most live leases of one group of the queue at once, across every worker; 0
    /// removes the limit.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 4_294_967_295_i64)]
    pub(crate) per_group: Option<u32>,
    /// `true`: each group runs one job at a time, in claim order (a later job waits while an
    /// earlier one runs, waits for its retry, or is dead); `false` turns it off.
    pub(crate) ordered: Option<bool>,
    /// The most leases of the queue granted in any window of a period (a sliding window,
    /// across every worker), as `N/PERIOD` with PERIOD as `500ms`, `1s`, `1m` or `1h`;
    /// `none` removes it.
    #[schema(example = "100/1m", max_length = 64)]
    pub(crate) rate: Option<String>,
    /// The same for each group of the queue; `none` removes it.
    #[schema(example = "10/1m", max_length = 64)]
    pub(crate) rate_per_group: Option<String>,
    /// `true`: claims serve the groups in turn, the group served least recently first, so a
    /// group with a large backlog cannot starve one enqueued later (jobs without a group go
    /// first; priority orders the jobs of one group); `false` goes back to claim order.
    pub(crate) fair: Option<bool>,
}

/// A rate field's value: `N/PERIOD`, or `none` to remove the rate.
fn rate_field(name: &str, text: &str) -> Result<Option<lease_domain::Rate>, Problem> {
    if text == "none" {
        return Ok(None);
    }
    lease_domain::Rate::parse(text)
        .map(Some)
        .map_err(|e| Problem::invalid(format!("`{name}`: {e}")))
}

#[utoipa::path(put, path = "/v1/queues/{queue}/limits", tag = "admin",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    request_body = LimitsBody,
    responses(
        (status = 200, description = "The queue's settings now; running leases are never touched", body = QueueView),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn limits(
    State(app): AppState,
    _: Admin,
    Param(queue): Param,
    Checked(body): Checked<LimitsBody>,
) -> Answer {
    let timeout = match (body.timeout, body.no_timeout) {
        (Some(_), Some(true)) => {
            return Err(Problem::invalid("give `timeout` or `no_timeout`, not both"));
        }
        (Some(t), _) => Some(Some(t.ttl("timeout")?)),
        (None, Some(true)) => Some(None),
        (None, _) => None,
    };
    // Every limit given is one change: all are applied or none.
    let limits = lease_domain::Limits {
        concurrency: body.concurrency.map(Concurrency::new),
        timeout,
        per_group: body.per_group.map(Concurrency::new),
        ordered: body.ordered,
        rate: body
            .rate
            .as_deref()
            .map(|r| rate_field("rate", r))
            .transpose()?,
        rate_per_group: body
            .rate_per_group
            .as_deref()
            .map(|r| rate_field("rate_per_group", r))
            .transpose()?,
        fair: body.fair,
    };
    match QueueChange::set(limits) {
        Some(one) => change(&app, queue, one).await,
        None => {
            let name = Name(queue).queue("queue")?;
            let now = now(&app, None)?;
            let current = app.store.settings_of(&name).await?;
            Ok(json_response(
                StatusCode::OK,
                QueueView::of(&name, &current, now),
            ))
        }
    }
}
