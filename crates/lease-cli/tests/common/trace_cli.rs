//! Stories the command-line tests run on each store: `lease enqueue` and `enqueue-many` keep
//! the trace context of `TRACEPARENT` and `TRACESTATE` (the producer's span), `state --json`
//! shows it, and a malformed one is ignored with one warning (a broken tracer upstream never
//! stops work); `lease work` without an exporter still hands its program the job's context.

use std::process::{Command, Output};

use serde_json::Value;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn lease(db: &str, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .arg("--db")
        .arg(db)
        .env_remove("LEASE_DB")
        .env_remove("TRACEPARENT")
        .env_remove("TRACESTATE")
        .envs(env.iter().copied());
    command
}

fn state(db: &str, job: &str) -> Value {
    let out = lease(db, &[])
        .args(["state", job, "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ok(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn enqueue_keeps_the_trace_context_of_its_environment(db: &str) {
    let traced = [("TRACEPARENT", PARENT), ("TRACESTATE", "vendor=1")];
    ok(&lease(db, &traced).args(["enqueue", "t1"]).output().unwrap());
    let t1 = state(db, "t1");
    assert_eq!(
        (t1["traceparent"].as_str(), t1["tracestate"].as_str()),
        (Some(PARENT), Some("vendor=1"))
    );
    ok(&lease(db, &[]).args(["enqueue", "plain"]).output().unwrap());
    assert_eq!(state(db, "plain")["traceparent"], Value::Null);
    // Every job of a batch gets it.
    let mut many = lease(db, &[("TRACEPARENT", PARENT)]);
    let out = crate::stdin::fed(many.args(["enqueue-many"]), b"m1\nm2\n");
    ok(&out);
    for job in ["m1", "m2"] {
        assert_eq!(state(db, job)["traceparent"], PARENT, "{job}");
    }
    // A malformed one is ignored with one warning naming it, and the job is enqueued without
    // a context, as W3C Trace Context has a receiver do.
    let zeros = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    for (job, env) in [
        (
            "broken",
            [("TRACEPARENT", zeros), ("TRACESTATE", "vendor=1")],
        ),
        (
            "garbled",
            [("TRACEPARENT", "not-a-trace"), ("TRACESTATE", "")],
        ),
    ] {
        let out = lease(db, &env).args(["enqueue", job]).output().unwrap();
        ok(&out);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(said.lines().count(), 1, "one warning: {said}");
        assert!(
            said.contains("warning") && said.contains("TRACEPARENT") && said.contains("ignored"),
            "{said}"
        );
        let stored = state(db, job);
        assert_eq!(stored["status"], "pending", "{job} is enqueued");
        assert_eq!(stored["traceparent"], Value::Null, "{job}");
    }
    let out = crate::stdin::fed(
        lease(db, &[("TRACEPARENT", zeros)]).args(["enqueue-many"]),
        b"m3\n",
    );
    ok(&out);
    assert_eq!(state(db, "m3")["traceparent"], Value::Null);
    // A good TRACEPARENT keeps its place beside a malformed TRACESTATE, which is dropped.
    let out = lease(
        db,
        &[("TRACEPARENT", PARENT), ("TRACESTATE", "caf\u{e9}=1")],
    )
    .args(["enqueue", "halfway"])
    .output()
    .unwrap();
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("TRACESTATE"));
    let halfway = state(db, "halfway");
    assert_eq!(
        (halfway["traceparent"].as_str(), &halfway["tracestate"]),
        (Some(PARENT), &Value::Null)
    );
}

/// `lease work` without `--otlp-endpoint` hands each program the job's own `TRACEPARENT` and
/// `TRACESTATE` (propagation does not depend on export), never the context `lease work` was
/// started with; a job enqueued without one runs without one.
pub fn a_program_gets_its_jobs_trace_context_without_an_exporter(db: &str) {
    let traced = [("TRACEPARENT", PARENT), ("TRACESTATE", "vendor=1")];
    ok(&lease(db, &traced)
        .args(["enqueue", "traced", "--queue", "tw"])
        .output()
        .unwrap());
    ok(&lease(db, &[])
        .args(["enqueue", "untraced", "--queue", "tw"])
        .output()
        .unwrap());
    let ambient = "00-11111111111111111111111111111111-2222222222222222-01";
    let out = lease(db, &[("TRACEPARENT", ambient)])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .args([
            "work",
            "--queue",
            "tw",
            "--owner",
            "w",
            "--ttl",
            "60",
            "--exit-when-empty",
            "--",
        ])
        .args([
            "sh",
            "-c",
            r#"echo "$LEASE_JOB ${TRACEPARENT:-none} ${TRACESTATE:-none}""#,
        ])
        .output()
        .unwrap();
    ok(&out);
    for (job, expected) in [
        ("traced", format!("traced {PARENT} vendor=1\n")),
        ("untraced", "untraced none none\n".to_owned()),
    ] {
        assert_eq!(state(db, job)["result"], expected.as_str(), "{job}");
    }
}
