//! One story the command-line tests run on each store: `lease checkpoint` keeps a holder's
//! steps under its fence, refuses a stale holder (exit 3) and bad input (exit 1, naming it),
//! and `state --json` shows what is kept.

use std::process::{Command, Output};

use serde_json::{Value, json};

fn lease(db: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command.arg("--db").arg(db).env_remove("LEASE_DB");
    command
}

fn kept(db: &str) -> Value {
    let out = lease(db).args(["state", "s", "--json"]).output().unwrap();
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    state["checkpoints"].clone()
}

fn checkpoint(db: &str, owner: &str, fence: &str, now: &str, step: &[&str]) -> Output {
    lease(db)
        .args([
            "checkpoint",
            "s",
            "--owner",
            owner,
            "--fence",
            fence,
            "--now",
            now,
        ])
        .args(step)
        .output()
        .unwrap()
}

/// `lease checkpoint s` as `a` with fence 1 at `now`, its value `input` on standard input.
fn checkpoint_fed(db: &str, now: &str, name: &str, input: &[u8]) -> Output {
    crate::stdin::fed(
        lease(db).args([
            "checkpoint",
            "s",
            "--owner",
            "a",
            "--fence",
            "1",
            "--now",
            now,
            "--name",
            name,
            "--value-file",
            "-",
        ]),
        input,
    )
}

fn claim(db: &str, owner: &str, now: &str) {
    let out = lease(db)
        .args([
            "claim-next",
            "--queue",
            "q",
            "--owner",
            owner,
            "--ttl",
            "10",
            "--now",
            now,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The story, on the store `db` names (made and empty).
pub fn the_checkpoint_command_keeps_a_holders_steps_under_its_fence(db: &str) {
    let out = lease(db)
        .args(["enqueue", "s", "--queue", "q"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    claim(db, "a", "100");
    let out = checkpoint(
        db,
        "a",
        "1",
        "101",
        &["--name", "fetch", "--value", "rows=3", "--json"],
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!({"ok": true})
    );
    let out = checkpoint_fed(db, "102", "parse", b"two\nlines");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(kept(db), json!({"fetch": "rows=3", "parse": "two\nlines"}));
    // Bad input: exit 1, naming what is wrong; nothing kept.
    let long = "n".repeat(257);
    let nul = checkpoint_fed(db, "103", "ok", b"a\0b");
    for (out, names) in [
        (
            checkpoint(db, "a", "1", "103", &["--name", "", "--value", "x"]),
            "checkpoint name",
        ),
        (
            checkpoint(db, "a", "1", "103", &["--name", &long, "--value", "x"]),
            "checkpoint name",
        ),
        (nul, "checkpoint value"),
    ] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(names), "{stderr:?} does not name {names:?}");
    }
    assert_eq!(kept(db), json!({"fetch": "rows=3", "parse": "two\nlines"}));
    // The lease lapses and b claims it: a's step is refused as stale (exit 3), changing nothing.
    claim(db, "b", "120");
    let late = checkpoint(
        db,
        "a",
        "1",
        "121",
        &["--name", "fetch", "--value", "stale"],
    );
    assert_eq!(
        late.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&late.stderr)
    );
    assert!(String::from_utf8_lossy(&late.stderr).contains("stale"));
    let out = checkpoint(
        db,
        "b",
        "2",
        "122",
        &["--name", "fetch", "--value", "rows=4"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(kept(db), json!({"fetch": "rows=4", "parse": "two\nlines"}));
}
