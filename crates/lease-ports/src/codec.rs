//! Decoding what stores keep as plain columns (statuses as text, fences and counts as signed
//! integers, `stats` groups, audit rows) into the port's types, once for every store. A value no
//! store could have written (an unknown status, a negative fence or count) is
//! [`StoreError::Corrupt`], never read as 0 or dropped.

use lease_domain::{AuditReason, Ended, Fence, HolderWrite, JobId, QueueName, Status, Timestamp};

use crate::StatusGroup;
use crate::StoreError;
use crate::audit::{AuditRow, UNKNOWN};
use crate::overview::DueRow;

/// A stored count (`count(*)`, attempts) that must not be negative.
///
/// # Errors
/// [`StoreError::Corrupt`] naming `what` for a negative value.
pub fn count(n: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("{what} is {n}, below 0").into()))
}

/// A stored enqueue order (`seq`): never negative.
///
/// # Errors
/// `Corrupt` for a negative one.
pub fn seq(n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("a stored seq {n}").into()))
}

/// A group's head as a store keeps it (group, priority, `run_at`, `seq`).
///
/// # Errors
/// `Corrupt` for a group no store could have written, a `run_at` that is not a time or a
/// negative `seq`.
pub fn head(
    group: String,
    priority: i64,
    run_at: Option<f64>,
    seq: i64,
) -> Result<crate::next::Head, StoreError> {
    let group = lease_domain::GroupKey::stored(group)
        .map_err(|e| StoreError::Corrupt(format!("a head's stored group: {e}").into()))?;
    let run_at = run_at
        .map(lease_domain::Timestamp::new)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("a head's stored run_at: {e}").into()))?;
    Ok(crate::next::Head {
        group,
        key: lease_domain::ClaimKey {
            priority,
            run_at,
            seq: self::seq(seq)?,
        },
    })
}

/// A stored job id (a row's id, a parent, a purged id) read back: checked again, so an id no
/// store could have written (empty, or with a NUL) is corrupt, never a job.
///
/// # Errors
/// [`StoreError::Corrupt`] saying what is wrong with the id.
pub fn job_id(id: impl Into<String>) -> Result<JobId, StoreError> {
    JobId::stored(id).map_err(|e| StoreError::Corrupt(format!("stored job id: {e}").into()))
}

/// A stored fence, `0..=i64::MAX`.
///
/// # Errors
/// [`StoreError::Corrupt`] naming `what` for a negative value.
pub fn fence(n: i64, what: &str) -> Result<Fence, StoreError> {
    Fence::try_from(n).map_err(|_| StoreError::Corrupt(format!("{what} is {n}, below 0").into()))
}

/// A stored epoch (a store's, `0..=Epoch::MAX`).
///
/// # Errors
/// [`StoreError::Corrupt`] saying what the store holds.
pub fn epoch(n: i64) -> Result<lease_domain::Epoch, StoreError> {
    u64::try_from(n)
        .ok()
        .and_then(|e| lease_domain::Epoch::new(e).ok())
        .ok_or_else(|| {
            StoreError::Corrupt(
                format!(
                    "the store's epoch reads {n}, outside 0..={}",
                    lease_domain::Epoch::MAX
                )
                .into(),
            )
        })
}

/// A stored checkpoint of job `job`: its name, value, fence and time as columns.
///
/// # Errors
/// [`StoreError::Corrupt`] naming the job and what no store could have written.
pub fn checkpoint(
    job: &str,
    name: String,
    value: String,
    fence_no: i64,
    at: f64,
) -> Result<lease_domain::KeptCheckpoint, StoreError> {
    let corrupt =
        |what: String| StoreError::Corrupt(format!("job {job}: checkpoint {what}").into());
    Ok(lease_domain::KeptCheckpoint {
        name: lease_domain::CheckpointName::new(name).map_err(|e| corrupt(e.to_string()))?,
        value: lease_domain::CheckpointValue::new(value).map_err(|e| corrupt(e.to_string()))?,
        fence: fence(fence_no, &format!("job {job}: checkpoint fence"))?,
        at: Timestamp::new(at).map_err(|_| corrupt(format!("time {at} is not finite")))?,
    })
}

/// One stored attempt of a job, as a store's row gives it (SQLite's `lease_attempts`,
/// PostgreSQL's `attempts`): its fence, owner, start, end, outcome and error.
///
/// # Errors
/// [`StoreError::Corrupt`] naming the job and what no store could have written.
pub fn attempt(job: &str, row: StoredAttempt) -> Result<lease_domain::Attempt, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt(format!("job {job}: attempt {what}").into());
    let fence = fence(row.fence, &format!("job {job}: attempt fence"))?;
    Ok(lease_domain::Attempt {
        fence,
        owner: lease_domain::Owner::stored(row.owner)
            .map_err(|e| corrupt(format!("owner: {e}")))?,
        started: maybe_time(row.started, "an attempt's start")?,
        ended: maybe_time(row.ended, "an attempt's end")?,
        end: lease_domain::AttemptEnd::parse(&row.outcome)
            .ok_or_else(|| corrupt(format!("{fence} ended as {:?}", row.outcome)))?,
        error: row.error,
    })
}

/// The columns of one stored attempt ([`attempt`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAttempt {
    /// Its fence.
    pub fence: i64,
    /// Who held it.
    pub owner: String,
    /// When it was claimed.
    pub started: Option<f64>,
    /// When it ended (`None` from a store without a clock: the memory store's release).
    pub ended: Option<f64>,
    /// How it ended ([`lease_domain::AttemptEnd::as_str`]).
    pub outcome: String,
    /// Its error.
    pub error: Option<String>,
}

/// A job's stored trace context read back (SQLite's `lease_traces`, PostgreSQL's `traces`):
/// checked again, so a row another program wrote wrongly is corrupt, not a context.
///
/// # Errors
/// [`StoreError::Corrupt`] naming the job and what is wrong with the row.
pub fn trace(
    job: &str,
    traceparent: &str,
    tracestate: Option<&str>,
) -> Result<lease_domain::TraceContext, StoreError> {
    lease_domain::TraceContext::new(traceparent, tracestate)
        .map_err(|e| StoreError::Corrupt(format!("job {job}'s stored trace context: {e}").into()))
}

/// The stored text of how a job ended: `None` (or `done`, which the SQLite store writes for a
/// completed job beside its `done` flag) is no end, `dead` and `cancelled` are [`Ended`] ([`Ended::as_str`]).
///
/// # Errors
/// [`StoreError::Corrupt`] naming `what` for any other text.
pub fn ended(text: Option<&str>, what: &str) -> Result<Option<Ended>, StoreError> {
    match text {
        None => Ok(None),
        Some(text) if text == Status::Done.as_str() => Ok(None),
        Some(text) => Ended::parse(text).map(Some).ok_or_else(|| {
            StoreError::Corrupt(format!("{what} {text:?} is not a known status").into())
        }),
    }
}

/// The stored text of where a job stands when it cannot run now: as [`ended`], and `waiting`
/// (a job waiting for its parents, which both stores keep in the same column as the ends so
/// that their indexes of jobs that can run leave it out) is no end, waiting (`true`).
///
/// # Errors
/// [`StoreError::Corrupt`] naming `what` for any other text.
pub fn stands(text: Option<&str>, what: &str) -> Result<(Option<Ended>, bool), StoreError> {
    match text {
        Some(text) if text == Status::Waiting.as_str() => Ok((None, true)),
        other => ended(other, what).map(|end| (end, false)),
    }
}

/// How a parent stands as its child judges it, from the parent's stored `done` (`None`: the
/// parent is gone, purged after it finished, so it counts as done) and its stored end text
/// (read by [`stands`]): its end, or `None` while it can still run or waits itself.
///
/// # Errors
/// [`StoreError::Corrupt`] naming the parent for an end no store writes.
pub fn parent_end(
    parent: &lease_domain::JobId,
    done: Option<bool>,
    end: Option<&str>,
) -> Result<Option<Status>, StoreError> {
    match done {
        None | Some(true) => Ok(Some(Status::Done)),
        Some(false) => {
            let (ended, _) = stands(end, &format!("job {parent}: stored end"))?;
            Ok(ended.map(|e| match e {
                Ended::Dead => Status::Dead,
                Ended::Cancelled => Status::Cancelled,
            }))
        }
    }
}

/// One row of a store's `stats` grouping query: the inputs of the status rule, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredGroup {
    /// The queue.
    pub queue: String,
    /// Whether the jobs are done.
    pub done: bool,
    /// The stored end (`dead`, `cancelled`), `waiting`, or `None`.
    pub ended: Option<String>,
    /// Whether their lease is live at the time judged.
    pub live: bool,
    /// Whether they used every attempt.
    pub exhausted: bool,
    /// How many jobs (`count(*)`).
    pub count: i64,
}

impl StoredGroup {
    /// The group as the status rule reads it.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for an invalid queue name, an unknown end or a negative count.
    pub fn decode(self) -> Result<StatusGroup, StoreError> {
        let (ended, waiting) = stands(self.ended.as_deref(), "stored end")?;
        Ok(StatusGroup {
            queue: queue(self.queue)?,
            done: self.done,
            ended,
            waiting,
            live: self.live,
            exhausted: self.exhausted,
            count: count(self.count, "a stats group's count")?,
        })
    }
}

fn queue(name: String) -> Result<QueueName, StoreError> {
    QueueName::stored(name).map_err(|e| StoreError::Corrupt(format!("stored queue: {e}").into()))
}

fn time(t: f64, what: &str) -> Result<Timestamp, StoreError> {
    Timestamp::new(t).map_err(|_| StoreError::Corrupt(format!("{what} is {t}").into()))
}

/// One queue's row of `Overview::due`, as a store's query gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDue {
    /// The queue.
    pub queue: String,
    /// How many jobs wait (`count(*)`).
    pub due: i64,
    /// The earliest time one has waited since.
    pub oldest: Option<f64>,
}

impl StoredDue {
    /// The row as the port gives it.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for an invalid queue name, a negative count or a time that is
    /// not finite.
    pub fn decode(self) -> Result<DueRow, StoreError> {
        Ok(DueRow {
            queue: queue(self.queue)?,
            due: count(self.due, "a due count")?,
            oldest_since: self
                .oldest
                .map(|t| time(t, "a due job's waiting time"))
                .transpose()?,
        })
    }
}

/// One (queue, minute) count of `Overview::activity` (completions or refusals), as a store's
/// query gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMinute {
    /// The queue.
    pub queue: String,
    /// The minute's start.
    pub minute: f64,
    /// How many (`count(*)`, or a kept count).
    pub count: i64,
}

impl StoredMinute {
    /// (queue, minute, count).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for an invalid queue name, a minute that is not finite or a
    /// negative count.
    pub fn decode(self) -> Result<(QueueName, Timestamp, u64), StoreError> {
        Ok((
            queue(self.queue)?,
            time(self.minute, "an activity minute")?,
            count(self.count, "an activity count")?,
        ))
    }
}

/// One stored audit row, as its columns hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAudit {
    /// When it was refused (Unix seconds).
    pub time: f64,
    /// The job.
    pub job: String,
    /// The writer.
    pub owner: String,
    /// The operation.
    pub operation: String,
    /// The fence presented.
    pub presented: i64,
    /// The job's fence then, if it existed.
    pub current: Option<i64>,
    /// The reason's name ([`AuditReason::as_str`]).
    pub reason: String,
    /// How late an expired write came.
    pub late_by: Option<f64>,
}

impl StoredAudit {
    /// The row as the port shows it. An operation or reason this version does not know (a
    /// newer writer's, or an older bug's) reads as [`UNKNOWN`] rather than failing the whole
    /// trail: one odd row must not hide every other refusal from the operator.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a negative fence.
    pub fn decode(self) -> Result<AuditRow, StoreError> {
        let operation = HolderWrite::parse(&self.operation).map_or(UNKNOWN, HolderWrite::as_str);
        let reason = AuditReason::parse(&self.reason).map_or(UNKNOWN, AuditReason::as_str);
        Ok(AuditRow {
            time: self.time,
            job: self.job,
            owner: self.owner,
            operation: operation.to_owned(),
            presented_fence: fence(self.presented, "an audit row's presented fence")?.get(),
            current_fence: self
                .current
                .map(|f| fence(f, "an audit row's current fence").map(Fence::get))
                .transpose()?,
            reason: reason.to_owned(),
            late_by: self.late_by,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_job_id_is_checked_again_and_a_bad_one_is_corrupt() {
        assert_eq!(job_id("inv-1").unwrap().as_str(), "inv-1");
        for bad in ["", "a\0b"] {
            match job_id(bad) {
                Err(StoreError::Corrupt(why)) => {
                    assert!(why.to_string().starts_with("stored job id"), "{why}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_stored_trace_context_is_checked_again_and_a_bad_one_is_corrupt_naming_the_job() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let read = trace("j", parent, Some("k=v")).unwrap();
        assert_eq!(
            (read.traceparent(), read.tracestate()),
            (parent, Some("k=v"))
        );
        let zeros = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        match trace("j", zeros, None) {
            Err(StoreError::Corrupt(why)) => assert!(why.to_string().contains("job j"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    fn group(ended: Option<&str>, count: i64) -> StoredGroup {
        StoredGroup {
            queue: "q".into(),
            done: false,
            ended: ended.map(str::to_owned),
            live: false,
            exhausted: false,
            count,
        }
    }

    #[test]
    fn every_end_reads_back_as_it_is_written() {
        for end in Ended::ALL {
            assert_eq!(ended(Some(end.as_str()), "end").unwrap(), Some(end));
        }
        assert_eq!(ended(None, "end").unwrap(), None);
    }

    #[test]
    fn an_unknown_status_or_a_negative_count_is_corrupt_not_zero() {
        assert!(matches!(
            group(Some("zombie"), 1).decode(),
            Err(StoreError::Corrupt(m)) if m.contains("zombie")
        ));
        assert!(matches!(
            group(None, -3).decode(),
            Err(StoreError::Corrupt(m)) if m.contains("-3")
        ));
        assert_eq!(group(Some("dead"), 2).decode().unwrap().count, 2);
    }

    #[test]
    fn an_audit_row_with_a_negative_fence_is_corrupt() {
        let row = audit_row("complete", "stale");
        assert_eq!(row.clone().decode().unwrap().current_fence, Some(2));
        for bad in [
            StoredAudit {
                presented: -1,
                ..row.clone()
            },
            StoredAudit {
                current: Some(-5),
                ..row
            },
        ] {
            assert!(matches!(bad.decode(), Err(StoreError::Corrupt(_))));
        }
    }

    fn audit_row(operation: &str, reason: &str) -> StoredAudit {
        StoredAudit {
            time: 1.0,
            job: "j".into(),
            owner: "w".into(),
            operation: operation.into(),
            presented: 1,
            current: Some(2),
            reason: reason.into(),
            late_by: None,
        }
    }

    #[test]
    fn every_operation_and_reason_written_reads_back_and_an_unknown_one_reads_as_unknown() {
        for write in HolderWrite::ALL {
            for reason in AuditReason::ALL {
                let row = audit_row(write.as_str(), reason.as_str()).decode().unwrap();
                assert_eq!(
                    (row.operation.as_str(), row.reason.as_str()),
                    (write.as_str(), reason.as_str())
                );
            }
        }
        let odd = audit_row("dance", "bored").decode().unwrap();
        assert_eq!(
            (odd.operation.as_str(), odd.reason.as_str()),
            (UNKNOWN, UNKNOWN)
        );
        assert_eq!((odd.job.as_str(), odd.presented_fence), ("j", 1));
    }
}

fn setting(what: String) -> StoreError {
    StoreError::Corrupt(what.into())
}

/// A stored time (a pause's end, a schedule's last tick), or its absence.
fn maybe_time(t: Option<f64>, what: &str) -> Result<Option<Timestamp>, StoreError> {
    t.map(|t| time(t, what)).transpose()
}

/// A stored timeout in seconds, or its absence.
fn seconds(t: Option<f64>, what: &str) -> Result<Option<lease_domain::Ttl>, StoreError> {
    t.map(|t| {
        lease_domain::Ttl::new(t).map_err(|_| setting(format!("{what} {t} is not a duration")))
    })
    .transpose()
}

/// One stored row of a queue's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredQueue {
    /// The queue.
    pub queue: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Until when, if paused until a time.
    pub paused_until: Option<f64>,
    /// The limit on live leases, if any.
    pub concurrency: Option<i64>,
    /// The default timeout of an attempt, in seconds, if any.
    pub timeout: Option<f64>,
    /// The limit on each group's live leases, if any.
    pub per_group: Option<i64>,
    /// Whether its groups are ordered.
    pub ordered: bool,
    /// Its paused groups, each with the end of its pause (`None`: until resumed), as the
    /// store's table of group pauses holds them.
    pub paused_groups: Vec<(String, Option<f64>)>,
    /// The queue's rate, as its count and its period in seconds, if any.
    pub rate: (Option<i64>, Option<f64>),
    /// The rate of each group, as its count and its period in seconds, if any.
    pub rate_per_group: (Option<i64>, Option<f64>),
    /// Whether claims serve its groups in turn.
    pub fair: bool,
}

/// A rate as its stored count and period.
fn rate_row(rate: Option<lease_domain::Rate>) -> (Option<i64>, Option<f64>) {
    (
        rate.map(|r| i64::from(r.count())),
        rate.map(lease_domain::Rate::period),
    )
}

/// A stored rate read back: both halves or neither.
fn stored_rate(
    row: (Option<i64>, Option<f64>),
    what: &str,
) -> Result<Option<lease_domain::Rate>, StoreError> {
    match row {
        (None, None) => Ok(None),
        (Some(count), Some(period)) => lease_domain::Rate::stored(count, period)
            .map(Some)
            .map_err(|e| setting(format!("{what}: stored {e}"))),
        _ => Err(setting(format!(
            "{what}: a stored rate has half of its columns"
        ))),
    }
}

impl StoredQueue {
    /// The row of `settings`, for writing.
    #[must_use]
    pub fn of(queue: &QueueName, settings: &lease_domain::QueueSettings) -> Self {
        Self {
            queue: queue.as_str().to_owned(),
            paused: settings.paused.is_some(),
            paused_until: settings.paused.and_then(|p| p.until).map(Timestamp::get),
            concurrency: settings.concurrency.map(|c| i64::from(c.get())),
            timeout: settings.timeout.map(lease_domain::Ttl::get),
            per_group: settings.per_group.map(|c| i64::from(c.get())),
            ordered: settings.ordered,
            paused_groups: settings
                .paused_groups
                .iter()
                .map(|(g, until)| (g.as_str().to_owned(), until.map(Timestamp::get)))
                .collect(),
            rate: rate_row(settings.rate),
            rate_per_group: rate_row(settings.rate_per_group),
            fair: settings.fair,
        }
    }

    /// The settings.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a queue name, limit, time or timeout no store writes.
    pub fn decode(self) -> Result<(QueueName, lease_domain::QueueSettings), StoreError> {
        let queue_name = queue(self.queue)?;
        let paused_until = maybe_time(self.paused_until, "a stored pause's end")?;
        let settings = lease_domain::QueueSettings {
            paused: self.paused.then_some(lease_domain::Pause {
                until: paused_until,
            }),
            concurrency: self
                .concurrency
                .map(lease_domain::Concurrency::stored)
                .transpose()
                .map_err(|e| setting(format!("queue {queue_name}: stored {e}")))?,
            timeout: seconds(self.timeout, "a stored queue timeout")?,
            per_group: self
                .per_group
                .map(lease_domain::Concurrency::stored)
                .transpose()
                .map_err(|e| setting(format!("queue {queue_name}: stored per-group {e}")))?,
            ordered: self.ordered,
            paused_groups: self
                .paused_groups
                .into_iter()
                .map(|(group, until)| {
                    let group = lease_domain::GroupKey::stored(group)
                        .map_err(|e| setting(format!("queue {queue_name}: stored group {e}")))?;
                    Ok((group, maybe_time(until, "a stored group pause's end")?))
                })
                .collect::<Result<_, StoreError>>()?,
            rate: stored_rate(self.rate, &format!("queue {queue_name}"))?,
            rate_per_group: stored_rate(
                self.rate_per_group,
                &format!("queue {queue_name}'s groups"),
            )?,
            fair: self.fair,
        };
        Ok((queue_name, settings))
    }
}

/// One stored row of a schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSchedule {
    /// Its name.
    pub name: String,
    /// Its cron expression.
    pub cron: String,
    /// Its time zone.
    pub zone: String,
    /// The queue of its jobs.
    pub queue: String,
    /// Their priority.
    pub priority: i64,
    /// Their attempts, if set.
    pub max_attempts: Option<i64>,
    /// Their payload.
    pub payload: Option<Vec<u8>>,
    /// Their timeout in seconds, if set.
    pub timeout: Option<f64>,
    /// The catch-up policy (`CatchUp::text`).
    pub catch_up: String,
    /// Its version.
    pub version: i64,
    /// When it was made.
    pub created: f64,
    /// Its last tick, if it fired.
    pub last_tick: Option<f64>,
}

impl StoredSchedule {
    /// The row of `schedule`, for writing.
    #[must_use]
    pub fn of(schedule: &lease_domain::Schedule) -> Self {
        let spec = &schedule.spec;
        Self {
            name: spec.name.as_str().to_owned(),
            cron: spec.cron.clone(),
            zone: spec.zone.clone(),
            queue: spec.job.queue.as_str().to_owned(),
            priority: spec.job.priority,
            max_attempts: spec.job.max_attempts.map(i64::from),
            payload: spec.job.payload.as_ref().map(|p| p.as_bytes().to_vec()),
            timeout: spec.job.timeout.map(lease_domain::Ttl::get),
            catch_up: spec.catch_up.text(),
            version: i64::try_from(schedule.version).unwrap_or(i64::MAX),
            created: schedule.created.get(),
            last_tick: schedule.last_tick.map(Timestamp::get),
        }
    }

    /// The schedule.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] naming the schedule and the value no store writes.
    pub fn decode(self) -> Result<lease_domain::Schedule, StoreError> {
        let name = lease_domain::ScheduleName::new(self.name)
            .map_err(|e| setting(format!("stored {e}")))?;
        let bad = |what: String| setting(format!("schedule {name}: stored {what}"));
        let max_attempts = self
            .max_attempts
            .map(|n| u32::try_from(n).map_err(|_| bad(format!("max_attempts {n}"))))
            .transpose()?;
        let payload = self.payload.map(lease_domain::Payload::stored);
        let job = lease_domain::EnqueueSpec {
            queue: queue(self.queue)?,
            priority: self.priority,
            max_attempts,
            payload,
            timeout: seconds(self.timeout, "a schedule's timeout")?,
            ..lease_domain::EnqueueSpec::default()
        };
        let catch_up =
            lease_domain::CatchUp::parse(&self.catch_up).map_err(|e| bad(e.to_string()))?;
        let version =
            u64::try_from(self.version).map_err(|_| bad(format!("version {}", self.version)))?;
        Ok(lease_domain::Schedule {
            spec: lease_domain::ScheduleSpec {
                cron: self.cron,
                zone: self.zone,
                job,
                catch_up,
                name: name.clone(),
            },
            version,
            created: time(self.created, "a schedule's making")?,
            last_tick: maybe_time(self.last_tick, "a schedule's last tick")?,
        })
    }
}

/// One stored grant of a rate-limited queue: its group (`None`: the queue's own rate) and when
/// it stops counting.
///
/// # Errors
/// [`StoreError::Corrupt`] for a group or time no store writes.
pub fn grant(group: Option<String>, expires: f64) -> Result<lease_domain::Grant, StoreError> {
    let group = group
        .map(lease_domain::GroupKey::stored)
        .transpose()
        .map_err(|e| setting(format!("a stored grant's group: {e}")))?;
    Ok((group, time(expires, "a stored grant's expiry")?))
}
