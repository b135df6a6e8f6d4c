//! `lease work -- CMD`: any program can be a worker. Each test runs the real binary over a real
//! database with `sh` programs.

use crate::reaped;
use reaped::Reaped;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lease_sqlite::testing::WriteLockHolder;
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

/// The summary `lease work --json` printed, once it exited 0.
fn succeeded(out: &Output) -> Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
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
    let summary = succeeded(&out);
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
fn with_prefetch_every_job_runs_once_and_what_was_held_ahead_is_given_back() {
    let (_dir, db) = fresh_db();
    for i in 0..8 {
        json_of(&db, &["enqueue", &format!("j{i}"), "--queue", "q"]);
    }
    let out = work(
        &db,
        &["--prefetch", "3", "--max-jobs", "5"],
        r#"printf '%s under %s' "$LEASE_JOB" "$LEASE_FENCE""#,
    );
    let summary = succeeded(&out);
    assert_eq!(
        (summary["completed"].as_u64(), summary["lost"].as_u64()),
        (Some(5), Some(0))
    );
    let mut done = 0;
    for i in 0..8 {
        let job = format!("j{i}");
        let state = json_of(&db, &["state", &job]);
        if state["status"] == "done" {
            assert_eq!(state["result"], format!("{job} under 1"));
            done += 1;
        } else {
            assert_eq!(
                (state["status"].as_str(), state["owner"].as_str()),
                (Some("pending"), None),
                "{job} held ahead is released: {state}"
            );
        }
    }
    assert_eq!(done, 5);
}

#[test]
fn a_lease_released_unstarted_gives_its_attempt_back_and_a_plain_release_does_not() {
    let (_dir, db) = fresh_db();
    for (job, queue) in [("given", "g"), ("released", "r")] {
        json_of(
            &db,
            &["enqueue", job, "--queue", queue, "--max-attempts", "1"],
        );
    }
    for (queue, extra) in [("g", Some("--unstarted")), ("r", None)] {
        let leased = json_of(
            &db,
            &[
                "claim-next",
                "--queue",
                queue,
                "--owner",
                "a",
                "--ttl",
                "30",
            ],
        );
        let job = leased["leases"][0]["id"].as_str().unwrap().to_owned();
        let mut args = vec!["release", job.as_str(), "--owner", "a", "--fence", "1"];
        args.extend(extra);
        assert_eq!(json_of(&db, &args)["ok"], true);
    }
    let again = json_of(
        &db,
        &["claim-next", "--queue", "g", "--owner", "b", "--ttl", "30"],
    );
    assert_eq!(
        (&again["leases"][0]["fence"], &again["leases"][0]["attempt"]),
        (&json!(2), &json!(1)),
        "given back unstarted: leased again on its one attempt"
    );
    let buried = json_of(
        &db,
        &["claim-next", "--queue", "r", "--owner", "b", "--ttl", "30"],
    );
    assert_eq!(
        buried["leases"],
        json!([]),
        "released plainly: its one attempt is spent"
    );
    assert_eq!(json_of(&db, &["state", "released"])["status"], "dead");
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
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("failed, dead"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
fn a_failed_job_s_progress_line_says_when_it_is_retried_as_a_person_reads_it() {
    let (_dir, db) = fresh_db();
    json_of(
        &db,
        &["enqueue", "j", "--queue", "q", "--max-attempts", "3"],
    );
    let out = work(&db, &["--max-jobs", "1"], "exit 1");
    let progress = String::from_utf8_lossy(&out.stderr);
    let line = progress
        .lines()
        .find(|l| l.contains("failed, retried at "))
        .unwrap_or_else(|| panic!("no retry line: {progress}"));
    let shown = line.split("retried at ").nth(1).unwrap();
    assert!(
        shown.starts_with("20") && shown.contains("Z (in "),
        "{line}"
    );
    // The time shown is the stored run_at, to the second.
    let stamp = &shown[..20];
    let parsed = json_of(&db, &["state", "j", "--now", stamp])["status"].clone();
    assert_eq!(
        parsed,
        json!("pending"),
        "{stamp} is not a time the CLI reads"
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
        .map(Reaped::new)
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
        .map(Reaped::new)
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

/// Whether `pid` is gone (or only a zombie waiting to be reaped).
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .is_some_and(|i| stat[i + 1..].trim_start().starts_with('Z')),
    }
}

#[test]
fn a_lost_lease_stops_everything_the_program_started_in_its_group_and_out_of_it() {
    let (dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j", "--queue", "q"]);
    let pids = dir.path().join("pids");
    // A background sleep, one that leaves the process group and session (setsid), and a
    // foreground sleep the shell waits for.
    let program = format!(
        "sleep 300 & echo $! >> {p}; setsid sleep 301 & echo $! >> {p}; \
         sleep 302 & echo $! >> {p}; wait",
        p = pids.display()
    );
    let worker = lease(&db)
        .args([
            "work",
            "--queue",
            "q",
            "--owner",
            "w",
            "--ttl",
            "1",
            "--grace",
            "1",
            "--max-jobs",
            "1",
            "--json",
        ])
        .args(["--", "sh", "-c", &program])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let started = loop {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        let found: Vec<String> = text.lines().map(str::to_owned).collect();
        if found.len() == 3 {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "the program never started its sleeps"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(started.iter().all(|pid| !gone(pid)), "{started:?}");
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
    let left: Vec<&String> = started.iter().filter(|pid| !gone(pid)).collect();
    for pid in &left {
        // Do not leave them behind if the test fails.
        let _ = Command::new("kill").args(["-9", pid]).status();
    }
    assert!(
        left.is_empty(),
        "still running after the lease was lost: {left:?}"
    );
}

#[test]
fn a_store_error_ends_lease_work_with_exit_1_and_says_why() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j", "--queue", "q"]);
    let out = lease(&db)
        .args(["--max-skew", "0.000001"])
        .args([
            "work",
            "--queue",
            "q",
            "--owner",
            "w",
            "--ttl",
            "5",
            "--exit-when-empty",
        ])
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("clock"), "{stderr}");
    assert_eq!(json_of(&db, &["state", "j"])["fence"], 0);
}

/// Ctrl-C at a terminal: the signal goes to the whole foreground process group.
fn interrupt_group(pgid: u32) {
    assert!(
        Command::new("kill")
            .args(["-INT", "--", &format!("-{pgid}")])
            .status()
            .unwrap()
            .success()
    );
}

fn work_in_own_group(db: &Path, program: &str) -> Reaped {
    use std::os::unix::process::CommandExt;
    lease(db)
        .args([
            "work", "--queue", "q", "--owner", "w", "--ttl", "5", "--drain", "20", "--json",
        ])
        .args(["--", "sh", "-c", program])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map(Reaped::new)
        .unwrap()
}

fn wait_running(db: &Path, job: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while json_of(db, &["state", job])["status"] != "running" {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_at_a_terminal_drains_and_a_second_one_releases_at_once() {
    let (_dir, db) = fresh_db();
    // The first Ctrl-C reaches lease work's group but not the program: the job finishes.
    json_of(&db, &["enqueue", "first", "--queue", "q"]);
    let worker = work_in_own_group(&db, "sleep 1; echo done");
    wait_running(&db, "first");
    interrupt_group(worker.id());
    let out = worker.wait_with_output().unwrap();
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(summary["completed"], 1, "{summary}");
    assert_eq!(json_of(&db, &["state", "first"])["result"], "done\n");

    // A second Ctrl-C stops the running job at once and gives its lease back; at its last
    // allowed attempt it is not dead-lettered as "lease expired".
    json_of(
        &db,
        &["enqueue", "second", "--queue", "q", "--max-attempts", "1"],
    );
    let worker = work_in_own_group(&db, "sleep 60");
    wait_running(&db, "second");
    interrupt_group(worker.id());
    std::thread::sleep(Duration::from_millis(300));
    interrupt_group(worker.id());
    let out = worker.wait_with_output().unwrap();
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(summary["released"], 1, "{summary}");
    let state = json_of(&db, &["state", "second"]);
    assert_eq!(
        (&state["owner"], &state["result"]),
        (&Value::Null, &Value::Null)
    );
    let next = json_of(
        &db,
        &["claim-next", "--queue", "q", "--owner", "v", "--ttl", "5"],
    );
    assert_eq!(next["leases"], json!([]));
    let state = json_of(&db, &["state", "second"]);
    assert_eq!(state["status"], "dead");
    assert_ne!(state["error"], "lease expired");
}

#[test]
fn progress_lines_escape_control_characters_from_job_ids() {
    let (_dir, db) = fresh_db();
    json_of(
        &db,
        &["enqueue", "evil\u{1b}]0;pwned\u{7}\nforged", "--queue", "q"],
    );
    let out = work(&db, &["--exit-when-empty"], "echo ok");
    assert_eq!(out.status.code(), Some(0));
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(
        !progress.chars().any(|c| c.is_control() && c != '\n'),
        "{progress:?}"
    );
    assert_eq!(progress.lines().count(), 1, "{progress}");
    assert!(
        progress.contains("evil\\u{1b}]0;pwned\\u{7}\\nforged"),
        "{progress}"
    );
}

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The issue's story: a job under `lease work --ttl 1.5 --grace 1`, then another process holds
/// the write lock for 6 s, so every renewal waits on it. The program must get SIGTERM by the
/// lease's end (before the fix it came about 4.9 s after it, when the renewal returned).
#[test]
fn lease_work_stops_the_program_by_its_lease_s_end_while_another_process_holds_the_write_lock() {
    let (dir, db) = fresh_db();
    json_of(&db, &["enqueue", "j", "--queue", "q"]);
    let started = dir.path().join("started");
    let term = dir.path().join("term");
    let program = format!(
        "trap 'date +%s.%N > {}; exit 0' TERM; : > {}; while :; do sleep 0.05; done",
        term.display(),
        started.display()
    );
    let worker = lease(&db)
        .args(["work", "--queue", "q", "--owner", "w", "--ttl", "1.5"])
        .args(["--grace", "1", "--max-jobs", "1", "--json", "--"])
        .args(["sh", "-c", &program])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    wait_for_file(&started);
    let until = json_of(&db, &["state", "j"])["until"].as_f64().unwrap();
    let holder = WriteLockHolder::start(&db, Duration::from_secs(6)).unwrap();

    let out = worker.wait_with_output().unwrap();
    assert!(holder.finish().unwrap(), "the lock holder failed");
    let stopped: f64 = std::fs::read_to_string(&term)
        .expect("the program never got SIGTERM")
        .trim()
        .parse()
        .unwrap();
    assert!(
        stopped <= until + 0.5,
        "the program got SIGTERM {:.2} s after its lease ended",
        stopped - until
    );
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(summary["lost"], 1, "{summary}");
}

/// 32 bytes in base64: a payload key.
const KEY: &str = "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=";

/// Whether any file of the database (with its log) holds `text`.
fn db_holds(db: &Path, text: &str) -> bool {
    let dir = db.parent().unwrap();
    std::fs::read_dir(dir).unwrap().any(|entry| {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap_or_default();
        bytes.windows(text.len()).any(|w| w == text.as_bytes())
    })
}

/// Runs `command` as `lease enqueue mail` of queue `q` with `attempts`, its payload sealed under
/// [`KEY`], checked to succeed.
fn sealed_enqueue(mut command: Command, attempts: &str) -> Output {
    let out = command
        .env("LEASE_PAYLOAD_KEY", KEY)
        .args([
            "enqueue",
            "mail",
            "--queue",
            "q",
            "--max-attempts",
            attempts,
        ])
        .args(["--payload", "to=alice@example.com"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Enqueues job `mail` of queue `q` (one attempt) with a payload sealed under [`KEY`]; the
/// key's name, as `state --json` shows it.
fn enqueue_sealed(db: &Path) -> String {
    sealed_enqueue(lease(db), "1");
    let state = json_of(db, &["state", "mail"]);
    state["payload_encrypted"]["key"]
        .as_str()
        .unwrap_or_else(|| panic!("{state}"))
        .to_owned()
}

#[test]
fn an_encrypted_payload_is_stored_sealed_shown_by_its_key_and_opened_only_for_the_program() {
    let (_dir, db) = fresh_db();
    enqueue_sealed(&db);
    assert!(
        !db_holds(&db, "alice"),
        "no plaintext in the database or its log"
    );
    let state = json_of(&db, &["state", "mail"]);
    assert_eq!(state["payload"], Value::Null);
    let key = state["payload_encrypted"]["key"].as_str().unwrap();
    assert!(key.starts_with("key-"), "{state}");
    assert!(!state.to_string().contains("alice"));
    // The program reads the opened payload on its stdin.
    let out = lease(&db)
        .env("LEASE_PAYLOAD_KEY", KEY)
        .args([
            "work", "--queue", "q", "--owner", "w", "--ttl", "5", "--json",
        ])
        .args(["--exit-when-empty", "--", "sh", "-c"])
        .arg("grep -q '^to=alice@example.com$' && printf read-it")
        .output()
        .unwrap();
    assert_eq!(succeeded(&out)["completed"], 1);
    assert_eq!(json_of(&db, &["state", "mail"])["result"], "read-it");
}

/// The program gets its payload opened, never the keys: neither `LEASE_PAYLOAD_KEY` nor
/// `LEASE_PAYLOAD_KEY_FILE` is in its environment (with them, a handler could read every job
/// and forge sealed values), whichever of the two `lease work` was given.
#[test]
fn a_program_finds_no_payload_key_in_its_environment() {
    let (dir, db) = fresh_db();
    let file = dir.path().join("keys");
    std::fs::write(
        &file,
        format!("old=q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJE=\nnew={KEY}\n"),
    )
    .unwrap();
    let program = r#"cat >/dev/null; echo "key=${LEASE_PAYLOAD_KEY-unset} file=${LEASE_PAYLOAD_KEY_FILE-unset}""#;
    for (variable, value) in [
        ("LEASE_PAYLOAD_KEY", KEY.to_owned()),
        ("LEASE_PAYLOAD_KEY_FILE", file.display().to_string()),
    ] {
        let mut producer = lease(&db);
        producer.env(variable, &value);
        let out = producer
            .args([
                "enqueue",
                variable,
                "--queue",
                "keys",
                "--payload",
                "secret",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let out = lease(&db)
            .env(variable, &value)
            .args([
                "work", "--queue", "keys", "--owner", "w", "--ttl", "5", "--json",
            ])
            .args(["--exit-when-empty", "--", "sh", "-c", program])
            .output()
            .unwrap();
        assert_eq!(succeeded(&out)["completed"], 1, "{variable}");
        assert_eq!(
            json_of(&db, &["state", variable])["result"],
            "key=unset file=unset\n",
            "given {variable}"
        );
    }
}

/// Sealing fails closed where sealed values are required: a plaintext payload swapped into a
/// sealed queue (by whoever can enqueue or write the store) fails its job naming it, and the
/// program never runs; a producer without a key is refused with nothing stored; and `lease
/// work --require-sealed` without a key refuses to start.
#[test]
fn a_plaintext_payload_swapped_into_a_sealed_queue_is_refused() {
    let (dir, db) = fresh_db();
    // Whoever can enqueue without the key puts a plaintext job beside a sealed one.
    enqueue_sealed(&db);
    let swapped = lease(&db)
        .args(["enqueue", "swapped", "--queue", "q", "--max-attempts", "1"])
        .args(["--payload", "to=mallory@example.com"])
        .output()
        .unwrap();
    assert!(swapped.status.success(), "{swapped:?}");
    let ran = dir.path().join("ran.txt");
    let program = format!(r#"cat >> '{}'; printf ran"#, ran.display());
    let out = lease(&db)
        .env("LEASE_PAYLOAD_KEY", KEY)
        .args([
            "work", "--queue", "q", "--owner", "w", "--ttl", "5", "--json",
        ])
        .args([
            "--require-sealed",
            "--exit-when-empty",
            "--",
            "sh",
            "-c",
            &program,
        ])
        .output()
        .unwrap();
    let summary = succeeded(&out);
    assert_eq!(
        (&summary["completed"], &summary["failed"]),
        (&json!(1), &json!(1))
    );
    let refused = json_of(&db, &["state", "swapped"]);
    assert_eq!(refused["status"], "dead");
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains("swapped") && error.contains("not sealed"),
        "{error}"
    );
    let seen = std::fs::read_to_string(&ran).unwrap();
    assert!(
        !seen.contains("mallory"),
        "the program ran the swapped payload"
    );
    // The sealed job ran, and its result was sealed (a worker requiring sealed values seals).
    let mail = json_of(&db, &["state", "mail"]);
    assert!(mail["result_encrypted"]["key"].is_string(), "{mail}");
    // A producer that must seal and has no key is refused, and nothing is stored.
    let out = lease(&db)
        .env("LEASE_REQUIRE_SEALED", "1")
        .args(["enqueue", "clear", "--payload", "to=alice@example.com"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("LEASE_REQUIRE_SEALED"));
    assert_eq!(json_of(&db, &["state", "clear"]), Value::Null);
    // A value of the setting that cannot be read is refused, never taken for "no".
    let out = lease(&db)
        .env("LEASE_REQUIRE_SEALED", "ture")
        .env("LEASE_PAYLOAD_KEY", KEY)
        .args(["enqueue", "typo", "--payload", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(json_of(&db, &["state", "typo"]), Value::Null);
    // A worker that requires sealed values and has no key does not start.
    let out = lease(&db)
        .env("LEASE_REQUIRE_SEALED", "yes")
        .args(["work", "--queue", "q", "--owner", "w", "--ttl", "5"])
        .args(["--exit-when-empty", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a key"));
}

/// A payload key that is not text is refused naming the variable (it never counts as unset,
/// which would enqueue the payload in the clear), and nothing is stored.
#[test]
fn a_payload_key_that_is_not_text_is_refused_not_taken_for_no_key() {
    use std::os::unix::ffi::OsStrExt;
    let (_dir, db) = fresh_db();
    let out = lease(&db)
        .env(
            "LEASE_PAYLOAD_KEY",
            std::ffi::OsStr::from_bytes(b"q83v\xff\xfe"),
        )
        .args(["enqueue", "mail", "--payload", "to=alice@example.com"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("LEASE_PAYLOAD_KEY is not valid text"),
        "{stderr}"
    );
    assert_eq!(json_of(&db, &["state", "mail"]), Value::Null);
}

/// A payload that begins with the sealed envelope's reserved start but is not a well-formed
/// envelope (a crafted one of an unknown version) is refused at enqueue, saying why, with
/// nothing stored: it can be neither opened nor handed to a program as plain bytes.
#[test]
fn a_crafted_envelope_of_an_unknown_version_is_refused_clearly() {
    let (dir, db) = fresh_db();
    let crafted = dir.path().join("crafted.bin");
    let mut bytes = b"\xFFlease\x02\x01k".to_vec();
    bytes.extend([7u8; 40]);
    std::fs::write(&crafted, &bytes).unwrap();
    let out = lease(&db)
        .args(["enqueue", "crafted", "--payload-file"])
        .arg(&crafted)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("reserved start") && stderr.contains("version"),
        "{stderr}"
    );
    assert_eq!(json_of(&db, &["state", "crafted"]), Value::Null);
}

#[test]
fn an_encrypted_payload_without_its_key_fails_the_job_naming_the_key() {
    let (_dir, db) = fresh_db();
    let key = enqueue_sealed(&db);
    let ran = db.parent().unwrap().join("ran.txt");
    let program = format!("cat; echo ran > '{}'", ran.display());
    let out = work(&db, &["--exit-when-empty"], &program);
    let summary = succeeded(&out);
    assert_eq!(summary["completed"], 0);
    assert_eq!(summary["failed"], 1);
    let state = json_of(&db, &["state", "mail"]);
    assert_eq!(state["status"], "dead");
    let error = state["error"].as_str().unwrap();
    assert!(error.contains(&format!("key {key}")), "{error}");
    assert!(!error.contains("alice"));
    assert!(!ran.exists(), "the program never ran");
}

#[test]
fn a_bad_payload_key_is_refused_by_name_and_nothing_is_stored() {
    let (_dir, db) = fresh_db();
    let out = lease(&db)
        .env("LEASE_PAYLOAD_KEY", "c2hvcnQ=")
        .args(["enqueue", "mail", "--payload", "to=alice@example.com"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "an error, not a usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("LEASE_PAYLOAD_KEY is 5 bytes, not 32"),
        "{stderr}"
    );
    assert!(!stderr.contains("c2hvcnQ="), "{stderr}");
    assert_eq!(json_of(&db, &["state", "mail"]), Value::Null);
    let out = lease(&db)
        .env("LEASE_PAYLOAD_KEY", "c2hvcnQ=")
        .args(["work", "--queue", "q", "--owner", "w", "--ttl", "5"])
        .args(["--exit-when-empty", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("LEASE_PAYLOAD_KEY is 5 bytes"));
}

#[test]
fn with_seal_results_a_program_s_result_is_stored_sealed_and_without_a_key_work_refuses_to_start() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "report", "--queue", "q"]);
    let out = lease(&db)
        .args(["work", "--queue", "q", "--owner", "w", "--ttl", "5"])
        .args(["--seal-results", "--exit-when-empty", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--seal-results needs a key"), "{stderr}");
    assert_eq!(
        json_of(&db, &["state", "report"])["owner"],
        Value::Null,
        "nothing claimed"
    );
    let out = lease(&db)
        .env("LEASE_PAYLOAD_KEY", KEY)
        .args([
            "work", "--queue", "q", "--owner", "w", "--ttl", "5", "--json",
        ])
        .args(["--seal-results", "--exit-when-empty", "--", "sh", "-c"])
        .arg("printf 'revenue 42'")
        .output()
        .unwrap();
    assert_eq!(succeeded(&out)["completed"], 1);
    let state = json_of(&db, &["state", "report"]);
    assert!(
        state["result_encrypted"]["key"]
            .as_str()
            .unwrap()
            .starts_with("key-")
    );
    let result = state["result"].as_str().unwrap();
    assert!(result.starts_with("lease-sealed:v1:"), "{result}");
    assert!(
        !db_holds(&db, "revenue"),
        "no plaintext result in the database or its log"
    );
}

#[test]
fn no_log_line_or_metric_holds_a_sealed_job_s_plaintext_or_the_key() {
    let (_dir, db) = fresh_db();
    let mut logged = lease(&db);
    logged.env("RUST_LOG", "trace").arg("-v");
    let out = sealed_enqueue(logged, "2");
    let mut seen = String::from_utf8_lossy(&out.stderr).into_owned();
    // A run that fails (its error goes to the store and the log), then one that completes
    // with a sealed result, both with every log line on.
    for program in [
        "grep -q alice && echo 'failed for alice@example.com' >&2 && exit 3",
        "cat >/dev/null; printf 'sent to alice@example.com'",
    ] {
        let out = lease(&db)
            .env("LEASE_PAYLOAD_KEY", KEY)
            .env("RUST_LOG", "trace")
            .args(["-v", "work", "--queue", "q", "--owner", "w", "--ttl", "5"])
            .args([
                "--seal-results",
                "--max-jobs",
                "1",
                "--",
                "sh",
                "-c",
                program,
            ])
            .output()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&out.stdout));
        seen.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(json_of(&db, &["state", "mail"])["status"], "done");
    let metrics = lease(&db).args(["stats", "--prometheus"]).output().unwrap();
    seen.push_str(&String::from_utf8_lossy(&metrics.stdout));
    assert!(seen.contains("mail"), "the logs were on: {seen}");
    assert!(!seen.contains(KEY), "the key is in the output");
    // The program's own stderr is its business (it is shown as the job's error); what lease
    // writes of the payload, the result and the store never holds the plaintext it sealed.
    let leaked: Vec<&str> = seen
        .lines()
        .filter(|l| l.contains("to=alice") || l.contains("sent to alice"))
        .collect();
    assert!(leaked.is_empty(), "plaintext in lease's output: {leaked:?}");
}

#[test]
fn claim_next_gives_its_holder_a_sealed_payload_opened_with_the_key_and_sealed_without_it() {
    let (_dir, db) = fresh_db();
    sealed_enqueue(lease(&db), "3");
    let key = json_of(&db, &["state", "mail"])["payload_encrypted"]["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let claim = |with_key: bool| {
        let mut command = lease(&db);
        if with_key {
            command.env("LEASE_PAYLOAD_KEY", KEY);
        }
        let out = command
            .args(["claim-next", "--queue", "q", "--owner", "w", "--ttl", "1"])
            .arg("--now")
            .arg(if with_key { "1002" } else { "1000" })
            .arg("--json")
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        answer["leases"][0].clone()
    };
    let without = claim(false);
    assert_eq!(without["payload"], Value::Null);
    assert_eq!(without["payload_encrypted"]["key"], key.as_str());
    assert!(
        without["payload_base64"]
            .as_str()
            .unwrap()
            .starts_with("/2xlYXNl")
    );
    assert!(
        without["payload_error"]
            .as_str()
            .unwrap()
            .contains("no key is given")
    );
    // The first lease (1 s) has run out: the next claim, with the key, reads the plaintext.
    let with = claim(true);
    assert_eq!(with["payload"], "to=alice@example.com", "{with}");
    assert_eq!(with["payload_encrypted"]["key"], key.as_str());
    assert_eq!(with.get("payload_error"), None);
}
