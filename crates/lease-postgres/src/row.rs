//! The job row's codec: a job read back from its columns (every stored value checked, a bad
//! one `Corrupt`, never a default) and written as the parameters of the store's statements
//! (`Encoded`, with the counts and the ended attempt a write moves), a queue's settings row,
//! and a stored attempt.

use lease_domain::{Fence, Job, JobId, Owner, QueueName, QueueSettings, Timestamp, TokenDigest};
use lease_ports::StoreError;
use lease_ports::codec::StoredQueue;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

fn corrupt(id: &JobId, what: String) -> StoreError {
    StoreError::Corrupt(format!("job {id}: {what}").into())
}

fn time(id: &JobId, value: f64, column: &str) -> Result<Timestamp, StoreError> {
    Timestamp::new(value).map_err(|_| corrupt(id, format!("stored {column} {value} is not finite")))
}

fn count(id: &JobId, value: i64, column: &str) -> Result<u32, StoreError> {
    u32::try_from(value)
        .map_err(|_| corrupt(id, format!("stored {column} {value} is out of range")))
}

fn fence(id: &JobId, value: i64, column: &str) -> Result<Fence, StoreError> {
    Fence::try_from(value).map_err(|f| corrupt(id, format!("stored {column} {f} is negative")))
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    id: &JobId,
    row: &'a Row,
    index: usize,
) -> Result<T, StoreError> {
    row.try_get(index).map_err(|e| {
        corrupt(
            id,
            format!(
                "stored column {} cannot be read: {e}",
                row.columns()[index].name()
            ),
        )
    })
}

/// Reads a job from `row`, whose columns from `at` on are [`COLUMNS`].
pub(crate) fn decode(id: &JobId, row: &Row, at: usize) -> Result<Job, StoreError> {
    let owner: Option<String> = get(id, row, at)?;
    let owner = owner
        .map(Owner::stored)
        .transpose()
        .map_err(|e| corrupt(id, format!("stored owner: {e}")))?;
    let queue: String = get(id, row, at + 5)?;
    let ended: Option<String> = get(id, row, at + 11)?;
    let (ended, waiting) =
        lease_ports::codec::stands(ended.as_deref(), "stored ended").map_err(|e| match e {
            StoreError::Corrupt(what) => corrupt(id, what.to_string()),
            other => other,
        })?;
    // Rows of `READ_COLUMNS` carry the policy; others (the step function's, the candidates')
    // do not, and their jobs keep the default (no statement of theirs writes it).
    let policy: Option<String> = if row.len() > at + 19 {
        get(id, row, at + 19)?
    } else {
        None
    };
    let on_parent_failure = policy
        .map(|p| lease_domain::OnParentFailure::parse(&p))
        .transpose()
        .map_err(|e| corrupt(id, format!("stored on_parent_failure: {e}")))?
        .unwrap_or_default();
    let run_at: Option<f64> = get(id, row, at + 7)?;
    let result_fence: Option<i64> = get(id, row, at + 13)?;
    let updated: Option<f64> = get(id, row, at + 14)?;
    let token: Option<Vec<u8>> = get(id, row, at + 15)?;
    let timeout: Option<f64> = get(id, row, at + 16)?;
    let group: Option<String> = get(id, row, at + 18)?;
    let timeout = timeout
        .map(|t| {
            lease_domain::Ttl::new(t)
                .map_err(|_| corrupt(id, format!("stored timeout {t} is not above 0")))
        })
        .transpose()?;
    Ok(Job {
        owner,
        until: time(id, get(id, row, at + 1)?, "until")?,
        fence: fence(id, get(id, row, at + 2)?, "fence")?,
        result: get(id, row, at + 3)?,
        done: get(id, row, at + 4)?,
        queue: QueueName::stored(queue).map_err(|e| corrupt(id, format!("stored queue: {e}")))?,
        priority: get(id, row, at + 6)?,
        run_at: run_at.map(|t| time(id, t, "run_at")).transpose()?,
        attempts: count(id, get(id, row, at + 8)?, "attempts")?,
        max_attempts: count(id, get(id, row, at + 9)?, "max_attempts")?,
        payload: get(id, row, at + 10)?,
        ended,
        error: get(id, row, at + 12)?,
        result_fence: result_fence
            .map(|f| fence(id, f, "result_fence"))
            .transpose()?,
        updated: updated.map(|t| time(id, t, "updated")).transpose()?,
        token: token
            .map(|t| TokenDigest::from_slice(&t))
            .transpose()
            .map_err(|e| corrupt(id, format!("stored token: {e}")))?,
        timeout,
        progress: get(id, row, at + 17)?,
        group: group
            .map(lease_domain::GroupKey::stored)
            .transpose()
            .map_err(|e| corrupt(id, format!("stored group: {e}")))?,
        waiting,
        // Read from `parents` by `workflow::with_parents` for the rows that name any.
        after: Vec::new(),
        on_parent_failure,
    })
}

/// Whether the row (of [`READ_COLUMNS`] from `at`) says the job has parents: a policy is
/// kept only for those.
pub(crate) fn names_parents(row: &Row, at: usize) -> bool {
    row.len() > at + 19 && matches!(row.try_get::<_, Option<&str>>(at + 19), Ok(Some(_)))
}

/// What the `ended` column holds: the job's end, or `waiting` while it waits for its parents
/// (kept there so the indexes of jobs that can run leave it out), else NULL.
fn stored_end(job: &Job) -> Option<&'static str> {
    match job.ended {
        Some(end) => Some(end.as_str()),
        None if job.waiting && !job.done => Some(lease_domain::Status::Waiting.as_str()),
        None => None,
    }
}

/// Reads a row whose first column is the id and the rest [`COLUMNS`].
pub(crate) fn decode_with_id(row: &Row, at: usize) -> Result<(JobId, Job), StoreError> {
    let id: String = row
        .try_get(at)
        .map_err(|e| StoreError::Corrupt(format!("stored job id: {e}").into()))?;
    let id = lease_ports::codec::job_id(id)?;
    let job = decode(&id, row, at + 1)?;
    Ok((id, job))
}

/// The values of one job's row, in the order of `$1..$21` of `insert` and `update`.
pub(crate) struct Encoded {
    id: String,
    owner: Option<String>,
    until: f64,
    fence: i64,
    result: Option<String>,
    done: bool,
    queue: String,
    priority: i64,
    run_at: Option<f64>,
    attempts: i64,
    max_attempts: i64,
    payload: Option<Vec<u8>>,
    ended: Option<&'static str>,
    error: Option<String>,
    result_fence: Option<i64>,
    updated: Option<f64>,
    token: Option<Vec<u8>>,
    timeout: Option<f64>,
    progress: Option<String>,
    group: Option<String>,
    leased_until: Option<f64>,
    /// The counts the write moves (migration 6), when it changes a job's end or the queue of
    /// a finished job: written by the same statement as the row.
    counted: Option<Counted>,
    /// The attempt the write ends (migration 17), kept by the same statement as the row.
    ended_attempt: Option<EndedAttempt>,
}

/// An ended attempt as the statements' parameters (`$26`..`$32`).
struct EndedAttempt {
    fence: i64,
    owner: String,
    started: Option<f64>,
    ended: Option<f64>,
    outcome: &'static str,
    error: Option<String>,
    trim: bool,
}

/// What a write that moves no count sends for them, and one that ends no attempt for it.
static NO_TEXT: Option<&str> = None;
static NO_TIME: Option<f64> = None;
static NO_NUMBER: Option<i64> = None;
static NO_TRIM: bool = false;

/// What a write moves in migration 6's counts: the end (and queue) the job leaves, the end
/// it enters, and the minute of its completion.
struct Counted {
    old_queue: String,
    old_end: Option<&'static str>,
    new_end: Option<&'static str>,
    completed: Option<f64>,
}

/// Where a job stands in migration 6's counts: its queue, its end (`None` while open) and
/// whether it is done; all a write needs of the row it replaces.
#[derive(Clone)]
pub(crate) struct Standing {
    queue: String,
    end: Option<&'static str>,
    done: bool,
}

impl Standing {
    pub(crate) fn of(job: &Job) -> Self {
        Self {
            queue: job.queue.as_str().to_owned(),
            end: if job.done {
                Some("done")
            } else {
                stored_end(job)
            },
            done: job.done,
        }
    }
}

impl Encoded {
    /// `next`, written over a row that stood at `before`: with the counts it moves, if any.
    pub(crate) fn from_to(id: &JobId, before: Option<Standing>, next: &Job) -> Self {
        let mut encoded = Self::new(id, next);
        if let Some(before) = before {
            let after = Standing::of(next);
            if before.end != after.end || (before.end.is_some() && before.queue != after.queue) {
                encoded.counted = Some(Counted {
                    old_queue: before.queue,
                    old_end: before.end,
                    new_end: after.end,
                    completed: (next.done && !before.done)
                        .then_some(next.updated)
                        .flatten()
                        .map(|t| lease_ports::overview::minute_of(t).get()),
                });
            }
        }
        encoded
    }

    /// The job's id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Whether the write moves a count or ends an attempt, and so takes the counting
    /// statement.
    pub(crate) fn counts(&self) -> bool {
        self.counted.is_some() || self.ended_attempt.is_some()
    }

    /// The write, keeping `ended` (the attempt its decision ended, if any) with its row.
    pub(crate) fn ending(mut self, ended: Option<&lease_domain::Attempt>) -> Self {
        self.set_ended(ended);
        self
    }

    /// Keeps `ended` (the attempt the write's decision ended, if any) with the row.
    pub(crate) fn set_ended(&mut self, ended: Option<&lease_domain::Attempt>) {
        self.ended_attempt = ended.map(|a| EndedAttempt {
            fence: i64::try_from(a.fence.get()).unwrap_or(i64::MAX),
            owner: a.owner.as_str().to_owned(),
            started: a.started.map(Timestamp::get),
            ended: a.ended.map(Timestamp::get),
            outcome: a.end.as_str(),
            error: a.error.clone(),
            trim: lease_domain::trims_attempts(a.fence),
        });
    }

    /// [`Encoded::params`] and the counts the write moves (`$22` the queue and `$23` the end
    /// it leaves, `$24` the end it enters, `$25` the minute of its completion).
    pub(crate) fn counted_params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut params = self.params().to_vec();
        match &self.counted {
            Some(c) => params.extend([
                &c.old_queue as &(dyn ToSql + Sync),
                &c.old_end,
                &c.new_end,
                &c.completed,
            ]),
            None => params.extend([
                &NO_TEXT as &(dyn ToSql + Sync),
                &NO_TEXT,
                &NO_TEXT,
                &NO_TIME,
            ]),
        }
        match &self.ended_attempt {
            Some(a) => params.extend([
                &a.fence as &(dyn ToSql + Sync),
                &a.owner,
                &a.started,
                &a.ended,
                &a.outcome,
                &a.error,
                &a.trim,
            ]),
            None => params.extend([
                &NO_NUMBER as &(dyn ToSql + Sync),
                &NO_TEXT,
                &NO_TIME,
                &NO_TIME,
                &NO_TEXT,
                &NO_TEXT,
                &NO_TRIM,
            ]),
        }
        params
    }

    pub(crate) fn new(id: &JobId, job: &Job) -> Self {
        Self {
            id: id.as_str().to_owned(),
            owner: job.owner.as_ref().map(|o| o.as_str().to_owned()),
            until: job.until.get(),
            fence: i64::from(job.fence),
            result: job.result.clone(),
            done: job.done,
            queue: job.queue.as_str().to_owned(),
            priority: job.priority,
            run_at: job.run_at.map(Timestamp::get),
            attempts: i64::from(job.attempts),
            max_attempts: i64::from(job.max_attempts),
            payload: job.payload.clone(),
            ended: stored_end(job),
            error: job.error.clone(),
            result_fence: job.result_fence.map(i64::from),
            updated: job.updated.map(Timestamp::get),
            token: job.token.map(|t| t.as_bytes().to_vec()),
            timeout: job.timeout.map(lease_domain::Ttl::get),
            progress: job.progress.clone(),
            group: job.group.as_ref().map(|g| g.as_str().to_owned()),
            leased_until: job.leased_until().map(Timestamp::get),
            counted: None,
            ended_attempt: None,
        }
    }

    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 21] {
        [
            &self.id,
            &self.owner,
            &self.until,
            &self.fence,
            &self.result,
            &self.done,
            &self.queue,
            &self.priority,
            &self.run_at,
            &self.attempts,
            &self.max_attempts,
            &self.payload,
            &self.ended,
            &self.error,
            &self.result_fence,
            &self.updated,
            &self.token,
            &self.timeout,
            &self.progress,
            &self.group,
            &self.leased_until,
        ]
    }
}

/// The server's clock as a time; a non-finite one is the server's fault.
pub(crate) fn stored_now(now: f64) -> Result<Timestamp, StoreError> {
    Timestamp::new(now).map_err(|_| {
        StoreError::Corrupt(format!("the server's clock reads {now}, not a time").into())
    })
}

/// A queue's settings row as a statement returned it (`queue, paused, paused_until,
/// concurrency, timeout, per_group, ordered`, then the paused groups and their ends as two
/// arrays).
pub(crate) fn decode_queue(row: &Row) -> Result<(QueueName, QueueSettings), StoreError> {
    let read = |e: tokio_postgres::Error| {
        StoreError::Corrupt(lease_ports::Detail::caused_by(
            format!("a queue's settings cannot be read: {e}"),
            e,
        ))
    };
    StoredQueue {
        queue: row.try_get(0).map_err(read)?,
        paused: row.try_get(1).map_err(read)?,
        paused_until: row.try_get(2).map_err(read)?,
        concurrency: row.try_get(3).map_err(read)?,
        timeout: row.try_get(4).map_err(read)?,
        per_group: row.try_get(5).map_err(read)?,
        ordered: row.try_get(6).map_err(read)?,
        paused_groups: {
            let groups: Vec<String> = row.try_get(7).map_err(read)?;
            let ends: Vec<Option<f64>> = row.try_get(8).map_err(read)?;
            groups.into_iter().zip(ends).collect()
        },
        rate: (
            row.try_get(9).map_err(read)?,
            row.try_get(10).map_err(read)?,
        ),
        rate_per_group: (
            row.try_get(11).map_err(read)?,
            row.try_get(12).map_err(read)?,
        ),
        fair: row.try_get(13).map_err(read)?,
    }
    .decode()
}

/// The columns of one kept attempt from `at` (fence, owner, started, ended, outcome, error),
/// as `Sql::attempts` and `Sql::attempts_all` read them.
pub(crate) fn stored_attempt(
    row: &Row,
    at: usize,
) -> Result<lease_ports::codec::StoredAttempt, tokio_postgres::Error> {
    Ok(lease_ports::codec::StoredAttempt {
        fence: row.try_get(at)?,
        owner: row.try_get(at + 1)?,
        started: row.try_get(at + 2)?,
        ended: row.try_get(at + 3)?,
        outcome: row.try_get(at + 4)?,
        error: row.try_get(at + 5)?,
    })
}

/// Many [`Encoded`] writes as the columns of [`update_many`].
pub(crate) struct Columns {
    id: Vec<String>,
    owner: Vec<Option<String>>,
    until: Vec<f64>,
    fence: Vec<i64>,
    result: Vec<Option<String>>,
    done: Vec<bool>,
    queue: Vec<String>,
    priority: Vec<i64>,
    run_at: Vec<Option<f64>>,
    attempts: Vec<i64>,
    max_attempts: Vec<i64>,
    payload: Vec<Option<Vec<u8>>>,
    ended: Vec<Option<&'static str>>,
    error: Vec<Option<String>>,
    result_fence: Vec<Option<i64>>,
    updated: Vec<Option<f64>>,
    token: Vec<Option<Vec<u8>>>,
    timeout: Vec<Option<f64>>,
    progress: Vec<Option<String>>,
    group: Vec<Option<String>>,
    leased_until: Vec<Option<f64>>,
    old_queue: Vec<Option<String>>,
    old_end: Vec<Option<&'static str>>,
    new_end: Vec<Option<&'static str>>,
    completed: Vec<Option<f64>>,
    a_fence: Vec<Option<i64>>,
    a_owner: Vec<Option<String>>,
    a_started: Vec<Option<f64>>,
    a_ended: Vec<Option<f64>>,
    a_outcome: Vec<Option<&'static str>>,
    a_error: Vec<Option<String>>,
    a_trim: Vec<bool>,
}

impl Columns {
    /// The columns of `writes`, row by row.
    pub(crate) fn of(writes: &[Encoded]) -> Self {
        let n = writes.len();
        let mut c = Self {
            id: Vec::with_capacity(n),
            owner: Vec::with_capacity(n),
            until: Vec::with_capacity(n),
            fence: Vec::with_capacity(n),
            result: Vec::with_capacity(n),
            done: Vec::with_capacity(n),
            queue: Vec::with_capacity(n),
            priority: Vec::with_capacity(n),
            run_at: Vec::with_capacity(n),
            attempts: Vec::with_capacity(n),
            max_attempts: Vec::with_capacity(n),
            payload: Vec::with_capacity(n),
            ended: Vec::with_capacity(n),
            error: Vec::with_capacity(n),
            result_fence: Vec::with_capacity(n),
            updated: Vec::with_capacity(n),
            token: Vec::with_capacity(n),
            timeout: Vec::with_capacity(n),
            progress: Vec::with_capacity(n),
            group: Vec::with_capacity(n),
            leased_until: Vec::with_capacity(n),
            old_queue: Vec::with_capacity(n),
            old_end: Vec::with_capacity(n),
            new_end: Vec::with_capacity(n),
            completed: Vec::with_capacity(n),
            a_fence: Vec::with_capacity(n),
            a_owner: Vec::with_capacity(n),
            a_started: Vec::with_capacity(n),
            a_ended: Vec::with_capacity(n),
            a_outcome: Vec::with_capacity(n),
            a_error: Vec::with_capacity(n),
            a_trim: Vec::with_capacity(n),
        };
        for w in writes {
            c.id.push(w.id.clone());
            c.owner.push(w.owner.clone());
            c.until.push(w.until);
            c.fence.push(w.fence);
            c.result.push(w.result.clone());
            c.done.push(w.done);
            c.queue.push(w.queue.clone());
            c.priority.push(w.priority);
            c.run_at.push(w.run_at);
            c.attempts.push(w.attempts);
            c.max_attempts.push(w.max_attempts);
            c.payload.push(w.payload.clone());
            c.ended.push(w.ended);
            c.error.push(w.error.clone());
            c.result_fence.push(w.result_fence);
            c.updated.push(w.updated);
            c.token.push(w.token.clone());
            c.timeout.push(w.timeout);
            c.progress.push(w.progress.clone());
            c.group.push(w.group.clone());
            c.leased_until.push(w.leased_until);
            let counted = w.counted.as_ref();
            c.old_queue.push(counted.map(|k| k.old_queue.clone()));
            c.old_end.push(counted.and_then(|k| k.old_end));
            c.new_end.push(counted.and_then(|k| k.new_end));
            c.completed.push(counted.and_then(|k| k.completed));
            let ended = w.ended_attempt.as_ref();
            c.a_fence.push(ended.map(|a| a.fence));
            c.a_owner.push(ended.map(|a| a.owner.clone()));
            c.a_started.push(ended.and_then(|a| a.started));
            c.a_ended.push(ended.and_then(|a| a.ended));
            c.a_outcome.push(ended.map(|a| a.outcome));
            c.a_error.push(ended.and_then(|a| a.error.clone()));
            c.a_trim.push(ended.is_some_and(|a| a.trim));
        }
        c
    }

    /// The parameters of [`update_many`].
    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 32] {
        [
            &self.id,
            &self.owner,
            &self.until,
            &self.fence,
            &self.result,
            &self.done,
            &self.queue,
            &self.priority,
            &self.run_at,
            &self.attempts,
            &self.max_attempts,
            &self.payload,
            &self.ended,
            &self.error,
            &self.result_fence,
            &self.updated,
            &self.token,
            &self.timeout,
            &self.progress,
            &self.group,
            &self.leased_until,
            &self.old_queue,
            &self.old_end,
            &self.new_end,
            &self.completed,
            &self.a_fence,
            &self.a_owner,
            &self.a_started,
            &self.a_ended,
            &self.a_outcome,
            &self.a_error,
            &self.a_trim,
        ]
    }
}
