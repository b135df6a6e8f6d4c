//! Test support (feature `test-support`): another process holding a database's write lock.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The program the holder runs: it takes the write lock with `BEGIN EXCLUSIVE` through Python's
/// own SQLite (a different process and a different SQLite build than the store's), says so on
/// stdout, holds it for the given seconds, then commits.
const HOLD: &str = "import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute('BEGIN EXCLUSIVE')
print('locked', flush=True)
time.sleep(float(sys.argv[2]))
c.execute('COMMIT')
";

/// A process that holds the write lock of an SQLite file; dropping it kills the process (which
/// gives the lock back).
#[derive(Debug)]
pub struct WriteLockHolder {
    child: Child,
}

impl WriteLockHolder {
    /// Starts `python3`, which takes the write lock of `path` and holds it for `hold`; returns
    /// once the lock is taken.
    ///
    /// # Errors
    /// A message when `python3` cannot be started or did not take the lock.
    pub fn start(path: &Path, hold: Duration) -> Result<Self, String> {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(HOLD)
            .arg(path)
            .arg(hold.as_secs_f64().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start python3 to hold the write lock: {e}"))?;
        let mut line = String::new();
        let said = child
            .stdout
            .take()
            .map(|out| BufReader::new(out).read_line(&mut line));
        let holder = Self { child };
        match said {
            Some(Ok(_)) if line.trim() == "locked" => Ok(holder),
            _ => Err(format!(
                "python3 did not take the write lock of {}",
                path.display()
            )),
        }
    }

    /// Waits for the holder to commit and exit; says whether it exited cleanly.
    ///
    /// # Errors
    /// A message when the process cannot be waited for.
    pub fn finish(mut self) -> Result<bool, String> {
        self.child
            .wait()
            .map(|status| status.success())
            .map_err(|e| format!("cannot wait for the lock holder: {e}"))
    }
}

impl Drop for WriteLockHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
