//! An HTTP resource server that refuses stale writers: a ledger of text entries in a SQLite
//! file, each write checked by the fence guard in the same transaction that stores it.
//!
//! ```text
//! cargo run -p lease-guard --example ledger -- --listen 127.0.0.1:8080 --db ledger.db
//! ```
//!
//! - `PUT /entries/{key}` with headers `Lease-Job` and `Lease-Fence`; the body is the entry's
//!   text. `200 {"ok": true, "fence": n}` when the guard admits it (the entry is stored in the
//!   same transaction), `409 {"ok": false, "presented": n, "current": m}` when the fence is
//!   stale (nothing is stored), `400 {"ok": false, "error": "..."}` for a missing or malformed
//!   header or a body that is not UTF-8 text.
//! - `GET /entries/{key}`: `200 {"key", "text", "fence"}`, or `404 {"ok": false, "error": ...}`.
//!
//! It prints `listening on ADDR` once it accepts connections (useful with port 0).

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use lease_guard::http::{FENCE_HEADER, JOB_HEADER, Refusal, check};
use lease_guard::sqlite::{SqliteGuard, install};
use rusqlite::{Connection, OptionalExtension};
use serde_json::json;

type Ledger = Arc<Mutex<Connection>>;

fn answer(status: StatusCode, body: serde_json::Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn failed(status: StatusCode, error: impl std::fmt::Display) -> Response {
    answer(status, json!({"ok": false, "error": error.to_string()}))
}

async fn put_entry(
    State(ledger): State<Ledger>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    // Every value of each header, as sent: `check` refuses a repeated or non-UTF-8 one.
    let header =
        |name: &str| -> Vec<&[u8]> { headers.get_all(name).iter().map(|v| v.as_bytes()).collect() };
    let Ok(text) = String::from_utf8(body.to_vec()) else {
        return failed(StatusCode::BAD_REQUEST, "the entry's text is not UTF-8");
    };
    let Ok(mut conn) = ledger.lock() else {
        return failed(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the ledger's lock is poisoned",
        );
    };
    let tx = match conn.transaction() {
        Ok(tx) => tx,
        Err(e) => return failed(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    // The guard's check and the entry commit together, or not at all.
    let fence = match check(
        &header(JOB_HEADER),
        &header(FENCE_HEADER),
        &SqliteGuard::new(&tx),
    ) {
        Ok((_job, fence)) => fence,
        Err(Refusal::Stale { presented, current }) => {
            return answer(
                StatusCode::CONFLICT,
                json!({"ok": false, "presented": presented.get(), "current": current.get()}),
            );
        }
        Err(refusal) => {
            let status =
                StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return failed(status, refusal);
        }
    };
    let stored = tx
        .execute(
            "INSERT INTO entries(key, text, fence) VALUES (?1, ?2, ?3) \
             ON CONFLICT(key) DO UPDATE SET text = excluded.text, fence = excluded.fence",
            rusqlite::params![key, text, i64::from(fence)],
        )
        .and_then(|_| tx.commit());
    match stored {
        Ok(()) => answer(StatusCode::OK, json!({"ok": true, "fence": fence.get()})),
        Err(e) => failed(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn get_entry(State(ledger): State<Ledger>, Path(key): Path<String>) -> Response {
    let Ok(conn) = ledger.lock() else {
        return failed(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the ledger's lock is poisoned",
        );
    };
    let found = conn
        .query_row(
            "SELECT text, fence FROM entries WHERE key = ?1",
            [&key],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
        )
        .optional();
    match found {
        Ok(Some((text, fence))) => answer(
            StatusCode::OK,
            json!({"key": key, "text": text, "fence": fence}),
        ),
        Ok(None) => failed(StatusCode::NOT_FOUND, format!("no entry {key}")),
        Err(e) => failed(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

fn arg(args: &[String], name: &str) -> Result<String, String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .ok_or_else(|| format!("usage: ledger --listen ADDR --db PATH (missing {name})"))
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let listen = arg(&args, "--listen")?;
    let db = arg(&args, "--db")?;
    let conn = Connection::open(&db).map_err(|e| format!("cannot open {db}: {e}"))?;
    install(&conn).map_err(|e| e.to_string())?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
         CREATE TABLE IF NOT EXISTS entries(key TEXT PRIMARY KEY, text TEXT NOT NULL, fence INTEGER NOT NULL)",
    )
    .map_err(|e| e.to_string())?;
    let app = Router::new()
        .route("/entries/{key}", put(put_entry).get(get_entry))
        .with_state(Arc::new(Mutex::new(conn)));
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {addr}");
    axum::serve(listener, app).await.map_err(|e| e.to_string())
}
