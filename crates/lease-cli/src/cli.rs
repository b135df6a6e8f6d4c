//! The command line: clap definitions, and their conversion into checked requests.

use std::path::PathBuf;

use crate::args::{ReadInput, RequestError};
use crate::guard::GuardRequest;
use crate::serve::{KeysRequest, ServeRequest};
use crate::work::WorkRequest;
use clap::{Parser, Subcommand};
use lease_domain::Timestamp;

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
    /// Take a consistent copy of the SQLite store at --db while it goes on serving (SQLite's
    /// online backup API), into a new file; `lease restore` installs it.
    Backup {
        /// The file to write (it must not exist).
        #[arg(long, value_name = "FILE")]
        to: std::path::PathBuf,
    },
    /// Install a backup (made by `lease backup`) as the SQLite store at --db, one epoch above
    /// both the backup's and the replaced store's: every fence it hands out is above every
    /// fence handed out after the backup was taken, which the restore loses. On PostgreSQL a
    /// point-in-time recovery or a promotion starts a new timeline, which the epoch follows.
    Restore {
        /// The backup file.
        #[arg(long, value_name = "FILE")]
        from: std::path::PathBuf,
    },
    /// Show the store's epoch: the high 32 bits of every fence it hands out, raised whenever
    /// its history may have lost writes. --raise raises it by one, after a restore the store
    /// cannot see for itself (a file copied back by hand, a dump loaded into PostgreSQL).
    Epoch {
        /// Raise the epoch by one.
        #[arg(long)]
        raise: bool,
    },
    /// Check the store's group heads (one row per queue and group with ready jobs, which a
    /// claim walks to pass a held group in one step) against its jobs: how many there are and
    /// any group a claim could pass by (none in a sound store; exit 3 when there is one).
    /// --rebuild first rebuilds them from the jobs.
    Heads {
        /// Rebuild the heads from the jobs first.
        #[arg(long)]
        rebuild: bool,
    },
    /// Add a job in the default state; an existing job is left as it is.
    Enqueue(crate::jobs::EnqueueArgs),
    /// Enqueue many jobs read from standard input, in transactions of up to 1,000: one job id
    /// per line, or with --json-lines one JSON object per line, a job as the API's batch
    /// enqueue takes one (`id`, and any of `queue`, `priority`, `run_at`, `max_attempts`,
    /// `payload`, `payload_base64`, `timeout`, `group`, `after`, ...; the flags give what a line
    /// leaves out).
    /// Every line is checked before anything is stored.
    EnqueueMany(crate::jobs::EnqueueManyArgs),
    /// Lease up to --limit due jobs of a queue: highest priority, then earliest run-at, then FIFO.
    ClaimNext(crate::leases::ClaimNextArgs),
    /// Report a failure of the live current lease: retried after a backoff while attempts
    /// remain, else dead.
    Fail(crate::leases::FailArgs),
    /// Cancel a waiting, pending, running or dead job (a dead one keeps its record and error,
    /// and frees its ordered group); its holder's later writes are refused.
    Cancel(crate::jobs::AdminArgs),
    /// Put a dead or cancelled job back to pending with fresh attempts (its fence goes on).
    Retry(crate::jobs::AdminArgs),
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
    /// and at most --per-group of each group (decided in each claim's own transaction; 0
    /// removes a limit), --ordered groups, --fair turns across groups, rates, and the --timeout of its jobs that name none.
    Limit(crate::control::LimitArgs),
    /// Show a queue's busiest groups: each group's waiting and running jobs, and whether it
    /// is paused or throttled now.
    Groups(crate::control::GroupsArgs),
    /// Store a running job's progress (a short text, up to 1,024 bytes) under its lease's
    /// fence; with --ttl the lease is renewed for that long, without it the lease keeps its
    /// end. Refused like a renewal for a stale or expired holder.
    Progress(crate::leases::ProgressArgs),
    /// Hold a running job's group until a time (its upstream answered 429 with a
    /// Retry-After): the queue leases none of the group's jobs until then, as `pause --group
    /// --until` does, but only the job's live lease holder may (refused like a renewal for a
    /// stale or expired holder), so a stalled worker cannot.
    HoldGroup(crate::leases::HoldGroupArgs),
    /// Keep a checkpoint of a running job (a durable step: its name and what it produced)
    /// under its lease's fence: kept across failed attempts, expired leases and retries, so
    /// that the next attempt resumes after it; a name written again is replaced. Refused like
    /// a renewal for a stale or expired holder (exit 3), so a stalled worker cannot overwrite
    /// a newer attempt's step. At most 1,000 names a job.
    Checkpoint(crate::leases::CheckpointArgs),
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
    /// Run a program for each job of a queue: the payload on its stdin; LEASE_JOB, LEASE_FENCE,
    /// LEASE_ATTEMPT (LEASE_GROUP for a job of a group, LEASE_PARENTS_FILE, a JSON file of
    /// its parents' statuses and results, for a job with parents) in its environment; LEASE_PROGRESS
    /// and LEASE_HOLD_GROUP name FIFOs it may write lines to (its progress; seconds to hold its
    /// job's group, as an upstream's Retry-After says); exit 0 completes the job with its stdout, another
    /// exit fails it (stderr's last lines are the error). If the lease is lost or the job
    /// cancelled, the program gets SIGTERM, then SIGKILL after --grace, and nothing is written.
    /// Ctrl-C stops claiming, lets running jobs finish for --drain, then releases the rest.
    Work(crate::work::WorkArgs),
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
    /// Copy a SQLite store into a new file.
    Backup(std::path::PathBuf),
    /// Install a backup as the SQLite store.
    Restore(std::path::PathBuf),
    /// Show the store's epoch, or raise it by one.
    Epoch {
        /// Raise it.
        raise: bool,
    },
    /// Check the group heads, after rebuilding them when set.
    Heads {
        /// Rebuild them first.
        rebuild: bool,
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
            | Self::Backup(_)
            | Self::Restore(_)
            | Self::Epoch { .. }
            | Self::Heads { .. }
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
    /// The first [`lease_domain::InputError`], which names the bad value, or a file that cannot
    /// be read.
    pub(crate) fn into_request(
        self,
        clock: impl FnOnce() -> f64,
        read: ReadInput<'_>,
    ) -> Result<Request, RequestError> {
        Ok(match self {
            Command::Init => Request::Init,
            Command::Migrate { from, to, merge } => Request::Migrate { from, to, merge },
            Command::Backup { to } => Request::Backup(to),
            Command::Restore { from } => Request::Restore(from),
            Command::Epoch { raise } => Request::Epoch { raise },
            Command::Heads { rebuild } => Request::Heads { rebuild },
            Command::Demo => Request::Demo,
            Command::Pause(args) => Request::Control(args.request(clock)?),
            Command::Resume(args) => Request::Control(args.request(clock)?),
            Command::Limit(args) => Request::Control(args.request(clock)?),
            Command::Groups(args) => Request::Control(args.request(clock)?),
            Command::Progress(args) => Request::Leases(args.request(clock)?),
            Command::HoldGroup(args) => Request::Leases(args.request(clock)?),
            Command::Checkpoint(args) => Request::Leases(args.request(clock, read)?),
            Command::Schedule(args) => Request::Control(args.request(clock, read)?),
            Command::Serve(args) => Request::Serve(args.request()?),
            Command::Guard(args) => Request::Guard(args.request(read)?),
            Command::Keys(args) => Request::Keys(args.request()?),
            Command::Work(args) => Request::Work(args.request()?),
            Command::Enqueue(args) => Request::Jobs(args.request(clock, read)?),
            Command::EnqueueMany(args) => Request::Jobs(args.request(clock, read)?),
            Command::State(args) => Request::Jobs(args.request(clock)?),
            Command::ClaimNext(args) => Request::Leases(args.request(clock)?),
            Command::Fail(args) => Request::Leases(args.request(clock)?),
            Command::Cancel(args) => {
                Request::Jobs(args.request(lease_ports::bulk::BulkAction::Cancel, clock)?)
            }
            Command::Retry(args) => {
                Request::Jobs(args.request(lease_ports::bulk::BulkAction::Retry, clock)?)
            }
            Command::List(args) => Request::Jobs(args.request(clock)?),
            Command::Stats(args) => Request::Jobs(args.request(clock)?),
            Command::Audit(args) => Request::Audit(args.request()?),
            Command::Purge(args) => Request::Jobs(args.request()?),
            Command::Claim(args) => Request::Leases(args.request(clock)?),
            Command::Renew(args) => Request::Leases(args.request(clock)?),
            Command::Complete(args) => Request::Leases(args.request(clock, read)?),
            Command::Release(args) => Request::Leases(args.request()?),
            Command::ClaimMany(args) => Request::Leases(args.request(clock)?),
        })
    }
}
