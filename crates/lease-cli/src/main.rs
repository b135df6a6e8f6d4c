//! The `lease` binary: parses arguments, reads the clock and the environment, opens the store
//! and prints the answer.

// Library and binary code may not unwrap, expect or panic on what it meets, nor export what is
// unreachable (each exception allowed in place with its reason); tests may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        unreachable_pub
    )
)]

mod args;
mod batch;
mod cli;
mod control;
mod demo;
mod execute;
mod guard;
mod jobs;
mod leases;
mod processes;
mod render;
mod scheduler;
mod serve;
mod target;
mod when;
mod work;

use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Parser;
use lease_sqlite::{SqliteLeaseStore, SqliteOptions};
use serde_json::json;

use crate::cli::{Cli, Request};
use crate::render::{Report, Response, respond};
use crate::target::{Settings, clock_mode};

/// The system clock in Unix seconds; a clock before 1970 reads as negative seconds.
fn unix_now() -> f64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// Reads a result or payload file, or standard input for `-`: at most `limit` bytes (one more
/// is read to tell that there are more, and then nothing else).
fn read_input(path: &Path, limit: usize) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let read = if path == Path::new("-") {
        std::io::stdin().take(cap).read_to_end(&mut bytes).map(drop)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(cap).read_to_end(&mut bytes).map(drop))
    };
    let shown = if path == Path::new("-") {
        "standard input".to_owned()
    } else {
        path.display().to_string()
    };
    read.map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() > limit {
        return Err(format!(
            "{shown} holds more than {limit} bytes, the most it may hold here"
        ));
    }
    Ok(bytes)
}

/// A setting given by a flag (clap refuses an empty one), else by an environment variable, whose
/// empty value is an error that names the variable.
fn setting(flag: Option<String>, env: &str) -> Result<Option<String>, String> {
    if flag.is_some() {
        return Ok(flag);
    }
    match std::env::var_os(env) {
        None => Ok(None),
        Some(value) if value.is_empty() => {
            Err(format!("{env} is set but empty; unset it or give a value"))
        }
        Some(value) => value
            .into_string()
            .map(Some)
            .map_err(|v| format!("{env} is not valid text: {v:?}")),
    }
}

/// The named database and the settings of either store from the flags and the environment.
fn store_settings(cli: &Cli) -> Result<(String, Settings), String> {
    // A path is used as given or refused: read lossily, it would name another file.
    let flag = match &cli.db {
        Some(path) => Some(path.to_str().map(str::to_owned).ok_or_else(|| {
            format!("--db {path:?} is not valid UTF-8; name the database with a UTF-8 path")
        })?),
        None => None,
    };
    let db = setting(flag, "LEASE_DB")?.unwrap_or_else(|| "lease.db".to_owned());
    let clock = clock_mode(
        setting(cli.clock.clone(), "LEASE_CLOCK")?.as_deref(),
        setting(cli.max_skew.map(|t| t.to_string()), "LEASE_MAX_SKEW")?.as_deref(),
    )?;
    let mut sqlite = SqliteOptions {
        create: false,
        exclusive: cli.exclusive,
        allow_unverified_filesystem: cli.allow_unverified_fs,
        clock,
        ..SqliteOptions::default()
    };
    let timeout = setting(
        cli.busy_timeout.map(|t| t.to_string()),
        "LEASE_BUSY_TIMEOUT",
    )?;
    if let Some(text) = timeout {
        let seconds: f64 = text
            .parse()
            .map_err(|_| format!("--busy-timeout {text:?} is not a number of seconds"))?;
        sqlite.busy_timeout = args::duration_flag("--busy-timeout", seconds)?;
    }
    let schema = setting(cli.pg_schema.clone(), "LEASE_PG_SCHEMA")?;
    if let Some(name) = &schema {
        lease_postgres::check_schema_name(name).map_err(|e| e.to_string())?;
    }
    let mut postgres = target::pg_options(schema, sqlite.busy_timeout, clock);
    let audit = cli.audit
        || match setting(None, "LEASE_AUDIT")?.as_deref() {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => return Err(format!("LEASE_AUDIT must be 0 or 1, got {other:?}")),
        };
    if audit {
        sqlite.audit = Some(lease_ports::audit::DEFAULT_RETENTION);
        postgres.audit = Some(lease_ports::audit::DEFAULT_RETENTION);
    }
    Ok((db, Settings { sqlite, postgres }))
}

/// The server `--server` / `LEASE_SERVER` names, with its key, if any.
fn remote(cli: &Cli) -> Result<Option<lease_client::HttpLeaseStore>, String> {
    let Some(url) = setting(cli.server.clone(), "LEASE_SERVER")? else {
        return Ok(None);
    };
    if cli.db.is_some() {
        return Err("--server and --db name two stores; give one".to_owned());
    }
    let key = setting(cli.api_key.clone(), "LEASE_API_KEY")?
        .ok_or("--server needs an API key: --api-key KEY or LEASE_API_KEY")?;
    let ca = match &cli.ca_cert {
        Some(path) => Some(path.clone()),
        None => setting(None, "LEASE_CA_CERT")?.map(std::path::PathBuf::from),
    };
    let ca_cert = ca
        .map(|path| {
            std::fs::read(&path)
                .map_err(|e| format!("--ca-cert {}: cannot read it: {e}", path.display()))
        })
        .transpose()?;
    // A worker that exports its spans sends each request's context, so the server's span of
    // the request is in the attempt's trace.
    let traced = matches!(&cli.command, cli::Command::Work(work)
        if work.otlp_endpoint.as_deref().is_some_and(|e| !e.trim().is_empty()));
    let options = lease_client::ClientOptions {
        ca_cert,
        traceparent: traced
            .then(|| lease_client::Traceparent(std::sync::Arc::new(lease_otel::traceparent))),
        ..lease_client::ClientOptions::default()
    };
    lease_client::HttpLeaseStore::new(&url, &key, options)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Lines said as `lease work` and `lease serve` go, on stderr (best effort: a closed stderr
/// stops neither).
fn say_on_stderr() -> scheduler::Say {
    std::sync::Arc::new(|line: &str| {
        let _ = writeln!(std::io::stderr(), "{line}");
    })
}

/// Runs `lease work` against `store`, serving its metrics first when asked.
async fn run_work(
    work: &work::WorkRequest,
    store: std::sync::Arc<dyn lease_ports::control::Controlled>,
    schedules: bool,
) -> Result<Report, String> {
    if let Some(addr) = work.metrics {
        lease_worker::serve_metrics(addr)?;
    }
    let clock: lease_schedule::Clock = std::sync::Arc::new(clock_now);
    let schedules = (schedules && work.schedules).then(|| (std::sync::Arc::clone(&store), clock));
    work::run(work, store, schedules, say_on_stderr(), |report| {
        // Progress is best effort: a closed stderr does not stop the worker.
        let line = work::progress_line(report, clock_now());
        let _ = writeln!(std::io::stderr(), "{line}");
    })
    .await
}

/// Runs a request against a remote server: every command that works through the port.
async fn run_remote(
    request: Request,
    store: lease_client::HttpLeaseStore,
) -> Result<Report, String> {
    let store = std::sync::Arc::new(lease_ports::observe::Observed::new(std::sync::Arc::new(
        store,
    )));
    match request {
        Request::Init
        | Request::Demo
        | Request::Serve(_)
        | Request::Keys(_)
        | Request::Guard(_)
        | Request::Migrate { .. }
        | Request::Backup(_)
        | Request::Restore(_)
        | Request::Epoch { .. }
        | Request::Heads { .. } => Err(
            "init, demo, serve, keys, migrate, backup, restore, epoch and heads open a database: \
             give --db, not --server"
                .to_owned(),
        ),
        Request::Audit(filter) => target::audit_report(store.as_ref(), &filter, clock_now()).await,
        // The server runs the schedules (and a worker key may not fire them).
        Request::Work(work) => run_work(&work, store, false).await,
        request => execute::execute(&request, store.as_ref(), judged_at(&request))
            .await
            .map_err(|e| e.to_string()),
    }
}

/// The time a request's answer is read at: its own `--now`, else the clock.
fn judged_at(request: &Request) -> lease_domain::Timestamp {
    request.now().unwrap_or_else(clock_now)
}

/// The system clock as a time (the epoch if the clock is not a finite time).
fn clock_now() -> lease_domain::Timestamp {
    lease_domain::Timestamp::new(unix_now()).unwrap_or(lease_domain::Timestamp::ZERO)
}

async fn run(cli: Cli) -> Result<Report, String> {
    let server = remote(&cli)?;
    let (db, settings) = store_settings(&cli)?;
    let request = cli
        .command
        .into_request(unix_now, &read_input)
        .map_err(|e| e.to_string())?;
    // A guarded resource is named by its own URL: neither --db nor --server.
    if let Request::Guard(request) = request {
        return guard::run(request).await;
    }
    if let Some(server) = server {
        return run_remote(request, server).await;
    }
    let target = settings.target(&db);
    match request {
        Request::Demo => {
            let dir = tempfile::tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let path = dir.path().join("demo.db");
            let store = SqliteLeaseStore::open(&path).map_err(|e| e.to_string())?;
            demo::run(&store, &path.display().to_string()).await
        }
        Request::Init => {
            target.open(true).await?;
            let shown = target.shown();
            Ok(Report::new(
                true,
                json!({"ok": true, "db": shown}),
                format!("lease database ready at {shown}"),
            ))
        }
        Request::Audit(filter) => target::run_audit(&target, &filter, clock_now()).await,
        Request::Migrate { from, to, merge } => {
            target::run_migrate(&settings.target(&from), &settings.target(&to), merge).await
        }
        Request::Backup(to) => target::run_backup(&target, &to).await,
        Request::Restore(from) => target::run_restore(&target, &from).await,
        Request::Epoch { raise } => target::run_epoch(&target, raise).await,
        Request::Heads { rebuild } => target::run_heads(&target, rebuild).await,
        Request::Serve(mut request) => {
            request.audit = settings.sqlite.audit.is_some();
            let opened = target.open(false).await?;
            if let Some(note) = opened.replication_note().await {
                say_on_stderr()(&note);
            }
            let clock: lease_server::Clock = std::sync::Arc::new(clock_now);
            serve::serve(
                &opened,
                &target.shown(),
                &request,
                clock,
                serve::install_metrics(),
                say_on_stderr(),
            )
            .await
        }
        Request::Keys(request) => {
            let opened = target.open(false).await?;
            let now = lease_domain::Timestamp::new(unix_now()).map_err(|e| e.to_string())?;
            serve::keys(&opened, &request, now).await
        }
        Request::Work(work) => {
            let opened = target.open(false).await?;
            if let Some(note) = opened.replication_note().await {
                say_on_stderr()(&note);
            }
            run_work(&work, opened.store(), true).await
        }
        request => {
            let target = match &request {
                // The contract races each claim on its own connection.
                Request::Leases(crate::leases::LeasesRequest::ClaimMany(_, owners, _)) => {
                    target.for_racing(owners.len())
                }
                _ => target,
            };
            let store = target.open(false).await?.store();
            execute::execute(&request, store.as_ref(), judged_at(&request))
                .await
                .map_err(|e| e.to_string())
        }
    }
}

/// Writes the answer. If stdout cannot take it (a closed pipe), the operation has already
/// happened: say so on stderr, with the answer, and exit 1.
fn print(response: &Response, json_answer: Option<&str>) -> u8 {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(
            response
                .raw
                .as_deref()
                .unwrap_or(response.stdout.as_bytes()),
        )
        .and_then(|()| stdout.flush());
    let mut stderr = std::io::stderr().lock();
    // Nothing more can be done if stderr is closed too.
    let _ = stderr.write_all(response.stderr.as_bytes());
    match written {
        Ok(()) => response.code,
        Err(e) => {
            let outcome = match response.code {
                render::EXIT_OK => "the operation was accepted",
                render::EXIT_REFUSED => "the operation was refused",
                _ => "the operation failed",
            };
            let answer = json_answer.map(|a| format!(": {a}")).unwrap_or_default();
            let _ = writeln!(
                stderr,
                "lease: error: cannot write the answer to stdout ({e}); {outcome}{answer}"
            );
            render::EXIT_ERROR
        }
    }
}

/// Logs store operations on stderr when asked (`-v`, `-vv`, or `RUST_LOG`), and exports
/// spans over OTLP to `otlp` when given; with neither, no subscriber is installed and spans
/// cost next to nothing. The exporter returned sends what is left when it is shut down.
fn start_logging(verbose: u8, otlp: Option<&str>) -> Result<Option<lease_otel::Exporter>, String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = match (std::env::var("RUST_LOG"), verbose) {
        (Ok(spec), _) if !spec.is_empty() => Some(tracing_subscriber::EnvFilter::new(spec)),
        (_, 0) => None,
        (_, 1) => Some(tracing_subscriber::EnvFilter::new(
            "lease_ports=info,lease_worker=info",
        )),
        (_, _) => Some(tracing_subscriber::EnvFilter::new(
            "lease_ports=debug,lease_worker=debug",
        )),
    };
    let endpoint = otlp.map(str::trim).filter(|e| !e.is_empty());
    if filter.is_none() && endpoint.is_none() {
        return Ok(None);
    }
    let logs = filter.map(|filter| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_filter(filter)
    });
    let (exporter, spans) = match endpoint {
        Some(endpoint) => {
            let (exporter, layer) =
                lease_otel::exporter(endpoint, "lease").map_err(|e| e.to_string())?;
            // The attempts and the requests, and the store calls inside them (ids, queues,
            // fences, routes; never payloads, results, queries, headers or tokens).
            let only = tracing_subscriber::EnvFilter::new(
                "lease_ports=info,lease_worker=info,lease_server=info",
            );
            (Some(exporter), Some(layer.with_filter(only)))
        }
        None => (None, None),
    };
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
    Ok(exporter)
}

fn main() -> ExitCode {
    // Usage errors exit 2 and --help exits 0, both printed by clap.
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    // `--prometheus` conflicts with `--json` however they are placed; clap sees the conflict
    // only when both follow `stats`.
    if cli.json && matches!(&cli.command, cli::Command::Stats(stats) if stats.prometheus) {
        <Cli as clap::CommandFactory>::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--json and --prometheus cannot be used together: each picks the output format",
            )
            .exit();
    }
    let otlp = match &cli.command {
        cli::Command::Work(work) => work.otlp_endpoint.clone(),
        cli::Command::Serve(serve) => serve.otlp_endpoint.clone(),
        _ => None,
    };
    let exporter = match start_logging(cli.verbose, otlp.as_deref()) {
        Ok(exporter) => exporter,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "lease: error: {e}");
            return ExitCode::from(render::EXIT_ERROR);
        }
    };
    let json = cli.json;
    // `work` runs programs and heartbeats side by side, `serve` many requests: they get a
    // multi-threaded runtime.
    let runtime = if matches!(
        cli.command,
        cli::Command::Work { .. } | cli::Command::Serve { .. }
    ) {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    let outcome = match runtime {
        Ok(runtime) => {
            let outcome = runtime.block_on(run(cli));
            // A store call whose caller walked away (a request that timed out, a renewal past
            // its lease's end) may still be waiting on a database locked by another process;
            // nobody waits for its answer, so the process does not either. Ending it is what a
            // crash does to it, which every store is built to survive.
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            outcome
        }
        Err(e) => Err(format!("cannot start the runtime: {e}")),
    };
    // The spans not sent yet go before the process ends.
    if let Some(exporter) = exporter {
        exporter.shutdown();
    }
    let json_answer = outcome.as_ref().ok().map(|r| r.json.to_string());
    let response = respond(outcome, json);
    ExitCode::from(print(&response, json_answer.as_deref()))
}
