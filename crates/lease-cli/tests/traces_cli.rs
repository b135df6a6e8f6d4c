//! Traces across the queue, as an operator sees them in a collector: a job enqueued inside
//! a trace (`TRACEPARENT`, or an HTTP enqueue's `traceparent` header) runs under `lease work
//! --otlp-endpoint`, and a real OTLP/HTTP receiver in the test decodes the spans it exports
//! (protobuf): the first attempt is a child of the enqueuing span, a retry starts a trace of
//! its own linked to it, the program's `TRACEPARENT` is its attempt's span, and no span holds
//! the job's payload or result. Through the API, `lease serve --otlp-endpoint` exports its
//! requests too: the enqueue's request span is a child of the caller's span, and the store
//! calls it made are its children.

use crate::reaped;
use reaped::Reaped;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER: &str = "00f067aa0ba902b7";
const SECRET: &str = "payload-that-must-not-be-traced";

/// An OTLP/HTTP receiver: every `POST /v1/traces` body decoded, its spans kept.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    raw: Arc<Mutex<Vec<u8>>>,
}

impl Receiver {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let (kept, bytes) = (Arc::clone(&spans), Arc::clone(&raw));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut length = 0usize;
                let mut path = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    if path.is_empty() {
                        path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(n) = lower.strip_prefix("content-length:") {
                        length = n.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                assert_eq!(path, "/v1/traces", "spans go to the endpoint's /v1/traces");
                bytes.lock().unwrap().extend_from_slice(&body);
                let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        kept.lock().unwrap().extend(scope.spans);
                    }
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
                );
            }
        });
        Self { url, spans, raw }
    }

    fn attempts(&self) -> Vec<Span> {
        let mut attempts: Vec<Span> = self
            .spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.name == "lease.attempt")
            .cloned()
            .collect();
        attempts.sort_by_key(|s| s.start_time_unix_nano);
        attempts
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn lease(db: &str) -> Command {
    let mut command = bare();
    command.arg("--db").arg(db);
    command
}

/// `lease` without a database (a worker of a server), and none of the trace variables of
/// the test's own environment.
fn bare() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .env_remove("LEASE_DB")
        .env_remove("TRACEPARENT")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    command
}

fn ok(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `lease work` (`command`, with its store) exporting to `receiver` until it has run two
/// attempts of one job that fails its first, each attempt's program writing its TRACEPARENT to
/// `seen`.
fn work_two_attempts(mut command: Command, receiver: &Receiver, seen: &Path) -> String {
    let script = format!(
        "echo \"$TRACEPARENT\" >> {}; cat >/dev/null; [ \"$LEASE_ATTEMPT\" -gt 1 ] && echo done-{SECRET}",
        seen.display()
    );
    command
        .args(["work", "--owner", "w", "--ttl", "30", "--max-jobs", "2"])
        .args(["--otlp-endpoint", &receiver.url, "--", "sh", "-c", &script]);
    ok(&command.output().unwrap())
}

/// What both ways of enqueueing must show in the collector.
fn check_the_trace(receiver: &Receiver, seen: &Path) {
    let attempts = receiver.attempts();
    assert_eq!(attempts.len(), 2, "one span per attempt: {attempts:?}");
    let (first, retry) = (&attempts[0], &attempts[1]);
    // The first attempt continues the enqueuing trace, as a child of the producer's span.
    assert_eq!(hex(&first.trace_id), TRACE);
    assert_eq!(hex(&first.parent_span_id), PRODUCER);
    // A retry starts a trace of its own, linked to the enqueuing span.
    assert_ne!(hex(&retry.trace_id), TRACE);
    assert!(retry.parent_span_id.is_empty(), "a retry is a root span");
    assert!(
        retry
            .links
            .iter()
            .any(|l| hex(&l.trace_id) == TRACE && hex(&l.span_id) == PRODUCER),
        "the retry links to the enqueuing span: {:?}",
        retry.links
    );
    // Each program got its attempt's span as TRACEPARENT.
    let given = std::fs::read_to_string(seen).unwrap();
    let given: Vec<&str> = given.lines().collect();
    assert_eq!(
        given,
        [
            format!("00-{}-{}-01", hex(&first.trace_id), hex(&first.span_id)),
            format!("00-{}-{}-01", hex(&retry.trace_id), hex(&retry.span_id)),
        ]
    );
    // The store calls of an attempt are its children.
    let spans = receiver.spans.lock().unwrap().clone();
    assert!(
        spans
            .iter()
            .any(|s| s.name == "lease" && s.parent_span_id == first.span_id),
        "the attempt's store calls are in its trace"
    );
    // No span holds the payload or the result (attributes carry ids, queues, fences).
    let raw = receiver.raw.lock().unwrap().clone();
    assert!(
        !String::from_utf8_lossy(&raw).contains(SECRET),
        "an exported span holds the job's payload or result"
    );
}

#[test]
fn a_job_enqueued_in_a_trace_runs_in_it_and_a_retry_links_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("traced.db");
    let db = db.to_str().unwrap();
    ok(&lease(db).arg("init").output().unwrap());
    let traceparent = format!("00-{TRACE}-{PRODUCER}-01");
    ok(&lease(db)
        .args([
            "enqueue",
            "report",
            "--max-attempts",
            "2",
            "--payload",
            SECRET,
        ])
        .env("TRACEPARENT", &traceparent)
        .output()
        .unwrap());
    let receiver = Receiver::start();
    let seen = dir.path().join("seen");
    work_two_attempts(lease(db), &receiver, &seen);
    check_the_trace(&receiver, &seen);
}

#[test]
fn an_http_enqueue_s_trace_reaches_a_worker_of_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("served.db");
    let db = db.to_str().unwrap();
    ok(&lease(db).arg("init").output().unwrap());
    let made = ok(&lease(db)
        .args(["keys", "create", "ops", "--scope", "admin", "--json"])
        .output()
        .unwrap());
    let key: serde_json::Value = serde_json::from_str(&made).unwrap();
    let key = key["key"].as_str().unwrap().to_owned();
    let receiver = Receiver::start();
    let mut server = lease(db)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--otlp-endpoint", &receiver.url])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    let mut said = BufReader::new(server.stderr.take().unwrap());
    let url = loop {
        let mut line = String::new();
        assert!(said.read_line(&mut line).unwrap() > 0, "lease serve ended");
        if let Some(rest) = line.strip_prefix("lease: serving ") {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    // A producer's HTTP enqueue inside its trace: the W3C header.
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let body = format!("{{\"id\": \"report\", \"max_attempts\": 2, \"payload\": \"{SECRET}\"}}");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST /v1/queues/default/jobs HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {key}\r\n\
         content-type: application/json\r\ntraceparent: 00-{TRACE}-{PRODUCER}-01\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let seen = dir.path().join("seen");
    let mut worker = bare();
    worker.args(["--server", &url]).env("LEASE_API_KEY", &key);
    work_two_attempts(worker, &receiver, &seen);
    // A clean stop sends the server's spans that are left.
    let stopped = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    assert!(server.wait_with_output().unwrap().status.success());
    check_the_trace(&receiver, &seen);
    // The server's span of the enqueue continues the caller's trace, with its store call in it.
    let spans = receiver.spans.lock().unwrap().clone();
    let enqueue = spans
        .iter()
        .find(|s| s.name == "POST /v1/queues/{queue}/jobs")
        .unwrap_or_else(|| panic!("no span of the enqueue request: {spans:?}"));
    assert_eq!(hex(&enqueue.trace_id), TRACE);
    assert_eq!(hex(&enqueue.parent_span_id), PRODUCER);
    let attribute = |span: &Span, key: &str| {
        span.attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.clone())
            .and_then(|v| v.value)
    };
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    assert_eq!(
        attribute(enqueue, "http.response.status_code"),
        Some(Value::IntValue(201))
    );
    assert!(
        spans
            .iter()
            .any(|s| s.name == "lease" && s.parent_span_id == enqueue.span_id),
        "the enqueue's store call is in the request's span"
    );
    // The worker's requests carry its store calls' contexts: the server's span of the second
    // attempt's completion is in the retry's trace, under the worker's store call.
    let retry = &receiver.attempts()[1];
    // (The first attempt's failure is a request of the same route, in the first attempt's
    // trace.)
    let complete = spans
        .iter()
        .find(|s| s.name == "POST /v1/leases/settle" && s.trace_id == retry.trace_id)
        .expect("a span of the completion, in the retry's trace");
    let call = spans
        .iter()
        .find(|s| s.span_id == complete.parent_span_id)
        .expect("the completion's parent is exported");
    assert_eq!(
        call.parent_span_id, retry.span_id,
        "a store call of the retry"
    );
    // The claims that granted the job link to the enqueuing span: the first attempt's claim,
    // and the retry's (the completion that carried it, or a claim of its own).
    let linking: Vec<&Span> = spans
        .iter()
        .filter(|s| {
            s.links
                .iter()
                .any(|l| hex(&l.trace_id) == TRACE && hex(&l.span_id) == PRODUCER)
        })
        .filter(|s| s.name != "lease.attempt")
        .collect();
    assert!(
        linking
            .iter()
            .any(|s| s.name == "POST /v1/queues/{queue}/claims"),
        "a claim that granted the job links to its enqueue: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    assert_eq!(
        linking.len(),
        2,
        "one claim per attempt links to the enqueue: {:?}",
        linking.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
}
