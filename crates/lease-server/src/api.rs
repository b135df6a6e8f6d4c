//! The handlers: each parses its request, authenticates it, calls the store and maps the
//! outcome. No lease rule is here: the holder's write is judged by `lease_domain::judge_holder`
//! and the store's own decision; refusals become problems in `problem.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use lease_domain::{
    Command, Credential, EnqueueSpec, ErrorText, Fence, JobId, JobResult, LeaseTerm, Owner,
    Payload, QueueName, Retry, Scope, Status, Timestamp,
};
use lease_ports::audit::AuditFilter;
use lease_ports::{ClaimNext, JobRecord, Lease, ListFilter, WriteOutcome};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use crate::App;
use crate::auth::{Caller, authenticate, authenticate_holder};
use crate::input::{Kind, bad_value, json_body, optional, required};
use crate::problem::{Problem, ProblemBody};
use crate::secrets;

type AppState = State<Arc<App>>;
type Answer = Result<Response, Problem>;

const MAX_CLAIM_LIMIT: u64 = 100;
pub(crate) const MAX_WAIT: f64 = 20.0;
/// The route of a claim, whose long poll may take `MAX_WAIT` beyond the request timeout.
pub(crate) const CLAIMS_ROUTE: &str = "/v1/queues/{queue}/claims";
const MAX_PAGE: usize = 1000;

fn path_value(path: Result<Path<String>, PathRejection>) -> Result<String, Problem> {
    path.map(|Path(v)| v).map_err(|_| {
        Problem::malformed("the path could not be read (percent-encode ids and queue names)")
    })
}

fn job_id(path: Result<Path<String>, PathRejection>) -> Result<JobId, Problem> {
    JobId::new(path_value(path)?).map_err(|e| bad_value("id", &e))
}

fn queue_name(path: Result<Path<String>, PathRejection>) -> Result<QueueName, Problem> {
    QueueName::new(path_value(path)?).map_err(|e| bad_value("queue", &e))
}

fn fence(value: u64) -> Result<Fence, Problem> {
    Fence::new(value).map_err(|e| bad_value("fence", &e))
}

/// The time a request is decided at: the server's clock, or the caller's `now` when the
/// server trusts caller clocks (a test setting).
fn now(app: &App, given: Option<f64>) -> Result<Timestamp, Problem> {
    match given {
        Some(_) if !app.config.client_clock => Err(Problem::invalid(
            "field `now` is taken only by a server started to trust caller clocks",
        )),
        Some(t) => {
            Timestamp::new(t).map_err(|_| Problem::invalid("field `now` must be a finite number"))
        }
        None => Ok((app.config.clock)()),
    }
}

/// A time given in a query string, named by `parameter` when it is not a finite number.
fn query_time(text: Option<&str>, parameter: &str) -> Result<Option<f64>, Problem> {
    text.map(|t| {
        t.parse::<f64>()
            .ok()
            .filter(|t| t.is_finite())
            .ok_or_else(|| {
                Problem::invalid(format!("parameter `{parameter}` must be a finite number"))
            })
    })
    .transpose()
}

/// A page size given in a query string: 1 to 1,000, `default` when it is absent.
fn page_limit(text: Option<&str>, default: usize) -> Result<usize, Problem> {
    count_param(text, "limit", default, MAX_PAGE)
}

/// A count from the query string: `default` when absent, else 1 to `max`.
fn count_param(
    text: Option<&str>,
    name: &str,
    default: usize,
    max: usize,
) -> Result<usize, Problem> {
    match text {
        None => Ok(default),
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| Problem::invalid(format!("parameter `{name}` must be from 1 to {max}"))),
    }
}

fn term(now: Timestamp, ttl: f64) -> Result<LeaseTerm, Problem> {
    if ttl <= 0.0 {
        return Err(Problem::invalid("field `ttl` must be greater than 0"));
    }
    LeaseTerm::new(now.get(), ttl).map_err(|e| bad_value("ttl", &e))
}

pub(crate) fn json_response(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

pub(crate) fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn payload_fields(payload: Option<&[u8]>) -> serde_json::Map<String, Value> {
    let mut fields = serde_json::Map::new();
    if let Some(bytes) = payload {
        match std::str::from_utf8(bytes) {
            Ok(text) => fields.insert("payload".into(), json!(text)),
            Err(_) => fields.insert("payload_base64".into(), json!(STANDARD.encode(bytes))),
        };
    }
    fields
}

/// Enqueue one job.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct EnqueueBody {
    /// The job's id (any non-empty text without NUL, up to 1,024 bytes).
    pub(crate) id: String,
    /// Higher is claimed first (default 0).
    pub(crate) priority: Option<i64>,
    /// Not claimable before this time (Unix seconds).
    pub(crate) run_at: Option<f64>,
    /// How many leases `claims` may hand out (default 5).
    pub(crate) max_attempts: Option<u32>,
    /// The payload as UTF-8 text.
    pub(crate) payload: Option<String>,
    /// The payload as base64 (for bytes that are not UTF-8).
    pub payload_base64: Option<String>,
    /// When it was enqueued (Unix seconds), taken only by a server started to trust caller
    /// clocks; otherwise the server's clock says.
    pub(crate) enqueued_at: Option<f64>,
}

const ENQUEUE_FIELDS: [crate::input::Field; 7] = [
    required("id", Kind::Text),
    optional("priority", Kind::Integer),
    optional("run_at", Kind::Number),
    optional("max_attempts", Kind::Unsigned(u32::MAX as u64)),
    optional("payload", Kind::Text),
    optional("payload_base64", Kind::Text),
    optional("enqueued_at", Kind::Number),
];

/// Whether the job was inserted (`false`: it existed, and nothing changed).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Inserted {
    /// `true` when this request made the job.
    pub(crate) inserted: bool,
}

/// When a job is enqueued: the server's clock, or (on a server that trusts caller clocks)
/// the body's `enqueued_at`, if any.
fn enqueue_time(app: &App, given: Option<f64>) -> Result<Option<Timestamp>, Problem> {
    if app.config.client_clock {
        given
            .map(Timestamp::new)
            .transpose()
            .map_err(|_| Problem::invalid("field `enqueued_at` must be a finite number"))
    } else {
        now(app, None).map(Some)
    }
}

/// A job to enqueue, enqueued at `enqueued` (see [`enqueue_time`]).
fn spec(app: &App, queue: &QueueName, body: EnqueueBody) -> Result<(JobId, EnqueueSpec), Problem> {
    let enqueued = enqueue_time(app, body.enqueued_at)?;
    let id = JobId::new(body.id).map_err(|e| bad_value("id", &e))?;
    let bytes = match (body.payload, body.payload_base64) {
        (Some(_), Some(_)) => {
            return Err(Problem::invalid(
                "give the payload as `payload` or as `payload_base64`, not both",
            ));
        }
        (Some(text), None) => Some(text.into_bytes()),
        (None, Some(encoded)) => Some(
            STANDARD
                .decode(encoded.as_bytes())
                .map_err(|_| Problem::invalid("field `payload_base64` is not valid base64"))?,
        ),
        (None, None) => None,
    };
    let payload = bytes
        .map(|b| Payload::new(b, Payload::DEFAULT_LIMIT))
        .transpose()
        .map_err(|e| bad_value("payload", &e))?;
    let run_at = body
        .run_at
        .map(Timestamp::new)
        .transpose()
        .map_err(|_| Problem::invalid("field `run_at` must be a finite number"))?;
    Ok((
        id,
        EnqueueSpec {
            queue: queue.clone(),
            priority: body.priority.unwrap_or(0),
            run_at,
            max_attempts: body.max_attempts,
            payload,
            enqueued_at: enqueued,
        },
    ))
}

#[utoipa::path(post, path = "/v1/queues/{queue}/jobs", tag = "queue",
    params(("queue" = String, Path, description = "The queue, percent-encoded")),
    request_body = EnqueueBody,
    responses(
        (status = 201, description = "Inserted", body = Inserted),
        (status = 200, description = "The job existed; nothing changed", body = Inserted),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn enqueue(
    State(app): AppState,
    queue: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    authenticate(&app, &headers, Scope::Worker).await?;
    let body: EnqueueBody = json_body(&headers, body, &ENQUEUE_FIELDS, false)?;
    let queue = queue_name(queue)?;
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
    Ok(json_response(status, json!({ "inserted": inserted })))
}

/// Enqueue many jobs in one transaction.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct EnqueueManyBody {
    /// The jobs, each as `POST /v1/queues/{queue}/jobs` takes one, and an optional `queue`
    /// of its own (default: the path's).
    pub(crate) jobs: Vec<Value>,
}

/// For each job, in order, whether it was inserted.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InsertedMany {
    /// `true` for each job this request made, `false` for each that existed.
    pub(crate) inserted: Vec<bool>,
}

#[utoipa::path(post, path = "/v1/queues/{queue}/jobs/batch", tag = "queue",
    params(("queue" = String, Path, description = "The queue, percent-encoded")),
    request_body = EnqueueManyBody,
    responses(
        (status = 200, description = "Stored, all or none", body = InsertedMany),
        (status = "4XX", description = "Refused: nothing was stored", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn enqueue_many(
    State(app): AppState,
    queue: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    authenticate(&app, &headers, Scope::Worker).await?;
    let fields = [crate::input::Field {
        name: "jobs",
        kind: Kind::Array,
        required: true,
    }];
    let body: EnqueueManyBody = json_body(&headers, body, &fields, false)?;
    let queue = queue_name(queue)?;
    let mut jobs = Vec::with_capacity(body.jobs.len());
    for (n, job) in body.jobs.into_iter().enumerate() {
        let at = |p: Problem| Problem::invalid(format!("jobs[{n}]: {}", p.detail()));
        let mut job = job;
        let own_queue = match job.as_object_mut().and_then(|o| o.remove("queue")) {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) => {
                Some(QueueName::new(name).map_err(|e| at(bad_value("queue", &e)))?)
            }
            Some(_) => return Err(at(Problem::invalid("field `queue` must be a string"))),
        };
        crate::input::check_fields(&job, &ENQUEUE_FIELDS).map_err(at)?;
        let job: EnqueueBody = serde_json::from_value(job).map_err(|_| {
            Problem::invalid(format!("jobs[{n}]: a field has a value out of range"))
        })?;
        jobs.push(spec(&app, own_queue.as_ref().unwrap_or(&queue), job).map_err(at)?);
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
    Ok(json_response(
        StatusCode::OK,
        json!({ "inserted": inserted }),
    ))
}

/// Claim due jobs of a queue.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ClaimBody {
    /// How long each lease lasts, in seconds (> 0).
    pub(crate) ttl: f64,
    /// At most this many leases, 1-100 (default 1).
    pub(crate) limit: Option<u64>,
    /// Wait up to this many seconds, 0-20 (default 0), for a job to come due.
    pub(crate) wait: Option<f64>,
    /// The owner to claim as: the key's principal (the default) or `principal/...`.
    pub(crate) owner: Option<String>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<f64>,
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
    /// The payload as text, when it is UTF-8.
    pub(crate) payload: Option<String>,
    /// The payload as base64, when it is not UTF-8.
    pub payload_base64: Option<String>,
    /// The lease's secret: send it as `Lease-Token` with every write. Shown once.
    pub(crate) lease_token: String,
}

/// The leases granted (none when nothing came due within `wait`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Leases {
    /// The leases.
    pub(crate) leases: Vec<LeaseView>,
}

fn lease_json(lease: &Lease, token: &str) -> Value {
    let mut view = payload_fields(lease.payload.as_deref());
    view.insert("id".into(), json!(lease.job.as_str()));
    view.insert("fence".into(), json!(lease.fence.get()));
    view.insert("until".into(), json!(lease.until.get()));
    view.insert("attempt".into(), json!(lease.attempt));
    view.insert("lease_token".into(), json!(token));
    Value::Object(view)
}

fn claimant(caller: &Caller, owner: Option<String>) -> Result<Owner, Problem> {
    let owner = match owner {
        Some(name) => Owner::new(name).map_err(|e| bad_value("owner", &e))?,
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
    params(("queue" = String, Path, description = "The queue, percent-encoded")),
    request_body = ClaimBody,
    responses(
        (status = 200, description = "The leases granted, possibly none", body = Leases),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn claim_next(
    State(app): AppState,
    queue: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let caller = authenticate(&app, &headers, Scope::Worker).await?;
    let fields = [
        required("ttl", Kind::Number),
        optional("limit", Kind::Unsigned(u64::MAX)),
        optional("wait", Kind::Number),
        optional("owner", Kind::Text),
        optional("now", Kind::Number),
    ];
    let body: ClaimBody = json_body(&headers, body, &fields, false)?;
    let queue = queue_name(queue)?;
    let limit = body.limit.unwrap_or(1);
    if !(1..=MAX_CLAIM_LIMIT).contains(&limit) {
        return Err(Problem::invalid("field `limit` must be from 1 to 100"));
    }
    let wait = body.wait.unwrap_or(0.0);
    if !(0.0..=MAX_WAIT).contains(&wait) {
        return Err(Problem::invalid(
            "field `wait` must be from 0 to 20 seconds",
        ));
    }
    term(now(&app, body.now)?, body.ttl)?;
    let owner = claimant(&caller, body.owner)?;
    let limit = usize::try_from(limit).unwrap_or(1);
    // A secret of its own for every lease the claim may grant.
    let (tokens, digests) = new_tokens(limit)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(wait);
    let mut waiting = None;
    loop {
        let claim = ClaimNext {
            tokens: digests.clone(),
            ..ClaimNext::new(&queue, &owner, term(now(&app, body.now)?, body.ttl)?, limit)
        };
        let leases = app
            .store
            .claim_next_with(&claim)
            .await
            .map_err(|e| Problem::store(&e))?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !leases.is_empty() || left.is_zero() {
            let leases: Vec<Value> = leases
                .iter()
                .zip(&tokens)
                .map(|(l, token)| lease_json(l, token))
                .collect();
            return Ok(no_store(json_response(
                StatusCode::OK,
                json!({ "leases": leases }),
            )));
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
pub(crate) struct ClaimOneBody {
    /// How long the lease lasts, in seconds (> 0).
    pub(crate) ttl: f64,
    /// The owner to claim as: the key's principal (the default) or `principal/...`.
    pub(crate) owner: Option<String>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<f64>,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/claim", tag = "jobs",
    params(("id" = String, Path, description = "The job id, percent-encoded")),
    request_body = ClaimOneBody,
    responses(
        (status = 200, description = "The lease", body = LeaseView),
        (status = "4XX", description = "Refused: 404 no such job, 409 live, done, cancelled, dead or not_due", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn claim(
    State(app): AppState,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let caller = authenticate(&app, &headers, Scope::Worker).await?;
    let fields = [
        required("ttl", Kind::Number),
        optional("owner", Kind::Text),
        optional("now", Kind::Number),
    ];
    let body: ClaimOneBody = json_body(&headers, body, &fields, false)?;
    let id = job_id(id)?;
    let now = now(&app, body.now)?;
    let term = term(now, body.ttl)?;
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
    let lease = Lease {
        job: id,
        fence,
        now,
        until: term.until(),
        attempt: 0,
        payload: record.and_then(|r| r.job.payload),
    };
    Ok(no_store(json_response(
        StatusCode::OK,
        lease_json(&lease, &token),
    )))
}

/// What a lease holder's write proves, for the store to judge in its own transaction (the
/// whole pinned order: no such job, stale, done/cancelled/dead, not the owner, no token or the
/// wrong one, expired): the key's principal and scope, the owner the request named, and the
/// digest of its one `Lease-Token`. The server decides nothing of the job; it only refuses a
/// named owner this key may never act as (`403`), which reads nothing.
fn credential(
    caller: &Caller,
    headers: &HeaderMap,
    named: Option<String>,
) -> Result<Credential, Problem> {
    let named = named
        .map(Owner::new)
        .transpose()
        .map_err(|e| bad_value("owner", &e))?;
    if let Some(owner) = &named {
        if !caller.may_act_as(owner) {
            return Err(caller.not_as_owner());
        }
    }
    Ok(Credential {
        principal: caller.principal.clone(),
        scope: caller.scope,
        named,
        token: crate::auth::lease_token(headers),
    })
}

/// A holder's write as the store takes it: `write` made as the credential's writer (a
/// stand-in the store replaces with the lease's owner once the credential passes).
fn as_holder(credential: Credential, write: impl FnOnce(Owner) -> Command) -> Command {
    let stand_in = credential.writer();
    Command::AsHolder(credential, Box::new(write(stand_in)))
}

/// Runs a holder's write in the store and maps a refusal to its status.
async fn holder_write<T: lease_ports::FromOutcome>(
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
pub(crate) struct RenewBody {
    /// The lease's fence.
    pub(crate) fence: u64,
    /// The new length from now, in seconds (> 0).
    pub(crate) ttl: f64,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<String>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<f64>,
}

/// When the renewed lease ends.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Renewed {
    /// Unix seconds.
    pub(crate) until: f64,
}

const FENCE: Kind = Kind::Unsigned(u64::MAX);

#[utoipa::path(post, path = "/v1/jobs/{id}/renew", tag = "jobs",
    params(("id" = String, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = RenewBody,
    responses(
        (status = 200, description = "Renewed", body = Renewed),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn renew(
    State(app): AppState,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let caller = authenticate_holder(&app, &headers).await?;
    let fields = [
        required("fence", FENCE),
        required("ttl", Kind::Number),
        optional("owner", Kind::Text),
        optional("now", Kind::Number),
    ];
    let body: RenewBody = json_body(&headers, body, &fields, false)?;
    let id = job_id(id)?;
    let term = term(now(&app, body.now)?, body.ttl)?;
    let fence = fence(body.fence)?;
    let credential = credential(&caller, &headers, body.owner)?;
    let renew = as_holder(credential, |owner| Command::Renew(owner, fence, term));
    holder_write::<WriteOutcome>(&app, &id, renew)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(
        StatusCode::OK,
        json!({ "until": term.until().get() }),
    ))
}

/// Complete a job.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct CompleteBody {
    /// The lease's fence.
    pub(crate) fence: u64,
    /// The result to store.
    pub(crate) result: String,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<String>,
    /// Also lease the next due jobs of `queue` (`{"queue", "ttl", "limit"?}`), in the same
    /// transaction, as a claim would (as `owner`, else the key's principal): the answer is
    /// then 200 with `ok`, the refusal's fields when the completion was refused (the claim is
    /// made either way), and `leases`, each with a token of its own.
    #[schema(value_type = Option<Object>)]
    pub(crate) claim: Option<Value>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<f64>,
}

/// The job is done.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Completed {
    /// Always `true`.
    pub(crate) ok: bool,
    /// The fence the result was stored with.
    pub(crate) result_fence: u64,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/complete", tag = "jobs",
    params(("id" = String, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = CompleteBody,
    responses(
        (status = 200, description = "Stored", body = Completed),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn complete(
    State(app): AppState,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let caller = authenticate_holder(&app, &headers).await?;
    let fields = [
        required("fence", FENCE),
        required("result", Kind::Text),
        optional("owner", Kind::Text),
        optional("claim", Kind::Object),
        optional("now", Kind::Number),
    ];
    let body: CompleteBody = json_body(&headers, body, &fields, false)?;
    let id = job_id(id)?;
    let now = now(&app, body.now)?;
    let result = JobResult::new(body.result).map_err(|e| bad_value("result", &e))?;
    let next = body.claim.map(next_claim).transpose()?;
    let fence = fence(body.fence)?;
    let credential = credential(&caller, &headers, body.owner)?;
    let claimant = credential.writer();
    let complete = as_holder(credential, |owner| {
        Command::Complete(owner, fence, now, result)
    });
    let Some((queue, ttl, limit)) = next else {
        holder_write::<WriteOutcome>(&app, &id, complete)
            .await?
            .map_err(|refused| Problem::refused_write(&refused))?;
        return Ok(json_response(
            StatusCode::OK,
            json!({ "ok": true, "result_fence": fence.get() }),
        ));
    };
    // The completion and the next claim in one transaction, the claim as the owner that
    // completes (the one the request named, else the key's principal); a token per lease.
    let (tokens, digests) = new_tokens(limit)?;
    let claim = ClaimNext {
        tokens: digests,
        ..ClaimNext::new(&queue, &claimant, term(now, ttl)?, limit)
    };
    let applied = app
        .store
        .apply(&id, complete, Some(claim))
        .await
        .map_err(|e| Problem::store(&e))?;
    let completed: WriteOutcome =
        lease_ports::outcome_as(applied.outcome).map_err(|e| Problem::store(&e))?;
    let leases: Vec<Value> = applied
        .claimed
        .unwrap_or_else(|| Ok(Vec::new()))
        .map_err(|e| Problem::store(&e))?
        .iter()
        .zip(&tokens)
        .map(|(l, token)| lease_json(l, token))
        .collect();
    let answer = match completed {
        Ok(()) => json!({ "ok": true, "result_fence": fence.get(), "leases": leases }),
        Err(refused) => {
            let mut refusal = Problem::refused_write(&refused).body();
            refusal["leases"] = json!(leases);
            refusal["ok"] = json!(false);
            refusal
        }
    };
    Ok(no_store(json_response(StatusCode::OK, answer)))
}

/// The next claim a completion may carry: the queue, the ttl and how many (1-100).
fn next_claim(claim: Value) -> Result<(QueueName, f64, usize), Problem> {
    let fields = [
        required("queue", Kind::Text),
        required("ttl", Kind::Number),
        optional("limit", Kind::Unsigned(MAX_CLAIM_LIMIT)),
    ];
    crate::input::check_fields(&claim, &fields)
        .map_err(|p| Problem::invalid(format!("claim: {}", p.detail())))?;
    let queue = QueueName::new(claim["queue"].as_str().unwrap_or_default())
        .map_err(|e| bad_value("claim.queue", &e))?;
    let ttl = claim["ttl"].as_f64().unwrap_or(0.0);
    if ttl <= 0.0 {
        return Err(Problem::invalid("field `claim.ttl` must be greater than 0"));
    }
    let limit = claim["limit"].as_u64().unwrap_or(1);
    if limit == 0 {
        return Err(Problem::invalid(
            "field `claim.limit` must be from 1 to 100",
        ));
    }
    Ok((queue, ttl, usize::try_from(limit).unwrap_or(1)))
}

/// Report a failure.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct FailBody {
    /// The lease's fence.
    pub(crate) fence: u64,
    /// What went wrong.
    pub(crate) error: String,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<String>,
    /// `false`: straight to dead, whatever attempts are left (default `true`).
    pub(crate) retry: Option<bool>,
    /// The backoff before the retry (default: 1 s, doubling, at most 1 h, up to 25% shorter).
    pub(crate) backoff: Option<BackoffBody>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<f64>,
}

/// The backoff before a retry: `base * factor^(attempt-1)` seconds, at most `max`, up to
/// `jitter` (0-1) shorter.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct BackoffBody {
    /// Seconds before the first retry (> 0).
    pub(crate) base: f64,
    /// Growth per attempt (>= 1).
    pub(crate) factor: f64,
    /// The longest delay, in seconds (> 0).
    pub(crate) max: f64,
    /// How much shorter a delay may be, 0-1.
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
    params(("id" = String, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = FailBody,
    responses(
        (status = 200, description = "Recorded", body = FailedView),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner/expired, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn fail(
    State(app): AppState,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let caller = authenticate_holder(&app, &headers).await?;
    let fields = [
        required("fence", FENCE),
        required("error", Kind::Text),
        optional("owner", Kind::Text),
        optional("retry", Kind::Bool),
        optional("backoff", Kind::Object),
        optional("now", Kind::Number),
    ];
    let body: FailBody = json_body(&headers, body, &fields, false)?;
    let id = job_id(id)?;
    let now = now(&app, body.now)?;
    let error = ErrorText::new(body.error).map_err(|e| bad_value("error", &e))?;
    let retry = match (body.retry, body.backoff) {
        (Some(false), Some(_)) => {
            return Err(Problem::invalid(
                "field `backoff` has no meaning with `retry` false",
            ));
        }
        (Some(false), None) => Retry::No,
        (_, None) => Retry::default(),
        (_, Some(b)) => Retry::Backoff(
            lease_domain::Backoff::new(b.base, b.factor, b.max, b.jitter).map_err(|_| {
                Problem::invalid(
                    "field `backoff` needs base and max > 0, factor >= 1 and jitter from 0 to 1",
                )
            })?,
        ),
    };
    let fence = fence(body.fence)?;
    let credential = credential(&caller, &headers, body.owner)?;
    let fail = as_holder(credential, |owner| {
        Command::Fail(owner, fence, now, error, retry)
    });
    let failed = holder_write::<lease_ports::FailOutcome>(&app, &id, fail)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(
        StatusCode::OK,
        json!({ "state": failed.status.as_str(), "run_at": failed.run_at.map(Timestamp::get) }),
    ))
}

/// Give a lease back.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct ReleaseBody {
    /// The lease's fence.
    pub(crate) fence: u64,
    /// Write as exactly this owner (default: any owner the key may act as).
    pub(crate) owner: Option<String>,
}

/// Done.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct OkBody {
    /// Always `true`.
    pub(crate) ok: bool,
}

#[utoipa::path(post, path = "/v1/jobs/{id}/release", tag = "jobs",
    params(("id" = String, Path, description = "The job id, percent-encoded"),
        ("Lease-Token" = String, Header, description = "The lease's token")),
    request_body = ReleaseBody,
    responses(
        (status = 200, description = "Released", body = OkBody),
        (status = "4XX", description = "Refused: 404, 409 stale/done/cancelled/dead/not_owner, 400 no token, 403 wrong token", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn release(
    State(app): AppState,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let caller = authenticate_holder(&app, &headers).await?;
    let fields = [required("fence", FENCE), optional("owner", Kind::Text)];
    let body: ReleaseBody = json_body(&headers, body, &fields, false)?;
    let id = job_id(id)?;
    let fence = fence(body.fence)?;
    let credential = credential(&caller, &headers, body.owner)?;
    let release = as_holder(credential, |owner| Command::Release(owner, fence));
    holder_write::<WriteOutcome>(&app, &id, release)
        .await?
        .map_err(|refused| Problem::refused_write(&refused))?;
    Ok(json_response(StatusCode::OK, json!({ "ok": true })))
}

/// A job's record, without its lease token.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct JobView {
    /// The id.
    pub(crate) id: String,
    /// The queue.
    pub(crate) queue: String,
    /// pending, running, done, dead or cancelled, now.
    pub(crate) status: String,
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
    /// The payload as text, when it is UTF-8.
    pub(crate) payload: Option<String>,
    /// The payload as base64, when it is not UTF-8.
    pub payload_base64: Option<String>,
}

fn job_json(record: &JobRecord, now: Timestamp) -> Value {
    let job = &record.job;
    let mut view = serde_json::Map::new();
    view.insert("id".into(), json!(record.id.as_str()));
    view.insert("queue".into(), json!(job.queue.as_str()));
    view.insert("status".into(), json!(job.status_at(now).as_str()));
    view.insert("owner".into(), json!(job.owner.as_ref().map(Owner::as_str)));
    view.insert("until".into(), json!(job.until.get()));
    view.insert("fence".into(), json!(job.fence.get()));
    view.insert("done".into(), json!(job.done));
    view.insert("result".into(), json!(job.result));
    view.insert(
        "result_fence".into(),
        json!(job.result_fence.map(Fence::get)),
    );
    view.insert("priority".into(), json!(job.priority));
    view.insert("run_at".into(), json!(job.run_at.map(Timestamp::get)));
    view.insert("attempts".into(), json!(job.attempts));
    view.insert("max_attempts".into(), json!(job.max_attempts));
    view.insert("error".into(), json!(job.error));
    view.insert(
        "ended".into(),
        json!(job.ended.map(lease_domain::Ended::as_str)),
    );
    view.insert("updated".into(), json!(job.updated.map(Timestamp::get)));
    view.extend(payload_fields(job.payload.as_deref()));
    Value::Object(view)
}

#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs",
    params(("id" = String, Path, description = "The job id, percent-encoded")),
    responses(
        (status = 200, description = "The job", body = JobView),
        (status = "4XX", description = "404 no such job", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn get_job(
    State(app): AppState,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Answer {
    authenticate(&app, &headers, Scope::Viewer).await?;
    let id = job_id(id)?;
    let record = app
        .store
        .record(&id)
        .await
        .map_err(|e| Problem::store(&e))?
        .ok_or_else(Problem::no_such_job)?;
    Ok(json_response(
        StatusCode::OK,
        job_json(&record, (app.config.clock)()),
    ))
}

/// Which jobs to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only this queue.
    pub(crate) queue: Option<String>,
    /// Only this status: pending, running, done, dead or cancelled.
    pub(crate) status: Option<String>,
    /// At most this many, 1-1000 (default 50).
    pub(crate) limit: Option<String>,
    /// Only jobs whose id comes after this one (the `next` of the page before).
    pub(crate) after: Option<String>,
    /// The time statuses are judged at, taken only by a server that trusts caller clocks.
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
    query: Result<Query<ListQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Answer {
    authenticate(&app, &headers, Scope::Viewer).await?;
    let Query(query) =
        query.map_err(|_| Problem::malformed("the query string could not be read"))?;
    let limit = page_limit(query.limit.as_deref(), 50)?;
    let filter = ListFilter {
        queue: query
            .queue
            .map(QueueName::new)
            .transpose()
            .map_err(|e| bad_value("queue", &e))?,
        status: query
            .status
            .as_deref()
            .map(Status::parse)
            .transpose()
            .map_err(|_| {
                Problem::invalid(
                    "parameter `status` must be one of pending, running, done, dead or cancelled",
                )
            })?,
        limit,
        after: query
            .after
            .map(JobId::new)
            .transpose()
            .map_err(|e| bad_value("after", &e))?,
        now: now(&app, query_time(query.now.as_deref(), "now")?)?,
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
    let jobs: Vec<Value> = records.iter().map(|r| job_json(r, filter.now)).collect();
    Ok(json_response(
        StatusCode::OK,
        json!({ "jobs": jobs, "next": next }),
    ))
}

/// The body of cancel and retry: empty, `{}`, or the caller's time on a server that trusts
/// caller clocks.
#[derive(Debug, Deserialize)]
struct AdminBody {
    now: Option<f64>,
}

async fn admin_write(
    app: &App,
    id: Result<Path<String>, PathRejection>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    retry: bool,
) -> Answer {
    authenticate(app, headers, Scope::Admin).await?;
    let body: AdminBody = json_body(headers, body, &[optional("now", Kind::Number)], true)?;
    let id = job_id(id)?;
    let now = now(app, body.now)?;
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
    Ok(json_response(StatusCode::OK, json!({ "ok": true })))
}

#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "admin",
    params(("id" = String, Path, description = "The job id, percent-encoded")),
    request_body(content = Option<Object>, description = "Empty, or {}"),
    responses(
        (status = 200, description = "Cancelled: its holder's writes are refused from now on", body = OkBody),
        (status = "4XX", description = "Refused: 404, 409 done/cancelled/dead", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn cancel(
    State(app): AppState,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    admin_write(&app, id, &headers, body, false).await
}

#[utoipa::path(post, path = "/v1/jobs/{id}/retry", tag = "admin",
    params(("id" = String, Path, description = "The job id, percent-encoded")),
    request_body(content = Option<Object>, description = "Empty, or {}"),
    responses(
        (status = 200, description = "Pending again; its fence goes on", body = OkBody),
        (status = "4XX", description = "Refused: 404, 409 done/live", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn retry(
    State(app): AppState,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    admin_write(&app, id, &headers, body, true).await
}

/// Purge finished jobs.
#[derive(Debug, Deserialize, ToSchema)]
pub(crate) struct PurgeBody {
    /// Only jobs last changed before this time (Unix seconds).
    pub(crate) before: f64,
    /// Only these statuses (default: done, dead and cancelled).
    pub(crate) statuses: Option<Vec<String>>,
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
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    authenticate(&app, &headers, Scope::Admin).await?;
    let fields = [
        required("before", Kind::Number),
        optional("statuses", Kind::Array),
    ];
    let body: PurgeBody = json_body(&headers, body, &fields, false)?;
    let before = Timestamp::new(body.before)
        .map_err(|_| Problem::invalid("field `before` must be a finite number"))?;
    let statuses = match body.statuses {
        None => vec![Status::Done, Status::Dead, Status::Cancelled],
        Some(names) => names
            .iter()
            .map(|n| Status::parse(n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Problem::invalid("field `statuses` holds a name that is not a status"))?,
    };
    let purged = app
        .store
        .purge(before, &statuses)
        .await
        .map_err(|e| Problem::store(&e))?;
    Ok(json_response(StatusCode::OK, json!({ "purged": purged })))
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
    query: Result<Query<StatsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Answer {
    authenticate(&app, &headers, Scope::Viewer).await?;
    let Query(query) =
        query.map_err(|_| Problem::malformed("the query string could not be read"))?;
    let now = now(&app, query_time(query.now.as_deref(), "now")?)?;
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
    /// How many minutes, the current one last (1-1440, default 60).
    pub(crate) minutes: Option<String>,
    /// The time to count back from, taken only by a server that trusts caller clocks.
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

const MAX_ACTIVITY_MINUTES: usize = 1440;

#[utoipa::path(get, path = "/v1/activity", tag = "queue", params(ActivityQuery),
    responses(
        (status = 200, description = "Completions (done jobs by their completion time) and refused writes (from the audit trail, in their job's queue) per minute", body = Activity),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
    security(("api_key" = []), ("session" = [])))]
pub(crate) async fn activity(
    State(app): AppState,
    query: Result<Query<ActivityQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Answer {
    authenticate(&app, &headers, Scope::Viewer).await?;
    let Query(query) =
        query.map_err(|_| Problem::malformed("the query string could not be read"))?;
    let minutes = count_param(
        query.minutes.as_deref(),
        "minutes",
        60,
        MAX_ACTIVITY_MINUTES,
    )?;
    let now = now(&app, query_time(query.now.as_deref(), "now")?)?;
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
    pub(crate) since: Option<String>,
    /// At most this many, the newest (1-1000, default 100).
    pub(crate) limit: Option<String>,
    /// Only this job.
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
    /// renew, complete, release or fail.
    pub(crate) operation: String,
    /// The fence it presented.
    pub(crate) presented_fence: u64,
    /// The job's fence then (null: no such job).
    pub(crate) current_fence: Option<u64>,
    /// stale, expired, not_owner, done, cancelled, dead or missing.
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
    query: Result<Query<RefusalsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Answer {
    authenticate(&app, &headers, Scope::Viewer).await?;
    let Query(query) =
        query.map_err(|_| Problem::malformed("the query string could not be read"))?;
    let limit = page_limit(query.limit.as_deref(), 100)?;
    let since = query_time(query.since.as_deref(), "since")?
        .map(Timestamp::new)
        .transpose()
        .map_err(|_| Problem::invalid("parameter `since` must be a finite number"))?;
    let job = query
        .job
        .map(JobId::new)
        .transpose()
        .map_err(|e| bad_value("job", &e))?;
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
pub(crate) async fn metrics(State(app): AppState, headers: HeaderMap) -> Answer {
    authenticate(&app, &headers, Scope::Viewer).await?;
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
