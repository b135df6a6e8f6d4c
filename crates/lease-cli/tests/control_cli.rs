//! Scheduling and flow control through the `lease` binary on SQLite: pause, resume and limit a
//! queue (shown in `stats`), re-run a finished job, a job's progress and timeout under `lease
//! work`, schedules set, listed, run and removed; and the races and faults: many processes
//! running the same schedule at once, many workers against one concurrency limit, and
//! `kill -9` in the middle of a tick.

use crate::checkpoint_cli;
use crate::ordered_cli;
use crate::trace_cli;

use crate::reaped;
use reaped::Reaped;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

/// The arguments of `lease claim-next --queue QUEUE --owner OWNER --ttl TTL`, then `more`.
fn claim_args<'a>(queue: &'a str, owner: &'a str, ttl: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "claim-next",
        "--queue",
        queue,
        "--owner",
        owner,
        "--ttl",
        ttl,
    ];
    args.extend_from_slice(more);
    args
}

fn lease(db: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command.arg("--db").arg(db).env_remove("LEASE_DB");
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

fn fresh_db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("control.db");
    assert!(lease(&db).arg("init").output().unwrap().status.success());
    (dir, db)
}

/// Exit 1 with one stderr line that says `says`, and nothing on stdout.
fn refused(out: &Output, says: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(says), "{stderr:?} does not say {says:?}");
    assert!(out.stdout.is_empty());
}

/// The ids of the jobs in `queue`.
fn ids(db: &Path, queue: &str) -> Vec<String> {
    json_of(db, &["list", "--queue", queue, "--limit", "10000"])["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_paused_queue_leases_nothing_and_stats_say_so_until_it_is_resumed() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "a", "--queue", "mail"]);
    let paused = json_of(&db, &["pause", "mail"]);
    assert_eq!(
        (&paused["paused"], &paused["queue"]),
        (&json!(true), &json!("mail"))
    );
    let claim = run(&db, &claim_args("mail", "w", "5", &[]));
    assert_eq!(claim.status.code(), Some(3), "a paused queue leased a job");
    // Enqueueing goes on.
    assert_eq!(
        json_of(&db, &["enqueue", "b", "--queue", "mail"])["inserted"],
        true
    );
    let stats = json_of(&db, &["stats"]);
    assert_eq!(stats["queues"]["mail"]["pending"], 2);
    assert_eq!(stats["settings"]["mail"]["paused"], true);
    let human = String::from_utf8(run(&db, &["stats"]).stdout).unwrap();
    assert!(
        human.contains("mail: 2 pending") && human.contains("(paused)"),
        "{human}"
    );
    assert_eq!(json_of(&db, &["resume", "mail"])["paused"], false);
    let leases = json_of(&db, &claim_args("mail", "w", "5", &["--limit", "5"]));
    assert_eq!(leases["leases"].as_array().unwrap().len(), 2);
    // A pause until a time ends by itself.
    json_of(&db, &["enqueue", "c", "--queue", "sms"]);
    json_of(&db, &["pause", "sms", "--until", "2000"]);
    let early = run(&db, &claim_args("sms", "w", "5", &["--now", "1999"]));
    assert_eq!(early.status.code(), Some(3));
    let late = json_of(&db, &claim_args("sms", "w", "5", &["--now", "2000"]));
    assert_eq!(late["leases"][0]["id"], "c");
}

#[test]
fn stats_prometheus_shows_each_queue_s_pause_limit_and_timeout_as_gauges() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "a", "--queue", "mail"]);
    json_of(&db, &["enqueue", "b", "--queue", "sms"]);
    let prometheus = |now: &str| {
        let out = run(&db, &["stats", "--prometheus", "--now", now]);
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    // No queue has settings: the job counts alone.
    let free = prometheus("100");
    assert!(!free.contains("lease_queue_"), "{free}");
    json_of(&db, &["pause", "mail", "--until", "200"]);
    json_of(
        &db,
        &["limit", "sms", "--concurrency", "3", "--timeout", "2.5"],
    );
    json_of(&db, &["limit", "sms", "--per-group", "2", "--ordered"]);
    let text = prometheus("100");
    for line in [
        "# TYPE lease_queue_paused gauge\n",
        "lease_queue_paused{queue=\"mail\"} 1\n",
        "lease_queue_paused{queue=\"sms\"} 0\n",
        "# TYPE lease_queue_concurrency_limit gauge\n",
        "lease_queue_concurrency_limit{queue=\"sms\"} 3\n",
        "# TYPE lease_queue_timeout_seconds gauge\n",
        "lease_queue_timeout_seconds{queue=\"sms\"} 2.5\n",
        "# TYPE lease_queue_per_group_limit gauge\n",
        "lease_queue_per_group_limit{queue=\"sms\"} 2\n",
        "# TYPE lease_queue_ordered gauge\n",
        "lease_queue_ordered{queue=\"sms\"} 1\n",
        "lease_queue_ordered{queue=\"mail\"} 0\n",
        "lease_jobs{queue=\"mail\",status=\"pending\"} 1\n",
    ] {
        assert!(text.contains(line), "no {line:?} in {text}");
    }
    // Only a queue with a limit or a timeout has that gauge.
    assert!(
        !text.contains("lease_queue_concurrency_limit{queue=\"mail\"}"),
        "{text}"
    );
    assert!(
        !text.contains("lease_queue_timeout_seconds{queue=\"mail\"}"),
        "{text}"
    );
    // The pause ends at its time.
    assert!(
        prometheus("200").contains("lease_queue_paused{queue=\"mail\"} 0\n"),
        "a pause until 200 still shown at 200"
    );
    // A paused group, a queue's rate used up and a group's rate used up, each counted.
    json_of(
        &db,
        &["enqueue", "g1", "--queue", "sms", "--group", "acct-a"],
    );
    json_of(
        &db,
        &["pause", "sms", "--group", "acct-b", "--until", "300"],
    );
    json_of(
        &db,
        &[
            "limit",
            "sms",
            "--rate",
            "2/1m",
            "--rate-per-group",
            "1/1m",
            "--per-group",
            "0",
        ],
    );
    json_of(
        &db,
        &claim_args("sms", "w", "5", &["--limit", "5", "--now", "250"]),
    );
    let text = prometheus("260");
    for line in [
        "lease_queue_paused_groups{queue=\"sms\"} 1\n",
        "lease_queue_paused_groups{queue=\"mail\"} 0\n",
        "lease_queue_throttled{queue=\"sms\"} 1\n",
        "lease_queue_throttled{queue=\"mail\"} 0\n",
        "lease_queue_throttled_groups{queue=\"sms\"} 1\n",
    ] {
        assert!(text.contains(line), "no {line:?} in {text}");
    }
    let later = prometheus("400");
    for line in [
        "lease_queue_paused_groups{queue=\"sms\"} 0\n",
        "lease_queue_throttled{queue=\"sms\"} 0\n",
        "lease_queue_throttled_groups{queue=\"sms\"} 0\n",
    ] {
        assert!(later.contains(line), "no {line:?} in {later}");
    }
}

#[test]
fn a_limit_caps_the_leases_of_a_claim_and_bad_flags_change_nothing() {
    let (_dir, db) = fresh_db();
    for id in ["a", "b", "c"] {
        json_of(&db, &["enqueue", id, "--queue", "q"]);
    }
    refused(&run(&db, &["limit", "q"]), "give --concurrency");
    refused(
        &run(&db, &["limit", "q", "--timeout", "5", "--no-timeout"]),
        "not both",
    );
    refused(&run(&db, &["limit", "q", "--timeout", "-1"]), "--timeout");
    refused(&run(&db, &["pause", "", "--until", "5"]), "queue");
    assert_eq!(
        json_of(&db, &["stats"])["settings"],
        json!({}),
        "a refused flag changed settings"
    );
    let limited = json_of(
        &db,
        &["limit", "q", "--concurrency", "2", "--timeout", "30"],
    );
    assert_eq!(
        (&limited["concurrency"], &limited["timeout"]),
        (&json!(2), &json!(30.0))
    );
    let claim = json_of(&db, &claim_args("q", "w", "60", &["--limit", "3"]));
    let leases = claim["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 2, "{claim}");
    assert!(leases.iter().all(|l| l["timeout"] == 30.0));
    assert_eq!(
        run(&db, &claim_args("q", "w", "60", &[])).status.code(),
        Some(3)
    );
    let human = String::from_utf8(run(&db, &["stats"]).stdout).unwrap();
    assert!(
        human.contains("at most 2 lease(s) at once, timeout 30 s"),
        "{human}"
    );
    json_of(&db, &["limit", "q", "--concurrency", "0", "--no-timeout"]);
    assert_eq!(json_of(&db, &["stats"])["settings"], json!({}));
}

#[test]
fn a_finished_job_runs_again_with_replace_finished_and_keeps_its_result_until_then() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "r", "--queue", "q", "--payload", "one"]);
    let first = json_of(&db, &claim_args("q", "w", "60", &[]));
    let fence = first["leases"][0]["fence"].to_string();
    assert!(
        run(
            &db,
            &[
                "complete", "r", "--owner", "w", "--fence", &fence, "--result", "first"
            ]
        )
        .status
        .success()
    );
    assert_eq!(
        json_of(&db, &["enqueue", "r", "--queue", "q"])["inserted"],
        false
    );
    let rerun = json_of(
        &db,
        &[
            "enqueue",
            "r",
            "--queue",
            "q",
            "--payload",
            "two",
            "--replace-finished",
        ],
    );
    assert_eq!(rerun["inserted"], true);
    let state = json_of(&db, &["state", "r"]);
    assert_eq!(
        (
            &state["status"],
            &state["result"],
            &state["attempts"],
            &state["payload"]
        ),
        (&json!("pending"), &json!("first"), &json!(0), &json!("two"))
    );
    // Pending now: a second re-run is refused as an existing job.
    let again = json_of(
        &db,
        &[
            "enqueue",
            "r",
            "--queue",
            "q",
            "--payload",
            "three",
            "--replace-finished",
        ],
    );
    assert_eq!(again["inserted"], false);
    let second = json_of(&db, &claim_args("q", "w", "60", &[]));
    assert_eq!(second["leases"][0]["fence"], 2, "the fence goes on");
    // The same through enqueue-many's JSON lines, and a bad value names its line.
    let mut child = lease(&db)
        .args(["enqueue-many", "--json-lines", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"id\": \"x\", \"timeout\": 5}\n{\"id\": \"y\", \"replace\": \"all\"}\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    refused(&out, "line 2: replace: unknown variant `all`");
    assert_eq!(
        json_of(&db, &["state", "x"]),
        Value::Null,
        "a refused batch stored a job"
    );
}

#[test]
fn progress_is_stored_under_the_fence_and_a_stale_holder_is_refused() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "p", "--queue", "q"]);
    json_of(&db, &claim_args("q", "a", "10", &["--now", "100"]));
    let stored = json_of(
        &db,
        &[
            "progress", "p", "--owner", "a", "--fence", "1", "--ttl", "10", "--now", "105",
            "--value", "3 of 10",
        ],
    );
    assert_eq!(stored, json!({"ok": true, "until": 115.0}));
    let state = json_of(&db, &["state", "p", "--now", "106"]);
    assert_eq!(
        (&state["progress"], &state["until"]),
        (&json!("3 of 10"), &json!(115.0))
    );
    // The contract's shape, without --ttl: stored, and the lease keeps its end.
    let kept = run(
        &db,
        &[
            "progress", "p", "--owner", "a", "--fence", "1", "--now", "107", "--value", "4 of 10",
        ],
    );
    assert!(
        kept.status.success(),
        "{}",
        String::from_utf8_lossy(&kept.stderr)
    );
    assert!(
        String::from_utf8_lossy(&kept.stdout).contains("the lease keeps its end"),
        "{}",
        String::from_utf8_lossy(&kept.stdout)
    );
    let state = json_of(&db, &["state", "p", "--now", "108"]);
    assert_eq!(
        (&state["progress"], &state["until"]),
        (&json!("4 of 10"), &json!(115.0))
    );
    assert_eq!(
        json_of(
            &db,
            &[
                "progress", "p", "--owner", "a", "--fence", "1", "--now", "109", "--value", "5"
            ]
        ),
        json!({"ok": true})
    );
    json_of(&db, &claim_args("q", "b", "10", &["--now", "120"]));
    let late = run(
        &db,
        &[
            "progress", "p", "--owner", "a", "--fence", "1", "--ttl", "10", "--now", "121",
            "--value", "9 of 10",
        ],
    );
    assert_eq!(late.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&late.stderr).contains("refused"));
    assert_eq!(json_of(&db, &["state", "p"])["progress"], Value::Null);
    let long = "x".repeat(1025);
    refused(
        &run(
            &db,
            &[
                "progress", "p", "--owner", "b", "--fence", "2", "--ttl", "10", "--value", &long,
            ],
        ),
        "progress",
    );
}

#[test]
fn a_schedule_is_checked_set_listed_fired_once_per_tick_run_by_hand_and_removed() {
    let (_dir, db) = fresh_db();
    refused(
        &run(
            &db,
            &[
                "schedule",
                "set",
                "n",
                "--cron",
                "61 * * * *",
                "--queue",
                "r",
            ],
        ),
        "cron",
    );
    refused(
        &run(
            &db,
            &[
                "schedule",
                "set",
                "n",
                "--cron",
                "@daily",
                "--tz",
                "Mars/Base",
                "--queue",
                "r",
            ],
        ),
        "Mars/Base",
    );
    refused(
        &run(
            &db,
            &["schedule", "set", "a@b", "--cron", "@daily", "--queue", "r"],
        ),
        "a@b",
    );
    refused(
        &run(
            &db,
            &[
                "schedule",
                "set",
                "n",
                "--cron",
                "@daily",
                "--queue",
                "r",
                "--catch-up",
                "often",
            ],
        ),
        "--catch-up",
    );
    assert_eq!(
        json_of(&db, &["schedule", "list"]),
        json!({"schedules": []})
    );
    // Every minute, made at 06:00 UTC; all:3 enqueues up to the three newest missed ticks.
    let set = json_of(
        &db,
        &[
            "schedule",
            "set",
            "m",
            "--cron",
            "* * * * *",
            "--queue",
            "r",
            "--payload",
            "hi",
            "--catch-up",
            "all:3",
            "--now",
            "2026-12-02T06:00:00Z",
        ],
    );
    assert_eq!(
        (&set["version"], &set["next_tick"]),
        (&json!(1), &json!(1_796_191_260.0))
    );
    let pass = json_of(
        &db,
        &["schedule", "run-due", "--now", "2026-12-02T06:10:30Z"],
    );
    let made: Vec<&str> = pass["fired"][0]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        made,
        [
            "m@2026-12-02T06:08:00Z",
            "m@2026-12-02T06:09:00Z",
            "m@2026-12-02T06:10:00Z"
        ]
    );
    // The same pass again fires nothing: the tick is recorded.
    let again = json_of(
        &db,
        &["schedule", "run-due", "--now", "2026-12-02T06:10:30Z"],
    );
    assert_eq!(again["fired"], json!([]));
    assert_eq!(ids(&db, "r").len(), 3);
    assert_eq!(
        json_of(&db, &["state", "m@2026-12-02T06:10:00Z"])["payload"],
        "hi"
    );
    let listed = json_of(&db, &["schedule", "list", "--now", "2026-12-02T06:10:30Z"]);
    let m = &listed["schedules"][0];
    assert_eq!(
        (&m["name"], &m["last_tick"], &m["next_tick"], &m["catch_up"]),
        (
            &json!("m"),
            &json!(1_796_191_800.0),
            &json!(1_796_191_860.0),
            &json!("all:3")
        )
    );
    // A change keeps the last tick: no tick fires twice.
    json_of(
        &db,
        &[
            "schedule",
            "set",
            "m",
            "--cron",
            "*/2 * * * *",
            "--queue",
            "r",
            "--now",
            "2026-12-02T06:10:40Z",
        ],
    );
    let changed = json_of(
        &db,
        &["schedule", "run-due", "--now", "2026-12-02T06:10:50Z"],
    );
    assert_eq!(changed["fired"], json!([]));
    // A run by hand: the schedule's job now, once a second, its ticks untouched.
    let ran = json_of(
        &db,
        &["schedule", "run", "m", "--now", "2026-12-02T06:10:55.2Z"],
    );
    assert_eq!(
        ran,
        json!({"schedule": "m", "id": "m@run-2026-12-02T06:10:55Z", "queue": "r", "inserted": true})
    );
    let twice = run(
        &db,
        &["schedule", "run", "m", "--now", "2026-12-02T06:10:55.9Z"],
    );
    assert_eq!(twice.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&twice.stdout).contains("already enqueued"),
        "{twice:?}"
    );
    assert_eq!(ids(&db, "r").len(), 4);
    let listed = json_of(&db, &["schedule", "list", "--now", "2026-12-02T06:10:56Z"]);
    assert_eq!(
        (
            &listed["schedules"][0]["last_tick"],
            &listed["schedules"][0]["version"]
        ),
        (&json!(1_796_191_800.0), &json!(2)),
        "a run by hand changed the schedule"
    );
    let none = run(&db, &["schedule", "run", "nope"]);
    assert_eq!(none.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&none.stdout).contains("no schedule nope"));
    refused(&run(&db, &["schedule", "run", "a@b"]), "a@b");
    assert_eq!(
        json_of(&db, &["schedule", "remove", "m"]),
        json!({"removed": true})
    );
    assert_eq!(
        run(&db, &["schedule", "remove", "m"]).status.code(),
        Some(3)
    );
    assert_eq!(
        ids(&db, "r").len(),
        4,
        "removing a schedule removed its jobs"
    );
}

/// A job that runs past its timeout under `lease work` has its whole process group stopped and
/// is failed "timed out"; a program's progress lines reach the job while it runs.
#[test]
fn lease_work_stops_a_program_past_its_timeout_and_stores_its_progress_lines() {
    let (dir, db) = fresh_db();
    json_of(
        &db,
        &[
            "enqueue",
            "slow",
            "--queue",
            "q",
            "--timeout",
            "1",
            "--max-attempts",
            "1",
        ],
    );
    json_of(&db, &["enqueue", "talks", "--queue", "q"]);
    let pids = dir.path().join("pids");
    let seen = dir.path().join("seen");
    let program = format!(
        r#"if [ "$LEASE_JOB" = slow ]; then echo "$LEASE_TIMEOUT" > {seen}; sleep 300 & echo $! > {pids}; wait; fi
           echo "1 of 2" > "$LEASE_PROGRESS"
           printf 'not utf-8 \377\n' > "$LEASE_PROGRESS"
           sleep 0.5
           lease_progress=$(lease --db {db} --json state talks)
           echo "$lease_progress" > {seen}.talks
           echo done"#,
        seen = seen.display(),
        pids = pids.display(),
        db = db.display(),
    );
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_lease"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let started = Instant::now();
    let out = lease(&db)
        .args([
            "work",
            "--queue",
            "q",
            "--owner",
            "w",
            "--ttl",
            "10",
            "--grace",
            "1",
            "--exit-when-empty",
            "--json",
        ])
        .args(["--", "sh", "-c", &program])
        .env("PATH", path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the program ran to its end"
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&summary["completed"], &summary["failed"]),
        (&json!(1), &json!(1)),
        "{stderr}"
    );
    let slow = json_of(&db, &["state", "slow"]);
    assert_eq!(
        (&slow["error"], &slow["status"]),
        (&json!("timed out"), &json!("dead"))
    );
    assert_eq!(std::fs::read_to_string(&seen).unwrap().trim(), "1");
    let pid = std::fs::read_to_string(&pids).unwrap();
    let pid = pid.trim();
    let alive = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    });
    if alive {
        let _ = Command::new("kill").args(["-9", pid]).status();
    }
    assert!(
        !alive,
        "the timed-out program's background process is still running"
    );
    // The line the program wrote was stored while it ran; the bad one was named and skipped.
    let during: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}.talks", seen.display())).unwrap(),
    )
    .unwrap();
    assert_eq!(during["progress"], "1 of 2");
    assert!(
        stderr.contains("progress line ignored: it is not UTF-8 text"),
        "{stderr}"
    );
    assert_eq!(json_of(&db, &["state", "talks"])["result"], "done\n");
}

/// Sixteen processes run the same schedule's pass at the same moment: each due tick is one job,
/// made once, and the schedule's last tick is the newest.
#[test]
fn many_processes_running_one_schedule_at_once_make_one_job_per_tick() {
    let (_dir, db) = fresh_db();
    json_of(
        &db,
        &[
            "schedule",
            "set",
            "race",
            "--cron",
            "* * * * *",
            "--queue",
            "r",
            "--catch-up",
            "all",
            "--now",
            "2026-12-02T05:00:00Z",
        ],
    );
    let runners: Vec<_> = (0..16)
        .map(|_| {
            lease(&db)
                .args([
                    "schedule",
                    "run-due",
                    "--now",
                    "2026-12-02T06:00:00Z",
                    "--json",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map(Reaped::new)
                .unwrap()
        })
        .collect();
    let mut firing = 0;
    for runner in runners {
        let out = runner.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pass: Value = serde_json::from_slice(&out.stdout).unwrap();
        firing += pass["fired"].as_array().unwrap().len();
    }
    assert_eq!(firing, 1, "more than one pass fired the same tick");
    let made = ids(&db, "r");
    assert_eq!(
        made.len(),
        60,
        "one job for each minute from 05:01 to 06:00"
    );
    assert!(made.contains(&"race@2026-12-02T06:00:00Z".to_owned()));
    let listed = json_of(&db, &["schedule", "list"]);
    assert_eq!(listed["schedules"][0]["last_tick"], 1_796_191_200.0);
}

/// Four `lease work` processes of three slots each share a queue limited to two live leases:
/// no program ever sees more than two programs of the queue running, every job is done once,
/// and the limit was reached (so it was what held them back).
#[test]
fn many_workers_against_one_limit_never_hold_more_than_it() {
    let (dir, db) = fresh_db();
    const JOBS: usize = 16;
    for n in 0..JOBS {
        json_of(&db, &["enqueue", &format!("j{n:02}"), "--queue", "q"]);
    }
    json_of(&db, &["limit", "q", "--concurrency", "2"]);
    let running = dir.path().join("running");
    let seen = dir.path().join("seen");
    std::fs::create_dir(&running).unwrap();
    std::fs::create_dir(&seen).unwrap();
    // Each program marks itself running, counts the marks, works a little, and unmarks.
    let program = format!(
        r#"touch {r}/$LEASE_JOB; ls {r} | wc -l > {s}/$LEASE_JOB; sleep 0.3; rm {r}/$LEASE_JOB; echo ok"#,
        r = running.display(),
        s = seen.display()
    );
    let workers: Vec<_> = (0..4)
        .map(|w| {
            lease(&db)
                .args([
                    "work",
                    "--queue",
                    "q",
                    "--owner",
                    &format!("w{w}"),
                    "--ttl",
                    "30",
                    "--concurrency",
                    "3",
                    "--exit-when-empty",
                    "--no-schedules",
                    "--json",
                ])
                .args(["--", "sh", "-c", &program])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map(Reaped::new)
                .unwrap()
        })
        .collect();
    // A worker that finds the queue full (not empty) before the others finish keeps looking
    // only while jobs are due; one that exits early is fine, as long as every job gets done.
    for worker in workers {
        let out = worker.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut counts = Vec::new();
    for entry in std::fs::read_dir(&seen).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        counts.push(text.trim().parse::<usize>().unwrap());
    }
    let stats = json_of(&db, &["stats"]);
    let done = stats["queues"]["q"]["done"].as_u64().unwrap();
    if done < JOBS as u64 {
        // Workers exit when no job is due: with every slot of the limit taken, the rest may
        // remain; finish them with one more worker.
        let out = lease(&db)
            .args([
                "work",
                "--queue",
                "q",
                "--owner",
                "last",
                "--ttl",
                "30",
                "--exit-when-empty",
                "--no-schedules",
            ])
            .args(["--", "sh", "-c", &program])
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    assert_eq!(json_of(&db, &["stats"])["queues"]["q"]["done"], JOBS);
    let most = counts.iter().copied().max().unwrap_or(0);
    assert!(
        most <= 2,
        "{most} programs of a queue limited to 2 ran at once: {counts:?}"
    );
    assert_eq!(
        most, 2,
        "the limit was never reached, so the test shows nothing: {counts:?}"
    );
}

/// `kill -9` of a pass in the middle of a tick of many jobs: the tick is all or nothing (its
/// jobs and the schedule's last tick commit together), and a later pass completes it.
#[test]
fn kill_9_in_the_middle_of_a_tick_leaves_all_of_it_or_none() {
    let (_dir, db) = fresh_db();
    json_of(
        &db,
        &[
            "schedule",
            "set",
            "big",
            "--cron",
            "* * * * *",
            "--queue",
            "r",
            "--catch-up",
            "all:1000",
            "--now",
            "2026-12-01T00:00:00Z",
        ],
    );
    let mut saw_none = false;
    for round in 0..12_u64 {
        let mut pass = lease(&db)
            .args(["schedule", "run-due", "--now", "2026-12-02T00:00:00Z"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Reaped::new)
            .unwrap();
        std::thread::sleep(Duration::from_millis(5 + round * 7));
        let _ = pass.kill();
        let _ = pass.wait();
        let jobs = ids(&db, "r").len();
        let last = json_of(&db, &["schedule", "list"])["schedules"][0]["last_tick"].clone();
        match jobs {
            0 => {
                assert_eq!(
                    last,
                    Value::Null,
                    "the last tick was recorded without its jobs"
                );
                saw_none = true;
            }
            1000 => {
                assert_eq!(
                    last, 1_796_169_600.0,
                    "the jobs were stored without the last tick"
                );
                break;
            }
            n => panic!("a killed tick left {n} of its 1000 jobs"),
        }
    }
    assert!(
        saw_none,
        "no pass was killed before its commit, so the test shows nothing"
    );
    let finish = json_of(
        &db,
        &["schedule", "run-due", "--now", "2026-12-02T00:00:00Z"],
    );
    assert!(finish["fired"].as_array().unwrap().len() <= 1);
    assert_eq!(ids(&db, "r").len(), 1000);
    let again = json_of(
        &db,
        &["schedule", "run-due", "--now", "2026-12-02T00:00:00Z"],
    );
    assert_eq!(again["fired"], json!([]));
}

/// Groups through the binary: `--group` on enqueue, `lease limit --per-group 1 --ordered`,
/// and four `lease work` processes racing over three groups: no two programs of one group ever
/// run at once, each group's jobs run in the order they were enqueued, jobs without a group
/// run beside them, and the program is told its group in `LEASE_GROUP`.
#[test]
fn many_workers_run_each_ordered_group_one_job_at_a_time_in_order() {
    let (dir, db) = fresh_db();
    let groups = ["acct-a", "acct-b", "acct-c"];
    for n in 0..4 {
        for group in groups {
            json_of(
                &db,
                &[
                    "enqueue",
                    &format!("{group}-{n}"),
                    "--queue",
                    "q",
                    "--group",
                    group,
                ],
            );
        }
        json_of(&db, &["enqueue", &format!("free-{n}"), "--queue", "q"]);
    }
    let set = json_of(&db, &["limit", "q", "--per-group", "1", "--ordered"]);
    assert_eq!(
        (&set["per_group"], &set["ordered"]),
        (&json!(1), &json!(true))
    );
    let record = json_of(&db, &["state", "acct-b-2"]);
    assert_eq!(record["group"], "acct-b");
    let running = dir.path().join("running");
    let seen = dir.path().join("seen");
    std::fs::create_dir(&running).unwrap();
    std::fs::create_dir(&seen).unwrap();
    // Each program marks itself running in its group, counts its group's marks, appends its
    // job to its group's order, works a little, and unmarks.
    let program = format!(
        r#"g=${{LEASE_GROUP:-none}}; touch {r}/$g.$LEASE_JOB; ls {r} | grep -c "^$g\." >> {s}/count.$g; echo $LEASE_JOB >> {s}/order.$g; sleep 0.2; rm {r}/$g.$LEASE_JOB; echo ok"#,
        r = running.display(),
        s = seen.display()
    );
    let work = |owner: &str| {
        lease(&db)
            .args([
                "work",
                "--queue",
                "q",
                "--owner",
                owner,
                "--ttl",
                "30",
                "--concurrency",
                "3",
                "--exit-when-empty",
                "--no-schedules",
            ])
            .args(["--", "sh", "-c", &program])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map(Reaped::new)
            .unwrap()
    };
    let workers: Vec<_> = (0..4).map(|w| work(&format!("w{w}"))).collect();
    for worker in workers {
        let out = worker.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A worker exits when nothing is due, which a held group can make early: finish the rest.
    for _ in 0..16 {
        if json_of(&db, &["stats"])["queues"]["q"]["done"] == 16 {
            break;
        }
        let out = work("last").wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(json_of(&db, &["stats"])["queues"]["q"]["done"], 16);
    for group in groups {
        let counts = std::fs::read_to_string(seen.join(format!("count.{group}"))).unwrap();
        assert!(
            counts.lines().all(|c| c.trim() == "1"),
            "two programs of {group} ran at once: {counts:?}"
        );
        let order = std::fs::read_to_string(seen.join(format!("order.{group}"))).unwrap();
        let expected: Vec<String> = (0..4).map(|n| format!("{group}-{n}")).collect();
        assert_eq!(
            order.lines().collect::<Vec<_>>(),
            expected,
            "{group} ran out of order"
        );
    }
    let free = std::fs::read_to_string(seen.join("count.none")).unwrap();
    assert_eq!(free.lines().count(), 4, "jobs without a group: {free:?}");
    // Bad values are refused, naming the flag, and change nothing.
    refused(&run(&db, &["enqueue", "x", "--group", ""]), "--group");
    let long = "g".repeat(1025);
    refused(&run(&db, &["enqueue", "x", "--group", &long]), "--group");
    refused(
        &run(&db, &["limit", "q", "--ordered", "--unordered"]),
        "not both",
    );
    let bad = run(&db, &["limit", "q", "--per-group", "-1"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--per-group"));
    assert_eq!(json_of(&db, &["state", "x"]), Value::Null);
    let kept = json_of(&db, &["stats"])["settings"]["q"].clone();
    assert_eq!(
        (&kept["per_group"], &kept["ordered"]),
        (&json!(1), &json!(true))
    );
    json_of(&db, &["limit", "q", "--per-group", "0", "--unordered"]);
    assert_eq!(json_of(&db, &["stats"])["settings"], json!({}));
}

/// `lease limit --fair` through the binary: a group enqueued after another's backlog is
/// served by the next claim (claim order would serve the backlog first), `stats` says so,
/// both flags at once are refused and change nothing, and `--no-fair` goes back to claim
/// order.
#[test]
fn a_fair_queue_serves_a_late_group_before_an_earlier_backlog_from_the_cli() {
    let (_dir, db) = fresh_db();
    for n in 0..5 {
        json_of(
            &db,
            &[
                "enqueue",
                &format!("big{n}"),
                "--queue",
                "q",
                "--group",
                "big",
            ],
        );
    }
    // One claim of one lease: the id it leased.
    let claim = || {
        let leases = json_of(&db, &claim_args("q", "w", "60", &[]));
        leases["leases"][0]["id"].as_str().unwrap().to_owned()
    };
    assert_eq!(json_of(&db, &["limit", "q", "--fair"])["fair"], true);
    assert_eq!(claim(), "big0");
    json_of(
        &db,
        &["enqueue", "small0", "--queue", "q", "--group", "small"],
    );
    json_of(
        &db,
        &["enqueue", "small1", "--queue", "q", "--group", "small"],
    );
    assert_eq!(claim(), "small0");
    assert_eq!(claim(), "big1");
    let words = String::from_utf8_lossy(&run(&db, &["stats"]).stdout).into_owned();
    assert!(words.contains("groups served in turn"), "{words}");
    refused(
        &run(&db, &["limit", "q", "--fair", "--no-fair"]),
        "not both",
    );
    assert_eq!(json_of(&db, &["stats"])["settings"]["q"]["fair"], true);
    assert_eq!(json_of(&db, &["limit", "q", "--no-fair"])["fair"], false);
    assert_eq!(json_of(&db, &["stats"])["settings"], json!({}));
    assert_eq!(claim(), "big2");
}

/// `lease groups QUEUE`: the busiest groups first, each with its jobs waiting and running and
/// whether it is paused, in words and as JSON; `--limit` keeps the busiest, a bad one is
/// refused naming the flag.
#[test]
fn lease_groups_lists_the_busiest_groups_waiting_running_and_paused() {
    let (_dir, db) = fresh_db();
    for (id, group) in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a")] {
        json_of(&db, &["enqueue", id, "--queue", "q", "--group", group]);
    }
    json_of(&db, &["enqueue", "free", "--queue", "q"]);
    json_of(&db, &claim_args("q", "w", "600", &[]));
    json_of(&db, &["pause", "q", "--group", "b"]);
    let shown = json_of(&db, &["groups", "q"]);
    assert_eq!(
        shown,
        json!({"queue": "q", "groups": [
            {"group": "a", "backlog": 2, "running": 1, "paused": false, "paused_until": null,
             "throttled_until": null},
            {"group": "b", "backlog": 1, "running": 0, "paused": true, "paused_until": null,
             "throttled_until": null},
        ]})
    );
    let words =
        String::from_utf8_lossy(&run(&db, &["groups", "q", "--limit", "1"]).stdout).into_owned();
    assert_eq!(words, "a: 2 waiting, 1 running\n");
    let bad = run(&db, &["groups", "q", "--limit", "0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--limit"));
    let none = run(&db, &["groups", "other"]);
    assert!(String::from_utf8_lossy(&none.stdout).contains("no group has unfinished jobs"));
}

/// `lease enqueue --debounce`: the job is due the debounce from now; enqueueing its id again
/// while it waits replaces its payload and pushes it (answered "inserted": false); once it
/// has been leased it is left alone; a bad value is refused naming the flag.
#[test]
fn a_debounced_enqueue_pushes_a_waiting_job_and_leaves_a_leased_one() {
    let (_dir, db) = fresh_db();
    let first = json_of(
        &db,
        &["enqueue", "d", "--debounce", "100", "--payload", "one"],
    );
    assert_eq!(first["inserted"], true);
    let due = json_of(&db, &["state", "d"])["run_at"].as_f64().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let again = json_of(
        &db,
        &["enqueue", "d", "--debounce", "100", "--payload", "two"],
    );
    assert_eq!(again["inserted"], false, "a debounce inserted a job");
    let state = json_of(&db, &["state", "d"]);
    let pushed = state["run_at"].as_f64().unwrap();
    assert!(
        pushed > due,
        "the due time {pushed} was not pushed past {due}"
    );
    assert_eq!(state["payload"], "two");
    let early = format!("{}", due - 50.0);
    assert_eq!(
        run(
            &db,
            &["claim-next", "--owner", "w", "--ttl", "5", "--now", &early]
        )
        .status
        .code(),
        Some(3),
        "a debounced job was leased before it was due"
    );
    let late = format!("{}", pushed + 1.0);
    let claim = json_of(
        &db,
        &["claim-next", "--owner", "w", "--ttl", "500", "--now", &late],
    );
    assert_eq!(claim["leases"][0]["id"], "d");
    json_of(
        &db,
        &["enqueue", "d", "--debounce", "100", "--payload", "three"],
    );
    assert_eq!(
        json_of(&db, &["state", "d"])["payload"],
        "two",
        "a leased job changed"
    );
    for bad in ["-1", "0"] {
        refused(
            &run(&db, &["enqueue", "x", "--debounce", bad]),
            "--debounce",
        );
    }
    let word = run(&db, &["enqueue", "x", "--debounce", "five"]);
    assert_eq!(word.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&word.stderr).contains("--debounce"));
    assert_eq!(json_of(&db, &["state", "x"]), Value::Null);
}

/// `lease pause QUEUE --group G` holds back that group's jobs while the queue's other groups
/// run; `stats` shows it; `lease resume QUEUE --group G` lets it run again; an empty group is
/// refused, naming the flag, and changes nothing.
#[test]
fn one_group_is_paused_and_resumed_while_the_others_run() {
    let (_dir, db) = fresh_db();
    for (id, group) in [("a1", "acct-a"), ("b1", "acct-b")] {
        json_of(&db, &["enqueue", id, "--queue", "q", "--group", group]);
    }
    let paused = json_of(&db, &["pause", "q", "--group", "acct-a"]);
    assert_eq!(paused["paused"], false, "{paused}");
    assert_eq!(
        paused["paused_groups"],
        json!([{"group": "acct-a", "until": null}])
    );
    let human = String::from_utf8(run(&db, &["stats"]).stdout).unwrap();
    assert!(human.contains("group acct-a paused"), "{human}");
    let claim = json_of(&db, &claim_args("q", "w", "60", &["--limit", "5"]));
    let leased: Vec<&str> = claim["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert_eq!(leased, ["b1"]);
    refused(&run(&db, &["pause", "q", "--group", ""]), "--group");
    let resumed = json_of(&db, &["resume", "q", "--group", "acct-a"]);
    assert_eq!(resumed["paused_groups"], json!([]));
    let claim = json_of(&db, &claim_args("q", "w", "60", &["--limit", "5"]));
    assert_eq!(claim["leases"][0]["id"], "a1");
    assert_eq!(json_of(&db, &["stats"])["settings"], json!({}));
}

/// `lease limit --rate N/PERIOD` and `--rate-per-group`: shown by `stats`, kept by every claim
/// (a claim-next that gets nothing because of it exits 3 and says until when), removed with
/// `none`; bad rates refused naming the flag, with nothing changed.
#[test]
fn a_rate_is_set_kept_by_claim_next_said_and_removed_from_the_cli() {
    let (_dir, db) = fresh_db();
    for n in 0..4 {
        json_of(&db, &["enqueue", &format!("r{n}"), "--queue", "q"]);
    }
    for (flag, bad, says) in [
        ("--rate", "0/1s", "count"),
        ("--rate", "5/0s", "more than 0"),
        ("--rate", "five/1s", "whole number"),
        ("--rate", "5", "N/PERIOD"),
        ("--rate-per-group", "-3/1m", "whole number"),
    ] {
        refused(
            &run(&db, &["limit", "q", flag, bad, "--per-group", "1"]),
            flag,
        );
        let out = run(&db, &["limit", "q", flag, bad]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(err.contains(says), "{flag} {bad}: {err}");
    }
    assert_eq!(json_of(&db, &["stats"])["settings"], json!({}));
    let set = json_of(
        &db,
        &["limit", "q", "--rate", "2/1h", "--rate-per-group", "5/1m"],
    );
    assert_eq!(
        (&set["rate"], &set["rate_per_group"]),
        (&json!("2/1h"), &json!("5/1m"))
    );
    let human = String::from_utf8(run(&db, &["stats"]).stdout).unwrap();
    assert!(human.contains("at most 2/1h lease(s)"), "{human}");
    let claim = |limit: &str| {
        run(
            &db,
            &claim_args("q", "w", "60", &["--limit", limit, "--json"]),
        )
    };
    let first = claim("5");
    assert!(first.status.success(), "{first:?}");
    let leases: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(leases["leases"].as_array().unwrap().len(), 2);
    let held = claim("5");
    assert_eq!(held.status.code(), Some(3), "nothing leased exits 3");
    let answer: Value = serde_json::from_slice(&held.stdout).unwrap();
    assert_eq!(answer["leases"], json!([]));
    assert!(answer["throttled_until"].as_f64().is_some(), "{answer}");
    let said = run(&db, &claim_args("q", "w", "60", &[]));
    let said = String::from_utf8_lossy(&said.stdout).into_owned();
    assert!(said.contains("its rate lets the next lease at"), "{said}");
    let removed = json_of(
        &db,
        &["limit", "q", "--rate", "none", "--rate-per-group", "none"],
    );
    assert_eq!(removed["rate"], Value::Null);
    let after = claim("5");
    assert!(after.status.success(), "{after:?}");
    let leases: Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(leases["leases"].as_array().unwrap().len(), 2);
    assert_eq!(json_of(&db, &["stats"])["settings"], json!({}));
}

/// `lease hold-group JOB --owner O --fence N --until T`: the live holder pauses its job's
/// group until T (the queue's other groups run); a stale holder, or a job without a group,
/// exits 3 and pauses nothing; a bad `--until` is refused naming it.
#[test]
fn a_holder_holds_its_jobs_group_from_the_cli_and_a_stale_one_cannot() {
    let (_dir, db) = fresh_db();
    for (id, group) in [("a1", "acct-a"), ("a2", "acct-a"), ("b1", "acct-b")] {
        json_of(&db, &["enqueue", id, "--queue", "q", "--group", group]);
    }
    json_of(&db, &["enqueue", "x", "--queue", "q"]);
    let claimed = json_of(&db, &["claim", "a1", "--owner", "w", "--ttl", "600"]);
    let fence = claimed["fence"].as_u64().unwrap().to_string();
    let hold = |fence: &str, job: &str, until: &str| {
        run(
            &db,
            &[
                "hold-group",
                job,
                "--owner",
                "w",
                "--fence",
                fence,
                "--until",
                until,
                "--json",
            ],
        )
    };
    let stale = hold("7", "a1", "4102444800");
    assert_eq!(stale.status.code(), Some(3), "{stale:?}");
    assert!(String::from_utf8_lossy(&stale.stdout).contains("\"ok\":false"));
    assert_eq!(
        json_of(&db, &["stats"])["settings"],
        json!({}),
        "a stale hold paused"
    );
    // A time that cannot be read is a usage error (exit 2), as for every time flag.
    let unreadable = hold(&fence, "a1", "soon");
    assert_eq!(unreadable.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unreadable.stderr).contains("--until"));
    let held = hold(&fence, "a1", "2100-01-01T00:00:00Z");
    assert!(held.status.success(), "{held:?}");
    let answer: Value = serde_json::from_slice(&held.stdout).unwrap();
    assert_eq!(answer["until"], json!(4_102_444_800.0));
    let settings = json_of(&db, &["stats"])["settings"]["q"].clone();
    assert_eq!(
        settings["paused_groups"],
        json!([{"group": "acct-a", "until": 4_102_444_800.0}])
    );
    let claim = json_of(&db, &claim_args("q", "w", "60", &["--limit", "5"]));
    let mut leased: Vec<&str> = claim["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    leased.sort_unstable();
    assert_eq!(leased, ["b1", "x"]);
    let x_fence = claim["leases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["id"] == "x")
        .unwrap()["fence"]
        .to_string();
    let lonely = hold(&x_fence, "x", "4102444800");
    assert_eq!(lonely.status.code(), Some(3));
    let said = String::from_utf8_lossy(&lonely.stderr).into_owned()
        + &String::from_utf8_lossy(&lonely.stdout);
    assert!(said.contains("no group"), "{said}");
}

/// `lease work` gives its program `LEASE_HOLD_GROUP`, a FIFO: a line of seconds written to it
/// (what an upstream's `Retry-After` says) holds the job's group that long under the lease's
/// fence; the group's other job then waits while the rest of the queue runs, and a line that
/// is not a number of seconds is named on stderr and skipped.
#[test]
fn a_work_program_holds_its_group_through_the_hold_line_protocol() {
    let (_dir, db) = fresh_db();
    json_of(
        &db,
        &["enqueue", "m1", "--queue", "q", "--group", "merchant-9"],
    );
    json_of(
        &db,
        &["enqueue", "m2", "--queue", "q", "--group", "merchant-9"],
    );
    json_of(
        &db,
        &["enqueue", "o1", "--queue", "q", "--group", "merchant-1"],
    );
    let program = r#"if [ "$LEASE_JOB" = m1 ]; then echo soon > "$LEASE_HOLD_GROUP"; echo 3600 > "$LEASE_HOLD_GROUP"; echo 'upstream said 429' >&2; exit 1; fi; echo ok"#;
    let out = lease(&db)
        .args([
            "work",
            "--queue",
            "q",
            "--owner",
            "w",
            "--ttl",
            "30",
            "--concurrency",
            "1",
            "--exit-when-empty",
            "--no-schedules",
        ])
        .args(["--", "sh", "-c", program])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("hold line ignored"), "{stderr}");
    let settings = json_of(&db, &["stats"])["settings"]["q"].clone();
    let held = &settings["paused_groups"];
    assert_eq!(held[0]["group"], "merchant-9", "{settings}");
    assert!(
        held[0]["until"].as_f64().unwrap() > 3000.0 + 1.7e9,
        "{settings}"
    );
    assert_eq!(json_of(&db, &["state", "m2"])["status"], "pending");
    assert_eq!(json_of(&db, &["state", "o1"])["status"], "done");
}

/// `lease work` gives a job with parents `LEASE_PARENTS_FILE`, a JSON file of each parent's
/// status, result and fence; a job without parents gets no such variable; the child runs only
/// after both parents completed.
#[test]
fn a_work_program_reads_its_parents_results_from_lease_parents_file() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "left", "--queue", "w", "--payload", "2"]);
    json_of(&db, &["enqueue", "right", "--queue", "w", "--payload", "3"]);
    json_of(
        &db,
        &[
            "enqueue", "sum", "--queue", "w", "--after", "left", "--after", "right",
        ],
    );
    // Parents print their payload times ten; the child prints its parents file as it got it.
    let program = r#"if [ -n "$LEASE_PARENTS_FILE" ]; then cat "$LEASE_PARENTS_FILE"; else echo "$(( $(cat) * 10 ))"; fi"#;
    let out = lease(&db)
        .args([
            "work",
            "--queue",
            "w",
            "--owner",
            "w",
            "--ttl",
            "30",
            "--concurrency",
            "1",
            "--exit-when-empty",
            "--no-schedules",
        ])
        .args(["--", "sh", "-c", program])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json_of(&db, &["state", "left"])["result"], "20\n");
    let sum = json_of(&db, &["state", "sum"]);
    assert_eq!(sum["status"], "done", "{sum}");
    let parents: serde_json::Value = serde_json::from_str(sum["result"].as_str().unwrap()).unwrap();
    assert_eq!(
        parents,
        serde_json::json!({
            "left": {"status": "done", "result": "20\n", "result_fence": 1},
            "right": {"status": "done", "result": "30\n", "result_fence": 1},
        })
    );
}

/// `lease work` gives every program `LEASE_CHECKPOINTS_FILE` (the steps earlier attempts
/// kept, `{}` for none) and `LEASE_CHECKPOINT`, a FIFO of `NAME=VALUE` or JSON lines, each kept
/// under the lease's fence before the run's end is written: a retried job resumes after the
/// step its failed attempt kept, and a bad line is named on stderr and skipped.
#[test]
fn a_work_program_resumes_from_the_checkpoints_its_failed_attempt_kept() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "etl", "--queue", "w"]);
    let program = r#"
        seen=$(cat "$LEASE_CHECKPOINTS_FILE")
        case "$seen" in
            *extract*) ;;
            *) echo "extract=rows of attempt $LEASE_ATTEMPT" > "$LEASE_CHECKPOINT" ;;
        esac
        if [ "$LEASE_ATTEMPT" = 1 ]; then
            printf '%s\n' '{"name": "a=b", "value": "two\nlines"}' > "$LEASE_CHECKPOINT"
            echo 'no equals sign' > "$LEASE_CHECKPOINT"
            exit 1
        fi
        printf '%s' "$seen"
    "#;
    let work = || {
        lease(&db)
            .args([
                "work",
                "--queue",
                "w",
                "--owner",
                "w",
                "--ttl",
                "30",
                "--max-jobs",
                "1",
                "--no-schedules",
            ])
            .args(["--", "sh", "-c", program])
            .output()
            .unwrap()
    };
    let first = work();
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(stderr.contains("checkpoint line ignored"), "{stderr}");
    let state = json_of(&db, &["state", "etl"]);
    assert_eq!(state["status"], "pending", "{state}");
    assert_eq!(
        state["checkpoints"],
        serde_json::json!({"a=b": "two\nlines", "extract": "rows of attempt 1"})
    );
    let second = work();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let state = json_of(&db, &["state", "etl"]);
    assert_eq!(state["status"], "done", "{state}");
    let seen: serde_json::Value = serde_json::from_str(state["result"].as_str().unwrap()).unwrap();
    assert_eq!(
        seen,
        serde_json::json!({"a=b": "two\nlines", "extract": "rows of attempt 1"}),
        "the second attempt saw the first's steps and kept no new extract"
    );
}

#[test]
fn the_checkpoint_command_keeps_a_holders_steps_under_its_fence() {
    let (_dir, db) = fresh_db();
    checkpoint_cli::the_checkpoint_command_keeps_a_holders_steps_under_its_fence(
        db.to_str().unwrap(),
    );
}

#[test]
fn enqueue_keeps_the_trace_context_of_its_environment() {
    let (_dir, db) = fresh_db();
    trace_cli::enqueue_keeps_the_trace_context_of_its_environment(db.to_str().unwrap());
}

#[test]
fn a_program_gets_its_jobs_trace_context_without_an_exporter() {
    let (_dir, db) = fresh_db();
    trace_cli::a_program_gets_its_jobs_trace_context_without_an_exporter(db.to_str().unwrap());
}

#[test]
fn a_dead_job_is_cancelled_keeping_its_error_and_frees_its_ordered_group() {
    let (_dir, db) = fresh_db();
    ordered_cli::a_dead_job_is_cancelled_keeping_its_error_and_frees_its_ordered_group(
        db.to_str().unwrap(),
    );
}

/// The files `lease work` writes for a run (its parents and checkpoints) are removed when
/// the run ends: each program sees only its own beside its FIFOs, however many ran before.
#[test]
fn a_work_runs_files_are_removed_when_it_ends() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["enqueue", "p", "--queue", "w"]);
    json_of(&db, &["enqueue", "a", "--queue", "w", "--after", "p"]);
    json_of(&db, &["enqueue", "b", "--queue", "w", "--after", "p"]);
    let program = r#"ls "$(dirname "$LEASE_CHECKPOINTS_FILE")" | grep -c '\.json$'"#;
    let out = lease(&db)
        .args([
            "work",
            "--queue",
            "w",
            "--owner",
            "w",
            "--ttl",
            "30",
            "--concurrency",
            "1",
            "--exit-when-empty",
            "--no-schedules",
        ])
        .args(["--", "sh", "-c", program])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // p has its checkpoints file; a and b have theirs and their parents file, and nothing more.
    for (id, files) in [("p", "1\n"), ("a", "2\n"), ("b", "2\n")] {
        assert_eq!(json_of(&db, &["state", id])["result"], files, "{id}");
    }
}

/// A full group's backlog ahead in claim order is passed by a claim of another group (through
/// the group heads), and `lease heads` checks the heads, says which group a claim could pass
/// by when one is astray (exit 3, as a check that does not pass), and `--rebuild` mends them.
#[test]
fn a_claim_passes_a_full_groups_backlog_and_lease_heads_checks_and_rebuilds_them() {
    let (_dir, db) = fresh_db();
    json_of(&db, &["limit", "q", "--per-group", "1"]);
    for n in 0..30 {
        json_of(
            &db,
            &[
                "enqueue",
                &format!("big-{n:02}"),
                "--queue",
                "q",
                "--group",
                "big",
            ],
        );
    }
    json_of(
        &db,
        &["enqueue", "small", "--queue", "q", "--group", "small"],
    );
    let first = json_of(&db, &claim_args("q", "w", "100", &["--now", "10"]));
    assert_eq!(first["leases"][0]["id"], "big-00");
    let second = json_of(&db, &claim_args("q", "w", "100", &["--now", "11"]));
    assert_eq!(
        second["leases"][0]["id"], "small",
        "big is full: its backlog is passed"
    );
    let sound = json_of(&db, &["heads"]);
    assert_eq!(sound["ok"], true, "{sound}");
    assert_eq!(sound["heads"], 1, "only big has ready jobs: {sound}");
    assert_eq!(sound["stray"], json!([]));

    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("DELETE FROM lease_group_heads", []).unwrap();
    drop(conn);
    let out = lease(&db).args(["heads", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "a stray head is not ok");
    let stray: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stray["stray"], json!([{"queue": "q", "group": "big"}]));
    let text = run(&db, &["heads"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("q/big"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    let rebuilt = json_of(&db, &["heads", "--rebuild"]);
    assert_eq!(
        (rebuilt["ok"].clone(), rebuilt["heads"].clone()),
        (json!(true), json!(1))
    );
    assert_eq!(json_of(&db, &["heads"])["stray"], json!([]));
}
