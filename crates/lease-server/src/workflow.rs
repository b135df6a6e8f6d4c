//! A job's workflow beyond its own row: its checkpoints, the durable steps a lease holder
//! keeps (a fenced write, judged in the store's own transaction like every holder's write)
//! and anyone who may view jobs reads; and its children, the jobs that run after it.

use crate::extract::{Checked, Holder, Param, Viewer};
use crate::fields::{CheckpointNameText, FenceNo, Name, Text, Time};
use crate::input::bad_value;
use crate::problem::{Problem, ProblemBody};
use crate::respond::{
    Answer, AppState, OkBody, as_holder, credential, holder_write, json_response, now,
};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use lease_domain::{Checkpoint, CheckpointName, CheckpointValue, Command, InputError};
use lease_ports::WriteOutcome;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Keep a step's result: a new value of the name replaces the old one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1, "name": "fetch", "value": "rows=1200"}))]
pub(crate) struct CheckpointBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// The step's name.
    pub(crate) name: CheckpointNameText,
    /// What the step produced.
    pub(crate) value: Text,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/checkpoints", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = CheckpointBody,
    responses(
        (status = 200, description = "Kept, with the lease's fence; the lease goes on", body = OkBody),
        (status = "4XX", description = "Refused as a renewal would be (404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token), 409 workflow for a new name when the job keeps 1,000 already, 422 a name or value out of bounds", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn keep(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<CheckpointBody>,
) -> Answer {
    let id = Name(id).job()?;
    let now = now(&app, body.now.as_ref())?;
    let fence = body.fence.fence()?;
    let name = CheckpointName::new(body.name.0)
        .map_err(|e| bad_value("name", &InputError::Workflow(e)))?;
    let value = CheckpointValue::new(body.value.0).map_err(|e| bad_value("value", &e))?;
    let checkpoint = Checkpoint { name, value };
    let credential = credential(holder, body.owner)?;
    let write = as_holder(credential, |owner| {
        Command::Checkpoint(owner, fence, now, checkpoint.clone())
    });
    holder_write::<WriteOutcome>(&app, &id, write)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(StatusCode::OK, OkBody { ok: true }))
}

/// One checkpoint a job keeps.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CheckpointView {
    /// The step's name.
    pub(crate) name: String,
    /// What it produced.
    pub(crate) value: String,
    /// The fence of the lease that wrote it.
    pub(crate) fence: u64,
    /// When it was written (Unix seconds).
    pub(crate) at: f64,
}

/// The checkpoints of a job.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Checkpoints {
    /// Each checkpoint, in name order.
    pub(crate) checkpoints: Vec<CheckpointView>,
}

#[utoipa::path(get, path = "/v1/jobs/{id}/checkpoints", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded")),
    responses(
        (status = 200, description = "The job's checkpoints, in name order", body = Checkpoints),
        (status = "4XX", description = "404 no such job", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn read(State(app): AppState, _: Viewer, Param(id): Param) -> Answer {
    let id = Name(id).job()?;
    let kept = app.store.checkpoints(&id).await?;
    if kept.is_empty() && app.store.record(&id).await?.is_none() {
        return Err(Problem::no_such_job());
    }
    let checkpoints = kept
        .into_iter()
        .map(|c| CheckpointView {
            name: c.name.as_str().to_owned(),
            value: c.value.as_str().to_owned(),
            fence: c.fence.get(),
            at: c.at.get(),
        })
        .collect();
    Ok(json_response(StatusCode::OK, Checkpoints { checkpoints }))
}

/// How many children to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ChildrenQuery {
    /// At most this many (default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<String>,
    /// Only children whose id comes after this one (the last of the page before).
    #[param(value_type = Option<Name>)]
    pub(crate) after: Option<String>,
}

/// The jobs that run after a job.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Children {
    /// Their ids, in id order.
    pub(crate) children: Vec<String>,
    /// Whether it has more than were read.
    pub(crate) more: bool,
}

#[utoipa::path(get, path = "/v1/jobs/{id}/children", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"), ChildrenQuery),
    responses(
        (status = 200, description = "The jobs that name it among their parents, in id order", body = Children),
        (status = "4XX", description = "404 no such job, 400 a limit out of bounds", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn children(
    State(app): AppState,
    _: Viewer,
    Param(id): Param,
    asked: Result<Query<ChildrenQuery>, QueryRejection>,
) -> Answer {
    let asked = crate::respond::query(asked)?;
    let limit = crate::respond::count(asked.limit.as_deref(), "limit", 100)?;
    if !(1..=1000).contains(&limit) {
        return Err(Problem::invalid("parameter `limit` must be from 1 to 1000"));
    }
    let id = Name(id).job()?;
    let after = asked.after.map(|a| Name(a).job()).transpose()?;
    let mut found = app.store.children(&id, after.as_ref(), limit + 1).await?;
    if found.is_empty() && app.store.record(&id).await?.is_none() {
        return Err(Problem::no_such_job());
    }
    let more = found.len() > limit;
    found.truncate(limit);
    let children = found.into_iter().map(|c| c.as_str().to_owned()).collect();
    Ok(json_response(StatusCode::OK, Children { children, more }))
}

/// The most refused writes of a job shown with its attempts (the newest).
const REFUSALS_SHOWN: usize = 1000;

/// A refused write of an attempt (its fence), from the audit trail.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptRefusal {
    /// When, by the store's clock (Unix seconds).
    pub(crate) time: f64,
    /// Who wrote.
    pub(crate) owner: String,
    /// renew, progress, complete, release or fail.
    pub(crate) operation: String,
    /// stale, expired, not_owner, done, cancelled, dead, missing or bad_token.
    pub(crate) reason: String,
    /// For an expired lease, how late the write came.
    pub(crate) late_by: Option<f64>,
}

/// One attempt of a job: a lease, from its claim to its end.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptView {
    /// The fence its claim took.
    pub(crate) fence: u64,
    /// Who held it.
    pub(crate) owner: String,
    /// When it was claimed (null for a lease granted before attempts were kept).
    pub(crate) started: Option<f64>,
    /// When it ended (null while under way).
    pub(crate) ended: Option<f64>,
    /// done, failed, timed_out, lease_lost, released or cancelled; running or expired for the
    /// attempt under way.
    pub(crate) outcome: String,
    /// The error it failed with.
    pub(crate) error: Option<String>,
    /// When the lease of the attempt under way ends (null for an ended one).
    pub(crate) until: Option<f64>,
    /// The writes refused with its fence, oldest first (empty when the audit trail is off).
    pub(crate) refused: Vec<AttemptRefusal>,
}

/// A job's attempts.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptsBody {
    /// The ended attempts kept (the latest 100), then the one under way, by fence.
    pub(crate) attempts: Vec<AttemptView>,
    /// Earlier attempts no longer kept.
    pub(crate) older: u64,
}

#[utoipa::path(get, path = "/v1/jobs/{id}/attempts", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded")),
    responses(
        (status = 200, description = "The job's attempts, by fence, each with its refused writes", body = AttemptsBody),
        (status = "4XX", description = "404 no such job", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn attempts(State(app): AppState, _: Viewer, Param(id): Param) -> Answer {
    let id = Name(id).job()?;
    let Some(record) = app.store.record(&id).await? else {
        return Err(Problem::no_such_job());
    };
    let kept = app.store.attempts(&id).await?;
    let refusals = app
        .store
        .refusals(&lease_ports::audit::AuditFilter {
            job: Some(id.clone()),
            since: None,
            limit: REFUSALS_SHOWN,
        })
        .await?;
    let now = now(&app, None)?;
    Ok(json_response(
        StatusCode::OK,
        crate::views::attempts_json(Some(&record.job), &kept, Some(&refusals), now),
    ))
}

/// How much of a workflow to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct GraphQuery {
    /// At most this many jobs, the job itself counted (default 50).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    pub(crate) limit: Option<String>,
}

/// A job of a workflow's graph.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GraphNode {
    /// The job id.
    pub(crate) id: String,
    /// Its status now; `purged` for a parent purged since it finished.
    pub(crate) status: String,
    /// Its queue (null when purged).
    pub(crate) queue: Option<String>,
}

/// One dependency of a workflow's graph: the child runs after the parent.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GraphEdge {
    /// The job run first.
    pub(crate) parent: String,
    /// The job that runs after it.
    pub(crate) child: String,
}

/// A job's workflow around it: its ancestors and descendants.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GraphBody {
    /// The job first, then its ancestors and its descendants, nearest first.
    pub(crate) nodes: Vec<GraphNode>,
    /// Every dependency between two of the nodes.
    pub(crate) edges: Vec<GraphEdge>,
    /// Jobs met beyond the limit and left out: the workflow goes on past them.
    pub(crate) more: u64,
}

#[utoipa::path(get, path = "/v1/jobs/{id}/graph", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"), GraphQuery),
    responses(
        (status = 200, description = "The job's ancestors and descendants, breadth first and bounded, with every dependency between them", body = GraphBody),
        (status = "4XX", description = "404 no such job, 400 a limit out of bounds", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn graph(
    State(app): AppState,
    _: Viewer,
    Param(id): Param,
    asked: Result<Query<GraphQuery>, QueryRejection>,
) -> Answer {
    let asked = crate::respond::query(asked)?;
    let limit = crate::respond::count(asked.limit.as_deref(), "limit", 50)?;
    if !(1..=lease_ports::graph::GRAPH_MOST).contains(&limit) {
        return Err(Problem::invalid("parameter `limit` must be from 1 to 500"));
    }
    let id = Name(id).job()?;
    let now = now(&app, None)?;
    let Some(graph) =
        lease_ports::graph::workflow_graph(app.store.as_ref(), &id, limit, now).await?
    else {
        return Err(Problem::no_such_job());
    };
    let body = GraphBody {
        nodes: graph
            .nodes
            .into_iter()
            .map(|n| GraphNode {
                id: n.id.as_str().to_owned(),
                status: n
                    .status
                    .map_or("purged", lease_domain::Status::as_str)
                    .to_owned(),
                queue: n.queue.map(|q| q.as_str().to_owned()),
            })
            .collect(),
        edges: graph
            .edges
            .into_iter()
            .map(|(parent, child)| GraphEdge {
                parent: parent.as_str().to_owned(),
                child: child.as_str().to_owned(),
            })
            .collect(),
        more: graph.more,
    };
    Ok(json_response(StatusCode::OK, body))
}
