//! Project tasks: `cargo xtask ci` runs every check CI runs; `cargo xtask bench` runs the
//! benchmarks; `cargo xtask mutants` runs mutation testing.

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

/// Library and binary code (not tests, not test support) may not unwrap, expect or panic on
/// what it meets, and exports nothing unreachable; each exception is allowed in place with
/// its reason (the tidy test checks that).
const LIBRARY_LINTS: [&str; 14] = [
    "clippy",
    "--workspace",
    "--lib",
    "--bins",
    "--",
    "-D",
    "warnings",
    "-D",
    "clippy::unwrap_used",
    "-D",
    "clippy::expect_used",
    "-D",
    "clippy::panic",
    "-Dunreachable_pub",
];

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
    cargo(&LIBRARY_LINTS, &[])?;
    cargo(&["test", "--workspace"], &[])?;
    cargo(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
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

/// The SQLite adapter's core files, whose mutants the fast tests must catch.
const SQLITE_CORE: [&str; 5] = [
    "crates/lease-sqlite/src/ops.rs",
    "crates/lease-sqlite/src/group.rs",
    "crates/lease-sqlite/src/schema.rs",
    "crates/lease-sqlite/src/error.rs",
    "crates/lease-sqlite/src/connection.rs",
];

/// The adapter's test binaries that take seconds, not the kill soak or the power-loss trials.
const SQLITE_FAST_TESTS: [&str; 9] = [
    "clock_edges",
    "conformance",
    "differential",
    "full_and_read_only",
    "group_commit",
    "hostile_files",
    "linearizability",
    "relative_path",
    "seed_api",
];

/// Mutation testing with cargo-mutants: lease-domain against its own tests, then the SQLite
/// adapter's core files against its fast tests. Reports go to target/mutants/.
fn mutants(rest: &[String]) -> Result<(), String> {
    let installed = Command::new(env!("CARGO"))
        .args(["mutants", "--version"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !installed {
        return Err(
            "cargo-mutants is not installed: run `cargo install --locked cargo-mutants`".into(),
        );
    }
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("xtask has no parent directory")?
        .join("target/mutants");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let (domain_out, sqlite_out) = (
        out.join("domain").display().to_string(),
        out.join("sqlite").display().to_string(),
    );
    let extra: Vec<&str> = rest.iter().map(String::as_str).collect();
    let mut domain = vec![
        "mutants",
        "--package",
        "lease-domain",
        "--output",
        &domain_out,
    ];
    domain.extend(&extra);
    let domain_result = cargo(&domain, &[]);
    let mut sqlite = vec![
        "mutants",
        "--package",
        "lease-sqlite",
        "--output",
        &sqlite_out,
    ];
    for file in SQLITE_CORE {
        sqlite.extend(["--file", file]);
    }
    sqlite.extend(&extra);
    sqlite.extend(["--", "--lib"]);
    for test in SQLITE_FAST_TESTS {
        sqlite.extend(["--test", test]);
    }
    let sqlite_result = cargo(&sqlite, &[]);
    domain_result.and(sqlite_result)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        Some("mutants") => mutants(&args[1..]),
        _ => Err(
            "usage: cargo xtask <ci | bench [--quick] | mutants [cargo-mutants options]>"
                .to_owned(),
        ),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
