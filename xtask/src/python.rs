//! The Python package's tests, as `cargo xtask test` runs them: the package built from
//! `crates/lease-py` and installed with pip into a fresh virtual environment under cargo's
//! target directory, exactly as the README's `pip install ./crates/lease-py` does (but with
//! the tests' debug build of the Rust crates, reused from that directory), then pytest over
//! `crates/lease-py/tests`, with mypy beside it for the type tests. The target directory is
//! cargo's own (`CARGO_TARGET_DIR` included), so the `lease` binary the tests start is the one
//! the Rust tests just built.

use std::path::Path;
use std::process::Command;

/// What the suite runs with: pytest, mypy for `tests/test_types.py` (stubtest checks the
/// native module's stubs against the built module; mypy checks the package strictly), and
/// OpenTelemetry's API and SDK for `tests/test_trace.py` (the traced enqueue and
/// `Worker(tracer=...)`).
const TOOLS: [&str; 4] = [
    "pytest==8.3.5",
    "mypy==1.15.0",
    "opentelemetry-api==1.39.1",
    "opentelemetry-sdk==1.39.1",
];

/// Where the steps' output goes: the terminal, or (for a lane beside others) a log file shown
/// whole when the lane ends.
#[derive(Clone, Copy)]
pub(crate) enum Out<'a> {
    Terminal,
    Log(&'a Path),
}

fn run(out: Out<'_>, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let line = format!("$ {} {}", program.display(), args.join(" "));
    let mut command = Command::new(program);
    command.args(args).envs(env.iter().copied());
    if let Out::Log(path) = out {
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        std::io::Write::write_all(&mut log, format!("{line}\n").as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let err = log
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", path.display()))?;
        command
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(err);
    } else {
        eprintln!("{line}");
    }
    let status = command
        .status()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {} failed ({status})",
            program.display(),
            args.join(" ")
        ))
    }
}

/// Builds the package into a fresh virtual environment and runs its tests.
///
/// # Errors
/// The step that failed.
pub(crate) fn test(
    root: &Path,
    target: &Path,
    pytest: &[&str],
    out: Out<'_>,
) -> Result<(), String> {
    let venv = target.join("python-test-venv");
    if venv.exists() {
        std::fs::remove_dir_all(&venv)
            .map_err(|e| format!("cannot remove {}: {e}", venv.display()))?;
    }
    let venv_arg = venv.display().to_string();
    run(out, Path::new("python3"), &["-m", "venv", &venv_arg], &[])?;
    let pip = venv.join("bin/pip");
    let mut install = vec!["install", "--quiet"];
    install.extend(TOOLS);
    run(out, &pip, &install, &[])?;
    let target_dir = target.display().to_string();
    let package = root.join("crates/lease-py").display().to_string();
    run(
        out,
        &pip,
        &["install", "--quiet", &package],
        &[
            ("CARGO_TARGET_DIR", &target_dir),
            ("MATURIN_PEP517_ARGS", "--profile dev"),
        ],
    )?;
    let lease = target.join("debug/lease").display().to_string();
    let tests = root.join("crates/lease-py/tests").display().to_string();
    let mut args = vec!["-m", "pytest", "-q", "-p", "no:cacheprovider", &tests];
    args.extend(pytest);
    run(
        out,
        &venv.join("bin/python"),
        &args,
        &[("LEASE_BIN", &lease)],
    )
}

/// The Python rows of the benchmark (`benches/python/bench.py`): the package built as the README
/// builds it (optimized) into a virtual environment under `target/`, against the report
/// binary's Rust rows.
///
/// # Errors
/// The step that failed.
pub(crate) fn bench(
    root: &Path,
    target: &Path,
    report: &Path,
    statement_only: bool,
) -> Result<(), String> {
    let venv = target.join("python-bench-venv");
    let venv_arg = venv.display().to_string();
    if !venv.join("bin/python").exists() {
        run(
            Out::Terminal,
            Path::new("python3"),
            &["-m", "venv", &venv_arg],
            &[],
        )?;
    }
    let target_dir = target.display().to_string();
    let package = root.join("crates/lease-py").display().to_string();
    run(
        Out::Terminal,
        &venv.join("bin/pip"),
        &[
            "install",
            "--quiet",
            "--force-reinstall",
            "--no-deps",
            &package,
        ],
        &[("CARGO_TARGET_DIR", &target_dir)],
    )?;
    let script = root.join("benches/python/bench.py").display().to_string();
    let report = report.display().to_string();
    let mut args = vec![script.as_str(), "--report", &report];
    if statement_only {
        args.push("--statement-only");
    }
    run(Out::Terminal, &venv.join("bin/python"), &args, &[])
}
