//! The network service's rows: the queue loop (claim-next, then complete and claim the next)
//! through `lease serve` over HTTP with keep-alive connections, against the same loop on the
//! library directly, on SQLite with FULL durability, at 1, 16 and 64 workers; and how long a
//! waiting claim takes to be answered once a job is enqueued through the server.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_client::{ClientOptions, HttpLeaseStore};
use lease_domain::{Principal, Scope, Timestamp};
use lease_ports::keys::KeyStore;
use lease_ports::{LeaseStore, QueueName};
use lease_server::{ServiceConfig, ServiceStore};
use lease_sqlite::{SqliteLeaseStore, Synchronous};

use crate::harness::{Caller, Plan, Row, Run, jobs_row, next_complete_loop, summarize};

/// Serves `store` on a loopback port inside `runtime`; an admin key and its URL.
fn serve(runtime: &tokio::runtime::Runtime, store: &SqliteLeaseStore) -> (String, String) {
    // The service's clock runs from 1 s as the workers' terms do (`next_complete_loop`).
    let origin = Instant::now();
    serve_with(
        runtime,
        store,
        Arc::new(move || Timestamp::new(1.0 + origin.elapsed().as_secs_f64()).expect("finite")),
    )
}

/// [`serve`] with the service deciding by `clock`.
pub(crate) fn serve_with(
    runtime: &tokio::runtime::Runtime,
    store: &SqliteLeaseStore,
    clock: lease_server::Clock,
) -> (String, String) {
    let made = lease_server::secrets::new_key().expect("random");
    let service: Arc<dyn ServiceStore> = Arc::new(store.clone());
    runtime.block_on(async {
        store
            .add_key(&made.record(
                Principal::new("bench").expect("principal"),
                Scope::Admin,
                Timestamp::ZERO,
            ))
            .await
            .expect("key stored")
            .expect("key taken");
    });
    let mut config = ServiceConfig::new(clock);
    config.rate_limit = 0.0;
    let app = lease_server::router(service, config);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    runtime.spawn(async move {
        // As `lease serve` does.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), made.key)
}

/// W tasks each running the queue loop against `store`, until the queue is empty.
fn drive(runtime: &tokio::runtime::Runtime, store: Arc<dyn LeaseStore>, workers: usize) -> Run {
    let start = Instant::now();
    let callers = runtime.block_on(async {
        let tasks: Vec<_> = (0..workers)
            .map(|w| {
                tokio::spawn(next_complete_loop(
                    Arc::clone(&store),
                    QueueName::default(),
                    lease_domain::Owner::new(format!("bench/{w}")).expect("owner"),
                    start,
                ))
            })
            .collect();
        let mut callers: Vec<Caller> = Vec::new();
        for task in tasks {
            callers.push(task.await.expect("task"));
        }
        callers
    });
    Run {
        callers,
        wall: start.elapsed(),
    }
}

pub(crate) fn rows(
    plan: &Plan,
    dir: &Path,
    jobs: u64,
    open: impl Fn(&Path, u64, Synchronous) -> SqliteLeaseStore,
    rows: &mut Vec<Row>,
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for workers in [1, 16, 64] {
        let library = open(&dir.join("api-library.db"), jobs, Synchronous::Full);
        let base = drive(&runtime, Arc::new(library), workers);
        let base_rate = jobs as f64 / base.wall.as_secs_f64().max(1e-9);
        rows.push(Row {
            baseline: None,
            ratio: None,
            ..jobs_row(
                "api baseline: claim-next + complete on the library (async port), FULL, jobs/s"
                    .to_owned(),
                workers,
                jobs,
                &base,
                None,
            )
        });
        let served = open(&dir.join("api-served.db"), jobs, Synchronous::Full);
        let (url, key) = serve(&runtime, &served);
        let client = HttpLeaseStore::new(&url, &key, ClientOptions::default()).expect("client");
        let run = drive(&runtime, Arc::new(client), workers);
        rows.push(Row {
            baseline: Some("the library"),
            ..jobs_row(
                "api: claim-next + complete through lease serve (HTTP keep-alive, writes gathered into settle requests, each completion carrying the next claim), FULL, jobs/s"
                    .to_owned(),
                workers,
                jobs,
                &run,
                Some(base_rate),
            )
        });
    }
    long_poll(plan, dir, &runtime, open, rows);
}

/// A claim waits (`wait` 5 s) on an empty queue; a job is enqueued through the server; how
/// long until the claim's answer arrives.
fn long_poll(
    plan: &Plan,
    dir: &Path,
    runtime: &tokio::runtime::Runtime,
    open: impl Fn(&Path, u64, Synchronous) -> SqliteLeaseStore,
    rows: &mut Vec<Row>,
) {
    let store = open(&dir.join("api-poll.db"), 0, Synchronous::Full);
    let (url, key) = serve(runtime, &store);
    let http = reqwest::Client::new();
    let rounds = if plan.runs == 1 { 5 } else { 50 };
    let mut latencies = Vec::new();
    runtime.block_on(async {
        for n in 0..rounds {
            let claim = {
                let (http, url, key) = (http.clone(), url.clone(), key.clone());
                tokio::spawn(async move {
                    let answer = http
                        .post(format!("{url}/v1/queues/poll/claims"))
                        .bearer_auth(&key)
                        .header("content-type", "application/json")
                        .body(r#"{"ttl": 30, "wait": 5}"#)
                        .send()
                        .await
                        .expect("claim sent");
                    let body = answer.text().await.expect("claim answered");
                    (Instant::now(), body)
                })
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
            let enqueued = Instant::now();
            http.post(format!("{url}/v1/queues/poll/jobs"))
                .bearer_auth(&key)
                .header("content-type", "application/json")
                .body(format!(r#"{{"id": "p{n}"}}"#))
                .send()
                .await
                .expect("enqueued");
            let (answered, body) = claim.await.expect("claim task");
            assert!(body.contains(&format!("\"p{n}\"")), "{body}");
            latencies.push(answered.saturating_duration_since(enqueued));
        }
    });
    let run = Run {
        callers: vec![Caller {
            latencies,
            per_slot: Vec::new(),
        }],
        wall: Duration::from_secs(1),
    };
    rows.push(summarize(
        "api: a waiting claim answered by an enqueue through the server (from the enqueue's send)",
        1,
        0,
        std::slice::from_ref(&run),
        false,
    ));
}
