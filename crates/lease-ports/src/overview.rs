//! What an operator's overview shows beyond `stats`: the jobs that wait for a worker now (and
//! since when the longest-waiting one has waited), and completions and refused writes per
//! minute.

use std::collections::BTreeMap;

use async_trait::async_trait;
use lease_domain::{Job, QueueName, Timestamp};

use crate::StoreError;

/// The jobs of one queue that wait for a worker at some `now` ([`Job::is_waiting_at`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DueRow {
    /// The queue.
    pub queue: QueueName,
    /// How many jobs wait.
    pub due: u64,
    /// The earliest [`Job::waiting_since`] among them; `None` when none of them knows.
    pub oldest_since: Option<Timestamp>,
}

/// What happened in one queue in one minute.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MinuteRow {
    /// The queue.
    pub queue: QueueName,
    /// The minute's start: a whole multiple of 60 seconds.
    pub minute: Timestamp,
    /// Jobs completed in it (a done job's last change).
    pub completed: u64,
    /// Attempts that failed in it (their holder's failure, a timeout's included), as the
    /// attempts kept say.
    pub failed: u64,
    /// Jobs dead now whose last change (their death) fell in it.
    pub dead: u64,
    /// Jobs cancelled now whose last change (their cancel) fell in it.
    pub cancelled: u64,
    /// Holder writes refused in it, as the audit trail recorded them (0 without one).
    pub refused: u64,
}

/// What one count of [`MinuteRow`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// [`MinuteRow::completed`].
    Completed,
    /// [`MinuteRow::failed`].
    Failed,
    /// [`MinuteRow::dead`].
    Dead,
    /// [`MinuteRow::cancelled`].
    Cancelled,
    /// [`MinuteRow::refused`].
    Refused,
}

/// A store that can summarise itself for an operator.
#[async_trait]
pub trait Overview: Send + Sync {
    /// Each queue with jobs waiting at `now`, in queue order.
    async fn due(&self, now: Timestamp) -> Result<Vec<DueRow>, StoreError>;

    /// Each queue and minute at or after `since`'s minute with a completion, a failed
    /// attempt, a job now dead or cancelled, or a recorded refusal, in queue then minute
    /// order. A failure or a refusal counts in the queue of its job (one for a job that no
    /// longer exists is left out).
    async fn activity(&self, since: Timestamp) -> Result<Vec<MinuteRow>, StoreError>;
}

/// The start of `t`'s minute.
#[must_use]
pub fn minute_of(t: Timestamp) -> Timestamp {
    Timestamp::new((t.get() / 60.0).floor() * 60.0).unwrap_or(t)
}

/// Groups waiting jobs into [`DueRow`]s (the memory store's way, and the rule the SQL of the
/// other stores must match).
#[must_use]
pub fn tally_due<'a>(jobs: impl IntoIterator<Item = &'a Job>, now: Timestamp) -> Vec<DueRow> {
    let mut rows: BTreeMap<QueueName, (u64, Option<Timestamp>)> = BTreeMap::new();
    for job in jobs.into_iter().filter(|j| j.is_waiting_at(now)) {
        let (count, oldest) = rows.entry(job.queue.clone()).or_default();
        *count += 1;
        if let Some(since) = job.waiting_since() {
            if oldest.is_none_or(|o| since < o) {
                *oldest = Some(since);
            }
        }
    }
    rows.into_iter()
        .map(|(queue, (due, oldest_since))| DueRow {
            queue,
            due,
            oldest_since,
        })
        .collect()
}

/// Counts completions (done jobs by their last change), jobs dead or cancelled (by their last
/// change), failed attempts (by their end, in their job's queue) and refusals (by their time,
/// in their job's queue) per minute from `since`'s minute.
#[must_use]
pub fn tally_activity<'a>(
    jobs: impl IntoIterator<Item = &'a Job>,
    failed: impl IntoIterator<Item = (QueueName, Timestamp)>,
    refusals: impl IntoIterator<Item = (QueueName, Timestamp)>,
    since: Timestamp,
) -> Vec<MinuteRow> {
    let from = minute_of(since);
    let ends = jobs.into_iter().filter_map(|job| {
        let counted = match (job.done, job.ended) {
            (true, _) => Counted::Completed,
            (false, Some(lease_domain::Ended::Dead)) => Counted::Dead,
            (false, Some(lease_domain::Ended::Cancelled)) => Counted::Cancelled,
            (false, None) => return None,
        };
        Some((job.queue.clone(), job.updated?, counted))
    });
    let failed = failed
        .into_iter()
        .map(|(queue, at)| (queue, at, Counted::Failed));
    let refused = refusals
        .into_iter()
        .map(|(queue, at)| (queue, at, Counted::Refused));
    minute_rows(
        ends.chain(failed)
            .chain(refused)
            .filter(|(_, at, _)| minute_of(*at) >= from)
            .map(|(queue, at, counted)| (queue, minute_of(at), counted, 1)),
    )
}

/// [`MinuteRow`]s from counts of (queue, minute start, what, how many), summed where a queue
/// and minute repeat, in queue then minute order.
#[must_use]
pub fn minute_rows(
    counts: impl IntoIterator<Item = (QueueName, Timestamp, Counted, u64)>,
) -> Vec<MinuteRow> {
    let mut rows: BTreeMap<(QueueName, u64), MinuteRow> = BTreeMap::new();
    for (queue, minute, counted, n) in counts {
        // Minutes are whole multiples of 60: their order is the order of their bits' keys
        // only for one sign, so the sort below decides; the key only merges equal minutes.
        let row = rows
            .entry((queue.clone(), minute.get().to_bits()))
            .or_insert(MinuteRow {
                queue,
                minute,
                ..MinuteRow::default()
            });
        let count = match counted {
            Counted::Completed => &mut row.completed,
            Counted::Failed => &mut row.failed,
            Counted::Dead => &mut row.dead,
            Counted::Cancelled => &mut row.cancelled,
            Counted::Refused => &mut row.refused,
        };
        *count += n;
    }
    let mut out: Vec<MinuteRow> = rows.into_values().collect();
    out.sort_by(|a, b| {
        a.queue
            .cmp(&b.queue)
            .then(a.minute.get().total_cmp(&b.minute.get()))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_domain::{EnqueueSpec, Owner};

    fn at(t: f64) -> Timestamp {
        Timestamp::new(t).unwrap()
    }

    #[test]
    fn minutes_start_at_whole_multiples_of_sixty_below_the_time() {
        assert_eq!(minute_of(at(119.9)), at(60.0));
        assert_eq!(minute_of(at(120.0)), at(120.0));
        assert_eq!(minute_of(at(-0.5)), at(-60.0));
    }

    #[test]
    fn waiting_jobs_are_counted_per_queue_with_the_earliest_known_time() {
        let mail = QueueName::new("mail").unwrap();
        let job = |enqueued: Option<f64>| {
            Job::enqueued(
                &EnqueueSpec {
                    queue: mail.clone(),
                    enqueued_at: enqueued.map(at),
                    ..EnqueueSpec::default()
                },
                None,
            )
        };
        let done = Job {
            done: true,
            ..job(Some(1.0))
        };
        let live = Job {
            owner: Some(Owner::new("w").unwrap()),
            until: at(100.0),
            ..job(Some(2.0))
        };
        let jobs = [job(Some(30.0)), job(None), job(Some(20.0)), done, live];
        assert_eq!(
            tally_due(&jobs, at(50.0)),
            [DueRow {
                queue: mail,
                due: 3,
                oldest_since: Some(at(20.0))
            }]
        );
    }

    #[test]
    fn completions_and_refusals_fall_in_their_minutes_from_the_first_asked() {
        let q = QueueName::new("q").unwrap();
        let done = |t: f64| Job {
            done: true,
            updated: Some(at(t)),
            queue: q.clone(),
            ..Job::new()
        };
        let jobs = [done(59.0), done(61.0), done(65.0), Job::new()];
        let rows = tally_activity(
            &jobs,
            [],
            [(q.clone(), at(62.0)), (q.clone(), at(130.0))],
            at(60.5),
        );
        let got: Vec<(f64, u64, u64)> = rows
            .iter()
            .map(|r| (r.minute.get(), r.completed, r.refused))
            .collect();
        assert_eq!(got, [(60.0, 2, 1), (120.0, 0, 1)]);
    }

    #[test]
    fn dead_and_cancelled_jobs_and_failed_attempts_fall_in_their_minutes() {
        let q = QueueName::new("q").unwrap();
        let ended = |end: lease_domain::Ended, t: f64| Job {
            ended: Some(end),
            updated: Some(at(t)),
            queue: q.clone(),
            ..Job::new()
        };
        let jobs = [
            ended(lease_domain::Ended::Dead, 61.0),
            ended(lease_domain::Ended::Cancelled, 62.0),
            ended(lease_domain::Ended::Cancelled, 125.0),
        ];
        let rows = tally_activity(
            &jobs,
            [(q.clone(), at(63.0)), (q.clone(), at(10.0))],
            [],
            at(60.0),
        );
        let got: Vec<(f64, u64, u64, u64, u64)> = rows
            .iter()
            .map(|r| (r.minute.get(), r.completed, r.failed, r.dead, r.cancelled))
            .collect();
        assert_eq!(got, [(60.0, 0, 1, 1, 1), (120.0, 0, 0, 0, 1)]);
    }
}
