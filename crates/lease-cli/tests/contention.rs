//! Contention across separate OS processes: many `lease claim` processes race for one job,
//! round after round; exactly one wins each round and none fails with a busy or locked error.

use std::path::Path;
use std::process::{Command, Stdio};

const ROUNDS: usize = 30;
const PROCESSES: usize = 8;

/// The `lease` binary pointed at `db`.
fn lease(db: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command.arg("--db").arg(db);
    command
}

#[test]
fn racing_claim_processes_have_exactly_one_winner_and_no_busy_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("race.db");
    let run = |args: &[&str]| lease(&db).args(args).output().unwrap();
    assert!(run(&["init"]).status.success());
    for round in 0..ROUNDS {
        let job = format!("job-{round}");
        assert!(run(&["enqueue", &job]).status.success());
        let children: Vec<_> = (0..PROCESSES)
            .map(|p| {
                lease(&db)
                    .args([
                        "claim",
                        &job,
                        "--owner",
                        &format!("p{p}"),
                        "--now",
                        "0",
                        "--ttl",
                        "60",
                        "--json",
                    ])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut winners = Vec::new();
        for (p, child) in children.into_iter().enumerate() {
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            match out.status.code() {
                Some(0) => {
                    winners.push((p, String::from_utf8_lossy(&out.stdout).trim().to_owned()))
                }
                Some(3) => {}
                other => panic!("round {round} process {p} exited {other:?}: {err}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert_eq!(winners[0].1, r#"{"fence":1}"#);
        let state = run(&["state", &job, "--json"]);
        let state: serde_json::Value = serde_json::from_slice(&state.stdout).unwrap();
        assert_eq!(state["owner"], format!("p{}", winners[0].0));
    }
}

#[test]
fn claim_many_races_32_owners_with_exactly_one_winner_and_no_busy_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("many.db");
    let run = |args: &[&str]| lease(&db).args(args).output().unwrap();
    assert!(run(&["init"]).status.success());
    let owners: Vec<String> = (0..32).map(|i| format!("o{i}")).collect();
    for round in 0..10 {
        let job = format!("job-{round}");
        assert!(run(&["enqueue", &job]).status.success());
        let mut args = vec![
            "claim-many",
            job.as_str(),
            "--now",
            "0",
            "--ttl",
            "60",
            "--json",
        ];
        for owner in &owners {
            args.extend(["--owner", owner.as_str()]);
        }
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let fences = value["fences"].as_array().unwrap();
        assert_eq!(fences.len(), 32);
        let winners: Vec<usize> = (0..32).filter(|&i| !fences[i].is_null()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {fences:?}");
        assert_eq!(fences[winners[0]], 1);
    }
}
