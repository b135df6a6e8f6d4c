//! Project tasks: `cargo xtask ci` runs every check CI runs; `cargo xtask bench` runs the benchmarks.

use std::process::{Command, ExitCode};

fn cargo(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new(env!("CARGO"))
        .args(args)
        .envs(env.iter().copied())
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo {} failed ({status})", args.join(" ")))
    }
}

/// Every check CI runs, in order, stopping at the first failure.
fn ci() -> Result<(), String> {
    cargo(&["fmt", "--all", "--check"], &[])?;
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    cargo(&["test", "--workspace"], &[])?;
    cargo(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    cargo(&["bench", "--workspace", "--no-run"], &[])?;
    cargo(&["test", "-p", "lease-benches", "--benches"], &[])
}

/// Runs the benchmark report (one table, also written to target/bench-report.md); without
/// `--quick` it then runs the criterion micro-benchmarks too.
fn bench(rest: &[String]) -> Result<(), String> {
    let quick = rest.iter().any(|a| a == "--quick");
    let mut report = vec!["bench", "-p", "lease-benches", "--bench", "report", "--"];
    if quick {
        report.push("--quick");
    }
    cargo(&report, &[])?;
    if !quick {
        cargo(&["bench", "-p", "lease-benches", "--bench", "lease"], &[])?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        _ => Err("usage: cargo xtask <ci | bench [--quick]>".to_owned()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
