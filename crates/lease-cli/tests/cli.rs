//! The `lease` binary as a user runs it: exit codes, JSON shapes, bad input and the demo.

use crate::reaped;
use reaped::Reaped;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use tempfile::TempDir;

fn lease(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("LEASE_DB")
        .output()
        .expect("the lease binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs with `--json`, checks the exit code, and parses stdout as exactly one JSON value.
fn json_of(db: &Path, args: &[&str], code: i32) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = lease(db, &all);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: stdout {} stderr {}",
        stdout(&out),
        stderr(&out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&out)))
}

fn fresh_db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lease.db");
    assert_eq!(lease(&db, &["init"]).status.code(), Some(0));
    (dir, db)
}

#[test]
fn the_stale_worker_story_through_the_cli() {
    let (_dir, db) = fresh_db();
    assert_eq!(
        json_of(&db, &["enqueue", "j"], 0),
        json!({"inserted": true})
    );
    assert_eq!(
        json_of(
            &db,
            &["claim", "j", "--owner", "A", "--now", "100", "--ttl", "30"],
            0
        ),
        json!({"fence": 1})
    );
    assert_eq!(
        json_of(
            &db,
            &["claim", "j", "--owner", "B", "--now", "130", "--ttl", "30"],
            0
        ),
        json!({"fence": 2})
    );
    let complete_b = [
        "complete", "j", "--owner", "B", "--fence", "2", "--now", "140", "--result", "by B",
    ];
    assert_eq!(json_of(&db, &complete_b, 0), json!({"ok": true}));
    let complete_a = [
        "complete", "j", "--owner", "A", "--fence", "1", "--now", "141", "--result", "by A",
    ];
    assert_eq!(json_of(&db, &complete_a, 3), json!({"ok": false}));
    let state = json_of(&db, &["state", "j"], 0);
    assert_eq!(
        seed_keys(&state),
        json!({"id": "j", "owner": "B", "until": 160.0, "fence": 2, "result": "by B", "done": true})
    );
    assert_eq!(
        (&state["status"], &state["result_fence"]),
        (&json!("done"), &json!(2))
    );
}

#[test]
fn a_fence_above_the_current_one_is_refused_as_never_issued() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j"], 0);
    json_of(
        &db,
        &["claim", "j", "--owner", "A", "--now", "100", "--ttl", "30"],
        0,
    );
    let ahead = lease(
        &db,
        &[
            "complete", "j", "--owner", "A", "--fence", "2", "--now", "101", "--result", "r",
        ],
    );
    assert_eq!(ahead.status.code(), Some(3));
    assert!(
        stdout(&ahead).contains("fence 2 was never issued; the current fence is 1"),
        "{}",
        stdout(&ahead)
    );
    let behind = lease(
        &db,
        &[
            "renew", "j", "--owner", "A", "--fence", "0", "--now", "101", "--ttl", "5",
        ],
    );
    assert_eq!(behind.status.code(), Some(3));
    assert!(
        stdout(&behind).contains("fence 0 is stale (the current fence is 1)"),
        "{}",
        stdout(&behind)
    );
    assert_eq!(json_of(&db, &["state", "j"], 0)["done"], json!(false));
}

/// The six keys of the seed contract, in order, from a `state --json` answer.
fn seed_keys(state: &Value) -> Value {
    let mut seed = serde_json::Map::new();
    for key in ["id", "owner", "until", "fence", "result", "done"] {
        seed.insert(key.to_owned(), state[key].clone());
    }
    Value::Object(seed)
}

#[test]
fn every_command_prints_its_json_shape_and_exit_code() {
    let (_dir, db) = fresh_db();
    assert_eq!(
        json_of(&db, &["enqueue", "j"], 0),
        json!({"inserted": true})
    );
    assert_eq!(
        json_of(&db, &["enqueue", "j"], 0),
        json!({"inserted": false})
    );
    assert_eq!(json_of(&db, &["state", "missing"], 0), Value::Null);
    assert_eq!(
        json_of(
            &db,
            &[
                "claim", "missing", "--owner", "a", "--now", "0", "--ttl", "5"
            ],
            3
        ),
        json!({"fence": null})
    );
    assert_eq!(
        json_of(
            &db,
            &["claim", "j", "--owner", "a", "--now", "0", "--ttl", "5"],
            0
        ),
        json!({"fence": 1})
    );
    assert_eq!(
        json_of(
            &db,
            &["claim", "j", "--owner", "a", "--now", "1", "--ttl", "5"],
            3
        ),
        json!({"fence": null})
    );
    assert_eq!(
        json_of(
            &db,
            &[
                "renew", "j", "--owner", "a", "--fence", "1", "--now", "4", "--ttl", "5"
            ],
            0
        ),
        json!({"ok": true})
    );
    assert_eq!(
        json_of(
            &db,
            &[
                "renew", "j", "--owner", "a", "--fence", "1", "--now", "9", "--ttl", "5"
            ],
            3
        ),
        json!({"ok": false})
    );
    assert_eq!(
        json_of(&db, &["release", "j", "--owner", "b", "--fence", "1"], 3),
        json!({"ok": false})
    );
    assert_eq!(
        json_of(&db, &["release", "j", "--owner", "a", "--fence", "1"], 0),
        json!({"ok": true})
    );
    let mut state = json_of(&db, &["state", "j", "--now", "100"], 0);
    // The released attempt ends by the store's clock: its end is a time, not pinned here.
    let history = state
        .as_object_mut()
        .unwrap()
        .remove("attempt_history")
        .unwrap();
    let released = &history[0];
    assert_eq!(
        (
            history.as_array().map(Vec::len),
            &released["fence"],
            &released["owner"],
            &released["outcome"],
            &released["started"],
        ),
        (
            Some(1),
            &json!(1),
            &json!("a"),
            &json!("released"),
            &json!(0.0)
        ),
        "{history}"
    );
    assert!(released["ended"].is_f64(), "{history}");
    // Enqueued by the store's clock too: `updated` is a time, not pinned here.
    let updated = state.as_object_mut().unwrap().remove("updated").unwrap();
    assert!(updated.is_f64(), "{updated}");
    assert_eq!(
        state,
        json!({
            "id": "j", "owner": null, "until": 0.0, "fence": 1, "result": null, "done": false,
            "queue": "default", "priority": 0, "run_at": null, "attempts": 0, "max_attempts": 5,
            "status": "pending", "result_fence": null, "error": null, "timeout": null,
            "progress": null, "group": null, "after": [], "on_parent_failure": null,
            "ended": null, "older_attempts": 0, "parents": {}, "checkpoints": {},
            "traceparent": null, "tracestate": null
        })
    );
    let race = [
        "claim-many",
        "j",
        "--owner",
        "x",
        "--owner",
        "y",
        "--owner",
        "z",
        "--now",
        "0",
        "--ttl",
        "5",
    ];
    let fences = json_of(&db, &race, 0)["fences"].as_array().unwrap().clone();
    assert_eq!(
        fences.iter().filter(|f| f.is_u64()).count(),
        1,
        "{fences:?}"
    );
    assert!(fences.contains(&json!(2)));
    assert_eq!(
        json_of(&db, &race, 3),
        json!({"fences": [null, null, null]})
    );
}

#[test]
fn human_output_is_one_sentence() {
    let (_dir, db) = fresh_db();
    let out = lease(&db, &["enqueue", "j"]);
    assert_eq!(stdout(&out), "enqueued job j\n");
    let out = lease(
        &db,
        &["claim", "j", "--owner", "a", "--now", "10", "--ttl", "5"],
    );
    assert_eq!(
        stdout(&out),
        "claimed job j for a: fence 1, lease until 1970-01-01T00:00:15Z (in 5.0 s)\n"
    );
    let out = lease(
        &db,
        &["claim", "j", "--owner", "b", "--now", "11", "--ttl", "5"],
    );
    assert_eq!(
        stdout(&out),
        "not claimed: the job is leased to a until 1970-01-01T00:00:15Z (in 4.0 s)\n"
    );
}

/// People read times as RFC 3339 in UTC with the distance from now; `--json` keeps Unix
/// seconds; every time flag takes either form.
#[test]
fn times_are_shown_for_people_and_read_in_either_form() {
    let (_dir, db) = fresh_db();
    let noon = "2026-12-01T12:00:00Z";
    let noon_unix = 1_796_126_400.0;
    lease(
        &db,
        &["enqueue", "j", "--run-at", "2026-12-01T13:00:00+01:00"],
    );
    assert_eq!(json_of(&db, &["state", "j"], 0)["run_at"], json!(noon_unix));
    let early = lease(
        &db,
        &[
            "claim",
            "j",
            "--owner",
            "a",
            "--now",
            "2026-12-01T11:59:00Z",
            "--ttl",
            "30",
        ],
    );
    assert_eq!(
        stdout(&early),
        "not claimed: the job is not due until 2026-12-01T12:00:00Z (in 60 s)\n"
    );
    let claimed = lease(
        &db,
        &["claim", "j", "--owner", "a", "--now", noon, "--ttl", "29.5"],
    );
    assert_eq!(
        stdout(&claimed),
        "claimed job j for a: fence 1, lease until 2026-12-01T12:00:30Z (in 30 s)\n"
    );
    let state = lease(&db, &["state", "j", "--now", "1796126410"]);
    assert!(
        stdout(&state)
            .starts_with("job j: held by a until 2026-12-01T12:00:30Z (in 20 s), fence 1"),
        "{}",
        stdout(&state)
    );
    let json = json_of(&db, &["state", "j", "--now", noon], 0);
    assert_eq!(json["until"], json!(noon_unix + 29.5));
    let late = lease(
        &db,
        &[
            "complete",
            "j",
            "--owner",
            "a",
            "--fence",
            "1",
            "--now",
            "2026-12-01T12:04:30Z",
            "--result",
            "r",
        ],
    );
    assert_eq!(
        stdout(&late),
        "not completed: the lease expired at 2026-12-01T12:00:30Z (4 min ago)\n"
    );
    let bad = lease(&db, &["state", "j", "--now", "yesterday"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("RFC 3339"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn invalid_values_exit_1_with_a_message_naming_the_problem_and_change_nothing() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j"], 0);
    let before = json_of(&db, &["state", "j"], 0);
    let cases: [(&[&str], &str); 9] = [
        (&["claim", "j", "--owner", "a", "--ttl", "0"], "ttl"),
        (&["claim", "j", "--owner", "a", "--ttl", "-5"], "ttl"),
        (&["claim", "j", "--owner", "a", "--ttl", "nan"], "ttl"),
        (&["claim", "j", "--owner", "a", "--ttl", "inf"], "ttl"),
        (
            &["claim", "j", "--owner", "a", "--now", "nan", "--ttl", "5"],
            "now",
        ),
        (
            &["claim", "j", "--owner", "a", "--now", "-inf", "--ttl", "5"],
            "now",
        ),
        (
            &["renew", "j", "--owner", "a", "--fence", "1", "--ttl", "-1"],
            "ttl",
        ),
        (
            &[
                "complete", "j", "--owner", "a", "--fence", "1", "--now", "inf", "--result", "r",
            ],
            "now",
        ),
        (&["claim", "j", "--owner", "", "--ttl", "5"], "owner"),
    ];
    for (args, named) in cases {
        let out = lease(&db, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(stdout(&out), "", "{args:?}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(named), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert_eq!(json_of(&db, &["state", "j"], 0), before);
}

#[test]
fn usage_errors_exit_2() {
    let (_dir, db) = fresh_db();
    let cases: [&[&str]; 6] = [
        &["claim", "j", "--owner", "a", "--ttl", "5", "--bogus"],
        &["claim", "j", "--owner", "a"],
        &["claim", "j", "--owner", "a", "--ttl", "five"],
        &["renew", "j", "--owner", "a", "--fence", "-1", "--ttl", "5"],
        &["claim-many", "j", "--ttl", "5"],
        &["frobnicate"],
    ];
    for args in cases {
        let out = lease(&db, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{args:?}");
    }
}

#[test]
fn database_problems_exit_1_and_leave_files_alone() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let out = lease(&missing, &["state", "j"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no lease database"),
        "{}",
        stderr(&out)
    );
    assert!(!missing.exists());

    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "not a database, just notes\n".repeat(100)).unwrap();
    let before = std::fs::read(&notes).unwrap();
    for args in [&["init"][..], &["enqueue", "j"]] {
        let out = lease(&notes, args);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains("not an SQLite database"),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(std::fs::read(&notes).unwrap(), before);

    let out = lease(dir.path(), &["init"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("directory"));
}

#[test]
fn the_database_path_comes_from_lease_db_when_no_flag_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("from-env.db");
    let out = Command::new(env!("CARGO_BIN_EXE_lease"))
        .args(["init"])
        .env("LEASE_DB", &db)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(db.exists());
    assert!(!dir.path().join("lease.db").exists());
}

#[test]
fn the_demo_narrates_the_story_and_the_result_survives() {
    let out = Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("demo")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("gets fence 1"), "{text}");
    assert!(text.contains("gets fence 2"), "{text}");
    assert!(text.contains("rejected"), "{text}");
    assert!(text.contains("survived"), "{text}");
    let out = Command::new(env!("CARGO_BIN_EXE_lease"))
        .args(["demo", "--json"])
        .output()
        .unwrap();
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["survived"], json!(true));
}

fn claim_fence_one(db: &Path) {
    json_of(db, &["enqueue", "j"], 0);
    assert_eq!(
        json_of(
            db,
            &["claim", "j", "--owner", "a", "--now", "0", "--ttl", "100"],
            0
        ),
        json!({"fence": 1})
    );
}

#[test]
fn a_result_larger_than_the_argument_limit_comes_from_a_file_or_stdin() {
    let (dir, db) = fresh_db();
    claim_fence_one(&db);
    let big = "r".repeat(300 * 1024);
    let file = dir.path().join("result.txt");
    std::fs::write(&file, &big).unwrap();
    let file_arg = file.display().to_string();
    let args = [
        "complete",
        "j",
        "--owner",
        "a",
        "--fence",
        "1",
        "--now",
        "1",
        "--result-file",
        &file_arg,
    ];
    assert_eq!(json_of(&db, &args, 0), json!({"ok": true}));
    assert_eq!(json_of(&db, &["state", "j"], 0)["result"], big);

    json_of(&db, &["enqueue", "k"], 0);
    json_of(
        &db,
        &["claim", "k", "--owner", "a", "--now", "0", "--ttl", "100"],
        0,
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(&db)
        .args([
            "complete", "k", "--owner", "a", "--fence", "1", "--now", "1",
        ])
        .args(["--result-file", "-", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(big.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&db, &["state", "k"], 0)["result"], big);
}

#[test]
fn an_unreadable_or_non_utf8_result_file_is_an_error_that_changes_nothing() {
    let (dir, db) = fresh_db();
    claim_fence_one(&db);
    let before = json_of(&db, &["state", "j"], 0);
    let binary = dir.path().join("binary");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    for (path, named) in [
        (dir.path().join("missing"), "cannot read"),
        (binary, "is not UTF-8"),
    ] {
        let path = path.display().to_string();
        let args = [
            "complete",
            "j",
            "--owner",
            "a",
            "--fence",
            "1",
            "--result-file",
            &path,
        ];
        let out = lease(&db, &args);
        assert_eq!(out.status.code(), Some(1), "{path}");
        assert!(stderr(&out).contains(named), "{}", stderr(&out));
        assert_eq!(stdout(&out), "");
    }
    let both = [
        "complete",
        "j",
        "--owner",
        "a",
        "--fence",
        "1",
        "--result",
        "x",
        "--result-file",
        "-",
    ];
    assert_eq!(lease(&db, &both).status.code(), Some(2));
    assert_eq!(json_of(&db, &["state", "j"], 0), before);
}

#[test]
fn a_closed_stdout_is_an_error_that_reports_the_outcome_on_stderr() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j"], 0);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(&db)
        .args([
            "claim", "j", "--owner", "a", "--now", "0", "--ttl", "5", "--json",
        ])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("cannot write the answer to stdout")
            && err.contains("accepted")
            && err.contains(r#"{"fence":1}"#),
        "{err}"
    );
    // The claim itself happened; the error only says its answer was lost.
    assert_eq!(json_of(&db, &["state", "j"], 0)["fence"], 1);
}

#[test]
fn an_empty_database_setting_names_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let run = |env: Option<&str>, args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
        command
            .current_dir(dir.path())
            .args(args)
            .env_remove("LEASE_DB");
        if let Some(value) = env {
            command.env("LEASE_DB", value);
        }
        command.output().unwrap()
    };
    let out = run(Some(""), &["state", "j"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("LEASE_DB is set but empty"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("--db"), "{}", stderr(&out));
    // An empty --db is a usage error that names the flag the user did type.
    let out = run(None, &["--db", "", "state", "j"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--db"), "{}", stderr(&out));
    // LEASE_DB names the database when --db is not given.
    let db = dir.path().join("from-env.db");
    let db_text = db.display().to_string();
    assert_eq!(run(Some(&db_text), &["init"]).status.code(), Some(0));
    assert!(db.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn the_busy_timeout_can_be_shortened_by_flag_or_environment() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j"], 0);
    let holder = rusqlite::Connection::open(&db).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let claim = ["claim", "j", "--owner", "a", "--ttl", "5"];
    let started = std::time::Instant::now();
    let out = lease(&db, &[&claim[..], &["--busy-timeout", "0.2"]].concat());
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("locked"), "{}", stderr(&out));
    let out = Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(&db)
        .args(claim)
        .env("LEASE_BUSY_TIMEOUT", "0.2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Both gave up long before the default 30 s; no timing is asserted beyond that.
    assert!(started.elapsed() < std::time::Duration::from_secs(25));
    for bad in ["-1", "nan", "soon"] {
        let out = lease(&db, &[&claim[..], &["--busy-timeout", bad]].concat());
        assert_ne!(out.status.code(), Some(0), "{bad}");
        assert_eq!(stdout(&out), "", "{bad}");
    }
    holder.execute_batch("COMMIT").unwrap();
    assert_eq!(json_of(&db, &["state", "j"], 0)["fence"], 0);
}

#[test]
fn a_foreign_database_is_refused_by_the_cli_and_left_byte_for_byte_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("other.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("PRAGMA application_id = 1234; CREATE TABLE t(x);")
        .unwrap();
    let before = std::fs::read(&db).unwrap();
    for args in [&["state", "j"][..], &["enqueue", "j"], &["init"]] {
        let out = lease(&db, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&out).contains("application_id 0x4d2"),
            "{}",
            stderr(&out)
        );
    }
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_db_path_that_is_not_utf8_is_refused_and_no_file_is_made() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"x\xff\xfe.db"));
    let out = Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(&path)
        .arg("init")
        .env_remove("LEASE_DB")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--db") && stderr.contains("not valid UTF-8"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a file was made"
    );
}
