//! Project tasks: `cargo xtask test` gets what the tests need and runs them; `cargo xtask ci`
//! runs every check CI runs; `cargo xtask schemathesis` is the longer API search on a fresh
//! seed; `cargo xtask bench` runs the benchmarks; `cargo xtask mutants` runs mutation testing.

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

mod needs;
mod peers;
mod python;
mod side;
mod typescript;

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

/// The directory cargo builds into, as `cargo metadata` says: `target/` under the workspace,
/// or wherever `CARGO_TARGET_DIR` (or a cargo config) puts it.
///
/// # Errors
/// When cargo cannot be run or its answer has no target directory.
pub(crate) fn target_dir() -> Result<std::path::PathBuf, String> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    json_string(&String::from_utf8_lossy(&out.stdout), "target_directory")
        .map(std::path::PathBuf::from)
        .ok_or_else(|| "cargo metadata gave no target_directory".to_owned())
}

/// The string value of the first `"key": "..."` in a JSON text, unescaped (xtask has no JSON
/// parser: it depends on std alone).
fn json_string(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = json[start..].trim_start().strip_prefix(':')?.trim_start();
    let mut chars = rest.strip_prefix('"')?.chars();
    let mut value = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(value),
            '\\' => match chars.next()? {
                'n' => value.push('\n'),
                't' => value.push('\t'),
                'u' => {
                    let code: String = chars.by_ref().take(4).collect();
                    value.push(char::from_u32(u32::from_str_radix(&code, 16).ok()?)?);
                }
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
}

/// The README's test command: gets what the tests need (`needs`), then runs every test of the
/// workspace, all of them even when one fails, then the Python package's tests
/// (`python.rs`). `cargo xtask test -- ARGS` passes ARGS on to `cargo test` and runs only that;
/// `cargo xtask test --python [-- PYTEST ARGS]` builds the binary and runs the Python tests only;
/// `cargo xtask test --typescript` the TypeScript client's (`typescript.rs`).
fn test(rest: &[String]) -> Result<(), String> {
    needs::ensure()?;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("xtask has no parent directory")?;
    if rest.first().is_some_and(|a| a == "--python") {
        cargo(&["build", "-p", "lease-cli", "--bin", "lease"], &[])?;
        let pytest: Vec<&str> = rest[1..]
            .iter()
            .skip_while(|a| *a == "--")
            .map(String::as_str)
            .collect();
        return python::test(root, &target_dir()?, &pytest, python::Out::Terminal);
    }
    if rest.first().is_some_and(|a| a == "--typescript") {
        cargo(&["build", "-p", "lease-cli", "--bin", "lease"], &[])?;
        return typescript::test(root, &target_dir()?);
    }
    let passed: Vec<&str> = rest
        .iter()
        .skip_while(|a| *a == "--")
        .map(String::as_str)
        .collect();
    if !passed.is_empty() {
        let mut args = vec!["test", "--workspace", "--no-fail-fast"];
        args.extend(&passed);
        return cargo(&args, &[]);
    }
    // Every suite from one build, the longest beside the rest (`side.rs`).
    side::test(root, &target_dir()?)
}

/// The longer schemathesis search run before every stop (CI replays the fixed seed): a fresh
/// random seed, printed, and 50 examples per operation, on SQLite and PostgreSQL.
/// `cargo xtask schemathesis [EXAMPLES]` sets the examples.
fn schemathesis(rest: &[String]) -> Result<(), String> {
    needs::ensure()?;
    let examples = rest.first().map_or("50", String::as_str);
    if examples.parse::<u32>().is_err() {
        return Err(format!(
            "examples per operation: {examples:?} is not a number"
        ));
    }
    cargo(
        &[
            "test",
            "-p",
            "lease-cli",
            "--test",
            "integration",
            "--",
            "schemathesis::",
            "--nocapture",
            "--test-threads",
            "1",
        ],
        &[
            ("LEASE_SCHEMATHESIS_SEED", "random"),
            ("LEASE_SCHEMATHESIS_EXAMPLES", examples),
        ],
    )
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
    test(&[])?;
    cargo(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )
}

/// Runs the benchmark report (one table, also written to target/bench-report.md); without
/// `--quick` it then runs the criterion micro-benchmarks too. `--python` runs the Python
/// package's rows instead (`benches/python/bench.py`, against the report's Rust rows; with
/// `--statement-only`, only the problem statement's rows), and `--peers` the SQLite queue loop
/// against effectum (`peers.rs`).
fn bench(rest: &[String]) -> Result<(), String> {
    let python = rest.iter().any(|a| a == "--python");
    if python || rest.iter().any(|a| a == "--peers") {
        cargo(
            &[
                "bench",
                "-p",
                "lease-benches",
                "--bench",
                "report",
                "--no-run",
            ],
            &[],
        )?;
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or("xtask has no parent directory")?;
        let target = target_dir()?;
        let report = newest_report(&target.join("release/deps"))?;
        return if python {
            let statement_only = rest.iter().any(|a| a == "--statement-only");
            python::bench(root, &target, &report, statement_only)
        } else {
            peers::bench(root, &report)
        };
    }
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

/// The report bench binary cargo built last (`report-<hash>`, no extension).
fn newest_report(deps: &std::path::Path) -> Result<std::path::PathBuf, String> {
    let entries =
        std::fs::read_dir(deps).map_err(|e| format!("cannot read {}: {e}", deps.display()))?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_none()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("report-"))
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .ok_or_else(|| format!("no report binary in {}", deps.display()))
}

/// One scope of mutation testing: a package, the files whose mutants count (all when empty),
/// and the test binaries that must catch them (the package's own tests when empty).
struct Scope {
    name: &'static str,
    package: &'static str,
    files: &'static [&'static str],
    tests: &'static [&'static str],
}

/// What `cargo xtask mutants` runs, in order: the rules, the SQLite adapter's core against its
/// fast tests (not the kill soak or the power-loss trials), the worker runtime against its own
/// tests, the PostgreSQL adapter's core against its conformance, differential, audit and
/// store tests (they need the local server), and the server's keys, sessions and secrets
/// against the server crate's tests.
const SCOPES: [Scope; 5] = [
    Scope {
        name: "domain",
        package: "lease-domain",
        files: &[],
        tests: &[],
    },
    Scope {
        name: "sqlite",
        package: "lease-sqlite",
        files: &[
            "crates/lease-sqlite/src/ops.rs",
            "crates/lease-sqlite/src/claim.rs",
            "crates/lease-sqlite/src/write.rs",
            "crates/lease-sqlite/src/tx.rs",
            "crates/lease-sqlite/src/row.rs",
            "crates/lease-sqlite/src/reads.rs",
            "crates/lease-sqlite/src/group_commit.rs",
            "crates/lease-sqlite/src/schema.rs",
            "crates/lease-sqlite/src/error.rs",
            "crates/lease-sqlite/src/connection.rs",
            "crates/lease-sqlite/src/filesystem.rs",
        ],
        tests: &[
            "clock_edges",
            "conformance",
            "differential",
            "full_and_read_only",
            "group_commit",
            "hostile_files",
            "linearizability",
            "relative_path",
            "seed_api",
        ],
    },
    Scope {
        name: "worker",
        package: "lease-worker",
        files: &[],
        tests: &[],
    },
    Scope {
        name: "postgres",
        package: "lease-postgres",
        files: &[
            "crates/lease-postgres/src/write.rs",
            "crates/lease-postgres/src/claim.rs",
            "crates/lease-postgres/src/tx.rs",
            "crates/lease-postgres/src/schema.rs",
            "crates/lease-postgres/src/error.rs",
            "crates/lease-postgres/src/sql.rs",
        ],
        tests: &[
            "conformance",
            "differential",
            "faults",
            "guard",
            "observability",
            "postgres",
        ],
    },
    Scope {
        name: "server",
        package: "lease-server",
        files: &[
            "crates/lease-server/src/auth.rs",
            "crates/lease-server/src/secrets.rs",
            "crates/lease-server/src/session.rs",
        ],
        tests: &[],
    },
];

/// Mutation testing with cargo-mutants over [`SCOPES`] (`cargo xtask mutants [SCOPE...]
/// [-- cargo-mutants options]` runs the named scopes only). Reports go to target/mutants/.
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
    let out = target_dir()?.join("mutants");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let split = rest.iter().position(|a| a == "--").unwrap_or(rest.len());
    let (names, extra) = rest.split_at(split);
    let extra: Vec<&str> = extra.iter().skip(1).map(String::as_str).collect();
    if let Some(unknown) = names.iter().find(|n| !SCOPES.iter().any(|s| s.name == *n)) {
        return Err(format!(
            "no mutation scope {unknown:?}: the scopes are domain, sqlite, worker, postgres, server"
        ));
    }
    let mut result = Ok(());
    for scope in SCOPES
        .iter()
        .filter(|s| names.is_empty() || names.iter().any(|n| n == s.name))
    {
        let dir = out.join(scope.name).display().to_string();
        let mut args = vec!["mutants", "--package", scope.package, "--output", &dir];
        for file in scope.files {
            args.extend(["--file", file]);
        }
        args.extend(&extra);
        // The listed files' tests, by name in the crate's one integration binary (a test is
        // `file::name`), and the crate's unit tests (each in a module `tests`).
        let filters: Vec<String> = scope.tests.iter().map(|t| format!("{t}::")).collect();
        if !scope.tests.is_empty() {
            args.extend(["--", "--lib", "--test", "integration", "--", "tests::"]);
            args.extend(filters.iter().map(String::as_str));
        }
        result = result.and(cargo(&args, &[]));
    }
    result
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        Some("mutants") => mutants(&args[1..]),
        Some("schemathesis") => schemathesis(&args[1..]),
        _ => Err(
            "usage: cargo xtask <test [-- cargo test options | --python [-- pytest options] | --typescript] | ci | schemathesis [EXAMPLES] | bench [--quick | --python | --peers] | mutants [SCOPE...] [-- cargo-mutants options]>"
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
