//! `lease serve` and `lease keys` as an operator runs them: keys printed once and kept only as
//! digests, a server that will not listen publicly without a key, the API over a real socket,
//! secrets kept out of the logs and the database file, and a clean stop on SIGTERM.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use lease_sqlite::testing::WriteLockHolder;
use serde_json::{Value, json};

use support::{Server, fresh_db, key_secret, lease, make_key, try_call};

#[test]
fn a_key_is_printed_once_listed_without_its_secret_and_refused_once_revoked() {
    let (_dir, db) = fresh_db();
    let made = make_key(&db, "ci", "worker");
    let key = made["key"].as_str().unwrap();
    assert!(key.starts_with(&format!("lk_{}_", made["id"].as_str().unwrap())));
    assert_eq!(
        (made["principal"].clone(), made["scope"].clone()),
        (json!("ci"), json!("worker"))
    );
    let listed = lease(&db, &["keys", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["keys"][0]["id"], made["id"]);
    assert!(
        !listed.to_string().contains(&key[20..]),
        "no secret in the list"
    );
    // A third live key for one principal is refused; rotation keeps two.
    make_key(&db, "ci", "worker");
    let third = lease(&db, &["keys", "create", "ci", "--scope", "worker"]);
    assert_eq!(third.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&third.stderr).contains("already holds 2 live keys"));
    for (args, says) in [
        (
            vec!["keys", "create", "CI", "--scope", "worker"],
            "principal",
        ),
        (vec!["keys", "create", "ci", "--scope", "root"], "--scope"),
    ] {
        let out = lease(&db, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{args:?}"
        );
    }
    let server = Server::start(&db, &[], &[]);
    let auth = format!("Bearer {key}");
    assert_eq!(
        server
            .call("GET", "/v1/stats", &[("Authorization", &auth)], "")
            .0,
        200
    );
    let revoked = lease(
        &db,
        &["keys", "revoke", made["id"].as_str().unwrap(), "--json"],
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&revoked.stdout).unwrap(),
        json!({"ok": true})
    );
    // Every server rereads a key within its key cache (1 s).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(
        server
            .call("GET", "/v1/stats", &[("Authorization", &auth)], "")
            .0,
        401
    );
    let missing = lease(&db, &["keys", "revoke", "ffff"]);
    assert_eq!(missing.status.code(), Some(3));
}

#[test]
fn without_a_key_the_server_listens_on_loopback_only_and_says_so() {
    let (_dir, db) = fresh_db();
    let public = lease(&db, &["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(public.status.code(), Some(1));
    let said = String::from_utf8_lossy(&public.stderr);
    assert!(
        said.contains("no API key exists") && said.contains("lease keys create"),
        "{said}"
    );
    let server = Server::start(&db, &[], &[]);
    assert!(server.log.lock().unwrap().contains("loopback only"));
    let (status, body) = server.call("GET", "/healthz", &[], "");
    assert_eq!((status, body), (200, json!({"ok": true})));
    let (status, body) = server.call("GET", "/v1/stats", &[], "");
    assert_eq!(
        (status, body["reason"].clone()),
        (401, json!("unauthorized"))
    );
}

#[test]
fn the_stale_worker_story_over_http_keeps_the_new_result_and_no_secret_reaches_the_logs_or_the_file()
 {
    let (_dir, db) = fresh_db();
    let worker = key_secret(&db, "ci", "worker");
    let viewer = key_secret(&db, "eye", "viewer");
    let server = Server::start(&db, &["--client-clock"], &[("RUST_LOG", "trace")]);
    let w = format!("Bearer {worker}");
    let auth = [("Authorization", w.as_str())];
    let post = |path: &str, token: Option<&str>, body: Value| {
        let mut headers = auth.to_vec();
        if let Some(token) = token {
            headers.push(("Lease-Token", token));
        }
        server.call("POST", path, &headers, &body.to_string())
    };
    assert_eq!(post("/v1/queues/q/jobs", None, json!({"id": "j"})).0, 201);
    let (_, a) = post(
        "/v1/queues/q/claims",
        None,
        json!({"ttl": 10, "now": 100, "owner": "ci/a"}),
    );
    let a = &a["leases"][0];
    let (_, b) = post(
        "/v1/queues/q/claims",
        None,
        json!({"ttl": 10, "now": 200, "owner": "ci/b"}),
    );
    let b = &b["leases"][0];
    assert_eq!(
        (a["fence"].clone(), b["fence"].clone()),
        (json!(1), json!(2))
    );
    let token_a = a["lease_token"].as_str().unwrap().to_owned();
    let token_b = b["lease_token"].as_str().unwrap().to_owned();
    // A's late renew and complete, with its own token and with wrong ones.
    let (status, body) = post(
        "/v1/jobs/j/renew",
        Some(&token_a),
        json!({"fence": 1, "ttl": 10, "now": 201}),
    );
    assert_eq!((status, body["reason"].clone()), (409, json!("stale")));
    assert_eq!(
        (
            body["presented_fence"].clone(),
            body["current_fence"].clone()
        ),
        (json!(1), json!(2))
    );
    let (status, _) = post(
        "/v1/jobs/j/complete",
        Some(&token_a),
        json!({"fence": 1, "result": "A", "now": 201}),
    );
    assert_eq!(status, 409);
    let (status, _) = post(
        "/v1/jobs/j/complete",
        Some("lst_guess"),
        json!({"fence": 2, "result": "A", "now": 201}),
    );
    assert_eq!(status, 403);
    let (status, body) = post(
        "/v1/jobs/j/complete",
        Some(&token_b),
        json!({"fence": 2, "result": "B", "now": 202}),
    );
    assert_eq!(
        (status, body),
        (200, json!({"ok": true, "result_fence": 2}))
    );
    let v = format!("Bearer {viewer}");
    let (_, job) = server.call("GET", "/v1/jobs/j", &[("Authorization", &v)], "");
    assert_eq!(
        (job["result"].clone(), job["result_fence"].clone()),
        (json!("B"), json!(2))
    );
    // The process's metrics, for a viewer key: the store's operations and the refusals.
    let (status, metrics) = server.call("GET", "/metrics", &[("Authorization", &v)], "");
    let metrics = metrics.as_str().unwrap_or_default().to_owned();
    assert_eq!(status, 200);
    assert!(
        metrics.contains("lease_operations_total")
            && metrics.contains("lease_server_bad_lease_tokens_total"),
        "{metrics}"
    );
    assert_eq!(server.call("GET", "/metrics", &[], "").0, 401);
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "a clean stop on SIGTERM: {log}");
    assert!(
        log.contains("request"),
        "the trace level logged requests: {log}"
    );
    let mut file = std::fs::read(&db).unwrap();
    for extra in ["-wal", "-shm"] {
        let mut name = db.clone().into_os_string();
        name.push(extra);
        if let Ok(bytes) = std::fs::read(PathBuf::from(name)) {
            file.extend(bytes);
        }
    }
    for secret in [&worker, &viewer, &token_a, &token_b] {
        let tail = &secret[secret.len() - 32..];
        assert!(!log.contains(tail), "a secret reached the log");
        assert!(
            !file.windows(tail.len()).any(|w| w == tail.as_bytes()),
            "a secret reached the database file"
        );
    }
}

#[test]
fn metrics_show_each_queue_s_pause_limit_and_timeout_and_a_queue_set_free_again_reads_free() {
    let (_dir, db) = fresh_db();
    let admin = key_secret(&db, "ops", "admin");
    let server = Server::start(&db, &[], &[]);
    let a = format!("Bearer {admin}");
    let auth = [("Authorization", a.as_str())];
    let scrape = || {
        let (status, text) = server.call("GET", "/metrics", &auth, "");
        assert_eq!(status, 200);
        text.as_str().unwrap_or_default().to_owned()
    };
    let sms_limits = |body: Value| {
        server
            .call("PUT", "/v1/queues/sms/limits", &auth, &body.to_string())
            .0
    };
    assert!(
        !scrape().contains("lease_queue_paused"),
        "no queue has settings yet"
    );
    assert_eq!(
        server.call("POST", "/v1/queues/mail/pause", &auth, "{}").0,
        200
    );
    assert_eq!(sms_limits(json!({"concurrency": 3, "timeout": 2.5})), 200);
    let text = scrape();
    for line in [
        "lease_queue_paused{queue=\"mail\"} 1",
        "lease_queue_paused{queue=\"sms\"} 0",
        "lease_queue_concurrency_limit{queue=\"sms\"} 3",
        "lease_queue_timeout_seconds{queue=\"sms\"} 2.5",
        "lease_queue_concurrency_limit{queue=\"mail\"} 0",
    ] {
        assert!(text.contains(line), "no {line:?} in {text}");
    }
    // Resumed and freed: the settings are gone from the store, and the gauges read free.
    assert_eq!(
        server.call("POST", "/v1/queues/mail/resume", &auth, "{}").0,
        200
    );
    assert_eq!(
        sms_limits(json!({"concurrency": 0, "no_timeout": true})),
        200
    );
    let text = scrape();
    for line in [
        "lease_queue_paused{queue=\"mail\"} 0",
        "lease_queue_concurrency_limit{queue=\"sms\"} 0",
        "lease_queue_timeout_seconds{queue=\"sms\"} 0",
    ] {
        assert!(text.contains(line), "no {line:?} in {text}");
    }
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn a_worker_machine_needs_only_the_binary_a_url_and_a_key() {
    let (dir, db) = fresh_db();
    let key = key_secret(&db, "ci", "worker");
    let server = Server::start(&db, &["--audit"], &[]);
    let url = format!("http://{}", server.addr);
    // No --db anywhere below, and the working directory holds no database.
    let remote = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lease"))
            .args(args)
            .current_dir(dir.path().join(".."))
            .env_remove("LEASE_DB")
            .env("LEASE_SERVER", &url)
            .env("LEASE_API_KEY", &key)
            .output()
            .unwrap()
    };
    for n in 1..=3 {
        let out = remote(&[
            "enqueue",
            &format!("mail/{n}"),
            "--queue",
            "mail",
            "--payload",
            "hi",
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = remote(&[
        "work",
        "--queue",
        "mail",
        "--owner",
        "ci/host-1",
        "--ttl",
        "10",
        "--exit-when-empty",
        "--",
        "sh",
        "-c",
        "printf 'sent %s with fence %s' \"$LEASE_JOB\" \"$LEASE_FENCE\"",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let state = remote(&["state", "mail/2", "--json"]);
    let state: Value = serde_json::from_slice(&state.stdout).unwrap();
    assert_eq!(state["result"], "sent mail/2 with fence 1");
    assert_eq!(
        (state["status"].clone(), state["owner"].clone()),
        (json!("done"), json!("ci/host-1"))
    );
    // A late write with an old fence is refused, and the server's audit trail shows it.
    let late = remote(&[
        "complete",
        "mail/1",
        "--owner",
        "ci/host-1",
        "--fence",
        "0",
        "--result",
        "late",
    ]);
    assert_eq!(
        late.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&late.stderr)
    );
    let audit = remote(&["audit", "--json"]);
    assert_eq!(
        audit.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&audit.stderr)
    );
    let audit: Value = serde_json::from_slice(&audit.stdout).unwrap();
    let rows = audit["refusals"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{audit}");
    assert_eq!(
        (
            rows[0]["job"].clone(),
            rows[0]["reason"].clone(),
            rows[0]["current_fence"].clone()
        ),
        (json!("mail/1"), json!("stale"), json!(1))
    );
    // Outside its namespace the key is refused, by name; database commands need --db.
    let out = remote(&[
        "claim-next",
        "--queue",
        "mail",
        "--owner",
        "cd",
        "--ttl",
        "5",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("refused this key: this key (principal ci) may act only as ci or ci/..."),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = remote(&["keys", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give --db, not --server"));
    let no_key = Command::new(env!("CARGO_BIN_EXE_lease"))
        .args(["--server", &url, "stats"])
        .env_remove("LEASE_API_KEY")
        .output()
        .unwrap();
    assert_eq!(no_key.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&no_key.stderr).contains("--server needs an API key"));
}

#[test]
fn after_kill_9_under_load_every_acknowledged_lease_survives_and_its_token_still_works() {
    let (_dir, db) = fresh_db();
    let key = key_secret(&db, "ci", "worker");
    let auth = format!("Bearer {key}");
    let server = Server::start(&db, &[], &[]);
    let addr = server.addr.clone();
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for t in 0..4 {
        let (addr, auth, acknowledged, stop) = (
            addr.clone(),
            auth.clone(),
            acknowledged.clone(),
            stop.clone(),
        );
        load.push(std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                let id = format!("t{t}-{n}");
                let call = |path: &str, body: Value| {
                    try_call(
                        &addr,
                        "POST",
                        path,
                        &[("Authorization", &auth)],
                        &body.to_string(),
                    )
                };
                if call("/v1/queues/q/jobs", json!({"id": id})).is_none() {
                    continue;
                }
                if let Some((200, body)) = call(
                    "/v1/queues/q/claims",
                    json!({"ttl": 600, "owner": format!("ci/{t}")}),
                ) {
                    for lease in body["leases"].as_array().unwrap() {
                        acknowledged.lock().unwrap().push((
                            lease["id"].as_str().unwrap().to_owned(),
                            lease["fence"].as_u64().unwrap(),
                            lease["lease_token"].as_str().unwrap().to_owned(),
                        ));
                    }
                }
            }
        }));
    }
    std::thread::sleep(std::time::Duration::from_millis(700));
    let mut server = server;
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for thread in load {
        thread.join().unwrap();
    }
    let leases = acknowledged.lock().unwrap().clone();
    assert!(
        leases.len() >= 5,
        "the load was light: {} leases",
        leases.len()
    );
    let restarted = Server::start(&db, &[], &[]);
    let mut seen = std::collections::HashSet::new();
    for (id, fence, token) in &leases {
        assert!(
            seen.insert((id.clone(), *fence)),
            "fence {fence} of {id} handed out twice"
        );
        let (status, body) = restarted.call(
            "POST",
            &format!("/v1/jobs/{id}/renew"),
            &[("Authorization", &auth), ("Lease-Token", token)],
            &json!({"fence": fence, "ttl": 600}).to_string(),
        );
        assert_eq!(status, 200, "{id} fence {fence}: {body}");
    }
}

#[test]
fn two_servers_over_one_postgres_database_are_one_service() {
    let pg = lease_postgres::ScratchDatabase::create();
    let db = Path::new(pg.url());
    assert_eq!(lease(db, &["init"]).status.code(), Some(0));
    let key = key_secret(db, "ci", "worker");
    let auth = format!("Bearer {key}");
    // Waiting claims look again only once a minute here: only the store's signal can
    // answer them within their wait.
    let slow = ["--poll-interval", "60"];
    let (one, two) = (Server::start(db, &slow, &[]), Server::start(db, &slow, &[]));
    // A waiting claim on one server is answered by a job enqueued through the other.
    let waiting = {
        let (addr, auth) = (two.addr.clone(), auth.clone());
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let answer = try_call(
                &addr,
                "POST",
                "/v1/queues/wake/claims",
                &[("Authorization", &auth)],
                &json!({"ttl": 30, "wait": 10}).to_string(),
            );
            (answer, started.elapsed())
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (status, _) = one.call(
        "POST",
        "/v1/queues/wake/jobs",
        &[("Authorization", &auth)],
        &json!({"id": "elsewhere"}).to_string(),
    );
    assert_eq!(status, 201);
    let (answer, _) = waiting.join().unwrap();
    let (status, body) = answer.expect("the waiting claim is answered");
    assert_eq!(status, 200);
    assert_eq!(
        body["leases"][0]["id"], "elsewhere",
        "woken by the signal: {body}"
    );
    // One job, enqueued through one server, answers one of the claims waiting on both.
    let mut waiters = Vec::new();
    for n in 0..10 {
        let addr = if n % 2 == 0 {
            one.addr.clone()
        } else {
            two.addr.clone()
        };
        let auth = auth.clone();
        waiters.push(std::thread::spawn(move || {
            try_call(
                &addr,
                "POST",
                "/v1/queues/one/claims",
                &[("Authorization", &auth)],
                &json!({"ttl": 30, "wait": 3}).to_string(),
            )
        }));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (status, _) = two.call(
        "POST",
        "/v1/queues/one/jobs",
        &[("Authorization", &auth)],
        &json!({"id": "single"}).to_string(),
    );
    assert_eq!(status, 201);
    let answered = waiters
        .into_iter()
        .map(|w| w.join().unwrap().expect("answered"))
        .filter(|(_, body)| !body["leases"].as_array().unwrap().is_empty())
        .count();
    assert_eq!(answered, 1);
    // Claims through both servers at once never get one fence twice.
    for n in 0..40 {
        let server = if n % 2 == 0 { &one } else { &two };
        let (status, _) = server.call(
            "POST",
            "/v1/queues/race/jobs",
            &[("Authorization", &auth)],
            &json!({"id": format!("r{n}")}).to_string(),
        );
        assert_eq!(status, 201);
    }
    let mut racers = Vec::new();
    for t in 0..6 {
        let addr = if t % 2 == 0 {
            one.addr.clone()
        } else {
            two.addr.clone()
        };
        let auth = auth.clone();
        racers.push(std::thread::spawn(move || {
            let mut got = Vec::new();
            loop {
                let (status, body) = try_call(
                    &addr,
                    "POST",
                    "/v1/queues/race/claims",
                    &[("Authorization", &auth)],
                    &json!({"ttl": 30, "limit": 3, "owner": format!("ci/{t}")}).to_string(),
                )
                .expect("the server answers");
                assert_eq!(status, 200, "{body}");
                let leases = body["leases"].as_array().unwrap().clone();
                if leases.is_empty() {
                    return got;
                }
                for lease in leases {
                    got.push((
                        lease["id"].as_str().unwrap().to_owned(),
                        lease["fence"].as_u64().unwrap(),
                    ));
                }
            }
        }));
    }
    let mut all: Vec<(String, u64)> = racers.into_iter().flat_map(|r| r.join().unwrap()).collect();
    all.sort();
    let total = all.len();
    all.dedup_by(|a, b| a.0 == b.0);
    assert_eq!(
        (total, all.len()),
        (40, 40),
        "each job leased once, by one server"
    );
    assert!(all.iter().all(|(_, fence)| *fence == 1));
}

#[test]
fn over_https_a_worker_trusts_the_servers_ca_and_nothing_else() {
    let (dir, db) = fresh_db();
    let key = key_secret(&db, "ci", "worker");
    let made =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let (cert, pem_key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&pem_key, made.key_pair.serialize_pem()).unwrap();
    let server = Server::start(
        &db,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            pem_key.to_str().unwrap(),
        ],
        &[],
    );
    assert!(server.log.lock().unwrap().contains("serving https://"));
    let url = format!("https://{}", server.addr);
    let remote = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_lease"))
            .args(["--server", &url])
            .args(extra)
            .args(["enqueue", "secure", "--json"])
            .env_remove("LEASE_DB")
            .env_remove("LEASE_CA_CERT")
            .env("LEASE_API_KEY", &key)
            .output()
            .unwrap()
    };
    let trusted = remote(&["--ca-cert", cert.to_str().unwrap()]);
    assert_eq!(
        trusted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&trusted.stdout).unwrap(),
        json!({"inserted": true})
    );
    let untrusted = remote(&[]);
    assert_eq!(untrusted.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&untrusted.stderr)
            .to_lowercase()
            .contains("certificate"),
        "{}",
        String::from_utf8_lossy(&untrusted.stderr)
    );
    // Half a pair is a usage error.
    let half = lease(&db, &["serve", "--tls-cert", cert.to_str().unwrap()]);
    assert_eq!(half.status.code(), Some(2));
}

/// With `--request-timeout 1`, a write that waits on another process's write lock is answered
/// 503 once its second is up (before the fix: only when the lock was given back, or after the
/// long poll's 20 s more), and SIGTERM with such a request in flight ends the server without
/// waiting for the lock.
#[test]
fn lease_serve_answers_a_write_stuck_behind_another_process_s_lock_at_its_timeout_and_drains() {
    let (_dir, db) = fresh_db();
    let key = key_secret(&db, "ops", "admin");
    let server = Server::start(&db, &["--request-timeout", "1"], &[]);
    let auth = format!("Bearer {key}");
    let headers = [("Authorization", auth.as_str())];
    let (status, _) = server.call("POST", "/v1/queues/q/jobs", &headers, r#"{"id": "before"}"#);
    assert_eq!(status, 201);

    let holder = WriteLockHolder::start(&db, std::time::Duration::from_secs(10)).unwrap();
    let asked = std::time::Instant::now();
    let (status, body) = server.call("POST", "/v1/queues/q/jobs", &headers, r#"{"id": "a"}"#);
    let took = asked.elapsed();
    assert_eq!(
        (status, body["reason"].as_str()),
        (503, Some("overloaded")),
        "{body}"
    );
    assert!(
        took < std::time::Duration::from_secs(5),
        "answered after {took:?}, with the lock held for 10 s"
    );

    // A request in flight, then SIGTERM: the drain waits for it only until its timeout.
    let addr = server.addr.clone();
    let in_flight = std::thread::spawn(move || {
        try_call(
            &addr,
            "POST",
            "/v1/queues/q/jobs",
            &[("Authorization", auth.as_str())],
            r#"{"id": "b"}"#,
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    let stopped = server.stop_within(std::time::Duration::from_secs(5));
    let (code, log) = stopped.expect("the server did not stop within 5 s of SIGTERM");
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(
        in_flight.join().unwrap().map(|(status, _)| status),
        Some(503)
    );
    drop(holder);
}

/// Through `--server`, a key the server does not take reads as what happened, not as a broken
/// database: an unknown or revoked key, and a worker key claiming as another principal.
#[test]
fn a_refused_key_through_server_says_what_the_server_refused() {
    let (_dir, db) = fresh_db();
    let made = make_key(&db, "ci", "worker");
    let key = made["key"].as_str().unwrap().to_owned();
    let server = Server::start(&db, &["--key-cache", "0"], &[]);
    let url = format!("http://{}", server.addr);
    let remote = |key: &str, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_lease"))
            .args(args)
            .env_remove("LEASE_DB")
            .env("LEASE_SERVER", &url)
            .env("LEASE_API_KEY", key)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, said) = remote(&key, &["claim-next", "--owner", "other", "--ttl", "30"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("refused this key: this key (principal ci) may act only as ci or ci/..."),
        "{said}"
    );
    lease(&db, &["keys", "revoke", made["id"].as_str().unwrap()]);
    let (code, said) = remote(&key, &["stats"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains(&format!("the server at {url} refused the API key"))
            && said.contains("not known, or was revoked"),
        "{said}"
    );
    for said in [said, remote("lk_0000_nothing", &["stats"]).1] {
        assert!(!said.contains("not a usable lease database"), "{said}");
    }
}

/// Reads `GET /v1/events` until its first `refusals` event, and returns that event's data.
fn first_refusals_event(server: &Server, auth: &str) -> Value {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET /v1/events HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth}\r\n\r\n",
        server.addr
    )
    .unwrap();
    let mut lines = BufReader::new(stream).lines();
    let mut event = String::new();
    loop {
        let line = lines
            .next()
            .expect("the stream goes on until the refusals event")
            .expect("the stream reads");
        if let Some(name) = line.strip_prefix("event: ") {
            event = name.trim().to_owned();
        } else if let Some(data) = line.strip_prefix("data: ")
            && event == "refusals"
        {
            return serde_json::from_str(data).unwrap();
        }
    }
}

/// Every kind of holder write refused over HTTP (a stale fence with its own lease's token, and
/// the current fence with a wrong token) is recorded, and every reader reads the trail back
/// whole: `GET /v1/refusals`, the page's event stream, and `lease audit` through the server.
fn every_refused_holder_write_over_http_is_read_back_by_every_reader(db: &Path) {
    let worker = key_secret(db, "ci", "worker");
    let viewer = key_secret(db, "eye", "viewer");
    let server = Server::start(db, &["--audit"], &[]);
    let w = format!("Bearer {worker}");
    let v = format!("Bearer {viewer}");
    let post = |path: &str, token: Option<&str>, body: Value| {
        let mut headers = vec![("Authorization", w.as_str())];
        if let Some(token) = token {
            headers.push(("Lease-Token", token));
        }
        server.call("POST", path, &headers, &body.to_string())
    };
    assert_eq!(post("/v1/queues/q/jobs", None, json!({"id": "j"})).0, 201);
    let claim = |owner: &str| {
        let (status, body) = post(
            "/v1/queues/q/claims",
            None,
            json!({"ttl": 0.2, "owner": owner}),
        );
        assert_eq!(status, 200, "{body}");
        let lease = &body["leases"][0];
        (
            lease["fence"].as_u64().unwrap(),
            lease["lease_token"].as_str().unwrap().to_owned(),
        )
    };
    let (stale, stale_token) = claim("ci/a");
    std::thread::sleep(std::time::Duration::from_millis(400));
    let (current, _) = {
        let (status, body) = post(
            "/v1/queues/q/claims",
            None,
            json!({"ttl": 600, "owner": "ci/b"}),
        );
        assert_eq!(status, 200, "{body}");
        let lease = &body["leases"][0];
        (
            lease["fence"].as_u64().unwrap(),
            lease["lease_token"].as_str().unwrap().to_owned(),
        )
    };
    let writes = [
        ("renew", json!({"ttl": 5})),
        ("progress", json!({"progress": "3 of 4"})),
        ("complete", json!({"result": "late"})),
        ("release", json!({})),
        ("fail", json!({"error": "late"})),
        ("hold-group", json!({"until": 4_102_444_800.0})),
    ];
    let mut expected = Vec::new();
    for (write, fields) in &writes {
        for (fence, token, status, reason) in [
            (stale, stale_token.as_str(), 409, "stale"),
            (current, stale_token.as_str(), 403, "bad_token"),
        ] {
            let mut body = fields.clone();
            body["fence"] = json!(fence);
            let (got, answer) = post(&format!("/v1/jobs/j/{write}"), Some(token), body);
            assert_eq!(
                (got, answer["reason"].as_str()),
                (status, Some(reason)),
                "{write}: {answer}"
            );
            // The trail names each write as the domain does (`hold_group` for its route).
            expected.push(json!([write.replace('-', "_"), fence, reason]));
        }
    }
    let shape = |rows: &Value| -> Vec<Value> {
        rows["refusals"]
            .as_array()
            .unwrap_or_else(|| panic!("no refusals in {rows}"))
            .iter()
            .map(|r| json!([r["operation"], r["presented_fence"], r["reason"]]))
            .collect()
    };
    let (status, api) = server.call("GET", "/v1/refusals", &[("Authorization", &v)], "");
    assert_eq!(status, 200, "{api}");
    assert_eq!(shape(&api), expected);
    assert_eq!(shape(&first_refusals_event(&server, &v)), expected);
    let cli = Command::new(env!("CARGO_BIN_EXE_lease"))
        .args(["audit", "--json", "--server"])
        .arg(format!("http://{}", server.addr))
        .env("LEASE_API_KEY", &viewer)
        .env_remove("LEASE_DB")
        .output()
        .unwrap();
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(shape(&cli), expected);
}

#[test]
fn every_refused_holder_write_over_http_is_read_back_by_every_reader_on_sqlite() {
    let (_dir, db) = fresh_db();
    every_refused_holder_write_over_http_is_read_back_by_every_reader(&db);
}

#[test]
fn every_refused_holder_write_over_http_is_read_back_by_every_reader_on_postgres() {
    let scratch = lease_postgres::ScratchDatabase::create();
    let db = Path::new(scratch.url());
    assert_eq!(lease(db, &["init"]).status.code(), Some(0));
    every_refused_holder_write_over_http_is_read_back_by_every_reader(db);
}

/// What keep-alive clients got back: answers by status, answers of 429 and 503 without
/// `Retry-After`, connections that broke instead of answering, and answers that closed the
/// connection as they said they would (`Connection: close`).
#[derive(Debug, Default)]
struct Tally {
    answered: std::collections::BTreeMap<u16, usize>,
    without_retry_after: usize,
    broken: usize,
    closed_as_said: usize,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        for (status, n) in other.answered {
            *self.answered.entry(status).or_default() += n;
        }
        self.without_retry_after += other.without_retry_after;
        self.broken += other.broken;
        self.closed_as_said += other.closed_as_said;
    }

    fn total(&self) -> usize {
        self.answered.values().sum()
    }
}

/// One answer on a keep-alive connection: (status, whether it says `Retry-After`, whether it
/// says `Connection: close`), or `None` when the connection broke first.
fn answer_on(reader: &mut std::io::BufReader<std::net::TcpStream>) -> Option<(u16, bool, bool)> {
    use std::io::{BufRead, Read};
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.get(9..12)?.parse().ok()?;
    let (mut length, mut retry_after, mut close) = (0usize, false, false);
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "retry-after" => retry_after = true,
            "connection" => close = value.trim().eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((status, retry_after, close))
}

/// Sends `requests` (path, body) one after another as POSTs on one keep-alive connection,
/// opening a new connection only after an answer that said `Connection: close` or a broken one.
fn keep_alive_client(addr: &str, auth: &str, requests: &[(String, String)]) -> Tally {
    use std::io::Write;
    let connect = || {
        let stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        std::io::BufReader::new(stream)
    };
    let mut tally = Tally::default();
    let mut reader = connect();
    for (path, body) in requests {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {auth}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        // The head and the body in two packets, a moment apart, as many clients send them
        // (Python's http.client does): an answer decided from the head alone then goes out
        // before the body has arrived.
        let stream = reader.get_mut();
        let sent = stream.write_all(head.as_bytes()).and_then(|()| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            stream.write_all(body.as_bytes())
        });
        let answer = sent.ok().and_then(|()| answer_on(&mut reader));
        match answer {
            Some((status, retry_after, close)) => {
                *tally.answered.entry(status).or_default() += 1;
                if matches!(status, 429 | 503) && !retry_after {
                    tally.without_retry_after += 1;
                }
                if close {
                    tally.closed_as_said += 1;
                    reader = connect();
                }
            }
            None => {
                tally.broken += 1;
                reader = connect();
            }
        }
    }
    tally
}

/// Sixteen keep-alive clients, each sending `per_client` requests that cycle through a valid
/// enqueue, an enqueue the document refuses (422) and a body over the server's limit (413).
fn sixteen_keep_alive_clients(server: &Server, key: &str, per_client: usize) -> Tally {
    let auth = format!("Bearer {key}");
    let oversized = format!(r#"{{"id": "big", "payload": "{}"}}"#, "A".repeat(8192));
    let threads: Vec<_> = (0..16)
        .map(|client| {
            let requests: Vec<(String, String)> = (0..per_client)
                .map(|n| match n % 3 {
                    0 => (
                        "/v1/queues/q/jobs".to_owned(),
                        format!(r#"{{"id": "c{client}-{n}"}}"#),
                    ),
                    1 => ("/v1/queues/q/jobs".to_owned(), r#"{"id": ""}"#.to_owned()),
                    _ => ("/v1/queues/q/jobs".to_owned(), oversized.clone()),
                })
                .collect();
            let (addr, auth) = (server.addr.clone(), auth.clone());
            std::thread::spawn(move || keep_alive_client(&addr, &auth, &requests))
        })
        .collect();
    let mut tally = Tally::default();
    for thread in threads {
        tally.add(thread.join().unwrap());
    }
    tally
}

/// Past `--rate-limit` and past `--max-in-flight`, every request of sixteen keep-alive clients
/// is answered on its connection (a 429 or 503 with `Retry-After`, a 413 and a 422 alike), and
/// no connection breaks under an answer.
fn overload_keeps_every_connection_and_answers_every_request(db: &Path) {
    let key = key_secret(db, "ci", "worker");
    let per_client = 60;
    for (flags, overloaded) in [
        (["--rate-limit", "20", "--max-in-flight", "1024"], 429),
        (["--rate-limit", "0", "--max-in-flight", "1"], 503),
    ] {
        let mut args = vec!["--body-limit", "4096"];
        args.extend(flags);
        let server = Server::start(db, &args, &[]);
        let tally = sixteen_keep_alive_clients(&server, &key, per_client);
        assert_eq!(
            (tally.broken, tally.total()),
            (0, 16 * per_client),
            "{flags:?}: every request answered, none broken: {tally:?}"
        );
        assert_eq!(tally.without_retry_after, 0, "{flags:?}: {tally:?}");
        for status in [overloaded, 413] {
            assert!(
                tally.answered.get(&status).is_some_and(|n| *n > 0),
                "{flags:?}: no {status} came, so the test tested nothing: {tally:?}"
            );
        }
        assert!(
            tally
                .answered
                .keys()
                .all(|s| [200, 201, 413, 422, 429, 503].contains(s)),
            "{flags:?}: {tally:?}"
        );
        if overloaded == 429 {
            // Without load shedding every 422 is the document's answer.
            assert!(
                tally.answered.get(&422).is_some_and(|n| *n > 0),
                "{tally:?}"
            );
        }
        assert_eq!(
            tally.closed_as_said, 0,
            "{flags:?}: an answer closed its connection: {tally:?}"
        );
    }
}

#[test]
fn overload_keeps_every_connection_and_answers_every_request_on_sqlite() {
    let (_dir, db) = fresh_db();
    overload_keeps_every_connection_and_answers_every_request(&db);
}

#[test]
fn overload_keeps_every_connection_and_answers_every_request_on_postgres() {
    let scratch = lease_postgres::ScratchDatabase::create();
    let db = Path::new(scratch.url());
    assert_eq!(lease(db, &["init"]).status.code(), Some(0));
    overload_keeps_every_connection_and_answers_every_request(db);
}

/// A request stopped by `--request-timeout` (its write waits on another process's lock) is
/// answered 503 with `Retry-After` on its keep-alive connection, which then carries the next
/// request.
#[test]
fn a_request_past_its_timeout_is_answered_and_its_connection_kept() {
    let (_dir, db) = fresh_db();
    let key = key_secret(&db, "ci", "worker");
    let server = Server::start(
        &db,
        &["--request-timeout", "0.3", "--busy-timeout", "30"],
        &[],
    );
    let holder = WriteLockHolder::start(&db, std::time::Duration::from_secs(30)).unwrap();
    let requests: Vec<(String, String)> = (0..3)
        .map(|n| {
            (
                "/v1/queues/q/jobs".to_owned(),
                format!(r#"{{"id": "t{n}"}}"#),
            )
        })
        .collect();
    let tally = keep_alive_client(&server.addr, &format!("Bearer {key}"), &requests);
    assert_eq!(
        (tally.broken, tally.closed_as_said, tally.answered.get(&503)),
        (0, 0, Some(&3)),
        "{tally:?}"
    );
    assert_eq!(tally.without_retry_after, 0);
    drop(holder);
}
