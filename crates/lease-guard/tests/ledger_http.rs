//! The stale-worker story through the HTTP example (`examples/ledger.rs`), run as a real
//! server: B's write with the newer fence is stored, A's with the older one is refused with
//! 409 naming both fences, and the ledger holds exactly B's entry; bad headers are 400.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use lease_domain::{JobId, JobResult, LeaseTerm, Owner, Timestamp};
use lease_ports::LeaseStore;
use lease_sqlite::SqliteLeaseStore;
use serde_json::{Value, json};

/// The example's binary, built by `cargo test` next to this test's own (built here if not).
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

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(db: &std::path::Path) -> Server {
    let mut child = Command::new(ledger_binary())
        .args(["--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    Server { child, addr }
}

/// One HTTP/1.1 request; the status and the JSON body.
fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut text = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    stream.write_all(text.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status: u16 = answer[9..12].parse().unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_stale_worker_is_refused_by_the_http_ledger_and_by_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir.path().join("ledger.db"));
    let store = SqliteLeaseStore::open(dir.path().join("lease.db")).unwrap();
    let job = JobId::new("invoice-9").unwrap();
    store.enqueue(&job).await.unwrap();
    let (a, b) = (Owner::new("A").unwrap(), Owner::new("B").unwrap());
    let fa = store
        .claim(&job, &a, LeaseTerm::new(100.0, 10.0).unwrap())
        .await
        .unwrap()
        .unwrap();
    let fb = store
        .claim(&job, &b, LeaseTerm::new(111.0, 10.0).unwrap())
        .await
        .unwrap()
        .unwrap();
    let put = |fence: &str, text: &str| {
        request(
            &server.addr,
            "PUT",
            "/entries/pay",
            &[("Lease-Job", "invoice-9"), ("Lease-Fence", fence)],
            text,
        )
    };
    assert_eq!(
        put(&fb.to_string(), "paid by B"),
        (200, json!({"ok": true, "fence": 2}))
    );
    store
        .complete(
            &job,
            &b,
            fb,
            Timestamp::new(112.0).unwrap(),
            &JobResult::new("paid").unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    // A wakes: the ledger refuses it, naming both fences, and stores nothing.
    assert_eq!(
        put(&fa.to_string(), "paid by A"),
        (409, json!({"ok": false, "presented": 1, "current": 2}))
    );
    assert!(
        store
            .complete(
                &job,
                &a,
                fa,
                Timestamp::new(113.0).unwrap(),
                &JobResult::new("A").unwrap()
            )
            .await
            .unwrap()
            .is_err()
    );
    assert_eq!(
        request(&server.addr, "GET", "/entries/pay", &[], ""),
        (200, json!({"key": "pay", "text": "paid by B", "fence": 2}))
    );
    assert_eq!(
        request(&server.addr, "GET", "/entries/none", &[], "").0,
        404
    );
    // Missing or malformed headers are 400, and store nothing.
    let (status, body) = request(
        &server.addr,
        "PUT",
        "/entries/other",
        &[("Lease-Fence", "3")],
        "x",
    );
    assert_eq!((status, body["ok"].clone()), (400, json!(false)));
    assert!(
        body["error"].as_str().unwrap().contains("Lease-Job"),
        "{body}"
    );
    let (status, body) = request(
        &server.addr,
        "PUT",
        "/entries/other",
        &[("Lease-Job", "j"), ("Lease-Fence", "two")],
        "x",
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("Lease-Fence"),
        "{body}"
    );
    assert_eq!(
        request(&server.addr, "GET", "/entries/other", &[], "").0,
        404
    );
}
