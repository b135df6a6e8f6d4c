//! The handlers, each declared by its arguments: who may call it (`Viewer`, `Worker`,
//! `Holder`, `Admin`) and what it takes (`Checked<Body>`, `Param`, `Params`), both settled
//! before it runs, the second against the served OpenAPI document (`contract.rs`), so the
//! document is exactly what the server takes. A handler turns checked values into the
//! domain's, calls the store once and serializes the documented answer. No lease rule is
//! here: a holder's write is judged in the store's own transaction (`Command::AsHolder`), and
//! refusals become problems in `problem.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use lease_domain::{
    Command, Credential, EnqueueSpec, ErrorText, JobId, JobResult, LeaseTerm, Owner, Payload,
    QueueName, Retry, Status, Timestamp,
};
use lease_ports::audit::AuditFilter;
use lease_ports::{ClaimNext, JobRecord, Lease, ListFilter, WriteOutcome};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::App;
use crate::auth::Caller;
use crate::extract::{Admin, Checked, Holder, Param, Params, Viewer, Worker};
use crate::fields::{FenceNo, Name, Replace, Seconds, StatusName, Text, Time, Ttl};
use crate::input::bad_value;
use crate::problem::{Problem, ProblemBody};
use crate::secrets;

type AppState = State<Arc<App>>;
type Answer = Result<Response, Problem>;

pub(crate) const MAX_WAIT: f64 = 20.0;
/// The route of a claim, whose long poll may take `MAX_WAIT` beyond the request timeout.
pub(crate) const CLAIMS_ROUTE: &str = "/v1/queues/{queue}/claims";

/// The time a request is decided at: the server's clock, or the caller's `now` when the
/// server trusts caller clocks (a test setting; otherwise the document has no `now` and a body
/// that sends one is refused before this).
pub(crate) fn now(app: &App, given: Option<&Time>) -> Result<Timestamp, Problem> {
    match given {
        Some(_) if !app.config.client_clock => Err(Problem::invalid(
            "`now` is taken only by a server started to trust caller clocks",
        )),
        Some(t) => t.at("now"),
        None => Ok((app.config.clock)()),
    }
}

/// The time a query string's `now` names (checked as a number by the contract), if any.
fn query_now(app: &App, text: Option<&str>) -> Result<Timestamp, Problem> {
    let given = text
        .map(|t| t.parse::<f64>().map(Time))
        .transpose()
        .map_err(|_| Problem::invalid("parameter `now` must be a number"))?;
    now(app, given.as_ref())
}

/// A query string, read after the contract checked it.
fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, Problem> {
    query
        .map(|Query(q)| q)
        .map_err(|_| Problem::malformed("the query string could not be read"))
}

/// A count the contract checked, or `default` when absent.
fn count(text: Option<&str>, name: &str, default: usize) -> Result<usize, Problem> {
    text.map_or(Ok(default), |t| {
        t.parse()
            .map_err(|_| Problem::invalid(format!("parameter `{name}` must be a whole number")))
    })
}

pub(crate) fn term(now: Timestamp, ttl: &Ttl) -> Result<LeaseTerm, Problem> {
    LeaseTerm::new(now.get(), ttl.0).map_err(|e| bad_value("ttl", &e))
}

pub(crate) fn json_response(status: StatusCode, body: impl Serialize) -> Response {
    (status, Json(body)).into_response()
}

pub(crate) fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A payload as a view shows it: as text when it is UTF-8, else as base64.
#[derive(Debug, Default, Serialize, ToSchema)]
pub(crate) struct PayloadView {
    /// The payload as text, when it is UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload: Option<String>,
    /// The payload as base64, when it is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload_base64: Option<String>,
}

impl PayloadView {
    pub(crate) fn of(payload: Option<&[u8]>) -> Self {
        match payload.map(|bytes| (std::str::from_utf8(bytes), bytes)) {
            None => Self::default(),
            Some((Ok(text), _)) => Self {
                payload: Some(text.to_owned()),
                payload_base64: None,
            },
            Some((Err(_), bytes)) => Self {
                payload: None,
                payload_base64: Some(STANDARD.encode(bytes)),
            },
        }
    }
}

/// Base64 as RFC 4648 writes it, its padding required but the unused bits of its last
/// character not (the document's pattern says exactly this).
const LENIENT_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// Enqueue one job.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"id": "report-42", "payload": "{\"user\": 7}"}))]
pub(crate) struct EnqueueBody {
    /// The job's id.
    pub(crate) id: Name,
    /// Higher is claimed first (default 0).
    #[schema(minimum = -9_223_372_036_854_775_808_i64, maximum = 9_223_372_036_854_775_807_i64)]
    pub(crate) priority: Option<i64>,
    /// Not claimable before this time (Unix seconds).
    pub(crate) run_at: Option<Time>,
    /// How many leases `claims` may hand out (default 5).
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 4_294_967_295_i64)]
    pub(crate) max_attempts: Option<u32>,
    /// The payload as UTF-8 text: up to 1 MiB (1,048,576 bytes of UTF-8); one of `payload` and
    /// `payload_base64`.
    pub(crate) payload: Option<String>,
    /// The payload as base64 (for bytes that are not UTF-8): up to 1 MiB once decoded.
    #[schema(pattern = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")]
    pub(crate) payload_base64: Option<String>,
    /// When it was enqueued (Unix seconds), taken only by a server started to trust caller
    /// clocks; otherwise the server's clock says.
    pub(crate) enqueued_at: Option<Time>,
    /// How long one attempt may run before its worker stops it and fails it as "timed out"
    /// (default: the queue's, if it has one).
    pub(crate) timeout: Option<Seconds>,
    /// `finished`: a job of this id that is done, dead or cancelled runs again (a pending or
    /// running one is never touched); absent, an existing job is left as it is.
    pub(crate) replace: Option<Replace>,
}

/// The rules of a body that tie one field to another, which utoipa cannot declare on a type:
/// each is the `not` of its component's schema in the document (so it is both documented and
/// checked), and the handler refuses the same with a message of its own.
pub(crate) const ACROSS_FIELDS: [(&str, &str); 5] = [
    (
        "EnqueueBody",
        r#"{"required": ["payload", "payload_base64"], "description": "a payload is given as `payload` or as `payload_base64`, not both"}"#,
    ),
    (
        "BatchJob",
        r#"{"required": ["payload", "payload_base64"], "description": "a payload is given as `payload` or as `payload_base64`, not both"}"#,
    ),
    (
        "FailBody",
        r#"{"required": ["retry", "backoff"], "properties": {"retry": {"const": false}}, "description": "no `backoff` with `retry` false"}"#,
    ),
    (
        "LimitsBody",
        r#"{"required": ["timeout", "no_timeout"], "properties": {"timeout": {"not": {"type": "null"}}, "no_timeout": {"const": true}}, "description": "give `timeout` or `no_timeout`, not both"}"#,
    ),
    (
        "ScheduleBody",
        r#"{"required": ["catch_up_max"], "properties": {"catch_up_max": {"not": {"type": "null"}}, "catch_up": {"not": {"const": "all"}}}, "description": "`catch_up_max` goes with `catch_up` `all` only"}"#,
    ),
];

/// Whether the job was inserted (`false`: it existed, and nothing changed).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Inserted {
    /// `true` when this request made the job.
    pub(crate) inserted: bool,
}

/// When a job is enqueued: the server's clock, or (on a server that trusts caller clocks)
/// the body's `enqueued_at`, if any.
fn enqueue_time(app: &App, given: Option<&Time>) -> Result<Option<Timestamp>, Problem> {
    if app.config.client_clock {
        given.map(|t| t.at("enqueued_at")).transpose()
    } else {
        now(app, None).map(Some)
    }
}

/// A job to enqueue, in `queue`.
fn spec(app: &App, queue: &QueueName, body: EnqueueBody) -> Result<(JobId, EnqueueSpec), Problem> {
    let enqueued = enqueue_time(app, body.enqueued_at.as_ref())?;
    let id = body.id.job()?;
    let bytes = match (body.payload, body.payload_base64) {
        (Some(_), Some(_)) => {
            return Err(Problem::invalid(
                "give the payload as `payload` or as `payload_base64`, not both",
            ));
        }
        (Some(text), None) => Some(text.into_bytes()),
        (None, Some(encoded)) => Some(
            LENIENT_BASE64
                .decode(encoded.as_bytes())
                .map_err(|_| Problem::invalid("field `payload_base64` is not valid base64"))?,
        ),
        (None, None) => None,
    };
    let payload = bytes
        .map(|b| Payload::new(b, Payload::DEFAULT_LIMIT))
        .transpose()
        .map_err(|e| bad_value("payload", &e))?;
    let run_at = body.run_at.map(|t| t.at("run_at")).transpose()?;
    Ok((
        id,
        EnqueueSpec {
            queue: queue.clone(),
            priority: body.priority.unwrap_or(0),
            run_at,
            max_attempts: body.max_attempts,
            payload,
            enqueued_at: enqueued,
            timeout: body.timeout.map(|t| t.ttl("timeout")).transpose()?,
            replace_finished: body.replace.is_some(),
        },
    ))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/jobs", tag = "queue",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    request_body = EnqueueBody,
    responses(
        (status = 201, description = "Inserted", body = Inserted, links(
            ("claim" = (operation_id = "claim", parameters(("path.id" = "$request.body#/id")))),
            ("claim_next" = (operation_id = "claim_next", parameters(("path.queue" = "$request.path.queue")))),
            ("get_job" = (operation_id = "get_job", parameters(("path.id" = "$request.body#/id")))),
            ("cancel" = (operation_id = "cancel", parameters(("path.id" = "$request.body#/id")))),
        )),
        (status = 200, description = "The job existed; nothing changed", body = Inserted),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn enqueue(
    State(app): AppState,
    Worker(_): Worker,
    Param(queue): Param,
    Checked(body): Checked<EnqueueBody>,
) -> Answer {
    let queue = Name(queue).queue("queue")?;
    let (id, spec) = spec(&app, &queue, body)?;
    let inserted = app
        .store
        .enqueue_with(&id, &spec)
        .await
        .map_err(|e| Problem::store(&e))?;
    if inserted {
        app.wake(queue.as_str(), 1);
    }
    let status = if inserted {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json_response(status, Inserted { inserted }))
}

/// One job of a batch: as `POST /v1/queues/{queue}/jobs` takes one, and a queue of its own.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"id": "report-43", "queue": "mail", "priority": 1}))]
pub(crate) struct BatchJob {
    /// The job's queue (default: the path's).
    pub(crate) queue: Option<Name>,
    /// The job's id.
    pub(crate) id: Name,
    /// Higher is claimed first (default 0).
    #[schema(minimum = -9_223_372_036_854_775_808_i64, maximum = 9_223_372_036_854_775_807_i64)]
    pub(crate) priority: Option<i64>,
    /// Not claimable before this time (Unix seconds).
    pub(crate) run_at: Option<Time>,
    /// How many leases `claims` may hand out (default 5).
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 4_294_967_295_i64)]
    pub(crate) max_attempts: Option<u32>,
    /// The payload as UTF-8 text: up to 1 MiB (1,048,576 bytes of UTF-8); one of `payload` and
    /// `payload_base64`.
    pub(crate) payload: Option<String>,
    /// The payload as base64 (for bytes that are not UTF-8): up to 1 MiB once decoded.
    #[schema(pattern = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")]
    pub(crate) payload_base64: Option<String>,
    /// When it was enqueued, as `POST /v1/queues/{queue}/jobs` takes it.
    pub(crate) enqueued_at: Option<Time>,
    /// How long one attempt may run, as `POST /v1/queues/{queue}/jobs` takes it.
    pub(crate) timeout: Option<Seconds>,
    /// `finished`: rerun a finished job of this id, as `POST /v1/queues/{queue}/jobs` takes it.
    pub(crate) replace: Option<Replace>,
}

impl BatchJob {
    /// Its own queue, if any, and the job as one enqueue takes it.
    fn split(self) -> (Option<Name>, EnqueueBody) {
        (
            self.queue,
            EnqueueBody {
                id: self.id,
                priority: self.priority,
                run_at: self.run_at,
                max_attempts: self.max_attempts,
                payload: self.payload,
                payload_base64: self.payload_base64,
                enqueued_at: self.enqueued_at,
                timeout: self.timeout,
                replace: self.replace,
            },
        )
    }
}

/// Enqueue many jobs in one transaction.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"jobs": [{"id": "report-43"}, {"id": "report-44", "queue": "mail"}]}))]
pub(crate) struct EnqueueManyBody {
    /// The jobs.
    pub(crate) jobs: Vec<BatchJob>,
}

/// For each job, in order, whether it was inserted.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InsertedMany {
    /// `true` for each job this request made, `false` for each that existed.
    pub(crate) inserted: Vec<bool>,
}

#[utoipa::path(post, path = "/v1/queues/{queue}/jobs/batch", tag = "queue",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    request_body = EnqueueManyBody,
    responses(
        (status = 200, description = "Stored, all or none", body = InsertedMany),
        (status = "4XX", description = "Refused: nothing was stored", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn enqueue_many(
    State(app): AppState,
    Worker(_): Worker,
    Param(queue): Param,
    Checked(body): Checked<EnqueueManyBody>,
) -> Answer {
    let queue = Name(queue).queue("queue")?;
    let mut jobs = Vec::with_capacity(body.jobs.len());
    for (n, job) in body.jobs.into_iter().enumerate() {
        let at = |p: Problem| Problem::invalid(format!("jobs[{n}]: {}", p.detail()));
        let (own, job) = job.split();
        let own = own.map(|q| q.queue("queue")).transpose().map_err(at)?;
        jobs.push(spec(&app, own.as_ref().unwrap_or(&queue), job).map_err(at)?);
    }
    let inserted = app
        .store
        .enqueue_many(&jobs)
        .await
        .map_err(|e| Problem::store(&e))?;
    for ((_, spec), inserted) in jobs.iter().zip(&inserted) {
        if *inserted {
            app.wake(spec.queue.as_str(), 1);
        }
    }
    Ok(json_response(StatusCode::OK, InsertedMany { inserted }))
}

/// Claim due jobs of a queue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"ttl": 30, "limit": 1}))]
pub(crate) struct ClaimBody {
    /// How long each lease lasts, in seconds.
    pub(crate) ttl: Ttl,
    /// At most this many leases (default 1).
    #[schema(minimum = 1, maximum = 100)]
    pub(crate) limit: Option<u64>,
    /// Wait up to this many seconds (default 0) for a job to come due.
    #[schema(minimum = 0, maximum = 20)]
    pub(crate) wait: Option<f64>,
    /// The owner to claim as: the key's principal (the default) or `principal/...`.
    pub(crate) owner: Option<Name>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// One lease granted.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseView {
    /// The job.
    pub(crate) id: String,
    /// The fence: present it with every write, and to every resource the job writes to.
    pub(crate) fence: u64,
    /// The lease is live until then (Unix seconds).
    pub(crate) until: f64,
    /// Which attempt this is (1 for the first; 0 for a claim by id).
    pub(crate) attempt: u32,
    /// How long this attempt may run, in seconds (the job's timeout, else its queue's), if
    /// it has a limit: stop after that, and fail it as "timed out".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeout: Option<f64>,
    /// The job's payload, if it has one.
    #[serde(flatten)]
    pub(crate) payload: PayloadView,
    /// The lease's secret: send it as `Lease-Token` with every write. Shown once; every lease
    /// has its own.
    pub(crate) lease_token: String,
}

impl LeaseView {
    fn of(lease: &Lease, token: &str) -> Self {
        Self {
            id: lease.job.as_str().to_owned(),
            fence: lease.fence.get(),
            until: lease.until.get(),
            attempt: lease.attempt,
            timeout: lease.timeout.map(lease_domain::Ttl::get),
            payload: PayloadView::of(lease.payload.as_deref()),
            lease_token: token.to_owned(),
        }
    }

    /// The views of `leases`, each with its own token.
    fn all(leases: &[Lease], tokens: &[String]) -> Vec<Self> {
        leases
            .iter()
            .zip(tokens)
            .map(|(lease, token)| Self::of(lease, token))
            .collect()
    }
}

/// The leases granted (none when nothing came due within `wait`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Leases {
    /// The leases.
    pub(crate) leases: Vec<LeaseView>,
}

fn claimant(caller: &Caller, owner: Option<Name>) -> Result<Owner, Problem> {
    let owner = match owner {
        Some(name) => name.owner()?,
        None => caller.default_owner()?,
    };
    if !caller.may_act_as(&owner) {
        return Err(caller.not_as_owner());
    }
    Ok(owner)
}

/// `count` fresh lease tokens and their digests, one per lease a claim may grant.
fn new_tokens(count: usize) -> Result<(Vec<String>, Vec<lease_domain::TokenDigest>), Problem> {
    (0..count)
        .map(|_| new_token())
        .collect::<Result<Vec<_>, _>>()
        .map(|pairs| pairs.into_iter().unzip())
}

fn new_token() -> Result<(String, lease_domain::TokenDigest), Problem> {
    secrets::new_lease_token().map_err(|e| {
        tracing::error!(error = %e, "no lease token could be made");
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the server cannot make a lease token now",
        )
        .retry_after(1)
    })
}

#[utoipa::path(post, path = "/v1/queues/{queue}/claims", tag = "queue",
    params(("queue" = Name, Path, description = "The queue, percent-encoded")),
    request_body = ClaimBody,
    responses(
        (status = 200, description = "The leases granted, possibly none", body = Leases, links(
            ("renew" = (operation_id = "renew", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("complete" = (operation_id = "complete", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("fail" = (operation_id = "fail", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("release" = (operation_id = "release", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("progress" = (operation_id = "progress", parameters(("path.id" = "$response.body#/leases/0/id"), ("header.Lease-Token" = "$response.body#/leases/0/lease_token")), request_body = json!({"fence": "$response.body#/leases/0/fence"}))),
            ("get_job" = (operation_id = "get_job", parameters(("path.id" = "$response.body#/leases/0/id")))),
        )),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn claim_next(
    State(app): AppState,
    Worker(caller): Worker,
    Param(queue): Param,
    Checked(body): Checked<ClaimBody>,
) -> Answer {
    let queue = Name(queue).queue("queue")?;
    let limit = usize::try_from(body.limit.unwrap_or(1)).unwrap_or(1);
    let wait = body.wait.unwrap_or(0.0);
    term(now(&app, body.now.as_ref())?, &body.ttl)?;
    let owner = claimant(&caller, body.owner)?;
    // A secret of its own for every lease the claim may grant.
    let (tokens, digests) = new_tokens(limit)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(wait);
    let mut waiting = None;
    loop {
        let claim = ClaimNext {
            tokens: digests.clone(),
            ..ClaimNext::new(
                &queue,
                &owner,
                term(now(&app, body.now.as_ref())?, &body.ttl)?,
                limit,
            )
        };
        let leases = app
            .store
            .claim_next_with(&claim)
            .await
            .map_err(|e| Problem::store(&e))?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !leases.is_empty() || left.is_zero() {
            let leases = LeaseView::all(&leases, &tokens);
            return Ok(no_store(json_response(StatusCode::OK, Leases { leases })));
        }
        if waiting.is_none() {
            waiting = Some(app.waiters.join(queue.as_str()).ok_or_else(|| {
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "overloaded",
                    "too many claims are waiting; try again",
                )
                .retry_after(1)
            })?);
        }
        if let Some(waiting) = &waiting {
            waiting.wait(left.min(app.config.poll_interval)).await;
        }
    }
}

/// Claim one job by id.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"ttl": 30}))]
pub(crate) struct ClaimOneBody {
    /// How long the lease lasts, in seconds.
    pub(crate) ttl: Ttl,
    /// The owner to claim as: the key's principal (the default) or `principal/...`.
    pub(crate) owner: Option<Name>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/claim", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded")),
    request_body = ClaimOneBody,
    responses(
        (status = 200, description = "The lease", body = LeaseView, links(
            ("renew" = (operation_id = "renew", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
            ("complete" = (operation_id = "complete", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
            ("fail" = (operation_id = "fail", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
            ("release" = (operation_id = "release", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
            ("progress" = (operation_id = "progress", parameters(("path.id" = "$response.body#/id"), ("header.Lease-Token" = "$response.body#/lease_token")), request_body = json!({"fence": "$response.body#/fence"}))),
        )),
        (status = "4XX", description = "Refused: 404 no such job, 409 live, done, cancelled, dead or not_due", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn claim(
    State(app): AppState,
    Worker(caller): Worker,
    Param(id): Param,
    Checked(body): Checked<ClaimOneBody>,
) -> Answer {
    let id = Name(id).job()?;
    let now = now(&app, body.now.as_ref())?;
    let term = term(now, &body.ttl)?;
    let owner = claimant(&caller, body.owner)?;
    let (token, digest) = new_token()?;
    let term = term.with_token(digest);
    let fence = app
        .store
        .claim(&id, &owner, term)
        .await
        .map_err(|e| Problem::store(&e))?
        .map_err(|refused| Problem::refused_claim(&refused))?;
    let record = app
        .store
        .record(&id)
        .await
        .map_err(|e| Problem::store(&e))?;
    let timeout = match &record {
        Some(r) => {
            let settings = lease_ports::control::Control::settings_of(&*app.store, &r.job.queue)
                .await
                .map_err(|e| Problem::store(&e))?;
            r.job.timeout_in(&settings)
        }
        None => None,
    };
    let lease = Lease {
        job: id,
        fence,
        now,
        until: term.until(),
        attempt: 0,
        payload: record.and_then(|r| r.job.payload),
        timeout,
    };
    Ok(no_store(json_response(
        StatusCode::OK,
        LeaseView::of(&lease, &token),
    )))
}

/// What a lease holder's write proves, for the store to judge in its own transaction (the
/// whole pinned order: no such job, stale, done/cancelled/dead, not the owner, no token or the
/// wrong one, expired): the key's principal and scope, the owner the request named, and the
/// digest of its one `Lease-Token`. The server decides nothing of the job; it only refuses a
/// named owner this key may never act as (`403`), which reads nothing.
pub(crate) fn credential(holder: Holder, named: Option<Name>) -> Result<Credential, Problem> {
    let named = named.map(Name::owner).transpose()?;
    if let Some(owner) = &named {
        if !holder.caller.may_act_as(owner) {
            return Err(holder.caller.not_as_owner());
        }
    }
    Ok(Credential {
        principal: holder.caller.principal,
        scope: holder.caller.scope,
        named,
        token: holder.token,
    })
}

/// A holder's write as the store takes it: `write` made as the credential's writer (a
/// stand-in the store replaces with the lease's owner once the credential passes).
pub(crate) fn as_holder(credential: Credential, write: impl FnOnce(Owner) -> Command) -> Command {
    let stand_in = credential.writer();
    Command::AsHolder(credential, Box::new(write(stand_in)))
}

/// Runs a holder's write in the store and maps a refusal to its status.
pub(crate) async fn holder_write<T: lease_ports::FromOutcome>(
    app: &App,
    id: &JobId,
    command: Command,
) -> Result<T, Problem> {
    let outcome = app
        .store
        .apply(id, command, None)
        .await
        .map_err(|e| Problem::store(&e))?
        .outcome;
    lease_ports::outcome_as(outcome).map_err(|e| Problem::store(&e))
}

/// Renew a lease.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1, "ttl": 30}))]
pub(crate) struct RenewBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// The new length from now, in seconds.
    pub(crate) ttl: Ttl,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// When the renewed lease ends.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Renewed {
    /// Unix seconds.
    pub(crate) until: f64,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/renew", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = RenewBody,
    responses(
        (status = 200, description = "Renewed", body = Renewed),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn renew(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<RenewBody>,
) -> Answer {
    let id = Name(id).job()?;
    let term = term(now(&app, body.now.as_ref())?, &body.ttl)?;
    let fence = body.fence.fence()?;
    let credential = credential(holder, body.owner)?;
    let renew = as_holder(credential, |owner| Command::Renew(owner, fence, term));
    holder_write::<WriteOutcome>(&app, &id, renew)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(
        StatusCode::OK,
        Renewed {
            until: term.until().get(),
        },
    ))
}

/// The next claim a completion carries, made in the completion's transaction.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"queue": "reports", "ttl": 30}))]
pub(crate) struct NextClaim {
    /// The queue to claim from.
    pub(crate) queue: Name,
    /// How long each lease lasts, in seconds.
    pub(crate) ttl: Ttl,
    /// At most this many leases (default 1).
    #[schema(minimum = 1, maximum = 100)]
    pub(crate) limit: Option<u64>,
}

/// Complete a job.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1, "result": "stored at s3://reports/42"}))]
pub(crate) struct CompleteBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// The result to store.
    pub(crate) result: Text,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// Also lease the next due jobs of a queue, in the same transaction, as a claim would (as
    /// `owner`, else the key's principal): the answer is then 200 with `ok`, the refusal's
    /// fields when the completion was refused (the claim is made either way), and `leases`,
    /// each with a token of its own.
    pub(crate) claim: Option<NextClaim>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// The job is done; or, for a completion that carried a claim and was refused, `ok` false
/// with the refusal's fields as a problem names them.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Completed {
    /// `true` when the result was stored.
    pub(crate) ok: bool,
    /// The fence the result was stored with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result_fence: Option<u64>,
    /// With a `claim`: the leases it granted, possibly none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) leases: Option<Vec<LeaseView>>,
    /// With `ok` false: why the completion was refused, as a problem's `reason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// With `ok` false: the refusal in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
    /// With `ok` false: the status the refusal has on its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
    /// With a `stale` refusal: the fence presented.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) presented_fence: Option<u64>,
    /// With a `stale` refusal: the job's current fence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) current_fence: Option<u64>,
}

impl Completed {
    fn stored(fence: lease_domain::Fence, leases: Option<Vec<LeaseView>>) -> Self {
        Self {
            ok: true,
            result_fence: Some(fence.get()),
            leases,
            reason: None,
            detail: None,
            status: None,
            presented_fence: None,
            current_fence: None,
        }
    }

    fn refused(refused: &lease_domain::WriteRefused, leases: Vec<LeaseView>) -> Self {
        let problem = Problem::refused_write(refused);
        let body = problem.body();
        Self {
            ok: false,
            result_fence: None,
            leases: Some(leases),
            reason: Some(problem.reason().to_owned()),
            detail: Some(problem.detail().to_owned()),
            status: Some(problem.status().as_u16()),
            presented_fence: body["presented_fence"].as_u64(),
            current_fence: body["current_fence"].as_u64(),
        }
    }
}

#[utoipa::path(post, path = "/v1/jobs/{id}/complete", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = CompleteBody,
    responses(
        (status = 200, description = "Stored (or, with a claim, refused and the claim made)", body = Completed),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn complete(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<CompleteBody>,
) -> Answer {
    let id = Name(id).job()?;
    let now = now(&app, body.now.as_ref())?;
    let result = JobResult::new(body.result.0).map_err(|e| bad_value("result", &e))?;
    let fence = body.fence.fence()?;
    let credential = credential(holder, body.owner)?;
    let claimant = credential.writer();
    let complete = as_holder(credential, |owner| {
        Command::Complete(owner, fence, now, result)
    });
    let Some(next) = body.claim else {
        holder_write::<WriteOutcome>(&app, &id, complete)
            .await?
            .map_err(|refused| Problem::refused_write(&refused))?;
        return Ok(json_response(
            StatusCode::OK,
            Completed::stored(fence, None),
        ));
    };
    // The completion and the next claim in one transaction, the claim as the owner that
    // completes (the one the request named, else the key's principal); a token per lease.
    let queue = next.queue.queue("claim.queue")?;
    let limit = usize::try_from(next.limit.unwrap_or(1)).unwrap_or(1);
    let (tokens, digests) = new_tokens(limit)?;
    let claim = ClaimNext {
        tokens: digests,
        ..ClaimNext::new(&queue, &claimant, term(now, &next.ttl)?, limit)
    };
    let applied = app
        .store
        .apply(&id, complete, Some(claim))
        .await
        .map_err(|e| Problem::store(&e))?;
    let completed: WriteOutcome =
        lease_ports::outcome_as(applied.outcome).map_err(|e| Problem::store(&e))?;
    let leases = applied
        .claimed
        .unwrap_or_else(|| Ok(Vec::new()))
        .map_err(|e| Problem::store(&e))?;
    let leases = LeaseView::all(&leases, &tokens);
    let answer = match completed {
        Ok(()) => Completed::stored(fence, Some(leases)),
        Err(refused) => Completed::refused(&refused, leases),
    };
    Ok(no_store(json_response(StatusCode::OK, answer)))
}

/// Report a failure.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1, "error": "the upstream timed out"}))]
pub(crate) struct FailBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// What went wrong.
    pub(crate) error: Text,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
    /// `false`: straight to dead, whatever attempts are left (default `true`); then no
    /// `backoff`.
    pub(crate) retry: Option<bool>,
    /// The backoff before the retry (default: 1 s, doubling, at most 1 h, up to 25% shorter).
    pub(crate) backoff: Option<BackoffBody>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// The backoff before a retry: `base * factor^(attempt-1)` seconds, at most `max`, up to
/// `jitter` shorter.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"base": 1, "factor": 2, "max": 3600, "jitter": 0.25}))]
pub(crate) struct BackoffBody {
    /// Seconds before the first retry.
    #[schema(exclusive_minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub(crate) base: f64,
    /// Growth per attempt.
    #[schema(minimum = 1, maximum = 1_000_000_i64)]
    pub(crate) factor: f64,
    /// The longest delay, in seconds.
    #[schema(exclusive_minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub(crate) max: f64,
    /// How much shorter a delay may be.
    #[schema(minimum = 0, maximum = 1)]
    pub(crate) jitter: f64,
}

/// Where the job went.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FailedView {
    /// `pending` (it will be retried) or `dead`.
    pub(crate) state: String,
    /// When it becomes due again, when pending.
    pub(crate) run_at: Option<f64>,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/fail", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = FailBody,
    responses(
        (status = 200, description = "Recorded", body = FailedView),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn fail(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<FailBody>,
) -> Answer {
    let id = Name(id).job()?;
    let now = now(&app, body.now.as_ref())?;
    let error = ErrorText::new(body.error.0).map_err(|e| bad_value("error", &e))?;
    let retry = match (body.retry, body.backoff) {
        (Some(false), Some(_)) => {
            return Err(Problem::invalid(
                "field `backoff` has no meaning with `retry` false",
            ));
        }
        (Some(false), None) => Retry::No,
        (_, None) => Retry::default(),
        (_, Some(b)) => Retry::Backoff(
            lease_domain::Backoff::new(b.base, b.factor, b.max, b.jitter)
                .map_err(|e| bad_value("backoff", &e))?,
        ),
    };
    let fence = body.fence.fence()?;
    let credential = credential(holder, body.owner)?;
    let fail = as_holder(credential, |owner| {
        Command::Fail(owner, fence, now, error, retry)
    });
    let failed = holder_write::<lease_ports::FailOutcome>(&app, &id, fail)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(
        StatusCode::OK,
        FailedView {
            state: failed.status.as_str().to_owned(),
            run_at: failed.run_at.map(Timestamp::get),
        },
    ))
}

/// Give a lease back.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"fence": 1}))]
pub(crate) struct ReleaseBody {
    /// The lease's fence.
    pub(crate) fence: FenceNo,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<Name>,
}

/// Done.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct OkBody {
    /// Always `true`.
    pub(crate) ok: bool,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/release", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = ReleaseBody,
    responses(
        (status = 200, description = "Released", body = OkBody),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn release(
    State(app): AppState,
    holder: Holder,
    Param(id): Param,
    Checked(body): Checked<ReleaseBody>,
) -> Answer {
    let id = Name(id).job()?;
    let fence = body.fence.fence()?;
    let credential = credential(holder, body.owner)?;
    let release = as_holder(credential, |owner| Command::Release(owner, fence));
    holder_write::<WriteOutcome>(&app, &id, release)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(StatusCode::OK, OkBody { ok: true }))
}

/// A job's record, without its lease token.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct JobView {
    /// The id.
    pub(crate) id: String,
    /// The queue.
    pub(crate) queue: String,
    /// pending, running, done, dead or cancelled, now.
    pub(crate) status: StatusName,
    /// The holder (or last holder) of the lease.
    pub(crate) owner: Option<String>,
    /// The lease is live until then.
    pub(crate) until: f64,
    /// The latest fence handed out.
    pub(crate) fence: u64,
    /// Whether the job is done.
    pub(crate) done: bool,
    /// The stored result.
    pub(crate) result: Option<String>,
    /// The fence of the lease that completed the job.
    pub(crate) result_fence: Option<u64>,
    /// Higher is claimed first.
    pub(crate) priority: i64,
    /// Not claimable before this time.
    pub(crate) run_at: Option<f64>,
    /// Leases handed out by claims since enqueue or retry.
    pub(crate) attempts: u32,
    /// The most leases claims may hand out.
    pub(crate) max_attempts: u32,
    /// The last failure's text.
    pub(crate) error: Option<String>,
    /// `dead` or `cancelled` once the job ended so, else null.
    pub(crate) ended: Option<String>,
    /// When a queue rule last changed the job.
    pub(crate) updated: Option<f64>,
    /// How long one attempt may run, in seconds, if the job names a limit of its own.
    pub(crate) timeout: Option<f64>,
    /// What the current attempt last said of its progress.
    pub(crate) progress: Option<String>,
    /// The job's payload, if it has one.
    #[serde(flatten)]
    pub(crate) payload: PayloadView,
}

impl JobView {
    fn of(record: &JobRecord, now: Timestamp) -> Self {
        let job = &record.job;
        Self {
            id: record.id.as_str().to_owned(),
            queue: job.queue.as_str().to_owned(),
            status: StatusName::of(job.status_at(now)),
            owner: job.owner.as_ref().map(|o| o.as_str().to_owned()),
            until: job.until.get(),
            fence: job.fence.get(),
            done: job.done,
            result: job.result.clone(),
            result_fence: job.result_fence.map(lease_domain::Fence::get),
            priority: job.priority,
            run_at: job.run_at.map(Timestamp::get),
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            error: job.error.clone(),
            ended: job.ended.map(|e| e.as_str().to_owned()),
            updated: job.updated.map(Timestamp::get),
            timeout: job.timeout.map(lease_domain::Ttl::get),
            progress: job.progress.clone(),
            payload: PayloadView::of(job.payload.as_deref()),
        }
    }
}

#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs",
    params(("id" = Name, Path, description = "The job id, percent-encoded")),
    responses(
        (status = 200, description = "The job", body = JobView),
        (status = "4XX", description = "404 no such job", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn get_job(State(app): AppState, _: Viewer, Param(id): Param) -> Answer {
    let id = Name(id).job()?;
    let record = app
        .store
        .record(&id)
        .await
        .map_err(|e| Problem::store(&e))?
        .ok_or_else(Problem::no_such_job)?;
    Ok(json_response(
        StatusCode::OK,
        JobView::of(&record, (app.config.clock)()),
    ))
}

/// Which jobs to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only this queue.
    #[param(value_type = Option<Name>)]
    pub(crate) queue: Option<String>,
    /// Only this status.
    #[param(value_type = Option<StatusName>)]
    pub(crate) status: Option<String>,
    /// At most this many (default 50).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<String>,
    /// Only jobs whose id comes after this one (the `next` of the page before).
    #[param(value_type = Option<Name>)]
    pub(crate) after: Option<String>,
    /// The time statuses are judged at, taken only by a server that trusts caller clocks.
    #[param(value_type = Option<Time>)]
    pub(crate) now: Option<String>,
}

/// A page of jobs, in id order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct JobPage {
    /// The jobs.
    pub(crate) jobs: Vec<JobView>,
    /// The id to ask for the next page with (`after`), or null after the last page.
    pub(crate) next: Option<String>,
}

#[utoipa::path(get, path = "/v1/jobs", tag = "jobs", params(ListQuery),
    responses(
        (status = 200, description = "A page of jobs", body = JobPage),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn list_jobs(
    State(app): AppState,
    _: Viewer,
    Params: Params,
    listed: Result<Query<ListQuery>, QueryRejection>,
) -> Answer {
    let listed = query(listed)?;
    let limit = count(listed.limit.as_deref(), "limit", 50)?;
    let status = listed
        .status
        .as_deref()
        .map(Status::parse)
        .transpose()
        .map_err(|_| Problem::invalid("parameter `status` is not a status"))?;
    let filter = ListFilter {
        queue: listed.queue.map(|q| Name(q).queue("queue")).transpose()?,
        status,
        limit,
        after: listed.after.map(|a| Name(a).job()).transpose()?,
        now: query_now(&app, listed.now.as_deref())?,
    };
    let records = app
        .store
        .list(&filter)
        .await
        .map_err(|e| Problem::store(&e))?;
    let next = if records.len() == limit {
        records.last().map(|r| r.id.as_str().to_owned())
    } else {
        None
    };
    let jobs = records.iter().map(|r| JobView::of(r, filter.now)).collect();
    Ok(json_response(StatusCode::OK, JobPage { jobs, next }))
}

/// The body of cancel and retry: empty or `{}` (or the caller's time, on a server that trusts
/// caller clocks).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({}))]
pub(crate) struct AdminBody {
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

async fn admin_write(app: &App, id: String, body: AdminBody, retry: bool) -> Answer {
    let id = Name(id).job()?;
    let now = now(app, body.now.as_ref())?;
    let outcome = if retry {
        app.store.retry(&id, now).await
    } else {
        app.store.cancel(&id, now).await
    };
    outcome
        .map_err(|e| Problem::store(&e))?
        .map_err(|refused| Problem::refused_write(&refused))?;
    if retry {
        if let Some(record) = app
            .store
            .record(&id)
            .await
            .map_err(|e| Problem::store(&e))?
        {
            app.wake(record.job.queue.as_str(), 1);
        }
    }
    Ok(json_response(StatusCode::OK, OkBody { ok: true }))
}

#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "admin",
    params(("id" = Name, Path, description = "The job id, percent-encoded")),
    request_body(content = Option<AdminBody>, description = "Empty, or {}"),
    responses(
        (status = 200, description = "Cancelled: its holder's writes are refused from now on", body = OkBody, links(
            ("retry" = (operation_id = "retry", parameters(("path.id" = "$request.path.id")))),
        )),
        (status = "4XX", description = "Refused: 404, 409 done/cancelled/dead", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn cancel(
    State(app): AppState,
    _: Admin,
    Param(id): Param,
    Checked(body): Checked<AdminBody>,
) -> Answer {
    admin_write(&app, id, body, false).await
}

#[utoipa::path(post, path = "/v1/jobs/{id}/retry", tag = "admin",
    params(("id" = Name, Path, description = "The job id, percent-encoded")),
    request_body(content = Option<AdminBody>, description = "Empty, or {}"),
    responses(
        (status = 200, description = "Pending again; its fence goes on", body = OkBody),
        (status = "4XX", description = "Refused: 404, 409 done/live", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn retry(
    State(app): AppState,
    _: Admin,
    Param(id): Param,
    Checked(body): Checked<AdminBody>,
) -> Answer {
    admin_write(&app, id, body, true).await
}

/// Purge finished jobs.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"before": 1700000000, "statuses": ["done"]}))]
pub(crate) struct PurgeBody {
    /// Only jobs last changed before this time (Unix seconds).
    pub(crate) before: Time,
    /// Only these statuses (default: done, dead and cancelled); pending and running jobs are
    /// never purged.
    pub(crate) statuses: Option<Vec<StatusName>>,
}

/// How many jobs were purged.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Purged {
    /// The count.
    pub(crate) purged: u64,
}

#[utoipa::path(post, path = "/v1/purge", tag = "admin", request_body = PurgeBody,
    responses(
        (status = 200, description = "Purged; a purged id never gets an old fence again", body = Purged),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn purge(
    State(app): AppState,
    _: Admin,
    Checked(body): Checked<PurgeBody>,
) -> Answer {
    let before = body.before.at("before")?;
    let statuses = body.statuses.map_or_else(
        || vec![Status::Done, Status::Dead, Status::Cancelled],
        |names| names.into_iter().map(StatusName::status).collect(),
    );
    let purged = app
        .store
        .purge(before, &statuses)
        .await
        .map_err(|e| Problem::store(&e))?;
    Ok(json_response(StatusCode::OK, Purged { purged }))
}
/// Counts of jobs by queue and status.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Stats {
    /// For each queue, the number of jobs in each status (pending, running, done, dead,
    /// cancelled), now.
    pub(crate) queues: serde_json::Map<String, Value>,
}

/// When to judge statuses.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct StatsQuery {
    /// The time statuses are judged at, taken only by a server that trusts caller clocks.
    #[param(value_type = Option<Time>)]
    pub(crate) now: Option<String>,
}

#[utoipa::path(get, path = "/v1/stats", tag = "queue", params(StatsQuery),
    responses(
        (status = 200, description = "Counts", body = Stats),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
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
    let (rows, due) = futures::try_join!(app.store.stats(now), app.store.due(now))
        .map_err(|e| Problem::store(&e))?;
    let mut queues = crate::wire::stats_json(&rows);
    crate::wire::with_due(&mut queues, &due);
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

/// Completions and refused writes per queue and minute.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Activity {
    /// The first minute's start (Unix seconds, a multiple of 60).
    pub(crate) since: f64,
    /// How many minutes each array holds.
    pub(crate) minutes: u64,
    /// Per queue with any: `{"completed": [...], "refused": [...]}`, one number per minute.
    #[schema(value_type = Object)]
    pub(crate) queues: Value,
}

#[utoipa::path(get, path = "/v1/activity", tag = "queue", params(ActivityQuery),
    responses(
        (status = 200, description = "Completions (done jobs by their completion time) and refused writes (from the audit trail, in their job's queue) per minute", body = Activity),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
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
    let rows = app
        .store
        .activity(from)
        .await
        .map_err(|e| Problem::store(&e))?;
    Ok(crate::wire::activity_json(&rows, from, minutes))
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
    security(("api_key" = []), ("session" = [])))]
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
        .await
        .map_err(|e| Problem::store(&e))?;
    let refusals: Vec<Value> = rows.iter().map(crate::wire::refusal_json).collect();
    Ok(json_response(
        StatusCode::OK,
        json!({ "refusals": refusals }),
    ))
}

/// Whether the store answers.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    /// `true` when the store answered a read.
    pub(crate) ok: bool,
}

#[utoipa::path(get, path = "/healthz", tag = "service",
    responses(
        (status = 200, description = "The store answers", body = Health),
        (status = 503, description = "The store does not answer", body = Health),
    ))]
pub(crate) async fn healthz(State(app): AppState) -> Response {
    let probe = JobId::new("lease-healthz").map(|id| async move { app.store.state(&id).await });
    let ok = match probe {
        Ok(read) => read.await.is_ok(),
        Err(_) => false,
    };
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, json!({ "ok": ok }))
}

#[utoipa::path(get, path = "/metrics", tag = "service",
    responses(
        (status = 200, description = "Prometheus text", content_type = "text/plain; version=0.0.4", body = String),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn metrics(State(app): AppState, _: Viewer) -> Answer {
    if app.config.metrics.is_some() {
        // The queues' flow control, read at each scrape (the settings are a small table).
        let now = now(&app, None)?;
        let settings = lease_ports::control::Control::queues(&*app.store)
            .await
            .map_err(|e| Problem::store(&e))?;
        let mut gauged = app
            .gauged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lease_ports::observe::set_queue_gauges(&settings, &gauged, now);
        gauged.extend(settings.into_iter().map(|(queue, _)| queue));
    }
    let text = app
        .config
        .metrics
        .as_ref()
        .map_or_else(String::new, |render| render());
    let mut response = (StatusCode::OK, text).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    Ok(response)
}

#[utoipa::path(get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "This document", content_type = "application/json", body = Object)))]
pub(crate) async fn openapi(State(app): AppState) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        app.openapi.clone(),
    )
        .into_response()
}
