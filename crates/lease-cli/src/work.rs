//! `lease work`: a worker whose handler runs a program per job, so any language can be a worker.

use std::sync::Arc;
use std::time::Duration;

use lease_domain::Timestamp;
use lease_ports::LeaseStore;
use lease_worker::{
    CancellationToken, HandlerResult, JobContext, JobOutcome, JobReport, Summary, Worker,
    WorkerConfig,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::cli::WorkRequest;
use crate::processes;
use crate::render::{Report, escape_controls};
use crate::when;

/// How many of the program's last stderr lines become the job's error.
const ERROR_LINES: usize = 5;

/// The last `n` non-empty lines of `text`, joined with " | ".
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Runs the program for one job; see the `work` subcommand's help for the contract.
///
/// The program runs in a process group of its own (so a Ctrl-C at the terminal does not reach
/// it, and a signal to the group reaches everything it started there), marked with a
/// `LEASE_RUN` value of its own that its descendants inherit. When the run ends, however it
/// ends, every process of the group and every orphan of the run (re-parented to `lease work`,
/// which is their subreaper) is sent SIGTERM, then SIGKILL after `grace`.
async fn run_program(command: Arc<Vec<String>>, grace: Duration, job: JobContext) -> HandlerResult {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| "no program to run".to_owned())?;
    let marker = processes::next_marker();
    let mut child = Command::new(program)
        .args(args)
        .env("LEASE_JOB", job.job.as_str())
        .env("LEASE_FENCE", job.fence.to_string())
        .env("LEASE_ATTEMPT", job.attempt.to_string())
        .env(processes::MARKER, &marker)
        .process_group(0)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    // The group's id is the program's pid; it stays a program of this worker until reaped.
    let group = child.id().and_then(|id| i32::try_from(id).ok());
    let _running = group.map(processes::Running::new);
    let payload = job.payload.clone().unwrap_or_default();
    let stdin = child.stdin.take();
    tokio::spawn(async move {
        if let Some(mut stdin) = stdin {
            // A program that does not read its payload closes the pipe early; that is its choice.
            let _ = stdin.write_all(&payload).await;
        }
    });
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out = tokio::spawn(async move {
        let mut bytes = Vec::new();
        if let Some(pipe) = stdout.as_mut() {
            let _ = pipe.read_to_end(&mut bytes).await;
        }
        bytes
    });
    let err = tokio::spawn(async move {
        let mut bytes = Vec::new();
        if let Some(pipe) = stderr.as_mut() {
            let _ = pipe.read_to_end(&mut bytes).await;
        }
        bytes
    });
    tokio::select! {
        status = child.wait() => {
            let status = status.map_err(|e| format!("cannot wait for {program}: {e}"))?;
            // What the program left running goes with it (before its output is awaited: a
            // background process holding the pipes open would keep it from ending).
            processes::end_run(group, &marker, grace).await;
            let out = out.await.unwrap_or_default();
            let err = String::from_utf8_lossy(&err.await.unwrap_or_default()).into_owned();
            if status.success() {
                String::from_utf8(out).map_err(|_| format!("{program} wrote output that is not UTF-8 text"))
            } else {
                Err(format!("{program} exited with {status}: {}", last_lines(&err, ERROR_LINES)))
            }
        }
        () = job.cancel.cancelled() => {
            processes::signal_run(group, &marker, rustix::process::Signal::TERM);
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
            processes::end_run(group, &marker, grace).await;
            Err(format!("{program} was stopped: the lease is gone"))
        }
    }
}

/// One progress line for a finished job, its times seen from `now`.
pub(crate) fn progress_line(report: &JobReport, now: Timestamp) -> String {
    let what = match &report.outcome {
        JobOutcome::Completed => "completed".to_owned(),
        JobOutcome::Failed(failed) => match failed.run_at {
            Some(at) => format!("failed, retried at {}", when::shown(at.get(), now.get())),
            None => "failed, dead".to_owned(),
        },
        JobOutcome::Lost(why) => format!("stopped, nothing written ({why})"),
        JobOutcome::Released => "released at shutdown".to_owned(),
        JobOutcome::Unreported(why) => format!("result not reported ({why})"),
    };
    // The job id and the reasons come from outside: no control character reaches stderr.
    format!(
        "lease work: {} fence {} attempt {}: {} after {:.2} s",
        escape_controls(report.job.as_str()),
        report.fence,
        report.attempt,
        escape_controls(&what),
        report.seconds
    )
}

/// Runs the worker until it stops, printing a line per job on stderr; Ctrl-C or SIGTERM
/// shut it down gracefully, a second one at once.
pub(crate) async fn run(
    request: &WorkRequest,
    store: Arc<dyn LeaseStore>,
    progress: impl Fn(&JobReport) + Send + Sync + 'static,
) -> Result<Report, String> {
    processes::become_subreaper();
    let mut config = WorkerConfig::new(request.queue.clone(), request.owner.clone(), request.ttl);
    config.concurrency = request.concurrency;
    config.max_jobs = request.max_jobs;
    config.exit_when_empty = request.exit_when_empty;
    config.drain = request.drain;
    // The program's own SIGTERM-then-SIGKILL must finish before the runtime drops it.
    config.cancel_grace = request.grace + Duration::from_secs(1);
    config.idle_poll = Duration::from_millis(200);
    let command = Arc::new(request.command.clone());
    let grace = request.grace;
    let worker = Worker::new(
        store,
        move |job: JobContext| run_program(Arc::clone(&command), grace, job),
        config,
    )
    .on_report(progress);
    // The first Ctrl-C or SIGTERM stops claiming and lets running jobs finish for --drain
    // seconds; a second one stops them at once (their leases are released).
    let shutdown = CancellationToken::new();
    let hurry = CancellationToken::new();
    let (on_signal, on_second) = (shutdown.clone(), hurry.clone());
    tokio::spawn(async move {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        for token in [on_signal, on_second] {
            let terminated = async {
                match terminate.as_mut() {
                    Some(signal) => signal.recv().await.map(drop),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminated => {}
            }
            token.cancel();
        }
    });
    let summary: Summary = worker
        .run_with_abort(shutdown, hurry)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Report::new(
        true,
        json!({
            "completed": summary.completed,
            "failed": summary.failed,
            "lost": summary.lost,
            "released": summary.released,
            "unreported": summary.unreported,
        }),
        format!(
            "worked {} job(s): {} completed, {} failed, {} stopped, {} released, {} unreported",
            summary.completed
                + summary.failed
                + summary.lost
                + summary.released
                + summary.unreported,
            summary.completed,
            summary.failed,
            summary.lost,
            summary.released,
            summary.unreported
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_is_the_last_non_empty_lines_of_stderr() {
        assert_eq!(last_lines("a\n\nb\nc\n", 2), "b | c");
        assert_eq!(last_lines("", 5), "");
        assert_eq!(last_lines("only\n", 5), "only");
    }
}
