//! The OpenAPI document: generated from the handlers, it names every route the service
//! answers, and a standard validator (openapi-spec-validator, which `.ci/run` installs)
//! accepts it.

use std::process::Command;

use serde_json::Value;

const ROUTES: [(&str, &str); 48] = [
    ("post", "/v1/queues/{queue}/jobs"),
    ("post", "/v1/queues/{queue}/jobs/batch"),
    ("post", "/v1/queues/{queue}/claims"),
    ("post", "/v1/jobs/{id}/claim"),
    ("post", "/v1/jobs/{id}/renew"),
    ("post", "/v1/jobs/{id}/complete"),
    ("post", "/v1/jobs/{id}/fail"),
    ("post", "/v1/jobs/{id}/release"),
    ("post", "/v1/leases/settle"),
    ("get", "/v1/jobs/{id}"),
    ("get", "/v1/jobs"),
    ("post", "/v1/jobs/{id}/cancel"),
    ("post", "/v1/jobs/{id}/retry"),
    ("post", "/v1/purge"),
    ("post", "/v1/bulk"),
    ("get", "/v1/stats"),
    ("get", "/v1/activity"),
    ("get", "/v1/refusals"),
    ("get", "/healthz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/"),
    ("get", "/ui/{file}"),
    ("post", "/v1/sessions"),
    ("get", "/v1/session"),
    ("delete", "/v1/session"),
    ("get", "/v1/events"),
    ("post", "/v1/jobs/{id}/progress"),
    ("post", "/v1/jobs/{id}/hold-group"),
    ("post", "/v1/jobs/{id}/checkpoints"),
    ("get", "/v1/jobs/{id}/checkpoints"),
    ("get", "/v1/jobs/{id}/children"),
    ("get", "/v1/jobs/{id}/attempts"),
    ("get", "/v1/jobs/{id}/graph"),
    ("get", "/v1/queues"),
    ("post", "/v1/queues/{queue}/pause"),
    ("post", "/v1/queues/{queue}/resume"),
    ("put", "/v1/queues/{queue}/limits"),
    ("get", "/v1/queues/{queue}/limits"),
    ("get", "/v1/queues/{queue}/throttle"),
    ("get", "/v1/queues/{queue}/groups"),
    ("post", "/v1/queues/{queue}/groups/{group}/pause"),
    ("post", "/v1/queues/{queue}/groups/{group}/resume"),
    ("get", "/v1/schedules"),
    ("put", "/v1/schedules/{name}"),
    ("delete", "/v1/schedules/{name}"),
    ("post", "/v1/schedules/{name}/fire"),
    ("post", "/v1/schedules/{name}/run"),
];

/// Routes any caller may use: health, this document, the page's files, and signing in
/// and out (which take a key, or end the session the request carries).
const OPEN: [&str; 6] = [
    "/healthz",
    "/openapi.json",
    "/",
    "/ui/{file}",
    "/v1/sessions",
    "/v1/session",
];

#[test]
fn every_route_is_in_the_document_with_its_security() {
    let doc: Value = serde_json::from_str(&lease_server::openapi_json()).unwrap();
    for (method, path) in ROUTES {
        let operation = &doc["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is not documented");
        let open = OPEN.contains(&path);
        assert_eq!(
            operation["security"].is_array(),
            !open,
            "{method} {path}: security is documented where a key is needed"
        );
    }
    let documented: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(documented, ROUTES.len(), "a route the test does not know");
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
    let session = &doc["components"]["securitySchemes"]["session"];
    assert_eq!(
        (session["in"].as_str(), session["name"].as_str()),
        (Some("cookie"), Some("lease_session"))
    );
}

#[test]
fn every_route_documents_the_servers_own_answers_500_and_503_with_retry_after() {
    let doc: Value = serde_json::from_str(&lease_server::openapi_json()).unwrap();
    for (method, path) in ROUTES {
        let responses = &doc["paths"][path][method]["responses"];
        assert!(
            responses["500"].is_object(),
            "{method} {path} does not document 500 (outcome_unknown, store_error)"
        );
        assert!(
            responses["503"].is_object(),
            "{method} {path} does not document 503"
        );
        if path != "/healthz" {
            assert!(
                responses["503"]["headers"]["Retry-After"].is_object(),
                "{method} {path}: a 503 says when to try again"
            );
        }
    }
}

#[test]
fn a_standard_validator_accepts_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("openapi.json");
    std::fs::write(&path, lease_server::openapi_json()).unwrap();
    let out = Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(&path)
        .output()
        .expect("python3 runs (install openapi-spec-validator: .ci/run does)");
    assert!(
        out.status.success(),
        "the validator refused the document:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A body's `traceparent` is exact in the document: the server refuses a trace id or a parent
/// id of all zeros (W3C says they are invalid), so the document refuses them too, and a client
/// or a generator that follows the document never sends one; a valid one and none are taken.
#[test]
fn the_document_refuses_the_all_zero_trace_ids_the_server_refuses() {
    let doc: Value = serde_json::from_str(&lease_server::openapi_json()).unwrap();
    let zero_trace = format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32));
    let zero_parent = format!("00-4bf92f3577b34da6a3ce929d0e0e4736-{}-01", "0".repeat(16));
    let all_zero = format!("00-{}-{}-00", "0".repeat(32), "0".repeat(16));
    let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // Zeros elsewhere are fine: only an id that is all zeros is not.
    let mostly_zero = format!("00-{}1-{}1-00", "0".repeat(31), "0".repeat(15));
    for component in ["EnqueueBody", "BatchJob"] {
        let field = &doc["components"]["schemas"][component]["properties"]["traceparent"];
        let schema = jsonschema::validator_for(field).unwrap();
        for bad in [&zero_trace, &zero_parent, &all_zero] {
            assert!(
                !schema.is_valid(&Value::from(bad.as_str())),
                "{component}: {bad}"
            );
        }
        for good in [valid, mostly_zero.as_str()] {
            assert!(schema.is_valid(&Value::from(good)), "{component}: {good}");
        }
        assert!(schema.is_valid(&Value::Null), "{component}: none given");
    }
}
