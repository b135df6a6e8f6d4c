//! The processes of one `lease work` run, and how they are stopped. A run's program leads a
//! process group of its own, and every process it starts carries the run's marker (the
//! environment variable `LEASE_RUN`); `lease work` is the subreaper of its descendants, so a
//! process that left the group (`setsid`) and lost its parent is re-parented to `lease work`,
//! where its marker names the run it belongs to. Ending a run signals the group and those
//! orphans, waits, then kills what is left and reaps it.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

/// The environment variable that marks every process of one run.
pub(crate) const MARKER: &str = "LEASE_RUN";

/// The programs this worker is running now (their pids): Tokio reaps those, nobody else may.
static RUNNING: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// A fresh marker: this process and a counter.
pub(crate) fn next_marker() -> String {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        rustix::process::getpid().as_raw_nonzero(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    )
}

/// Makes this process the subreaper of its descendants (Linux), so orphans of a run come back
/// to it instead of init. Where that is not possible, only the process group is stopped.
pub(crate) fn become_subreaper() {
    // Not fatal: the group is still stopped, and GUARANTEES.md says what escapes then.
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
}

/// Registers a running program for as long as it lives.
pub(crate) struct Running(i32);

impl Running {
    pub(crate) fn new(pid: i32) -> Self {
        running().insert(pid);
        Self(pid)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        running().remove(&self.0);
    }
}

fn running() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    RUNNING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A child of this process, as `/proc` shows it.
struct Child {
    pid: i32,
    zombie: bool,
    marker: Option<String>,
}

/// This process's children that are not one of its running programs (orphans of runs it
/// adopted as subreaper), with their state and run marker.
fn adopted() -> Vec<Child> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let running = running().clone();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if running.contains(&pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": the command may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next().unwrap_or_default();
        let parent = fields.next().and_then(|p| p.parse::<i32>().ok());
        if parent != Some(me) {
            continue;
        }
        let marker = std::fs::read(format!("/proc/{pid}/environ"))
            .ok()
            .and_then(|env| {
                env.split(|b| *b == 0)
                    .filter_map(|var| var.strip_prefix(format!("{MARKER}=").as_bytes()))
                    .map(|value| String::from_utf8_lossy(value).into_owned())
                    .next()
            });
        found.push(Child {
            pid,
            zombie: state == "Z",
            marker,
        });
    }
    found
}

/// Sends `signal` to the run's process group and to every living orphan marked as the run's.
pub(crate) fn signal_run(group: Option<i32>, marker: &str, signal: Signal) {
    if let Some(group) = group.and_then(Pid::from_raw) {
        // No such group: everything in it is gone already.
        let _ = rustix::process::kill_process_group(group, signal);
    }
    for child in adopted() {
        if !child.zombie && child.marker.as_deref() == Some(marker) {
            if let Some(pid) = Pid::from_raw(child.pid) {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
    }
}

/// Reaps every zombie this process adopted (their runs are over; their exit status is of no
/// use to anyone), and answers whether anything of the run is still alive: a member of its
/// group, or a marked orphan. One look at `/proc` does both.
fn reap_and_check(group: Option<i32>, marker: &str) -> bool {
    let mut orphan_alive = false;
    for child in adopted() {
        if child.zombie {
            if let Some(pid) = Pid::from_raw(child.pid) {
                let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
            }
        } else if child.marker.as_deref() == Some(marker) {
            orphan_alive = true;
        }
    }
    orphan_alive
        || group
            .and_then(Pid::from_raw)
            .is_some_and(|g| rustix::process::test_kill_process_group(g).is_ok())
}

/// Ends a run: SIGTERM to whatever of it is alive, up to `grace` for it to go, then SIGKILL,
/// and the adopted zombies reaped.
pub(crate) async fn end_run(group: Option<i32>, marker: &str, grace: Duration) {
    if !reap_and_check(group, marker) {
        return;
    }
    signal_run(group, marker, Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !reap_and_check(group, marker) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal_run(group, marker, Signal::KILL);
    // SIGKILL cannot be caught; give the kernel a moment, then reap.
    for _ in 0..50 {
        if !reap_and_check(group, marker) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
