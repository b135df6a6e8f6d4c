//! The command line: clap definitions, and their conversion into checked requests.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use lease_domain::{Fence, InputError, JobId, JobResult, LeaseTerm, Owner, Timestamp};

/// Fenced job leases on an embedded SQLite database: a stalled worker can never overwrite the
/// result of the worker that took over.
#[derive(Debug, Parser)]
#[command(name = "lease", version, about)]
pub struct Cli {
    /// The database file [env: LEASE_DB] [default: lease.db].
    #[arg(long, global = true)]
    pub db: Option<PathBuf>,
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
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The lease-holder's identity and token, shared by renew, complete and release.
#[derive(Debug, clap::Args)]
pub struct Holder {
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
pub struct ResultSource {
    /// The result to store.
    #[arg(long, allow_hyphen_values = true)]
    pub result: Option<String>,
    /// Read the result to store from this file (`-` for standard input); it must be UTF-8 text.
    #[arg(long, value_name = "PATH")]
    pub result_file: Option<PathBuf>,
}

/// Reads a named input (a result file) for [`Command::into_request`]; `main` provides it, so
/// that only `main` touches the file system and standard input.
pub type ReadInput<'a> = &'a dyn Fn(&std::path::Path) -> Result<String, String>;

/// Why a command could not be turned into a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    /// A value was invalid.
    #[error("invalid input: {0}")]
    Input(#[from] InputError),
    /// An input could not be read.
    #[error("{0}")]
    Read(String),
}

/// The time window of a claim or renewal.
#[derive(Debug, clap::Args)]
pub struct Window {
    /// The current time in seconds (default: the system clock, Unix seconds).
    #[arg(long, allow_hyphen_values = true)]
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
pub enum Command {
    /// Create the database (idempotent; never overwrites a file).
    Init,
    /// Add a job in the default state; an existing job is left as it is.
    Enqueue {
        /// The job id.
        job: String,
    },
    /// Show a job's stored row.
    State {
        /// The job id.
        job: String,
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
        /// The current time in seconds (default: the system clock).
        #[arg(long, allow_hyphen_values = true)]
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
    /// Replay the stale-worker story on a temporary database, step by step.
    Demo,
}

/// A command whose inputs passed every check.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Create or check the database.
    Init,
    /// Enqueue a job.
    Enqueue(JobId),
    /// Read a job.
    State(JobId),
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
}

impl Command {
    /// Checks every value; `clock` is read only when a command needs `now` and none was given,
    /// and `read` only for a result file.
    ///
    /// # Errors
    /// The first [`InputError`], which names the bad value, or a file that cannot be read.
    pub fn into_request(
        self,
        clock: impl FnOnce() -> f64,
        read: ReadInput<'_>,
    ) -> Result<Request, RequestError> {
        Ok(match self {
            Command::Init => Request::Init,
            Command::Demo => Request::Demo,
            Command::Enqueue { job } => Request::Enqueue(JobId::new(job)?),
            Command::State { job } => Request::State(JobId::new(job)?),
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
                    (None, Some(path)) => read(&path).map_err(RequestError::Read)?,
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
