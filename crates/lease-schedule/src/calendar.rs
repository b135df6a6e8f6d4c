//! When a schedule's ticks fall: a cron expression (five fields, or `@yearly`, `@monthly`,
//! `@weekly`, `@daily`, `@hourly`) read by croner, in an IANA time zone from jiff's bundled
//! database, so every scheduler puts every tick at the same instant.
//!
//! Daylight saving, as croner follows the Open Cron Pattern Specification: in a spring-forward
//! gap, a fixed-time expression (`30 2 * * *`) fires at the first minute after the gap, on the
//! same day, and an interval expression (`*/15 * * * *`) skips the minutes that do not exist; in
//! a fall-back repeat, a fixed-time expression fires once, at the first occurrence, and an
//! interval expression fires at each occurrence. Ticks are whole minutes.

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use jiff::Zoned;
use jiff::tz::{TimeZone, TimeZoneDatabase};
use lease_domain::{InputError, ScheduleSpec, Timestamp};

/// A checked cron expression in a checked time zone.
#[derive(Debug, Clone)]
pub struct Calendar {
    cron: Cron,
    zone: TimeZone,
}

/// The longest cron expression taken, in bytes.
pub const MAX_CRON_BYTES: usize = 200;

impl Calendar {
    /// Reads `cron` in the zone named `zone`.
    ///
    /// # Errors
    /// [`InputError::InvalidSetting`] naming the expression or the zone and what is wrong.
    pub fn new(cron: &str, zone: &str) -> Result<Self, InputError> {
        if cron.len() > MAX_CRON_BYTES {
            return Err(InputError::InvalidSetting(format!(
                "cron expression is {} bytes, over {MAX_CRON_BYTES}",
                cron.len()
            )));
        }
        let parsed = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .build()
            .parse(cron)
            .map_err(|e| {
                InputError::InvalidSetting(format!("cron expression {cron:?} is not valid: {e}"))
            })?;
        let zone = zones().get(zone).map_err(|_| {
            InputError::InvalidSetting(format!(
                "time zone {zone:?} is not an IANA time zone name (such as UTC or Europe/Paris)"
            ))
        })?;
        Ok(Self { cron: parsed, zone })
    }

    /// The calendar of a schedule.
    ///
    /// # Errors
    /// As [`Calendar::new`].
    pub fn of(spec: &ScheduleSpec) -> Result<Self, InputError> {
        Self::new(&spec.cron, &spec.zone)
    }

    fn zoned(&self, t: Timestamp) -> Option<Zoned> {
        let d = jiff::SignedDuration::try_from_secs_f64(t.get()).ok()?;
        jiff::Timestamp::from_duration(d)
            .ok()
            .map(|t| t.to_zoned(self.zone.clone()))
    }

    fn instant(z: &Zoned) -> Option<Timestamp> {
        // Ticks are whole minutes, far inside the range an f64 holds exactly.
        Timestamp::new(z.timestamp().as_duration().as_secs_f64()).ok()
    }

    /// The first tick strictly after `t`, if there is one.
    #[must_use]
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let from = self.zoned(t)?;
        let next = self.cron.find_next_occurrence(&from, false).ok()?;
        Self::instant(&next)
    }

    /// The most recent ticks after `since` and at or before `now`, at most `n`, oldest first.
    #[must_use]
    pub fn recent(&self, since: Timestamp, now: Timestamp, n: usize) -> Vec<Timestamp> {
        let mut found = Vec::new();
        let Some(mut at) = self.zoned(now) else {
            return found;
        };
        let mut inclusive = true;
        while found.len() < n {
            let Ok(tick) = self.cron.find_previous_occurrence(&at, inclusive) else {
                break;
            };
            let Some(instant) = Self::instant(&tick) else {
                break;
            };
            if instant <= since {
                break;
            }
            found.push(instant);
            at = tick;
            inclusive = false;
        }
        found.reverse();
        found
    }
}

/// The bundled IANA database (the same in every build of this version, whatever the machine).
fn zones() -> &'static TimeZoneDatabase {
    static ZONES: std::sync::OnceLock<TimeZoneDatabase> = std::sync::OnceLock::new();
    ZONES.get_or_init(TimeZoneDatabase::bundled)
}

/// Whether `zone` names a time zone of the bundled database.
#[must_use]
pub fn is_zone(zone: &str) -> bool {
    zones().get(zone).is_ok()
}
