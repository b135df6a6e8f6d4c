//! The OpenAPI document is the contract: schemathesis runs every check in every phase
//! (examples, coverage, fuzzing, stateful) against a live `lease serve`, on SQLite and on
//! PostgreSQL, and finds nothing: every request the document allows is taken, every one it
//! does not is refused, and every answer is as the document says.
//!
//! `cargo xtask test` installs the pinned schemathesis. The run here is short (a fixed seed
//! and `LEASE_SCHEMATHESIS_EXAMPLES` examples per operation, 25 by default), so CI replays
//! the same search. `cargo xtask schemathesis` is the longer search run before every stop: a
//! fresh random seed (`LEASE_SCHEMATHESIS_SEED=random`, printed so that a failure can be
//! replayed with it) and 50 examples per operation.
//!
//! Every run also checks what it reached: the stateful phase, following the document's links
//! from a claim to its lease's writes with the lease's token, must have had every holder write
//! (renew, progress, hold-group, checkpoint, fail, release, complete) accepted (the server's own counters say so), so
//! a run that never got past the fuzzing of those routes with random data does not pass. Which
//! links a scenario follows is drawn, so where the first run left one unreached, further
//! stateful runs with the next seeds (each of which must find nothing too) go on until all
//! are reached, at most twelve (a stateful pass takes about ten seconds).

use crate::support;

use std::path::Path;
use std::process::Command;

use lease_postgres::ScratchDatabase;
use support::{Server, fresh_db, key_secret, lease};

/// The schemathesis every run uses (`xtask/src/needs.rs` installs it).
const PINNED: &str = "4.32.5";

fn setting(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The seed of the run: `LEASE_SCHEMATHESIS_SEED`, 1 by default; `random` draws one.
fn seed() -> String {
    match setting("LEASE_SCHEMATHESIS_SEED", "1").as_str() {
        "random" => {
            use std::hash::{BuildHasher, Hasher};
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos(),
            );
            (hasher.finish() % 1_000_000_000).to_string()
        }
        fixed => fixed.to_owned(),
    }
}

/// Every holder write, by the name the server's metrics give it: each must be accepted at
/// least once, reached through the document's links from a claim with the lease's token.
const HOLDER_WRITES: [&str; 7] = [
    "renew",
    "progress",
    "hold_group",
    "checkpoint",
    "fail",
    "release",
    "complete",
];

/// How many of `operation`'s writes the server accepted, from its `/metrics` text.
fn accepted(metrics: &str, operation: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| {
            line.starts_with("lease_operations_total{")
                && line.contains(&format!("operation=\"{operation}\""))
                && line.contains("outcome=\"accepted\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Runs schemathesis against a server over `db` and asserts it found nothing.
fn nothing_found_over(db: &Path) {
    let version = Command::new("schemathesis")
        .arg("--version")
        .output()
        .expect("schemathesis is installed (cargo xtask test installs it)");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        version.contains(PINNED),
        "schemathesis {PINNED} is pinned, this is {version}"
    );
    let key = key_secret(db, "schemathesis", "admin");
    // An event stream ends after half a second (the page would reconnect), so that each
    // request schemathesis makes to `GET /v1/events` is answered whole, not cut by its timeout.
    // With the audit trail on, so that the refusals the run provokes (every kind of holder
    // write) are recorded and `GET /v1/refusals` and the event stream read them back.
    let server = Server::start(db, &["--audit", "--events-lifetime", "0.5"], &[]);
    // 25 examples an operation in CI (the stateful phase's reach is made sure of below).
    let (seed, examples) = (seed(), setting("LEASE_SCHEMATHESIS_EXAMPLES", "25"));
    // Printed (and kept by the test harness with a failure) so that the run can be replayed.
    eprintln!(
        "schemathesis: seed {seed}, {examples} examples per operation, against {}",
        db.display()
    );
    let here = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis");
    let config = format!("{here}/schemathesis.toml");
    // One schemathesis run with `seed` and `args`; its report, once it found nothing.
    let run = |seed: &str, args: &[&str]| -> String {
        // schemathesis keeps what it found between runs in its working directory: a fresh one
        // each time, so that one run cannot make the next pass or fail.
        let work = tempfile::tempdir().unwrap();
        let out = Command::new("schemathesis")
            .current_dir(work.path())
            // hooks.py: a claim's long poll is scaled down, within the document.
            .env("PYTHONPATH", here)
            .env("SCHEMATHESIS_HOOKS", "hooks")
            .args(["--config-file", &config, "run"])
            .arg(format!("http://{}/openapi.json", server.addr))
            .args(["--checks", "all", "--request-timeout", "25"])
            .args(["--max-examples", &examples])
            .args(["--seed", seed])
            .args(args)
            .args(["-H", &format!("Authorization: Bearer {key}")])
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "schemathesis (seed {seed}, {args:?}) found something:\n{report}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        report
    };
    let report = run(&seed, &[]);
    // A run that tested nothing passes too: each phase must have run and passed.
    for phase in ["Examples", "Coverage", "Fuzzing", "Stateful"] {
        assert!(
            report.contains(&format!("✅ {phase}")),
            "the {phase} phase did not pass:\n{report}"
        );
    }
    // The run reached the store: what it enqueued is there to read (the stateful phase follows
    // the document's links from an enqueue to the job).
    let auth = format!("Bearer {key}");
    let (status, page) = server.call("GET", "/v1/jobs?limit=1", &[("Authorization", &auth)], "");
    assert_eq!(status, 200, "{page}");
    assert!(
        page["jobs"].as_array().is_some_and(|jobs| !jobs.is_empty()),
        "schemathesis left no job in the store: {page}"
    );
    // The stateful phase reaches each holder write through the links from a claim. Which
    // link a scenario follows is drawn, the phase runs a few dozen scenarios, and what it
    // draws depends on the server's answers, so even one seed does not repeat: whole runs with
    // seeds 4 and 5 of 1 to 6 left one of the five writes unreached, and stateful passes alone
    // left one unreached for none to four seeds of six from one round to the next. Further
    // stateful runs with the next seeds, each of which must also find nothing, go on until all
    // seven have been accepted, up to twelve of them: on PostgreSQL, seed 1 (CI's) needs four
    // more passes before a hold of a group is accepted, so six left too little room.
    let unreached = || {
        let (status, metrics) = server.call("GET", "/metrics", &[("Authorization", &auth)], "");
        assert_eq!(status, 200, "{metrics}");
        let metrics = metrics.as_str().unwrap_or_default().to_owned();
        HOLDER_WRITES
            .into_iter()
            .filter(|operation| accepted(&metrics, operation) == 0.0)
            .collect::<Vec<_>>()
    };
    let mut seeds = vec![seed.clone()];
    let base: u64 = seed.parse().expect("a numeric seed");
    loop {
        let missing = unreached();
        if missing.is_empty() || seeds.len() > 12 {
            break;
        }
        let next = (base + seeds.len() as u64).to_string();
        eprintln!(
            "schemathesis: {missing:?} not reached yet: the stateful phase again, seed {next}"
        );
        let again = run(&next, &["--phases", "stateful"]);
        assert!(again.contains("✅ Stateful"), "{again}");
        seeds.push(next);
    }
    let missing = unreached();
    assert!(
        missing.is_empty(),
        "stateful runs with seeds {seeds:?} never had {missing:?} accepted: the stateful phase \
         did not reach them through the links from a claim\n{report}"
    );
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn schemathesis_finds_nothing_against_the_server_on_sqlite() {
    let (_dir, db) = fresh_db();
    nothing_found_over(&db);
}

#[test]
fn schemathesis_finds_nothing_against_the_server_on_postgres() {
    let db = ScratchDatabase::create();
    let url = Path::new(db.url());
    let init = lease(url, &["init"]);
    assert!(init.status.success(), "{init:?}");
    nothing_found_over(url);
}
