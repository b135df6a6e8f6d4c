//! `cargo xtask bench --peers`: lease's SQLite queue loop against effectum (an embeddable job
//! queue on SQLite), in turn, in one run: for 1, 16 and 64 workers, three rounds of lease's
//! blocking loop and `Worker` runtime at `synchronous=FULL` (the report's queue rows, one at a
//! time) and effectum's `Worker`, both as published (the rollback journal: its `PRAGMA journal
//! = wal` is not a pragma) and in WAL mode with its `synchronous=normal` (no sync at a commit);
//! medians, ratios of medians, and each one's process CPU per job. effectum links an older
//! SQLite than lease, so it builds in a workspace of its own (`benches/peers/effectum`, into
//! `target/peers`). The table goes to stdout and `target/peers-report.md`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// Jobs per run: `LEASE_BENCH_PEER_JOBS`, else 30,000 (issue 28's figures). effectum as
/// published gets a tenth (it runs at a few hundred jobs a second with one worker).
fn jobs() -> u64 {
    std::env::var("LEASE_BENCH_PEER_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(30_000)
}

/// One measured run: jobs a second and process CPU per job in microseconds.
#[derive(Clone, Copy)]
struct Measured {
    rate: f64,
    cpu: f64,
}

fn output(command: &mut Command) -> Result<String, String> {
    let out = command
        .output()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{command:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The number after `key` (up to the next space or comma) in `line`.
fn field(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    let end = rest.find([' ', ',']).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// One of the report's queue rows, alone (`LEASE_BENCH_QUEUE_ROW`).
fn lease_row(report: &Path, row: &str, jobs: u64) -> Result<Measured, String> {
    let out = output(
        Command::new(report)
            .args(["--bench", "--quick", "--queue-only"])
            .env("LEASE_BENCH_QUEUE_ROW", row)
            .env("LEASE_BENCH_QUEUE_JOBS", jobs.to_string()),
    )?;
    let line = out
        .lines()
        .find(|l| l.starts_with("queue row "))
        .ok_or_else(|| format!("the report printed no figure for {row:?}:\n{out}"))?;
    let rate = field(line, ": ").ok_or_else(|| format!("no rate in {line:?}"))?;
    let cpu = field(line, "jobs/s, ").ok_or_else(|| format!("no CPU in {line:?}"))?;
    Ok(Measured { rate, cpu })
}

/// effectum's worker draining `jobs` jobs with `workers` slots (`wal`: in WAL mode).
fn effectum(peer: &Path, jobs: u64, workers: usize, wal: bool) -> Result<Measured, String> {
    let mut command = Command::new(peer);
    command.args([jobs.to_string(), workers.to_string()]);
    if wal {
        command.arg("wal");
    }
    let out = output(&mut command)?;
    let rate = field(&out, "jobs_per_s=").ok_or_else(|| format!("no rate in {out:?}"))?;
    let cpu = field(&out, "cpu_us_per_job=").ok_or_else(|| format!("no CPU in {out:?}"))?;
    let expected = if wal { "wal" } else { "delete" };
    if !out.contains(&format!("journal_mode={expected}")) {
        return Err(format!(
            "effectum ran in another journal mode than {expected}: {out}"
        ));
    }
    Ok(Measured { rate, cpu })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Builds the peer and runs every row in turn; `report` is the built report binary.
///
/// # Errors
/// A build or a run that failed, or an output that could not be read.
pub(crate) fn bench(root: &Path, report: &Path) -> Result<(), String> {
    let target = root.join("target/peers");
    let manifest = root.join("benches/peers/effectum/Cargo.toml");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "--locked", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .map_err(|e| format!("cannot build the effectum peer: {e}"))?;
    if !status.success() {
        return Err(format!("building the effectum peer failed ({status})"));
    }
    let peer = target.join("release/effectum-peer");
    let jobs = jobs();
    let mut table = format!(
        "lease against effectum 0.7, {jobs} jobs a run (effectum as published: {}), three \
         rounds in turn, medians; jobs/s, and process CPU per job\n\n\
         | workers | lease blocking, FULL | lease `Worker`, FULL | effectum, WAL, NORMAL | \
         effectum as published | lease `Worker` ÷ effectum WAL | lease blocking ÷ effectum WAL |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n",
        jobs / 10
    );
    for workers in [1_usize, 16, 64] {
        let mut runs: [Vec<Measured>; 4] = Default::default();
        for _ in 0..3 {
            runs[0].push(lease_row(
                report,
                &format!("blocking, FULL@{workers}"),
                jobs,
            )?);
            runs[1].push(lease_row(
                report,
                &format!("worker runtime, FULL@{workers}"),
                jobs,
            )?);
            runs[2].push(effectum(&peer, jobs, workers, true)?);
            runs[3].push(effectum(&peer, jobs / 10, workers, false)?);
        }
        let [blocking, runtime, wal, published] = runs.map(|r| {
            (
                median(r.iter().map(|m| m.rate).collect()),
                median(r.iter().map(|m| m.cpu).collect()),
            )
        });
        let cell = |(rate, cpu): (f64, f64)| format!("{rate:.0} ({cpu:.0} µs)");
        let _ = writeln!(
            table,
            "| {workers} | {} | {} | {} | {} | {:.2}x | {:.2}x |",
            cell(blocking),
            cell(runtime),
            cell(wal),
            cell(published),
            runtime.0 / wal.0,
            blocking.0 / wal.0
        );
    }
    println!("{table}");
    let path = root.join("target/peers-report.md");
    std::fs::write(&path, &table).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
