//! Rate limits: at most N leases granted in any window of length PERIOD (a sliding window,
//! not fixed buckets, which would allow 2N across a boundary), of a whole queue or of each of
//! its groups. Pure: a store keeps a log of grants, each as the time it stops counting (its
//! expiry: the grant's time plus the period), reads the ones that have not expired inside the
//! claim's own transaction, and asks [`Rate::room`] how many more it may grant.
//!
//! Why the log's expiries are enough: a claim at `now` grants only while fewer than N grants
//! expire after `now` (granted within the period before `now`, or, under a caller's clock that
//! went back, after it). Take any window of length PERIOD and the grant in it decided last:
//! every other grant of the window was in the log then, and expires after that grant's time
//! (two times of one window are less than PERIOD apart), so that claim counted them all and the
//! window holds at most N.

use std::fmt;

use crate::values::{InputError, Timestamp};

/// The longest period: a day.
const MAX_PERIOD_SECONDS: f64 = 86_400.0;

/// The shortest period: a millisecond (the resolution of a stored time).
const MIN_PERIOD_SECONDS: f64 = 0.001;

/// A rate limit: at most `count` leases granted in any window of `period` seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    count: u32,
    period: f64,
}

impl Rate {
    /// At most `count` grants in any `period` seconds.
    ///
    /// # Errors
    /// [`InputError::InvalidSetting`] for a count of 0, or a period that is not a finite number
    /// of seconds from a millisecond to a day.
    pub fn new(count: u32, period: f64) -> Result<Self, InputError> {
        if count == 0 {
            return Err(InputError::InvalidSetting(
                "a rate's count must be 1 or more (give `none` to remove the rate)".into(),
            ));
        }
        if !period.is_finite() || !(MIN_PERIOD_SECONDS..=MAX_PERIOD_SECONDS).contains(&period) {
            return Err(InputError::InvalidSetting(format!(
                "a rate's period must be from 1ms to 24h, not {period} s"
            )));
        }
        Ok(Self { count, period })
    }

    /// Reads `N/PERIOD`, PERIOD a number with a unit: `500ms`, `1s`, `1.5m`, `1h`.
    ///
    /// # Errors
    /// [`InputError::InvalidSetting`] naming what is wrong: no `/`, a count that is not a
    /// whole number of 1 or more, a period without a unit or out of range.
    pub fn parse(text: &str) -> Result<Self, InputError> {
        let bad = |why: String| InputError::InvalidSetting(format!("rate {text:?}: {why}"));
        let Some((count, period)) = text.split_once('/') else {
            return Err(bad(
                "expected N/PERIOD, such as 100/1m or 5/500ms (a bare number has no period)".into(),
            ));
        };
        let count: u32 = count
            .trim()
            .parse()
            .map_err(|_| bad(format!("the count {count:?} is not a whole number")))?;
        let period = period.trim();
        let split = period
            .find(|c: char| c.is_ascii_alphabetic())
            .ok_or_else(|| bad(format!("the period {period:?} has no unit (ms, s, m or h)")))?;
        let (amount, unit) = period.split_at(split);
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3_600.0,
            other => return Err(bad(format!("unknown unit {other:?} (ms, s, m or h)"))),
        };
        let amount: f64 = amount
            .parse()
            .map_err(|_| bad(format!("the period {period:?} is not a number with a unit")))?;
        if !(amount.is_finite() && amount > 0.0) {
            return Err(bad(format!("the period {period:?} must be more than 0")));
        }
        Self::new(count, amount * scale).map_err(|e| bad(e.to_string()))
    }

    /// Reads a stored rate back.
    ///
    /// # Errors
    /// [`InputError::InvalidSetting`] for a count or period no store writes.
    pub fn stored(count: i64, period: f64) -> Result<Self, InputError> {
        let count = u32::try_from(count)
            .map_err(|_| InputError::InvalidSetting(format!("rate count {count} out of range")))?;
        Self::new(count, period)
    }

    /// The most grants in a window.
    #[must_use]
    pub fn count(self) -> u32 {
        self.count
    }

    /// The window, in seconds.
    #[must_use]
    pub fn period(self) -> f64 {
        self.period
    }

    /// When a grant made at `now` stops counting.
    #[must_use]
    pub fn expiry(self, now: Timestamp) -> Timestamp {
        // A period is at most a day, so this stays finite for any timestamp.
        Timestamp::new(now.get() + self.period).unwrap_or(now)
    }

    /// How many more leases may be granted at `now`, given the expiries of the grants logged
    /// (any order; those expired by `now` do not count).
    #[must_use]
    pub fn room(self, expiries: &[Timestamp], now: Timestamp) -> usize {
        let counting = expiries.iter().filter(|e| e.get() > now.get()).count();
        self.room_after(u64::try_from(counting).unwrap_or(u64::MAX))
    }

    /// How many more leases may be granted when `counting` grants still count (a store that
    /// keeps a count of its log's grants, having forgotten the expired ones, passes it).
    #[must_use]
    pub fn room_after(self, counting: u64) -> usize {
        usize::try_from(u64::from(self.count).saturating_sub(counting)).unwrap_or(usize::MAX)
    }

    /// When the next grant may be made, if none may be made at `now`: when enough of the
    /// counting grants have expired to leave one place.
    #[must_use]
    pub fn opens_at(self, expiries: &[Timestamp], now: Timestamp) -> Option<Timestamp> {
        if self.room(expiries, now) > 0 {
            return None;
        }
        let mut counting: Vec<f64> = expiries
            .iter()
            .map(|e| e.get())
            .filter(|e| *e > now.get())
            .collect();
        counting.sort_by(f64::total_cmp);
        let count = usize::try_from(self.count).unwrap_or(usize::MAX);
        // `counting.len() >= count`: the (len - count + 1)th to expire leaves the place.
        counting
            .get(counting.len() - count)
            .and_then(|at| Timestamp::new(*at).ok())
    }
}

impl fmt::Display for Rate {
    /// `N/PERIOD` in the largest unit that gives a whole number (as [`Rate::parse`] reads it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = (self.period * 1000.0).round();
        let period = if ms % 3_600_000.0 == 0.0 {
            format!("{}h", ms / 3_600_000.0)
        } else if ms % 60_000.0 == 0.0 {
            format!("{}m", ms / 60_000.0)
        } else if ms % 1000.0 == 0.0 {
            format!("{}s", ms / 1000.0)
        } else if (self.period * 1000.0 - ms).abs() < 1e-9 {
            format!("{ms}ms")
        } else {
            format!("{}s", self.period)
        };
        write!(f, "{}/{period}", self.count)
    }
}
