//! The command line: clap definitions, and their conversion into checked requests.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use lease_domain::{
    EnqueueSpec, ErrorText, Fence, InputError, JobId, JobResult, LeaseTerm, Owner, Payload,
    QueueName, Renewal, Retry, Status, Timestamp, Ttl,
};

/// Fenced job leases on an embedded SQLite database or on PostgreSQL: a stalled worker can
/// never overwrite the result of the worker that took over.
#[derive(Debug, Parser)]
#[command(name = "lease", version, about)]
pub(crate) struct Cli {
    /// The database: a SQLite file, or a postgres:// URL (PG* variables fill what it leaves
    /// out) [env: LEASE_DB] [default: lease.db].
    #[arg(long, global = true)]
    pub db: Option<PathBuf>,
    /// Talk to a `lease serve` at this URL instead of opening a database (or LEASE_SERVER);
    /// needs --api-key.
    #[arg(long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// The API key for --server (or LEASE_API_KEY; prefer the variable: flags show in `ps`).
    #[arg(long, global = true, value_name = "KEY")]
    pub api_key: Option<String>,
    /// A CA certificate (PEM) to trust for an https:// --server, besides the system's (or
    /// LEASE_CA_CERT).
    #[arg(long, global = true, value_name = "PEM")]
    pub ca_cert: Option<PathBuf>,
    /// Whose clock decides now: `caller` (the --now given, or this machine's clock) or `store`
    /// (PostgreSQL's clock; for SQLite the clock of the machine writing) [env: LEASE_CLOCK]
    /// [default: caller].
    #[arg(long, global = true, value_name = "caller|store")]
    pub clock: Option<String>,
    /// With the caller's clock: refuse a now further than this many seconds from the store's
    /// clock, changing nothing [env: LEASE_MAX_SKEW].
    #[arg(long, global = true, value_name = "SECONDS")]
    pub max_skew: Option<f64>,
    /// The PostgreSQL schema holding the lease tables [env: LEASE_PG_SCHEMA] [default: lease].
    #[arg(long, global = true, value_name = "NAME")]
    pub pg_schema: Option<String>,
    /// How long to wait for a lock another process holds, in seconds, before failing
    /// [env: LEASE_BUSY_TIMEOUT] [default: 30].
    #[arg(
        long,
        global = true,
        value_name = "SECONDS",
        allow_hyphen_values = true
    )]
    pub busy_timeout: Option<f64>,
    /// Hold the database for this process alone (SQLite's exclusive locking mode: no -shm file;
    /// other processes wait for the busy timeout and fail).
    #[arg(long, global = true)]
    pub exclusive: bool,
    /// Accept a FUSE or unknown file system, whose shared memory may not be coherent between
    /// processes; safe only when one process uses the database (see --exclusive).
    #[arg(long, global = true)]
    pub allow_unverified_fs: bool,
    /// Print exactly one JSON value on stdout instead of a sentence.
    #[arg(long, global = true)]
    pub json: bool,
    /// Record every refused holder write in the store's audit trail (each refusal then
    /// writes and syncs; see `lease audit`) [env: LEASE_AUDIT=1].
    #[arg(long, global = true)]
    pub audit: bool,
    /// Log store operations on stderr (-v: refusals and errors, -vv: every operation);
    /// RUST_LOG, when set, chooses instead.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

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
    fn check(self) -> Result<(Owner, Fence), InputError> {
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
/// [`Command::into_request`]; `main` provides it, so that only `main` touches the file system
/// and standard input.
/// The most a `--result-file` may hold (a result is stored whole, in one row).
const RESULT_FILE_LIMIT: usize = 64 << 20;

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
}

impl SpecFlags {
    /// The checked spec, with `payload`, enqueued at `now`.
    fn into_spec(self, payload: Option<Payload>, now: f64) -> Result<EnqueueSpec, RequestError> {
        Ok(EnqueueSpec {
            enqueued_at: Timestamp::new(now).ok(),
            queue: QueueName::new(self.queue)?,
            priority: self.priority,
            run_at: self.run_at.map(|t| time_flag("--run-at", t)).transpose()?,
            max_attempts: Some(self.max_attempts),
            payload,
            timeout: self
                .timeout
                .map(Ttl::new)
                .transpose()
                .map_err(|e| RequestError::Flag(format!("--timeout: {e}")))?,
            replace_finished: self.replace_finished,
        })
    }
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
fn time_flag(flag: &str, value: f64) -> Result<Timestamp, RequestError> {
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
    fn term(self, clock: impl FnOnce() -> f64) -> Result<LeaseTerm, InputError> {
        LeaseTerm::new(self.now.unwrap_or_else(clock), self.ttl)
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the database (idempotent; never overwrites a file); on PostgreSQL, create the
    /// lease schema.
    Init,
    /// Copy every job (fences, results, queue fields) and every purged id's fence from one
    /// store to another (SQLite file or postgres:// URL, either way), then verify the copy.
    Migrate {
        /// The store to copy from.
        #[arg(long, value_name = "PATH_OR_URL")]
        from: String,
        /// The store to copy into (created if missing); it must be empty unless --merge.
        #[arg(long, value_name = "PATH_OR_URL")]
        to: String,
        /// Copy into a store that already holds jobs: a job on both sides keeps the larger
        /// fence (and is reported).
        #[arg(long)]
        merge: bool,
    },
    /// Add a job in the default state; an existing job is left as it is.
    Enqueue {
        /// The job id.
        job: String,
        #[command(flatten)]
        spec: SpecFlags,
        #[command(flatten)]
        payload: PayloadSource,
    },
    /// Enqueue many jobs read from standard input, in transactions of up to 1,000: one job id
    /// per line, or with --json-lines one JSON object per line (`id`, and any of `queue`,
    /// `priority`, `run_at`, `max_attempts`, `payload`; the flags give what a line leaves out).
    /// Every line is checked before anything is stored.
    EnqueueMany {
        #[command(flatten)]
        spec: SpecFlags,
        /// Read one JSON object per line instead of one job id per line.
        #[arg(long)]
        json_lines: bool,
    },
    /// Lease up to --limit due jobs of a queue: highest priority, then earliest run-at, then FIFO.
    ClaimNext {
        /// The queue.
        #[arg(long, default_value = QueueName::DEFAULT)]
        queue: String,
        /// The worker asking.
        #[arg(long)]
        owner: String,
        #[command(flatten)]
        window: Window,
        /// The most leases to take.
        #[arg(long, default_value_t = 1)]
        limit: usize,
    },
    /// Report a failure of the live current lease: retried after a backoff while attempts
    /// remain, else dead.
    Fail {
        /// The job id.
        job: String,
        #[command(flatten)]
        holder: Holder,
        /// What went wrong (kept with the job).
        #[arg(long, allow_hyphen_values = true)]
        error: String,
        /// The current time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
        /// Dead at once, whatever attempts remain.
        #[arg(long)]
        no_retry: bool,
    },
    /// Cancel a pending or running job; its holder's later writes are refused.
    Cancel {
        /// The job id.
        job: String,
        /// The current time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
    },
    /// Put a dead or cancelled job back to pending with fresh attempts (its fence goes on).
    Retry {
        /// The job id.
        job: String,
        /// The current time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
    },
    /// List jobs, in id order.
    List {
        /// Only this queue.
        #[arg(long)]
        queue: Option<String>,
        /// Only this status: pending, running, done, dead or cancelled.
        #[arg(long)]
        status: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Only jobs whose id comes after this one (the last id of the page before).
        #[arg(long, allow_hyphen_values = true)]
        after: Option<String>,
        /// The time statuses are judged at (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
    },
    /// Count jobs per queue and status.
    Stats {
        /// The time statuses are judged at (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
        /// Print the counts in the Prometheus text format (gauge `lease_jobs`), and each queue's flow control (`lease_queue_paused`, `lease_queue_concurrency_limit`, `lease_queue_timeout_seconds`).
        #[arg(long, conflicts_with = "json")]
        prometheus: bool,
    },
    /// Show the audit trail of refused holder writes (recorded by stores opened with --audit).
    Audit {
        /// Only this job.
        #[arg(long)]
        job: Option<String>,
        /// Only refusals at or after this time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z).
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        since: Option<f64>,
        /// At most this many, the newest.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Delete finished jobs last changed before --before; a purged id never gets an old fence.
    Purge {
        /// The cutoff time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z).
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        before: f64,
        /// Only these statuses (done, dead, cancelled; repeat for several; default: all three).
        #[arg(long = "status")]
        statuses: Vec<String>,
    },
    /// Show a job's stored row, with its queue fields and its status at --now.
    State {
        /// The job id.
        job: String,
        /// The time the status is judged at (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
    },
    /// Take the job's lease if it is free or expired; prints the new fence.
    Claim {
        /// The job id.
        job: String,
        /// The worker asking for the lease.
        #[arg(long)]
        owner: String,
        #[command(flatten)]
        window: Window,
    },
    /// Extend the live current lease.
    Renew {
        /// The job id.
        job: String,
        #[command(flatten)]
        holder: Holder,
        #[command(flatten)]
        window: Window,
    },
    /// Store the result of the live current lease and mark the job done.
    Complete {
        /// The job id.
        job: String,
        #[command(flatten)]
        holder: Holder,
        /// The current time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
        #[command(flatten)]
        result: ResultSource,
    },
    /// Give the lease back; the fence is kept.
    Release {
        /// The job id.
        job: String,
        #[command(flatten)]
        holder: Holder,
    },
    /// Race one claim per owner, concurrently; prints each owner's fence or null.
    ClaimMany {
        /// The job id.
        job: String,
        /// An owner (repeat for each).
        #[arg(long = "owner", required = true)]
        owners: Vec<String>,
        #[command(flatten)]
        window: Window,
    },
    /// Pause a queue: claims lease none of its jobs (waiting claims wait) until it is resumed
    /// or --until passes; enqueueing goes on, and running leases are untouched.
    Pause {
        /// The queue.
        queue: String,
        /// Resume by itself at this time (Unix seconds or RFC 3339).
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        until: Option<f64>,
    },
    /// Resume a paused queue.
    Resume {
        /// The queue.
        queue: String,
    },
    /// Set a queue's limits: at most --concurrency live leases at once across every worker
    /// (decided in each claim's own transaction; 0 removes the limit), and the --timeout of
    /// its jobs that name none.
    Limit {
        /// The queue.
        queue: String,
        /// The most live leases at once (0: no limit).
        #[arg(long, value_name = "N")]
        concurrency: Option<u32>,
        /// How long an attempt of a job without a timeout of its own may run, in seconds.
        #[arg(long, value_name = "SECONDS", allow_hyphen_values = true)]
        timeout: Option<f64>,
        /// Remove the queue's timeout.
        #[arg(long)]
        no_timeout: bool,
    },
    /// Store a running job's progress (a short text, up to 1,024 bytes) under its lease's
    /// fence; with --ttl the lease is renewed for that long, without it the lease keeps its
    /// end. Refused like a renewal for a stale or expired holder.
    Progress {
        /// The job id.
        job: String,
        #[command(flatten)]
        holder: Holder,
        /// The progress, such as "12 of 40 files".
        #[arg(long, allow_hyphen_values = true)]
        value: String,
        /// The current time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
        #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
        now: Option<f64>,
        /// Renew the lease for this many seconds from now (> 0); without it the lease keeps its end.
        #[arg(long, allow_hyphen_values = true)]
        ttl: Option<f64>,
    },
    /// Periodic schedules: each tick of a cron expression enqueues one job.
    Schedule {
        /// What to do.
        #[command(subcommand)]
        command: crate::control::ScheduleCommand,
    },
    /// Replay the stale-worker story on a temporary database, step by step.
    Demo,
    /// Serve the work queue over HTTP: workers then need only a URL and an API key, never the
    /// database. Without any API key in the store it listens on loopback only.
    Serve {
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:7070", value_name = "ADDR")]
        listen: std::net::SocketAddr,
        /// The largest request body, in bytes.
        #[arg(long, default_value_t = 2 << 20, value_name = "BYTES")]
        body_limit: usize,
        /// Requests handled at once; more are refused with 503 and Retry-After.
        #[arg(long, default_value_t = 1024, value_name = "N")]
        max_in_flight: usize,
        /// Claims waiting (long polls) at once; more are refused with 503.
        #[arg(long, default_value_t = 1000, value_name = "N")]
        max_waiting: usize,
        /// Seconds a request may take beyond its long poll.
        #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
        request_timeout: f64,
        /// Requests a second per principal (bursts of twice as many; a lease holder's writes
        /// counted apart, so claims never starve renewals); over it, 429. 0 turns it off.
        #[arg(long, default_value_t = 1000.0, value_name = "N")]
        rate_limit: f64,
        /// Seconds between a waiting claim's looks for jobs that came due by time (or were
        /// enqueued where no signal reaches: SQLite written by another process).
        #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
        poll_interval: f64,
        /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
        #[arg(long, value_name = "PEM", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key (PEM) of --tls-cert.
        #[arg(long, value_name = "PEM", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Seconds a key read from the store is trusted before it is read again: a
        /// revocation reaches every server within it (0: read the store on every request).
        #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
        key_cache: f64,
        /// Seconds a session of the operator page lasts after signing in with a key (the
        /// key's revocation ends it sooner).
        #[arg(long, default_value_t = 43_200.0, value_name = "SECONDS")]
        session_ttl: f64,
        /// Seconds one stream of `GET /v1/events` lasts before the server ends it; the page
        /// reconnects by itself, and its key or session is checked again then.
        #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
        events_lifetime: f64,
        /// Let requests carry their own `now` (for tests that script time).
        #[arg(long, hide = true)]
        client_clock: bool,
        /// Do not run the store's schedules (by default every server runs them: any number
        /// may, and each tick still makes one job).
        #[arg(long)]
        no_schedules: bool,
        /// The most seconds between two looks at the schedules (a schedule made or changed is
        /// seen within it; due ticks are fired on time regardless).
        #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
        schedule_recheck: f64,
    },
    /// Write to, read from and set up the resources a worker writes its results to, under its
    /// fence: Redis, S3 (and GCS, Azure), a directory, NATS key-value, MariaDB / MySQL.
    /// A stale holder's write is refused (exit 3) and the newer value stands.
    Guard {
        /// What to do.
        #[command(subcommand)]
        command: GuardCommand,
    },
    /// Make, list and revoke the API keys of `lease serve` (kept in the store as digests).
    Keys {
        /// What to do.
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Run a program for each job of a queue: the payload on its stdin; LEASE_JOB, LEASE_FENCE
    /// and LEASE_ATTEMPT in its environment; exit 0 completes the job with its stdout, another
    /// exit fails it (stderr's last lines are the error). If the lease is lost or the job
    /// cancelled, the program gets SIGTERM, then SIGKILL after --grace, and nothing is written.
    /// Ctrl-C stops claiming, lets running jobs finish for --drain, then releases the rest.
    Work {
        /// The queue.
        #[arg(long, default_value = QueueName::DEFAULT)]
        queue: String,
        /// This worker's name.
        #[arg(long)]
        owner: String,
        /// The lease duration, renewed every third of it.
        #[arg(long, allow_hyphen_values = true)]
        ttl: f64,
        /// How many programs run at once.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// Stop after this many jobs.
        #[arg(long)]
        max_jobs: Option<usize>,
        /// Stop when no job is due and none is running.
        #[arg(long)]
        exit_when_empty: bool,
        /// Seconds between SIGTERM and SIGKILL for a program whose lease was lost.
        #[arg(long, default_value_t = 5.0, allow_hyphen_values = true)]
        grace: f64,
        /// Seconds running jobs may go on after Ctrl-C before they are stopped and released.
        #[arg(long, default_value_t = 30.0, allow_hyphen_values = true)]
        drain: f64,
        /// Serve the metrics (Prometheus text) at http://ADDR/metrics while working.
        #[arg(long, value_name = "ADDR")]
        metrics: Option<std::net::SocketAddr>,
        /// Do not run the store's schedules (by default a worker on a database runs them
        /// beside its jobs; with --server, the server runs them).
        #[arg(long)]
        no_schedules: bool,
        /// The most seconds between two looks at the schedules (a schedule made or changed is
        /// seen within it; due ticks are fired on time regardless).
        #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
        schedule_recheck: f64,
        /// The program and its arguments (after `--`).
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
}

/// What `lease keys` does.
#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Make a key for PRINCIPAL and print it once (the store keeps only its digest). A
    /// principal may hold two live keys, so a key can be rotated without downtime.
    Create {
        /// Who holds it: 1-64 of a-z, 0-9, '.', '_', '-'. A worker key may claim as PRINCIPAL
        /// or PRINCIPAL/anything.
        principal: String,
        /// viewer (reads), worker (also enqueues, claims and writes its leases) or admin
        /// (also cancels, retries, purges and acts as any owner).
        #[arg(long)]
        scope: String,
    },
    /// List every key (never a secret).
    List,
    /// Revoke a key by its id: requests with it are refused from then on.
    Revoke {
        /// The key's id (the part after `lk_`).
        id: String,
    },
}

/// The `lease guard` commands. URLs: `redis://HOST:PORT[/DB]` (`rediss://`),
/// `s3://BUCKET[/PREFIX]` (with `AWS_*`; `AWS_ENDPOINT_URL` for a compatible server),
/// `gs://BUCKET[/PREFIX]`, `az://CONTAINER[/PREFIX]`, `file:///DIR`,
/// `nats://HOST:PORT/BUCKET`, `mysql://USER[:PASSWORD]@HOST:PORT/DATABASE` (`mariadb://`).
#[derive(Debug, clap::Subcommand)]
pub(crate) enum GuardCommand {
    /// Set a resource up for guarded writes: load the Redis function library, make the NATS
    /// bucket, or the MariaDB tables and procedure. Idempotent; upgrades an older version.
    Install {
        /// The resource.
        url: String,
    },
    /// Write VALUE at KEY under the holder's fence; refused (exit 3) when a newer holder wrote
    /// there. The value is --value, --file, or standard input.
    Put {
        /// The resource.
        url: String,
        /// The key (a Redis key, an object's path under the prefix, a file's path in the
        /// directory, a NATS key).
        key: String,
        /// The value, as text.
        #[arg(long, conflicts_with = "file")]
        value: Option<String>,
        /// Read the value from this file (`-` for standard input, also the default).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The holder's job (recorded with the value where the resource keeps metadata).
        #[arg(long, env = "LEASE_JOB")]
        job: Option<String>,
        /// The holder's fence (`lease work` gives each program LEASE_FENCE).
        #[arg(long, env = "LEASE_FENCE")]
        fence: u64,
        /// Seconds the value lives (Redis only; the fence never expires).
        #[arg(long, value_name = "SECONDS")]
        expiry: Option<f64>,
    },
    /// Print the value at KEY (with --json, also its fence); exit 3 when there is none.
    Get {
        /// The resource.
        url: String,
        /// The key.
        key: String,
    },
    /// Delete the value at KEY under the holder's fence (the fence stays: an older holder is
    /// still refused).
    Delete {
        /// The resource.
        url: String,
        /// The key.
        key: String,
        /// The holder's job, as `put` takes it (a delete leaves no value to record it with;
        /// it is named in the answer).
        #[arg(long, env = "LEASE_JOB")]
        job: Option<String>,
        /// The holder's fence (`lease work` gives each program LEASE_FENCE).
        #[arg(long, env = "LEASE_FENCE")]
        fence: u64,
    },
}

/// A `lease guard` command, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GuardRequest {
    /// Set the resource up.
    Install(String),
    /// Write a value under a fence.
    Put {
        /// The resource.
        url: String,
        /// The key.
        key: lease_guard::value::GuardKey,
        /// The value.
        value: Vec<u8>,
        /// The fence.
        fence: Fence,
        /// The job and the expiry.
        options: lease_guard::value::PutOptions,
    },
    /// Read a value.
    Get(String, lease_guard::value::GuardKey),
    /// Delete a value under a fence, for a job if named.
    Delete(String, lease_guard::value::GuardKey, Fence, Option<String>),
}

/// What `lease serve` runs with, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServeRequest {
    /// Where to listen.
    pub listen: std::net::SocketAddr,
    /// The body limit.
    pub body_limit: usize,
    /// Requests at once.
    pub max_in_flight: usize,
    /// Long polls at once.
    pub max_waiting: usize,
    /// The request timeout.
    pub request_timeout: std::time::Duration,
    /// Whether requests may carry their own `now`.
    pub client_clock: bool,
    /// Requests a second per principal (0: no limit).
    pub rate_limit: f64,
    /// How long a key read from the store is trusted.
    pub key_cache: std::time::Duration,
    /// The certificate chain and key to serve HTTPS with.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// How often a waiting claim looks again.
    pub poll_interval: std::time::Duration,
    /// How long a page session lasts.
    pub session_ttl: std::time::Duration,
    /// How long one event stream lasts.
    pub events_lifetime: std::time::Duration,
    /// Whether the store records refused writes (from `--audit`, set by `main`).
    pub audit: bool,
    /// Whether to run the store's schedules.
    pub schedules: bool,
    /// The most time between two looks at the schedules.
    pub schedule_recheck: std::time::Duration,
}

/// What `lease keys` does, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KeysRequest {
    /// Make a key.
    Create(lease_domain::Principal, lease_domain::Scope),
    /// List keys.
    List,
    /// Revoke a key.
    Revoke(lease_domain::KeyId),
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
    /// The program and its arguments.
    pub command: Vec<String>,
}

/// A command whose inputs passed every check.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    /// Create or check the database.
    Init,
    /// Copy one store into another.
    Migrate {
        /// The source.
        from: String,
        /// The target.
        to: String,
        /// Merge into a non-empty target.
        merge: bool,
    },
    /// Enqueue a job.
    Enqueue(JobId, EnqueueSpec),
    /// Enqueue many jobs, in transactions of up to [`BATCH_JOBS`].
    EnqueueMany(Vec<(JobId, EnqueueSpec)>),
    /// Read a job, judging its status at a time.
    State(JobId, Timestamp),
    /// Lease the next jobs of a queue.
    ClaimNext(QueueName, Owner, LeaseTerm, usize),
    /// Report a failure.
    Fail(JobId, Owner, Fence, Timestamp, ErrorText, Retry),
    /// Cancel a job.
    Cancel(JobId, Timestamp),
    /// Retry a job.
    Retry(JobId, Timestamp),
    /// List jobs.
    List(lease_ports::ListFilter),
    /// Count jobs.
    Stats(Timestamp, bool),
    /// Show the audit trail.
    Audit(lease_ports::audit::AuditFilter),
    /// Purge finished jobs.
    Purge(Timestamp, Vec<Status>),
    /// Claim a job.
    Claim(JobId, Owner, LeaseTerm),
    /// Renew a lease.
    Renew(JobId, Owner, Fence, LeaseTerm),
    /// Complete a job.
    Complete(JobId, Owner, Fence, Timestamp, JobResult),
    /// Release a lease.
    Release(JobId, Owner, Fence),
    /// Race claims.
    ClaimMany(JobId, Vec<Owner>, LeaseTerm),
    /// Run the demo.
    Demo,
    /// Serve the queue over HTTP.
    Serve(ServeRequest),
    /// Manage API keys.
    Keys(KeysRequest),
    /// Write, read or set up a guarded resource.
    Guard(GuardRequest),
    /// Run a worker.
    Work(WorkRequest),
    /// Pause, resume or limit a queue, store a job's progress, or work with schedules.
    Control(crate::control::ControlRequest),
}

impl Request {
    /// The time the request is judged at, when it carries one (its `--now`, or the clock read
    /// for it).
    pub(crate) fn now(&self) -> Option<Timestamp> {
        match self {
            Self::State(_, now)
            | Self::Fail(_, _, _, now, _, _)
            | Self::Cancel(_, now)
            | Self::Retry(_, now)
            | Self::Stats(now, _)
            | Self::Complete(_, _, _, now, _) => Some(*now),
            Self::List(filter) => Some(filter.now),
            Self::Control(request) => request.now(),
            Self::ClaimNext(_, _, term, _)
            | Self::Claim(_, _, term)
            | Self::Renew(_, _, _, term)
            | Self::ClaimMany(_, _, term) => Some(term.now()),
            Self::Init
            | Self::Migrate { .. }
            | Self::Enqueue(..)
            | Self::EnqueueMany(_)
            | Self::Audit(_)
            | Self::Purge(..)
            | Self::Release(..)
            | Self::Demo
            | Self::Serve(_)
            | Self::Keys(_)
            | Self::Guard(_)
            | Self::Work(_) => None,
        }
    }
}

impl Command {
    /// Checks every value; `clock` is read only when a command needs `now` and none was given,
    /// and `read` only for a result file.
    ///
    /// # Errors
    /// The first [`InputError`], which names the bad value, or a file that cannot be read.
    pub(crate) fn into_request(
        self,
        clock: impl FnOnce() -> f64,
        read: ReadInput<'_>,
    ) -> Result<Request, RequestError> {
        Ok(match self {
            Command::Init => Request::Init,
            Command::Migrate { from, to, merge } => Request::Migrate { from, to, merge },
            Command::Demo => Request::Demo,
            Command::Pause { queue, until } => {
                Request::Control(crate::control::pause(queue, until, clock())?)
            }
            Command::Resume { queue } => Request::Control(crate::control::resume(queue, clock())?),
            Command::Limit {
                queue,
                concurrency,
                timeout,
                no_timeout,
            } => Request::Control(crate::control::limit(
                queue,
                concurrency,
                timeout,
                no_timeout,
                clock(),
            )?),
            Command::Progress {
                job,
                holder,
                value,
                now,
                ttl,
            } => {
                let now = now.unwrap_or_else(clock);
                let renewal = match ttl {
                    Some(ttl) => Renewal::Renew(LeaseTerm::new(now, ttl)?),
                    None => Renewal::Keep(Timestamp::new(now)?),
                };
                Request::Control(crate::control::progress(
                    job,
                    holder.check()?,
                    renewal,
                    value,
                )?)
            }
            Command::Schedule { command } => {
                Request::Control(crate::control::schedule(command, clock, read)?)
            }
            Command::Serve {
                listen,
                body_limit,
                max_in_flight,
                max_waiting,
                request_timeout,
                rate_limit,
                key_cache,
                session_ttl,
                events_lifetime,
                poll_interval,
                tls_cert,
                tls_key,
                client_clock,
                no_schedules,
                schedule_recheck,
            } => {
                if !(rate_limit.is_finite() && rate_limit >= 0.0) {
                    return Err(RequestError::Flag(format!(
                        "--rate-limit must be 0 or more requests a second, got {rate_limit}"
                    )));
                }
                for (flag, value) in [
                    ("--body-limit", body_limit),
                    ("--max-in-flight", max_in_flight),
                    ("--max-waiting", max_waiting),
                ] {
                    if value == 0 {
                        return Err(RequestError::Flag(format!("{flag} must be at least 1")));
                    }
                }
                Request::Serve(ServeRequest {
                    listen,
                    body_limit,
                    max_in_flight,
                    max_waiting,
                    request_timeout: duration_flag("--request-timeout", request_timeout)
                        .map_err(RequestError::Flag)?,
                    client_clock,
                    rate_limit,
                    key_cache: duration_flag("--key-cache", key_cache)
                        .map_err(RequestError::Flag)?,
                    tls: tls_cert.zip(tls_key),
                    poll_interval: duration_flag("--poll-interval", poll_interval)
                        .map_err(RequestError::Flag)?
                        .max(std::time::Duration::from_millis(10)),
                    session_ttl: duration_flag("--session-ttl", session_ttl)
                        .map_err(RequestError::Flag)?
                        .max(std::time::Duration::from_secs(1)),
                    events_lifetime: duration_flag("--events-lifetime", events_lifetime)
                        .map_err(RequestError::Flag)?
                        .max(std::time::Duration::from_millis(100)),
                    audit: false,
                    schedules: !no_schedules,
                    schedule_recheck: duration_flag("--schedule-recheck", schedule_recheck)
                        .map_err(RequestError::Flag)?
                        .max(std::time::Duration::from_millis(10)),
                })
            }
            Command::Guard { command } => Request::Guard(guard_request(command, read)?),
            Command::Keys { command } => Request::Keys(match command {
                KeysCommand::Create { principal, scope } => KeysRequest::Create(
                    lease_domain::Principal::new(principal)
                        .map_err(|e| RequestError::Flag(e.to_string()))?,
                    lease_domain::Scope::parse(&scope)
                        .map_err(|e| RequestError::Flag(format!("--scope: {e}")))?,
                ),
                KeysCommand::List => KeysRequest::List,
                KeysCommand::Revoke { id } => KeysRequest::Revoke(
                    lease_domain::KeyId::new(id).map_err(|e| RequestError::Flag(e.to_string()))?,
                ),
            }),
            Command::Work {
                queue,
                owner,
                ttl,
                concurrency,
                max_jobs,
                exit_when_empty,
                grace,
                drain,
                metrics,
                no_schedules,
                schedule_recheck,
                command,
            } => {
                let seconds =
                    |flag: &str, value: f64| duration_flag(flag, value).map_err(RequestError::Flag);
                if concurrency == 0 {
                    return Err(RequestError::Read("concurrency must be at least 1".into()));
                }
                Request::Work(WorkRequest {
                    queue: QueueName::new(queue)?,
                    owner: Owner::new(owner)?,
                    ttl: lease_domain::Ttl::new(ttl)?,
                    concurrency,
                    max_jobs,
                    exit_when_empty,
                    grace: seconds("--grace", grace)?,
                    drain: seconds("--drain", drain)?,
                    metrics,
                    schedules: !no_schedules,
                    schedule_recheck: seconds("--schedule-recheck", schedule_recheck)?
                        .max(std::time::Duration::from_millis(10)),
                    command,
                })
            }
            Command::Enqueue { job, spec, payload } => {
                let payload = match (payload.payload, payload.payload_file) {
                    (Some(text), _) => Some(text.into_bytes()),
                    (None, Some(path)) => Some(
                        read(&path, Payload::DEFAULT_LIMIT)
                            .map_err(|e| RequestError::Read(format!("--payload-file: {e}")))?,
                    ),
                    (None, None) => None,
                };
                let payload = payload
                    .map(|bytes| Payload::new(bytes, Payload::DEFAULT_LIMIT))
                    .transpose()?;
                let spec = spec.into_spec(payload, clock())?;
                Request::Enqueue(JobId::new(job)?, spec)
            }
            Command::EnqueueMany { spec, json_lines } => {
                let defaults = spec.into_spec(None, clock())?;
                let input = read(std::path::Path::new("-"), BATCH_INPUT_LIMIT)
                    .map_err(RequestError::Read)?;
                Request::EnqueueMany(crate::batch::parse(&input, &defaults, json_lines)?)
            }
            Command::State { job, now } => {
                Request::State(JobId::new(job)?, Timestamp::new(now.unwrap_or_else(clock))?)
            }
            Command::ClaimNext {
                queue,
                owner,
                window,
                limit,
            } => Request::ClaimNext(
                QueueName::new(queue)?,
                Owner::new(owner)?,
                window.term(clock)?,
                limit,
            ),
            Command::Fail {
                job,
                holder,
                error,
                now,
                no_retry,
            } => {
                let (owner, fence) = holder.check()?;
                let retry = if no_retry {
                    Retry::No
                } else {
                    Retry::default()
                };
                Request::Fail(
                    JobId::new(job)?,
                    owner,
                    fence,
                    Timestamp::new(now.unwrap_or_else(clock))?,
                    ErrorText::new(error)?,
                    retry,
                )
            }
            Command::Cancel { job, now } => {
                Request::Cancel(JobId::new(job)?, Timestamp::new(now.unwrap_or_else(clock))?)
            }
            Command::Retry { job, now } => {
                Request::Retry(JobId::new(job)?, Timestamp::new(now.unwrap_or_else(clock))?)
            }
            Command::List {
                queue,
                status,
                limit,
                after,
                now,
            } => Request::List(lease_ports::ListFilter {
                queue: queue.map(QueueName::new).transpose()?,
                status: status.as_deref().map(Status::parse).transpose()?,
                limit,
                after: after.map(JobId::new).transpose()?,
                now: Timestamp::new(now.unwrap_or_else(clock))?,
            }),
            Command::Stats { now, prometheus } => {
                Request::Stats(Timestamp::new(now.unwrap_or_else(clock))?, prometheus)
            }
            Command::Audit { job, since, limit } => {
                Request::Audit(lease_ports::audit::AuditFilter {
                    job: job.map(JobId::new).transpose()?,
                    since: since.map(|t| time_flag("--since", t)).transpose()?,
                    limit,
                })
            }
            Command::Purge { before, statuses } => {
                let statuses = if statuses.is_empty() {
                    vec![Status::Done, Status::Dead, Status::Cancelled]
                } else {
                    statuses
                        .iter()
                        .map(|s| match Status::parse(s)? {
                            status if status.is_finished() => Ok(status),
                            _ => Err(InputError::UnknownStatus(format!(
                                "{s} (purge takes done, dead or cancelled)"
                            ))),
                        })
                        .collect::<Result<_, _>>()?
                };
                Request::Purge(time_flag("--before", before)?, statuses)
            }
            Command::Claim { job, owner, window } => {
                Request::Claim(JobId::new(job)?, Owner::new(owner)?, window.term(clock)?)
            }
            Command::Renew {
                job,
                holder,
                window,
            } => {
                let (owner, fence) = holder.check()?;
                Request::Renew(JobId::new(job)?, owner, fence, window.term(clock)?)
            }
            Command::Complete {
                job,
                holder,
                now,
                result,
            } => {
                let (owner, fence) = holder.check()?;
                let now = Timestamp::new(now.unwrap_or_else(clock))?;
                let text = match (result.result, result.result_file) {
                    (Some(text), _) => text,
                    (None, Some(path)) => {
                        let bytes = read(&path, RESULT_FILE_LIMIT).map_err(RequestError::Read)?;
                        String::from_utf8(bytes).map_err(|e| {
                            RequestError::Read(format!(
                                "result file {} is not UTF-8 text: {e}",
                                path.display()
                            ))
                        })?
                    }
                    (None, None) => {
                        return Err(RequestError::Read("give --result or --result-file".into()));
                    }
                };
                Request::Complete(JobId::new(job)?, owner, fence, now, JobResult::new(text)?)
            }
            Command::Release { job, holder } => {
                let (owner, fence) = holder.check()?;
                Request::Release(JobId::new(job)?, owner, fence)
            }
            Command::ClaimMany {
                job,
                owners,
                window,
            } => Request::ClaimMany(
                JobId::new(job)?,
                owners
                    .into_iter()
                    .map(Owner::new)
                    .collect::<Result<_, _>>()?,
                window.term(clock)?,
            ),
        })
    }
}

/// Checks a `lease guard` command; the value comes from --value, --file or standard input.
fn guard_request(command: GuardCommand, read: ReadInput<'_>) -> Result<GuardRequest, RequestError> {
    use lease_guard::value::{GuardKey, PutOptions};
    let key = |key: String| GuardKey::new(key).map_err(|e| RequestError::Flag(format!("KEY: {e}")));
    let fence = |fence: u64| {
        Fence::new(fence).map_err(|e| RequestError::Flag(format!("--fence (or LEASE_FENCE): {e}")))
    };
    Ok(match command {
        GuardCommand::Install { url } => GuardRequest::Install(url),
        GuardCommand::Put {
            url,
            key: k,
            value,
            file,
            job,
            fence: f,
            expiry,
        } => {
            let key = key(k)?;
            let fence = fence(f)?;
            let expiry = expiry
                .map(|seconds| {
                    duration_flag("--expiry", seconds)
                        .and_then(|d| {
                            if d.is_zero() {
                                Err("--expiry must be more than 0 seconds".to_owned())
                            } else {
                                Ok(d)
                            }
                        })
                        .map_err(RequestError::Flag)
                })
                .transpose()?;
            let value = match (value, file) {
                (Some(text), _) => text.into_bytes(),
                (None, path) => read(
                    path.as_deref().unwrap_or(std::path::Path::new("-")),
                    BATCH_INPUT_LIMIT,
                )
                .map_err(RequestError::Read)?,
            };
            GuardRequest::Put {
                url,
                key,
                value,
                fence,
                options: PutOptions { job, expiry },
            }
        }
        GuardCommand::Get { url, key: k } => GuardRequest::Get(url, key(k)?),
        GuardCommand::Delete {
            url,
            key: k,
            job,
            fence: f,
        } => GuardRequest::Delete(url, key(k)?, fence(f)?, job),
    })
}
