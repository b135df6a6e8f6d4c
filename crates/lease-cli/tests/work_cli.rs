//! `lease work -- CMD`: any program can be a worker. Each test runs the real binary over a real
//! database with `sh` programs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

fn lease(db: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command.arg("--db").arg(db).env_remove("LEASE_DB");
    command
}

fn json_of(db: &Path, args: &[&str]) -> Value {
    let out = lease(db).args(args).arg("--json").output().unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

fn fresh_db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("work.db");
    assert!(lease(&db).arg("init").output().unwrap().status.success());
    (dir, db)
}

fn work(db: &Path, extra: &[&str], program: &str) -> Output {
    lease(db)
        .args([
            "work", "--queue", "q", "--owner", "w", "--ttl", "5", "--json",
        ])
        .args(extra)
        .args(["--", "sh", "-c", program])
        .output()
        .unwrap()
}

#[test]
fn each_job_runs_the_program_with_its_payload_and_its_fence_and_stdout_completes_it() {
    let (_dir, db) = fresh_db();
    for (job, payload) in [("a", "apple"), ("b", "banana")] {
        json_of(&db, &["enqueue", job, "--queue", "q", "--payload", payload]);
    }
    let out = work(
        &db,
        &["--exit-when-empty"],
        r#"printf '%s fence %s attempt %s: %s' "$LEASE_JOB" "$LEASE_FENCE" "$LEASE_ATTEMPT" "$(cat)""#,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["completed"], 2);
    let progress = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        progress.lines().filter(|l| l.contains("completed")).count(),
        2,
        "{progress}"
    );
    for (job, payload) in [("a", "apple"), ("b", "banana")] {
        let state = json_of(&db, &["state", job]);
        assert_eq!(
            state["result"],
            format!("{job} fence 1 attempt 1: {payload}")
        );
        assert_eq!(state["status"], "done");
    }
}

#[test]
fn a_failing_program_fails_the_job_with_its_last_stderr_lines() {
    let (_dir, db) = fresh_db();
    json_of(
        &db,
        &["enqueue", "j", "--queue", "q", "--max-attempts", "1"],
    );
    let out = work(
        &db,
        &["--max-jobs", "1"],
        "echo starting >&2; echo 'disk on fire' >&2; exit 3",
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["failed"],
        1
    );
    let state = json_of(&db, &["state", "j"]);
    assert_eq!(state["status"], "dead");
    let error = state["error"].as_str().unwrap();
    assert!(
        error.contains("exit status: 3") && error.contains("starting | disk on fire"),
        "{error}"
    );
}

#[test]
fn cancelling_a_running_job_terminates_its_program_and_writes_nothing() {
    let (dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j", "--queue", "q"]);
    let mark = dir.path().join("terminated");
    let program = format!(
        "trap 'echo term > {}; exit 0' TERM; echo started; sleep 30 & wait",
        mark.display()
    );
    let worker = lease(&db)
        .args([
            "work",
            "--queue",
            "q",
            "--owner",
            "w",
            "--ttl",
            "0.6",
            "--max-jobs",
            "1",
            "--json",
        ])
        .args(["--", "sh", "-c", &program])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while json_of(&db, &["state", "j"])["status"] != "running" {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(json_of(&db, &["cancel", "j"]), json!({"ok": true}));
    let out = worker.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["lost"],
        1
    );
    assert_eq!(std::fs::read_to_string(&mark).unwrap().trim(), "term");
    let state = json_of(&db, &["state", "j"]);
    assert_eq!(
        (&state["status"], &state["result"]),
        (&json!("cancelled"), &Value::Null)
    );
}

#[test]
fn ctrl_c_lets_the_running_job_finish_and_stops_claiming() {
    let (_dir, db) = fresh_db();
    for job in ["first", "second"] {
        json_of(&db, &["enqueue", job, "--queue", "q"]);
    }
    let worker = lease(&db)
        .args([
            "work", "--queue", "q", "--owner", "w", "--ttl", "5", "--json",
        ])
        .args(["--", "sh", "-c", "sleep 0.5; echo done"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while json_of(&db, &["state", "first"])["status"] != "running" {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = worker.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = worker.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["completed"],
        1
    );
    assert_eq!(json_of(&db, &["state", "first"])["result"], "done\n");
    assert_eq!(
        json_of(&db, &["state", "second"])["fence"],
        0,
        "claimed after Ctrl-C"
    );
}

#[test]
fn work_refuses_bad_settings_before_touching_the_queue() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j", "--queue", "q"]);
    for (args, named) in [
        (&["--ttl", "0"][..], "ttl"),
        (&["--ttl", "5", "--concurrency", "0"], "concurrency"),
        (&["--ttl", "5", "--grace", "-1"], "grace"),
    ] {
        let out = lease(&db)
            .args(["work", "--queue", "q", "--owner", "w"])
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(named),
            "{args:?}"
        );
    }
    let out = lease(&db)
        .args(["work", "--queue", "q", "--owner", "w", "--ttl", "5"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing program is a usage error"
    );
    assert_eq!(json_of(&db, &["state", "j"])["fence"], 0);
}
