//! Whatever a client sends (any route, any method, any body, any headers), the service never
//! answers with a 5xx: bad input is the client's error, told as a 4xx problem.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use lease_domain::{Principal, Scope, Timestamp};
use lease_ports::memory::MemoryLeaseStore;
use lease_server::{ServiceConfig, ServiceStore, router, secrets};
use proptest::prelude::*;
use tower::ServiceExt as _;

const PATHS: [&str; 18] = [
    "/v1/queues/{s}/jobs",
    "/v1/queues/{s}/jobs/batch",
    "/v1/queues/{s}/claims",
    "/v1/jobs/{s}/claim",
    "/v1/jobs/{s}/renew",
    "/v1/jobs/{s}/complete",
    "/v1/jobs/{s}/fail",
    "/v1/jobs/{s}/release",
    "/v1/jobs/{s}/cancel",
    "/v1/jobs/{s}/retry",
    "/v1/jobs/{s}",
    "/v1/jobs/{s}/attempts",
    "/v1/jobs/{s}/graph?{s}",
    "/v1/jobs?{s}",
    "/v1/refusals?{s}",
    "/v1/purge",
    "/v1/bulk",
    "/v1/leases/settle",
];

/// Bodies near the shapes the routes take, and noise.
fn body() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("-1".to_owned()),
        Just("0".to_owned()),
        Just("1e308".to_owned()),
        Just("-1e308".to_owned()),
        Just("18446744073709551615".to_owned()),
        Just("9223372036854775808".to_owned()),
        Just("1.5".to_owned()),
        Just("\"\"".to_owned()),
        Just("\"\\u0000\"".to_owned()),
        Just("\"x\"".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just("[{\"id\": \"\"}]".to_owned()),
        Just("[{\"op\": \"complete\", \"id\": \"j\", \"fence\": 1, \"result\": \"x\"}]".to_owned()),
        Just("[{\"op\": \"fail\", \"id\": \"j\", \"fence\": 0, \"error\": \"x\", \"lease_token\": \"lst_x\"}]".to_owned()),
        Just("{\"base\": 0, \"factor\": 0, \"max\": 0, \"jitter\": 2}".to_owned()),
        "[a-z0-9 \\\\\"]{0,12}".prop_map(|s| format!("\"{s}\"")),
    ];
    let field = prop_oneof![
        Just("id"),
        Just("ttl"),
        Just("limit"),
        Just("wait"),
        Just("owner"),
        Just("now"),
        Just("fence"),
        Just("result"),
        Just("error"),
        Just("retry"),
        Just("backoff"),
        Just("payload"),
        Just("payload_base64"),
        Just("priority"),
        Just("run_at"),
        Just("max_attempts"),
        Just("jobs"),
        Just("before"),
        Just("statuses"),
        Just("queue"),
        Just("writes"),
        Just("claim"),
    ];
    prop_oneof![
        proptest::collection::vec((field, scalar), 0..6).prop_map(|fields| {
            let inner: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("\"{k}\": {v}"))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }),
        "\\PC{0,40}",
        Just(String::new()),
    ]
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("j".to_owned()),
        Just("%2F".to_owned()),
        Just("%FF%FE".to_owned()),
        Just("%00".to_owned()),
        Just("a%20b".to_owned()),
        Just("status=nope&limit=-1&after=".to_owned()),
        Just("limit=99999999999999999999&since=NaN".to_owned()),
        "[a-zA-Z0-9%._~-]{1,12}",
    ]
}

fn service() -> (axum::Router, String, String) {
    let store: Arc<dyn ServiceStore> = Arc::new(MemoryLeaseStore::new());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut keys = Vec::new();
    for (principal, scope) in [("ci", Scope::Worker), ("ops", Scope::Admin)] {
        let made = secrets::new_key().unwrap();
        runtime
            .block_on(store.add_key(&made.record(
                Principal::new(principal).unwrap(),
                scope,
                Timestamp::ZERO,
            )))
            .unwrap()
            .unwrap();
        keys.push(made.key);
    }
    runtime
        .block_on(store.enqueue(&lease_domain::JobId::new("j").unwrap()))
        .unwrap();
    let app = router(
        store,
        ServiceConfig::new(Arc::new(|| Timestamp::new(100.0).unwrap())),
    );
    (app, keys.remove(0), keys.remove(0))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn no_request_a_client_can_send_gets_a_5xx(
        path in 0..PATHS.len(),
        segment in segment(),
        post in any::<bool>(),
        body in body(),
        key in 0..4usize,
        json in any::<bool>(),
        token in prop_oneof![Just(None), Just(Some("lst_x".to_owned())), "\\PC{0,8}".prop_map(Some)],
    ) {
        let (app, worker, admin) = service();
        let uri = PATHS[path].replace("{s}", &segment);
        let mut request = Request::builder()
            .method(if post { "POST" } else { "GET" })
            .uri(&uri);
        match key {
            0 => {}
            1 => request = request.header("authorization", format!("Bearer {worker}")),
            2 => request = request.header("authorization", format!("Bearer {admin}")),
            _ => request = request.header("authorization", "Bearer lk_00_x"),
        }
        if json {
            request = request.header("content-type", "application/json");
        }
        if let Some(token) = &token {
            if let Ok(value) = axum::http::HeaderValue::from_str(token) {
                request = request.header("lease-token", value);
            }
        }
        let Ok(request) = request.body(Body::from(body.clone())) else {
            // A URI the HTTP layer itself cannot form never reaches the service.
            return Ok(());
        };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let status = runtime.block_on(app.oneshot(request)).unwrap().status();
        prop_assert!(!status.is_server_error(), "{uri} {body:?}: {status}");
    }
}
