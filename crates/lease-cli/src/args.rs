//! What the commands share: the lease holder's flags, a result's and a payload's source, the
//! queue fields of an enqueue, a lease's time window, the checks of flag values, and the error
//! of a command that does not check.

use std::path::PathBuf;

use lease_domain::{
    EnqueueSpec, Fence, InputError, LeaseTerm, Owner, Payload, QueueName, Timestamp,
};

/// The lease-holder's identity and token, shared by renew, complete and release.
#[derive(Debug, clap::Args)]
pub(crate) struct Holder {
    /// The worker that holds the lease.
    #[arg(long)]
    pub owner: String,
    /// The fence the claim returned.
    #[arg(long)]
    pub fence: u64,
}

impl Holder {
    pub(crate) fn check(self) -> Result<(Owner, Fence), InputError> {
        Ok((Owner::new(self.owner)?, Fence::new(self.fence)?))
    }
}

/// Where `complete` takes its result from: the command line, or a file (`-`: standard input)
/// for results too large for the argument list.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub(crate) struct ResultSource {
    /// The result to store.
    #[arg(long, allow_hyphen_values = true)]
    pub result: Option<String>,
    /// Read the result to store from this file (`-` for standard input); it must be UTF-8 text.
    #[arg(long, value_name = "PATH")]
    pub result_file: Option<PathBuf>,
}

/// Reads a named input (a result or payload file, `-` for standard input) as bytes for
/// [`crate::cli::Command::into_request`]; `main` provides it, so that only `main` touches the
/// file system and standard input.
/// The most a `--result-file` may hold (a result is stored whole, in one row).
pub(crate) const RESULT_FILE_LIMIT: usize = 64 << 20;

/// Reads a file (or standard input for `-`), at most the given number of bytes.
pub(crate) type ReadInput<'a> = &'a dyn Fn(&std::path::Path, usize) -> Result<Vec<u8>, String>;

/// Where `enqueue` takes a payload from, if anywhere.
#[derive(Debug, Default, clap::Args)]
#[group(required = false, multiple = false)]
pub(crate) struct PayloadSource {
    /// The payload, as text.
    #[arg(long, allow_hyphen_values = true)]
    pub payload: Option<String>,
    /// Read the payload from this file (`-` for standard input); any bytes, up to 1 MiB.
    #[arg(long, value_name = "PATH")]
    pub payload_file: Option<PathBuf>,
}

/// The queue fields of `enqueue` (and of each job `enqueue-many` reads, unless its line says
/// otherwise).
#[derive(Debug, clap::Args)]
pub(crate) struct SpecFlags {
    /// The queue it waits in.
    #[arg(long, default_value = QueueName::DEFAULT)]
    queue: String,
    /// Higher is claimed first.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    priority: i64,
    /// Not claimable before this time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    run_at: Option<f64>,
    /// How many times claim-next may lease it (0 or 1: no retry).
    #[arg(long, default_value_t = EnqueueSpec::DEFAULT_MAX_ATTEMPTS)]
    max_attempts: u32,
    /// The most seconds one attempt may run; past it the worker stops the handler and fails
    /// the attempt "timed out" (default: the queue's timeout, if `lease limit` set one).
    #[arg(long, value_name = "SECONDS", allow_hyphen_values = true)]
    timeout: Option<f64>,
    /// Enqueue the id again even when a finished job (done, failed or cancelled) holds it: a
    /// re-run with its attempts reset and a higher fence. A waiting or leased job is untouched.
    #[arg(long)]
    replace_finished: bool,
    /// The job's group in its queue (a customer, an account): the key the queue's group
    /// rules (`lease limit --per-group`, `--ordered`) count by. 1 to 1,024 bytes.
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// Debounce: the job is due SECONDS from now; enqueueing the same id again while it still
    /// waits to start replaces its payload and pushes it to SECONDS from then (a started or
    /// finished job is left alone).
    #[arg(long, value_name = "SECONDS", allow_hyphen_values = true)]
    debounce: Option<f64>,
    /// Run after this job (repeat the flag for each parent): the job waits (status
    /// `waiting`) until every parent has finished, and becomes due in the transaction that
    /// completes the last one. The parent must exist (or, with enqueue-many, be in the same
    /// input, before or after).
    #[arg(long, value_name = "PARENT")]
    after: Vec<String>,
    /// What the job does when a parent ends dead or cancelled: `cancel` (the default) cancels
    /// it, naming the parent; `run` runs it once every parent has finished, however each ended.
    #[arg(long, value_name = "POLICY", value_parser = ["cancel", "run"])]
    on_parent_failure: Option<String>,
}

impl SpecFlags {
    /// The checked spec, with `payload`, enqueued at `now`: the flags as the domain's one
    /// enqueue check reads a job's fields (a refused one is named as its flag).
    pub(crate) fn into_spec(
        self,
        payload: Option<Payload>,
        now: f64,
    ) -> Result<EnqueueSpec, RequestError> {
        if let Some(at) = self.run_at {
            time_flag("--run-at", at)?;
        }
        let defaults = EnqueueSpec {
            payload,
            enqueued_at: Timestamp::new(now).ok(),
            trace: trace_from_env(),
            ..EnqueueSpec::default()
        };
        lease_domain::EnqueueFields {
            id: String::new(),
            queue: Some(self.queue),
            priority: Some(self.priority),
            run_at: self.run_at,
            max_attempts: Some(self.max_attempts),
            payload: None,
            enqueued_at: None,
            timeout: self.timeout,
            replace: self.replace_finished.then(|| "finished".to_owned()),
            group: self.group,
            debounce: self.debounce,
            after: Some(self.after),
            on_parent_failure: self.on_parent_failure,
            traceparent: None,
            tracestate: None,
        }
        .spec(&defaults)
        .map_err(|e| RequestError::Flag(format!("--{}: {}", e.field.replace('_', "-"), e.error)))
    }
}

/// The W3C trace context of the producer's span, from `TRACEPARENT` (and `TRACESTATE`) in
/// the environment, as a program run inside a trace gets it (`lease work` sets them for its
/// programs); `None` when `TRACEPARENT` is unset or empty.
///
/// The environment is not the caller's explicit word: as W3C Trace Context has a receiver do,
/// a malformed `TRACEPARENT` is ignored (with one warning on stderr) and the job is enqueued
/// without a context, and a malformed `TRACESTATE` beside a good `TRACEPARENT` is dropped
/// alone. A broken tracer upstream never stops work.
pub(crate) fn trace_from_env() -> Option<lease_domain::TraceContext> {
    let parent = std::env::var_os("TRACEPARENT").filter(|v| !v.is_empty())?;
    let state = std::env::var_os("TRACESTATE").filter(|v| !v.is_empty());
    let (trace, ignored) = read_trace(&parent, state.as_deref());
    if let Some(why) = ignored {
        eprintln!("lease: warning: {why}");
    }
    trace
}

/// The context `TRACEPARENT` and `TRACESTATE` give, and what was ignored of them and why.
fn read_trace(
    parent: &std::ffi::OsStr,
    state: Option<&std::ffi::OsStr>,
) -> (Option<lease_domain::TraceContext>, Option<String>) {
    let ignored = |why: String| {
        format!(
            "TRACEPARENT from the environment ignored ({why}); enqueued without a trace context"
        )
    };
    let Some(parent) = parent.to_str() else {
        return (None, Some(ignored("not UTF-8".to_owned())));
    };
    let alone = match lease_domain::TraceContext::new(parent, None) {
        Ok(alone) => alone,
        Err(e) => return (None, Some(ignored(e.to_string()))),
    };
    let Some(state) = state else {
        return (Some(alone), None);
    };
    let with_state = state
        .to_str()
        .ok_or_else(|| "not UTF-8".to_owned())
        .and_then(|s| lease_domain::TraceContext::new(parent, Some(s)).map_err(|e| e.to_string()));
    match with_state {
        Ok(both) => (Some(both), None),
        Err(why) => (
            Some(alone),
            Some(format!(
                "TRACESTATE from the environment ignored ({why}); enqueued with TRACEPARENT alone"
            )),
        ),
    }
}

#[cfg(test)]
mod trace_env_tests {
    use super::read_trace;
    use std::ffi::OsStr;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_malformed_traceparent_is_ignored_with_a_warning_naming_it() {
        for bad in [
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            let (trace, why) = read_trace(OsStr::new(bad), Some(OsStr::new("a=b")));
            assert_eq!(trace, None, "{bad}");
            let why = why.expect("a warning");
            assert!(
                why.starts_with("TRACEPARENT from the environment ignored"),
                "{why}"
            );
        }
    }

    #[test]
    fn a_malformed_tracestate_is_dropped_alone() {
        let (trace, why) = read_trace(OsStr::new(GOOD), Some(OsStr::new("\u{7f}bad")));
        let trace = trace.expect("the traceparent is kept");
        assert_eq!((trace.traceparent(), trace.tracestate()), (GOOD, None));
        assert!(why.expect("a warning").starts_with("TRACESTATE"));
    }

    #[test]
    fn a_good_context_is_kept_whole_without_a_warning() {
        let (trace, why) = read_trace(OsStr::new(GOOD), Some(OsStr::new("k=v")));
        let trace = trace.expect("kept");
        assert_eq!(
            (trace.traceparent(), trace.tracestate()),
            (GOOD, Some("k=v"))
        );
        assert_eq!(why, None);
    }
}

/// A `--group` flag's value, checked.
///
/// # Errors
/// [`RequestError::Flag`] naming `--group`.
pub(crate) fn group_flag(
    group: Option<String>,
) -> Result<Option<lease_domain::GroupKey>, RequestError> {
    group
        .map(lease_domain::GroupKey::new)
        .transpose()
        .map_err(|e| RequestError::Flag(format!("--group: {e}")))
}

/// Why a command could not be turned into a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum RequestError {
    /// A value was invalid.
    #[error("invalid input: {0}")]
    Input(#[from] InputError),
    /// An input could not be read.
    #[error("{0}")]
    Read(String),
    /// A flag's value is out of range; the message names the flag.
    #[error("{0}")]
    Flag(String),
    /// A payload could not be sealed: the keys in the environment are bad (the message names
    /// the variable, never the key), or it is too large sealed.
    #[error("{0}")]
    Seal(#[from] lease_seal::SealError),
}

/// The most jobs `enqueue-many` stores in one transaction.
pub(crate) const BATCH_JOBS: usize = 1_000;

/// The most bytes `enqueue-many` reads from standard input (64 MiB).
pub(crate) const BATCH_INPUT_LIMIT: usize = 64 << 20;

/// The most seconds a duration flag takes (`--grace`, `--drain`, `--busy-timeout`): a year.
pub(crate) const MAX_FLAG_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// A duration flag's value: finite, 0 or more, and at most [`MAX_FLAG_SECONDS`]; the message
/// names the flag and what is wrong with the value.
pub(crate) fn duration_flag(flag: &str, value: f64) -> Result<std::time::Duration, String> {
    if !value.is_finite() {
        return Err(format!(
            "{flag} must be a finite number of seconds, got {value}"
        ));
    }
    if value < 0.0 {
        return Err(format!("{flag} must be 0 or more seconds, got {value}"));
    }
    if value > MAX_FLAG_SECONDS {
        return Err(format!(
            "{flag} is {value} seconds, more than the most it takes ({MAX_FLAG_SECONDS} s, a year)"
        ));
    }
    Ok(std::time::Duration::from_secs_f64(value))
}

/// A time flag's value (read by `when::parse`): a finite time; the message names the flag.
pub(crate) fn time_flag(flag: &str, value: f64) -> Result<Timestamp, RequestError> {
    Timestamp::new(value).map_err(|_| {
        RequestError::Flag(format!(
            "{flag} must be a finite time in Unix seconds, got {value}"
        ))
    })
}

/// The time window of a claim or renewal.
#[derive(Debug, clap::Args)]
pub(crate) struct Window {
    /// The current time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub now: Option<f64>,
    /// The lease duration from now, in seconds (> 0).
    #[arg(long, allow_hyphen_values = true)]
    pub ttl: f64,
}

impl Window {
    pub(crate) fn term(self, clock: impl FnOnce() -> f64) -> Result<LeaseTerm, InputError> {
        LeaseTerm::new(self.now.unwrap_or_else(clock), self.ttl)
    }
}
