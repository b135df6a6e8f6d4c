//! `lease work`: a worker whose handler runs a program per job, so any language can be a worker.

use crate::args::{RequestError, duration_flag};
use lease_domain::{Owner, QueueName};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lease_domain::{ProgressText, Timestamp};
use lease_ports::LeaseStore;
use lease_ports::control::Controlled;
use lease_worker::{
    CancellationToken, HandlerResult, JobContext, JobOutcome, JobReport, Summary, Worker,
    WorkerConfig,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

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

/// The environment variable naming the FIFO a program writes its progress lines to.
pub(crate) const PROGRESS_VARIABLE: &str = "LEASE_PROGRESS";

/// The environment variable naming the FIFO a program writes a hold of its job's group to.
pub(crate) const HOLD_VARIABLE: &str = "LEASE_HOLD_GROUP";

/// Names the JSON file of a job's parents, for a job that has any:
/// `{id: {"status", "result", "result_fence"}}`.
pub(crate) const PARENTS_VARIABLE: &str = "LEASE_PARENTS_FILE";

/// Names the JSON file of the checkpoints the job keeps, `{name: value}` (`{}` for none).
pub(crate) const CHECKPOINTS_VARIABLE: &str = "LEASE_CHECKPOINTS_FILE";

/// The environment variable naming the FIFO a program writes its checkpoints to.
pub(crate) const CHECKPOINT_VARIABLE: &str = "LEASE_CHECKPOINT";

pub(crate) use crate::scheduler::Say;

/// The progress line protocol of one run: `LEASE_PROGRESS` names a FIFO (in a directory only
/// this user may enter) that the program, or anything it starts, writes lines to, such as
/// `echo "12 of 40" > "$LEASE_PROGRESS"`. Each line (up to 1,024 bytes of UTF-8; longer ones
/// are ignored with a warning) becomes the job's progress under the lease's fence and renews
/// the lease; lines that come faster than the store takes them are coalesced to the newest.
/// The FIFO is opened for reading and writing here, so a writer never blocks and the reader
/// never sees its end; it is removed when the run ends.
struct ProgressPipe {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
    /// Told when the program has ended, so that the lines it wrote last are still read.
    done: Option<Arc<tokio::sync::Notify>>,
}

/// A FIFO named `{marker}.{what}` in `dir`, only this user's, opened for reading and writing.
fn fifo(
    dir: &Path,
    marker: &str,
    what: &str,
) -> Result<(PathBuf, tokio::net::unix::pipe::Receiver), String> {
    let path = dir.join(format!("{marker}.{what}"));
    let mode = rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR;
    rustix::fs::mkfifoat(rustix::fs::CWD, &path, mode)
        .map_err(|e| format!("cannot make the {what} FIFO {}: {e}", path.display()))?;
    let receiver = tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(&path)
        .map_err(|e| format!("cannot open the {what} FIFO {}: {e}", path.display()))?;
    Ok((path, receiver))
}

/// A file a run's program reads, `{marker}.{what}` beside its FIFOs, removed when dropped.
struct RunFile(PathBuf);

impl RunFile {
    fn write(dir: &Path, marker: &str, what: &str, text: &str) -> Result<Self, String> {
        let path = dir.join(format!("{marker}.{what}"));
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for RunFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// How a run's warnings name it.
fn shown(job: &JobContext) -> String {
    format!(
        "lease work: {} fence {}",
        escape_controls(job.job.as_str()),
        job.fence
    )
}

impl ProgressPipe {
    fn open(dir: &Path, marker: &str, job: &JobContext, say: Say) -> Result<Self, String> {
        let (path, receiver) = fifo(dir, marker, "progress")?;
        let task = tokio::spawn(forward_progress(
            receiver,
            job.progress.clone(),
            shown(job),
            say,
        ));
        Ok(Self {
            path,
            task,
            done: None,
        })
    }

    /// The hold line protocol of one run: `LEASE_HOLD_GROUP` names a FIFO the program writes
    /// lines of seconds to (what an upstream's `Retry-After` says), such as
    /// `echo 30 > "$LEASE_HOLD_GROUP"`: each holds the job's group that long from when it is
    /// read, under the lease's fence. A line that is not a number of seconds from 0 to a day
    /// is named on stderr and skipped; a refused hold (a lost lease, a job without a group)
    /// is said on stderr. Lines written just before the program exits are still read (see
    /// [`ProgressPipe::finish`]).
    fn hold(dir: &Path, marker: &str, job: &JobContext, say: Say) -> Result<Self, String> {
        let (path, receiver) = fifo(dir, marker, "hold")?;
        let done = Arc::new(tokio::sync::Notify::new());
        let task = tokio::spawn(forward_holds(receiver, job.clone(), say, Arc::clone(&done)));
        Ok(Self {
            path,
            task,
            done: Some(done),
        })
    }

    /// The checkpoint line protocol of one run: `LEASE_CHECKPOINT` names a FIFO the program
    /// writes lines to, each `NAME=VALUE` (split at the first `=`) or a JSON object
    /// `{"name": ..., "value": ...}` (for a name with `=` or a value with a line break), such
    /// as `echo "fetch=rows.csv" > "$LEASE_CHECKPOINT"`: each is kept under the lease's
    /// fence, in the order written, before the run's completion or failure is written. A bad
    /// line, or a checkpoint refused (a lost lease, a bad name, the limit), is said on stderr.
    fn checkpoint(dir: &Path, marker: &str, job: &JobContext, say: Say) -> Result<Self, String> {
        let (path, receiver) = fifo(dir, marker, "checkpoint")?;
        let done = Arc::new(tokio::sync::Notify::new());
        let task = tokio::spawn(forward_checkpoints(
            receiver,
            job.clone(),
            say,
            Arc::clone(&done),
        ));
        Ok(Self {
            path,
            task,
            done: Some(done),
        })
    }

    /// After the program has ended: lets the reader take the lines still in the FIFO (it
    /// stops at the first pause of 50 ms), for at most 5 s.
    async fn finish(&mut self) {
        if let Some(done) = &self.done {
            done.notify_one();
            let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
        }
    }
}

/// The lines of a run's FIFO, until the run is `done` and no line is left (the reader stops
/// at the first pause of 50 ms after that).
struct RunLines {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::pipe::Receiver>>,
    done: Arc<tokio::sync::Notify>,
    finishing: bool,
}

impl RunLines {
    fn new(receiver: tokio::net::unix::pipe::Receiver, done: Arc<tokio::sync::Notify>) -> Self {
        use tokio::io::AsyncBufReadExt;
        Self {
            lines: tokio::io::BufReader::new(receiver).lines(),
            done,
            finishing: false,
        }
    }

    async fn next(&mut self) -> Option<String> {
        loop {
            // `next_line` is cancel safe: a line half read when the run ends is read on.
            let next = if self.finishing {
                tokio::time::timeout(Duration::from_millis(50), self.lines.next_line())
                    .await
                    .unwrap_or(Ok(None))
            } else {
                tokio::select! {
                    next = self.lines.next_line() => next,
                    () = self.done.notified() => {
                        self.finishing = true;
                        continue;
                    }
                }
            };
            return next.ok().flatten();
        }
    }
}

/// One checkpoint line: a JSON object `{"name": ..., "value": ...}`, or `NAME=VALUE` (split
/// at the first `=`).
fn checkpoint_line(line: &str) -> Result<(String, String), String> {
    if line.trim_start().starts_with('{') {
        let parsed: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("not a JSON object: {e}"))?;
        match (parsed["name"].as_str(), parsed["value"].as_str()) {
            (Some(name), Some(value)) => Ok((name.to_owned(), value.to_owned())),
            _ => Err("a JSON line needs the texts \"name\" and \"value\"".to_owned()),
        }
    } else {
        line.split_once('=')
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .ok_or_else(|| "not NAME=VALUE or a JSON object".to_owned())
    }
}

/// Reads checkpoint lines and keeps each under the lease's fence, in the order written, one
/// write at a time, until the run is `done` and no line is left.
async fn forward_checkpoints(
    receiver: tokio::net::unix::pipe::Receiver,
    job: JobContext,
    say: Say,
    done: Arc<tokio::sync::Notify>,
) {
    let shown = shown(&job);
    let mut lines = RunLines::new(receiver, done);
    while let Some(line) = lines.next().await {
        let (name, value) = match checkpoint_line(&line) {
            Ok(parsed) => parsed,
            Err(why) => {
                say(&format!(
                    "{shown}: checkpoint line ignored: {why}: {:?}",
                    escape_controls(&line.chars().take(80).collect::<String>())
                ));
                continue;
            }
        };
        match job.checkpoint(&name, &value).await {
            Ok(Ok(())) => {}
            Ok(Err(why)) => say(&format!("{shown}: checkpoint not kept: {why}")),
            Err(e) => say(&format!("{shown}: checkpoint not kept: {e}")),
        }
    }
}

/// Reads hold lines and holds the job's group for each, one write at a time, until the run
/// is `done` and no line is left.
async fn forward_holds(
    receiver: tokio::net::unix::pipe::Receiver,
    job: JobContext,
    say: Say,
    done: Arc<tokio::sync::Notify>,
) {
    let shown = shown(&job);
    let mut lines = RunLines::new(receiver, done);
    while let Some(line) = lines.next().await {
        let seconds = line
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| (0.0..=86_400.0).contains(s));
        let Some(seconds) = seconds else {
            say(&format!(
                "{shown}: hold line ignored: {:?} is not a number of seconds from 0 to 86400",
                escape_controls(line.trim())
            ));
            continue;
        };
        match job.hold_group_for(seconds).await {
            Ok(Ok(())) => {}
            Ok(Err(why)) => say(&format!("{shown}: group not held: {why}")),
            Err(e) => say(&format!("{shown}: group not held: {e}")),
        }
    }
}

impl Drop for ProgressPipe {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads progress lines and stores the newest, one write at a time.
async fn forward_progress(
    mut receiver: tokio::net::unix::pipe::Receiver,
    progress: lease_worker::Progress,
    shown: String,
    say: Say,
) {
    let (newest, mut changed) = tokio::sync::watch::channel(None::<String>);
    let warn = |why: &str| say(&format!("{shown}: progress line ignored: {why}"));
    let read = async {
        let mut line = Vec::new();
        let mut too_long = false;
        let mut chunk = [0_u8; 4096];
        while let Ok(n @ 1..) = receiver.read(&mut chunk).await {
            for &byte in &chunk[..n] {
                if byte != b'\n' {
                    if !too_long {
                        line.push(byte);
                        // A final carriage return is not part of the line.
                        too_long = line.len() > ProgressText::MAX_BYTES + 1;
                    }
                    continue;
                }
                if too_long {
                    warn(&format!("it is over {} bytes", ProgressText::MAX_BYTES));
                } else {
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    match String::from_utf8(std::mem::take(&mut line)) {
                        Ok(text) if text.len() > ProgressText::MAX_BYTES => {
                            warn(&format!("it is over {} bytes", ProgressText::MAX_BYTES));
                        }
                        Ok(text) => {
                            newest.send_replace(Some(text));
                        }
                        Err(_) => warn("it is not UTF-8 text"),
                    }
                }
                line.clear();
                too_long = false;
            }
        }
    };
    let write = async {
        let mut refused = false;
        while changed.changed().await.is_ok() {
            let Some(text) = changed.borrow_and_update().clone() else {
                continue;
            };
            match progress.report(&text).await {
                Ok(Ok(())) => {}
                // The lease is gone: the runtime stops the program at its next renewal.
                Ok(Err(why)) if !refused => {
                    refused = true;
                    say(&format!("{shown}: progress refused: {why}"));
                }
                Ok(Err(_)) => {}
                Err(e) => say(&format!("{shown}: progress not stored: {e}")),
            }
        }
    };
    tokio::join!(read, write);
}

/// Runs the program for one job; see the `work` subcommand's help for the contract.
///
/// The program runs in a process group of its own (so a Ctrl-C at the terminal does not reach
/// it, and a signal to the group reaches everything it started there), marked with a
/// `LEASE_RUN` value of its own that its descendants inherit. When the run ends, however it
/// ends, every process of the group and every orphan of the run (re-parented to `lease work`,
/// which is their subreaper) is sent SIGTERM, then SIGKILL after `grace`.
async fn run_program(
    command: Arc<Vec<String>>,
    grace: Duration,
    fifos: Arc<tempfile::TempDir>,
    say: Say,
    job: JobContext,
) -> HandlerResult {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| "no program to run".to_owned())?;
    let marker = processes::next_marker();
    let pipe = ProgressPipe::open(fifos.path(), &marker, &job, say.clone())?;
    let mut hold = ProgressPipe::hold(fifos.path(), &marker, &job, say.clone())?;
    let mut steps = ProgressPipe::checkpoint(fifos.path(), &marker, &job, say.clone())?;
    let mut program_command = Command::new(program);
    if let Some(timeout) = job.timeout {
        program_command.env("LEASE_TIMEOUT", timeout.get().to_string());
    }
    if let Some(group) = &job.group {
        program_command.env("LEASE_GROUP", group.as_str());
    }
    // The program gets its payload opened and never the keys that open it: with them, any
    // handler (and anything it starts) could read every job and forge sealed values.
    program_command
        .env_remove(lease_seal::KEY_VAR)
        .env_remove(lease_seal::KEY_FILE_VAR);
    // The program continues the job's trace: the attempt's span when it is exported, else
    // the context the job was enqueued with, passed through as an OpenTelemetry SDK without an
    // exporter propagates it; never a context `lease work` itself was started with. A context
    // that cannot be read leaves the program without one (tracing never fails a job).
    program_command
        .env_remove("TRACEPARENT")
        .env_remove("TRACESTATE");
    if let Some(traceparent) = lease_otel::traceparent(&job.span) {
        program_command.env("TRACEPARENT", traceparent);
    } else {
        match job.enqueued_trace().await {
            Ok(Some(trace)) => {
                program_command.env("TRACEPARENT", trace.traceparent());
                if let Some(state) = trace.tracestate() {
                    program_command.env("TRACESTATE", state);
                }
            }
            Ok(None) => {}
            Err(e) => say(&format!(
                "job {}: its trace context was not read, so its program runs without one: {e}",
                job.job
            )),
        }
    }
    // The run's files, removed when it ends (a worker may run jobs for months).
    let mut files = Vec::new();
    // A job with parents gets them, as `state --json` shows them, in a file beside its FIFOs
    // (read for every job: one read of the store, next to starting a process).
    let parents = job
        .parents()
        .await
        .map_err(|e| format!("cannot read the job's parents: {e}"))?;
    if !parents.is_empty() {
        let text = crate::render::parents_json(&parents).to_string();
        let file = RunFile::write(fifos.path(), &marker, "parents.json", &text)?;
        program_command.env(PARENTS_VARIABLE, &file.0);
        files.push(file);
    }
    // Every job gets the checkpoints its earlier attempts kept (`{}` for none).
    let kept = job
        .checkpoints()
        .await
        .map_err(|e| format!("cannot read the job's checkpoints: {e}"))?;
    let text = serde_json::Value::Object(
        kept.into_iter()
            .map(|(name, value)| (name, serde_json::Value::String(value)))
            .collect(),
    )
    .to_string();
    let file = RunFile::write(fifos.path(), &marker, "checkpoints.json", &text)?;
    program_command.env(CHECKPOINTS_VARIABLE, &file.0);
    files.push(file);
    let mut child = program_command
        .args(args)
        .env("LEASE_JOB", job.job.as_str())
        .env("LEASE_FENCE", job.fence.to_string())
        .env("LEASE_ATTEMPT", job.attempt.to_string())
        .env(PROGRESS_VARIABLE, &pipe.path)
        .env(HOLD_VARIABLE, &hold.path)
        .env(CHECKPOINT_VARIABLE, &steps.path)
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
            hold.finish().await;
            steps.finish().await;
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
            Err(format!("{program} was stopped"))
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
    schedules: Option<(Arc<dyn Controlled>, lease_schedule::Clock)>,
    say: Say,
    progress: impl Fn(&JobReport) + Send + Sync + 'static,
) -> Result<Report, String> {
    processes::become_subreaper();
    // Where each run's progress FIFO lives: a directory only this user may enter.
    let fifos = Arc::new(
        tempfile::Builder::new()
            .prefix("lease-work-")
            .tempdir()
            .map_err(|e| format!("cannot make a directory for the progress FIFOs: {e}"))?,
    );
    let mut config = WorkerConfig::new(request.queue.clone(), request.owner.clone(), request.ttl);
    config.concurrency = request.concurrency;
    config.prefetch = request.prefetch;
    // Sealed payloads are opened for the program (docs/ENCRYPTION.md); bad keys stop here,
    // before any job is claimed.
    config.keys = lease_seal::Keyring::from_env()
        .map_err(|e| e.to_string())?
        .map(Arc::new);
    let require_sealed = request.require_sealed
        || lease_seal::require_sealed_from_env().map_err(|e| e.to_string())?;
    if (request.seal_results || require_sealed) && config.keys.is_none() {
        let flag = if request.seal_results {
            "--seal-results"
        } else {
            "requiring sealed values (--require-sealed or LEASE_REQUIRE_SEALED)"
        };
        return Err(format!(
            "{flag} needs a key: set {} or {}",
            lease_seal::KEY_VAR,
            lease_seal::KEY_FILE_VAR
        ));
    }
    config.seal_results = request.seal_results;
    config.require_sealed = require_sealed;
    if request.traced {
        config.trace = Some(lease_worker::TraceJoin(Arc::new(lease_otel::join)));
    }
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
        {
            let say = Arc::clone(&say);
            move |job: JobContext| {
                run_program(
                    Arc::clone(&command),
                    grace,
                    Arc::clone(&fifos),
                    Arc::clone(&say),
                    job,
                )
            }
        },
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
    // The schedules of the store run beside the worker, until it stops.
    let scheduler = schedules.map(|(store, clock)| {
        let stop = shutdown.child_token();
        let task = tokio::spawn(crate::scheduler::run_schedules(
            store,
            clock,
            request.schedule_recheck,
            stop.clone(),
            "lease work",
            say,
        ));
        (task, stop)
    });
    let summary = worker.run_with_abort(shutdown, hurry).await;
    if let Some((task, stop)) = scheduler {
        stop.cancel();
        let _ = task.await;
    }
    let summary: Summary = summary.map_err(|e| e.to_string())?;
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

/// The arguments of `lease work`.
#[derive(Debug, clap::Args)]
pub(crate) struct WorkArgs {
    /// The queue.
    #[arg(long, default_value = QueueName::DEFAULT)]
    pub(crate) queue: String,
    /// This worker's name.
    #[arg(long)]
    pub(crate) owner: String,
    /// The lease duration, renewed every third of it.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) ttl: f64,
    /// How many programs run at once.
    #[arg(long, default_value_t = 1)]
    pub(crate) concurrency: usize,
    /// How many leases to hold beyond the running programs, ready to start (renewed while
    /// they wait, released at exit), while the programs run shorter than 50 ms on average; a
    /// finished program's next job then starts while its result commits. Default: as many as
    /// the programs run in 20 ms at their recent average, at least one per program
    /// (`--concurrency`), at most 128 beyond that; 0 holds none.
    #[arg(long)]
    pub(crate) prefetch: Option<usize>,
    /// Seal each program's result before it is stored (docs/ENCRYPTION.md), with the key of
    /// LEASE_PAYLOAD_KEY or the last of LEASE_PAYLOAD_KEY_FILE.
    #[arg(long)]
    pub(crate) seal_results: bool,
    /// Refuse a plain payload (its job fails naming it, and the program never runs) and seal
    /// every result, so a plaintext payload swapped into the queue is never run
    /// (docs/ENCRYPTION.md); also set by LEASE_REQUIRE_SEALED=1. Needs a key.
    #[arg(long)]
    pub(crate) require_sealed: bool,
    /// Stop after this many jobs.
    #[arg(long)]
    pub(crate) max_jobs: Option<usize>,
    /// Stop when no job is due and none is running.
    #[arg(long)]
    pub(crate) exit_when_empty: bool,
    /// Seconds between SIGTERM and SIGKILL for a program whose lease was lost.
    #[arg(long, default_value_t = 5.0, allow_hyphen_values = true)]
    pub(crate) grace: f64,
    /// Seconds running jobs may go on after Ctrl-C before they are stopped and released.
    #[arg(long, default_value_t = 30.0, allow_hyphen_values = true)]
    pub(crate) drain: f64,
    /// Serve the metrics (Prometheus text) at http://ADDR/metrics while working.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics: Option<std::net::SocketAddr>,
    /// Do not run the store's schedules (by default a worker on a database runs them
    /// beside its jobs; with --server, the server runs them).
    #[arg(long)]
    pub(crate) no_schedules: bool,
    /// The most seconds between two looks at the schedules (a schedule made or changed is
    /// seen within it; due ticks are fired on time regardless).
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub(crate) schedule_recheck: f64,
    /// Export spans over OTLP/HTTP to this collector (a base URL such as
    /// http://127.0.0.1:4318; spans go to its /v1/traces): each attempt is a span in the trace
    /// its job was enqueued in, and its program gets TRACEPARENT for it (without it, the
    /// program gets the job's own TRACEPARENT and TRACESTATE, so its spans still join)
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub(crate) otlp_endpoint: Option<String>,
    /// The program and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

impl WorkArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(self) -> Result<WorkRequest, RequestError> {
        let WorkArgs {
            queue,
            owner,
            ttl,
            concurrency,
            prefetch,
            seal_results,
            require_sealed,
            max_jobs,
            exit_when_empty,
            grace,
            drain,
            metrics,
            no_schedules,
            schedule_recheck,
            otlp_endpoint,
            command,
        } = self;
        let seconds =
            |flag: &str, value: f64| duration_flag(flag, value).map_err(RequestError::Flag);
        if concurrency == 0 {
            return Err(RequestError::Read("concurrency must be at least 1".into()));
        }
        Ok(WorkRequest {
            queue: QueueName::new(queue)?,
            owner: Owner::new(owner)?,
            ttl: lease_domain::Ttl::new(ttl)?,
            concurrency,
            prefetch,
            seal_results,
            require_sealed,
            max_jobs,
            exit_when_empty,
            grace: seconds("--grace", grace)?,
            drain: seconds("--drain", drain)?,
            metrics,
            schedules: !no_schedules,
            schedule_recheck: seconds("--schedule-recheck", schedule_recheck)?
                .max(std::time::Duration::from_millis(10)),
            traced: otlp_endpoint.is_some_and(|e| !e.trim().is_empty()),
            command,
        })
    }
}

/// What `lease work` runs, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WorkRequest {
    /// The queue.
    pub queue: QueueName,
    /// The worker's name.
    pub owner: Owner,
    /// The lease duration.
    pub ttl: lease_domain::Ttl,
    /// Programs at once.
    pub concurrency: usize,
    /// Leases held ahead of the running programs (`None`: the worker's default).
    pub prefetch: Option<usize>,
    /// Whether results are sealed before they are stored.
    pub seal_results: bool,
    /// Whether a plain payload is refused (the flag; the environment may require it too).
    pub require_sealed: bool,
    /// Stop after this many jobs.
    pub max_jobs: Option<usize>,
    /// Stop when the queue is empty.
    pub exit_when_empty: bool,
    /// SIGTERM to SIGKILL.
    pub grace: std::time::Duration,
    /// The drain deadline after Ctrl-C.
    pub drain: std::time::Duration,
    /// Where to serve /metrics, if anywhere.
    pub metrics: Option<std::net::SocketAddr>,
    /// Whether to run the store's schedules.
    pub schedules: bool,
    /// The most time between two looks at the schedules.
    pub schedule_recheck: std::time::Duration,
    /// Whether spans are exported (`main` installs the exporter): each attempt is then
    /// joined to its job's trace and its program gets TRACEPARENT.
    pub traced: bool,
    /// The program and its arguments.
    pub command: Vec<String>,
}
