//! Observability through the binary: `--audit` and `lease audit` (the pinned JSON shape),
//! `stats --prometheus`, `-v` logging, and `lease work --metrics ADDR` serving /metrics.

use crate::reaped;
use reaped::Reaped;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn lease(db: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .arg("--db")
        .arg(db)
        .env_remove("LEASE_DB")
        .env_remove("RUST_LOG")
        .env_remove("LEASE_AUDIT");
    command
}

fn run(db: &Path, args: &[&str]) -> Output {
    lease(db).args(args).output().unwrap()
}

fn json_of(db: &Path, args: &[&str]) -> Value {
    let out = lease(db).args(args).arg("--json").output().unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn refused_writes_are_audited_with_audit_on_and_shown_in_the_pinned_shape() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    assert!(run(&db, &["init"]).status.success());
    assert!(run(&db, &["enqueue", "j"]).status.success());
    json_of(
        &db,
        &["claim", "j", "--owner", "A", "--ttl", "10", "--now", "100"],
    );
    json_of(
        &db,
        &["claim", "j", "--owner", "B", "--ttl", "10", "--now", "111"],
    );
    // Without --audit a refusal leaves no row.
    let quiet = run(
        &db,
        &[
            "complete", "j", "--owner", "A", "--fence", "1", "--now", "112", "--result", "x",
        ],
    );
    assert_eq!(quiet.status.code(), Some(3));
    assert_eq!(json_of(&db, &["audit"])["refusals"], serde_json::json!([]));
    // With it, each refusal is a row.
    let stale = run(
        &db,
        &[
            "--audit", "renew", "j", "--owner", "B", "--fence", "1", "--ttl", "5", "--now", "113",
        ],
    );
    assert_eq!(stale.status.code(), Some(3));
    let late = run(
        &db,
        &[
            "--audit", "complete", "j", "--owner", "B", "--fence", "2", "--now", "125.5",
            "--result", "y",
        ],
    );
    assert_eq!(late.status.code(), Some(3));
    let audit = json_of(&db, &["audit"]);
    let refusals = audit["refusals"].as_array().unwrap();
    assert_eq!(refusals.len(), 2, "{audit}");
    let keys: Vec<&str> = refusals[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "time",
            "job",
            "owner",
            "operation",
            "presented_fence",
            "current_fence",
            "reason",
            "late_by"
        ]
    );
    assert_eq!(
        (
            &refusals[0]["operation"],
            &refusals[0]["presented_fence"],
            &refusals[0]["current_fence"],
            &refusals[0]["reason"],
            &refusals[0]["late_by"]
        ),
        (
            &Value::from("renew"),
            &Value::from(1),
            &Value::from(2),
            &Value::from("stale"),
            &Value::Null
        )
    );
    assert_eq!(
        (&refusals[1]["reason"], &refusals[1]["late_by"]),
        (&Value::from("expired"), &Value::from(4.5))
    );
    // Filters: by job, and by time.
    assert_eq!(
        json_of(&db, &["audit", "--job", "other"])["refusals"],
        serde_json::json!([])
    );
    // The rows at or after the second refusal's time (by the host's wall clock, which may
    // step back between two processes, so the count is derived from the times shown).
    let since = refusals[1]["time"].as_f64().unwrap();
    let expected: Vec<&Value> = refusals
        .iter()
        .filter(|r| r["time"].as_f64().unwrap() >= since)
        .collect();
    let filtered = json_of(&db, &["audit", "--since", &since.to_string()]);
    let filtered: Vec<&Value> = filtered["refusals"].as_array().unwrap().iter().collect();
    assert_eq!(filtered, expected);
    assert!(filtered.contains(&&refusals[1]));
    let human = run(&db, &["audit"]);
    assert!(String::from_utf8_lossy(&human.stdout).contains("expired"));
}

/// Every kind of holder write, refused through the CLI with `--audit`, is a row that `lease
/// audit` reads back under its own name, as JSON and as text.
fn every_refused_holder_write_is_audited_through_the_cli(db: &str) {
    let lease = |args: &[&str]| run(Path::new(db), args);
    assert!(lease(&["init"]).status.success());
    assert!(lease(&["enqueue", "j"]).status.success());
    assert!(
        lease(&["claim", "j", "--owner", "A", "--ttl", "10", "--now", "100"])
            .status
            .success()
    );
    assert!(
        lease(&["claim", "j", "--owner", "B", "--ttl", "100", "--now", "111"])
            .status
            .success()
    );
    let stale = ["--owner", "A", "--fence", "1", "--now", "112"];
    let writes: [(&str, &[&str]); 6] = [
        ("renew", &["--ttl", "5"]),
        ("progress", &["--value", "3 of 4"]),
        ("complete", &["--result", "late"]),
        ("release", &[]),
        ("fail", &["--error", "late"]),
        ("hold-group", &["--until", "4102444800"]),
    ];
    for (write, extra) in writes {
        let mut args = vec!["--audit", write, "j"];
        args.extend(stale);
        if write == "release" {
            // release takes no time: it is judged by the fence alone.
            args.truncate(args.len() - 2);
        }
        args.extend(extra);
        let out = lease(&args);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{write} was not refused: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = lease(&["audit", "--json"]);
    let audit: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let shapes: Vec<(String, String)> = audit["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["operation"].as_str().unwrap().to_owned(),
                r["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = writes
        .iter()
        // The trail names each write as the domain does (`hold_group` for `hold-group`).
        .map(|(w, _)| (w.replace('-', "_"), "stale".to_owned()))
        .collect();
    assert_eq!(shapes, expected);
    let text = lease(&["audit"]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    for (write, _) in writes {
        let write = write.replace('-', "_");
        assert!(text.contains(&write), "{write} missing from:\n{text}");
    }
}

#[test]
fn every_refused_holder_write_is_audited_through_the_cli_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("every.db");
    every_refused_holder_write_is_audited_through_the_cli(db.to_str().unwrap());
}

#[test]
fn every_refused_holder_write_is_audited_through_the_cli_on_postgres() {
    let db = lease_postgres::ScratchDatabase::create();
    every_refused_holder_write_is_audited_through_the_cli(db.url());
}

#[test]
fn stats_prints_prometheus_text_and_v_logs_refusals_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    assert!(run(&db, &["init"]).status.success());
    assert!(
        run(&db, &["enqueue", "a", "--queue", "mail"])
            .status
            .success()
    );
    assert!(run(&db, &["enqueue", "b"]).status.success());
    json_of(
        &db,
        &[
            "claim",
            "b",
            "--owner",
            "w",
            "--ttl",
            "1000000000000",
            "--now",
            "1",
        ],
    );
    let out = run(&db, &["stats", "--prometheus"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("# HELP lease_jobs "), "{text}");
    assert!(text.contains("# TYPE lease_jobs gauge\n"));
    assert!(
        text.contains("lease_jobs{queue=\"mail\",status=\"pending\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("lease_jobs{queue=\"default\",status=\"running\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("lease_jobs{queue=\"default\",status=\"dead\"} 0\n"),
        "{text}"
    );
    let quiet = run(
        &db,
        &["renew", "b", "--owner", "x", "--fence", "1", "--ttl", "5"],
    );
    assert!(quiet.stderr.is_empty(), "no logging without -v");
    let loud = run(
        &db,
        &[
            "-v", "renew", "b", "--owner", "x", "--fence", "1", "--ttl", "5",
        ],
    );
    let log = String::from_utf8_lossy(&loud.stderr);
    assert!(
        log.contains("renew refused") && log.contains("job=\"b\"") || log.contains("job=b"),
        "{log}"
    );
}

fn get(addr: &str, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    Some(body)
}

#[test]
fn lease_work_serves_its_metrics_while_it_works() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    assert!(run(&db, &["init"]).status.success());
    assert!(run(&db, &["enqueue", "j", "--queue", "q"]).status.success());
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut worker = lease(&db)
        .args([
            "work",
            "--queue",
            "q",
            "--owner",
            "w",
            "--ttl",
            "10",
            "--metrics",
            &addr,
            "--",
            "sh",
            "-c",
            "echo ok",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    while Instant::now() < deadline {
        if let Some(body) = get(&addr, "/metrics") {
            seen = body;
            if seen
                .contains("lease_operations_total{operation=\"complete_and_claim_next\",outcome=\"accepted\"} 1")
            {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    worker.kill().unwrap();
    worker.wait_with_output().unwrap();
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(
        seen.contains(
            "lease_operations_total{operation=\"complete_and_claim_next\",outcome=\"accepted\"} 1"
        ),
        "{seen}"
    );
}
