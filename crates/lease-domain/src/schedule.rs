//! Periodic schedules: what a schedule is, which of its ticks a pass enqueues (the catch-up
//! policy after downtime), and the id of a tick's job. When a tick falls is the calendar's (a
//! cron expression in a time zone, `lease-schedule`); these rules take the ticks as instants.
//!
//! Exactly one job per tick, however many schedulers run: a tick's job id is a function of the
//! schedule's name and the tick's time, and a store records the last tick a schedule fired in the
//! same transaction as that tick's job (`fire`), compared with the one the scheduler read, so a
//! scheduler that lost the race enqueues nothing and a tick is never fired twice, not even after
//! its job was purged.

use std::fmt;

use crate::queue::EnqueueSpec;
use crate::values::{InputError, JobId, Timestamp};

/// The name of a schedule: 1 to [`ScheduleName::MAX_BYTES`] bytes, no NUL, no `@` (which
/// separates the name from the tick in a tick's job id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScheduleName(String);

impl ScheduleName {
    /// The longest name, in bytes (a tick's job id adds 21).
    pub const MAX_BYTES: usize = 200;

    /// Checks and wraps a name.
    ///
    /// # Errors
    /// [`InputError::InvalidSetting`] naming what is wrong.
    pub fn new(name: impl Into<String>) -> Result<Self, InputError> {
        let name = name.into();
        let bad = |why: &str| {
            Err(InputError::InvalidSetting(format!(
                "schedule name {name:?} {why}"
            )))
        };
        if name.is_empty() {
            return bad("is empty");
        }
        if name.len() > Self::MAX_BYTES {
            return bad(&format!(
                "is {} bytes, over {}",
                name.len(),
                Self::MAX_BYTES
            ));
        }
        if name.contains('\0') || name.contains('@') {
            return bad("contains a NUL or an @");
        }
        Ok(Self(name))
    }

    /// The name as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ScheduleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a pass does with the ticks a schedule missed (while no scheduler ran).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// One job, for the most recent missed tick (the default).
    Latest,
    /// No job for a missed tick: only a tick at most [`ON_TIME`] seconds old is enqueued.
    Skip,
    /// A job for each missed tick, the most recent ones, at most this many (1 to
    /// [`MAX_CATCH_UP`]).
    All(u32),
}

/// How late a tick may be enqueued and still count as on time for [`CatchUp::Skip`].
pub const ON_TIME: f64 = 60.0;

/// The most missed ticks [`CatchUp::All`] enqueues in one pass.
pub const MAX_CATCH_UP: u32 = 1000;

impl CatchUp {
    /// Reads `latest`, `none`, `all` (up to [`MAX_CATCH_UP`]) or `all:N`.
    ///
    /// # Errors
    /// [`InputError::InvalidSetting`] naming the text.
    pub fn parse(text: &str) -> Result<Self, InputError> {
        let bad = || {
            InputError::InvalidSetting(format!(
                "catch-up {text:?} is not one of latest, none, all or all:N (N from 1 to {MAX_CATCH_UP})"
            ))
        };
        match text {
            "latest" => Ok(Self::Latest),
            "none" => Ok(Self::Skip),
            "all" => Ok(Self::All(MAX_CATCH_UP)),
            other => {
                let n: u32 = other
                    .strip_prefix("all:")
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(bad)?;
                if (1..=MAX_CATCH_UP).contains(&n) {
                    Ok(Self::All(n))
                } else {
                    Err(bad())
                }
            }
        }
    }

    /// The policy as [`CatchUp::parse`] reads it.
    #[must_use]
    pub fn text(self) -> String {
        match self {
            Self::Latest => "latest".to_owned(),
            Self::Skip => "none".to_owned(),
            Self::All(n) => format!("all:{n}"),
        }
    }

    /// How many of the most recent due ticks a pass needs to see to decide.
    #[must_use]
    pub fn ticks_wanted(self) -> usize {
        match self {
            Self::Latest | Self::Skip => 1,
            Self::All(n) => usize::try_from(n).unwrap_or(1),
        }
    }
}

/// What a schedule says: when (a cron expression in a time zone) and what job each tick makes.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSpec {
    /// Its name.
    pub name: ScheduleName,
    /// Five cron fields, or a shorthand such as `@hourly` (checked by the calendar).
    pub cron: String,
    /// An IANA time zone (`UTC`, `Europe/Paris`; checked by the calendar).
    pub zone: String,
    /// The job each tick makes: queue, priority, payload, attempts, timeout (its
    /// `enqueued_at` is the tick, its id [`tick_job_id`]).
    pub job: EnqueueSpec,
    /// What a pass does with missed ticks.
    pub catch_up: CatchUp,
}

impl ScheduleSpec {
    /// The job it makes at `at` (a tick, or a run asked for by hand): its job, enqueued at
    /// `at`, due at once, never replacing a finished job.
    #[must_use]
    pub fn job_at(&self, at: Timestamp) -> EnqueueSpec {
        EnqueueSpec {
            enqueued_at: Some(at),
            run_at: None,
            replace_finished: false,
            ..self.job.clone()
        }
    }
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// What it says.
    pub spec: ScheduleSpec,
    /// Starts at 1; every change of the spec adds one (a pass that read an older one fires
    /// nothing).
    pub version: u64,
    /// When it was made: its first tick is the first one after this.
    pub created: Timestamp,
    /// The most recent tick a pass fired (enqueued or, by the catch-up policy, skipped).
    pub last_tick: Option<Timestamp>,
}

impl Schedule {
    /// The instant after which ticks are due: the last tick fired, else the schedule's making.
    #[must_use]
    pub fn since(&self) -> Timestamp {
        self.last_tick.unwrap_or(self.created)
    }
}

/// A schedule as a new spec leaves it: a new schedule made at `now`, or the stored one with
/// its spec replaced (its making, its last tick and so the ticks it already fired are kept).
#[must_use]
pub fn decide_put_schedule(
    current: Option<&Schedule>,
    spec: ScheduleSpec,
    now: Timestamp,
) -> Schedule {
    match current {
        Some(stored) => Schedule {
            spec,
            version: stored.version + 1,
            ..stored.clone()
        },
        None => Schedule {
            spec,
            version: 1,
            created: now,
            last_tick: None,
        },
    }
}

/// What a pass that read a schedule at `version` with last tick `read` does to it by firing
/// `tick`: the schedule with its new last tick, or `None` when the schedule is gone or no
/// longer as the pass read it (another pass fired first, or it was changed): write nothing.
#[must_use]
pub fn decide_fire(
    current: Option<&Schedule>,
    version: u64,
    read: Option<Timestamp>,
    tick: Timestamp,
) -> Option<Schedule> {
    let schedule = current?;
    (schedule.version == version && schedule.last_tick == read && read.is_none_or(|r| tick > r))
        .then(|| Schedule {
            last_tick: Some(tick),
            ..schedule.clone()
        })
}

/// Which ticks a pass at `now` enqueues, from `recent`: the most recent due ticks (after
/// [`Schedule::since`], at or before `now`), oldest first, at most
/// [`CatchUp::ticks_wanted`] of them. The schedule's last tick becomes the newest of them
/// either way.
#[must_use]
pub fn decide_ticks(recent: &[Timestamp], now: Timestamp, catch_up: CatchUp) -> Vec<Timestamp> {
    let Some(newest) = recent.last().copied() else {
        return Vec::new();
    };
    match catch_up {
        CatchUp::Latest => vec![newest],
        CatchUp::Skip if now.get() - newest.get() <= ON_TIME => vec![newest],
        CatchUp::Skip => Vec::new(),
        CatchUp::All(n) => {
            let keep = usize::try_from(n).unwrap_or(usize::MAX).min(recent.len());
            recent[recent.len() - keep..].to_vec()
        }
    }
}

/// The job id of a schedule's tick: `NAME@YYYY-MM-DDTHH:MM:SSZ` (the tick in UTC, whole
/// seconds), the same in every scheduler.
///
/// # Errors
/// [`InputError`] if the id is not a valid job id (it always is for a checked name).
pub fn tick_job_id(name: &ScheduleName, tick: Timestamp) -> Result<JobId, InputError> {
    JobId::new(format!("{name}@{}", utc_text(tick)))
}

/// The job id of a run of a schedule asked for by hand at `at` (`lease schedule run`):
/// `NAME@run-YYYY-MM-DDTHH:MM:SSZ`, never a tick's id; runs asked for within one second are
/// one job.
///
/// # Errors
/// [`InputError`] if the id is not a valid job id (it always is for a checked name).
pub fn run_job_id(name: &ScheduleName, at: Timestamp) -> Result<JobId, InputError> {
    JobId::new(format!("{name}@run-{}", utc_text(at)))
}

/// A time as `YYYY-MM-DDTHH:MM:SSZ`, whole seconds rounded down (the civil calendar from days
/// since the epoch, Howard Hinnant's `civil_from_days`).
#[must_use]
pub fn utc_text(t: Timestamp) -> String {
    // Finite by construction; far outside any year a cron reaches it is only odd-looking.
    let secs = t.get().floor();
    let days = (secs / 86_400.0).floor();
    let rem = secs - days * 86_400.0;
    let (h, m, s) = (
        (rem / 3600.0).floor(),
        ((rem % 3600.0) / 60.0).floor(),
        rem % 60.0,
    );
    let z = days + 719_468.0;
    let era = (z / 146_097.0).floor();
    let doe = z - era * 146_097.0;
    let yoe = ((doe - (doe / 1460.0).floor() + (doe / 36_524.0).floor()
        - (doe / 146_096.0).floor())
        / 365.0)
        .floor();
    let doy = doe - (365.0 * yoe + (yoe / 4.0).floor() - (yoe / 100.0).floor());
    let mp = ((5.0 * doy + 2.0) / 153.0).floor();
    let d = doy - ((153.0 * mp + 2.0) / 5.0).floor() + 1.0;
    let month = if mp < 10.0 { mp + 3.0 } else { mp - 9.0 };
    let year = yoe + era * 400.0 + if month <= 2.0 { 1.0 } else { 0.0 };
    format!("{year:04}-{month:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}
