//! The operator page (`GET /`, its script and style, embedded in the binary) and the parts of
//! the public API a browser needs beyond what scripts use: a session cookie in exchange for a
//! key (`/v1/sessions`, `/v1/session`) and a stream of changes (`GET /v1/events`). The page
//! reads and acts through the same routes as any client.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use lease_domain::Scope;
use lease_ports::audit::AuditFilter;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;
use utoipa::ToSchema;

use crate::App;
use crate::auth::{check_key, session_of};
use crate::extract::{Checked, Viewer};
use crate::limits::Class;
use crate::problem::{Problem, ProblemBody};
use crate::respond::{json_response, no_store};
use crate::session;

type AppState = State<Arc<App>>;

const INDEX: &str = include_str!("../ui/index.html");
const SCRIPT: &str = include_str!("../ui/app.js");
const DRAWINGS: &str = include_str!("../ui/draw.js");
const STYLE: &str = include_str!("../ui/app.css");
const ICON: &str = include_str!("../ui/icon.svg");

/// The newest refusals the event stream carries.
const STREAMED_REFUSALS: usize = 50;

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

#[utoipa::path(get, path = "/", tag = "page",
    responses((status = 200, description = "The operator page", content_type = "text/html", body = String)))]
pub(crate) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

#[utoipa::path(get, path = "/ui/{file}", tag = "page",
    params(("file" = String, Path, description = "app.js, draw.js, app.css or icon.svg")),
    responses(
        (status = 200, description = "The page's script or style sheet", content_type = "text/plain", body = String),
        (status = 404, description = "No such file", body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub(crate) async fn file(file: Result<Path<String>, PathRejection>) -> Response {
    match file.as_ref().map(|Path(name)| name.as_str()) {
        Ok("app.js") => asset("text/javascript; charset=utf-8", SCRIPT),
        Ok("draw.js") => asset("text/javascript; charset=utf-8", DRAWINGS),
        Ok("app.css") => asset("text/css; charset=utf-8", STYLE),
        Ok("icon.svg") => asset("image/svg+xml", ICON),
        _ => Problem::new(StatusCode::NOT_FOUND, "not_found", "no such file").into_response(),
    }
}

/// Sign in with an API key.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignIn {
    /// The API key (`lk_...`). It is checked and forgotten; the session cookie stands for it.
    pub(crate) key: String,
}

/// A session: who is signed in, and the CSRF token its state-changing requests carry.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionView {
    /// Whether the request carried a live session.
    pub(crate) signed_in: bool,
    /// The key's principal.
    pub(crate) principal: Option<String>,
    /// viewer, worker or admin.
    pub(crate) scope: Option<String>,
    /// When the session ends (Unix seconds).
    pub(crate) expires: Option<u64>,
    /// Send it as `X-Lease-CSRF` with every request that changes something.
    pub(crate) csrf: Option<String>,
    /// Whether the store records refused writes (`lease serve --audit`).
    pub(crate) audit: Option<bool>,
}

fn session_json(app: &App, principal: &str, scope: Scope, expires: u64, csrf: &str) -> Value {
    json!({
        "signed_in": true,
        "principal": principal,
        "scope": scope.to_string(),
        "expires": expires,
        "csrf": csrf,
        "audit": app.config.audit,
    })
}

/// A session's answer: never cached.
fn session_answer(status: StatusCode, body: Value) -> Response {
    no_store(json_response(status, body))
}

#[utoipa::path(post, path = "/v1/sessions", tag = "page",
    request_body = SignIn,
    responses(
        (status = 201, description = "Signed in; the cookie `lease_session` (HttpOnly, SameSite=Strict, Secure over TLS) is set", body = SessionView),
        (status = "4XX", description = "Refused: 401 unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub(crate) async fn sign_in(
    State(app): AppState,
    Checked(body): Checked<SignIn>,
) -> Result<Response, Problem> {
    let record = check_key(&app, body.key.trim()).await?;
    app.limits
        .admit(&record.principal, Class::Other)
        .map_err(|seconds| {
            Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "this key's principal is over its rate limit; try again",
            )
            .retry_after(seconds)
        })?;
    let ttl = app.config.session_ttl.as_secs().max(1);
    // Whole seconds from the clock; a clock before 1970 starts sessions at 0.
    let now = Duration::try_from_secs_f64((app.config.clock)().get()).map_or(0, |d| d.as_secs());
    let expires = now.saturating_add(ttl);
    let (cookie, csrf) = session::issue(&record.id, &record.digest, expires)?;
    let view = session_json(
        &app,
        record.principal.as_str(),
        record.scope,
        expires,
        &csrf,
    );
    let mut response = session_answer(StatusCode::CREATED, view);
    response.headers_mut().insert(
        header::SET_COOKIE,
        session::set_cookie(&cookie, ttl, app.config.secure_cookies),
    );
    Ok(response)
}

#[utoipa::path(get, path = "/v1/session", tag = "page",
    responses(
        (status = 200, description = "The session this request carries, or `signed_in: false`", body = SessionView),
    ))]
pub(crate) async fn session(State(app): AppState, headers: HeaderMap) -> Response {
    match session_of(&app, &headers).await {
        Some((record, expires, csrf)) => session_answer(
            StatusCode::OK,
            session_json(
                &app,
                record.principal.as_str(),
                record.scope,
                expires,
                &csrf,
            ),
        ),
        None => session_answer(StatusCode::OK, json!({ "signed_in": false })),
    }
}

#[utoipa::path(delete, path = "/v1/session", tag = "page",
    responses(
        (status = 204, description = "Signed out: the cookie is removed (the key stays live; revoke it to end every session made with it)"),
        (status = "4XX", description = "Refused: 403 without the session's X-Lease-CSRF", body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub(crate) async fn sign_out(State(app): AppState) -> Response {
    (
        StatusCode::NO_CONTENT,
        [(
            header::SET_COOKIE,
            session::set_cookie("", 0, app.config.secure_cookies),
        )],
    )
        .into_response()
}

/// One event of `GET /v1/events`, as the OpenAPI document describes each event of a stream.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StreamEvent {
    /// Which answer the data is.
    pub(crate) event: EventName,
    /// The answer, as JSON text.
    #[schema(content_media_type = "application/json")]
    pub(crate) data: String,
}

/// The events the stream sends.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum EventName {
    /// As `GET /v1/stats` answers.
    Stats,
    /// The newest 50, as `GET /v1/refusals` answers.
    Refusals,
    /// The last hour, as `GET /v1/activity` answers.
    Activity,
    /// Every queue's settings, as `GET /v1/queues` answers.
    Queues,
}

impl EventName {
    fn event(&self, data: &str) -> Event {
        let name = match self {
            Self::Stats => "stats",
            Self::Refusals => "refusals",
            Self::Activity => "activity",
            Self::Queues => "queues",
        };
        Event::default().event(name).data(data)
    }
}

/// What the event stream carries, computed once for every open stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// `{"queues": ...}` as `GET /v1/stats` answers.
    stats: String,
    /// `{"refusals": [...]}`, the newest, as `GET /v1/refusals` answers.
    refusals: String,
    /// The last hour's activity, as `GET /v1/activity` answers (read with every
    /// `ACTIVITY_EVERY`th reading of the counts: its charts move by the minute).
    activity: String,
    /// `{"queues": [...]}` as `GET /v1/queues` answers (read with the counts: a pause or a
    /// limit set through another server or the CLI shows as the counts do).
    queues: String,
}

/// How many readings of the counts reuse one reading of the activity.
const ACTIVITY_EVERY: u64 = 10;

/// The changes every open event stream sends: one task reads the store while any stream is
/// open, and streams send only what changed, so a hundred idle streams cost what one does.
/// Each `events_interval` it reads the newest refusals (a small read); the counts (a read of
/// every open job) are read again when a refusal came, when this server took a request that
/// may change something ([`Feed::poke`]), or when their interval has passed: one
/// `events_interval` after a change, doubling while nothing changes up to 8 of them (changes
/// made elsewhere, and leases that end, show within that).
#[derive(Debug)]
pub(crate) struct Feed {
    latest: watch::Sender<Option<Arc<Snapshot>>>,
    running: AtomicBool,
    poked: AtomicBool,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            latest: watch::Sender::new(None),
            running: AtomicBool::new(false),
            poked: AtomicBool::new(false),
        }
    }
}

/// The longest the counts go unread, in `events_interval`s.
const MOST_INTERVALS: u32 = 8;

/// The newest refusals, as the stream sends them.
async fn refusals_json(app: &App) -> Option<String> {
    let filter = AuditFilter {
        job: None,
        since: None,
        limit: STREAMED_REFUSALS,
    };
    let refusals = app.store.refusals(&filter).await.ok()?;
    let refusals: Vec<Value> = refusals.iter().map(crate::views::refusal_json).collect();
    Some(json!({ "refusals": refusals }).to_string())
}

/// The next snapshot: the refusals always, the counts (and every `ACTIVITY_EVERY`th time the
/// activity) when `counts` says so, else the previous ones.
async fn snapshot(
    app: &App,
    previous: Option<&Snapshot>,
    counts: bool,
    tick: u64,
) -> Option<Snapshot> {
    let now = (app.config.clock)();
    let refusals = refusals_json(app).await?;
    let counts = counts || previous.is_none_or(|p| p.refusals != refusals);
    let (stats, queues) = match previous {
        Some(previous) if !counts => (previous.stats.clone(), previous.queues.clone()),
        _ => (
            crate::overview::stats_body(app, now)
                .await
                .ok()?
                .to_string(),
            serde_json::to_string(&crate::queues::queues_body(app, now).await.ok()?).ok()?,
        ),
    };
    let activity = match previous {
        Some(previous) if !(counts && tick % ACTIVITY_EVERY == 0) => previous.activity.clone(),
        _ => crate::overview::activity_body(app, now, 60)
            .await
            .ok()?
            .to_string(),
    };
    Some(Snapshot {
        stats,
        refusals,
        activity,
        queues,
    })
}

impl Feed {
    /// Says that something may have changed: the next reading includes the counts.
    pub(crate) fn poke(&self) {
        self.poked.store(true, Ordering::Relaxed);
    }

    /// A receiver of the snapshots, starting the reading task if none runs.
    fn subscribe(app: &Arc<App>) -> watch::Receiver<Option<Arc<Snapshot>>> {
        let receiver = app.feed.latest.subscribe();
        if !app.feed.running.swap(true, Ordering::SeqCst) {
            let weak = Arc::downgrade(app);
            tokio::spawn(async move {
                let (mut tick, mut since_counts, mut every) = (0_u64, 0_u32, 1_u32);
                loop {
                    let Some(app) = weak.upgrade() else { return };
                    if app.feed.latest.receiver_count() == 0 {
                        app.feed.running.store(false, Ordering::SeqCst);
                        // A stream that subscribed since the count was read finds the flag
                        // down and starts a task of its own, or this one goes on.
                        if app.feed.latest.receiver_count() == 0
                            || app.feed.running.swap(true, Ordering::SeqCst)
                        {
                            return;
                        }
                    }
                    let previous = app.feed.latest.borrow().clone();
                    since_counts += 1;
                    let counts =
                        app.feed.poked.swap(false, Ordering::Relaxed) || since_counts >= every;
                    if let Some(next) = snapshot(&app, previous.as_deref(), counts, tick).await {
                        let read_counts = previous
                            .as_deref()
                            .is_none_or(|p| counts || p.refusals != next.refusals);
                        if read_counts {
                            tick += 1;
                            since_counts = 0;
                            let same = previous.as_deref().is_some_and(|p| p.stats == next.stats);
                            every = if same {
                                (every * 2).min(MOST_INTERVALS)
                            } else {
                                1
                            };
                        }
                        app.feed.latest.send_if_modified(|held| {
                            if held.as_deref() == Some(&next) {
                                false
                            } else {
                                *held = Some(Arc::new(next));
                                true
                            }
                        });
                    }
                    let interval = app.config.events_interval;
                    drop(app);
                    tokio::time::sleep(interval).await;
                }
            });
        }
        receiver
    }
}

/// Resolves once the server starts to shut down (never without a `closing` receiver).
async fn closing(receiver: Option<watch::Receiver<bool>>) {
    match receiver {
        Some(mut receiver) => {
            if receiver.wait_for(|closing| *closing).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

#[utoipa::path(get, path = "/v1/events", tag = "page",
    responses(
        (status = 200, description = "Server-sent events: `stats` (as GET /v1/stats answers), `refusals` (the newest 50, as GET /v1/refusals answers), `activity` (the last hour, as GET /v1/activity answers) and `queues` (every queue's settings, as GET /v1/queues answers), each sent when it changes, the first of each at once", content_type = "text/event-stream", body = StreamEvent),
        (status = "4XX", description = "Refused", body = ProblemBody, content_type = "application/problem+json"),
    ),
)]
pub(crate) async fn events(State(app): AppState, _: Viewer) -> Result<Response, Problem> {
    let receiver = Feed::subscribe(&app);
    // A stream lasts at most `events_lifetime`; the browser reconnects by itself, and the
    // key (or session) is checked again then.
    let ends = tokio::time::Instant::now() + app.config.events_lifetime;
    let sent: Option<Arc<Snapshot>> = None;
    let closing_rx = app.config.closing.clone();
    let stream = futures::stream::unfold(
        (receiver, sent, Vec::<Event>::new()),
        move |(mut receiver, mut sent, mut queued)| {
            let closing_rx = closing_rx.clone();
            async move {
                loop {
                    if let Some(event) = queued.pop() {
                        return Some((
                            Ok::<_, std::convert::Infallible>(event),
                            (receiver, sent, queued),
                        ));
                    }
                    let current = receiver.borrow_and_update().clone();
                    if let Some(now) = current {
                        let before = sent.as_deref();
                        if before.is_none_or(|b| b.refusals != now.refusals) {
                            queued.push(EventName::Refusals.event(&now.refusals));
                        }
                        if before.is_none_or(|b| b.stats != now.stats) {
                            queued.push(EventName::Stats.event(&now.stats));
                        }
                        if before.is_none_or(|b| b.activity != now.activity) {
                            queued.push(EventName::Activity.event(&now.activity));
                        }
                        if before.is_none_or(|b| b.queues != now.queues) {
                            queued.push(EventName::Queues.event(&now.queues));
                        }
                        sent = Some(now);
                        if !queued.is_empty() {
                            continue;
                        }
                    }
                    let changed = tokio::time::timeout_at(ends, receiver.changed());
                    tokio::select! {
                        outcome = changed => match outcome {
                            Ok(Ok(())) => {}
                            _ => return None,
                        },
                        () = closing(closing_rx.clone()) => return None,
                    }
                }
            }
        },
    );
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
