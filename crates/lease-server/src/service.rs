//! The service's own routes: health, the Prometheus metrics and the OpenAPI document.

use crate::extract::Viewer;
use crate::problem::ProblemBody;
use crate::respond::{Answer, AppState, json_response, now};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use lease_domain::JobId;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

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
)]
pub(crate) async fn metrics(State(app): AppState, _: Viewer) -> Answer {
    if app.config.metrics.is_some() {
        // The queues' flow control, read at each scrape (the settings are a small table).
        let now = now(&app, None)?;
        let settings = lease_ports::control::queues_and_throttles(&*app.store, now).await?;
        let mut gauged = app
            .gauged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lease_ports::observe::set_queue_gauges(&settings, &gauged, now);
        gauged.extend(settings.into_iter().map(|(queue, _, _)| queue));
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
        app.openapi.to_string(),
    )
        .into_response()
}
