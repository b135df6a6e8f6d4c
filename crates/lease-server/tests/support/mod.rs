//! What the server crate's request-by-request tests share: a clock the test moves, and one
//! request sent through the router with its answer read whole.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use lease_domain::Timestamp;
use serde_json::Value;
use tower::ServiceExt as _;

/// A clock the test sets, in Unix seconds.
#[derive(Clone)]
pub struct TestClock(Arc<AtomicU64>);

impl TestClock {
    pub fn at(t: f64) -> Self {
        Self(Arc::new(AtomicU64::new(t.to_bits())))
    }

    pub fn set(&self, t: f64) {
        self.0.store(t.to_bits(), Ordering::SeqCst);
    }

    /// The clock as the server reads it.
    pub fn clock(&self) -> lease_server::Clock {
        let time = self.0.clone();
        Arc::new(move || Timestamp::new(f64::from_bits(time.load(Ordering::SeqCst))).unwrap())
    }
}

/// One answer: status, headers and the body as JSON (or a string).
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

/// `request` sent through `app`, its answer read whole.
pub async fn send(app: &axum::Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Answer {
        status,
        headers,
        body,
    }
}
