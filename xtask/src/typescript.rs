//! The TypeScript client's tests, as `cargo xtask test` runs them: `npm ci` in
//! `clients/typescript` (the registry's packages at the lock file's versions), then `npm test`
//! (the types generated from the checked-in `openapi.json`, compiled, and node's test runner
//! against live `lease serve`s on SQLite and PostgreSQL started with the `lease` binary the
//! Rust tests just built). It runs beside the other suites, its output kept and shown whole
//! when it ends.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The package's directory under the workspace.
const PACKAGE: &str = "clients/typescript";

/// The TypeScript tests running beside the other suites.
pub(crate) struct Beside {
    child: Child,
    log: PathBuf,
}

/// Installs the package's dependencies and starts its tests.
///
/// # Errors
/// When `npm ci` fails or the tests cannot be started.
pub(crate) fn start(root: &Path, target: &Path) -> Result<Beside, String> {
    let dir = root.join(PACKAGE);
    eprintln!("$ npm ci (in {})", dir.display());
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .status()
        .map_err(|e| format!("cannot run npm: {e}"))?;
    if !status.success() {
        return Err(format!("npm ci in {PACKAGE} failed ({status})"));
    }
    let log = target.join("typescript-test.log");
    let out =
        std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
    eprintln!("$ npm test (in {}, beside the other suites)", dir.display());
    let child = Command::new("npm")
        .arg("test")
        .current_dir(&dir)
        .env("LEASE_BIN", target.join("debug/lease"))
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .map_err(|e| format!("cannot start npm test: {e}"))?;
    Ok(Beside { child, log })
}

impl Beside {
    /// Waits for the tests, shows their output and says whether they passed.
    ///
    /// # Errors
    /// When they failed or could not be waited for.
    pub(crate) fn finish(mut self) -> Result<(), String> {
        let status = self
            .child
            .wait()
            .map_err(|e| format!("cannot wait for npm test: {e}"))?;
        let output = std::fs::read_to_string(&self.log).unwrap_or_default();
        eprintln!("     Ran beside the rest: {PACKAGE} (npm test)\n{output}");
        if status.success() {
            Ok(())
        } else {
            Err(format!("npm test in {PACKAGE} failed ({status})"))
        }
    }
}

/// Runs the package's tests alone (`cargo xtask test --typescript`).
///
/// # Errors
/// The step that failed.
pub(crate) fn test(root: &Path, target: &Path) -> Result<(), String> {
    start(root, target)?.finish()
}
