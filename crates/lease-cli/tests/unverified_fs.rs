//! A database on a file system this build cannot vouch for: a real FUSE mount (bindfs, which
//! `.ci/run` installs) made by the test. Refused unless allowed; allowed, it runs on the
//! rollback journal (no WAL index in shared memory, which such a file system may not keep
//! coherent between processes) unless `--exclusive`; processes racing for the next job on it
//! never hand out one fence twice; a commit killed at any step (strace's fault injection,
//! which `cargo xtask test` installs) leaves a file every later command opens; and an
//! acknowledged commit has synced the directory after deleting its journal.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// A bindfs mount of a temporary directory, unmounted on drop.
struct Mount {
    source: tempfile::TempDir,
    _point: tempfile::TempDir,
    dir: PathBuf,
}

/// A second, read-only bindfs view of a mount's directory, unmounted on drop.
struct ReadOnlyView {
    _point: tempfile::TempDir,
    dir: PathBuf,
}

impl Drop for ReadOnlyView {
    fn drop(&mut self) {
        let _ = Command::new("fusermount").arg("-u").arg(&self.dir).status();
    }
}

fn bindfs(source: &Path, point: &Path, extra: &[&str]) {
    let out = Command::new("bindfs")
        .args(extra)
        .arg(source)
        .arg(point)
        .output()
        .unwrap_or_else(|e| {
            panic!("bindfs is needed for this test (cargo xtask test installs it): {e}")
        });
    assert!(
        out.status.success(),
        "bindfs could not mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Mount {
    fn read_only_view(&self) -> ReadOnlyView {
        let point = tempfile::tempdir().unwrap();
        bindfs(self.source.path(), point.path(), &["-o", "ro"]);
        let dir = point.path().to_path_buf();
        ReadOnlyView { _point: point, dir }
    }

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
            source,
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

/// Runs `lease` under strace, killed (SIGKILL) at the `n`th call of `syscall` that touches
/// the database file or its journal in any one thread. Whether it was killed.
fn killed_at(db: &Path, syscall: &str, n: usize, args: &[&str]) -> bool {
    let journal = PathBuf::from(format!("{}-journal", db.display()));
    let out = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-P"])
        .arg(db)
        .arg("-P")
        .arg(&journal)
        .arg(format!("--trace={syscall}"))
        .arg(format!("--inject={syscall}:signal=KILL:when={n}"))
        .arg(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(db)
        .arg("--allow-unverified-fs")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("strace is needed for this test (cargo xtask test installs it): {e}")
        });
    match out.status.code() {
        Some(0) => false,
        Some(137) | None => true,
        other => panic!(
            "lease {args:?} under strace ended with {other:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// A claim is killed at each write, sync and unlink of its commit in turn (the journal's
/// pages, its header, its syncs, the database's pages and sync, the unlink that commits). After
/// each kill, every command opens the file (a hot journal left behind is rolled back by the
/// first opener that can write; it used to make every later command fail with "attempt to
/// write a readonly database"), the claim happened entirely or not at all, the next claim
/// raises the fence by one from there, and the file is intact.
#[test]
fn a_commit_killed_at_each_step_on_a_fuse_mount_leaves_a_file_every_later_command_opens() {
    let mount = Mount::new();
    let template = mount.dir.join("template.db");
    for args in [&["init"][..], &["enqueue", "j"]] {
        let out = lease(&template, &[&["--allow-unverified-fs"][..], args].concat());
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let claim = [
        "claim", "j", "--owner", "a", "--ttl", "30", "--now", "100", "--json",
    ];
    let mut kills = 0;
    for syscall in ["pwrite64", "fsync", "unlink"] {
        for n in 1.. {
            assert!(n < 100, "{syscall} was never past its last call");
            let db = mount.dir.join(format!("{syscall}-{n}.db"));
            std::fs::copy(&template, &db).unwrap();
            if !killed_at(&db, syscall, n, &claim) {
                break;
            }
            kills += 1;
            let at = format!("killed at {syscall} #{n}");
            let state = lease(
                &db,
                &[
                    "--allow-unverified-fs",
                    "state",
                    "j",
                    "--now",
                    "100",
                    "--json",
                ],
            );
            assert_eq!(
                state.status.code(),
                Some(0),
                "{at}: {}",
                String::from_utf8_lossy(&state.stderr)
            );
            let state = json(&state);
            let fence = state["fence"].as_u64().unwrap();
            match fence {
                0 => assert_eq!(state["owner"], Value::Null, "{at}: {state}"),
                1 => assert_eq!(state["owner"], "a", "{at}: {state}"),
                other => panic!("{at}: fence {other}"),
            }
            // No hot journal is left: a read-only connection, which cannot roll one back,
            // reads the file (a journal the kill left empty is not hot, and stays).
            let read_only = rusqlite::Connection::open_with_flags(
                &db,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .unwrap();
            let jobs: i64 = read_only
                .query_row("SELECT count(*) FROM jobs", [], |r| r.get(0))
                .unwrap_or_else(|e| panic!("{at}: a read-only reader cannot read: {e}"));
            assert_eq!(jobs, 1, "{at}");
            let next = lease(
                &db,
                &[
                    "--allow-unverified-fs",
                    "claim",
                    "j",
                    "--owner",
                    "b",
                    "--ttl",
                    "30",
                    "--now",
                    "200",
                    "--json",
                ],
            );
            assert_eq!(json(&next)["fence"], fence + 1, "{at}");
            let check: String = rusqlite::Connection::open(&db)
                .unwrap()
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .unwrap();
            assert_eq!(check, "ok", "{at}");
        }
    }
    assert!(kills >= 20, "only {kills} kill points in a commit");
}

/// A hot journal seen through storage that cannot be written is named as what it is, and the
/// file is left for a writer, which then opens it as usual.
#[test]
fn a_hot_journal_read_where_it_cannot_be_written_is_named_and_left_for_a_writer() {
    let mount = Mount::new();
    let db = mount.dir.join("hot.db");
    for args in [&["init"][..], &["enqueue", "j"]] {
        assert_eq!(
            lease(&db, &[&["--allow-unverified-fs"][..], args].concat())
                .status
                .code(),
            Some(0)
        );
    }
    assert!(killed_at(
        &db,
        "unlink",
        1,
        &["claim", "j", "--owner", "a", "--ttl", "30"]
    ));
    let view = mount.read_only_view();
    let through_view = lease(
        &view.dir.join("hot.db"),
        &["--allow-unverified-fs", "state", "j"],
    );
    assert_eq!(through_view.status.code(), Some(1));
    let said = String::from_utf8_lossy(&through_view.stderr);
    assert!(
        said.contains("hot journal") && said.contains("interrupted"),
        "{said}"
    );
    assert!(
        mount.dir.join("hot.db-journal").exists(),
        "the read-only open removed the journal"
    );
    let writer = lease(&db, &["--allow-unverified-fs", "state", "j", "--json"]);
    assert_eq!(
        json(&writer)["fence"],
        0,
        "the interrupted claim was rolled back"
    );
}

/// On the rollback journal a commit is final when its journal is unlinked; the store syncs the
/// directory after that unlink (synchronous=EXTRA), before the answer, so a power cut cannot
/// bring the journal back and roll back an acknowledged commit.
#[test]
fn an_acknowledged_commit_on_the_rollback_journal_syncs_the_directory_after_its_unlink() {
    let mount = Mount::new();
    let db = mount.dir.join("sync.db");
    for args in [&["init"][..], &["enqueue", "j"]] {
        assert_eq!(
            lease(&db, &[&["--allow-unverified-fs"][..], args].concat())
                .status
                .code(),
            Some(0)
        );
    }
    let trace = mount.source.path().join("trace");
    let out = Command::new("strace")
        .args([
            "-f",
            "-qq",
            "--trace=unlink,openat,fsync,fdatasync,write",
            "-o",
        ])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(&db)
        .args([
            "--allow-unverified-fs",
            "claim",
            "j",
            "--owner",
            "a",
            "--ttl",
            "30",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = std::fs::read_to_string(trace).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    let unlink = lines
        .iter()
        .position(|l| l.contains("unlink(") && l.contains("sync.db-journal"))
        .unwrap_or_else(|| panic!("no journal unlink: {trace}"));
    let dir = mount.dir.display().to_string();
    let opened_dir = lines[unlink..]
        .iter()
        .find_map(|l| {
            let fd = l.split(" = ").nth(1)?.trim();
            (l.contains("openat(") && l.contains(&format!("\"{dir}\""))).then(|| fd.to_owned())
        })
        .unwrap_or_else(|| panic!("the directory was not opened after the unlink: {trace}"));
    let synced = lines[unlink..]
        .iter()
        .position(|l| l.contains(&format!("fsync({opened_dir})")))
        .unwrap_or_else(|| panic!("the directory was not synced after the unlink: {trace}"));
    let answered = lines[unlink..]
        .iter()
        .position(|l| l.contains("write(1,"))
        .unwrap_or_else(|| panic!("no answer written: {trace}"));
    assert!(
        synced < answered,
        "the answer came before the directory sync: {trace}"
    );
}
