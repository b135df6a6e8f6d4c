//! Contention across separate OS processes: many `lease claim` processes race for one job,
//! round after round; exactly one wins each round and none fails with a busy or locked error,
//! through any spelling of the path; and processes creating one new database at once all succeed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const ROUNDS: usize = 30;
const PROCESSES: usize = 8;

/// The `lease` binary pointed at `db`.
fn lease(db: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command.arg("--db").arg(db);
    command
}

/// One round: `PROCESSES` `lease claim` processes race for `job`, each through the next of
/// `names` in turn (several names of one database file); returns the winner and its output.
fn race_claims(names: &[&Path], job: &str, round: usize) -> (usize, String) {
    let children: Vec<_> = (0..PROCESSES)
        .map(|p| {
            lease(names[p % names.len()])
                .args([
                    "claim",
                    job,
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
            Some(0) => winners.push((p, String::from_utf8_lossy(&out.stdout).trim().to_owned())),
            Some(3) => {}
            other => panic!("round {round} process {p} exited {other:?}: {err}"),
        }
    }
    assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
    winners.remove(0)
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
        let (winner, out) = race_claims(&[&db], &job, round);
        assert_eq!(out, r#"{"fence":1}"#);
        let state = run(&["state", &job, "--json"]);
        let state: serde_json::Value = serde_json::from_slice(&state.stdout).unwrap();
        assert_eq!(state["owner"], format!("p{winner}"));
    }
}

/// Mounts `from` onto `to` with a bind mount; the guard undoes it.
struct BindMount(PathBuf);

impl BindMount {
    fn new(from: &Path, to: &Path) -> Self {
        let out = Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(to)
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "mount --bind failed (this test needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        BindMount(to.to_path_buf())
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Symlinks, `..` spellings and a bind mount of the directory all reach the same -wal and
/// -shm files as the plain path, so processes racing through two names still exclude each other.
#[test]
fn other_spellings_of_one_path_still_give_one_winner_per_claim() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mounted = dir.path().join("mounted");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    std::fs::create_dir(&mounted).unwrap();
    let db = data.join("race.db");
    let run = |args: &[&str]| lease(&db).args(args).output().unwrap();
    assert!(run(&["init"]).status.success());
    let symlink = dir.path().join("link.db");
    std::os::unix::fs::symlink(&db, &symlink).unwrap();
    let dotted = data.join("sub/../race.db");
    let _mount = BindMount::new(&data, &mounted);
    let through_mount = mounted.join("race.db");
    let mut round = 0;
    for other in [&symlink, &dotted, &through_mount] {
        for _ in 0..5 {
            let job = format!("job-{round}");
            assert!(run(&["enqueue", &job]).status.success());
            let (_, out) = race_claims(&[&db, other], &job, round);
            assert_eq!(out, r#"{"fence":1}"#, "through {}", other.display());
            round += 1;
        }
    }
}

/// A second hard link would give each name its own write-ahead log: every process refuses it.
#[test]
fn a_hard_linked_database_is_refused_by_every_command_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.db");
    let b = dir.path().join("b.db");
    assert!(lease(&a).arg("init").status().unwrap().success());
    assert!(lease(&a).args(["enqueue", "j"]).status().unwrap().success());
    std::fs::hard_link(&a, &b).unwrap();
    let before = std::fs::read(&a).unwrap();
    for name in [&a, &b] {
        for args in [
            &["claim", "j", "--owner", "w", "--ttl", "5"][..],
            &["state", "j"],
        ] {
            let out = lease(name).args(args).output().unwrap();
            assert_eq!(out.status.code(), Some(1), "{args:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("hard links"), "{args:?}: {err}");
        }
    }
    assert_eq!(std::fs::read(&a).unwrap(), before);
}

/// `init` processes (and `enqueue` processes racing them) on a path that does not exist yet:
/// every `init` succeeds, and an `enqueue` either succeeds or says to run init first.
#[test]
fn concurrent_init_and_enqueue_processes_on_a_new_path_never_fail_spuriously() {
    for round in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("new.db");
        let children: Vec<_> = (0..4)
            .map(|p| {
                let args: &[&str] = if p < 3 { &["init"] } else { &["enqueue", "j"] };
                let child = lease(&db)
                    .args(args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                (args, child)
            })
            .collect();
        for (args, child) in children {
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            let fine =
                out.status.success() || (args[0] == "enqueue" && err.contains("no lease database"));
            assert!(
                fine,
                "round {round} {args:?}: {:?} {err}",
                out.status.code()
            );
        }
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

/// `lease claim-many` races its claims at once, each on its own connection: while the test holds
/// the write lock, the process has every owner's connection open at the same time.
#[test]
fn claim_many_process_has_every_claim_under_way_at_once() {
    const OWNERS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("overlap.db");
    assert!(lease(&db).arg("init").status().unwrap().success());
    assert!(
        lease(&db)
            .args(["enqueue", "j"])
            .status()
            .unwrap()
            .success()
    );
    let target = db.canonicalize().unwrap();
    // Another process's view of SQLite's write lock: a connection of this test process.
    let holder = rusqlite::Connection::open(&db).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut args = vec!["claim-many", "j", "--now", "0", "--ttl", "60", "--json"];
    let owners: Vec<String> = (0..OWNERS).map(|i| format!("o{i}")).collect();
    for owner in &owners {
        args.extend(["--owner", owner.as_str()]);
    }
    let child = lease(&db)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let fds = format!("/proc/{}/fd", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut most = 0;
    while most < OWNERS && std::time::Instant::now() < deadline {
        let open = std::fs::read_dir(&fds)
            .map(|d| {
                d.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                    .filter(|link| *link == target)
                    .count()
            })
            .unwrap_or(0);
        most = most.max(open);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    holder.execute_batch("COMMIT").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        most >= OWNERS,
        "at most {most} claims were under way at once"
    );
}

#[test]
fn exclusive_processes_at_once_each_wait_their_turn_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("e.db");
    let exclusive = |args: &[&str]| {
        lease(&db)
            .args(["--exclusive", "--busy-timeout", "5"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    assert!(exclusive(&["init"]).wait().unwrap().success());
    for round in 0..10 {
        let jobs = [format!("a{round}"), format!("b{round}")];
        for job in &jobs {
            assert!(exclusive(&["enqueue", job]).wait().unwrap().success());
        }
        // Two processes, each holding the file exclusively for a moment: the second waits for
        // the first (they used to wait for each other until one gave up after 5 s).
        let racing: Vec<_> = jobs
            .iter()
            .map(|job| exclusive(&["claim", job, "--owner", "w", "--ttl", "30"]))
            .collect();
        for child in racing {
            let out = child.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
