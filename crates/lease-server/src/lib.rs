//! The fenced work queue as an HTTP/JSON service over any lease store (`lease serve`).
//!
//! Workers need a URL and an API key, not database credentials. Every lease granted through
//! the service carries a secret token (kept by the store only as a digest), and every write
//! of a holder is judged in one pinned order (`lease_domain::judge_holder`, then the token,
//! then the store's own decision), so a stale worker is refused the same way by every client.
//!
//! This crate depends on `lease-ports` and `lease-domain` only: `lease-cli` picks the store
//! and hands it over. The OpenAPI document is generated from the handlers (utoipa).

// Library and binary code may not unwrap, expect or panic on what it meets, nor export what is
// unreachable (each exception allowed in place with its reason); tests may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        unreachable_pub
    )
)]

mod auth;
mod body;
mod extract;
mod fields;
mod input;
mod jobs;
mod leases;
mod limits;
mod overview;
pub mod problem;
mod queues;
mod respond;
mod schedules;
pub mod secrets;
mod service;
pub mod session;
mod settle;
pub mod tls;
mod ui;
mod validate;
pub mod views;
pub mod waiters;
mod workflow;

use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderName, StatusCode, header};
use axum::response::IntoResponse;
use lease_domain::Timestamp;
use tower::ServiceBuilder;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::sensitive_headers::{
    SetSensitiveRequestHeadersLayer, SetSensitiveResponseHeadersLayer,
};
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::problem::Problem;
use crate::waiters::Waiters;

pub use auth::LEASE_TOKEN;
pub use jobs::batch_job_fields;

/// What the service needs of a store: the whole surface but migration ([`lease_ports::Store`]).
pub use lease_ports::Store as ServiceStore;

/// The clock the service decides with (the CLI's `main` passes the system clock).
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Renders the process's metrics as Prometheus text (the binary installs the exporter).
pub type MetricsRender = Arc<dyn Fn() -> String + Send + Sync>;

/// How the service runs. Every limit has a default (`ServiceConfig::new`) and a flag in
/// `lease serve`.
#[derive(Clone)]
pub struct ServiceConfig {
    /// The service's clock.
    pub clock: Clock,
    /// Whether requests may carry their own `now` (for tests that script time); off by default.
    pub client_clock: bool,
    /// `/metrics` text, if the binary records metrics.
    pub metrics: Option<MetricsRender>,
    /// The largest request body, in bytes (default 2 MiB: a 1 MiB payload fits, even as base64).
    pub body_limit: usize,
    /// How long a request may take (default 30 s); a claim's long poll (`wait`) comes on top.
    pub request_timeout: Duration,
    /// Requests handled at once; more are refused with `503` and `Retry-After` (default 1,024).
    pub max_in_flight: usize,
    /// Claims waiting at once (long polls); more are refused with `503` (default 1,000).
    pub max_waiting: usize,
    /// How often a waiting claim looks again for jobs that came due by time or were enqueued
    /// elsewhere (default 1 s; a job enqueued through this server wakes one waiter at once).
    pub poll_interval: Duration,
    /// Requests a second each principal may make, in bursts of twice as many, counted apart
    /// for a lease holder's writes and for everything else; over it, `429` with `Retry-After`
    /// (default 1,000; 0 turns the limit off).
    pub rate_limit: f64,
    /// How long a key read from the store is trusted before it is read again (default 1 s):
    /// a revocation takes effect on every server within it; zero reads the store on every
    /// request.
    pub key_cache: Duration,
    /// Whether the store records refused writes (the page says how to turn it on when not).
    pub audit: bool,
    /// Whether session cookies are marked `Secure` (set when serving HTTPS).
    pub secure_cookies: bool,
    /// How long a session of the operator page lasts (default 12 h).
    pub session_ttl: Duration,
    /// How often, while any event stream is open, the store is read for changes (default 1 s).
    pub events_interval: Duration,
    /// How long one event stream lasts before the browser reconnects (and is authenticated
    /// again; default 5 min).
    pub events_lifetime: Duration,
    /// Set to `true` when the server starts to shut down: open event streams end then, so a
    /// graceful shutdown does not wait for them (default: never).
    pub closing: Option<tokio::sync::watch::Receiver<bool>>,
    /// Joins each request's span (`lease.request`, target `lease_server`) to the trace its
    /// `traceparent` header names (default none: the span has no parent of its own). The
    /// binary passes `lease-otel`'s `join` when it exports spans.
    pub trace: Option<lease_ports::observe::TraceJoin>,
}

impl std::fmt::Debug for ServiceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceConfig")
            .field("client_clock", &self.client_clock)
            .field("body_limit", &self.body_limit)
            .field("request_timeout", &self.request_timeout)
            .field("max_in_flight", &self.max_in_flight)
            .field("max_waiting", &self.max_waiting)
            .field("poll_interval", &self.poll_interval)
            .field("rate_limit", &self.rate_limit)
            .field("key_cache", &self.key_cache)
            .field("audit", &self.audit)
            .field("secure_cookies", &self.secure_cookies)
            .field("session_ttl", &self.session_ttl)
            .field("events_interval", &self.events_interval)
            .field("events_lifetime", &self.events_lifetime)
            .finish_non_exhaustive()
    }
}

impl ServiceConfig {
    /// The defaults, deciding with `clock`.
    #[must_use]
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            client_clock: false,
            metrics: None,
            body_limit: 2 << 20,
            request_timeout: Duration::from_secs(30),
            max_in_flight: 1024,
            max_waiting: 1000,
            poll_interval: Duration::from_secs(1),
            rate_limit: 1000.0,
            key_cache: Duration::from_secs(1),
            audit: false,
            secure_cookies: false,
            session_ttl: Duration::from_secs(12 * 3600),
            events_interval: Duration::from_secs(1),
            events_lifetime: Duration::from_secs(300),
            closing: None,
            trace: None,
        }
    }
}

/// The state every handler shares.
pub(crate) struct App {
    pub(crate) store: Arc<dyn ServiceStore>,
    pub(crate) config: ServiceConfig,
    pub(crate) waiters: Waiters,
    pub(crate) limits: limits::RateLimits,
    pub(crate) keys: auth::KeyCache,
    /// Whether the store carries enqueue signals between servers (then this server's own
    /// enqueues wake waiters through the signal only, so one job wakes one waiter, not two).
    pub(crate) signalled: std::sync::atomic::AtomicBool,
    pub(crate) openapi: Arc<str>,
    /// What the document lets each route take, checked before a handler reads a request.
    pub(crate) contract: Arc<validate::Contract>,
    /// The event streams' shared reader.
    pub(crate) feed: ui::Feed,
    /// The queues whose flow-control gauges `/metrics` has set, so that one whose settings
    /// are gone since reads as free rather than as it last was.
    pub(crate) gauged: std::sync::Mutex<std::collections::BTreeSet<lease_domain::QueueName>>,
}

impl App {
    /// Wakes `jobs` waiting claims of `queue` for jobs this server just made claimable: through
    /// the store's signal when it carries one (every server hears it, this one included, and
    /// each wakes its own waiters), else here.
    pub(crate) fn wake(&self, queue: &str, jobs: usize) {
        if self.signalled.load(std::sync::atomic::Ordering::Relaxed) {
            self.store.signal(queue, jobs);
        } else {
            self.waiters.wake(queue, jobs);
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "lease",
        description = "A fenced work queue: every lease carries a fencing token (a per-job number that only goes up) and a secret lease token; a stale worker's write is refused."
    ),
    modifiers(&BearerKeys),
    // A path parameter's type is not collected from the routes as a body's is.
    components(schemas(fields::ScheduleNameText)),
    tags(
        (name = "queue", description = "Enqueue and claim"),
        (name = "jobs", description = "A lease holder's writes, and reading jobs"),
        (name = "admin", description = "Cancel, retry and purge; pause, resume and limit a queue (admin keys)"),
        (name = "schedules", description = "Periodic schedules: read by any key, made, changed, removed, fired and run by hand by admin keys"),
        (name = "audit", description = "Refused writes"),
        (name = "service", description = "Health, metrics and this document"),
        (name = "page", description = "The operator page: its files, sessions (a cookie for a key) and the event stream"),
    )
)]
struct ApiDoc;

struct BearerKeys;

impl Modify for BearerKeys {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        // The operator page's session (POST /v1/sessions); its state-changing requests
        // also carry the header X-Lease-CSRF.
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new(session::COOKIE))),
        );
    }
}

/// The routes and their OpenAPI document, with no state yet.
fn routes() -> (axum::Router<Arc<App>>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(jobs::enqueue))
        .routes(routes!(jobs::enqueue_many))
        .routes(routes!(leases::claim_next))
        .routes(routes!(leases::claim))
        .routes(routes!(leases::renew))
        .routes(routes!(leases::complete))
        .routes(routes!(leases::fail))
        .routes(routes!(leases::release))
        .routes(routes!(settle::settle))
        .routes(routes!(jobs::get_job))
        .routes(routes!(jobs::list_jobs))
        .routes(routes!(jobs::cancel))
        .routes(routes!(jobs::retry))
        .routes(routes!(jobs::purge))
        .routes(routes!(jobs::bulk))
        .routes(routes!(overview::stats))
        .routes(routes!(overview::activity))
        .routes(routes!(overview::refusals))
        .routes(routes!(queues::queues))
        .routes(routes!(queues::pause))
        .routes(routes!(queues::resume))
        .routes(routes!(queues::pause_group))
        .routes(routes!(queues::resume_group))
        .routes(routes!(queues::limits, queues::queue_limits))
        .routes(routes!(queues::throttle))
        .routes(routes!(queues::groups))
        .routes(routes!(schedules::schedules))
        .routes(routes!(schedules::put_schedule, schedules::remove_schedule))
        .routes(routes!(schedules::fire))
        .routes(routes!(schedules::run))
        .routes(routes!(leases::progress))
        .routes(routes!(leases::hold_group))
        .routes(routes!(workflow::keep, workflow::read))
        .routes(routes!(workflow::children))
        .routes(routes!(workflow::attempts))
        .routes(routes!(workflow::graph))
        .routes(routes!(service::healthz))
        .routes(routes!(service::metrics))
        .routes(routes!(service::openapi))
        .routes(routes!(ui::index))
        .routes(routes!(ui::file))
        .routes(routes!(ui::sign_in))
        .routes(routes!(ui::session, ui::sign_out))
        .routes(routes!(ui::events))
        .split_for_parts()
}

/// The fields and parameters that carry a caller's clock, which only a server started to
/// trust caller clocks takes (`--client-clock`).
const CALLER_CLOCK: [&str; 2] = ["now", "enqueued_at"];

/// The OpenAPI document a server with `client_clock` serves, as JSON: without it, the fields
/// and parameters of a caller's clock are not in the document, so a request that sends one is
/// refused as the document says (it is not a field the endpoint takes).
/// The served document (as text) and the contract compiled from it, for a service with or
/// without the caller's clock: made once per process for each (compiling the schemas is
/// most of what building a router costs), then shared by every router.
fn compiled_document(client_clock: bool) -> (Arc<validate::Contract>, Arc<str>) {
    static MADE: [std::sync::OnceLock<(Arc<validate::Contract>, Arc<str>)>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    MADE[usize::from(client_clock)]
        .get_or_init(|| {
            let document = served_document(client_clock);
            // The document's schemas are the crate's own: one that does not compile is a bug
            // found by every test, so an empty contract (no checks) is never what runs.
            let contract = validate::Contract::of(&document).unwrap_or_else(|e| {
                tracing::error!(
                    error = %e,
                    "the API document does not compile; requests are not checked"
                );
                validate::Contract::default()
            });
            let text = serde_json::to_string_pretty(&document).unwrap_or_default();
            (Arc::new(contract), Arc::from(text))
        })
        .clone()
}

fn served_document(client_clock: bool) -> serde_json::Value {
    let mut document = serde_json::to_value(routes().1).unwrap_or_default();
    for (component, rule) in jobs::ACROSS_FIELDS {
        if let (Some(schema), Ok(rule)) = (
            document
                .pointer_mut(&format!("/components/schemas/{component}"))
                .and_then(serde_json::Value::as_object_mut),
            serde_json::from_str::<serde_json::Value>(rule),
        ) {
            schema.insert("not".to_owned(), rule);
        }
    }
    for (component, field) in jobs::TRACEPARENT_FIELDS {
        if let (Some(schema), Ok(rule)) = (
            document
                .pointer_mut(&format!(
                    "/components/schemas/{component}/properties/{field}"
                ))
                .and_then(serde_json::Value::as_object_mut),
            serde_json::from_str::<serde_json::Value>(jobs::ZERO_TRACE_IDS),
        ) {
            schema.insert("not".to_owned(), rule);
        }
    }
    if !client_clock {
        strip_caller_clock(&mut document);
    }
    openapi_links(&mut document);
    server_answers(&mut document);
    document
}

/// The routes any caller may use: health, this document, the page's files, and signing in
/// and out (which take a key, or end the session the request carries). Every other route
/// needs an API key or a page session (the route's extractor says which scope), and the
/// document says so once, in [`server_answers`].
const OPEN_ROUTES: [&str; 6] = [
    "/healthz",
    "/openapi.json",
    "/",
    "/ui/{file}",
    "/v1/sessions",
    "/v1/session",
];

/// What every route shares, added to every operation of the document in one place: the
/// security of every route but the [`OPEN_ROUTES`], and the answers any route may give beyond
/// its own: `503` (the server sheds load, a request ran past its timeout, or the store
/// could not be reached: nothing was applied; send it again after `Retry-After`) and `500`
/// (`outcome_unknown`: a write whose commit may or may not have happened; `store_error`: the
/// store failed and applied nothing).
fn server_answers(document: &mut serde_json::Value) {
    let problem = serde_json::json!({
        "application/problem+json": {"schema": {"$ref": "#/components/schemas/ProblemBody"}}
    });
    let unavailable = serde_json::json!({
        "description": "Not now, and nothing was applied (reason overloaded or unavailable): send it again after Retry-After",
        "headers": {"Retry-After": {
            "description": "Seconds to wait before sending the request again",
            "schema": {"type": "integer", "minimum": 1}
        }},
        "content": problem,
    });
    let failed = serde_json::json!({
        "description": "The store's answer to a write was lost (reason outcome_unknown: it may or may not have been applied; read the job before sending it again), or the store failed and applied nothing (reason store_error)",
        "content": problem,
    });
    let Some(paths) = document
        .get_mut("paths")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return;
    };
    let keyed = serde_json::json!([{"api_key": []}, {"session": []}]);
    for (path, item) in paths.iter_mut() {
        let open = OPEN_ROUTES.contains(&path.as_str());
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for operation in item.values_mut() {
            if !open {
                if let Some(operation) = operation.as_object_mut() {
                    operation.entry("security").or_insert_with(|| keyed.clone());
                }
            }
            if let Some(responses) = operation
                .get_mut("responses")
                .and_then(serde_json::Value::as_object_mut)
            {
                responses
                    .entry("503")
                    .or_insert_with(|| unavailable.clone());
                responses.entry("500").or_insert_with(|| failed.clone());
            }
        }
    }
}

/// utoipa 5 writes a response's links with the field names of its Rust type (`operation_id`,
/// `request_body`); OpenAPI names them `operationId` and `requestBody`.
fn openapi_links(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::Object(links)) = map.get_mut("links") {
                for link in links
                    .values_mut()
                    .filter_map(serde_json::Value::as_object_mut)
                {
                    for (rust, openapi) in [
                        ("operation_id", "operationId"),
                        ("operation_ref", "operationRef"),
                        ("request_body", "requestBody"),
                    ] {
                        if let Some(field) = link.remove(rust) {
                            link.insert(openapi.to_owned(), field);
                        }
                    }
                }
            }
            map.values_mut().for_each(openapi_links);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(openapi_links),
        _ => {}
    }
}

/// Removes every property and parameter named as a caller's clock, wherever it is.
fn strip_caller_clock(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::Object(properties)) = map.get_mut("properties") {
                for name in CALLER_CLOCK {
                    properties.remove(name);
                }
            }
            if let Some(serde_json::Value::Array(parameters)) = map.get_mut("parameters") {
                parameters
                    .retain(|p| !CALLER_CLOCK.contains(&p["name"].as_str().unwrap_or_default()));
            }
            for child in map.values_mut() {
                strip_caller_clock(child);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_caller_clock),
        _ => {}
    }
}

/// The OpenAPI document of the service as a server started without `--client-clock` serves
/// it, as JSON.
#[must_use]
pub fn openapi_json() -> String {
    serde_json::to_string_pretty(&served_document(false)).unwrap_or_default()
}

/// Request ids: a counter, unique within the process (enough to match log lines).
#[derive(Clone, Default)]
struct Counter(Arc<std::sync::atomic::AtomicU64>);

impl MakeRequestId for Counter {
    fn make_request_id<B>(&mut self, _request: &axum::http::Request<B>) -> Option<RequestId> {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        axum::http::HeaderValue::from_str(&n.to_string())
            .ok()
            .map(RequestId::new)
    }
}

async fn overloaded(err: tower::BoxError) -> axum::response::Response {
    if err.is::<tower::timeout::error::Elapsed>() {
        timed_out().into_response()
    } else {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "the server is at its limit of requests in flight; try again",
        )
        .retry_after(1)
        .into_response()
    }
}

/// The page's security headers, on every answer, and the CSRF rule of session requests
/// (`session::check_csrf`), before any handler runs.
async fn guard(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if !matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    ) {
        // A request that may change something: the event streams read the counts again.
        app.feed.poke();
    }
    let checked = session::check_csrf(request.method(), request.uri().path(), request.headers());
    let mut response = match checked {
        Ok(()) => next.run(request).await,
        Err(problem) => problem.into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        axum::http::HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        axum::http::HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        axum::http::HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_FRAME_OPTIONS,
        axum::http::HeaderValue::from_static("DENY"),
    );
    response
}

/// Each routed request's span, `lease.request`, named by its method and route (`POST
/// /v1/queues/{queue}/jobs`): its path (ids, never a query, a header or a body) and its
/// status; a child of the caller's `traceparent` when the service joins traces
/// (`ServiceConfig::trace`). Its handler's store calls are its children.
async fn request_span(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use tracing::Instrument as _;
    let method = request.method().as_str();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("", axum::extract::MatchedPath::as_str);
    let span = tracing::info_span!(
        target: "lease_server",
        "lease.request",
        otel.name = format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = method,
        http.route = route,
        url.path = request.uri().path(),
        http.response.status_code = tracing::field::Empty,
    );
    if let (Some(join), false) = (&app.config.trace, span.is_disabled())
        && let Some(caller) = jobs::header_trace(request.headers())
    {
        (join.0)(&span, &caller, lease_ports::observe::Join::Child);
    }
    let response = next.run(request).instrument(span.clone()).await;
    span.record(
        "http.response.status_code",
        i64::from(response.status().as_u16()),
    );
    response
}

/// Bounds the time a request may take: `request_timeout`, and a claim's long poll (up to
/// `leases::MAX_WAIT`) on top for the claims route. It runs after routing, so the route is known,
/// and races the handler in the request's own task: every store call awaits, never blocks, so a
/// store that is waiting on a lock held elsewhere cannot keep this timeout (or the server's
/// drain, which waits for requests in flight) from firing.
async fn deadline(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let long_poll = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .is_some_and(|path| path.as_str() == leases::CLAIMS_ROUTE);
    let limit = if long_poll {
        app.config.request_timeout + Duration::from_secs_f64(leases::MAX_WAIT)
    } else {
        app.config.request_timeout
    };
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => timed_out().into_response(),
    }
}

fn timed_out() -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "overloaded",
        "the request took too long and was stopped; try again",
    )
    .retry_after(1)
}

async fn not_found() -> Problem {
    Problem::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

/// The service over `store`: every route, its middleware in order (a request id; the
/// `Authorization` and `Lease-Token` headers marked sensitive before the trace layer sees
/// them; the page's headers; the body read whole up to its limit; load shedding and the
/// timeout), ready for `axum::serve`.
pub fn router(store: Arc<dyn ServiceStore>, config: ServiceConfig) -> axum::Router {
    let (routes, _) = routes();
    let (contract, openapi) = compiled_document(config.client_clock);
    let app = Arc::new(App {
        contract,
        store,
        waiters: Waiters::new(config.max_waiting),
        limits: limits::RateLimits::new(config.rate_limit, 2.0 * config.rate_limit),
        keys: auth::KeyCache::default(),
        signalled: std::sync::atomic::AtomicBool::new(false),
        openapi,
        feed: ui::Feed::default(),
        gauged: std::sync::Mutex::default(),
        config: config.clone(),
    });
    let weak = Arc::downgrade(&app);
    let signalled = app.store.watch(Arc::new(move |queue: &str, jobs: usize| {
        if let Some(app) = weak.upgrade() {
            app.waiters.wake(queue, jobs);
        }
    }));
    app.signalled
        .store(signalled, std::sync::atomic::Ordering::Relaxed);
    let request_id = HeaderName::from_static("x-request-id");
    // A backstop over the whole service (the fallback included); each route's own bound is
    // `deadline`'s.
    let timeout = config.request_timeout + Duration::from_secs_f64(leases::MAX_WAIT + 1.0);
    let routes = routes
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), deadline))
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            request_span,
        ))
        .fallback(not_found)
        .with_state(app.clone())
        .layer(DefaultBodyLimit::max(config.body_limit));
    // The middleware wraps the whole router as one service (`Router::layer` would wrap each
    // route on its own, and give each route its own limit of requests in flight).
    let service = ServiceBuilder::new()
        .layer(SetRequestIdLayer::new(
            request_id.clone(),
            Counter::default(),
        ))
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
            header::COOKIE,
            auth::LEASE_TOKEN,
            session::CSRF,
        ]))
        .layer(SetSensitiveResponseHeadersLayer::new([header::SET_COOKIE]))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::new(request_id))
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard))
        // Outside every limit: a body is read whole before anything may answer, so an early
        // answer keeps the keep-alive connection (body.rs).
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            body::read_whole,
        ))
        .layer(HandleErrorLayer::new(overloaded))
        .layer(tower::load_shed::LoadShedLayer::new())
        .layer(tower::limit::ConcurrencyLimitLayer::new(
            config.max_in_flight,
        ))
        .layer(tower::timeout::TimeoutLayer::new(timeout))
        .service(routes);
    axum::Router::new().fallback_service(service)
}
