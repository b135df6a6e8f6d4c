//! Scheduling and flow control through the API, on the memory store and on SQLite, with a
//! clock the test moves: pausing and resuming a queue, its concurrency limit and default
//! timeout, schedules made, read, fired once and removed, a re-run of a finished job, and a
//! running job's progress (a fenced write that a stale holder cannot make).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use lease_domain::{Principal, Scope, Timestamp};
use lease_ports::memory::MemoryLeaseStore;
use lease_server::{ServiceConfig, ServiceStore, router, secrets};
use serde_json::{Value, json};

use crate::support;
use support::{Answer, TestClock, send};

struct Service {
    app: axum::Router,
    time: TestClock,
    worker: String,
    admin: String,
    _dir: Option<tempfile::TempDir>,
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

async fn service_over(store: Arc<dyn ServiceStore>, dir: Option<tempfile::TempDir>) -> Service {
    let time = TestClock::at(1_000_000.0);
    let mut config = ServiceConfig::new(time.clock());
    config.poll_interval = std::time::Duration::from_millis(20);
    Service {
        worker: key(store.as_ref(), "ci", Scope::Worker).await,
        admin: key(store.as_ref(), "ops", Scope::Admin).await,
        app: router(store, config),
        time,
        _dir: dir,
    }
}

/// One service over each store.
async fn services() -> Vec<Service> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = lease_sqlite::SqliteLeaseStore::open(dir.path().join("control.db")).unwrap();
    vec![
        service_over(Arc::new(MemoryLeaseStore::new()), None).await,
        service_over(Arc::new(sqlite), Some(dir)).await,
    ]
}

impl Service {
    async fn call(
        &self,
        method: Method,
        path: &str,
        key: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {key}"));
        if let Some(token) = token {
            request = request.header("lease-token", token);
        }
        let body = match body {
            Some(body) => {
                request = request.header("content-type", "application/json");
                Body::from(body.to_string())
            }
            None => Body::empty(),
        };
        send(&self.app, request.body(body).unwrap()).await
    }

    async fn post(&self, path: &str, key: &str, body: Value) -> Answer {
        self.call(Method::POST, path, key, None, Some(body)).await
    }

    async fn get(&self, path: &str) -> Answer {
        self.call(Method::GET, path, &self.worker, None, None).await
    }

    async fn enqueue(&self, queue: &str, body: Value) -> Answer {
        self.post(&format!("/v1/queues/{queue}/jobs"), &self.worker, body)
            .await
    }

    /// The leases one claim of up to `max` jobs got.
    async fn claim(&self, queue: &str, max: u32) -> Vec<Value> {
        let answer = self
            .post(
                &format!("/v1/queues/{queue}/claims"),
                &self.worker,
                json!({"ttl": 60, "owner": "ci/w", "limit": max}),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        answer.body["leases"].as_array().unwrap().clone()
    }

    async fn complete(&self, lease: &Value, result: &str) -> Answer {
        let id = lease["id"].as_str().unwrap();
        self.call(
            Method::POST,
            &format!("/v1/jobs/{id}/complete"),
            &self.worker,
            lease["lease_token"].as_str(),
            Some(json!({"fence": lease["fence"], "result": result})),
        )
        .await
    }
}

fn assert_problem(answer: &Answer, status: StatusCode, reason: &str, says: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    assert_eq!(answer.headers["content-type"], "application/problem+json");
    assert_eq!(answer.body["reason"], reason, "{}", answer.body);
    let detail = answer.body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(says), "{detail:?} does not say {says:?}");
}

#[tokio::test]
async fn a_paused_queue_leases_nothing_until_it_is_resumed_or_its_pause_ends() {
    for s in services().await {
        s.enqueue("mail", json!({"id": "a"})).await;
        s.enqueue("mail", json!({"id": "b"})).await;
        let running = s.claim("mail", 1).await;
        assert_eq!(running.len(), 1);
        let worker_pause = s.post("/v1/queues/mail/pause", &s.worker, json!({})).await;
        assert_problem(&worker_pause, StatusCode::FORBIDDEN, "forbidden", "");
        let paused = s.post("/v1/queues/mail/pause", &s.admin, json!({})).await;
        assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
        assert_eq!(paused.body["paused"], true);
        assert!(s.claim("mail", 5).await.is_empty(), "a paused queue leased");
        // Enqueueing still works, and the running lease is untouched: it completes.
        assert_eq!(
            s.enqueue("mail", json!({"id": "c"})).await.status,
            StatusCode::CREATED
        );
        assert_eq!(s.complete(&running[0], "done").await.status, StatusCode::OK);
        let queues = s.get("/v1/queues").await;
        assert_eq!(queues.body["queues"][0]["queue"], "mail");
        assert_eq!(queues.body["queues"][0]["paused"], true);
        let resumed = s.post("/v1/queues/mail/resume", &s.admin, json!({})).await;
        assert_eq!(resumed.body["paused"], false, "{}", resumed.body);
        assert_eq!(s.claim("mail", 5).await.len(), 2);
        // A pause until a time ends by itself.
        s.enqueue("sms", json!({"id": "d"})).await;
        let until = s
            .post(
                "/v1/queues/sms/pause",
                &s.admin,
                json!({"until": 1_000_100}),
            )
            .await;
        assert_eq!(until.body["paused_until"], 1_000_100.0, "{}", until.body);
        assert!(s.claim("sms", 1).await.is_empty());
        s.time.set(1_000_100.0);
        assert_eq!(s.claim("sms", 1).await.len(), 1);
        let bad = s
            .post("/v1/queues/sms/pause", &s.admin, json!({"until": "soon"}))
            .await;
        assert_problem(&bad, StatusCode::UNPROCESSABLE_ENTITY, "invalid", "until");
    }
}

#[tokio::test]
async fn a_claim_gets_no_more_than_the_queue_limit_leaves_and_each_lease_its_timeout() {
    for s in services().await {
        for id in ["a", "b", "c", "d"] {
            s.enqueue("q", json!({"id": id})).await;
        }
        s.enqueue("q", json!({"id": "e", "timeout": 5})).await;
        let limits = s
            .call(
                Method::PUT,
                "/v1/queues/q/limits",
                &s.admin,
                None,
                Some(json!({"concurrency": 2, "timeout": 30})),
            )
            .await;
        assert_eq!(limits.status, StatusCode::OK, "{}", limits.body);
        assert_eq!(
            (&limits.body["concurrency"], &limits.body["timeout"]),
            (&json!(2), &json!(30.0))
        );
        let first = s.claim("q", 5).await;
        assert_eq!(first.len(), 2, "a claim for 5 got more than the limit of 2");
        assert!(first.iter().all(|l| l["timeout"] == 30.0), "{first:?}");
        assert!(s.claim("q", 5).await.is_empty(), "past the limit");
        s.complete(&first[0], "ok").await;
        let next = s.claim("q", 5).await;
        assert_eq!(next.len(), 1);
        // Removing the limit frees the rest; a job's own timeout wins over its queue's.
        let free = s
            .call(
                Method::PUT,
                "/v1/queues/q/limits",
                &s.admin,
                None,
                Some(json!({"concurrency": 0})),
            )
            .await;
        assert_eq!(free.body["concurrency"], Value::Null, "{}", free.body);
        let rest = s.claim("q", 5).await;
        assert_eq!(rest.len(), 2);
        let e = rest.iter().find(|l| l["id"] == "e").expect("e is leased");
        assert_eq!(e["timeout"], 5.0);
        let both = s
            .call(
                Method::PUT,
                "/v1/queues/q/limits",
                &s.admin,
                None,
                Some(json!({"timeout": 3, "no_timeout": true})),
            )
            .await;
        assert_problem(
            &both,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            "not both",
        );
    }
}

#[tokio::test]
async fn a_schedule_is_checked_made_listed_fired_once_per_tick_and_removed() {
    for s in services().await {
        let put = |body: Value| {
            let s = &s;
            async move {
                s.call(
                    Method::PUT,
                    "/v1/schedules/nightly",
                    &s.admin,
                    None,
                    Some(body),
                )
                .await
            }
        };
        let bad_cron = put(json!({"cron": "61 * * * *", "queue": "reports"})).await;
        assert_problem(
            &bad_cron,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            "cron",
        );
        let bad_zone =
            put(json!({"cron": "0 3 * * *", "zone": "Mars/Olympus", "queue": "r"})).await;
        assert_problem(
            &bad_zone,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            "zone",
        );
        let by_worker = s
            .call(
                Method::PUT,
                "/v1/schedules/nightly",
                &s.worker,
                None,
                Some(json!({"cron": "0 3 * * *", "queue": "reports"})),
            )
            .await;
        assert_problem(&by_worker, StatusCode::FORBIDDEN, "forbidden", "");
        assert_eq!(s.get("/v1/schedules").await.body["schedules"], json!([]));
        let made = put(
            json!({"cron": "0 3 * * *", "zone": "Europe/Paris", "queue": "reports",
            "payload": "p", "catch_up": "all", "catch_up_max": 3}),
        )
        .await;
        assert_eq!(made.status, StatusCode::OK, "{}", made.body);
        assert_eq!(made.body["version"], 1);
        assert_eq!(made.body["catch_up"], "all:3");
        // 1,000,000 s is 1970-01-12T13:46:40Z; 03:00 in Paris (UTC+1 in January) is 02:00Z.
        let tick = 1_044_000.0;
        assert_eq!(made.body["next_tick"], tick, "{}", made.body);
        let listed = s.get("/v1/schedules").await;
        assert_eq!(listed.body["schedules"][0]["name"], "nightly");
        let fire = json!({"version": 1, "last_tick": null, "tick": tick,
            "jobs": [{"id": "nightly@1970-01-13T02:00:00Z", "tick": tick}]});
        let fired = s
            .post("/v1/schedules/nightly/fire", &s.admin, fire.clone())
            .await;
        assert_eq!(fired.body, json!({"fired": true, "inserted": [true]}));
        let again = s.post("/v1/schedules/nightly/fire", &s.admin, fire).await;
        assert_eq!(again.body, json!({"fired": false, "inserted": []}));
        let job = s.get("/v1/jobs/nightly%401970-01-13T02%3A00%3A00Z").await;
        assert_eq!(
            (
                &job.body["queue"],
                &job.body["payload"],
                &job.body["status"]
            ),
            (&json!("reports"), &json!("p"), &json!("pending"))
        );
        let listed = s.get("/v1/schedules").await;
        assert_eq!(listed.body["schedules"][0]["last_tick"], tick);
        let removed = s
            .call(
                Method::DELETE,
                "/v1/schedules/nightly",
                &s.admin,
                None,
                None,
            )
            .await;
        assert_eq!(removed.body, json!({"removed": true}));
        let twice = s
            .call(
                Method::DELETE,
                "/v1/schedules/nightly",
                &s.admin,
                None,
                None,
            )
            .await;
        assert_eq!(twice.body, json!({"removed": false}));
        assert_eq!(job.status, StatusCode::OK);
        let bad_name = s
            .call(
                Method::PUT,
                "/v1/schedules/a%40b",
                &s.admin,
                None,
                Some(json!({"cron": "@daily", "queue": "r"})),
            )
            .await;
        assert_problem(&bad_name, StatusCode::UNPROCESSABLE_ENTITY, "invalid", "");
    }
}

#[tokio::test]
async fn an_admin_runs_a_schedule_by_hand_once_a_second_and_its_ticks_stay() {
    for s in services().await {
        let missing = s
            .post("/v1/schedules/nightly/run", &s.admin, json!({}))
            .await;
        assert_problem(
            &missing,
            StatusCode::NOT_FOUND,
            "not_found",
            "no such schedule",
        );
        let made = s
            .call(
                Method::PUT,
                "/v1/schedules/nightly",
                &s.admin,
                None,
                Some(json!({"cron": "0 3 * * *", "queue": "reports", "payload": "p"})),
            )
            .await;
        assert_eq!(made.status, StatusCode::OK, "{}", made.body);
        let by_worker = s
            .post("/v1/schedules/nightly/run", &s.worker, json!({}))
            .await;
        assert_problem(&by_worker, StatusCode::FORBIDDEN, "forbidden", "");
        // 1,000,000 s is 1970-01-12T13:46:40Z.
        let ran = s
            .post("/v1/schedules/nightly/run", &s.admin, json!({}))
            .await;
        assert_eq!(
            ran.body,
            json!({"schedule": "nightly", "id": "nightly@run-1970-01-12T13:46:40Z",
                "queue": "reports", "inserted": true})
        );
        s.time.set(1_000_000.5);
        let again = s
            .post("/v1/schedules/nightly/run", &s.admin, json!({}))
            .await;
        assert_eq!(again.body["inserted"], false, "{}", again.body);
        s.time.set(1_000_001.0);
        let next = s
            .post("/v1/schedules/nightly/run", &s.admin, json!({}))
            .await;
        assert_eq!(
            (&next.body["id"], &next.body["inserted"]),
            (&json!("nightly@run-1970-01-12T13:46:41Z"), &json!(true))
        );
        let job = s
            .get("/v1/jobs/nightly%40run-1970-01-12T13%3A46%3A40Z")
            .await;
        assert_eq!(
            (
                &job.body["queue"],
                &job.body["payload"],
                &job.body["status"]
            ),
            (&json!("reports"), &json!("p"), &json!("pending"))
        );
        let listed = s.get("/v1/schedules").await;
        assert_eq!(
            (
                &listed.body["schedules"][0]["version"],
                &listed.body["schedules"][0]["last_tick"]
            ),
            (&json!(1), &Value::Null),
            "a run by hand changed the schedule"
        );
    }
}

#[tokio::test]
async fn a_finished_job_runs_again_only_when_asked_and_a_pending_one_is_never_touched() {
    for s in services().await {
        s.enqueue("q", json!({"id": "r", "payload": "one"})).await;
        let lease = s.claim("q", 1).await.remove(0);
        s.complete(&lease, "first").await;
        let plain = s.enqueue("q", json!({"id": "r", "payload": "two"})).await;
        assert_eq!(plain.body, json!({"inserted": false}));
        let rerun = s
            .enqueue(
                "q",
                json!({"id": "r", "payload": "two", "replace": "finished"}),
            )
            .await;
        assert_eq!(rerun.status, StatusCode::CREATED, "{}", rerun.body);
        let job = s.get("/v1/jobs/r").await.body;
        assert_eq!(
            (
                &job["status"],
                &job["result"],
                &job["attempts"],
                &job["payload"]
            ),
            (&json!("pending"), &json!("first"), &json!(0), &json!("two"))
        );
        // Pending now: another re-run changes nothing.
        let pending = s
            .enqueue(
                "q",
                json!({"id": "r", "payload": "three", "replace": "finished"}),
            )
            .await;
        assert_eq!(pending.body, json!({"inserted": false}));
        let lease = s.claim("q", 1).await.remove(0);
        assert!(
            lease["fence"].as_u64() > Some(1),
            "the fence went on: {lease}"
        );
        let bad = s.enqueue("q", json!({"id": "r", "replace": "all"})).await;
        assert_problem(&bad, StatusCode::UNPROCESSABLE_ENTITY, "invalid", "replace");
    }
}

#[tokio::test]
async fn progress_is_a_fenced_write_that_renews_and_a_new_claim_clears() {
    for s in services().await {
        s.enqueue("q", json!({"id": "p"})).await;
        let a = s.claim("q", 1).await.remove(0);
        let write = |lease: &Value, text: &str| {
            let s = &s;
            let (token, body) = (
                lease["lease_token"].as_str().unwrap().to_owned(),
                json!({"fence": lease["fence"], "ttl": 60, "progress": text}),
            );
            async move {
                s.call(
                    Method::POST,
                    "/v1/jobs/p/progress",
                    &s.worker,
                    Some(&token),
                    Some(body),
                )
                .await
            }
        };
        let stored = write(&a, "3 of 10").await;
        assert_eq!(stored.status, StatusCode::OK, "{}", stored.body);
        assert_eq!(stored.body["until"], 1_000_060.0);
        assert_eq!(s.get("/v1/jobs/p").await.body["progress"], "3 of 10");
        // A's lease runs out and B claims: the progress is cleared and A's is refused.
        s.time.set(1_000_061.0);
        let b = s.claim("q", 1).await.remove(0);
        assert_eq!(s.get("/v1/jobs/p").await.body["progress"], Value::Null);
        let late = write(&a, "9 of 10").await;
        assert_problem(&late, StatusCode::CONFLICT, "stale", "");
        assert_eq!(s.get("/v1/jobs/p").await.body["progress"], Value::Null);
        let long = write(&b, &"x".repeat(257)).await;
        assert_problem(
            &long,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            "progress",
        );
        assert_eq!(write(&b, "1 of 10").await.status, StatusCode::OK);
        assert_eq!(s.get("/v1/jobs/p").await.body["progress"], "1 of 10");
    }
}

/// Groups through the API: `"group"` on an enqueue (one and a batch), `PUT .../limits` with
/// `per_group` and `ordered` as one change, `GET .../limits`, each lease and job view saying
/// its group, a claim that leases one job of each group, and a bad group refused naming it
/// with nothing stored; a debounced enqueue answered `inserted: false`.
#[tokio::test]
async fn groups_are_enqueued_limited_and_shown_through_the_api() {
    for s in services().await {
        for (id, group) in [("a1", "acct-a"), ("a2", "acct-a"), ("b1", "acct-b")] {
            let made = s.enqueue("g", json!({"id": id, "group": group})).await;
            assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
        }
        let batch = s
            .post(
                "/v1/queues/g/jobs/batch",
                &s.worker,
                json!({"jobs": [{"id": "b2", "group": "acct-b"}, {"id": "free"}]}),
            )
            .await;
        assert!(batch.status.is_success(), "{}", batch.body);
        let set = s
            .call(
                Method::PUT,
                "/v1/queues/g/limits",
                &s.admin,
                None,
                Some(json!({"per_group": 1, "ordered": true})),
            )
            .await;
        assert_eq!(set.status, StatusCode::OK, "{}", set.body);
        let read = s.get("/v1/queues/g/limits").await;
        assert_eq!(read.status, StatusCode::OK, "{}", read.body);
        assert_eq!(
            (
                &read.body["per_group"],
                &read.body["ordered"],
                &read.body["concurrency"]
            ),
            (&json!(1), &json!(true), &Value::Null)
        );
        let leases = s.claim("g", 10).await;
        let got: Vec<(&str, &Value)> = leases
            .iter()
            .map(|l| (l["id"].as_str().unwrap(), &l["group"]))
            .collect();
        assert_eq!(
            got,
            [
                ("a1", &json!("acct-a")),
                ("b1", &json!("acct-b")),
                ("free", &Value::Null)
            ]
        );
        assert!(
            s.claim("g", 10).await.is_empty(),
            "a group ran two jobs at once"
        );
        let job = s.get("/v1/jobs/a2").await;
        assert_eq!(job.body["group"], "acct-a", "{}", job.body);
        let empty = s.enqueue("g", json!({"id": "x", "group": ""})).await;
        assert_problem(&empty, StatusCode::UNPROCESSABLE_ENTITY, "invalid", "group");
        assert_eq!(s.get("/v1/jobs/x").await.status, StatusCode::NOT_FOUND);
        let first = s
            .enqueue("d", json!({"id": "d", "debounce": 60, "payload": "one"}))
            .await;
        assert_eq!(first.body["inserted"], true, "{}", first.body);
        let again = s
            .enqueue("d", json!({"id": "d", "debounce": 60, "payload": "two"}))
            .await;
        assert_eq!(again.body["inserted"], false, "{}", again.body);
        assert_eq!(s.get("/v1/jobs/d").await.body["payload"], "two");
    }
}

/// Rates through the API: `PUT .../limits` with `rate` and `rate_per_group` (shown by
/// `GET .../limits` as `N/PERIOD`), a claim that gets no more than the rate and then an empty
/// answer with `throttled_until` and `Retry-After`, `GET .../throttle`, a long poll that
/// waits for the window to open and takes the job, `none` removing a rate, and bad rates
/// refused naming the field with nothing changed.
#[tokio::test]
async fn a_rate_is_set_kept_to_said_when_it_opens_and_waited_for_through_the_api() {
    for s in services().await {
        for i in 0..5 {
            let made = s.enqueue("r", json!({"id": format!("r{i}")})).await;
            assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
        }
        let limits = |body: Value| {
            s.call(
                Method::PUT,
                "/v1/queues/r/limits",
                &s.admin,
                None,
                Some(body),
            )
        };
        for (bad, says) in [
            ("0/1s", "count"),
            ("5/0s", "more than 0"),
            ("five/1s", "whole number"),
            ("5", "N/PERIOD"),
            ("5/1d", "unit"),
        ] {
            let refused = limits(json!({ "rate": bad, "per_group": 1 })).await;
            assert_problem(&refused, StatusCode::UNPROCESSABLE_ENTITY, "invalid", says);
            assert!(refused.body["detail"].as_str().unwrap().contains("`rate`"));
        }
        let unchanged = s.get("/v1/queues/r/limits").await;
        assert_eq!(
            (&unchanged.body["rate"], &unchanged.body["per_group"]),
            (&Value::Null, &Value::Null),
            "a refused change changed nothing"
        );
        let set = limits(json!({"rate": "2/1m", "rate_per_group": "1/1s"})).await;
        assert_eq!(set.status, StatusCode::OK, "{}", set.body);
        assert_eq!(
            (&set.body["rate"], &set.body["rate_per_group"]),
            (&json!("2/1m"), &json!("1/1s"))
        );
        assert_eq!(s.claim("r", 5).await.len(), 2);
        let empty = s
            .post(
                "/v1/queues/r/claims",
                &s.worker,
                json!({"ttl": 60, "owner": "ci/w", "limit": 5}),
            )
            .await;
        assert_eq!(empty.status, StatusCode::OK, "{}", empty.body);
        assert_eq!(empty.body["leases"], json!([]));
        assert_eq!(empty.body["throttled_until"], json!(1_000_060.0));
        assert_eq!(empty.headers["retry-after"], "60");
        let throttle = s.get("/v1/queues/r/throttle").await;
        assert_eq!(throttle.status, StatusCode::OK, "{}", throttle.body);
        assert_eq!(
            throttle.body,
            json!({"queue": "r", "until": 1_000_060.0, "groups": []})
        );
        // A long poll started before the window opens takes a job once it does.
        s.time.set(1_000_059.5);
        let poll = s.post(
            "/v1/queues/r/claims",
            &s.worker,
            json!({"ttl": 60, "owner": "ci/w", "limit": 5, "wait": 20}),
        );
        let open = async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            s.time.set(1_000_060.5);
        };
        let (polled, ()) = tokio::join!(poll, open);
        assert_eq!(polled.status, StatusCode::OK, "{}", polled.body);
        assert_eq!(
            polled.body["leases"].as_array().map(Vec::len),
            Some(2),
            "the poll took the window's two places once it opened: {}",
            polled.body
        );
        assert!(polled.body.get("throttled_until").is_none());
        let removed = limits(json!({"rate": "none"})).await;
        assert_eq!(removed.body["rate"], Value::Null, "{}", removed.body);
        // The last job, and the first two, whose leases of 60 s ended at 1_000_060.
        assert_eq!(s.claim("r", 5).await.len(), 3);
    }
}
