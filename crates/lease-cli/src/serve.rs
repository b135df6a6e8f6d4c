//! `lease serve` (the queue over HTTP, through `lease-server`) and `lease keys` (its API keys).

use std::path::PathBuf;

use clap::Subcommand;

use crate::args::{RequestError, duration_flag};

use std::sync::Arc;

use lease_domain::Timestamp;
use lease_server::{MetricsRender, ServiceConfig};
use serde_json::json;

use crate::render::Report;
use crate::target::Opened;

/// Runs `lease keys`.
///
/// # Errors
/// The store's error, or no random source, as text.
pub(crate) async fn keys(
    opened: &Opened,
    request: &KeysRequest,
    now: Timestamp,
) -> Result<Report, String> {
    let store = opened.keys();
    match request {
        KeysRequest::Create(principal, scope) => {
            let made = lease_server::secrets::new_key().map_err(|e| e.to_string())?;
            let record = made.record(principal.clone(), *scope, now);
            match store.add_key(&record).await.map_err(|e| e.to_string())? {
                Ok(()) => Ok(Report::new(
                    true,
                    json!({
                        "id": made.id.as_str(),
                        "principal": principal.as_str(),
                        "scope": scope.as_str(),
                        "key": made.key,
                    }),
                    format!(
                        "{key}\ncreated key {id} for {principal} ({scope}); keep it now: it is \
                         not shown again",
                        key = made.key,
                        id = made.id,
                    ),
                )),
                Err(refused) => Ok(Report::new(false, json!({"ok": false}), String::new())
                    .refused_with(Some(refused.to_string()))),
            }
        }
        KeysRequest::List => {
            let keys = store.keys().await.map_err(|e| e.to_string())?;
            let rows: Vec<serde_json::Value> = keys
                .iter()
                .map(|k| {
                    json!({
                        "id": k.id.as_str(),
                        "principal": k.principal.as_str(),
                        "scope": k.scope.as_str(),
                        "created": k.created.get(),
                        "revoked": k.revoked.map(Timestamp::get),
                    })
                })
                .collect();
            let lines = keys
                .iter()
                .map(|k| {
                    format!(
                        "{} {} {} created {}{}",
                        k.id,
                        k.principal,
                        k.scope,
                        k.created.get(),
                        k.revoked
                            .map(|t| format!(", revoked {}", t.get()))
                            .unwrap_or_default()
                    )
                })
                .collect();
            Ok(Report::lines(
                true,
                json!({ "keys": rows }),
                lines,
                "no API keys",
            ))
        }
        KeysRequest::Revoke(id) => {
            if store.revoke_key(id, now).await.map_err(|e| e.to_string())? {
                Ok(Report::new(
                    true,
                    json!({"ok": true}),
                    format!("key {id} is revoked"),
                ))
            } else {
                Ok(Report::new(false, json!({"ok": false}), String::new())
                    .refused_with(Some(format!("no key has id {id}"))))
            }
        }
    }
}

/// Runs `lease serve` until SIGTERM or Ctrl-C, then lets requests in flight finish.
///
/// # Errors
/// A refused address, no key for a public address, or the store's error, as text.
pub(crate) async fn serve(
    opened: &Opened,
    shown: &str,
    request: &ServeRequest,
    clock: lease_server::Clock,
    metrics: Option<MetricsRender>,
    say: crate::scheduler::Say,
) -> Result<Report, String> {
    let live_keys = opened
        .keys()
        .keys()
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .filter(|k| k.revoked.is_none())
        .count();
    if live_keys == 0 && !request.listen.ip().is_loopback() {
        return Err(format!(
            "no API key exists, so lease serve listens on loopback only and will not listen on \
             {}; make one first with `lease keys create NAME --scope worker`",
            request.listen
        ));
    }
    let (closing, closing_rx) = tokio::sync::watch::channel(false);
    let config = ServiceConfig {
        closing: Some(closing_rx),
        client_clock: request.client_clock,
        metrics,
        body_limit: request.body_limit,
        request_timeout: request.request_timeout,
        max_in_flight: request.max_in_flight,
        max_waiting: request.max_waiting,
        rate_limit: request.rate_limit,
        key_cache: request.key_cache,
        poll_interval: request.poll_interval,
        audit: request.audit,
        secure_cookies: request.tls.is_some(),
        session_ttl: request.session_ttl,
        events_lifetime: request.events_lifetime,
        trace: request
            .traced
            .then(|| lease_ports::observe::TraceJoin(Arc::new(lease_otel::join))),
        ..ServiceConfig::new(Arc::clone(&clock))
    };
    let app = lease_server::router(opened.service(), config);
    let tls = request
        .tls
        .as_ref()
        .map(|(cert, key)| lease_server::tls::server_config(cert, key))
        .transpose()?;
    let listener = tokio::net::TcpListener::bind(request.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", request.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the address listened on: {e}"))?;
    let keys_note = if live_keys == 0 {
        " (no API key exists yet: loopback only; make one with `lease keys create`)"
    } else {
        ""
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    say(&format!(
        "lease: serving {scheme}://{addr} over {shown}{keys_note}"
    ));
    // The schedules run beside the server, until it stops.
    let stop_schedules = lease_worker::CancellationToken::new();
    let scheduler = request.schedules.then(|| {
        tokio::spawn(crate::scheduler::run_schedules(
            opened.store(),
            Arc::clone(&clock),
            request.schedule_recheck,
            stop_schedules.clone(),
            "lease serve",
            Arc::clone(&say),
        ))
    });
    match tls {
        Some(config) => {
            let listener = lease_server::tls::TlsListener::new(listener, config)
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            axum_serve(listener, app, closing).await?;
        }
        None => {
            // Requests and answers are small and alternate: send each at once.
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum_serve(listener, app, closing).await?;
        }
    }
    stop_schedules.cancel();
    if let Some(scheduler) = scheduler {
        let _ = scheduler.await;
    }
    Ok(Report::new(
        true,
        json!({"ok": true, "listened": addr.to_string()}),
        format!("stopped serving {addr}"),
    ))
}

async fn axum_serve<L>(
    listener: L,
    app: axum::Router,
    closing: tokio::sync::watch::Sender<bool>,
) -> Result<(), String>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let stop = async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        // Open event streams end now, so the drain does not wait for them.
        closing.send_replace(true);
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
        .map_err(|e| format!("the server stopped: {e}"))
}

/// The metrics recorder's text for `/metrics`, if a recorder could be installed.
pub(crate) fn install_metrics() -> Option<MetricsRender> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .ok()?;
    Some(Arc::new(move || handle.render()))
}

/// The arguments of `lease serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:7070", value_name = "ADDR")]
    pub(crate) listen: std::net::SocketAddr,
    /// The largest request body, in bytes.
    #[arg(long, default_value_t = 2 << 20, value_name = "BYTES")]
    pub(crate) body_limit: usize,
    /// Requests handled at once; more are refused with 503 and Retry-After.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub(crate) max_in_flight: usize,
    /// Claims waiting (long polls) at once; more are refused with 503.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub(crate) max_waiting: usize,
    /// Seconds a request may take beyond its long poll.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub(crate) request_timeout: f64,
    /// Requests a second per principal (bursts of twice as many; a lease holder's writes
    /// counted apart, so claims never starve renewals); over it, 429. 0 turns it off.
    #[arg(long, default_value_t = 1000.0, value_name = "N")]
    pub(crate) rate_limit: f64,
    /// Seconds between a waiting claim's looks for jobs that came due by time (or were
    /// enqueued where no signal reaches: SQLite written by another process).
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub(crate) poll_interval: f64,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Seconds a key read from the store is trusted before it is read again: a
    /// revocation reaches every server within it (0: read the store on every request).
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub(crate) key_cache: f64,
    /// Seconds a session of the operator page lasts after signing in with a key (the
    /// key's revocation ends it sooner).
    #[arg(long, default_value_t = 43_200.0, value_name = "SECONDS")]
    pub(crate) session_ttl: f64,
    /// Seconds one stream of `GET /v1/events` lasts before the server ends it; the page
    /// reconnects by itself, and its key or session is checked again then.
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    pub(crate) events_lifetime: f64,
    /// Let requests carry their own `now` (for tests that script time).
    #[arg(long, hide = true)]
    pub(crate) client_clock: bool,
    /// Do not run the store's schedules (by default every server runs them: any number
    /// may, and each tick still makes one job).
    #[arg(long)]
    pub(crate) no_schedules: bool,
    /// The most seconds between two looks at the schedules (a schedule made or changed is
    /// seen within it; due ticks are fired on time regardless).
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub(crate) schedule_recheck: f64,
    /// Export spans over OTLP/HTTP to this collector (e.g. http://127.0.0.1:4318; spans go
    /// to its /v1/traces): each request is a span, a child of its caller's traceparent
    /// header, with the store calls it made inside it
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub(crate) otlp_endpoint: Option<String>,
}

impl ServeArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(self) -> Result<ServeRequest, RequestError> {
        let ServeArgs {
            listen,
            body_limit,
            max_in_flight,
            max_waiting,
            request_timeout,
            rate_limit,
            key_cache,
            session_ttl,
            events_lifetime,
            poll_interval,
            tls_cert,
            tls_key,
            client_clock,
            no_schedules,
            schedule_recheck,
            otlp_endpoint,
        } = self;
        if !(rate_limit.is_finite() && rate_limit >= 0.0) {
            return Err(RequestError::Flag(format!(
                "--rate-limit must be 0 or more requests a second, got {rate_limit}"
            )));
        }
        for (flag, value) in [
            ("--body-limit", body_limit),
            ("--max-in-flight", max_in_flight),
            ("--max-waiting", max_waiting),
        ] {
            if value == 0 {
                return Err(RequestError::Flag(format!("{flag} must be at least 1")));
            }
        }
        Ok(ServeRequest {
            listen,
            body_limit,
            max_in_flight,
            max_waiting,
            request_timeout: duration_flag("--request-timeout", request_timeout)
                .map_err(RequestError::Flag)?,
            client_clock,
            rate_limit,
            key_cache: duration_flag("--key-cache", key_cache).map_err(RequestError::Flag)?,
            tls: tls_cert.zip(tls_key),
            poll_interval: duration_flag("--poll-interval", poll_interval)
                .map_err(RequestError::Flag)?
                .max(std::time::Duration::from_millis(10)),
            session_ttl: duration_flag("--session-ttl", session_ttl)
                .map_err(RequestError::Flag)?
                .max(std::time::Duration::from_secs(1)),
            events_lifetime: duration_flag("--events-lifetime", events_lifetime)
                .map_err(RequestError::Flag)?
                .max(std::time::Duration::from_millis(100)),
            audit: false,
            schedules: !no_schedules,
            schedule_recheck: duration_flag("--schedule-recheck", schedule_recheck)
                .map_err(RequestError::Flag)?
                .max(std::time::Duration::from_millis(10)),
            traced: otlp_endpoint.is_some_and(|e| !e.trim().is_empty()),
        })
    }
}

/// The arguments of `lease keys`.
#[derive(Debug, clap::Args)]
pub(crate) struct KeysArgs {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: KeysCommand,
}

impl KeysArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(self) -> Result<KeysRequest, RequestError> {
        let KeysArgs { command } = self;
        Ok(match command {
            KeysCommand::Create { principal, scope } => KeysRequest::Create(
                lease_domain::Principal::new(principal)
                    .map_err(|e| RequestError::Flag(e.to_string()))?,
                lease_domain::Scope::parse(&scope)
                    .map_err(|e| RequestError::Flag(format!("--scope: {e}")))?,
            ),
            KeysCommand::List => KeysRequest::List,
            KeysCommand::Revoke { id } => KeysRequest::Revoke(
                lease_domain::KeyId::new(id).map_err(|e| RequestError::Flag(e.to_string()))?,
            ),
        })
    }
}

/// What `lease keys` does.
#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Make a key for PRINCIPAL and print it once (the store keeps only its digest). A
    /// principal may hold two live keys, so a key can be rotated without downtime.
    Create {
        /// Who holds it: 1-64 of a-z, 0-9, '.', '_', '-'. A worker key may claim as PRINCIPAL
        /// or PRINCIPAL/anything.
        principal: String,
        /// viewer (reads), worker (also enqueues, claims and writes its leases) or admin
        /// (also cancels, retries, purges and acts as any owner).
        #[arg(long)]
        scope: String,
    },
    /// List every key (never a secret).
    List,
    /// Revoke a key by its id: requests with it are refused from then on.
    Revoke {
        /// The key's id (the part after `lk_`).
        id: String,
    },
}

/// What `lease serve` runs with, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServeRequest {
    /// Where to listen.
    pub listen: std::net::SocketAddr,
    /// The body limit.
    pub body_limit: usize,
    /// Requests at once.
    pub max_in_flight: usize,
    /// Long polls at once.
    pub max_waiting: usize,
    /// The request timeout.
    pub request_timeout: std::time::Duration,
    /// Whether requests may carry their own `now`.
    pub client_clock: bool,
    /// Requests a second per principal (0: no limit).
    pub rate_limit: f64,
    /// How long a key read from the store is trusted.
    pub key_cache: std::time::Duration,
    /// The certificate chain and key to serve HTTPS with.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// How often a waiting claim looks again.
    pub poll_interval: std::time::Duration,
    /// How long a page session lasts.
    pub session_ttl: std::time::Duration,
    /// How long one event stream lasts.
    pub events_lifetime: std::time::Duration,
    /// Whether the store records refused writes (from `--audit`, set by `main`).
    pub audit: bool,
    /// Whether to run the store's schedules.
    pub schedules: bool,
    /// The most time between two looks at the schedules.
    pub schedule_recheck: std::time::Duration,
    /// Whether spans are exported (`main` starts the exporter): requests join their
    /// callers' traces.
    pub traced: bool,
}

/// What `lease keys` does, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KeysRequest {
    /// Make a key.
    Create(lease_domain::Principal, lease_domain::Scope),
    /// List keys.
    List,
    /// Revoke a key.
    Revoke(lease_domain::KeyId),
}
