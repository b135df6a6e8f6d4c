//! What the tests of `lease serve` share: the binary on a database, keys, a running server
//! and one raw HTTP request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tempfile::TempDir;

pub fn lease(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("LEASE_DB")
        .env_remove("RUST_LOG")
        .output()
        .expect("the lease binary runs")
}

pub fn fresh_db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("served.db");
    assert_eq!(lease(&db, &["init"]).status.code(), Some(0));
    (dir, db)
}

pub fn make_key(db: &Path, principal: &str, scope: &str) -> Value {
    let out = lease(
        db,
        &["keys", "create", principal, "--scope", scope, "--json"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A new key of `principal` with `scope`: its secret.
pub fn key_secret(db: &Path, principal: &str, scope: &str) -> String {
    make_key(db, principal, scope)["key"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A running `lease serve`, its stderr collected; killed on drop, pass or fail.
///
/// The server runs in a process group of its own, and every signal goes to the whole group:
/// a server started under another program (strace, which `cut_connections` uses) would
/// otherwise outlive its test, detached and orphaned to init when only that program is killed.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub log: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(db: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lease"))
            .arg("--db")
            .arg(db)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env_remove("LEASE_DB")
            .envs(envs.iter().copied())
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        Server::from_child(child, stderr)
    }

    /// A server started by the caller (under strace, say), once it says where it listens on
    /// `stderr`. The caller starts it in a process group of its own (`process_group(0)`), so
    /// that stopping it stops everything it started.
    pub fn from_child(child: Child, stderr: std::process::ChildStderr) -> Server {
        let mut lines = BufReader::new(stderr).lines();
        let log = Arc::new(Mutex::new(String::new()));
        let addr = loop {
            let line = lines
                .next()
                .expect("the server says where it listens")
                .unwrap();
            log.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some((_, rest)) = line
                .strip_prefix("lease: serving ")
                .and_then(|r| r.split_once("://"))
            {
                break rest.split_whitespace().next().unwrap().to_owned();
            }
        };
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Server { child, addr, log }
    }

    /// One request on its own connection: (status, body as JSON or text).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, Value) {
        try_call(&self.addr, method, path, headers, body).expect("the server answers")
    }

    pub fn stop(self) -> (Option<i32>, String) {
        self.stop_within(std::time::Duration::from_secs(60))
            .expect("the server stops within a minute of SIGTERM")
    }

    /// SIGTERM, then the exit code and the log if the server exits within `limit` (else it
    /// is killed on drop and `None` comes back).
    pub fn stop_within(mut self, limit: std::time::Duration) -> Option<(Option<i32>, String)> {
        rustix::process::kill_process_group(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        let log = self.log.lock().unwrap().clone();
        Some((status.code(), log))
    }
}

/// One request on its own connection: (status, body, its `Retry-After` if any), or `None` if
/// the connection failed or broke off.
pub fn call_with_headers(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<(u16, Value, Option<String>)> {
    let answer = raw_call(addr, method, path, headers, body)?;
    let status: u16 = answer.get(9..12)?.parse().ok()?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let retry_after = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("retry-after")
            .then(|| value.trim().to_owned())
    });
    let body = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    Some((status, body, retry_after))
}

/// One request on its own connection, or `None` if the connection failed or broke off.
pub fn try_call(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<(u16, Value)> {
    call_with_headers(addr, method, path, headers, body).map(|(status, body, _)| (status, body))
}

/// One request on its own connection (`Connection: close`): the whole answer as text.
fn raw_call(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        request.push_str("Content-Type: application/json\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process_group(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::KILL,
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
