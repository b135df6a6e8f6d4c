//! The leases' commands: `claim`, `claim-many`, `claim-next`, and a holder's `renew`,
//! `progress`, `complete`, `release` and `fail`, each parsed, checked into its request and run.

use lease_ports::control::Controlled;
use lease_ports::{LeaseStore, StoreError};
use serde_json::json;

use crate::render::{
    Report, claim_refusal, escape_controls, lease_json, write_refusal, write_report,
};
use crate::when;

use crate::args::RESULT_FILE_LIMIT;

use lease_domain::{
    ErrorText, Fence, JobId, JobResult, LeaseTerm, Owner, ProgressText, QueueName, Renewal, Retry,
    Timestamp,
};

use crate::args::{Holder, ReadInput, RequestError, ResultSource, Window};

/// A checked request of the leases' commands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LeasesRequest {
    /// Lease the next jobs of a queue.
    ClaimNext(QueueName, Owner, LeaseTerm, usize),
    /// Report a failure.
    Fail(JobId, Owner, Fence, Timestamp, ErrorText, Retry),
    /// Claim a job.
    Claim(JobId, Owner, LeaseTerm),
    /// Renew a lease.
    Renew(JobId, Owner, Fence, LeaseTerm),
    /// Complete a job.
    Complete(JobId, Owner, Fence, Timestamp, JobResult),
    /// Release a lease (`true`: one whose job never started, its attempt given back).
    Release(JobId, Owner, Fence, bool),
    /// Race claims.
    ClaimMany(JobId, Vec<Owner>, LeaseTerm),
    /// Store a holder's progress, renewing the lease or keeping its end.
    Progress(JobId, Owner, Fence, Renewal, ProgressText),
    /// Hold the job's group until a time, as its lease's holder (now, until).
    HoldGroup(JobId, Owner, Fence, Timestamp, Timestamp),
    /// Keep a checkpoint, as the job's lease holder.
    Checkpoint(JobId, Owner, Fence, Timestamp, lease_domain::Checkpoint),
}

impl LeasesRequest {
    /// The time the request is judged at, when it carries one.
    pub(crate) fn now(&self) -> Option<Timestamp> {
        match self {
            Self::Fail(_, _, _, now, _, _) | Self::Complete(_, _, _, now, _) => Some(*now),
            Self::ClaimNext(_, _, term, _)
            | Self::Claim(_, _, term)
            | Self::Renew(_, _, _, term)
            | Self::ClaimMany(_, _, term) => Some(term.now()),
            Self::Progress(_, _, _, renewal, _) => Some(renewal.now()),
            Self::HoldGroup(_, _, _, now, _) | Self::Checkpoint(_, _, _, now, _) => Some(*now),
            Self::Release(..) => None,
        }
    }
}

/// The arguments of `lease claim-next`.
#[derive(Debug, clap::Args)]
pub(crate) struct ClaimNextArgs {
    /// The queue.
    #[arg(long, default_value = QueueName::DEFAULT)]
    pub(crate) queue: String,
    /// The worker asking.
    #[arg(long)]
    pub(crate) owner: String,
    #[command(flatten)]
    pub(crate) window: Window,
    /// The most leases to take.
    #[arg(long, default_value_t = 1)]
    pub(crate) limit: usize,
}

impl ClaimNextArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<LeasesRequest, RequestError> {
        let ClaimNextArgs {
            queue,
            owner,
            window,
            limit,
        } = self;
        Ok(LeasesRequest::ClaimNext(
            QueueName::new(queue)?,
            Owner::new(owner)?,
            window.term(clock)?,
            limit,
        ))
    }
}

/// The arguments of `lease fail`.
#[derive(Debug, clap::Args)]
pub(crate) struct FailArgs {
    /// The job id.
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) holder: Holder,
    /// What went wrong (kept with the job).
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) error: String,
    /// The current time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) now: Option<f64>,
    /// Dead at once, whatever attempts remain.
    #[arg(long)]
    pub(crate) no_retry: bool,
}

impl FailArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<LeasesRequest, RequestError> {
        let FailArgs {
            job,
            holder,
            error,
            now,
            no_retry,
        } = self;
        let (owner, fence) = holder.check()?;
        let retry = if no_retry {
            Retry::No
        } else {
            Retry::default()
        };
        Ok(LeasesRequest::Fail(
            JobId::new(job)?,
            owner,
            fence,
            Timestamp::new(now.unwrap_or_else(clock))?,
            ErrorText::new(error)?,
            retry,
        ))
    }
}

/// The arguments of `lease claim`.
#[derive(Debug, clap::Args)]
pub(crate) struct ClaimArgs {
    /// The job id.
    pub(crate) job: String,
    /// The worker asking for the lease.
    #[arg(long)]
    pub(crate) owner: String,
    #[command(flatten)]
    pub(crate) window: Window,
}

impl ClaimArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<LeasesRequest, RequestError> {
        let ClaimArgs { job, owner, window } = self;
        Ok(LeasesRequest::Claim(
            JobId::new(job)?,
            Owner::new(owner)?,
            window.term(clock)?,
        ))
    }
}

/// The arguments of `lease renew`.
#[derive(Debug, clap::Args)]
pub(crate) struct RenewArgs {
    /// The job id.
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) holder: Holder,
    #[command(flatten)]
    pub(crate) window: Window,
}

impl RenewArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<LeasesRequest, RequestError> {
        let RenewArgs {
            job,
            holder,
            window,
        } = self;
        let (owner, fence) = holder.check()?;
        Ok(LeasesRequest::Renew(
            JobId::new(job)?,
            owner,
            fence,
            window.term(clock)?,
        ))
    }
}

/// The arguments of `lease complete`.
#[derive(Debug, clap::Args)]
pub(crate) struct CompleteArgs {
    /// The job id.
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) holder: Holder,
    /// The current time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) now: Option<f64>,
    #[command(flatten)]
    pub(crate) result: ResultSource,
}

impl CompleteArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
        read: ReadInput<'_>,
    ) -> Result<LeasesRequest, RequestError> {
        let CompleteArgs {
            job,
            holder,
            now,
            result,
        } = self;
        let (owner, fence) = holder.check()?;
        let now = Timestamp::new(now.unwrap_or_else(clock))?;
        let text = text_or_file(result.result, result.result_file, read, "result")?;
        Ok(LeasesRequest::Complete(
            JobId::new(job)?,
            owner,
            fence,
            now,
            JobResult::new(text)?,
        ))
    }
}

/// Text given on the command line or read from a file (`-`: standard input), at most
/// [`RESULT_FILE_LIMIT`] bytes of UTF-8; `what` names it (`result`, `value`) and its flags
/// (`--result`, `--result-file`).
fn text_or_file(
    text: Option<String>,
    file: Option<std::path::PathBuf>,
    read: ReadInput<'_>,
    what: &str,
) -> Result<String, RequestError> {
    match (text, file) {
        (Some(text), _) => Ok(text),
        (None, Some(path)) => {
            let bytes = read(&path, RESULT_FILE_LIMIT).map_err(RequestError::Read)?;
            String::from_utf8(bytes).map_err(|e| {
                RequestError::Read(format!(
                    "{what} file {} is not UTF-8 text: {e}",
                    path.display()
                ))
            })
        }
        (None, None) => Err(RequestError::Read(format!(
            "give --{what} or --{what}-file"
        ))),
    }
}

/// The arguments of `lease checkpoint`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckpointArgs {
    /// The job id.
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) holder: Holder,
    /// The step's name: 1 to 256 bytes, no NUL. Writing a name again replaces its value.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) value: ValueSource,
    /// The current time (Unix seconds or RFC 3339); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) now: Option<f64>,
}

/// Where `checkpoint` takes its value from: the command line, or a file (`-`: standard
/// input).
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub(crate) struct ValueSource {
    /// What the step produced.
    #[arg(long, allow_hyphen_values = true)]
    pub value: Option<String>,
    /// Read the value from this file (`-` for standard input); it must be UTF-8 text.
    #[arg(long, value_name = "PATH")]
    pub value_file: Option<std::path::PathBuf>,
}

impl CheckpointArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
        read: ReadInput<'_>,
    ) -> Result<LeasesRequest, RequestError> {
        let (owner, fence) = self.holder.check()?;
        let now = Timestamp::new(self.now.unwrap_or_else(clock))?;
        let name = lease_domain::CheckpointName::new(self.name)
            .map_err(lease_domain::InputError::Workflow)?;
        let value = text_or_file(self.value.value, self.value.value_file, read, "value")?;
        let checkpoint = lease_domain::Checkpoint {
            name,
            value: lease_domain::CheckpointValue::new(value)?,
        };
        Ok(LeasesRequest::Checkpoint(
            JobId::new(self.job)?,
            owner,
            fence,
            now,
            checkpoint,
        ))
    }
}

/// The arguments of `lease release`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReleaseArgs {
    /// The job id.
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) holder: Holder,
    /// The job was never started: give back the attempt the claim counted too.
    #[arg(long)]
    pub(crate) unstarted: bool,
}

impl ReleaseArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(self) -> Result<LeasesRequest, RequestError> {
        let ReleaseArgs {
            job,
            holder,
            unstarted,
        } = self;
        let (owner, fence) = holder.check()?;
        Ok(LeasesRequest::Release(
            JobId::new(job)?,
            owner,
            fence,
            unstarted,
        ))
    }
}

/// The arguments of `lease claim-many`.
#[derive(Debug, clap::Args)]
pub(crate) struct ClaimManyArgs {
    /// The job id.
    pub(crate) job: String,
    /// An owner (repeat for each).
    #[arg(long = "owner", required = true)]
    pub(crate) owners: Vec<String>,
    #[command(flatten)]
    pub(crate) window: Window,
}

impl ClaimManyArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<LeasesRequest, RequestError> {
        let ClaimManyArgs {
            job,
            owners,
            window,
        } = self;
        Ok(LeasesRequest::ClaimMany(
            JobId::new(job)?,
            owners
                .into_iter()
                .map(Owner::new)
                .collect::<Result<_, _>>()?,
            window.term(clock)?,
        ))
    }
}

/// The arguments of `lease progress`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProgressArgs {
    /// The job id.
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) holder: Holder,
    /// The progress, such as "12 of 40 files".
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) value: String,
    /// The current time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) now: Option<f64>,
    /// Renew the lease for this many seconds from now (> 0); without it the lease keeps its end.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) ttl: Option<f64>,
}

impl ProgressArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<LeasesRequest, RequestError> {
        let ProgressArgs {
            job,
            holder,
            value,
            now,
            ttl,
        } = self;
        let now = now.unwrap_or_else(clock);
        let renewal = match ttl {
            Some(ttl) => Renewal::Renew(LeaseTerm::new(now, ttl)?),
            None => Renewal::Keep(Timestamp::new(now)?),
        };
        let (owner, fence) = holder.check()?;
        Ok(LeasesRequest::Progress(
            JobId::new(job)?,
            owner,
            fence,
            renewal,
            ProgressText::new(value)?,
        ))
    }
}

/// The arguments of `lease hold-group`.
#[derive(Debug, clap::Args)]
pub(crate) struct HoldGroupArgs {
    /// The job id.
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) holder: Holder,
    /// Until when the group is held (Unix seconds or RFC 3339, such as the time an upstream's
    /// Retry-After names).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) until: f64,
    /// The current time (Unix seconds or RFC 3339); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) now: Option<f64>,
}

impl HoldGroupArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
    ) -> Result<LeasesRequest, RequestError> {
        let (owner, fence) = self.holder.check()?;
        let now = Timestamp::new(self.now.unwrap_or_else(clock))?;
        let until =
            Timestamp::new(self.until).map_err(|e| RequestError::Flag(format!("--until: {e}")))?;
        Ok(LeasesRequest::HoldGroup(
            JobId::new(self.job)?,
            owner,
            fence,
            now,
            until,
        ))
    }
}

/// The stored `until` of a lease just granted or renewed (in store-clock mode it is the
/// store's, not the caller's `now + ttl`); `None` if the lease has moved on meanwhile or the
/// read failed (the write itself stands).
async fn stored_until(store: &dyn LeaseStore, id: &JobId, fence: Fence) -> Option<Timestamp> {
    match store.record(id).await {
        Ok(Some(record)) if record.job.fence == fence => Some(record.job.until),
        _ => None,
    }
}

/// Runs a checked request of this family against the store and builds its report.
///
/// # Errors
/// The store's error; nothing is printed here.
pub(crate) async fn execute(
    request: &LeasesRequest,
    store: &dyn Controlled,
    _now: Timestamp,
) -> Result<Report, StoreError> {
    Ok(match request {
        LeasesRequest::ClaimNext(queue, owner, term, limit) => {
            claim_next(store, queue, owner, *term, *limit).await?
        }
        LeasesRequest::Fail(id, owner, fence, failed_at, error, retry) => {
            fail(store, id, owner, *fence, *failed_at, error, *retry).await?
        }
        LeasesRequest::Claim(id, owner, term) => match store.claim(id, owner, *term).await? {
            Ok(fence) => Report::new(
                true,
                json!({"fence": fence.get()}),
                format!(
                    "claimed job {id} for {owner}: fence {fence}, lease until {}",
                    when::shown(
                        stored_until(store, id, fence)
                            .await
                            .unwrap_or(term.until())
                            .get(),
                        term.now().get()
                    )
                ),
            ),
            Err(refused) => Report::new(
                false,
                json!({"fence": null}),
                format!("not claimed: {}", claim_refusal(&refused, term.now())),
            ),
        },
        LeasesRequest::Renew(id, owner, fence, term) => {
            let mut report = write_report(
                store.renew(id, owner, *fence, *term).await?,
                "renewed",
                id,
                owner,
                *fence,
            );
            if report.accepted {
                let until = stored_until(store, id, *fence)
                    .await
                    .unwrap_or(term.until());
                report.human.push_str(&format!(
                    " until {}",
                    when::shown(until.get(), term.now().get())
                ));
            }
            report
        }
        LeasesRequest::Complete(id, owner, fence, now, result) => write_report(
            store.complete(id, owner, *fence, *now, result).await?,
            "completed",
            id,
            owner,
            *fence,
        ),
        LeasesRequest::Release(id, owner, fence, unstarted) => write_report(
            if *unstarted {
                store.give_back(id, owner, *fence).await?
            } else {
                store.release(id, owner, *fence).await?
            },
            "released",
            id,
            owner,
            *fence,
        ),
        LeasesRequest::ClaimMany(id, owners, term) => claim_many(store, id, owners, *term).await?,
        LeasesRequest::Progress(id, owner, fence, renewal, text) => {
            progress(store, id, owner, *fence, *renewal, text).await?
        }
        LeasesRequest::Checkpoint(id, owner, fence, now, checkpoint) => {
            match store
                .checkpoint(id, owner, *fence, *now, checkpoint)
                .await?
            {
                Ok(()) => Report::new(
                    true,
                    json!({"ok": true}),
                    format!(
                        "kept checkpoint {} of job {} for {} (fence {fence})",
                        escape_controls(checkpoint.name.as_str()),
                        escape_controls(id.as_str()),
                        escape_controls(owner.as_str()),
                    ),
                ),
                Err(refused) => {
                    let why = write_refusal(&refused);
                    Report::new(
                        false,
                        json!({"ok": false}),
                        format!("checkpoint not kept: {why}"),
                    )
                    .refused_with(Some(why))
                }
            }
        }
        LeasesRequest::HoldGroup(id, owner, fence, now, until) => {
            match store.hold_group(id, owner, *fence, *now, *until).await? {
                Ok(()) => Report::new(
                    true,
                    json!({"ok": true, "until": until.get()}),
                    format!(
                        "held the group of job {} until {} (fence {fence})",
                        escape_controls(id.as_str()),
                        when::shown(until.get(), now.get())
                    ),
                ),
                Err(refused) => {
                    let why = write_refusal(&refused);
                    Report::new(
                        false,
                        json!({"ok": false}),
                        format!("group not held: {why}"),
                    )
                    .refused_with(Some(why))
                }
            }
        }
    })
}

/// Races one claim of `id` per owner and reports which won.
async fn claim_many(
    store: &dyn Controlled,
    id: &JobId,
    owners: &[Owner],
    term: LeaseTerm,
) -> Result<Report, StoreError> {
    let mut fences = Vec::with_capacity(owners.len());
    let mut first_refusal = None;
    for outcome in lease_ports::claim_many(store, id, owners, term).await {
        match outcome? {
            Ok(fence) => fences.push(Some(fence.get())),
            Err(refused) => {
                first_refusal.get_or_insert(refused);
                fences.push(None);
            }
        }
    }
    let winners: Vec<String> = owners
        .iter()
        .zip(&fences)
        .filter_map(|(owner, fence)| fence.map(|f| format!("{owner} (fence {f})")))
        .collect();
    let human = match (winners.is_empty(), first_refusal) {
        (true, Some(refused)) => format!(
            "nobody claimed job {id}: {}",
            claim_refusal(&refused, term.now())
        ),
        (true, None) => format!("nobody claimed job {id}"),
        (false, _) => format!(
            "claimed job {id}: {}; {} other claim(s) refused",
            winners.join(", "),
            owners.len() - winners.len()
        ),
    };
    Ok(Report::new(
        !winners.is_empty(),
        json!({"fences": fences}),
        human,
    ))
}

/// Stores a holder's progress and reports it.
async fn progress(
    store: &dyn Controlled,
    id: &JobId,
    owner: &Owner,
    fence: Fence,
    renewal: Renewal,
    text: &ProgressText,
) -> Result<Report, StoreError> {
    Ok(
        match store.progress(id, owner, fence, renewal, text).await? {
            Ok(()) => {
                let stored = format!(
                    "stored the progress of job {} for {} (fence {fence})",
                    escape_controls(id.as_str()),
                    escape_controls(owner.as_str()),
                );
                match renewal.term() {
                    Some(term) => Report::new(
                        true,
                        json!({"ok": true, "until": term.until().get()}),
                        format!(
                            "{stored}; lease renewed until {}",
                            when::shown(term.until().get(), term.now().get())
                        ),
                    ),
                    None => Report::new(
                        true,
                        json!({"ok": true}),
                        format!("{stored}; the lease keeps its end"),
                    ),
                }
            }
            Err(refused) => {
                let why = write_refusal(&refused);
                Report::new(
                    false,
                    json!({"ok": false}),
                    format!("progress not stored: {why}"),
                )
                .refused_with(Some(why))
            }
        },
    )
}

/// Leases the next due jobs of `queue`, saying until when a rate holds it back when none is.
async fn claim_next(
    store: &dyn Controlled,
    queue: &lease_domain::QueueName,
    owner: &lease_domain::Owner,
    term: lease_domain::LeaseTerm,
    limit: usize,
) -> Result<Report, StoreError> {
    let leases = store.claim_next(queue, owner, term, limit).await?;
    // Nothing granted: a rate may be why, and says until when.
    let throttled = if leases.is_empty() {
        store.throttle(queue, term.now()).await?.opens_at()
    } else {
        None
    };
    let human = if let Some(at) = throttled {
        format!(
            "nothing leased from queue {queue}: its rate lets the next lease at {}",
            when::shown(at.get(), term.now().get())
        )
    } else if leases.is_empty() {
        format!("no due job in queue {queue}")
    } else {
        let taken: Vec<String> = leases
            .iter()
            .map(|l| format!("{} (fence {}, attempt {})", l.job, l.fence, l.attempt))
            .collect();
        // The stored until, by the clock that decided (the store's in store-clock
        // mode), not the caller's now + ttl.
        format!(
            "leased to {owner} until {}: {}",
            when::shown(leases[0].until.get(), leases[0].now.get()),
            taken.join(", ")
        )
    };
    let mut json = json!({"leases": leases.iter().map(lease_json).collect::<Vec<_>>()});
    if let Some(at) = throttled {
        json["throttled_until"] = json!(at.get());
    }
    Ok(Report::new(!leases.is_empty(), json, human))
}

/// A holder's failure of its attempt, saying when the job is retried or that it is dead.
async fn fail(
    store: &dyn Controlled,
    id: &lease_domain::JobId,
    owner: &lease_domain::Owner,
    fence: lease_domain::Fence,
    failed_at: Timestamp,
    error: &lease_domain::ErrorText,
    retry: lease_domain::Retry,
) -> Result<Report, StoreError> {
    Ok(
        match store
            .fail(id, owner, fence, failed_at, error, retry)
            .await?
        {
            Ok(failed) => {
                let run_at = failed.run_at.map(Timestamp::get);
                let human = match failed.run_at {
                    Some(at) => format!(
                        "job {id} failed; it will be retried at {}",
                        when::shown(at.get(), failed_at.get())
                    ),
                    None => format!("job {id} failed and is dead"),
                };
                Report::new(
                    true,
                    json!({"ok": true, "state": failed.status.as_str(), "run_at": run_at}),
                    human,
                )
            }
            Err(refused) => {
                let why = crate::render::write_refusal(&refused);
                Report::new(
                    false,
                    json!({"ok": false, "state": null, "run_at": null}),
                    format!("not failed: {why}"),
                )
                .refused_with(Some(why))
            }
        },
    )
}
