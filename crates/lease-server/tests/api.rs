//! The service as a client sees it, request by request, on the memory store and on SQLite,
//! with a clock the test moves: the stale-worker story, the pinned order of a holder's write,
//! keys and scopes, and every error status a request can cause.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use lease_domain::{KeyId, Principal, Scope, Timestamp};
use lease_ports::decorate::{Call, Decorated, Hooks};
use lease_ports::memory::MemoryLeaseStore;
use lease_server::{ServiceConfig, ServiceStore, router, secrets};
use serde_json::{Value, json};

use crate::support;
use support::{Answer, TestClock, send};

/// A service with a clock the test sets, and three keys.
struct Service {
    app: axum::Router,
    time: TestClock,
    store: Arc<dyn ServiceStore>,
    worker: String,
    other: String,
    admin: String,
    viewer: String,
}

async fn key(store: &dyn ServiceStore, principal: &str, scope: Scope) -> String {
    let made = secrets::new_key().unwrap();
    store
        .add_key(&made.record(Principal::new(principal).unwrap(), scope, Timestamp::ZERO))
        .await
        .unwrap()
        .unwrap();
    made.key
}

async fn service_over(store: Arc<dyn ServiceStore>) -> Service {
    service_limited(store, 1000.0).await
}

async fn service_limited(store: Arc<dyn ServiceStore>, rate_limit: f64) -> Service {
    service_with(store, rate_limit, 1024).await
}

async fn service_with(
    store: Arc<dyn ServiceStore>,
    rate_limit: f64,
    max_in_flight: usize,
) -> Service {
    let time = TestClock::at(1000.0);
    let mut config = ServiceConfig::new(time.clock());
    config.poll_interval = std::time::Duration::from_millis(50);
    config.rate_limit = rate_limit;
    config.key_cache = std::time::Duration::from_millis(100);
    config.max_in_flight = max_in_flight;
    Service {
        worker: key(store.as_ref(), "ci", Scope::Worker).await,
        other: key(store.as_ref(), "cd", Scope::Worker).await,
        admin: key(store.as_ref(), "ops", Scope::Admin).await,
        viewer: key(store.as_ref(), "eye", Scope::Viewer).await,
        app: router(store.clone(), config),
        time,
        store,
    }
}

async fn service() -> Service {
    service_over(Arc::new(MemoryLeaseStore::new())).await
}

impl Service {
    fn at(&self, t: f64) {
        self.time.set(t);
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        send(&self.app, request).await
    }

    async fn post(&self, path: &str, key: &str, token: Option<&str>, body: Value) -> Answer {
        let mut request = Request::post(path)
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json");
        if let Some(token) = token {
            request = request.header("lease-token", token);
        }
        self.send(request.body(Body::from(body.to_string())).unwrap())
            .await
    }

    async fn get(&self, path: &str, key: &str) -> Answer {
        self.send(
            Request::get(path)
                .header("authorization", format!("Bearer {key}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    async fn enqueue(&self, queue: &str, id: &str) {
        let answer = self
            .post(
                &format!("/v1/queues/{queue}/jobs"),
                &self.worker,
                None,
                json!({ "id": id }),
            )
            .await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }

    /// Claims one job of `queue` as `owner` with `key`: (id, fence, token).
    async fn claim(&self, queue: &str, key: &str, owner: &str, ttl: f64) -> (String, u64, String) {
        let answer = self
            .post(
                &format!("/v1/queues/{queue}/claims"),
                key,
                None,
                json!({ "ttl": ttl, "owner": owner }),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        assert_eq!(answer.headers["cache-control"], "no-store");
        let lease = &answer.body["leases"][0];
        (
            lease["id"].as_str().unwrap().to_owned(),
            lease["fence"].as_u64().unwrap(),
            lease["lease_token"].as_str().unwrap().to_owned(),
        )
    }
}

fn assert_problem(answer: &Answer, status: StatusCode, reason: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    assert_eq!(answer.headers["content-type"], "application/problem+json");
    assert_eq!(answer.body["reason"], reason, "{}", answer.body);
    assert_eq!(answer.body["status"], status.as_u16());
}

#[tokio::test]
async fn a_stale_worker_is_refused_naming_both_fences_and_the_new_result_stands() {
    let s = service().await;
    s.enqueue("mail", "job/1 ü").await;
    let (id, fence_a, token_a) = s.claim("mail", &s.worker, "ci/a", 10.0).await;
    assert_eq!((id.as_str(), fence_a), ("job/1 ü", 1));
    // A stalls past its lease; B takes the job.
    s.at(1020.0);
    let (_, fence_b, token_b) = s.claim("mail", &s.worker, "ci/b", 10.0).await;
    assert_eq!(fence_b, 2);
    let path = "/v1/jobs/job%2F1%20%C3%BC";
    for op in ["renew", "complete"] {
        let answer = s
            .post(
                &format!("{path}/{op}"),
                &s.worker,
                Some(&token_a),
                json!({"fence": fence_a, "ttl": 10, "result": "A's"}),
            )
            .await;
        // renew takes no result and complete no ttl: the field check names that first.
        if answer.status == StatusCode::UNPROCESSABLE_ENTITY {
            let body = if op == "renew" {
                json!({"fence": fence_a, "ttl": 10})
            } else {
                json!({"fence": fence_a, "result": "A's"})
            };
            let answer = s
                .post(&format!("{path}/{op}"), &s.worker, Some(&token_a), body)
                .await;
            assert_problem(&answer, StatusCode::CONFLICT, "stale");
            assert_eq!(answer.body["presented_fence"], 1);
            assert_eq!(answer.body["current_fence"], 2);
            assert_eq!(
                answer.body["detail"],
                "fence 1 is stale (the current fence is 2)"
            );
        } else {
            panic!("{op} took a field it does not take: {}", answer.body);
        }
    }
    let done = s
        .post(
            &format!("{path}/complete"),
            &s.worker,
            Some(&token_b),
            json!({"fence": fence_b, "result": "B's"}),
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert_eq!(done.body, json!({"ok": true, "result_fence": 2}));
    let job = s.get(path, &s.viewer).await;
    assert_eq!(job.body["result"], "B's");
    assert_eq!(job.body["result_fence"], 2);
    assert_eq!(job.body["status"], "done");
    // A's late complete still changes nothing, with A's token or B's.
    for token in [&token_a, &token_b] {
        let late = s
            .post(
                &format!("{path}/complete"),
                &s.worker,
                Some(token),
                json!({"fence": fence_a, "result": "A's"}),
            )
            .await;
        assert_problem(&late, StatusCode::CONFLICT, "stale");
    }
    // A fence above the current one was never handed out: the same reason, told as it is.
    let ahead = s
        .post(
            &format!("{path}/renew"),
            &s.worker,
            Some(&token_b),
            json!({"fence": 3, "ttl": 10}),
        )
        .await;
    assert_problem(&ahead, StatusCode::CONFLICT, "stale");
    assert_eq!(
        ahead.body["detail"],
        "fence 3 was never issued; the current fence is 2"
    );
    assert_eq!(s.get(path, &s.viewer).await.body["result"], "B's");
}

#[tokio::test]
async fn a_holder_write_is_judged_in_the_pinned_order() {
    let s = service().await;
    let write = |id: &str, fence: u64, token: Option<String>, key: String| {
        let s = &s;
        let id = id.to_owned();
        async move {
            s.post(
                &format!("/v1/jobs/{id}/renew"),
                &key,
                token.as_deref(),
                json!({"fence": fence, "ttl": 10}),
            )
            .await
        }
    };
    assert_problem(
        &write("nope", 1, None, s.worker.clone()).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    s.enqueue("q", "j").await;
    let (_, fence, token) = s.claim("q", &s.worker, "ci", 10.0).await;
    // A stale fence is stale whoever sends it, with no token at all.
    assert_problem(
        &write("j", fence + 1, None, s.other.clone()).await,
        StatusCode::CONFLICT,
        "stale",
    );
    // The lease is ci's: cd's key is not its owner (before any token is looked at).
    assert_problem(
        &write("j", fence, Some(token.clone()), s.other.clone()).await,
        StatusCode::CONFLICT,
        "not_owner",
    );
    assert_problem(
        &write("j", fence, None, s.worker.clone()).await,
        StatusCode::BAD_REQUEST,
        "missing_token",
    );
    let (_, _, other_token) = {
        s.enqueue("q2", "k").await;
        s.claim("q2", &s.worker, "ci", 10.0).await
    };
    let wrong = write("j", fence, Some(other_token), s.worker.clone()).await;
    assert_problem(&wrong, StatusCode::FORBIDDEN, "bad_token");
    // An admin acts as any owner, but still needs the lease's token.
    assert_problem(
        &write("j", fence, None, s.admin.clone()).await,
        StatusCode::BAD_REQUEST,
        "missing_token",
    );
    assert_eq!(
        write("j", fence, Some(token.clone()), s.admin.clone())
            .await
            .status,
        StatusCode::OK
    );
    // Expired comes last: the right token, the right fence, too late.
    s.at(2000.0);
    assert_problem(
        &write("j", fence, Some(token.clone()), s.worker.clone()).await,
        StatusCode::CONFLICT,
        "expired",
    );
    // Done, cancelled and dead come before the owner and the token.
    let cancel = s.post("/v1/jobs/j/cancel", &s.admin, None, json!({})).await;
    assert_eq!(cancel.status, StatusCode::OK, "{}", cancel.body);
    assert_problem(
        &write("j", fence, None, s.other.clone()).await,
        StatusCode::CONFLICT,
        "cancelled",
    );
}

#[tokio::test]
async fn keys_and_scopes_decide_who_may_do_what() {
    let s = service().await;
    s.enqueue("q", "j").await;
    let no_key = s
        .send(Request::get("/v1/stats").body(Body::empty()).unwrap())
        .await;
    assert_problem(&no_key, StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(no_key.headers["www-authenticate"], "Bearer");
    // The key is checked before the body is read: a stranger learns nothing of the API.
    let stranger = s
        .send(
            Request::post("/v1/queues/q/claims")
                .header("content-type", "application/json")
                .body(Body::from(r#"{"ttl": "#))
                .unwrap(),
        )
        .await;
    assert_problem(&stranger, StatusCode::UNAUTHORIZED, "unauthorized");
    for bad in [
        "lk_0000_nope".to_owned(),
        "not a key".to_owned(),
        format!("{}x", s.worker),
    ] {
        let answer = s.get("/v1/stats", &bad).await;
        assert_problem(&answer, StatusCode::UNAUTHORIZED, "unauthorized");
        assert!(!answer.body.to_string().contains(&bad));
    }
    // A viewer reads but cannot act; a worker cannot cancel; an admin can.
    assert_eq!(s.get("/v1/stats", &s.viewer).await.status, StatusCode::OK);
    let enqueue = s
        .post("/v1/queues/q/jobs", &s.viewer, None, json!({"id": "v"}))
        .await;
    assert_problem(&enqueue, StatusCode::FORBIDDEN, "forbidden");
    let cancel = s
        .post("/v1/jobs/j/cancel", &s.worker, None, json!({}))
        .await;
    assert_problem(&cancel, StatusCode::FORBIDDEN, "forbidden");
    // A worker claims as its principal or below it, never as another.
    for owner in ["cd", "cix", "cd/ci"] {
        let answer = s
            .post(
                "/v1/queues/q/claims",
                &s.worker,
                None,
                json!({"ttl": 5, "owner": owner}),
            )
            .await;
        assert_problem(&answer, StatusCode::FORBIDDEN, "forbidden");
    }
    let (_, _, _) = s.claim("q", &s.worker, "ci/host-1", 5.0).await;
    // A revoked key is refused once the server's cached copy is older than its key cache.
    let id = secrets::parse_key(&s.viewer).unwrap().0;
    assert!(s.store.revoke_key(&id, Timestamp::ZERO).await.unwrap());
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert_problem(
        &s.get("/v1/stats", &s.viewer).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    let _: KeyId = id;
}

#[tokio::test]
async fn every_bad_request_gets_its_own_status_and_never_a_5xx_or_an_echo() {
    let s = service().await;
    let raw = |body: &'static str, content_type: Option<&'static str>| {
        let mut request = Request::post("/v1/queues/q/claims")
            .header("authorization", format!("Bearer {}", s.worker));
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        request.body(Body::from(body)).unwrap()
    };
    let json = Some("application/json");
    for (request, status, reason) in [
        (
            raw(r#"{"ttl": "#, json),
            StatusCode::BAD_REQUEST,
            "malformed",
        ),
        (
            raw(r#"{"ttl": 5}"#, Some("text/plain")),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            raw(r#"{"ttl": 0}"#, json),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            raw(r#"{"ttl": -1}"#, json),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            raw(r#"{"ttl": 1e308, "now": 1e308}"#, json),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            raw(r#"{"ttl": 5, "limit": 101}"#, json),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            raw(r#"{"ttl": 5, "limit": 0}"#, json),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            raw(r#"{"ttl": 5, "wait": 21}"#, json),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            raw(r#"{"ttl": "s3cr3t"}"#, json),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            raw(r#"{"ttl": 5, "owner": ""}"#, json),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
    ] {
        let answer = s.send(request).await;
        assert_problem(&answer, status, reason);
        assert!(
            !answer.body.to_string().contains("s3cr3t"),
            "{}",
            answer.body
        );
    }
    let empty_id = s
        .post("/v1/queues/q/jobs", &s.worker, None, json!({"id": ""}))
        .await;
    assert_problem(&empty_id, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    assert!(empty_id.body["detail"].as_str().unwrap().contains("`id`"));
    // A payload of 1 MiB fits under the default body limit, even as base64.
    let mib = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(vec![0xffu8; 1 << 20])
    };
    let fits = s
        .post(
            "/v1/queues/q/jobs",
            &s.worker,
            None,
            json!({"id": "mib", "payload_base64": mib}),
        )
        .await;
    assert_eq!(fits.status, StatusCode::CREATED, "{}", fits.body);
    let huge = "x".repeat(3 << 20);
    let too_large = s
        .send(
            Request::post("/v1/queues/q/jobs")
                .header("authorization", format!("Bearer {}", s.worker))
                .header("content-type", "application/json")
                .body(Body::from(format!(r#"{{"id": "a", "payload": "{huge}"}}"#)))
                .unwrap(),
        )
        .await;
    assert_problem(&too_large, StatusCode::PAYLOAD_TOO_LARGE, "too_large");
    let unknown_route = s.get("/v1/nothing", &s.worker).await;
    assert_problem(&unknown_route, StatusCode::NOT_FOUND, "not_found");
    let bad_status = s.get("/v1/jobs?status=s3cr3t", &s.viewer).await;
    assert_problem(&bad_status, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    assert!(!bad_status.body.to_string().contains("s3cr3t"));
    let now_refused = s
        .post(
            "/v1/queues/q/claims",
            &s.worker,
            None,
            json!({"ttl": 5, "now": 3}),
        )
        .await;
    assert_problem(&now_refused, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
}

#[tokio::test]
async fn enqueue_answers_201_then_200_and_a_batch_is_stored_whole_or_not_at_all() {
    let s = service().await;
    let first = s
        .post(
            "/v1/queues/q/jobs",
            &s.worker,
            None,
            json!({"id": "a", "payload_base64": "AP8="}),
        )
        .await;
    assert_eq!(
        (first.status, &first.body),
        (StatusCode::CREATED, &json!({"inserted": true}))
    );
    let again = s
        .post("/v1/queues/q/jobs", &s.worker, None, json!({"id": "a"}))
        .await;
    assert_eq!(
        (again.status, &again.body),
        (StatusCode::OK, &json!({"inserted": false}))
    );
    let job = s.get("/v1/jobs/a", &s.viewer).await;
    assert_eq!(job.body["payload_base64"], "AP8=");
    let bad_batch = s
        .post(
            "/v1/queues/q/jobs/batch",
            &s.worker,
            None,
            json!({"jobs": [{"id": "b"}, {"id": ""}]}),
        )
        .await;
    assert_problem(&bad_batch, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    assert_eq!(
        bad_batch.body["detail"],
        "field `jobs[1].id` must not be empty"
    );
    assert_eq!(
        s.get("/v1/jobs/b", &s.viewer).await.status,
        StatusCode::NOT_FOUND
    );
    let batch = s
        .post(
            "/v1/queues/q/jobs/batch",
            &s.worker,
            None,
            json!({"jobs": [{"id": "b"}, {"id": "a"}, {"id": "c", "priority": 3}]}),
        )
        .await;
    assert_eq!(batch.body, json!({"inserted": [true, false, true]}));
    let (first_claimed, _, _) = s.claim("q", &s.worker, "ci", 5.0).await;
    assert_eq!(first_claimed, "c");
}

#[tokio::test]
async fn a_sealed_payload_and_result_are_shown_by_their_key_and_leased_with_the_bytes() {
    use base64::Engine;
    let s = service().await;
    // A sealed payload as a producer sends it (the server never opens one, so any body will
    // do): the envelope's header under key `ops`, then a nonce, ciphertext and tag.
    let mut sealed = lease_domain::sealed_payload_header("ops");
    sealed.extend((0u8..40).map(|b| b.wrapping_mul(37)));
    let sealed = base64::engine::general_purpose::STANDARD.encode(&sealed);
    let sent = s
        .post(
            "/v1/queues/q/jobs",
            &s.worker,
            None,
            json!({"id": "mail", "payload_base64": sealed}),
        )
        .await;
    assert_eq!(sent.status, StatusCode::CREATED, "{}", sent.body);
    let job = s.get("/v1/jobs/mail", &s.viewer).await;
    assert_eq!(job.body["payload_encrypted"], json!({"key": "ops"}));
    assert_eq!(job.body.get("payload"), None, "never shown as text");
    assert_eq!(job.body["payload_base64"], sealed.as_str());
    let claimed = s
        .post(
            "/v1/queues/q/claims",
            &s.worker,
            None,
            json!({"ttl": 5, "owner": "ci"}),
        )
        .await;
    assert_eq!(claimed.status, StatusCode::OK, "{}", claimed.body);
    let lease = &claimed.body["leases"][0];
    assert_eq!(
        lease["payload_base64"],
        sealed.as_str(),
        "the worker gets the bytes"
    );
    assert_eq!(lease["payload_encrypted"], json!({"key": "ops"}));
    // A sealed result (sealed by the worker) is named by its key too.
    let sealed_result = "lease-sealed:v1:ops:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let done = s
        .post(
            "/v1/jobs/mail/complete",
            &s.worker,
            lease["lease_token"].as_str(),
            json!({"fence": lease["fence"], "result": sealed_result}),
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    let job = s.get("/v1/jobs/mail", &s.viewer).await;
    assert_eq!(job.body["result_encrypted"], json!({"key": "ops"}));
    assert_eq!(job.body["result"], sealed_result);
    // A plain payload says nothing of keys.
    s.post(
        "/v1/queues/q/jobs",
        &s.worker,
        None,
        json!({"id": "plain", "payload": "hello"}),
    )
    .await;
    let plain = s.get("/v1/jobs/plain", &s.viewer).await;
    assert_eq!(plain.body["payload"], "hello");
    assert_eq!(plain.body.get("payload_encrypted"), None);
}

#[tokio::test]
async fn an_enqueue_keeps_the_trace_context_of_its_headers_or_its_body_and_a_bad_one_is_ignored_or_refused()
 {
    let s = service().await;
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let send = |path: &str, headers: &[(&str, &str)], body: Value| {
        let mut request = Request::post(path)
            .header("authorization", format!("Bearer {}", s.worker))
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(Body::from(body.to_string())).unwrap()
    };
    let headers = [("traceparent", parent), ("tracestate", "vendor=1")];
    let one = s
        .send(send("/v1/queues/q/jobs", &headers, json!({"id": "one"})))
        .await;
    assert_eq!(one.status, StatusCode::CREATED, "{}", one.body);
    let view = s.get("/v1/jobs/one", &s.viewer).await;
    assert_eq!(
        (&view.body["traceparent"], &view.body["tracestate"]),
        (&json!(parent), &json!("vendor=1"))
    );
    // A batch: the headers' context for each job that names none, a job's own otherwise.
    let batch = s
        .send(send(
            "/v1/queues/q/jobs/batch",
            &headers,
            json!({"jobs": [{"id": "b1"}, {"id": "b2", "traceparent": own}]}),
        ))
        .await;
    assert_eq!(batch.status, StatusCode::OK, "{}", batch.body);
    let b1 = s.get("/v1/jobs/b1", &s.viewer).await;
    let b2 = s.get("/v1/jobs/b2", &s.viewer).await;
    assert_eq!(b1.body["traceparent"], parent);
    assert_eq!(
        (&b2.body["traceparent"], &b2.body["tracestate"]),
        (&json!(own), &Value::Null)
    );
    // Without one: null. Lists leave it out.
    s.enqueue("q", "plain").await;
    assert_eq!(
        s.get("/v1/jobs/plain", &s.viewer).await.body["traceparent"],
        Value::Null
    );
    let page = s.get("/v1/jobs?queue=q", &s.viewer).await;
    assert!(
        page.body["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["traceparent"].is_null())
    );
    // A header that is not a valid trace context is ignored, as W3C Trace Context has a
    // receiver do: the job is stored without one.
    let zeros = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let ignored = s
        .send(send(
            "/v1/queues/q/jobs",
            &[("traceparent", zeros)],
            json!({"id": "bad-header"}),
        ))
        .await;
    assert_eq!(ignored.status, StatusCode::CREATED, "{}", ignored.body);
    let view = s.get("/v1/jobs/bad-header", &s.viewer).await;
    assert_eq!(view.body["traceparent"], Value::Null);
    // A bad one in the body, lease's own field, is refused naming the job and what is
    // wrong, and the batch stores nothing.
    let refused = s
        .send(send(
            "/v1/queues/q/jobs/batch",
            &[],
            json!({"jobs": [{"id": "ok"}, {"id": "bad-body", "traceparent": zeros}]}),
        ))
        .await;
    assert_problem(&refused, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    let detail = refused.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("jobs[1]") && detail.contains("trace id"),
        "{detail}"
    );
    for id in ["ok", "bad-body"] {
        let gone = s.get(&format!("/v1/jobs/{id}"), &s.viewer).await;
        assert_eq!(gone.status, StatusCode::NOT_FOUND, "{id} was stored");
    }
}

#[tokio::test]
async fn jobs_page_by_key_and_the_next_id_leads_to_the_rest() {
    let s = service().await;
    for id in ["e", "a", "c", "b", "d"] {
        s.enqueue("q", id).await;
    }
    let mut seen = Vec::new();
    let mut path = "/v1/jobs?queue=q&limit=2".to_owned();
    loop {
        let page = s.get(&path, &s.viewer).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        for job in page.body["jobs"].as_array().unwrap() {
            seen.push(job["id"].as_str().unwrap().to_owned());
        }
        match page.body["next"].as_str() {
            Some(next) => path = format!("/v1/jobs?queue=q&limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_enqueue_answers_exactly_one_of_fifty_waiting_claims() {
    let s = Arc::new(service().await);
    let mut waiting = Vec::new();
    for n in 0..50 {
        let s = s.clone();
        waiting.push(tokio::spawn(async move {
            s.post(
                "/v1/queues/q/claims",
                &s.worker,
                None,
                json!({"ttl": 30, "wait": 2, "owner": format!("ci/{n}")}),
            )
            .await
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    s.enqueue("q", "only").await;
    let mut answered = 0;
    for task in waiting {
        let answer = task.await.unwrap();
        assert_eq!(answer.status, StatusCode::OK);
        let leases = answer.body["leases"].as_array().unwrap();
        if !leases.is_empty() {
            assert_eq!(leases[0]["id"], "only");
            answered += 1;
        }
    }
    assert_eq!(answered, 1, "one job, one lease");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(1000),
        "the others waited"
    );
}

#[tokio::test]
async fn refused_writes_appear_in_the_refusals_with_their_fences() {
    let dir = tempfile::tempdir().unwrap();
    let options = lease_sqlite::SqliteOptions {
        audit: Some(100),
        ..lease_sqlite::SqliteOptions::default()
    };
    let store =
        lease_sqlite::SqliteLeaseStore::open_with(dir.path().join("a.db"), options).unwrap();
    let s = service_over(Arc::new(store)).await;
    s.enqueue("q", "j").await;
    let (_, fence_a, token_a) = s.claim("q", &s.worker, "ci/a", 10.0).await;
    s.at(1030.0);
    let (_, _, _) = s.claim("q", &s.worker, "ci/b", 10.0).await;
    // A's late write with the right token for its own (old) fence: the store judges it.
    let late = s
        .post(
            "/v1/jobs/j/complete",
            &s.worker,
            Some(&token_a),
            json!({"fence": fence_a, "result": "late"}),
        )
        .await;
    assert_problem(&late, StatusCode::CONFLICT, "stale");
    // B's write with A's token: refused as a wrong token, and recorded as such.
    let wrong = s
        .post(
            "/v1/jobs/j/renew",
            &s.worker,
            Some(&token_a),
            json!({"fence": fence_a + 1, "ttl": 5}),
        )
        .await;
    assert_problem(&wrong, StatusCode::FORBIDDEN, "bad_token");
    let refusals = s.get("/v1/refusals", &s.viewer).await;
    assert_eq!(refusals.status, StatusCode::OK, "{}", refusals.body);
    let rows = refusals.body["refusals"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{}", refusals.body);
    assert_eq!(rows[1]["reason"], "bad_token");
    assert_eq!(rows[1]["operation"], "renew");
    assert_eq!(rows[1]["presented_fence"], 2);
    let row = &rows[0];
    assert_eq!(row["job"], "j");
    assert_eq!(row["operation"], "complete");
    assert_eq!(row["reason"], "stale");
    assert_eq!(row["presented_fence"], 1);
    assert_eq!(row["current_fence"], 2);
    assert_eq!(row["owner"], "ci");
    let since = s.get("/v1/refusals?since=99999999999", &s.viewer).await;
    assert_eq!(since.body["refusals"], json!([]));
}

#[tokio::test]
async fn over_its_rate_limit_a_principal_gets_429_but_its_renewals_still_go_through() {
    // One request a second, in bursts of two: the enqueue and the claim pass, and the next
    // request (well within the second) does not.
    let s = service_limited(Arc::new(MemoryLeaseStore::new()), 1.0).await;
    s.enqueue("q", "j").await;
    let (_, fence, token) = s.claim("q", &s.worker, "ci", 30.0).await;
    let limited = s.get("/v1/stats", &s.worker).await;
    assert_problem(&limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(limited.headers["retry-after"], "1");
    // The same principal's renewals have their own bucket; other principals are untouched.
    let renewed = s
        .post(
            "/v1/jobs/j/renew",
            &s.worker,
            Some(&token),
            json!({"fence": fence, "ttl": 30}),
        )
        .await;
    assert_eq!(renewed.status, StatusCode::OK, "{}", renewed.body);
    assert_eq!(s.get("/v1/stats", &s.viewer).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_completion_can_carry_the_next_claim_in_one_transaction() {
    let s = service().await;
    for id in ["a", "b", "c"] {
        s.enqueue("q", id).await;
    }
    let (id, fence, token) = s.claim("q", &s.worker, "ci/1", 10.0).await;
    assert_eq!(id, "a");
    let next = json!({"queue": "q", "ttl": 10});
    let done = s
        .post(
            "/v1/jobs/a/complete",
            &s.worker,
            Some(&token),
            json!({"fence": fence, "result": "ok", "claim": next}),
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert_eq!(
        (done.body["ok"].clone(), done.body["result_fence"].clone()),
        (json!(true), json!(1))
    );
    assert_eq!(done.body["leases"][0]["id"], "b");
    assert_eq!(done.headers["cache-control"], "no-store");
    let (b_fence, b_token) = (
        done.body["leases"][0]["fence"].as_u64().unwrap(),
        done.body["leases"][0]["lease_token"]
            .as_str()
            .unwrap()
            .to_owned(),
    );
    // The next lease is claimed as a claim is: the owner the request names, else the key's
    // principal (this request named none); it has a token of its own.
    let job = s.get("/v1/jobs/b", &s.viewer).await;
    assert_eq!(job.body["owner"], "ci");
    assert_ne!(b_token, token);
    // Late (expired) but otherwise right: the store refuses the completion, and the claim
    // half still runs in the same transaction.
    s.at(1100.0);
    let late = s
        .post(
            "/v1/jobs/b/complete",
            &s.worker,
            Some(&b_token),
            json!({"fence": b_fence, "result": "late", "claim": next}),
        )
        .await;
    assert_eq!(late.status, StatusCode::OK, "{}", late.body);
    assert_eq!(
        (late.body["ok"].clone(), late.body["reason"].clone()),
        (json!(false), json!("expired"))
    );
    let ids: Vec<&str> = late.body["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    // b's lease ended, so b (enqueued before c) is leased again, with the next fence.
    assert_eq!(ids, ["b"], "{}", late.body);
    assert_eq!(late.body["leases"][0]["fence"], b_fence + 1);
    // A stale fence is refused by the store like any refusal, in the same transaction as the
    // claim, which is made either way (the port's promise, every refusal alike).
    let stale = s
        .post(
            "/v1/jobs/a/complete",
            &s.worker,
            Some(&token),
            json!({"fence": 0, "result": "x", "claim": next}),
        )
        .await;
    assert_eq!(stale.status, StatusCode::OK, "{}", stale.body);
    assert_eq!(
        (stale.body["ok"].clone(), stale.body["reason"].clone()),
        (json!(false), json!("stale"))
    );
    assert_eq!(stale.body["leases"][0]["id"], "c", "{}", stale.body);
    let bad = s
        .post(
            "/v1/jobs/a/complete",
            &s.worker,
            Some(&token),
            json!({"fence": fence, "result": "x", "claim": {"queue": "q"}}),
        )
        .await;
    assert_problem(&bad, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_its_limit_of_requests_in_flight_the_server_sheds_load_with_503() {
    let s = Arc::new(service_with(Arc::new(MemoryLeaseStore::new()), 1000.0, 1).await);
    // One long poll holds the only place.
    let waiting = {
        let s = s.clone();
        tokio::spawn(async move {
            s.post(
                "/v1/queues/q/claims",
                &s.worker,
                None,
                json!({"ttl": 5, "wait": 1}),
            )
            .await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let shed = s.get("/v1/stats", &s.viewer).await;
    assert_problem(&shed, StatusCode::SERVICE_UNAVAILABLE, "overloaded");
    assert_eq!(shed.headers["retry-after"], "1");
    assert_eq!(waiting.await.unwrap().status, StatusCode::OK);
    assert_eq!(s.get("/v1/stats", &s.viewer).await.status, StatusCode::OK);
}

/// Every lease of one claim carries a secret of its own: a token works for its own lease only
/// (it used to be one token for every lease of a claim).
#[tokio::test]
async fn every_lease_of_a_claim_has_a_token_of_its_own() {
    let s = service().await;
    for n in 0..5 {
        s.enqueue("q", &format!("j{n}")).await;
    }
    let claimed = s
        .post(
            "/v1/queues/q/claims",
            &s.worker,
            None,
            json!({"ttl": 30, "limit": 5}),
        )
        .await;
    assert_eq!(claimed.status, StatusCode::OK, "{}", claimed.body);
    let leases: Vec<(String, u64, String)> = claimed.body["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["id"].as_str().unwrap().to_owned(),
                l["fence"].as_u64().unwrap(),
                l["lease_token"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(leases.len(), 5);
    let distinct: std::collections::HashSet<&String> = leases.iter().map(|l| &l.2).collect();
    assert_eq!(distinct.len(), 5, "tokens shared between leases");
    // Another lease's token is refused, the lease's own accepted.
    let (id, fence, _) = &leases[0];
    let other_token = &leases[1].2;
    let path = format!("/v1/jobs/{id}/renew");
    let body = json!({"fence": fence, "ttl": 30});
    let wrong = s
        .post(&path, &s.worker, Some(other_token), body.clone())
        .await;
    assert_problem(&wrong, StatusCode::FORBIDDEN, "bad_token");
    let right = s.post(&path, &s.worker, Some(&leases[0].2), body).await;
    assert_eq!(right.status, StatusCode::OK, "{}", right.body);
}

/// Hooks that count the reads of a job's record and keep the queue changes the store was
/// asked for (around the memory store).
#[derive(Default)]
struct Counting {
    records: AtomicU64,
    changes: std::sync::Mutex<Vec<lease_domain::QueueChange>>,
}

#[async_trait::async_trait]
impl Hooks for Counting {
    type Ticket = ();

    async fn before(&self, call: &Call<'_>) -> Result<(), lease_ports::StoreError> {
        match call {
            Call::Record(_) => {
                self.records.fetch_add(1, Ordering::SeqCst);
            }
            Call::ChangeQueue(_, change) => self.changes.lock().unwrap().push((*change).clone()),
            _ => {}
        }
        Ok(())
    }
}

fn counting() -> Arc<Decorated<MemoryLeaseStore, Counting>> {
    Arc::new(Decorated::with(
        Arc::new(MemoryLeaseStore::new()),
        Counting::default(),
    ))
}

/// A holder's write is judged once, by the store, in its own write: the service reads no
/// record before it, accepted or refused (it used to read the job, judge it, then write).
#[tokio::test]
async fn a_holder_s_write_is_judged_in_the_store_without_a_read_before_it() {
    let store = counting();
    let s = service_over(store.clone()).await;
    s.enqueue("q", "j").await;
    let (_, fence, token) = s.claim("q", &s.worker, "ci", 30.0).await;
    let before = store.hooks().records.load(Ordering::SeqCst);
    let writes = [
        (
            "renew",
            json!({"fence": fence, "ttl": 30}),
            Some(token.as_str()),
        ),
        (
            "renew",
            json!({"fence": fence + 1, "ttl": 30}),
            Some(token.as_str()),
        ),
        ("renew", json!({"fence": fence, "ttl": 30}), None),
        (
            "fail",
            json!({"fence": fence, "error": "x", "retry": false}),
            Some("lst_wrong"),
        ),
        ("release", json!({"fence": fence}), Some(token.as_str())),
    ];
    for (op, body, token) in writes {
        s.post(&format!("/v1/jobs/j/{op}"), &s.worker, token, body)
            .await;
    }
    assert_eq!(
        store.hooks().records.load(Ordering::SeqCst),
        before,
        "the service read the job before a holder's write"
    );
}

/// `PUT /v1/queues/{queue}/limits` with a limit and a timeout asks the store for one change,
/// so the two are applied together or not at all (it used to make two).
#[tokio::test]
async fn a_limit_and_a_timeout_in_one_request_are_one_change_of_the_store() {
    let store = counting();
    let s = service_over(store.clone()).await;
    let answer = s
        .send(
            Request::put("/v1/queues/q/limits")
                .header("authorization", format!("Bearer {}", s.admin))
                .header("content-type", "application/json")
                .body(Body::from(
                    json!({"concurrency": 2, "no_timeout": true}).to_string(),
                ))
                .unwrap(),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        *store.hooks().changes.lock().unwrap(),
        vec![lease_domain::QueueChange::Limits(
            lease_domain::Limits::both(lease_domain::Concurrency::new(2), None)
        )]
    );
    assert_eq!(answer.body["concurrency"], 2, "{}", answer.body);
}

/// Claims `limit` leases of `queue` with the worker key: (id, fence, token) each.
async fn claim_many(s: &Service, queue: &str, limit: u64) -> Vec<(String, u64, String)> {
    let claimed = s
        .post(
            &format!("/v1/queues/{queue}/claims"),
            &s.worker,
            None,
            json!({"ttl": 30, "limit": limit}),
        )
        .await;
    assert_eq!(claimed.status, StatusCode::OK, "{}", claimed.body);
    claimed.body["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["id"].as_str().unwrap().to_owned(),
                l["fence"].as_u64().unwrap(),
                l["lease_token"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn status_of(s: &Service, id: &str) -> Value {
    s.get(&format!("/v1/jobs/{id}"), &s.viewer).await.body["status"].clone()
}

/// One request completes, fails and releases several leases, each with its own token and
/// fence and each answered on its own, and claims the next jobs after them.
#[tokio::test]
async fn one_request_settles_many_leases_each_answered_on_its_own_and_claims_the_next() {
    let s = service().await;
    for id in ["a", "b", "c", "d", "e", "f", "g"] {
        s.enqueue("q", id).await;
    }
    let held = claim_many(&s, "q", 5).await;
    let ids: Vec<&str> = held.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d", "e"]);
    let write = |n: usize, op: &str| json!({"op": op, "id": held[n].0, "fence": held[n].1, "lease_token": held[n].2});
    let mut stale = write(1, "complete");
    stale["fence"] = json!(0);
    stale["result"] = json!("late");
    let mut complete = write(0, "complete");
    complete["result"] = json!("stored");
    complete["claim"] = json!({"queue": "q", "ttl": 30});
    let mut fail = write(2, "fail");
    fail["error"] = json!("upstream down");
    let mut release = write(3, "release");
    release["unstarted"] = json!(true);
    // e's write with d's token: this write's refusal alone.
    let mut wrong_token = write(4, "complete");
    wrong_token["lease_token"] = json!(held[3].2);
    wrong_token["result"] = json!("x");
    let answer = s
        .post(
            "/v1/leases/settle",
            &s.worker,
            None,
            json!({
                "writes": [complete, stale, fail, release, wrong_token],
                "claim": {"queue": "q", "ttl": 30, "limit": 2},
            }),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.headers["cache-control"], "no-store");
    let writes = answer.body["writes"].as_array().unwrap();
    assert_eq!(writes.len(), 5);
    // The completion stored, and the claim it carried leased the next due job, f.
    assert_eq!(
        (&writes[0]["ok"], &writes[0]["result_fence"]),
        (&json!(true), &json!(1))
    );
    assert_eq!(writes[0]["leases"][0]["id"], "f", "{}", answer.body);
    // The stale completion refused with both fences, as its own endpoint would say.
    assert_eq!(writes[1]["ok"], false);
    let refused = &writes[1]["refused"];
    assert_eq!(
        (
            &refused["status"],
            &refused["reason"],
            &refused["presented_fence"],
            &refused["current_fence"]
        ),
        (&json!(409), &json!("stale"), &json!(0), &json!(1)),
        "{}",
        answer.body
    );
    // The failure recorded, to be retried after its backoff.
    assert_eq!(
        (&writes[2]["ok"], &writes[2]["state"]),
        (&json!(true), &json!("pending"))
    );
    assert!(writes[2]["run_at"].as_f64().unwrap() > 1000.0);
    assert_eq!(writes[3]["ok"], true);
    assert_eq!(
        (
            &writes[4]["ok"],
            &writes[4]["refused"]["status"],
            &writes[4]["refused"]["reason"]
        ),
        (&json!(false), &json!(403), &json!("bad_token"))
    );
    // The claim came after the writes: d, given back unstarted, then g.
    let leased: Vec<&str> = answer.body["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert_eq!(leased, ["d", "g"], "{}", answer.body);
    assert_eq!(status_of(&s, "a").await, "done");
    assert_eq!(status_of(&s, "b").await, "running");
    assert_eq!(status_of(&s, "c").await, "pending");
    assert_eq!(status_of(&s, "e").await, "running");
    // Every lease granted has a token of its own that its writes take.
    let f = &writes[0]["leases"][0];
    let again = s
        .post(
            "/v1/leases/settle",
            &s.worker,
            None,
            json!({"writes": [{"op": "complete", "id": "f", "fence": f["fence"],
                "lease_token": f["lease_token"], "result": "ok"}]}),
        )
        .await;
    assert_eq!(again.body["writes"][0]["ok"], true, "{}", again.body);
    assert!(again.body.get("leases").is_none(), "{}", again.body);
    assert_eq!(status_of(&s, "f").await, "done");
}

/// A request with one write that cannot be read is refused whole, naming the write, and
/// stores nothing of the others. The rules that tie a write's fields to its op are in the
/// document, so the contract refuses such a write before the handler sees it.
#[tokio::test]
async fn a_settle_request_with_one_bad_write_is_refused_whole_naming_it_and_changes_nothing() {
    let s = service().await;
    for id in ["a", "b"] {
        s.enqueue("q", id).await;
    }
    let held = claim_many(&s, "q", 2).await;
    let good = json!({"op": "complete", "id": held[0].0, "fence": held[0].1,
        "lease_token": held[0].2, "result": "ok"});
    let cases = [
        (
            json!({"op": "complete", "id": held[1].0, "fence": held[1].1, "lease_token": held[1].2}),
            "field `writes[1]` breaks a rule",
        ),
        (
            json!({"op": "complete", "id": held[1].0, "fence": held[1].1, "result": "x", "error": "y"}),
            "field `writes[1]` breaks a rule",
        ),
        (
            json!({"op": "release", "id": held[1].0, "fence": held[1].1, "claim": {"queue": "q", "ttl": 5}}),
            "field `writes[1]` breaks a rule",
        ),
        (
            json!({"op": "fail", "id": held[1].0, "fence": held[1].1, "error": "x", "retry": false,
                "backoff": {"base": 1, "factor": 2, "max": 10, "jitter": 0}}),
            "field `writes[1]` breaks a rule",
        ),
    ];
    for (bad, says) in cases {
        let answer = s
            .post(
                "/v1/leases/settle",
                &s.worker,
                None,
                json!({"writes": [good, bad]}),
            )
            .await;
        assert_problem(&answer, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
        assert!(
            answer.body["detail"].as_str().unwrap().starts_with(says),
            "{}",
            answer.body
        );
        assert_eq!(status_of(&s, "a").await, "running", "{bad}");
    }
    // The document's own limits: an op it does not name, more than 100 writes.
    let unknown = json!({"op": "renew", "id": "a", "fence": 1});
    let answer = s
        .post(
            "/v1/leases/settle",
            &s.worker,
            None,
            json!({"writes": [good, unknown]}),
        )
        .await;
    assert_problem(&answer, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    let many: Vec<Value> = (0..101).map(|_| good.clone()).collect();
    let answer = s
        .post(
            "/v1/leases/settle",
            &s.worker,
            None,
            json!({"writes": many}),
        )
        .await;
    assert_problem(&answer, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    // A token sent as the header would say nothing of which write it is for.
    let answer = s
        .post(
            "/v1/leases/settle",
            &s.worker,
            Some(&held[0].2),
            json!({"writes": [good]}),
        )
        .await;
    assert_problem(&answer, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    // A viewer key may not write at all.
    let answer = s
        .post(
            "/v1/leases/settle",
            &s.viewer,
            None,
            json!({"writes": [good]}),
        )
        .await;
    assert_problem(&answer, StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(status_of(&s, "a").await, "running");
    // With the bad write gone the same request goes through.
    let answer = s
        .post(
            "/v1/leases/settle",
            &s.worker,
            None,
            json!({"writes": [good]}),
        )
        .await;
    assert_eq!(answer.body["writes"][0]["ok"], true, "{}", answer.body);
    assert_eq!(status_of(&s, "a").await, "done");
}

/// Loses the store's answer to any holder's write of the job `lost`.
struct LoseAnswers;

#[async_trait::async_trait]
impl Hooks for LoseAnswers {
    type Ticket = ();

    async fn before(&self, call: &Call<'_>) -> Result<(), lease_ports::StoreError> {
        match call {
            Call::Apply { job, command, .. }
                if job.as_str() == "lost"
                    && matches!(command, lease_domain::Command::AsHolder(..)) =>
            {
                Err(lease_ports::StoreError::Indeterminate(
                    "the connection broke".into(),
                ))
            }
            _ => Ok(()),
        }
    }
}

/// A write of a request whose outcome the store could not tell is answered as such, on its
/// own (`500 outcome_unknown` in its answer, never a plain refusal), and the request's other
/// writes stand.
#[tokio::test]
async fn a_write_whose_outcome_is_unknown_is_told_so_on_its_own_and_the_others_stand() {
    let store = Arc::new(Decorated::with(
        Arc::new(MemoryLeaseStore::new()),
        LoseAnswers,
    ));
    let s = service_over(store).await;
    for id in ["a", "lost"] {
        s.enqueue("q", id).await;
    }
    let held = claim_many(&s, "q", 2).await;
    let writes: Vec<Value> = held
        .iter()
        .map(|(id, fence, token)| {
            json!({"op": "complete", "id": id, "fence": fence, "lease_token": token, "result": "r"})
        })
        .collect();
    let answer = s
        .post(
            "/v1/leases/settle",
            &s.worker,
            None,
            json!({ "writes": writes }),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["writes"][0]["ok"], true, "{}", answer.body);
    let lost = &answer.body["writes"][1];
    assert_eq!(
        (
            &lost["ok"],
            &lost["refused"]["status"],
            &lost["refused"]["reason"]
        ),
        (&json!(false), &json!(500), &json!("outcome_unknown")),
        "{}",
        answer.body
    );
    assert_eq!(status_of(&s, "a").await, "done");
}

/// An admin retries every dead job of a queue's group in one request: a dry run counts them
/// first, the action answers how many matched and changed, and only they are pending again; a
/// worker key is refused, a bad filter is refused naming it, and neither changes anything.
#[tokio::test]
async fn a_bulk_retry_takes_every_dead_job_of_a_group_and_answers_the_count() {
    let s = service().await;
    for (id, group) in [("a1", "acme"), ("a2", "acme"), ("z1", "zeta")] {
        let answer = s
            .post(
                "/v1/queues/q/jobs",
                &s.worker,
                None,
                json!({"id": id, "group": group}),
            )
            .await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    }
    for (id, fence, token) in claim_many(&s, "q", 3).await {
        let answer = s
            .post(
                &format!("/v1/jobs/{id}/fail"),
                &s.worker,
                Some(&token),
                json!({"fence": fence, "error": "boom", "retry": false}),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    let filter = json!({"action": "retry", "queue": "q", "group": "acme", "dry_run": true});
    let counted = s.post("/v1/bulk", &s.admin, None, filter.clone()).await;
    assert_eq!(counted.status, StatusCode::OK, "{}", counted.body);
    assert_eq!(
        counted.body,
        json!({"action": "retry", "matched": 2, "changed": 0, "dry_run": true})
    );
    assert_eq!(
        status_of(&s, "a1").await,
        "dead",
        "a dry run changes nothing"
    );
    let refused = s.post("/v1/bulk", &s.worker, None, filter.clone()).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    let bad = s
        .post(
            "/v1/bulk",
            &s.admin,
            None,
            json!({"action": "retry", "status": "gone"}),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert!(
        bad.body["detail"].as_str().unwrap().contains("status"),
        "{}",
        bad.body
    );
    let mut act = filter;
    act["dry_run"] = json!(false);
    let done = s.post("/v1/bulk", &s.admin, None, act).await;
    assert_eq!(
        done.body,
        json!({"action": "retry", "matched": 2, "changed": 2, "dry_run": false})
    );
    assert_eq!(status_of(&s, "a1").await, "pending");
    assert_eq!(status_of(&s, "a2").await, "pending");
    assert_eq!(
        status_of(&s, "z1").await,
        "dead",
        "another group's job is left alone"
    );
}
