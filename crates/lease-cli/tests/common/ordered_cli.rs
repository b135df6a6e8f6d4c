//! One story the command-line tests run on each store: a dead job holds its ordered group,
//! and `lease cancel` of it ends it as cancelled (exit 0), keeping its record, attempts and
//! last error, and frees the group for its next job; a second cancel is refused (exit 3).

use std::process::{Command, Output};

use serde_json::Value;

fn lease(db: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .arg("--db")
        .arg(db)
        .env_remove("LEASE_DB")
        .env_remove("TRACEPARENT");
    command
}

fn run(db: &str, args: &[&str]) -> Output {
    lease(db).args(args).output().unwrap()
}

fn json_of(db: &str, args: &[&str]) -> Value {
    let out = run(db, &[args, &["--json"]].concat());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The ids a `claim-next --limit 5` of queue `seq` leases (exit 3 when none).
fn claimed(db: &str) -> Vec<String> {
    let out = run(
        db,
        &[
            "claim-next",
            "--queue",
            "seq",
            "--owner",
            "w",
            "--ttl",
            "600",
            "--limit",
            "5",
            "--json",
        ],
    );
    let claim: Value = serde_json::from_slice(&out.stdout).unwrap();
    let none = claim["leases"].as_array().is_some_and(Vec::is_empty);
    assert_eq!(out.status.code(), Some(if none { 3 } else { 0 }), "{out:?}");
    claim["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect()
}

pub fn a_dead_job_is_cancelled_keeping_its_error_and_frees_its_ordered_group(db: &str) {
    for id in ["s1", "s2"] {
        json_of(db, &["enqueue", id, "--queue", "seq", "--group", "acct"]);
    }
    json_of(db, &["limit", "seq", "--ordered"]);
    let claim = json_of(
        db,
        &[
            "claim-next",
            "--queue",
            "seq",
            "--owner",
            "w",
            "--ttl",
            "600",
        ],
    );
    let lease = &claim["leases"][0];
    assert_eq!(lease["id"], "s1");
    let fence = lease["fence"].to_string();
    let failed = run(
        db,
        &[
            "fail",
            "s1",
            "--owner",
            "w",
            "--fence",
            &fence,
            "--error",
            "bad invoice",
            "--no-retry",
        ],
    );
    assert!(failed.status.success(), "{failed:?}");
    assert_eq!(json_of(db, &["state", "s1"])["status"], "dead");
    assert!(claimed(db).is_empty(), "the dead s1 holds its group");

    let cancel = run(db, &["cancel", "s1"]);
    assert_eq!(
        cancel.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&cancel.stderr)
    );
    let record = json_of(db, &["state", "s1"]);
    assert_eq!(record["status"], "cancelled");
    assert_eq!(record["error"], "bad invoice", "its last error is kept");
    assert_eq!(record["fence"].to_string(), fence, "its fence is kept");
    assert_eq!(record["attempts"], 1);
    let again = run(db, &["cancel", "s1"]);
    assert_eq!(again.status.code(), Some(3), "{again:?}");
    assert!(String::from_utf8_lossy(&again.stderr).contains("cancelled"));
    assert_eq!(claimed(db), ["s2"], "the group is free again");
    // The cancelled job is listed as cancelled, not purged.
    let cancelled = json_of(db, &["list", "--status", "cancelled"]);
    assert_eq!(cancelled["jobs"][0]["id"], "s1");
}
