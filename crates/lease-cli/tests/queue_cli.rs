//! The queue commands of the `lease` binary, as a user (or a held-out test) drives them: their
//! JSON shapes, exit codes, refusals on stderr, and bad input.

use crate::stdin;

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

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs with `--json`, checks the exit code, and parses stdout as exactly one JSON value.
fn json_of(db: &Path, args: &[&str], code: i32) -> Value {
    let out = lease(db, &[args, &["--json"]].concat());
    assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn fresh_db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    assert_eq!(lease(&db, &["init"]).status.code(), Some(0));
    (dir, db)
}

fn claim_next(db: &Path, queue: &str, owner: &str, now: &str, limit: &str) -> Value {
    let args = [
        "claim-next",
        "--queue",
        queue,
        "--owner",
        owner,
        "--ttl",
        "10",
        "--now",
        now,
        "--limit",
        limit,
    ];
    let out = lease(db, &[&args[..], &["--json"]].concat());
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    let leases = value["leases"].as_array().unwrap();
    let expected = if leases.is_empty() { 3 } else { 0 };
    assert_eq!(out.status.code(), Some(expected), "{}", stderr(&out));
    value
}

#[test]
fn enqueue_with_queue_fields_and_claim_next_in_priority_order() {
    let (dir, db) = fresh_db();
    let enqueue = |args: &[&str]| json_of(&db, &[&["enqueue"][..], args].concat(), 0);
    assert_eq!(
        enqueue(&["low", "--queue", "mail", "--priority", "-1"]),
        json!({"inserted": true})
    );
    enqueue(&["first", "--queue", "mail", "--payload", "hello"]);
    enqueue(&["later", "--queue", "mail", "--run-at", "50"]);
    let binary = dir.path().join("payload.bin");
    std::fs::write(&binary, [0_u8, 159, 146, 150]).unwrap();
    let binary = binary.display().to_string();
    enqueue(&[
        "urgent",
        "--queue",
        "mail",
        "--priority",
        "5",
        "--payload-file",
        &binary,
    ]);
    assert_eq!(
        enqueue(&["first", "--queue", "mail"]),
        json!({"inserted": false})
    );

    let state = json_of(&db, &["state", "later", "--now", "10"], 0);
    assert_eq!(
        (
            &state["queue"],
            &state["run_at"],
            &state["status"],
            &state["max_attempts"]
        ),
        (&json!("mail"), &json!(50.0), &json!("pending"), &json!(5))
    );

    let taken = claim_next(&db, "mail", "w", "10", "10");
    let ids: Vec<&str> = taken["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["urgent", "first", "low"]);
    let urgent = &taken["leases"][0];
    assert_eq!(
        (
            &urgent["fence"],
            &urgent["until"],
            &urgent["attempt"],
            &urgent["payload_base64"]
        ),
        (&json!(1), &json!(20.0), &json!(1), &json!("AJ+Slg=="))
    );
    assert_eq!(taken["leases"][1]["payload"], "hello");
    assert_eq!(
        claim_next(&db, "mail", "w", "11", "10"),
        json!({"leases": []})
    );
    // At 50 the leases of time 10 have expired (a dead worker's jobs are rescued, as attempt 2),
    // and "later" is due.
    let rescued = claim_next(&db, "mail", "v", "50", "10");
    let taken: Vec<(&str, u64)> = rescued["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["id"].as_str().unwrap(), l["attempt"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        taken,
        [("urgent", 2), ("first", 2), ("later", 1), ("low", 2)]
    );
    assert_eq!(
        claim_next(&db, "other", "w", "50", "1"),
        json!({"leases": []})
    );
}

#[test]
fn fail_retries_then_dead_letters_and_retry_revives() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j", "--max-attempts", "2"], 0);
    claim_next(&db, "default", "w", "0", "1");
    let fail = |fence: &str, now: &str, extra: &[&str], code| {
        let args = [
            "fail", "j", "--owner", "w", "--fence", fence, "--error", "boom", "--now", now,
        ];
        json_of(&db, &[&args[..], extra].concat(), code)
    };
    let failed = fail("1", "1", &[], 0);
    assert_eq!(
        (&failed["ok"], &failed["state"]),
        (&json!(true), &json!("pending"))
    );
    let run_at = failed["run_at"].as_f64().unwrap();
    assert!((1.75..=2.0).contains(&run_at), "{run_at}");
    // The failed holder's fence is stale now; a refusal exits 3 and says why on stderr.
    let out = lease(
        &db,
        &[
            "fail", "j", "--owner", "w", "--fence", "1", "--error", "x", "--now", "1.5",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("not the owner"), "{}", stderr(&out));
    claim_next(&db, "default", "w", "3", "1");
    let dead = fail("2", "4", &[], 0);
    assert_eq!(dead, json!({"ok": true, "state": "dead", "run_at": null}));
    let state = json_of(&db, &["state", "j", "--now", "5"], 0);
    assert_eq!(
        (&state["status"], &state["error"], &state["attempts"]),
        (&json!("dead"), &json!("boom"), &json!(2))
    );
    assert_eq!(
        json_of(&db, &["retry", "j", "--now", "6"], 0),
        json!({"ok": true})
    );
    assert_eq!(
        claim_next(&db, "default", "w", "6", "1")["leases"][0]["fence"],
        3
    );
    let dead = fail("3", "7", &["--no-retry"], 0);
    assert_eq!(dead["state"], "dead");
}

#[test]
fn cancel_refuses_the_holder_and_refusals_exit_3_with_the_reason_on_stderr() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j"], 0);
    claim_next(&db, "default", "w", "0", "1");
    assert_eq!(
        json_of(&db, &["cancel", "j", "--now", "1"], 0),
        json!({"ok": true})
    );
    let out = lease(
        &db,
        &[
            "complete", "j", "--owner", "w", "--fence", "1", "--now", "2", "--result", "r",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    let out = lease(&db, &["cancel", "j", "--now", "2", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"ok":false}"#
    );
    assert!(stderr(&out).contains("cancelled"), "{}", stderr(&out));
    let out = lease(&db, &["retry", "missing", "--now", "2"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    let state = json_of(&db, &["state", "j", "--now", "3"], 0);
    assert_eq!(state["status"], "cancelled");
}

/// The columns of a table line, cut where the header's headings start (char positions).
fn columns(header: &str, line: &str) -> Vec<String> {
    let starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| c != ' ' && (i == 0 || header[..i].ends_with(' ')))
        .map(|(i, _)| header[..i].chars().count())
        .collect();
    let chars: Vec<char> = line.chars().collect();
    starts
        .iter()
        .enumerate()
        .map(|(n, &start)| {
            if start > 0 {
                assert_eq!(
                    chars.get(start - 1).copied().unwrap_or(' '),
                    ' ',
                    "a value runs into column {n} of {line:?} (header {header:?})"
                );
            }
            let end = starts
                .get(n + 1)
                .map_or(chars.len(), |&e| e.min(chars.len()));
            chars
                .get(start.min(chars.len())..end)
                .map(|c| c.iter().collect::<String>().trim_end().to_owned())
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn list_lines_each_value_up_under_its_heading_whatever_its_length() {
    let (_dir, db) = fresh_db();
    let long = "report-2026-12-03-for-a-customer-with-a-long-name";
    json_of(&db, &["enqueue", "job-1", "--queue", "mail"], 0);
    json_of(
        &db,
        &[
            "enqueue",
            long,
            "--queue",
            "reports-for-customers",
            "--group",
            "customer-with-a-long-name",
        ],
        0,
    );
    json_of(&db, &["enqueue", "ü-ß", "--queue", "q"], 0);
    json_of(
        &db,
        &[
            "claim", "job-1", "--owner", "w", "--now", "100", "--ttl", "60",
        ],
        0,
    );
    json_of(
        &db,
        &[
            "fail",
            "job-1",
            "--owner",
            "w",
            "--fence",
            "1",
            "--now",
            "101",
            "--error",
            "line one\nline two",
            "--no-retry",
        ],
        0,
    );
    let out = lease(&db, &["list", "--now", "102"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let header = columns(lines[0], lines[0]);
    assert_eq!(
        header,
        [
            "ID", "QUEUE", "GROUP", "STATUS", "FENCE", "ATTEMPTS", "WHEN", "ERROR"
        ]
    );
    let rows: Vec<Vec<String>> = lines[1..].iter().map(|l| columns(lines[0], l)).collect();
    assert_eq!(
        rows,
        [
            vec![
                "job-1",
                "mail",
                "",
                "dead",
                "1",
                "0/5",
                "",
                "\"line one\\nline two\""
            ],
            vec![
                long,
                "reports-for-customers",
                "customer-with-a-long-name",
                "pending",
                "0",
                "0/5",
                "due now",
                ""
            ],
            vec!["ü-ß", "q", "", "pending", "0", "0/5", "due now", ""],
        ]
    );
}

#[test]
fn list_stats_and_purge() {
    let (_dir, db) = fresh_db();
    for job in ["a", "b", "c"] {
        json_of(&db, &["enqueue", job], 0);
    }
    json_of(&db, &["enqueue", "m", "--queue", "mail"], 0);
    json_of(
        &db,
        &["claim", "a", "--owner", "w", "--now", "0", "--ttl", "100"],
        0,
    );
    json_of(
        &db,
        &[
            "complete", "a", "--owner", "w", "--fence", "1", "--now", "1", "--result", "r",
        ],
        0,
    );
    json_of(
        &db,
        &["claim", "b", "--owner", "w", "--now", "0", "--ttl", "100"],
        0,
    );

    let listed = json_of(&db, &["list", "--status", "pending", "--now", "5"], 0);
    let ids: Vec<&str> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c", "m"]);
    let second_page = json_of(
        &db,
        &["list", "--limit", "2", "--after", "b", "--now", "5"],
        0,
    );
    let ids: Vec<&str> = second_page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["c", "m"], "the page after b");
    let mail = json_of(&db, &["list", "--queue", "mail", "--now", "5"], 0);
    assert_eq!(mail["jobs"][0]["queue"], "mail");
    let human = lease(&db, &["list", "--now", "5"]);
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    let lines: Vec<&str> = human.lines().collect();
    assert_eq!(lines.len(), 5, "a header and four jobs: {human}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "ID", "QUEUE", "GROUP", "STATUS", "FENCE", "ATTEMPTS", "WHEN", "ERROR"
        ]
    );
    let b = lines.iter().find(|l| l.starts_with("b ")).unwrap();
    assert!(
        b.contains("running") && b.contains("until 1970-01-01T00:01:40Z (in 95 s)"),
        "{b}"
    );

    let stats = json_of(&db, &["stats", "--now", "5"], 0);
    assert_eq!(
        stats,
        json!({"queues": {
            "default": {"waiting": 0, "pending": 1, "running": 1, "done": 1, "dead": 0, "cancelled": 0},
            "mail": {"waiting": 0, "pending": 1, "running": 0, "done": 0, "dead": 0, "cancelled": 0}
        }, "settings": {}})
    );
    assert_eq!(
        json_of(&db, &["purge", "--before", "1"], 0),
        json!({"purged": 0})
    );
    assert_eq!(
        json_of(&db, &["purge", "--before", "2", "--status", "dead"], 0),
        json!({"purged": 0})
    );
    assert_eq!(
        json_of(&db, &["purge", "--before", "2", "--status", "done"], 0),
        json!({"purged": 1})
    );
    assert_eq!(json_of(&db, &["state", "a"], 0), Value::Null);
    json_of(&db, &["enqueue", "a"], 0);
    assert_eq!(
        json_of(
            &db,
            &["claim", "a", "--owner", "w", "--now", "9", "--ttl", "5"],
            0
        ),
        json!({"fence": 2}),
        "a purged id got a fence it had before"
    );
}

#[test]
fn bad_queue_input_is_refused_with_a_message_and_changes_nothing() {
    let (dir, db) = fresh_db();
    let big = dir.path().join("big");
    std::fs::write(&big, vec![b'x'; (1 << 20) + 1]).unwrap();
    let big = big.display().to_string();
    let cases: [(&[&str], i32, &str); 7] = [
        (
            &["enqueue", "j", "--payload-file", &big],
            1,
            "--payload-file: ",
        ),
        (&["enqueue", "j", "--queue", ""], 1, "queue name is empty"),
        (
            &["enqueue", "j", "--run-at", "nan"],
            1,
            "--run-at must be a finite time",
        ),
        (&["enqueue", "j", "--max-attempts", "-1"], 2, "'-1'"),
        (&["list", "--status", "sleeping"], 1, "unknown status"),
        (
            &["purge", "--before", "5", "--status", "pending"],
            1,
            "purge takes done, dead or cancelled",
        ),
        (
            &["enqueue", "j", "--payload", "a", "--payload-file", "-"],
            2,
            "cannot be used with",
        ),
    ];
    for (args, code, named) in cases {
        let out = lease(&db, args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(named), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert_eq!(json_of(&db, &["state", "j"], 0), Value::Null);
}

#[test]
fn an_endless_payload_on_stdin_is_refused_after_the_limit_without_reading_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    assert_eq!(lease(&db, &["init"]).status.code(), Some(0));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(&db)
        .args(["enqueue", "j", "--payload-file", "-"])
        .stdin(std::fs::File::open("/dev/zero").unwrap())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    // Bounded: a reader that reads the whole stream never ends.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("lease read /dev/zero past the payload limit");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("--payload-file: standard input holds more than 1048576 bytes"),
        "{text}"
    );
    assert_eq!(json_of(&db, &["state", "j"], 0), Value::Null);
}

#[test]
fn purge_and_list_agree_about_a_job_whose_last_lease_expired() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    assert_eq!(lease(&db, &["init"]).status.code(), Some(0));
    json_of(&db, &["enqueue", "d", "--max-attempts", "1"], 0);
    json_of(
        &db,
        &["claim-next", "--now", "100", "--ttl", "10", "--owner", "w"],
        0,
    );
    let listed = json_of(&db, &["list", "--now", "200", "--status", "dead"], 0);
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "{listed}");
    let purged = json_of(&db, &["purge", "--before", "1e12", "--status", "dead"], 0);
    assert_eq!(purged, serde_json::json!({"purged": 1}));
    assert_eq!(json_of(&db, &["state", "d"], 0), Value::Null);
}

#[test]
fn names_over_the_limit_are_refused_the_same_on_every_store_and_block_a_migration() {
    let (dir, db) = fresh_db();
    let long = "x".repeat(9000);
    for (args, named) in [
        (vec!["enqueue", long.as_str()], "job id is 9000 bytes long"),
        (
            vec!["enqueue", "j", "--queue", long.as_str()],
            "queue name is 9000 bytes long",
        ),
        (
            vec!["claim-next", "--owner", long.as_str(), "--ttl", "5"],
            "owner is 9000 bytes long",
        ),
    ] {
        let out = lease(&db, &args);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains(named), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("limit of 1024 bytes"),
            "{}",
            stderr(&out)
        );
    }
    // A store written before the limit (here by hand) still reads, and a migration names the
    // long id before it copies anything.
    json_of(&db, &["enqueue", "short"], 0);
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute("INSERT INTO jobs(id) VALUES (?1)", [&long])
        .unwrap();
    let listed = json_of(&db, &["list"], 0);
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 2);
    let target = dir.path().join("target.db");
    let out = lease(
        &db,
        &[
            "migrate",
            "--from",
            db.to_str().unwrap(),
            "--to",
            target.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("longer than 1024 bytes"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("xxxxxxxx"), "{}", stderr(&out));
    assert!(stderr(&out).contains("(9000 bytes)"), "{}", stderr(&out));
    if target.exists() {
        let copied = json_of(&target, &["list"], 0);
        assert_eq!(copied["jobs"], json!([]), "something was copied");
    }
}

#[test]
fn values_from_outside_cannot_forge_lines_in_tables_or_break_prometheus_text() {
    let (_dir, db) = fresh_db();
    json_of(
        &db,
        &["enqueue", "a\nFORGED line", "--queue", "q\nFAKE: 9 pending"],
        0,
    );
    json_of(&db, &["enqueue", "tab", "--queue", "t\tr\re\u{1b}[2J"], 0);
    let list = lease(&db, &["list"]);
    let text = String::from_utf8_lossy(&list.stdout).into_owned();
    assert_eq!(text.lines().count(), 3, "a header and two jobs: {text}");
    assert!(text.contains("a\\nFORGED line"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
    let stats = lease(&db, &["stats"]);
    let text = String::from_utf8_lossy(&stats.stdout).into_owned();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(!text.lines().any(|l| l.starts_with("FAKE")), "{text}");
    // Prometheus text: backslash, quote and newline escaped as the format says; every other
    // character kept as it is (a parser reads "\t" or "\u{1b}" escapes as invalid).
    let prom = lease(&db, &["stats", "--prometheus"]);
    let text = String::from_utf8(prom.stdout).unwrap();
    assert!(text.contains("queue=\"q\\nFAKE: 9 pending\""), "{text}");
    assert!(text.contains("queue=\"t\tr\re\u{1b}[2J\""), "{text:?}");
    assert!(!text.contains("\\t") && !text.contains("\\u{"), "{text:?}");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("lease_jobs{"), "a forged line: {line:?}");
    }
}

#[test]
fn each_bad_flag_is_named_with_what_is_wrong_with_it() {
    let (_dir, db) = fresh_db();
    let cases: [(&[&str], i32, &str); 8] = [
        (
            &["enqueue", "j", "--run-at", "NaN"],
            1,
            "--run-at must be a finite time",
        ),
        (
            &["purge", "--before", "inf", "--status", "done"],
            1,
            "--before must be a finite time",
        ),
        (
            &["audit", "--since", "NaN"],
            1,
            "--since must be a finite time",
        ),
        (
            &[
                "work", "--owner", "w", "--ttl", "5", "--grace", "1e20", "--", "true",
            ],
            1,
            "--grace is 100000000000000000000 seconds, more than the most it takes",
        ),
        (
            &[
                "work", "--owner", "w", "--ttl", "5", "--drain", "1e20", "--", "true",
            ],
            1,
            "--drain is 100000000000000000000 seconds",
        ),
        (
            &["--busy-timeout", "1e20", "state", "j"],
            1,
            "--busy-timeout is 100000000000000000000 seconds",
        ),
        (
            &["--busy-timeout", "-1", "state", "j"],
            1,
            "--busy-timeout must be 0 or more",
        ),
        (
            &["--json", "stats", "--prometheus"],
            2,
            "--json and --prometheus cannot be used together",
        ),
    ];
    for (args, code, named) in cases {
        let out = lease(&db, args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(named), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn claim_next_in_store_clock_mode_reports_the_stored_until() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j"], 0);
    let out = lease(
        &db,
        &[
            "--clock",
            "store",
            "claim-next",
            "--now",
            "5",
            "--ttl",
            "30",
            "--owner",
            "w",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let human = String::from_utf8_lossy(&out.stdout).into_owned();
    let state = json_of(&db, &["state", "j"], 0);
    let until = state["until"].as_f64().unwrap();
    assert!(until > 1e9, "the store's clock decided: {until}");
    // The stored until, seen from the store's own now: 30 s ahead, in this century.
    assert!(
        human.contains("until 20") && human.contains("(in 30 s)"),
        "{human} / {until}"
    );
    assert!(!human.contains("1970-01-01"), "{human}");
}

/// Runs `enqueue-many` with `input` on standard input.
fn enqueue_many(db: &Path, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(db)
        .arg("enqueue-many")
        .args(args)
        .env_remove("LEASE_DB")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn enqueue_many_reads_ids_or_json_lines_and_counts_what_it_inserted() {
    let (_dir, db) = fresh_db();
    assert_eq!(lease(&db, &["enqueue", "b"]).status.code(), Some(0));
    // 2,500 ids take three transactions; "b" exists and an id given twice is inserted once.
    let mut ids: Vec<String> = (0..2_500).map(|n| format!("job-{n}")).collect();
    ids.extend(["b".to_owned(), "job-7".to_owned()]);
    let out = enqueue_many(
        &db,
        &["--queue", "bulk", "--json"],
        ids.join("\n").as_bytes(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer, json!({"inserted": 2_500, "existed": 2}));
    let stats = json_of(&db, &["stats", "--now", "0"], 0);
    assert_eq!(stats["queues"]["bulk"]["pending"], json!(2_500), "{stats}");
    let lines = "{\"id\": \"x\", \"priority\": 5, \"payload\": \"hello\"}\n{\"id\": \"y\"}\n";
    let out = enqueue_many(&db, &["--queue", "json", "--json-lines"], lines.as_bytes());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let first = claim_next(&db, "json", "w", "1", "1");
    assert_eq!(first["leases"][0]["id"], json!("x"), "{first}");
    assert_eq!(first["leases"][0]["payload"], json!("hello"), "{first}");
}

#[test]
fn enqueue_many_with_one_bad_line_stores_nothing_and_names_the_line() {
    let (_dir, db) = fresh_db();
    let input = "{\"id\": \"a\"}\n{\"id\": \"b\", \"priority\": \"high\"}\n{\"id\": \"c\"}\n";
    let out = enqueue_many(&db, &["--json-lines"], input.as_bytes());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let message = stderr(&out);
    assert!(
        message.contains(
            "standard input, line 2: priority: invalid type: string \"high\", expected i64"
        ),
        "{message}"
    );
    assert_eq!(json_of(&db, &["state", "a"], 0), Value::Null);
    let out = enqueue_many(&db, &[], b"ok\nbad\xff\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("line 2: not UTF-8"),
        "{}",
        stderr(&out)
    );
    assert_eq!(json_of(&db, &["state", "ok"], 0), Value::Null);
}

/// Runs `lease` with `input` on standard input.
fn fed(db: &Path, args: &[&str], input: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("LEASE_DB");
    stdin::fed(&mut command, input.as_bytes())
}

#[test]
fn a_workflow_runs_after_its_parents_and_a_failure_cancels_or_runs_its_children() {
    let (_dir, db) = fresh_db();
    let ok = |args: &[&str]| {
        let out = lease(&db, args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    };
    ok(&["enqueue", "build", "--queue", "ci"]);
    ok(&["enqueue", "test", "--queue", "ci", "--after", "build"]);
    // A parent named later in the same input; the policy per line.
    let out = fed(
        &db,
        &["enqueue-many", "--json-lines", "--queue", "ci"],
        "{\"id\": \"deploy\", \"after\": [\"test\"], \"on_parent_failure\": \"run\"}\n\
         {\"id\": \"report\", \"after\": [\"test\", \"lint\"]}\n\
         {\"id\": \"lint\"}\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let state = json_of(&db, &["state", "test"], 0);
    assert_eq!(state["status"], "waiting");
    assert_eq!(state["after"], json!(["build"]));
    assert_eq!(state["on_parent_failure"], "cancel");
    assert_eq!(state["parents"]["build"]["status"], "pending");
    // Only the jobs without parents are due.
    let leases = claim_next(&db, "ci", "w", "10", "10");
    let mut ids: Vec<&str> = leases["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["build", "lint"]);
    for id in ids {
        ok(&[
            "complete", id, "--owner", "w", "--fence", "1", "--result", "built", "--now", "11",
        ]);
    }
    let state = json_of(&db, &["state", "test", "--now", "12"], 0);
    assert_eq!(state["status"], "pending");
    assert_eq!(
        state["parents"]["build"],
        json!({"status": "done", "result": "built", "result_fence": 1})
    );
    let leases = claim_next(&db, "ci", "w", "12", "10");
    assert_eq!(leases["leases"][0]["id"], "test");
    assert_eq!(leases["leases"].as_array().unwrap().len(), 1);
    ok(&[
        "fail",
        "test",
        "--owner",
        "w",
        "--fence",
        "1",
        "--error",
        "red",
        "--no-retry",
        "--now",
        "13",
    ]);
    let report = json_of(&db, &["state", "report", "--now", "14"], 0);
    assert_eq!(report["status"], "cancelled");
    assert_eq!(report["error"], "cancelled: its parent test ended dead");
    let deploy = json_of(&db, &["state", "deploy", "--now", "14"], 0);
    assert_eq!(
        deploy["status"], "pending",
        "deploy runs whatever its parent's end"
    );
    let listed = lease(&db, &["list", "--now", "14"]);
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(text.contains("cancelled"), "{text}");
}

#[test]
fn a_missing_parent_a_self_parent_and_a_cycle_are_refused_naming_the_job_and_store_nothing() {
    let (_dir, db) = fresh_db();
    let out = lease(&db, &["enqueue", "orphan", "--after", "ghost"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("job orphan names parent ghost"),
        "{}",
        stderr(&out)
    );
    let out = lease(&db, &["enqueue", "loop", "--after", "loop"]);
    assert!(
        stderr(&out).contains("job loop names itself"),
        "{}",
        stderr(&out)
    );
    let out = fed(
        &db,
        &["enqueue-many", "--json-lines"],
        "{\"id\": \"fine\"}\n{\"id\": \"p\", \"after\": [\"q\"]}\n{\"id\": \"q\", \"after\": [\"p\"]}\n",
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("cycle"), "{}", stderr(&out));
    let out = fed(
        &db,
        &["enqueue-many", "--json-lines"],
        "{\"id\": \"bad\", \"after\": \"p\"}\n",
    );
    assert!(
        stderr(&out).contains("line 1: after: invalid type: string \"p\", expected a sequence"),
        "{}",
        stderr(&out)
    );
    let out = lease(
        &db,
        &[
            "enqueue",
            "x",
            "--after",
            "a",
            "--on-parent-failure",
            "maybe",
        ],
    );
    assert!(
        stderr(&out).contains("on-parent-failure"),
        "{}",
        stderr(&out)
    );
    for id in ["orphan", "loop", "fine", "p", "q", "bad", "x"] {
        assert_eq!(
            json_of(&db, &["state", id], 0),
            Value::Null,
            "{id} was stored"
        );
    }
}

/// `kill -9` of a completion that releases 20,000 children, at several moments: afterwards
/// the parent is done and every child due, or the parent still running and every child
/// waiting; never a child waiting on a done parent, nor due before it.
#[test]
fn kill_9_during_a_parents_completion_leaves_all_its_children_released_or_none() {
    let (_dir, db) = fresh_db();
    let children = 20_000;
    let mut lines: String = (0..children)
        .map(|n| format!("{{\"id\": \"c{n}\", \"after\": [\"root\"]}}\n"))
        .collect();
    lines.push_str("{\"id\": \"root\"}\n");
    let out = fed(
        &db,
        &["enqueue-many", "--json-lines", "--queue", "k"],
        &lines,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let leased = claim_next(&db, "k", "w", "1", "1");
    assert_eq!(leased["leases"][0]["id"], "root");
    let counts = |db: &Path| {
        let stats = json_of(db, &["stats", "--now", "2"], 0);
        let q = &stats["queues"]["k"];
        (
            q["running"].as_u64(),
            q["done"].as_u64(),
            q["waiting"].as_u64(),
            q["pending"].as_u64(),
        )
    };
    let mut completed = false;
    // Killed ever later, then (`None`) left to finish: a completion is checked for its
    // all-or-none effect, never against a time (a loaded machine may take seconds to start it).
    for delay_ms in [
        Some(0),
        Some(30),
        Some(80),
        Some(150),
        Some(300),
        Some(600),
        None,
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lease"))
            .arg("--db")
            .arg(&db)
            .args([
                "complete", "root", "--owner", "w", "--fence", "1", "--result", "r",
            ])
            .args(["--now", "2"])
            .env_remove("LEASE_DB")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(Reaped::new)
            .unwrap();
        if let Some(delay_ms) = delay_ms {
            std::thread::sleep(std::time::Duration::from_millis(delay_ms));
            let _ = child.kill();
        }
        let _ = child.wait();
        let (running, done, waiting, pending) = counts(&db);
        let all = Some(children);
        match (running, done) {
            (Some(1), Some(0)) => {
                assert_eq!((waiting, pending), (all, Some(0)), "{delay_ms:?} ms");
            }
            (Some(0), Some(1)) => {
                assert_eq!((waiting, pending), (Some(0), all), "{delay_ms:?} ms");
                completed = true;
                break;
            }
            other => panic!("the parent is neither running nor done: {other:?}"),
        }
    }
    assert!(completed, "the completion left to finish did not commit");
}

#[test]
fn list_takes_a_group_and_an_id_prefix_and_refuses_an_empty_group_naming_it() {
    let (_dir, db) = fresh_db();
    for (id, group) in [("inv-1", "acme"), ("inv-2", "zeta"), ("pay-1", "acme")] {
        json_of(&db, &["enqueue", id, "--group", group], 0);
    }
    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["list"];
        all.extend_from_slice(args);
        json_of(&db, &all, 0)["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&["--group", "acme"]), ["inv-1", "pay-1"]);
    assert_eq!(ids(&["--prefix", "inv-"]), ["inv-1", "inv-2"]);
    assert_eq!(ids(&["--group", "acme", "--prefix", "inv"]), ["inv-1"]);
    let out = lease(&db, &["list", "--group", ""]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("group"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn retry_and_cancel_take_every_job_a_filter_matches_after_a_dry_run_counts_them() {
    let (_dir, db) = fresh_db();
    for (id, group) in [("a1", "acme"), ("a2", "acme"), ("z1", "zeta")] {
        json_of(&db, &["enqueue", id, "--group", group], 0);
    }
    let counted = json_of(&db, &["cancel", "--group", "acme", "--dry-run"], 0);
    assert_eq!(
        counted,
        serde_json::json!({"action": "cancel", "matched": 2, "changed": 0, "dry_run": true})
    );
    let cancelled = json_of(&db, &["cancel", "--group", "acme"], 0);
    assert_eq!(
        (&cancelled["matched"], &cancelled["changed"]),
        (&serde_json::json!(2), &serde_json::json!(2))
    );
    let retried = json_of(
        &db,
        &["retry", "--queue", "default", "--status", "cancelled"],
        0,
    );
    assert_eq!(
        (&retried["matched"], &retried["changed"]),
        (&serde_json::json!(2), &serde_json::json!(2))
    );
    let listed = json_of(&db, &["list", "--status", "pending"], 0);
    assert_eq!(
        listed["jobs"].as_array().unwrap().len(),
        3,
        "all pending again"
    );
    // A job id and a filter together are refused, changing nothing.
    let out = lease(&db, &["cancel", "a1", "--queue", "default"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let listed = json_of(&db, &["list", "--status", "pending"], 0);
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 3);
}
