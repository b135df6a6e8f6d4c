//! The jobs' commands: `enqueue`, `enqueue-many`, `state`, `list`, `stats`, `audit`, `purge`,
//! `cancel` and `retry`, each parsed, checked into its request and run.

use lease_ports::control::Controlled;
use lease_ports::{JobRecord, StoreError};
use serde_json::{Value, json};

use crate::render::{
    Report, checkpoints_json, escape_controls, parents_json, prometheus, queue_write_report,
    record_json, record_table, state_sentence,
};
use crate::when;

use lease_domain::{EnqueueSpec, InputError, JobId, Payload, QueueName, Status, Timestamp};

use crate::args::{
    BATCH_INPUT_LIMIT, PayloadSource, ReadInput, RequestError, SpecFlags, time_flag,
};

/// A checked request of the jobs' commands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum JobsRequest {
    /// Enqueue a job.
    Enqueue(JobId, EnqueueSpec),
    /// Enqueue many jobs, in transactions of up to [`crate::args::BATCH_JOBS`].
    EnqueueMany(Vec<(JobId, EnqueueSpec)>),
    /// Read a job, judging its status at a time.
    State(JobId, Timestamp),
    /// Cancel a job.
    Cancel(JobId, Timestamp),
    /// Retry a job.
    Retry(JobId, Timestamp),
    /// Retry or cancel every job a filter matches (or, when `true`, only count them).
    Bulk(lease_ports::ListFilter, lease_ports::bulk::BulkAction, bool),
    /// List jobs.
    List(lease_ports::ListFilter),
    /// Count jobs.
    Stats(Timestamp, bool),
    /// Purge finished jobs.
    Purge(Timestamp, Vec<Status>),
}

impl JobsRequest {
    /// The time the request is judged at, when it carries one.
    pub(crate) fn now(&self) -> Option<Timestamp> {
        match self {
            Self::State(_, now)
            | Self::Cancel(_, now)
            | Self::Retry(_, now)
            | Self::Stats(now, _) => Some(*now),
            Self::List(filter) | Self::Bulk(filter, ..) => Some(filter.now),
            Self::Enqueue(..) | Self::EnqueueMany(_) | Self::Purge(..) => None,
        }
    }
}

/// The arguments of `lease enqueue`.
#[derive(Debug, clap::Args)]
pub(crate) struct EnqueueArgs {
    /// The job id.
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) spec: SpecFlags,
    #[command(flatten)]
    pub(crate) payload: PayloadSource,
}

impl EnqueueArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
        read: ReadInput<'_>,
    ) -> Result<JobsRequest, RequestError> {
        let EnqueueArgs { job, spec, payload } = self;
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
        let mut spec = spec.into_spec(payload, clock())?;
        let job = JobId::new(job)?;
        lease_seal::seal_payloads_from_env([(&job, &mut spec.payload)])?;
        Ok(JobsRequest::Enqueue(job, spec))
    }
}

/// The arguments of `lease enqueue-many`.
#[derive(Debug, clap::Args)]
pub(crate) struct EnqueueManyArgs {
    #[command(flatten)]
    pub(crate) spec: SpecFlags,
    /// Read one JSON object per line instead of one job id per line.
    #[arg(long)]
    pub(crate) json_lines: bool,
}

impl EnqueueManyArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        clock: impl FnOnce() -> f64,
        read: ReadInput<'_>,
    ) -> Result<JobsRequest, RequestError> {
        let EnqueueManyArgs { spec, json_lines } = self;
        let defaults = spec.into_spec(None, clock())?;
        let input =
            read(std::path::Path::new("-"), BATCH_INPUT_LIMIT).map_err(RequestError::Read)?;
        let mut jobs = crate::batch::parse(&input, &defaults, json_lines)?;
        lease_seal::seal_payloads_from_env(
            jobs.iter_mut()
                .map(|(job, spec)| (&*job, &mut spec.payload)),
        )?;
        Ok(JobsRequest::EnqueueMany(jobs))
    }
}

/// The arguments of `lease cancel` and `lease retry`: one job, or every job a filter matches.
#[derive(Debug, clap::Args)]
pub(crate) struct AdminArgs {
    /// The job id; without one, every job the filter (`--queue`, `--group`, `--prefix`,
    /// `--status`) matches, in batches of at most 500.
    #[arg(required_unless_present_any = ["queue", "group", "prefix"], conflicts_with_all = ["queue", "group", "prefix", "status", "dry_run"])]
    pub(crate) job: Option<String>,
    /// Every job of this queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Every job of this group.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) group: Option<String>,
    /// Every job whose id starts with this text.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) prefix: Option<String>,
    /// Only jobs of this status (default: dead for retry, pending for cancel).
    #[arg(long)]
    pub(crate) status: Option<String>,
    /// Only count the jobs the filter matches, changing nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// The current time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) now: Option<f64>,
}

impl AdminArgs {
    /// The checked request of `action`.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(
        self,
        action: lease_ports::bulk::BulkAction,
        clock: impl FnOnce() -> f64,
    ) -> Result<JobsRequest, RequestError> {
        use lease_ports::bulk::BulkAction;
        let now = Timestamp::new(self.now.unwrap_or_else(clock))?;
        if let Some(job) = self.job {
            let job = JobId::new(job)?;
            return Ok(match action {
                BulkAction::Retry => JobsRequest::Retry(job, now),
                BulkAction::Cancel => JobsRequest::Cancel(job, now),
            });
        }
        let status = match self.status {
            Some(status) => Status::parse(&status)?,
            None => action.default_status(),
        };
        let filter = lease_ports::ListFilter {
            queue: self.queue.map(QueueName::new).transpose()?,
            status: Some(status),
            limit: lease_ports::bulk::BULK_BATCH,
            after: None,
            now,
            group: self.group.map(lease_domain::GroupKey::new).transpose()?,
            prefix: self.prefix,
        };
        Ok(JobsRequest::Bulk(filter, action, self.dry_run))
    }
}

/// The arguments of `lease list`.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Only this queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Only this status: pending, running, done, dead or cancelled.
    #[arg(long)]
    pub(crate) status: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: usize,
    /// Only jobs whose id comes after this one (the last id of the page before).
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) after: Option<String>,
    /// The time statuses are judged at (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) now: Option<f64>,
    /// Only jobs of this group.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) group: Option<String>,
    /// Only jobs whose id starts with this text.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) prefix: Option<String>,
}

impl ListArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(self, clock: impl FnOnce() -> f64) -> Result<JobsRequest, RequestError> {
        let ListArgs {
            queue,
            status,
            limit,
            after,
            now,
            group,
            prefix,
        } = self;
        Ok(JobsRequest::List(lease_ports::ListFilter {
            queue: queue.map(QueueName::new).transpose()?,
            status: status.as_deref().map(Status::parse).transpose()?,
            limit,
            after: after.map(JobId::new).transpose()?,
            now: Timestamp::new(now.unwrap_or_else(clock))?,
            group: group.map(lease_domain::GroupKey::new).transpose()?,
            prefix,
        }))
    }
}

/// The arguments of `lease stats`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatsArgs {
    /// The time statuses are judged at (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) now: Option<f64>,
    /// Print the counts in the Prometheus text format (gauge `lease_jobs`), and each queue's flow control (`lease_queue_paused`, `lease_queue_concurrency_limit`, `lease_queue_timeout_seconds`, `lease_queue_per_group_limit`, `lease_queue_ordered`, `lease_queue_paused_groups`, `lease_queue_throttled`, `lease_queue_throttled_groups`).
    #[arg(long, conflicts_with = "json")]
    pub(crate) prometheus: bool,
}

impl StatsArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(self, clock: impl FnOnce() -> f64) -> Result<JobsRequest, RequestError> {
        let StatsArgs { now, prometheus } = self;
        Ok(JobsRequest::Stats(
            Timestamp::new(now.unwrap_or_else(clock))?,
            prometheus,
        ))
    }
}

/// The arguments of `lease audit`.
#[derive(Debug, clap::Args)]
pub(crate) struct AuditArgs {
    /// Only this job.
    #[arg(long)]
    pub(crate) job: Option<String>,
    /// Only refusals at or after this time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) since: Option<f64>,
    /// At most this many, the newest.
    #[arg(long, default_value_t = 1000)]
    pub(crate) limit: usize,
}

impl AuditArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(self) -> Result<lease_ports::audit::AuditFilter, RequestError> {
        let AuditArgs { job, since, limit } = self;
        Ok(lease_ports::audit::AuditFilter {
            job: job.map(JobId::new).transpose()?,
            since: since.map(|t| time_flag("--since", t)).transpose()?,
            limit,
        })
    }
}

/// The arguments of `lease purge`.
#[derive(Debug, clap::Args)]
pub(crate) struct PurgeArgs {
    /// The cutoff time (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) before: f64,
    /// Only these statuses (done, dead, cancelled; repeat for several; default: all three).
    #[arg(long = "status")]
    pub(crate) statuses: Vec<String>,
}

impl PurgeArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(self) -> Result<JobsRequest, RequestError> {
        let PurgeArgs { before, statuses } = self;
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
        Ok(JobsRequest::Purge(time_flag("--before", before)?, statuses))
    }
}

/// The arguments of `lease state`.
#[derive(Debug, clap::Args)]
pub(crate) struct StateArgs {
    /// The job id.
    pub(crate) job: String,
    /// The time the status is judged at (Unix seconds or RFC 3339, such as 2026-12-01T14:43:21Z); default: the system clock.
    #[arg(long, allow_hyphen_values = true, value_parser = crate::when::parse)]
    pub(crate) now: Option<f64>,
}

impl StateArgs {
    /// The checked request.
    ///
    /// # Errors
    /// The first bad value, named.
    pub(crate) fn request(self, clock: impl FnOnce() -> f64) -> Result<JobsRequest, RequestError> {
        let StateArgs { job, now } = self;
        Ok(JobsRequest::State(
            JobId::new(job)?,
            Timestamp::new(now.unwrap_or_else(clock))?,
        ))
    }
}

/// Runs a checked request of this family against the store and builds its report.
///
/// # Errors
/// The store's error; nothing is printed here.
pub(crate) async fn execute(
    request: &JobsRequest,
    store: &dyn Controlled,
    now: Timestamp,
) -> Result<Report, StoreError> {
    Ok(match request {
        JobsRequest::Enqueue(id, spec) => {
            let inserted = store.enqueue_with(id, spec).await?;
            let human = if inserted {
                format!("enqueued job {id}")
            } else {
                format!("job {id} already exists; nothing changed")
            };
            Report::new(true, json!({"inserted": inserted}), human)
        }
        JobsRequest::EnqueueMany(jobs) => enqueue_many(store, jobs).await?,
        JobsRequest::State(id, now) => state(store, id, now).await?,
        JobsRequest::Cancel(id, now) => {
            queue_write_report(store.cancel(id, *now).await?, "cancelled", id)
        }
        JobsRequest::Retry(id, now) => {
            queue_write_report(store.retry(id, *now).await?, "retried", id)
        }
        JobsRequest::Bulk(filter, action, dry_run) => {
            let done = lease_ports::bulk::bulk(store, filter, *action, *dry_run).await?;
            let human = if *dry_run {
                format!("{} jobs match; nothing changed (dry run)", done.matched)
            } else {
                let did = match action {
                    lease_ports::bulk::BulkAction::Retry => "retried",
                    lease_ports::bulk::BulkAction::Cancel => "cancelled",
                };
                format!("{did} {} of {} matching jobs", done.changed, done.matched)
            };
            Report::new(
                true,
                json!({"action": action.name(), "matched": done.matched, "changed": done.changed, "dry_run": dry_run}),
                human,
            )
        }
        JobsRequest::List(filter) => {
            let records = store.list(filter).await?;
            let json = json!({"jobs": records.iter().map(|r| record_json(r, filter.now)).collect::<Vec<_>>()});
            let lines: Vec<String> = if records.is_empty() {
                Vec::new()
            } else {
                record_table(&records, filter.now)
            };
            Report::lines(true, json, lines, "no jobs")
        }
        JobsRequest::Stats(now, true) => {
            let rows = store.stats(*now).await?;
            let settings = lease_ports::control::queues_and_throttles(store, *now).await?;
            Report::verbatim(json!({}), prometheus(&rows, &settings, *now))
        }
        JobsRequest::Stats(now, false) => stats(store, now).await?,
        JobsRequest::Purge(before, statuses) => {
            let purged = store.purge(*before, statuses).await?;
            Report::new(
                true,
                json!({"purged": purged}),
                format!(
                    "purged {purged} job(s) finished before {}",
                    when::shown(before.get(), now.get())
                ),
            )
        }
    })
}

/// Stores `jobs` in transactions of up to `BATCH_JOBS` (a workflow whole, in one), saying how
/// many were new.
async fn enqueue_many(
    store: &dyn Controlled,
    jobs: &[(lease_domain::JobId, lease_domain::EnqueueSpec)],
) -> Result<Report, StoreError> {
    let mut inserted = 0_usize;
    let mut done = 0_usize;
    // A workflow (a job that names parents) is stored whole, in one transaction: a
    // parent may come later in the input, and a refusal must leave nothing of it.
    let per_transaction = if jobs.iter().any(|(_, spec)| !spec.after.is_empty()) {
        jobs.len().max(1)
    } else {
        crate::args::BATCH_JOBS
    };
    for chunk in jobs.chunks(per_transaction) {
        let answers = store.enqueue_many(chunk).await.map_err(|e| {
            e.in_context(&format!(
                "{done} of {} jobs were stored before this failure (each transaction \
                 holds up to {per_transaction} jobs; the rest were not)",
                jobs.len(),
            ))
        })?;
        inserted += answers.iter().filter(|&&new| new).count();
        done += chunk.len();
    }
    let existed = jobs.len() - inserted;
    Ok(Report::new(
        true,
        json!({"inserted": inserted, "existed": existed}),
        format!("enqueued {inserted} job(s); {existed} already existed and were left as they were"),
    ))
}

/// A job's state and record, with its parents, checkpoints, trace and attempt history.
async fn state(
    store: &dyn Controlled,
    id: &lease_domain::JobId,
    now: &Timestamp,
) -> Result<Report, StoreError> {
    let record = store.record(id).await?;
    let state = record.as_ref().map(JobRecord::state);
    let mut human = state_sentence(id, state.as_ref(), *now);
    if let Some(record) = &record {
        let j = &record.job;
        human.push_str(&format!(
            "; {} in queue {}, attempts {}/{}",
            j.status_at(*now),
            j.queue,
            j.attempts,
            j.max_attempts.max(1)
        ));
        if let Some(group) = &j.group {
            human.push_str(&format!(", group {:?}", group.as_str()));
        }
        if let Some(error) = &j.error {
            human.push_str(&format!(", last error {error:?}"));
        }
        if let Some(progress) = &j.progress {
            human.push_str(&format!(", progress {progress:?}"));
        }
        if let Some(timeout) = j.timeout {
            human.push_str(&format!(", timeout {} s an attempt", timeout.get()));
        }
    }
    let parents = lease_ports::parents_of(store, id, *now).await?;
    if !parents.is_empty() {
        let open = parents.iter().filter(|p| !p.status.is_finished()).count();
        let named = |n: usize| if n == 1 { "job" } else { "jobs" };
        human.push_str(&format!(
            ", after {} {} ({open} not finished)",
            parents.len(),
            named(parents.len())
        ));
    }
    let kept = if record.is_some() {
        store.checkpoints(id).await?
    } else {
        Vec::new()
    };
    if !kept.is_empty() {
        let names: Vec<&str> = kept.iter().map(|c| c.name.as_str()).collect();
        human.push_str(&format!(
            ", {} checkpoint(s): {}",
            kept.len(),
            escape_controls(&names.join(", "))
        ));
    }
    let trace = if record.is_some() {
        store.trace(id).await?
    } else {
        None
    };
    if let Some(trace) = &trace {
        human.push_str(&format!(", trace {}", trace.traceparent()));
    }
    let attempts = match &record {
        Some(_) => store.attempts(id).await?,
        None => lease_domain::Attempts::default(),
    };
    let json = record.map_or(Value::Null, |r| {
        let mut json = record_json(&r, *now);
        let shown = lease_server::views::attempts_json(Some(&r.job), &attempts, None, *now);
        json["attempt_history"] = shown["attempts"].clone();
        json["older_attempts"] = shown["older"].clone();
        json["parents"] = parents_json(&parents);
        json["checkpoints"] = checkpoints_json(&kept);
        json["traceparent"] = json!(trace.as_ref().map(|t| t.traceparent()));
        json["tracestate"] = json!(trace.as_ref().and_then(|t| t.tracestate()));
        json
    });
    Ok(Report::new(true, json, human))
}

/// Every queue's counts by status, with the settings of each queue that has any.
async fn stats(store: &dyn Controlled, now: &Timestamp) -> Result<Report, StoreError> {
    let rows = store.stats(*now).await?;
    let settings = store.queues().await?;
    let queues = lease_server::views::stats_json(&rows);
    let mut lines = Vec::new();
    for (queue, counts) in &queues {
        // Waiting jobs (those with parents) are named only when a queue has some.
        let shown: Vec<String> = Status::ALL
            .iter()
            .filter(|s| **s != Status::Waiting || counts[s.as_str()] != 0)
            .map(|s| format!("{} {}", counts[s.as_str()], s.as_str()))
            .collect();
        let set = settings
            .iter()
            .find(|(q, _)| q.as_str() == queue)
            .map(|(_, s)| format!(" ({})", crate::control::settings_words(s, *now)))
            .unwrap_or_default();
        lines.push(format!("{queue}: {}{set}", shown.join(", ")));
    }
    // A queue with settings and no jobs yet is shown too.
    for (queue, set) in settings
        .iter()
        .filter(|(q, _)| !queues.contains_key(q.as_str()))
    {
        lines.push(format!(
            "{queue}: no jobs ({})",
            crate::control::settings_words(set, *now)
        ));
    }
    let settings: serde_json::Map<String, Value> = settings
        .iter()
        .map(|(queue, set)| {
            (
                queue.as_str().to_owned(),
                lease_server::views::queue_json(queue, set, *now),
            )
        })
        .collect();
    Ok(Report::lines(
        true,
        json!({"queues": queues, "settings": settings}),
        lines,
        "no jobs",
    ))
}
