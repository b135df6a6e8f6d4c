//! `lease serve` (the queue over HTTP, through `lease-server`) and `lease keys` (its API keys).

use std::sync::Arc;

use lease_domain::Timestamp;
use lease_server::{MetricsRender, ServiceConfig};
use serde_json::json;

use crate::cli::{KeysRequest, ServeRequest};
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
