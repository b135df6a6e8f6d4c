//! The `lease` binary against PostgreSQL: every command through a `postgres://` URL (or `PG*`
//! variables), several `lease work` processes sharing one queue, and `lease migrate` between
//! SQLite and PostgreSQL, which never lets a fence be handed out twice. Each test makes its own
//! database and drops it.

use crate::checkpoint_cli;
use crate::ordered_cli;
use crate::stdin;
use crate::trace_cli;

use crate::reaped;
use reaped::Reaped;
use std::path::Path;
use std::process::{Command, Output};

use lease_postgres::ScratchDatabase;
use serde_json::Value;

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

fn lease(db: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command.arg("--db").arg(db).env_remove("LEASE_DB");
    command
}

fn run(db: &str, args: &[&str]) -> Output {
    lease(db).args(args).output().unwrap()
}

fn json_of(db: &str, args: &[&str]) -> Value {
    let out = lease(db).args(args).arg("--json").output().unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// `lease ARGS` with `lines` on its stdin, one a line.
fn fed(db: &str, args: &[&str], lines: &[String]) -> Output {
    stdin::fed(lease(db).args(args), lines.join("\n").as_bytes())
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_stale_worker_story_through_the_cli_on_postgres() {
    let db = ScratchDatabase::create();
    let url = db.url();
    let before = run(url, &["state", "j"]);
    assert_eq!(before.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&before.stderr).contains("init"));
    ok(&run(url, &["init"]));
    ok(&run(url, &["init"]));
    ok(&run(url, &["enqueue", "j"]));
    let a = json_of(
        url,
        &["claim", "j", "--owner", "A", "--ttl", "10", "--now", "100"],
    );
    assert_eq!(a["fence"], 1);
    let b = json_of(
        url,
        &["claim", "j", "--owner", "B", "--ttl", "10", "--now", "111"],
    );
    assert_eq!(b["fence"], 2);
    ok(&run(
        url,
        &[
            "complete", "j", "--owner", "B", "--fence", "2", "--now", "112", "--result", "B's",
        ],
    ));
    let late = run(
        url,
        &[
            "complete", "j", "--owner", "A", "--fence", "1", "--now", "113", "--result", "A's",
        ],
    );
    assert_eq!(late.status.code(), Some(3), "a refused write exits 3");
    let state = json_of(url, &["state", "j"]);
    assert_eq!(
        (state["result"].as_str(), state["fence"].as_u64()),
        (Some("B's"), Some(2))
    );
}

#[test]
fn lease_db_and_pg_variables_name_the_database() {
    let db = ScratchDatabase::create();
    let out = Command::new(env!("CARGO_BIN_EXE_lease"))
        .args(["init"])
        .env("LEASE_DB", "postgres://")
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", "5432")
        .env("PGUSER", "postgres")
        .env("PGDATABASE", db.name())
        .output()
        .unwrap();
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains(db.name()));
    // The same database by its URL: init made the schema there.
    ok(&run(db.url(), &["enqueue", "seen"]));
    assert_eq!(json_of(db.url(), &["state", "seen"])["status"], "pending");
}

#[test]
fn several_worker_processes_share_one_postgres_queue() {
    let db = ScratchDatabase::create();
    let url = db.url();
    ok(&run(url, &["init"]));
    for i in 0..30 {
        ok(&run(url, &["enqueue", &format!("job-{i}"), "--queue", "q"]));
    }
    let spawned: Vec<Reaped> = (0..3)
        .map(|w| {
            lease(url)
                .args([
                    "work",
                    "--queue",
                    "q",
                    "--owner",
                    &format!("w{w}"),
                    "--ttl",
                    "10",
                    "--json",
                ])
                .args([
                    "--exit-when-empty",
                    "--",
                    "sh",
                    "-c",
                    r#"printf '%s:%s' "$LEASE_JOB" "$LEASE_FENCE""#,
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map(Reaped::new)
                .unwrap()
        })
        .collect();
    let mut completed = 0;
    for child in spawned {
        let out = child.wait_with_output().unwrap();
        ok(&out);
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        completed += summary["completed"].as_u64().unwrap();
    }
    assert_eq!(completed, 30, "each job completed by exactly one worker");
    for i in 0..30 {
        let state = json_of(url, &["state", &format!("job-{i}")]);
        assert_eq!(state["status"], "done", "{state}");
        assert_eq!(
            state["result"],
            format!("job-{i}:{}", state["result_fence"]),
            "{state}"
        );
    }
}

fn sqlite(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

#[test]
fn migrate_carries_every_fence_forward_both_ways_and_never_reissues_one() {
    let dir = tempfile::tempdir().unwrap();
    let first = sqlite(dir.path(), "first.db");
    ok(&run(&first, &["init"]));
    for job in ["a", "b", "c"] {
        ok(&run(&first, &["enqueue", job]));
    }
    // a: fence 2, released; b: done with fence 1; c: claimed (fence 1), cancelled, purged.
    json_of(
        &first,
        &["claim", "a", "--owner", "w", "--ttl", "5", "--now", "1"],
    );
    ok(&run(
        &first,
        &["release", "a", "--owner", "w", "--fence", "1"],
    ));
    json_of(
        &first,
        &["claim", "a", "--owner", "w", "--ttl", "5", "--now", "2"],
    );
    ok(&run(
        &first,
        &["release", "a", "--owner", "w", "--fence", "2"],
    ));
    json_of(
        &first,
        &["claim", "b", "--owner", "w", "--ttl", "5", "--now", "3"],
    );
    ok(&run(
        &first,
        &[
            "complete", "b", "--owner", "w", "--fence", "1", "--now", "4", "--result", "kept",
        ],
    ));
    json_of(
        &first,
        &["claim", "c", "--owner", "w", "--ttl", "5", "--now", "5"],
    );
    ok(&run(&first, &["cancel", "c", "--now", "6"]));
    ok(&run(
        &first,
        &["purge", "--before", "100", "--status", "cancelled"],
    ));

    let pg = ScratchDatabase::create();
    let summary = json_of(&first, &["migrate", "--from", &first, "--to", pg.url()]);
    assert_eq!(
        (summary["copied"].as_u64(), summary["purge_marks"].as_u64()),
        (Some(2), Some(1)),
        "{summary}"
    );
    assert_eq!(summary["verified"], true);
    let b = json_of(pg.url(), &["state", "b"]);
    assert_eq!(
        (b["result"].as_str(), b["result_fence"].as_u64()),
        (Some("kept"), Some(1))
    );
    // On PostgreSQL the next fences are above every fence SQLite handed out.
    assert_eq!(
        json_of(
            pg.url(),
            &["claim", "a", "--owner", "x", "--ttl", "5", "--now", "10"]
        )["fence"],
        3
    );
    ok(&run(pg.url(), &["enqueue", "c"]));
    assert_eq!(
        json_of(
            pg.url(),
            &["claim", "c", "--owner", "x", "--ttl", "5", "--now", "10"]
        )["fence"],
        2
    );

    // Back to a new SQLite file, which then continues from PostgreSQL's fences.
    let back = sqlite(dir.path(), "back.db");
    ok(&run(&back, &["migrate", "--from", pg.url(), "--to", &back]));
    assert_eq!(
        json_of(
            &back,
            &["claim", "a", "--owner", "y", "--ttl", "5", "--now", "20"]
        )["fence"],
        4
    );
    assert_eq!(
        json_of(
            &back,
            &["claim", "c", "--owner", "y", "--ttl", "5", "--now", "20"]
        )["fence"],
        3
    );
    assert_eq!(json_of(&back, &["state", "b"])["result"], "kept");

    // A non-empty target is refused and left as it is; with --merge the larger fence wins.
    let refused = run(&first, &["migrate", "--from", &back, "--to", pg.url()]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--merge"));
    assert_eq!(
        json_of(pg.url(), &["state", "a"])["fence"],
        3,
        "the refused migration changed nothing"
    );
    let merged = json_of(
        &first,
        &["migrate", "--from", &back, "--to", pg.url(), "--merge"],
    );
    let kept: Vec<(String, String)> = merged["merged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["job"].as_str().unwrap().to_owned(),
                m["kept"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        kept.contains(&("a".to_owned(), "source".to_owned())),
        "{merged}"
    );
    assert!(
        kept.contains(&("b".to_owned(), "target".to_owned())),
        "{merged}"
    );
    assert_eq!(json_of(pg.url(), &["state", "a"])["fence"], 4);
    assert_eq!(
        json_of(
            pg.url(),
            &["claim", "a", "--owner", "z", "--ttl", "5", "--now", "30"]
        )["fence"],
        5
    );
}

#[test]
fn migrate_into_itself_or_from_nothing_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = sqlite(dir.path(), "one.db");
    ok(&run(&file, &["init"]));
    let same = run(&file, &["migrate", "--from", &file, "--to", &file]);
    assert_eq!(same.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&same.stderr).contains("itself"));
    let missing = sqlite(dir.path(), "missing.db");
    let out = run(
        &file,
        &[
            "migrate",
            "--from",
            &missing,
            "--to",
            &sqlite(dir.path(), "new.db"),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.db"));
    assert!(
        !dir.path().join("new.db").exists(),
        "nothing is created when the source is missing"
    );
}

#[test]
fn pgconnect_timeout_bounds_the_whole_connect_to_a_server_that_never_answers() {
    // A listener that accepts the connection and then says nothing, as a hung server would.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming().take(4) {
            open.push(stream);
        }
        std::thread::sleep(std::time::Duration::from_secs(20));
        drop(open);
    });
    let url = format!("postgres://postgres@127.0.0.1:{port}/nowhere");
    let started = std::time::Instant::now();
    let out = lease(&url)
        .env("PGCONNECT_TIMEOUT", "1")
        .args(["state", "j"])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("connect timeout"), "{stderr}");
    // Loosely: the 1 s bound, not the fixed 15 s of the pool, ended the wait.
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
    drop(held);
}

#[test]
fn init_on_a_missing_postgres_database_says_to_create_the_database() {
    let db = ScratchDatabase::create();
    let url = format!("{}_missing", db.url());
    let out = run(&url, &["init"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(stderr.contains("createdb"), "{stderr}");
    assert!(!stderr.contains("create it with init"), "{stderr}");
}

#[test]
fn enqueue_many_on_postgres_inserts_each_new_id_once_in_transactions_of_a_thousand() {
    let db = ScratchDatabase::create();
    let url = db.url();
    ok(&run(url, &["init"]));
    ok(&run(url, &["enqueue", "job-5"]));
    let ids: Vec<String> = (0..1_500).map(|n| format!("job-{n}")).collect();
    let out = fed(url, &["enqueue-many", "--queue", "bulk", "--json"], &ids);
    ok(&out);
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer, serde_json::json!({"inserted": 1_499, "existed": 1}));
    let stats = json_of(url, &["stats", "--now", "0"]);
    assert_eq!(stats["queues"]["bulk"]["pending"], 1_499, "{stats}");
    assert_eq!(stats["queues"]["default"]["pending"], 1, "{stats}");
}

/// A workflow of 1,500 jobs on PostgreSQL through the CLI, stored whole (one transaction,
/// though more than `enqueue-many`'s thousand a transaction) with its root named last: the
/// children wait, the root's completion by its holder releases them all, and a stale
/// completion of the root by an earlier holder releases nothing.
#[test]
fn a_workflow_on_postgres_is_stored_whole_and_released_by_its_current_holder_only() {
    let db = ScratchDatabase::create();
    let url = db.url();
    ok(&run(url, &["init"]));
    let mut lines: Vec<String> = (0..1_500)
        .map(|n| format!("{{\"id\": \"child-{n}\", \"after\": [\"root\"]}}"))
        .collect();
    lines.push("{\"id\": \"root\"}".to_owned());
    ok(&fed(
        url,
        &["enqueue-many", "--json-lines", "--queue", "flow"],
        &lines,
    ));
    let stats = json_of(url, &["stats", "--now", "0"]);
    assert_eq!(stats["queues"]["flow"]["waiting"], 1_500, "{stats}");
    let first = json_of(
        url,
        &claim_args("flow", "a", "10", &["--now", "1", "--limit", "5"]),
    );
    assert_eq!(first["leases"].as_array().unwrap().len(), 1, "{first}");
    assert_eq!(first["leases"][0]["id"], "root");
    // The lease ends at 11; b takes the job over; a's completion comes too late.
    let second = json_of(url, &claim_args("flow", "b", "10", &["--now", "20"]));
    assert_eq!(second["leases"][0]["fence"], 2, "{second}");
    let stale = run(
        url,
        &[
            "complete", "root", "--owner", "a", "--fence", "1", "--result", "r", "--now", "21",
        ],
    );
    assert_eq!(
        stale.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&stale.stderr)
    );
    let stats = json_of(url, &["stats", "--now", "21"]);
    assert_eq!(stats["queues"]["flow"]["waiting"], 1_500, "{stats}");
    ok(&run(
        url,
        &[
            "complete", "root", "--owner", "b", "--fence", "2", "--result", "r", "--now", "22",
        ],
    ));
    let stats = json_of(url, &["stats", "--now", "23"]);
    assert_eq!(stats["queues"]["flow"]["waiting"], 0, "{stats}");
    assert_eq!(stats["queues"]["flow"]["pending"], 1_500, "{stats}");
    let child = json_of(url, &["state", "child-7", "--now", "23"]);
    assert_eq!(child["parents"]["root"]["result_fence"], 2, "{child}");
}

/// `kill -9` of a completion that releases 5,000 children on PostgreSQL, at several moments:
/// afterwards the parent is done and every child due, or still running and every child
/// waiting; never anything between.
#[test]
fn kill_9_during_a_parents_completion_on_postgres_releases_all_its_children_or_none() {
    let db = ScratchDatabase::create();
    let url = db.url();
    ok(&run(url, &["init"]));
    let children = 5_000_u64;
    let mut lines: Vec<String> = (0..children)
        .map(|n| format!("{{\"id\": \"c{n}\", \"after\": [\"root\"]}}"))
        .collect();
    lines.push("{\"id\": \"root\"}".to_owned());
    ok(&fed(
        url,
        &["enqueue-many", "--json-lines", "--queue", "k"],
        &lines,
    ));
    let leased = json_of(url, &claim_args("k", "w", "100", &["--now", "1"]));
    assert_eq!(leased["leases"][0]["id"], "root");
    let mut completed = false;
    for delay_ms in [0, 30, 80, 150, 300, 600, 1_200, 5_000] {
        let mut child = lease(url)
            .args([
                "complete", "root", "--owner", "w", "--fence", "1", "--result", "r",
            ])
            .args(["--now", "2"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(Reaped::new)
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        // A read sees what is committed: a transaction the killed process left open is
        // rolled back by the server when it sees the socket closed (the next attempt waits
        // for its row lock); one whose COMMIT was sent commits whole.
        let stats = json_of(url, &["stats", "--now", "2"]);
        let q = &stats["queues"]["k"];
        let at = |status: &str| q[status].as_u64();
        match (at("running"), at("done")) {
            (Some(1), Some(0)) => {
                assert_eq!(
                    (at("waiting"), at("pending")),
                    (Some(children), Some(0)),
                    "{stats}"
                );
            }
            (Some(0), Some(1)) => {
                assert_eq!(
                    (at("waiting"), at("pending")),
                    (Some(0), Some(children)),
                    "{stats}"
                );
                completed = true;
                break;
            }
            other => panic!("the parent is neither running nor done: {other:?} {stats}"),
        }
    }
    assert!(completed, "no completion committed within 5 s");
}

/// Scheduling and flow control on PostgreSQL through the CLI: sixteen processes run the same
/// schedule's pass at once and each tick is one job; a paused queue leases nothing; a limit
/// caps a claim; `stats` shows both.
#[test]
fn schedules_pause_and_limits_on_postgres_hold_under_sixteen_racing_processes() {
    let db = ScratchDatabase::create();
    let url = db.url();
    ok(&run(url, &["init"]));
    ok(&run(
        url,
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
    ));
    let runners: Vec<_> = (0..16)
        .map(|_| {
            lease(url)
                .args([
                    "schedule",
                    "run-due",
                    "--now",
                    "2026-12-02T06:00:00Z",
                    "--json",
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map(Reaped::new)
                .unwrap()
        })
        .collect();
    let mut firing = 0;
    for runner in runners {
        let out = runner.wait_with_output().unwrap();
        ok(&out);
        let pass: Value = serde_json::from_slice(&out.stdout).unwrap();
        firing += pass["fired"].as_array().unwrap().len();
    }
    assert_eq!(firing, 1, "more than one pass fired the same tick");
    let stats = json_of(url, &["stats"]);
    assert_eq!(stats["queues"]["r"]["pending"], 60);
    json_of(url, &["pause", "r"]);
    let paused = run(url, &claim_args("r", "w", "60", &[]));
    assert_eq!(paused.status.code(), Some(3), "a paused queue leased a job");
    json_of(url, &["resume", "r"]);
    json_of(url, &["limit", "r", "--concurrency", "3"]);
    let claim = json_of(url, &claim_args("r", "w", "60", &["--limit", "10"]));
    assert_eq!(claim["leases"].as_array().unwrap().len(), 3);
    assert_eq!(json_of(url, &["stats"])["settings"]["r"]["concurrency"], 3);
}

/// Groups on PostgreSQL through the binary: sixteen `claim-next` processes race over four
/// groups of five jobs under `--per-group 1`: every lease they got is live at once (each lasts
/// an hour), and no group has two; the store's own list agrees.
#[test]
fn sixteen_racing_processes_never_hold_two_leases_of_a_group_on_postgres() {
    let db = ScratchDatabase::create();
    let url = db.url();
    ok(&run(url, &["init"]));
    for g in 0..4 {
        for n in 0..5 {
            json_of(
                url,
                &[
                    "enqueue",
                    &format!("g{g}-{n}"),
                    "--queue",
                    "p",
                    "--group",
                    &format!("g{g}"),
                ],
            );
        }
    }
    json_of(url, &["limit", "p", "--per-group", "1"]);
    let racers: Vec<_> = (0..16)
        .map(|w| {
            lease(url)
                .args(claim_args(
                    "p",
                    &format!("w{w}"),
                    "3600",
                    &["--limit", "3", "--json"],
                ))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map(Reaped::new)
                .unwrap()
        })
        .collect();
    let mut groups = Vec::new();
    for racer in racers {
        let out = racer.wait_with_output().unwrap();
        // Exit 3: nothing it could take.
        if out.status.code() == Some(3) {
            continue;
        }
        ok(&out);
        let claim: Value = serde_json::from_slice(&out.stdout).unwrap();
        for lease in claim["leases"].as_array().unwrap() {
            groups.push(lease["group"].as_str().unwrap().to_owned());
        }
    }
    groups.sort();
    let mut distinct = groups.clone();
    distinct.dedup();
    assert_eq!(
        groups, distinct,
        "two leases of one group were live at once"
    );
    let running = json_of(url, &["list", "--queue", "p", "--status", "running"]);
    assert_eq!(running["jobs"].as_array().unwrap().len(), groups.len());
    // A later claim takes only groups none of them holds.
    let late = run(
        url,
        &claim_args("p", "late", "60", &["--limit", "9", "--json"]),
    );
    if late.status.code() != Some(3) {
        ok(&late);
        let claim: Value = serde_json::from_slice(&late.stdout).unwrap();
        for lease in claim["leases"].as_array().unwrap() {
            let group = lease["group"].as_str().unwrap();
            assert!(!groups.iter().any(|g| g == group), "{group} leased twice");
        }
    }
}

/// Sixteen processes claim at once from a queue with `--rate 3/1h` on PostgreSQL: between
/// them they are granted no more than three leases (the rate is decided in each claim's own
/// transaction, after the queue's turn came; a racer may find the rows it would take locked
/// by another), a claim after them gets exactly what is left, and the next exits 3 saying
/// until when.
#[test]
fn sixteen_racing_processes_are_granted_no_more_than_the_rate_on_postgres() {
    let db = ScratchDatabase::create();
    let url = db.url();
    ok(&run(url, &["init"]));
    for n in 0..20 {
        json_of(url, &["enqueue", &format!("r{n}"), "--queue", "rated"]);
    }
    let set = json_of(url, &["limit", "rated", "--rate", "3/1h"]);
    assert_eq!(set["rate"], "3/1h", "{set}");
    let racers: Vec<_> = (0..16)
        .map(|w| {
            lease(url)
                .args(claim_args(
                    "rated",
                    &format!("w{w}"),
                    "3600",
                    &["--limit", "2", "--json"],
                ))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map(Reaped::new)
                .unwrap()
        })
        .collect();
    let mut granted = 0;
    for racer in racers {
        let out = racer.wait_with_output().unwrap();
        // Exit 3: nothing leased (the window was full, or every row it would take was locked
        // by another racer's claim in flight).
        if out.status.code() == Some(3) {
            continue;
        }
        ok(&out);
        let claim: Value = serde_json::from_slice(&out.stdout).unwrap();
        granted += claim["leases"].as_array().unwrap().len();
    }
    assert!(
        (1..=3).contains(&granted),
        "the racers were granted {granted} leases under 3/1h"
    );
    // What is left of the window is granted now, and nothing more.
    let claim_all = || {
        run(
            url,
            &claim_args("rated", "late", "3600", &["--limit", "20", "--json"]),
        )
    };
    let late = claim_all();
    if granted < 3 {
        ok(&late);
        let claim: Value = serde_json::from_slice(&late.stdout).unwrap();
        assert_eq!(claim["leases"].as_array().unwrap().len(), 3 - granted);
    } else {
        assert_eq!(late.status.code(), Some(3));
    }
    let full = claim_all();
    assert_eq!(full.status.code(), Some(3));
    let claim: Value = serde_json::from_slice(&full.stdout).unwrap();
    assert!(claim["throttled_until"].as_f64().is_some(), "{claim}");
    let running = json_of(url, &["list", "--queue", "rated", "--status", "running"]);
    assert_eq!(running["jobs"].as_array().unwrap().len(), 3);
}

/// Eight processes claim one job each at once from a `--fair` queue on PostgreSQL whose
/// eight groups were enqueued one after another (each with more jobs than the racers could
/// lock): each claim takes its turn after the queue's lock and serves the group served least
/// recently, so between them they serve all eight groups, one each, where claim order would
/// have served only the first.
#[test]
fn eight_racing_processes_on_a_fair_queue_serve_eight_groups_on_postgres() {
    let db = ScratchDatabase::create();
    let url = db.url();
    ok(&run(url, &["init"]));
    let lines: Vec<String> = (0..8)
        .flat_map(|g| (0..20).map(move |n| format!(r#"{{"id": "g{g}-{n:02}", "group": "g{g}"}}"#)))
        .collect();
    let many = ["enqueue-many", "--queue", "f", "--json-lines", "--json"];
    ok(&fed(url, &many, &lines));
    assert_eq!(json_of(url, &["limit", "f", "--fair"])["fair"], true);
    let racers: Vec<_> = (0..8)
        .map(|w| {
            lease(url)
                .args(claim_args(
                    "f",
                    &format!("w{w}"),
                    "3600",
                    &["--limit", "1", "--json"],
                ))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map(Reaped::new)
                .unwrap()
        })
        .collect();
    let mut groups = Vec::new();
    for racer in racers {
        let out = racer.wait_with_output().unwrap();
        ok(&out);
        let claim: Value = serde_json::from_slice(&out.stdout).unwrap();
        for lease in claim["leases"].as_array().unwrap() {
            groups.push(lease["group"].as_str().unwrap().to_owned());
        }
    }
    groups.sort();
    let every: Vec<String> = (0..8).map(|g| format!("g{g}")).collect();
    assert_eq!(groups, every);
}

#[test]
fn the_checkpoint_command_keeps_a_holders_steps_under_its_fence_on_postgres() {
    let db = ScratchDatabase::create();
    ok(&run(db.url(), &["init"]));
    checkpoint_cli::the_checkpoint_command_keeps_a_holders_steps_under_its_fence(db.url());
}

#[test]
fn enqueue_keeps_the_trace_context_of_its_environment_on_postgres() {
    let db = ScratchDatabase::create();
    ok(&run(db.url(), &["init"]));
    trace_cli::enqueue_keeps_the_trace_context_of_its_environment(db.url());
}

#[test]
fn a_program_gets_its_jobs_trace_context_without_an_exporter_on_postgres() {
    let db = ScratchDatabase::create();
    ok(&run(db.url(), &["init"]));
    trace_cli::a_program_gets_its_jobs_trace_context_without_an_exporter(db.url());
}

#[test]
fn a_dead_job_is_cancelled_keeping_its_error_and_frees_its_ordered_group_on_postgres() {
    let db = ScratchDatabase::create();
    ok(&run(db.url(), &["init"]));
    ordered_cli::a_dead_job_is_cancelled_keeping_its_error_and_frees_its_ordered_group(db.url());
}

/// `lease serve` and `lease work` on PostgreSQL say at start what a failover could lose: the
/// server's `synchronous_commit` and `synchronous_standby_names` (this machine's server has no
/// synchronous standby, so a failover could lose acknowledged writes), before anything else.
#[test]
fn serve_and_work_on_postgres_say_what_a_failover_could_lose() {
    // One `lease work` on an empty queue: what it says before it exits.
    let work_once = |target: &str| {
        run(
            target,
            &[
                "work",
                "--queue",
                "none",
                "--owner",
                "w",
                "--ttl",
                "5",
                "--exit-when-empty",
                "--",
                "true",
            ],
        )
    };
    let db = ScratchDatabase::create();
    ok(&run(db.url(), &["init"]));
    let work = work_once(db.url());
    ok(&work);
    let said = String::from_utf8_lossy(&work.stderr);
    let first = said.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(
            "lease: PostgreSQL replication: synchronous_commit=on, synchronous_standby_names=''"
        ) && first.contains("can lose the last acknowledged writes"),
        "{said}"
    );
    let mut server = lease(db.url())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(server.stderr.take().unwrap()));
    let first = lines.next().unwrap().unwrap();
    assert!(
        first.starts_with("lease: PostgreSQL replication: "),
        "{first}"
    );
    let second = lines.next().unwrap().unwrap();
    assert!(second.starts_with("lease: serving "), "{second}");
    drop(server);
    // SQLite has no replication, and says nothing of it.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("local.db");
    let file = file.to_str().unwrap();
    ok(&run(file, &["init"]));
    let local = work_once(file);
    ok(&local);
    assert!(!String::from_utf8_lossy(&local.stderr).contains("replication"));
}
