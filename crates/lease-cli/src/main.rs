//! The `lease` binary: parses arguments, reads the clock, opens the store and prints the answer.

mod cli;
mod demo;
mod execute;

use std::io::Write;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Parser;
use lease_sqlite::{SqliteLeaseStore, SqliteOptions};
use serde_json::json;

use crate::cli::{Cli, Request};
use crate::execute::{Report, Response, respond};

/// The system clock in Unix seconds; a clock before 1970 reads as negative seconds.
fn unix_now() -> f64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

async fn run(cli: Cli) -> Result<Report, String> {
    let request = cli
        .command
        .into_request(unix_now)
        .map_err(|e| format!("invalid input: {e}"))?;
    let db = cli.db.display().to_string();
    match request {
        Request::Demo => {
            let dir = tempfile::tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let path = dir.path().join("demo.db");
            let store = SqliteLeaseStore::open(&path).map_err(|e| e.to_string())?;
            demo::run(&store, &path.display().to_string()).await
        }
        Request::Init => {
            SqliteLeaseStore::open(&cli.db).map_err(|e| e.to_string())?;
            Ok(Report {
                accepted: true,
                json: json!({"ok": true, "db": db}),
                human: format!("lease database ready at {db}"),
            })
        }
        request => {
            let options = match &request {
                // The contract races each claim on its own thread and its own connection:
                // group commit would serialize them inside one transaction instead.
                Request::ClaimMany(_, owners, _) => SqliteOptions {
                    create: false,
                    max_batch: 1,
                    pool_size: u32::try_from(owners.len().clamp(1, 64)).unwrap_or(64),
                    ..SqliteOptions::default()
                },
                _ => SqliteOptions {
                    create: false,
                    ..SqliteOptions::default()
                },
            };
            let store = SqliteLeaseStore::open_with(&cli.db, options).map_err(|e| e.to_string())?;
            execute::execute(&request, &store)
                .await
                .map_err(|e| e.to_string())
        }
    }
}

fn main() -> ExitCode {
    // Usage errors exit 2 and --help exits 0, both printed by clap.
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    let json = cli.json;
    let outcome = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => Err(format!("cannot start the runtime: {e}")),
    };
    let Response {
        stdout,
        stderr,
        code,
    } = respond(outcome, json);
    // A closed stdout (`lease state j | head -c0`) must not turn into a panic.
    let _ = std::io::stdout().write_all(stdout.as_bytes());
    let _ = std::io::stderr().write_all(stderr.as_bytes());
    ExitCode::from(code)
}
