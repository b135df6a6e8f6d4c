//! The command line: clap definitions, and their conversion into checked requests.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use lease_domain::{Fence, InputError, JobId, JobResult, LeaseTerm, Owner, Timestamp};

/// Fenced job leases on an embedded SQLite database: a stalled worker can never overwrite the
/// result of the worker that took over.
#[derive(Debug, Parser)]
#[command(name = "lease", version, about)]
pub struct Cli {
    /// The database file.
    #[arg(long, global = true, env = "LEASE_DB", default_value = "lease.db")]
    pub db: PathBuf,
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
        /// The result to store.
        #[arg(long, allow_hyphen_values = true)]
        result: String,
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
    /// Checks every value; `clock` is read only when a command needs `now` and none was given.
    ///
    /// # Errors
    /// The first [`InputError`], which names the bad value.
    pub fn into_request(self, clock: impl FnOnce() -> f64) -> Result<Request, InputError> {
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
                Request::Complete(JobId::new(job)?, owner, fence, now, JobResult::new(result)?)
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
