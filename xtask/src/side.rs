//! The tests of `cargo xtask test`, from one build, in lanes at once: cargo runs test binaries
//! one after another, and the longest of them mostly wait (on PostgreSQL, on the processes and
//! servers they start), so they run beside the rest:
//! - the PostgreSQL differential test (about 190 s of waiting on the server), the one test of
//!   lease-postgres's binary that the main lane skips;
//! - lease-cli's binary (the `lease` command, its servers and the page, about 230 s);
//! - the Python package, built into a fresh virtual environment and tested (`python.rs`);
//! - the TypeScript client's tests against live servers (`typescript.rs`);
//! - every other test binary in the main lane, in cargo's order, the benchmarks once each in
//!   their smoke mode, then the doc tests; the one that restarts PostgreSQL runs last, once
//!   every other lane (each of which uses the server) has ended.
//!
//! Everything Rust is built first by one `cargo test --workspace --no-run` (and the examples linked
//! as programs); each binary is then started as cargo starts it (in its package's directory, with
//! `CARGO_MANIFEST_DIR`). The Python and TypeScript lanes use the `lease` binary of that build. The
//! main lane's output streams; a side lane's is shown whole when it ends. Every lane runs to its
//! end even when one fails, and each failure is named at the end.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A test binary that restarts the machine's PostgreSQL: it runs last, alone, once the side
/// lanes (which use the server) have ended.
const RESTARTS_THE_SERVER: (&str, &str) = ("lease-postgres", "restart");

/// The test of lease-postgres's binary run in a lane of its own, and the name the main lane
/// skips.
const DIFFERENTIAL: &str = "differential::memory_and_postgres_agree_on_every_step";
const DIFFERENTIAL_NAME: &str = "memory_and_postgres_agree_on_every_step";

/// One test binary cargo built.
struct Binary {
    /// Its package's directory.
    dir: PathBuf,
    /// Its target's name (`integration`, a crate's name for unit tests, ...).
    target: String,
    executable: String,
}

impl Binary {
    fn package(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn is(&self, package: &str, target: &str) -> bool {
        self.package() == package && self.target == target
    }

    /// Runs it with `args` as cargo would; `capture`: its output is kept and returned.
    fn run(&self, args: &[&str], capture: bool) -> (Result<(), String>, String) {
        let shown = format!("{} {} {}", self.package(), self.target, args.join(" "));
        eprintln!("     Running {} ({})", shown.trim_end(), self.executable);
        let mut command = Command::new(&self.executable);
        command
            .args(args)
            .current_dir(&self.dir)
            .env("CARGO_MANIFEST_DIR", &self.dir)
            .env("CARGO", env!("CARGO"));
        let (status, output) = if capture {
            match command.stdin(Stdio::null()).output() {
                Ok(out) => {
                    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
                    text.push_str(&String::from_utf8_lossy(&out.stderr));
                    (Ok(out.status), text)
                }
                Err(e) => (Err(e), String::new()),
            }
        } else {
            (command.status(), String::new())
        };
        let result = match status {
            Ok(status) if status.success() => Ok(()),
            Ok(status) => Err(format!("{} failed ({status})", shown.trim_end())),
            Err(e) => Err(format!("cannot run {}: {e}", self.executable)),
        };
        (result, output)
    }
}

/// Builds every test binary of the workspace (as `cargo test --workspace` would) and each
/// benchmark in its smoke mode (as `cargo test --benches` would: run once, so bench code that
/// panics is caught; in the same build, so nothing is compiled twice), and names them in
/// cargo's order.
fn build(root: &Path) -> Result<Vec<Binary>, String> {
    eprintln!("$ cargo test --workspace --all-targets --no-run");
    let out = Command::new(env!("CARGO"))
        .args([
            "test",
            "--workspace",
            "--all-targets",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err("cargo test --no-run failed".to_owned());
    }
    // The examples as programs (the build above makes them test binaries): tests start the
    // HTTP ledger example as a server. Built here with the workspace's features, this only
    // links them; a test that built one itself would compile its dependencies again with its
    // own package's features (about a minute of both cores).
    eprintln!("$ cargo build --workspace --examples");
    let examples = Command::new(env!("CARGO"))
        .args(["build", "--workspace", "--examples"])
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !examples.success() {
        return Err("cargo build --examples failed".to_owned());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut binaries: Vec<Binary> = text
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        // A test build's profile says so (a target's own `"test":true` only says it may be).
        .filter(|l| {
            l.find("\"profile\":")
                .and_then(|at| l[at..].split('}').next())
                .is_some_and(|profile| profile.contains("\"test\":true"))
        })
        .filter_map(|l| {
            let executable = crate::json_string(l, "executable")?;
            let manifest = crate::json_string(l, "manifest_path")?;
            let target = l
                .find("\"target\":")
                .and_then(|at| crate::json_string(&l[at..], "name"))?;
            Some(Binary {
                dir: Path::new(&manifest).parent()?.to_path_buf(),
                target,
                executable,
            })
        })
        .collect();
    binaries.sort_by_key(|b| (b.package(), b.target.clone()));
    Ok(binaries)
}

/// Runs the workspace's tests in lanes (the module's doc) and says whether all passed, naming
/// each binary or suite that failed.
///
/// # Errors
/// When the build fails, or any test binary or the doc tests fail.
pub(crate) fn test(root: &Path, target: &Path) -> Result<(), String> {
    let binaries = build(root)?;
    let python_log = target.join("python-test.log");
    // A log left by an earlier run is not this run's.
    let _ = std::fs::remove_file(&python_log);
    let postgres = binaries
        .iter()
        .position(|b| b.is("lease-postgres", "integration"))
        .ok_or("cargo built no test binary lease-postgres/integration")?;
    let cli = binaries
        .iter()
        .position(|b| b.is("lease-cli", "integration"))
        .ok_or("cargo built no test binary lease-cli/integration")?;
    let failures = std::thread::scope(|lanes| {
        let differential = lanes.spawn(|| binaries[postgres].run(&[DIFFERENTIAL, "--exact"], true));
        let commands = lanes.spawn(|| binaries[cli].run(&[], true));
        let typescript = crate::typescript::start(root, target);
        let python = lanes.spawn(|| {
            let result =
                crate::python::test(root, target, &[], crate::python::Out::Log(&python_log));
            (
                result,
                std::fs::read_to_string(&python_log).unwrap_or_default(),
            )
        });
        let mut failures = Vec::new();
        for (n, binary) in binaries.iter().enumerate() {
            let args: &[&str] = if n == postgres {
                &["--skip", DIFFERENTIAL_NAME]
            } else {
                &[]
            };
            if n != cli && !binary.is(RESTARTS_THE_SERVER.0, RESTARTS_THE_SERVER.1) {
                failures.extend(binary.run(args, false).0.err());
            }
        }
        eprintln!("$ cargo test --workspace --doc");
        let doc = Command::new(env!("CARGO"))
            .args(["test", "--workspace", "--doc", "--no-fail-fast"])
            .current_dir(root)
            .status();
        if !doc.is_ok_and(|s| s.success()) {
            failures.push("the doc tests failed".to_owned());
        }
        for (lane, name) in [
            (differential, DIFFERENTIAL),
            (commands, "lease-cli integration"),
            (python, "the Python package (crates/lease-py)"),
        ] {
            let (result, output) = lane
                .join()
                .unwrap_or_else(|_| (Err(format!("the lane of {name} panicked")), String::new()));
            eprintln!("     Ran beside the rest: {name}");
            eprint!("{output}");
            failures.extend(result.err());
        }
        failures.extend(typescript.and_then(crate::typescript::Beside::finish).err());
        for binary in binaries
            .iter()
            .filter(|b| b.is(RESTARTS_THE_SERVER.0, RESTARTS_THE_SERVER.1))
        {
            failures.extend(binary.run(&[], false).0.err());
        }
        failures
    });
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("Rust tests failed:\n  {}", failures.join("\n  ")))
    }
}
