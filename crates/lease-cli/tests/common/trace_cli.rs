//! One story the command-line tests run on each store: `lease enqueue` and `enqueue-many`
//! keep the trace context of `TRACEPARENT` and `TRACESTATE` (the producer's span), `state
//! --json` shows it, and a bad one is refused naming the variable (exit 1) with nothing stored.

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
    // A bad one is refused, naming the variable and what is wrong, and nothing is stored.
    let zeros = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let out = lease(db, &[("TRACEPARENT", zeros)])
        .args(["enqueue", "refused"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("TRACEPARENT") && said.contains("trace id"),
        "{said}"
    );
    assert_eq!(state(db, "refused"), Value::Null);
}
