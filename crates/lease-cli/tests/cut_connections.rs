//! `lease serve` answers what a client can act on when its store's connection is cut at each
//! step of a request: before the statement and during it, nothing is applied and the answer
//! is `503` with `Retry-After`; during the commit the outcome is unknown and the answer is
//! `500 outcome_unknown`, which the HTTP client turns into its `Indeterminate` error. Never an
//! undocumented answer. PostgreSQL is reached through a proxy that reads the protocol and cuts
//! the connection at a chosen statement; SQLite's commit is failed by strace's fault injection.

use crate::support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use support::{Server, fresh_db, key_secret, lease};

/// Where the proxy cuts a connection: at the first statement (prepared or simple) whose SQL
/// contains `at`, on a connection whose transaction ran a statement containing `within`
/// (when given) before it; before sending it to the server or after (its answer never comes
/// back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cut {
    at: &'static str,
    within: Option<&'static str>,
    after: bool,
}

/// The store's read that locks one job, the first statement of a write to it.
const LOCK_JOB: &str = "jobs WHERE id = $1 FOR UPDATE";

impl Cut {
    fn before(at: &'static str) -> Cut {
        Cut {
            at,
            within: None,
            after: false,
        }
    }

    fn after(at: &'static str) -> Cut {
        Cut {
            at,
            within: None,
            after: true,
        }
    }

    /// The commit of a transaction that wrote a job (not a schedule pass's, say).
    fn commit_of_a_job_write() -> Cut {
        Cut {
            at: "COMMIT",
            within: Some(LOCK_JOB),
            after: true,
        }
    }
}

fn contains(sql: &str, text: &str) -> bool {
    sql.to_ascii_uppercase()
        .contains(&text.to_ascii_uppercase())
}

/// A TCP proxy to the local PostgreSQL that reads the frontend protocol (startup, then typed
/// messages), learns each prepared statement's SQL from its Parse message, and cuts the
/// connection once, as armed.
struct PgProxy {
    port: u16,
    armed: Arc<Mutex<Option<Cut>>>,
    fired: Arc<AtomicBool>,
}

impl PgProxy {
    fn start() -> PgProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Arc<Mutex<Option<Cut>>> = Arc::default();
        let fired = Arc::new(AtomicBool::new(false));
        let (a, f) = (armed.clone(), fired.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let (a, f) = (a.clone(), f.clone());
                std::thread::spawn(move || relay(client, &a, &f));
            }
        });
        PgProxy { port, armed, fired }
    }

    fn arm(&self, cut: Cut) {
        self.fired.store(false, Ordering::SeqCst);
        *self.armed.lock().unwrap() = Some(cut);
    }

    fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

fn read_exact(stream: &mut TcpStream, n: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0; n];
    stream.read_exact(&mut buf).ok()?;
    Some(buf)
}

fn cstring(bytes: &[u8]) -> (&[u8], &[u8]) {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    (&bytes[..end], bytes.get(end + 1..).unwrap_or_default())
}

/// Relays one connection, cutting it where the armed [`Cut`] says.
fn relay(mut client: TcpStream, armed: &Mutex<Option<Cut>>, fired: &AtomicBool) {
    let Ok(mut server) = TcpStream::connect("127.0.0.1:5432") else {
        return;
    };
    let muted = Arc::new(AtomicBool::new(false));
    {
        // The server's side, copied as it comes until the cut mutes it.
        let (mut from, mut to, muted) = (
            server.try_clone().unwrap(),
            client.try_clone().unwrap(),
            muted.clone(),
        );
        std::thread::spawn(move || {
            let mut buf = [0; 16384];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 || muted.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
        });
    }
    let cut_both = |client: &TcpStream, server: &TcpStream| {
        let _ = client.shutdown(Shutdown::Both);
        let _ = server.shutdown(Shutdown::Both);
    };
    // Startup: an untyped message (SSL and GSS requests come before the real one).
    loop {
        let Some(mut message) = read_exact(&mut client, 4) else {
            return;
        };
        let len = usize::try_from(u32::from_be_bytes(message[..4].try_into().unwrap())).unwrap();
        let Some(body) = read_exact(&mut client, len - 4) else {
            return;
        };
        let code = u32::from_be_bytes(body[..4].try_into().unwrap());
        message.extend(&body);
        if server.write_all(&message).is_err() {
            return;
        }
        if code != 80_877_103 && code != 80_877_104 {
            break;
        }
    }
    let mut statements: std::collections::HashMap<Vec<u8>, String> = Default::default();
    let mut cut_after_sync = false;
    // The statements of the connection's open transaction, for `Cut::within`.
    let mut context: Vec<String> = Vec::new();
    loop {
        let Some(head) = read_exact(&mut client, 5) else {
            cut_both(&client, &server);
            return;
        };
        let len = usize::try_from(u32::from_be_bytes(head[1..5].try_into().unwrap())).unwrap();
        let Some(body) = read_exact(&mut client, len - 4) else {
            cut_both(&client, &server);
            return;
        };
        let sql = match head[0] {
            b'P' => {
                let (name, rest) = cstring(&body);
                let (query, _) = cstring(rest);
                statements.insert(name.to_vec(), String::from_utf8_lossy(query).into_owned());
                None
            }
            b'B' => {
                let (_portal, rest) = cstring(&body);
                let (name, _) = cstring(rest);
                statements.get(name).cloned()
            }
            b'Q' => Some(String::from_utf8_lossy(cstring(&body).0).into_owned()),
            _ => None,
        };
        let cut = sql.and_then(|sql| {
            let mut armed = armed.lock().unwrap();
            let hit = armed.is_some_and(|cut| {
                contains(&sql, cut.at)
                    && cut
                        .within
                        .is_none_or(|w| context.iter().any(|s| contains(s, w)))
            });
            if contains(&sql, "COMMIT") || contains(&sql, "ROLLBACK") {
                context.clear();
            } else {
                context.push(sql);
            }
            if hit { armed.take() } else { None }
        });
        match cut {
            Some(Cut { after: false, .. }) => {
                fired.store(true, Ordering::SeqCst);
                cut_both(&client, &server);
                return;
            }
            Some(Cut { after: true, .. }) => {
                fired.store(true, Ordering::SeqCst);
                muted.store(true, Ordering::SeqCst);
                cut_after_sync = true;
            }
            None => {}
        }
        let mut message = head;
        message.extend(&body);
        if server.write_all(&message).is_err() {
            cut_both(&client, &server);
            return;
        }
        let ends = matches!(message[0], b'S' | b'Q');
        if cut_after_sync && ends {
            // The server has the whole request and runs it; its answer never comes back.
            std::thread::sleep(Duration::from_millis(300));
            cut_both(&client, &server);
            return;
        }
    }
}

/// A `lease serve` over a scratch PostgreSQL database reached through `proxy`, with a worker
/// key: (server, authorization header).
fn served_through(proxy: &PgProxy, scratch: &lease_postgres::ScratchDatabase) -> (Server, String) {
    let direct = Path::new(scratch.url());
    assert_eq!(lease(direct, &["init"]).status.code(), Some(0));
    let key = key_secret(direct, "ci", "worker");
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/{}?sslmode=disable",
        proxy.port,
        scratch.name()
    );
    let server = Server::start(Path::new(&url), &[], &[]);
    (server, format!("Bearer {key}"))
}

fn post(server: &Server, auth: &str, path: &str, body: Value) -> (u16, Value, bool) {
    let (status, body, retry_after) = support::call_with_headers(
        &server.addr,
        "POST",
        path,
        &[("Authorization", auth)],
        &body.to_string(),
    )
    .expect("the server answers");
    (status, body, retry_after.is_some())
}

fn job(server: &Server, auth: &str, id: &str) -> Value {
    let (status, body) = server.call(
        "GET",
        &format!("/v1/jobs/{id}"),
        &[("Authorization", auth)],
        "",
    );
    assert_eq!(status, 200, "{body}");
    body
}

/// Cut before the job's locking read, during it, and during the commit of a claim by id; then
/// during the one statement of a claim of the next job and during a completion's commit.
#[test]
fn a_cut_postgres_connection_is_answered_503_or_outcome_unknown_never_an_undocumented_500() {
    let proxy = PgProxy::start();
    let scratch = lease_postgres::ScratchDatabase::create();
    let (server, auth) = served_through(&proxy, &scratch);
    for (queue, id) in [("q", "a"), ("q", "b"), ("q", "c"), ("r", "d")] {
        let (status, body, _) = post(
            &server,
            &auth,
            &format!("/v1/queues/{queue}/jobs"),
            json!({ "id": id }),
        );
        assert_eq!(status, 201, "{body}");
    }
    let claim = json!({"ttl": 600, "owner": "ci/w"});
    // Before the statement and during it: nothing applied, 503 with Retry-After.
    for (cut, id) in [(Cut::before(LOCK_JOB), "a"), (Cut::after(LOCK_JOB), "b")] {
        proxy.arm(cut);
        let (status, body, retry_after) = post(
            &server,
            &auth,
            &format!("/v1/jobs/{id}/claim"),
            claim.clone(),
        );
        assert!(proxy.fired(), "{cut:?}: the proxy never saw the statement");
        assert_eq!(
            (status, body["reason"].as_str(), retry_after),
            (503, Some("unavailable"), true),
            "{cut:?}: {body}"
        );
        let after = job(&server, &auth, id);
        assert_eq!(
            (&after["fence"], &after["status"]),
            (&json!(0), &json!("pending")),
            "{cut:?}"
        );
        // The next request goes through on a new connection.
        let (status, body, _) = post(
            &server,
            &auth,
            &format!("/v1/jobs/{id}/claim"),
            claim.clone(),
        );
        assert_eq!(status, 200, "{cut:?}: {body}");
    }
    // During the commit: the claim may have been applied; the answer says so.
    proxy.arm(Cut::commit_of_a_job_write());
    let (status, body, _) = post(&server, &auth, "/v1/jobs/c/claim", claim.clone());
    assert!(proxy.fired(), "the proxy never saw the commit");
    assert_eq!(
        (status, body["reason"].as_str()),
        (500, Some("outcome_unknown")),
        "{body}"
    );
    let after = job(&server, &auth, "c");
    assert!(
        after["fence"] == json!(1) && after["owner"] == json!("ci/w")
            || after["fence"] == json!(0) && after["owner"].is_null(),
        "one outcome or the other, nothing else: {after}"
    );
    // The queue loop's one statement (claim_next through the step function), cut during it:
    // the statement is its own transaction, so this is its commit too.
    proxy.arm(Cut::after("step("));
    let (status, body, _) = post(&server, &auth, "/v1/queues/q/claims", claim.clone());
    assert!(proxy.fired(), "the proxy never saw the step statement");
    assert_eq!(
        (status, body["reason"].as_str()),
        (500, Some("outcome_unknown")),
        "{body}"
    );
    // A holder's completion, cut during its commit; its answer is unknown, and reading the job
    // tells the holder what happened.
    let (status, held, _) = post(&server, &auth, "/v1/jobs/d/claim", claim.clone());
    assert_eq!(status, 200, "{held}");
    let token = held["lease_token"].as_str().unwrap().to_owned();
    proxy.arm(Cut::commit_of_a_job_write());
    let (status, body, _) = support::call_with_headers(
        &server.addr,
        "POST",
        "/v1/jobs/d/complete",
        &[("Authorization", &auth), ("Lease-Token", &token)],
        &json!({"fence": held["fence"], "result": "r"}).to_string(),
    )
    .map(|(s, b, r)| (s, b, r.is_some()))
    .unwrap();
    assert!(proxy.fired());
    assert_eq!(
        (status, body["reason"].as_str()),
        (500, Some("outcome_unknown")),
        "{body}"
    );
    let after = job(&server, &auth, "d");
    assert!(
        after["status"] == json!("done") && after["result"] == json!("r")
            || after["status"] == json!("running") && after["result"].is_null(),
        "{after}"
    );
    // Every cut was answered and the server goes on: it stops cleanly.
    let (code, log) = server.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// The same cut through the CLI's client: `lease claim --server` reports the unknown outcome
/// as such (exit 1, "outcome unknown"), not as a refusal or a plain failure.
#[test]
fn the_client_reports_an_unknown_outcome_as_unknown() {
    let proxy = PgProxy::start();
    let scratch = lease_postgres::ScratchDatabase::create();
    let (server, auth) = served_through(&proxy, &scratch);
    let (status, _, _) = post(&server, &auth, "/v1/queues/q/jobs", json!({"id": "j"}));
    assert_eq!(status, 201);
    proxy.arm(Cut::commit_of_a_job_write());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lease"))
        .args(["claim", "j", "--owner", "ci/w", "--ttl", "60", "--server"])
        .arg(format!("http://{}", server.addr))
        .env("LEASE_API_KEY", auth.trim_start_matches("Bearer "))
        .env_remove("LEASE_DB")
        .output()
        .unwrap();
    assert!(proxy.fired());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("outcome unknown"), "{stderr}");
    assert!(stderr.contains("outcome_unknown"), "{stderr}");
}

/// A `lease serve` over the SQLite file `db`, run under strace, which fails every call of
/// `syscalls` on the file's write-ahead log with `error`.
fn serve_sqlite_failing(db: &Path, syscalls: &str, error: &str) -> Server {
    let wal = format!("{}-wal", db.display());
    let mut child = std::process::Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-P", &wal])
        .arg(format!("--trace={syscalls}"))
        .arg(format!("--inject={syscalls}:error={error}:when=1+"))
        .arg(env!("CARGO_BIN_EXE_lease"))
        .arg("--db")
        .arg(db)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("LEASE_DB")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("strace is needed (cargo xtask test installs it): {e}"));
    let stderr = child.stderr.take().unwrap();
    Server::from_child(child, stderr)
}

/// On SQLite the step that can lose a write's answer is the commit's sync of the log: failed
/// there, the answer is `500 outcome_unknown`. A log that cannot be written (a full disk)
/// applies nothing: `503` with `Retry-After`, and the job is not there.
#[test]
fn a_failed_sqlite_commit_is_answered_outcome_unknown_and_a_full_disk_503() {
    let (_dir, db) = fresh_db();
    let key = key_secret(&db, "ci", "worker");
    let auth = format!("Bearer {key}");
    let server = serve_sqlite_failing(&db, "fsync,fdatasync", "EIO");
    let (status, body, _) = post(&server, &auth, "/v1/queues/q/jobs", json!({"id": "j"}));
    assert_eq!(
        (status, body["reason"].as_str()),
        (500, Some("outcome_unknown")),
        "{body}"
    );
    drop(server);
    let server = serve_sqlite_failing(&db, "pwrite64,write", "ENOSPC");
    let (status, body, retry_after) = post(&server, &auth, "/v1/queues/q/jobs", json!({"id": "k"}));
    assert_eq!(
        (status, body["reason"].as_str(), retry_after),
        (503, Some("unavailable"), true),
        "{body}"
    );
    let (status, _) = server.call("GET", "/v1/jobs/k", &[("Authorization", &auth)], "");
    assert_eq!(status, 404, "nothing was applied");
}
