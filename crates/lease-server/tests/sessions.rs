//! Every rule of a session, a key and the key cache, one test each, through the service as a
//! browser or a script meets it: a session cookie stands for its key until it ends and only
//! while its key is live, every part of the cookie is signed, each session has its own CSRF
//! token, and a key is trusted from the cache for `key_cache` and no longer.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use lease_domain::{KeyId, Principal, Scope, Timestamp};
use lease_ports::keys::KeyStore;
use lease_ports::memory::MemoryLeaseStore;
use lease_server::{ServiceConfig, router, secrets};
use serde_json::json;

use crate::support;
use support::{Answer, TestClock, send};

/// Sessions last this long here.
const SESSION_SECONDS: u64 = 600;

struct Page {
    app: axum::Router,
    time: TestClock,
    store: Arc<MemoryLeaseStore>,
    key: String,
    key_id: KeyId,
}

/// A session: the cookie's value and its CSRF token.
struct Session {
    cookie: String,
    csrf: String,
}

async fn page(key_cache: Duration) -> Page {
    let store = Arc::new(MemoryLeaseStore::new());
    let time = TestClock::at(1_000_000.0);
    let mut config = ServiceConfig::new(time.clock());
    config.key_cache = key_cache;
    config.session_ttl = Duration::from_secs(SESSION_SECONDS);
    let made = secrets::new_key().unwrap();
    store
        .add_key(&made.record(
            Principal::new("ops").unwrap(),
            Scope::Admin,
            Timestamp::ZERO,
        ))
        .await
        .unwrap()
        .unwrap();
    Page {
        app: router(store.clone(), config),
        time,
        store,
        key: made.key,
        key_id: made.id,
    }
}

impl Page {
    fn at(&self, t: f64) {
        self.time.set(t);
    }

    async fn send(&self, request: Request<Body>) -> Answer {
        send(&self.app, request).await
    }

    async fn sign_in(&self) -> Session {
        let answer = self
            .send(
                Request::post("/v1/sessions")
                    .header("content-type", "application/json")
                    .body(Body::from(json!({ "key": self.key }).to_string()))
                    .unwrap(),
            )
            .await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
        let set = answer.headers["set-cookie"].to_str().unwrap();
        let cookie = set
            .strip_prefix("lease_session=")
            .and_then(|rest| rest.split(';').next())
            .unwrap()
            .to_owned();
        Session {
            cookie,
            csrf: answer.body["csrf"].as_str().unwrap().to_owned(),
        }
    }

    /// A read with `cookie` as the session cookie: its status.
    async fn read_with(&self, cookie: &str) -> StatusCode {
        self.send(
            Request::get("/v1/stats")
                .header("cookie", format!("lease_session={cookie}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .status
    }

    /// A read with the API key itself: its status.
    async fn read_with_key(&self, key: &str) -> StatusCode {
        self.send(
            Request::get("/v1/stats")
                .header("authorization", format!("Bearer {key}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .status
    }

    async fn revoke(&self) {
        assert!(
            self.store
                .revoke_key(&self.key_id, Timestamp::ZERO)
                .await
                .unwrap()
        );
    }
}

/// The cookie's four parts: key id, expiry, nonce, MAC.
fn parts(cookie: &str) -> Vec<String> {
    cookie.split('.').map(str::to_owned).collect()
}

#[tokio::test]
async fn a_session_stands_for_its_key_until_the_second_it_ends() {
    let page = page(Duration::ZERO).await;
    let session = page.sign_in().await;
    assert_eq!(page.read_with(&session.cookie).await, StatusCode::OK);
    let ends: f64 = parts(&session.cookie)[1].parse().unwrap();
    assert_eq!(ends, 1_000_000.0 + SESSION_SECONDS as f64);
    page.at(ends - 0.5);
    assert_eq!(page.read_with(&session.cookie).await, StatusCode::OK);
    page.at(ends);
    assert_eq!(
        page.read_with(&session.cookie).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_cookie_whose_mac_is_not_its_keys_is_refused() {
    let page = page(Duration::ZERO).await;
    let session = page.sign_in().await;
    let mut forged = parts(&session.cookie);
    forged[3] = "A".repeat(forged[3].len());
    assert_eq!(
        page.read_with(&forged.join(".")).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_stretched_expiry_breaks_the_mac() {
    let page = page(Duration::ZERO).await;
    let session = page.sign_in().await;
    let mut stretched = parts(&session.cookie);
    stretched[1] = (1_000_000 + 100 * SESSION_SECONDS).to_string();
    assert_eq!(
        page.read_with(&stretched.join(".")).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_nonce_from_another_session_breaks_the_mac() {
    let page = page(Duration::ZERO).await;
    let (a, b) = (page.sign_in().await, page.sign_in().await);
    let mut swapped = parts(&a.cookie);
    swapped[2] = parts(&b.cookie)[2].clone();
    assert_eq!(
        page.read_with(&swapped.join(".")).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn each_session_has_a_nonce_and_a_csrf_token_of_its_own() {
    let page = page(Duration::ZERO).await;
    let (a, b) = (page.sign_in().await, page.sign_in().await);
    assert_ne!(parts(&a.cookie)[2], parts(&b.cookie)[2]);
    assert_ne!(a.csrf, b.csrf);
    // Each token opens its own session's writes only.
    let cancel = |cookie: &str, csrf: &str| {
        Request::post("/v1/purge")
            .header("cookie", format!("lease_session={cookie}"))
            .header("x-lease-csrf", csrf)
            .header("content-type", "application/json")
            .body(Body::from(json!({"before": 0}).to_string()))
            .unwrap()
    };
    assert_eq!(
        page.send(cancel(&a.cookie, &b.csrf)).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        page.send(cancel(&a.cookie, &a.csrf)).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn revoking_a_key_ends_its_sessions_and_the_key_itself() {
    let page = page(Duration::ZERO).await;
    let session = page.sign_in().await;
    assert_eq!(page.read_with(&session.cookie).await, StatusCode::OK);
    page.revoke().await;
    assert_eq!(
        page.read_with(&session.cookie).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        page.read_with_key(&page.key).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_key_with_the_right_id_and_a_wrong_secret_is_refused() {
    let page = page(Duration::ZERO).await;
    assert_eq!(page.read_with_key(&page.key).await, StatusCode::OK);
    let (id, _) = secrets::parse_key(&page.key).unwrap();
    let wrong = format!("lk_{id}_{}", "A".repeat(43));
    assert_eq!(page.read_with_key(&wrong).await, StatusCode::UNAUTHORIZED);
}

#[tokio::test(start_paused = true)]
async fn a_revocation_reaches_the_server_within_the_key_cache_time_and_not_before() {
    let page = page(Duration::from_secs(1)).await;
    assert_eq!(page.read_with_key(&page.key).await, StatusCode::OK);
    page.revoke().await;
    // Read from the cache: still trusted within its second.
    tokio::time::advance(Duration::from_millis(900)).await;
    assert_eq!(page.read_with_key(&page.key).await, StatusCode::OK);
    tokio::time::advance(Duration::from_millis(200)).await;
    assert_eq!(
        page.read_with_key(&page.key).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn with_no_key_cache_every_request_reads_the_key() {
    let page = page(Duration::ZERO).await;
    assert_eq!(page.read_with_key(&page.key).await, StatusCode::OK);
    page.revoke().await;
    assert_eq!(
        page.read_with_key(&page.key).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test(start_paused = true)]
async fn a_key_read_from_the_store_is_trusted_for_the_key_cache_time_and_not_at_its_end() {
    let page = page(Duration::from_secs(1)).await;
    assert_eq!(page.read_with_key(&page.key).await, StatusCode::OK);
    page.revoke().await;
    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(page.read_with_key(&page.key).await, StatusCode::OK);
    // Exactly `key_cache` after the read the key is read again, and found revoked.
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(
        page.read_with_key(&page.key).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test(start_paused = true)]
async fn the_key_cache_keeps_every_key_it_read_not_only_the_last() {
    let page = page(Duration::from_secs(1)).await;
    let other = secrets::new_key().unwrap();
    page.store
        .add_key(&other.record(
            Principal::new("eye").unwrap(),
            Scope::Viewer,
            Timestamp::ZERO,
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.read_with_key(&page.key).await, StatusCode::OK);
    assert_eq!(page.read_with_key(&other.key).await, StatusCode::OK);
    page.revoke().await;
    // The first key was not pushed out by the second: it is still trusted from the cache.
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(page.read_with_key(&page.key).await, StatusCode::OK);
}

#[tokio::test]
async fn the_page_reads_back_its_session_with_its_principal_and_csrf_token() {
    let page = page(Duration::ZERO).await;
    let session = page.sign_in().await;
    let answer = page
        .send(
            Request::get("/v1/session")
                .header("cookie", format!("lease_session={}", session.cookie))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body["signed_in"], true, "{}", answer.body);
    assert_eq!(answer.body["principal"], "ops");
    assert_eq!(answer.body["csrf"], session.csrf.as_str());
    let without = page
        .send(Request::get("/v1/session").body(Body::empty()).unwrap())
        .await;
    assert_eq!(without.body["signed_in"], false);
}
