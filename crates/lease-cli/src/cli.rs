//! The command line: clap definitions, and their conversion into checked requests.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use lease_domain::{
    EnqueueSpec, Fence, InputError, LeaseTerm, Owner, Payload, QueueName, Timestamp, Ttl,
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
/// [`Command::into_request`]; `main` provides it, so that only `main` touches the file system
/// and standard input.
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
}

impl SpecFlags {
    /// The checked spec, with `payload`, enqueued at `now`.
    pub(crate) fn into_spec(
        self,
        payload: Option<Payload>,
        now: f64,
    ) -> Result<EnqueueSpec, RequestError> {
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
    Enqueue(crate::jobs::EnqueueArgs),
    /// Enqueue many jobs read from standard input, in transactions of up to 1,000: one job id
    /// per line, or with --json-lines one JSON object per line (`id`, and any of `queue`,
    /// `priority`, `run_at`, `max_attempts`, `payload`; the flags give what a line leaves out).
    /// Every line is checked before anything is stored.
    EnqueueMany(crate::jobs::EnqueueManyArgs),
    /// Lease up to --limit due jobs of a queue: highest priority, then earliest run-at, then FIFO.
    ClaimNext(crate::leases::ClaimNextArgs),
    /// Report a failure of the live current lease: retried after a backoff while attempts
    /// remain, else dead.
    Fail(crate::leases::FailArgs),
    /// Cancel a pending or running job; its holder's later writes are refused.
    Cancel(crate::jobs::CancelArgs),
    /// Put a dead or cancelled job back to pending with fresh attempts (its fence goes on).
    Retry(crate::jobs::RetryArgs),
    /// List jobs, in id order.
    List(crate::jobs::ListArgs),
    /// Count jobs per queue and status.
    Stats(crate::jobs::StatsArgs),
    /// Show the audit trail of refused holder writes (recorded by stores opened with --audit).
    Audit(crate::jobs::AuditArgs),
    /// Delete finished jobs last changed before --before; a purged id never gets an old fence.
    Purge(crate::jobs::PurgeArgs),
    /// Show a job's stored row, with its queue fields and its status at --now.
    State(crate::jobs::StateArgs),
    /// Take the job's lease if it is free or expired; prints the new fence.
    Claim(crate::leases::ClaimArgs),
    /// Extend the live current lease.
    Renew(crate::leases::RenewArgs),
    /// Store the result of the live current lease and mark the job done.
    Complete(crate::leases::CompleteArgs),
    /// Give the lease back; the fence is kept.
    Release(crate::leases::ReleaseArgs),
    /// Race one claim per owner, concurrently; prints each owner's fence or null.
    ClaimMany(crate::leases::ClaimManyArgs),
    /// Pause a queue: claims lease none of its jobs (waiting claims wait) until it is resumed
    /// or --until passes; enqueueing goes on, and running leases are untouched.
    Pause(crate::control::PauseArgs),
    /// Resume a paused queue.
    Resume(crate::control::ResumeArgs),
    /// Set a queue's limits: at most --concurrency live leases at once across every worker
    /// (decided in each claim's own transaction; 0 removes the limit), and the --timeout of
    /// its jobs that name none.
    Limit(crate::control::LimitArgs),
    /// Store a running job's progress (a short text, up to 1,024 bytes) under its lease's
    /// fence; with --ttl the lease is renewed for that long, without it the lease keeps its
    /// end. Refused like a renewal for a stale or expired holder.
    Progress(crate::leases::ProgressArgs),
    /// Periodic schedules: each tick of a cron expression enqueues one job.
    Schedule(crate::control::ScheduleArgs),
    /// Replay the stale-worker story on a temporary database, step by step.
    Demo,
    /// Serve the work queue over HTTP: workers then need only a URL and an API key, never the
    /// database. Without any API key in the store it listens on loopback only.
    Serve(crate::serve::ServeArgs),
    /// Write to, read from and set up the resources a worker writes its results to, under its
    /// fence: Redis, S3 (and GCS, Azure), a directory, NATS key-value, MariaDB / MySQL.
    /// A stale holder's write is refused (exit 3) and the newer value stands.
    Guard(crate::guard::GuardArgs),
    /// Make, list and revoke the API keys of `lease serve` (kept in the store as digests).
    Keys(crate::serve::KeysArgs),
    /// Run a program for each job of a queue: the payload on its stdin; LEASE_JOB, LEASE_FENCE
    /// and LEASE_ATTEMPT in its environment; exit 0 completes the job with its stdout, another
    /// exit fails it (stderr's last lines are the error). If the lease is lost or the job
    /// cancelled, the program gets SIGTERM, then SIGKILL after --grace, and nothing is written.
    /// Ctrl-C stops claiming, lets running jobs finish for --drain, then releases the rest.
    Work(crate::work::WorkArgs),
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
    /// Show the audit trail.
    Audit(lease_ports::audit::AuditFilter),
    /// A job's command: enqueue, read, list, count, purge, cancel, retry.
    Jobs(crate::jobs::JobsRequest),
    /// A lease's command: claims, and a holder's writes.
    Leases(crate::leases::LeasesRequest),
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
    /// Pause, resume or limit a queue, or work with schedules.
    Control(crate::control::ControlRequest),
}

impl Request {
    /// The time the request is judged at, when it carries one (its `--now`, or the clock read
    /// for it).
    pub(crate) fn now(&self) -> Option<Timestamp> {
        match self {
            Self::Jobs(request) => request.now(),
            Self::Leases(request) => request.now(),
            Self::Control(request) => request.now(),
            Self::Init
            | Self::Migrate { .. }
            | Self::Audit(_)
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
            Command::Pause(args) => args.request(clock)?,
            Command::Resume(args) => args.request(clock)?,
            Command::Limit(args) => args.request(clock)?,
            Command::Progress(args) => Request::Leases(args.request(clock)?),
            Command::Schedule(args) => args.request(clock, read)?,
            Command::Serve(args) => args.request(clock)?,
            Command::Guard(args) => args.request(read)?,
            Command::Keys(args) => args.request()?,
            Command::Work(args) => args.request()?,
            Command::Enqueue(args) => Request::Jobs(args.request(clock, read)?),
            Command::EnqueueMany(args) => Request::Jobs(args.request(clock, read)?),
            Command::State(args) => Request::Jobs(args.request(clock)?),
            Command::ClaimNext(args) => Request::Leases(args.request(clock)?),
            Command::Fail(args) => Request::Leases(args.request(clock)?),
            Command::Cancel(args) => Request::Jobs(args.request(clock)?),
            Command::Retry(args) => Request::Jobs(args.request(clock)?),
            Command::List(args) => Request::Jobs(args.request(clock)?),
            Command::Stats(args) => Request::Jobs(args.request(clock)?),
            Command::Audit(args) => args.request()?,
            Command::Purge(args) => Request::Jobs(args.request()?),
            Command::Claim(args) => Request::Leases(args.request(clock)?),
            Command::Renew(args) => Request::Leases(args.request(clock)?),
            Command::Complete(args) => Request::Leases(args.request(clock, read)?),
            Command::Release(args) => Request::Leases(args.request()?),
            Command::ClaimMany(args) => Request::Leases(args.request(clock)?),
        })
    }
}
