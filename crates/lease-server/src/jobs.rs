//! The jobs: enqueue (one, or a batch in one transaction), read one, list them in keyset
//! pages, and an admin's cancel, retry and purge.

use crate::App;
use crate::extract::{Admin, Checked, Param, Params, Viewer, Worker};
use crate::fields::ParentFailure;
use crate::fields::{Name, Replace, Seconds, StatusName, Time};
use crate::input::bad_value;
use crate::problem::{Problem, ProblemBody};
use crate::respond::{
    Answer, AppState, OkBody, PayloadView, count, json_response, now, query, query_now,
};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use lease_domain::{
    EnqueueFields, EnqueueSpec, FieldRefused, JobId, QueueName, Status, Timestamp, TraceContext,
};
use lease_ports::{JobRecord, ListFilter};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Base64 as RFC 4648 writes it, its padding required but the unused bits of its last
/// character not (the document's pattern says exactly this).
pub(crate) const LENIENT_BASE64: base64::engine::GeneralPurpose =
    base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
    );

/// Declares the two bodies that carry one job's fields from one list of the fields:
/// [`EnqueueBody`], and [`BatchJob`], which also names its queue (the network's half of the
/// one enqueue spec, `lease_domain::EnqueueFields`).
macro_rules! enqueue_bodies {
    ($($(#[$attr:meta])* $field:ident: $ty:ty,)*) => {
        /// Enqueue one job.
        #[derive(Debug, Deserialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        #[schema(example = json!({"id": "report-42", "payload": "{\"user\": 7}"}))]
        pub(crate) struct EnqueueBody {
            $($(#[$attr])* pub(crate) $field: $ty,)*
        }

        #[doc = "One job of a batch: as `POST /v1/queues/{queue}/jobs` takes one, and a queue of its own."]
        #[derive(Debug, Deserialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        #[schema(example = json!({"id": "report-43", "queue": "mail", "priority": 1}))]
        pub(crate) struct BatchJob {
            /// The job's queue (default: the path's).
            pub(crate) queue: Option<Name>,
            $($(#[$attr])* pub(crate) $field: $ty,)*
        }

        impl BatchJob {
            /// Its own queue, if any, and the job as one enqueue takes it.
            fn split(self) -> (Option<Name>, EnqueueBody) {
                (self.queue, EnqueueBody { $($field: self.$field,)* })
            }
        }
    };
}

enqueue_bodies! {
    /// The job's id.
    id: Name,
    /// Higher is claimed first (default 0).
    #[schema(minimum = -9_223_372_036_854_775_808_i64, maximum = 9_223_372_036_854_775_807_i64)]
    priority: Option<i64>,
    /// Not claimable before this time (Unix seconds).
    run_at: Option<Time>,
    /// How many leases `claims` may hand out (default 5).
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 4_294_967_295_i64)]
    max_attempts: Option<u32>,
    /// The payload as UTF-8 text: up to 1 MiB (1,048,576 bytes of UTF-8); one of `payload` and
    /// `payload_base64`.
    payload: Option<String>,
    /// The payload as base64 (for bytes that are not UTF-8): up to 1 MiB once decoded.
    #[schema(pattern = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")]
    payload_base64: Option<String>,
    /// When it was enqueued (Unix seconds), taken only by a server started to trust caller
    /// clocks; otherwise the server's clock says.
    enqueued_at: Option<Time>,
    /// How long one attempt may run before its worker stops it and fails it as "timed out"
    /// (default: the queue's, if it has one).
    timeout: Option<Seconds>,
    /// `finished`: a job of this id that is done, dead or cancelled runs again (a pending or
    /// running one is never touched); absent, an existing job is left as it is.
    replace: Option<Replace>,
    /// The job's group in its queue (a customer, an account): the key the queue's group rules
    /// (`per_group`, `ordered`) count by. 1 to 1,024 bytes; absent, no group rule limits it.
    group: Option<Name>,
    /// Debounce, in seconds: the job is due this long from now (and not before `run_at`);
    /// an enqueue of its id while it still waits to start takes this payload and pushes its
    /// due time to this long from then (answered `inserted: false`); a started or finished
    /// job is left alone.
    debounce: Option<Seconds>,
    /// The jobs it runs after (its parents): it waits (status `waiting`) until they have
    /// finished, as `on_parent_failure` says. Each must exist or be in the same batch; at
    /// most 10,000, no repeats counted.
    #[schema(max_items = 10_000)]
    after: Option<Vec<Name>>,
    /// What it does when a parent ends dead or cancelled (default `cancel`).
    on_parent_failure: Option<ParentFailure>,
    /// The W3C `traceparent` of the span that enqueues it (version 00; default: the request's
    /// `traceparent` header): kept with the job, so its attempts join that trace. Ids of all
    /// zeros are refused (422), as W3C Trace Context says they are invalid.
    #[schema(pattern = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")]
    traceparent: Option<String>,
    /// The W3C `tracestate` that goes with `traceparent` (printable ASCII, at most 512 bytes;
    /// without a `traceparent` in the body it is ignored).
    #[schema(pattern = "^[ -~]*$", max_length = 512)]
    tracestate: Option<String>,
}

/// What W3C Trace Context forbids in a `traceparent` that a pattern without look-ahead cannot
/// say: a trace id or a parent id of all zeros. Each body field that takes a `traceparent` has
/// it as the `not` of its schema in the document, so a client generated from the document never
/// sends one, and the handler refuses the same (422).
pub(crate) const ZERO_TRACE_IDS: &str = r#"{"type": "string", "pattern": "^00-(0{32}-[0-9a-f]{16}|[0-9a-f]{32}-0{16})-", "description": "a trace id or a parent id of all zeros, which W3C Trace Context says is invalid"}"#;

/// The body fields that take a `traceparent`: (component, field).
pub(crate) const TRACEPARENT_FIELDS: [(&str, &str); 2] =
    [("EnqueueBody", "traceparent"), ("BatchJob", "traceparent")];

/// The rules of a body that tie one field to another, which utoipa cannot declare on a type:
/// each is the `not` of its component's schema in the document (so it is both documented and
/// checked), and the handler refuses the same with a message of its own.
pub(crate) const ACROSS_FIELDS: [(&str, &str); 6] = [
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
    (
        "LeaseWrite",
        r#"{"anyOf": [{"allOf": [{"required": ["op"], "properties": {"op": {"const": "complete"}}}, {"not": {"required": ["result"], "properties": {"result": {"not": {"type": "null"}}}}}]}, {"allOf": [{"required": ["op"], "properties": {"op": {"const": "complete"}}}, {"anyOf": [{"required": ["error"], "properties": {"error": {"not": {"type": "null"}}}}, {"required": ["retry"], "properties": {"retry": {"not": {"type": "null"}}}}, {"required": ["backoff"], "properties": {"backoff": {"not": {"type": "null"}}}}, {"required": ["unstarted"], "properties": {"unstarted": {"not": {"type": "null"}}}}]}]}, {"allOf": [{"required": ["op"], "properties": {"op": {"const": "fail"}}}, {"not": {"required": ["error"], "properties": {"error": {"not": {"type": "null"}}}}}]}, {"allOf": [{"required": ["op"], "properties": {"op": {"const": "fail"}}}, {"anyOf": [{"required": ["result"], "properties": {"result": {"not": {"type": "null"}}}}, {"required": ["claim"], "properties": {"claim": {"not": {"type": "null"}}}}, {"required": ["unstarted"], "properties": {"unstarted": {"not": {"type": "null"}}}}]}]}, {"allOf": [{"required": ["op"], "properties": {"op": {"const": "release"}}}, {"anyOf": [{"required": ["result"], "properties": {"result": {"not": {"type": "null"}}}}, {"required": ["claim"], "properties": {"claim": {"not": {"type": "null"}}}}, {"required": ["error"], "properties": {"error": {"not": {"type": "null"}}}}, {"required": ["retry"], "properties": {"retry": {"not": {"type": "null"}}}}, {"required": ["backoff"], "properties": {"backoff": {"not": {"type": "null"}}}}]}]}, {"required": ["retry", "backoff"], "properties": {"retry": {"const": false}, "backoff": {"not": {"type": "null"}}}}], "description": "`complete` needs `result` and may carry `claim`; `fail` needs `error` and may carry `retry` and `backoff` (no `backoff` with `retry` false); `release` may carry `unstarted`; no write takes another's fields"}"#,
    ),
];

/// Whether the job was inserted (`false`: it existed, and nothing changed).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Inserted {
    /// `true` when this request made the job.
    pub(crate) inserted: bool,
}

/// The trace context the request's `traceparent` and `tracestate` headers give, for the jobs
/// of an enqueue that name none of their own. As W3C Trace Context has a receiver do, a
/// header that is not a valid trace context (or not text, or empty) is ignored: the job is
/// stored without one (a proxy or an SDK may send anything in a tracing header, and the
/// enqueue is not refused for it). The body's fields, lease's own, are checked strictly.
pub(crate) fn header_trace(headers: &HeaderMap) -> Option<TraceContext> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let parent = text("traceparent").filter(|p| !p.is_empty())?;
    match TraceContext::new(parent, text("tracestate")) {
        Ok(trace) => Some(trace),
        Err(e) => {
            tracing::debug!(error = %e, "an enqueue's traceparent header is ignored");
            None
        }
    }
}

impl EnqueueBody {
    /// The job's fields as the domain checks them, its payload decoded; `enqueued_at` only
    /// when `trusted` (a server that trusts caller clocks; otherwise its clock says).
    fn fields(self, trusted: bool) -> Result<EnqueueFields, Problem> {
        let payload = match (self.payload, self.payload_base64) {
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
        Ok(EnqueueFields {
            id: self.id.0,
            queue: None,
            priority: self.priority,
            run_at: self.run_at.map(|t| t.0),
            max_attempts: self.max_attempts,
            payload,
            enqueued_at: self.enqueued_at.filter(|_| trusted).map(|t| t.0),
            timeout: self.timeout.map(|t| t.0),
            replace: self.replace.map(|_| "finished".to_owned()),
            group: self.group.map(|g| g.0),
            debounce: self.debounce.map(|d| d.0),
            after: self
                .after
                .map(|ids| ids.into_iter().map(|id| id.0).collect()),
            on_parent_failure: self
                .on_parent_failure
                .map(|p| p.policy().as_str().to_owned()),
            traceparent: self.traceparent,
            tracestate: self.tracestate,
        })
    }
}

/// A field the domain refused, as a `422` naming it.
fn field_refused(refused: FieldRefused) -> Problem {
    match refused.field {
        "traceparent" => Problem::invalid(format!(
            "field `traceparent`/`tracestate`: {}",
            refused.error
        )),
        "replace" | "on_parent_failure" => {
            Problem::invalid(format!("field `{}`: {}", refused.field, refused.error))
        }
        field => bad_value(field, &refused.error),
    }
}

/// A job to enqueue, in `queue` unless it names its own; `trace` is the request headers'
/// trace context.
pub(crate) fn spec(
    app: &App,
    queue: &QueueName,
    body: EnqueueBody,
    trace: Option<&TraceContext>,
) -> Result<(JobId, EnqueueSpec), Problem> {
    let trusted = app.config.client_clock;
    let defaults = EnqueueSpec {
        queue: queue.clone(),
        enqueued_at: if trusted { None } else { Some(now(app, None)?) },
        trace: trace.cloned(),
        ..EnqueueSpec::default()
    };
    body.fields(trusted)?
        .check(&defaults)
        .map_err(field_refused)
}

/// One job as a JSON object, as `POST /v1/queues/{queue}/jobs/batch` takes each of its `jobs`
/// (the CLI's `enqueue-many --json` lines): its fields, for `EnqueueFields::check`, with its
/// `enqueued_at` taken (the caller's clock is the one there is).
///
/// # Errors
/// Text that is not a JSON object, or a field that is unknown, of the wrong type or out of
/// what the document allows, named.
pub fn batch_job_fields(line: &str) -> Result<EnqueueFields, String> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not a JSON object ({e})"))?;
    if !value.is_object() {
        return Err("not a JSON object".to_owned());
    }
    let job: BatchJob = serde_path_to_error::deserialize(value).map_err(|e| {
        let at = e.path().to_string();
        let why = e.into_inner().to_string();
        // An unknown or missing field names itself.
        if at == "." || why.starts_with("unknown field") {
            why
        } else {
            format!("{at}: {why}")
        }
    })?;
    let (queue, body) = job.split();
    let mut fields = body.fields(true).map_err(|p| p.detail().to_owned())?;
    fields.queue = queue.map(|q| q.0);
    Ok(fields)
}

#[utoipa::path(post, path = "/v1/queues/{queue}/jobs", tag = "queue",
    params(("queue" = Name, Path, description = "The queue, percent-encoded"),
        ("traceparent" = Option<String>, Header, nullable = false, description = "The W3C traceparent of the span that enqueues (version 00: `00-` 32 hex digits `-` 16 hex digits `-` 2 hex digits), kept with each job that names none in the body: its attempts join that trace. Any value is taken: one that is not a valid trace context (another form, ids of all zeros) is ignored and the job stored without one, as W3C Trace Context has a receiver do"),
        ("tracestate" = Option<String>, Header, nullable = false, description = "The W3C tracestate that goes with traceparent (printable ASCII, at most 512 bytes); with a traceparent that is not valid, or one that is not, it is ignored the same way"),),
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
)]
pub(crate) async fn enqueue(
    State(app): AppState,
    Worker(_): Worker,
    Param(queue): Param,
    headers: HeaderMap,
    Checked(body): Checked<EnqueueBody>,
) -> Answer {
    let queue = Name(queue).queue("queue")?;
    let trace = header_trace(&headers);
    let (id, spec) = spec(&app, &queue, body, trace.as_ref())?;
    let inserted = app.store.enqueue_with(&id, &spec).await?;
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
    params(("queue" = Name, Path, description = "The queue, percent-encoded"),
        ("traceparent" = Option<String>, Header, nullable = false, description = "The W3C traceparent of the span that enqueues (version 00: `00-` 32 hex digits `-` 16 hex digits `-` 2 hex digits), kept with each job that names none in the body: its attempts join that trace. Any value is taken: one that is not a valid trace context (another form, ids of all zeros) is ignored and the job stored without one, as W3C Trace Context has a receiver do"),
        ("tracestate" = Option<String>, Header, nullable = false, description = "The W3C tracestate that goes with traceparent (printable ASCII, at most 512 bytes); with a traceparent that is not valid, or one that is not, it is ignored the same way"),),
    request_body = EnqueueManyBody,
    responses(
        (status = 200, description = "Stored, all or none", body = InsertedMany),
        (status = "4XX", description = "Refused: nothing was stored", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn enqueue_many(
    State(app): AppState,
    Worker(_): Worker,
    Param(queue): Param,
    headers: HeaderMap,
    Checked(body): Checked<EnqueueManyBody>,
) -> Answer {
    let queue = Name(queue).queue("queue")?;
    let trace = header_trace(&headers);
    let mut jobs = Vec::with_capacity(body.jobs.len());
    for (n, job) in body.jobs.into_iter().enumerate() {
        let at = |p: Problem| Problem::invalid(format!("jobs[{n}]: {}", p.detail()));
        let (own, job) = job.split();
        let own = own.map(|q| q.queue("queue")).transpose().map_err(at)?;
        jobs.push(spec(&app, own.as_ref().unwrap_or(&queue), job, trace.as_ref()).map_err(at)?);
    }
    let inserted = app.store.enqueue_many(&jobs).await?;
    for ((_, spec), inserted) in jobs.iter().zip(&inserted) {
        if *inserted {
            app.wake(spec.queue.as_str(), 1);
        }
    }
    Ok(json_response(StatusCode::OK, InsertedMany { inserted }))
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
    /// The stored result (a sealed result as its sealed text, docs/ENCRYPTION.md).
    pub(crate) result: Option<String>,
    /// Present when the result is sealed: the name of the key it opens with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result_encrypted: Option<crate::respond::EncryptedView>,
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
    /// The job's group in its queue, if it has one.
    pub(crate) group: Option<String>,
    /// The jobs it runs after, in the order named (empty: none).
    pub(crate) after: Vec<String>,
    /// What it does when a parent fails (`cancel` or `run`), for a job with parents.
    pub(crate) on_parent_failure: Option<String>,
    /// The W3C `traceparent` the job was enqueued with (its attempts join that trace), in a
    /// job's own view (`GET /v1/jobs/{id}`); lists leave it out.
    pub(crate) traceparent: Option<String>,
    /// The `tracestate` that came with it, in a job's own view.
    pub(crate) tracestate: Option<String>,
    /// The job's payload, if it has one.
    #[serde(flatten)]
    pub(crate) payload: PayloadView,
}

impl JobView {
    pub(crate) fn of(record: &JobRecord, now: Timestamp) -> Self {
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
            result_encrypted: job
                .result
                .as_deref()
                .and_then(lease_domain::sealed_result)
                .map(|sealed| crate::respond::EncryptedView {
                    key: sealed.key.to_owned(),
                }),
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
            group: job.group.as_ref().map(|g| g.as_str().to_owned()),
            after: job.after.iter().map(|p| p.as_str().to_owned()).collect(),
            on_parent_failure: (!job.after.is_empty())
                .then(|| job.on_parent_failure.as_str().to_owned()),
            traceparent: None,
            tracestate: None,
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
)]
pub(crate) async fn get_job(State(app): AppState, _: Viewer, Param(id): Param) -> Answer {
    let id = Name(id).job()?;
    let record = app
        .store
        .record(&id)
        .await?
        .ok_or_else(Problem::no_such_job)?;
    let mut view = JobView::of(&record, (app.config.clock)());
    if let Some(trace) = app.store.trace(&id).await? {
        view.traceparent = Some(trace.traceparent().to_owned());
        view.tracestate = trace.tracestate().map(str::to_owned);
    }
    Ok(json_response(StatusCode::OK, view))
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
    /// Only jobs of this group.
    #[param(value_type = Option<Name>)]
    pub(crate) group: Option<String>,
    /// Only jobs whose id starts with this text.
    #[param(value_type = Option<Name>)]
    pub(crate) prefix: Option<String>,
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
)]
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
        group: listed.group.map(|g| Name(g).group()).transpose()?,
        prefix: listed.prefix,
    };
    let records = app.store.list(&filter).await?;
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

pub(crate) async fn admin_write(app: &App, id: String, body: AdminBody, retry: bool) -> Answer {
    let id = Name(id).job()?;
    let now = now(app, body.now.as_ref())?;
    let outcome = if retry {
        app.store.retry(&id, now).await
    } else {
        app.store.cancel(&id, now).await
    };
    outcome?.map_err(|refused| Problem::refused_write(&refused))?;
    if retry {
        if let Some(record) = app.store.record(&id).await? {
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
        (status = "4XX", description = "Refused: 404, 409 done/cancelled (a dead job is cancelled, keeping its record and error)", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
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
)]
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
)]
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
    let purged = app.store.purge(before, &statuses).await?;
    Ok(json_response(StatusCode::OK, Purged { purged }))
}

/// What a bulk action does to each job it matches.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BulkActionName {
    /// Back to pending (a dead or cancelled job), as `POST /v1/jobs/{id}/retry`.
    Retry,
    /// Cancelled, as `POST /v1/jobs/{id}/cancel`.
    Cancel,
}

/// Retry or cancel every job a filter matches.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"action": "retry", "queue": "mail", "status": "dead", "dry_run": true}))]
pub(crate) struct BulkBody {
    /// What to do to each job.
    pub(crate) action: BulkActionName,
    /// Only this queue's jobs.
    pub(crate) queue: Option<Name>,
    /// Only this group's jobs.
    pub(crate) group: Option<Name>,
    /// Only jobs of this status (default: `dead` for `retry`, `pending` for `cancel`).
    pub(crate) status: Option<StatusName>,
    /// Only jobs whose id starts with this text.
    pub(crate) prefix: Option<Name>,
    /// Only count the jobs the filter matches, changing nothing (default false).
    pub(crate) dry_run: Option<bool>,
    /// The caller's time, taken only by a server started to trust caller clocks.
    pub(crate) now: Option<Time>,
}

/// What a bulk action came to.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BulkAnswer {
    /// The action.
    pub(crate) action: BulkActionName,
    /// The jobs the filter matched.
    pub(crate) matched: u64,
    /// The jobs the action changed (0 in a dry run; a job that changed since it was read is
    /// left as it is).
    pub(crate) changed: u64,
    /// Whether nothing was changed, only counted.
    pub(crate) dry_run: bool,
}

#[utoipa::path(post, path = "/v1/bulk", tag = "admin", request_body = BulkBody,
    responses(
        (status = 200, description = "Done in batches of at most 500 jobs, each job decided as its own retry or cancel would be; how many matched and how many changed", body = BulkAnswer),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn bulk(
    State(app): AppState,
    _: Admin,
    Checked(body): Checked<BulkBody>,
) -> Answer {
    use lease_ports::bulk::BulkAction;
    let action = match body.action {
        BulkActionName::Retry => BulkAction::Retry,
        BulkActionName::Cancel => BulkAction::Cancel,
    };
    let status = body
        .status
        .map_or(action.default_status(), StatusName::status);
    let filter = ListFilter {
        queue: body.queue.map(|q| q.queue("queue")).transpose()?,
        status: Some(status),
        limit: lease_ports::bulk::BULK_BATCH,
        after: None,
        now: now(&app, body.now.as_ref())?,
        group: body.group.map(Name::group).transpose()?,
        prefix: body.prefix.map(|p| p.0),
    };
    let dry_run = body.dry_run.unwrap_or(false);
    let done = lease_ports::bulk::bulk(app.store.as_ref(), &filter, action, dry_run).await?;
    if action == BulkAction::Retry && done.changed > 0 {
        if let Some(queue) = &filter.queue {
            app.wake(
                queue.as_str(),
                usize::try_from(done.changed).unwrap_or(usize::MAX),
            );
        }
    }
    Ok(json_response(
        StatusCode::OK,
        BulkAnswer {
            action: body.action,
            matched: done.matched,
            changed: done.changed,
            dry_run,
        },
    ))
}
