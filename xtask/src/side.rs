//! One test run beside `cargo test`: the PostgreSQL differential test, about 100 s of mostly
//! waiting on the server, which cargo would otherwise run after the rest of its binary. Its
//! binary (lease-postgres's integration tests) is built with everything else (`cargo test
//! --no-run`), started on its own in its package's directory (as cargo starts a test binary)
//! for that one test, and its output is shown whole when it ends; the main run skips it by
//! name.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The package and test target of the test run beside the rest.
const PACKAGE: &str = "lease-postgres";
const TARGET: &str = "integration";

/// The test run beside the rest, by its full name in that binary.
const TEST: &str = "differential::memory_and_postgres_agree_on_every_step";

/// The name the main run skips.
pub(crate) const SKIPPED: &str = "memory_and_postgres_agree_on_every_step";

/// The test binary running beside the rest.
pub(crate) struct Beside {
    child: Child,
}

/// Builds every test (as the main run will) and starts the side binary.
///
/// # Errors
/// When the build fails or the binary cannot be found or started.
pub(crate) fn start(root: &Path) -> Result<Beside, String> {
    eprintln!("$ cargo test --workspace --no-run (then {PACKAGE}'s {TARGET} beside the rest)");
    let out = Command::new(env!("CARGO"))
        .args([
            "test",
            "--workspace",
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
    let text = String::from_utf8_lossy(&out.stdout);
    let executable = text
        .lines()
        .filter(|l| l.contains(&format!("/{PACKAGE}#")) || l.contains(&format!("#{PACKAGE}@")))
        .filter(|l| l.contains(&format!("\"name\":\"{TARGET}\"")) && l.contains("\"test\""))
        .find_map(|l| crate::json_string(l, "executable"))
        .ok_or_else(|| format!("cargo built no test binary {PACKAGE}/{TARGET}"))?;
    let dir = root.join("crates").join(PACKAGE);
    eprintln!("$ {executable} (beside the rest, in {})", dir.display());
    let child = Command::new(&executable)
        .args([TEST, "--exact"])
        .current_dir(&dir)
        .env("CARGO_MANIFEST_DIR", &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {executable}: {e}"))?;
    Ok(Beside { child })
}

impl Beside {
    /// Waits for it, shows its output, and says whether it passed.
    ///
    /// # Errors
    /// When it failed (or could not be waited for).
    pub(crate) fn finish(self) -> Result<(), String> {
        let out = self
            .child
            .wait_with_output()
            .map_err(|e| format!("cannot wait for {PACKAGE}/{TARGET}: {e}"))?;
        eprintln!("     Ran beside the rest: {PACKAGE} {TEST}");
        eprint!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("{PACKAGE} {TEST} failed ({})", out.status))
        }
    }
}
