//! A database on a file system this build cannot vouch for: a real FUSE mount (bindfs, which
//! `.ci/run` installs) made by the test. Refused unless allowed; allowed, it runs on the
//! rollback journal (no WAL index in shared memory, which such a file system may not keep
//! coherent between processes) unless `--exclusive`; and processes racing for the next job on
//! it never hand out one fence twice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// A bindfs mount of a temporary directory, unmounted on drop.
struct Mount {
    _source: tempfile::TempDir,
    _point: tempfile::TempDir,
    dir: PathBuf,
}

impl Mount {
    fn new() -> Self {
        let source = tempfile::tempdir().unwrap();
        let point = tempfile::tempdir().unwrap();
        let out = Command::new("bindfs")
            .arg(source.path())
            .arg(point.path())
            .output()
            .unwrap_or_else(|e| {
                panic!("bindfs is needed for this test (.ci/run installs it): {e}")
            });
        assert!(
            out.status.success(),
            "bindfs could not mount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = point.path().to_path_buf();
        Self {
            _source: source,
            _point: point,
            dir,
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount").arg("-u").arg(&self.dir).status();
    }
}

fn lease(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("LEASE_DB")
        .output()
        .unwrap()
}

fn journal_mode(db: &Path) -> String {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_fuse_file_system_is_refused_unless_allowed_and_then_runs_on_the_rollback_journal() {
    let mount = Mount::new();
    let db = mount.dir.join("f.db");
    let refused = lease(&db, &["init"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("FUSE"));
    assert!(!db.exists(), "a refused init made the file");
    for args in [
        &["init"][..],
        &["enqueue", "j"],
        &["claim", "j", "--owner", "a", "--ttl", "30"],
    ] {
        let out = lease(&db, &[&["--allow-unverified-fs"][..], args].concat());
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(journal_mode(&db), "delete");
    assert!(
        !mount.dir.join("f.db-shm").exists(),
        "a WAL index was made on the FUSE mount"
    );
    // One process holding the file (--exclusive) keeps the WAL index in its own memory.
    let alone = mount.dir.join("alone.db");
    for args in [&["init"][..], &["enqueue", "j"]] {
        let out = lease(
            &alone,
            &[&["--allow-unverified-fs", "--exclusive"][..], args].concat(),
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(journal_mode(&alone), "wal");
    assert!(!mount.dir.join("alone.db-shm").exists());
}

#[test]
fn processes_racing_on_a_fuse_mount_never_get_one_fence_twice() {
    const JOBS: usize = 48;
    const PROCESSES: usize = 6;
    let mount = Mount::new();
    let db = mount.dir.join("race.db");
    assert_eq!(
        lease(&db, &["--allow-unverified-fs", "init"]).status.code(),
        Some(0)
    );
    for j in 0..JOBS {
        let out = lease(
            &db,
            &["--allow-unverified-fs", "enqueue", &format!("j{j:02}")],
        );
        assert_eq!(out.status.code(), Some(0));
    }
    // Each process takes the next job, one call at a time, until none is due.
    let workers: Vec<_> = (0..PROCESSES)
        .map(|p| {
            let script = format!(
                "while \"$0\" --db \"$1\" --allow-unverified-fs --json claim-next --owner p{p} \
                 --ttl 600; do :; done"
            );
            Command::new("sh")
                .args(["-c", &script, env!("CARGO_BIN_EXE_lease")])
                .arg(&db)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut leased: HashMap<(String, u64), usize> = HashMap::new();
    for (p, worker) in workers.into_iter().enumerate() {
        let out = worker.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.is_empty(), "process {p}: {stderr}");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let answer: Value = serde_json::from_str(line).unwrap();
            for lease in answer["leases"].as_array().unwrap() {
                let key = (
                    lease["id"].as_str().unwrap().to_owned(),
                    lease["fence"].as_u64().unwrap(),
                );
                *leased.entry(key).or_default() += 1;
            }
        }
    }
    let twice: Vec<_> = leased.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "fences handed out twice: {twice:?}");
    assert_eq!(leased.len(), JOBS, "every job leased once");
    assert!(leased.keys().all(|(_, fence)| *fence == 1));
}
