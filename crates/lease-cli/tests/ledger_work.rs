//! The whole story through `lease work` and the HTTP ledger example: `LEASE_JOB` and
//! `LEASE_FENCE` reach each worker's program, which presents them to the ledger. Worker A's
//! `lease work` process is stopped (a stall: no heartbeat) until its lease runs out, while its
//! slow program is still on its way; worker B takes the job, writes to the ledger and
//! completes; A's program then writes and is refused with 409, and the ledger holds exactly
//! B's entry.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn ledger_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    let path = profile.join("examples").join("ledger");
    if !path.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "lease-guard", "--example", "ledger"])
            .status()
            .unwrap();
        assert!(status.success());
    }
    path
}

fn lease(db: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lease"));
    command.arg("--db").arg(db).env_remove("LEASE_DB");
    command
}

fn state(db: &Path) -> Value {
    let out = lease(db).args(["state", "pay", "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The worker's program: PUT the entry with the lease's job and fence; record the answer.
const PROGRAM: &str = r#"
import os, signal, sys, time, urllib.request, urllib.error
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish the write even if told to stop
time.sleep(float(os.environ["DELAY"]))
req = urllib.request.Request(
    "http://" + os.environ["LEDGER"] + "/entries/pay", method="PUT",
    data=("paid by " + os.environ["LEASE_OWNER_NAME"]).encode(),
    headers={"Lease-Job": os.environ["LEASE_JOB"], "Lease-Fence": os.environ["LEASE_FENCE"]})
try:
    status = urllib.request.urlopen(req).status
    body = ""
except urllib.error.HTTPError as e:
    status, body = e.code, e.read().decode()
open(os.environ["OUT"], "w").write(f"{status} {os.environ['LEASE_FENCE']} {body}")
print("paid" if status == 200 else "refused")
sys.exit(0 if status == 200 else 1)
"#;

fn worker(db: &Path, owner: &str, ttl: &str, ledger: &str, delay: &str, out: &Path) -> Child {
    lease(db)
        .args([
            "work",
            "--queue",
            "q",
            "--owner",
            owner,
            "--ttl",
            ttl,
            "--max-jobs",
            "1",
        ])
        .args(["--grace", "30", "--", "python3", "-c", PROGRAM])
        .env("LEDGER", ledger)
        .env("DELAY", delay)
        .env("OUT", out)
        .env("LEASE_OWNER_NAME", owner)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A child process killed when the test ends, passed or failed.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_stalled_worker_program_is_refused_by_the_ledger_and_the_new_holders_entry_stays() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lease.db");
    assert!(lease(&db).arg("init").status().unwrap().success());
    assert!(
        lease(&db)
            .args(["enqueue", "pay", "--queue", "q"])
            .status()
            .unwrap()
            .success()
    );
    let mut server = Stopped(
        Command::new(ledger_binary())
            .args(["--listen", "127.0.0.1:0", "--db"])
            .arg(dir.path().join("ledger.db"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ledger = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();

    // A takes the job; its program is slow to write.
    let (a_out, b_out) = (dir.path().join("a.out"), dir.path().join("b.out"));
    let mut a = Stopped(worker(&db, "A", "1", &ledger, "5", &a_out));
    let deadline = Instant::now() + Duration::from_secs(20);
    while state(&db)["owner"] != "A" {
        assert!(Instant::now() < deadline, "A never took the job");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A's worker stalls, past its 1 s lease; its program sleeps on.
    signal(&a.0, "-STOP");
    std::thread::sleep(Duration::from_millis(2500));
    // B takes over, writes to the ledger with the newer fence, and completes.
    let mut b = Stopped(worker(&db, "B", "30", &ledger, "0", &b_out));
    assert!(b.0.wait().unwrap().success(), "B's worker failed");
    let done = state(&db);
    assert_eq!(
        (done["status"].as_str(), done["fence"].as_u64()),
        (Some("done"), Some(2)),
        "{done}"
    );
    // A's program wakes and writes: refused by the ledger, naming both fences.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !a_out.exists() {
        assert!(Instant::now() < deadline, "A's program never wrote");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    signal(&a.0, "-CONT");
    let _ = a.0.wait();
    let a_said = std::fs::read_to_string(&a_out).unwrap();
    assert!(a_said.starts_with("409 1 "), "{a_said}");
    let refusal: Value = serde_json::from_str(a_said.splitn(3, ' ').nth(2).unwrap()).unwrap();
    assert_eq!(
        refusal,
        serde_json::json!({"ok": false, "presented": 1, "current": 2})
    );
    assert!(
        std::fs::read_to_string(&b_out)
            .unwrap()
            .starts_with("200 2")
    );
    // The ledger holds exactly B's entry, and the store B's result.
    let mut stream = TcpStream::connect(&ledger).unwrap();
    stream
        .write_all(
            format!("GET /entries/pay HTTP/1.1\r\nHost: {ledger}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let entry: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(
        entry,
        serde_json::json!({"key": "pay", "text": "paid by B", "fence": 2})
    );
    assert_eq!(
        state(&db)["result"],
        "paid\n",
        "the program's stdout is the result"
    );
}
