//! Times for people: shown as RFC 3339 in UTC with the distance from now
//! (`2026-12-01T14:43:21Z (in 29 s)`), and read as Unix seconds or RFC 3339 wherever a flag
//! takes a time. `--json` keeps Unix seconds.

/// A time as a person reads it: RFC 3339 in UTC to the second, and how far it is from `now`.
/// A time too far out for the calendar (beyond the year 9999) is shown as Unix seconds.
pub(crate) fn shown(at: f64, now: f64) -> String {
    format!("{} ({})", calendar(at), distance(at - now))
}

/// RFC 3339 in UTC, to the second (`2026-12-01T14:43:21Z`), or the Unix seconds when the time
/// is out of the calendar's range.
pub(crate) fn calendar(at: f64) -> String {
    jiff::SignedDuration::try_from_secs_f64(at)
        .ok()
        .and_then(|d| jiff::Timestamp::from_duration(d).ok())
        .and_then(|t| t.round(jiff::Unit::Second).ok())
        .map_or_else(|| format!("{at} (Unix seconds)"), |t| format!("{t:.0}"))
}

/// How far a moment is from now: `in 29 s`, `3 min ago`, `now`.
pub(crate) fn distance(seconds: f64) -> String {
    let magnitude = seconds.abs();
    let amount = if magnitude < 0.05 {
        return "now".to_owned();
    } else if magnitude < 10.0 {
        format!("{magnitude:.1} s")
    } else if magnitude < 120.0 {
        format!("{magnitude:.0} s")
    } else if magnitude < 2.0 * 3600.0 {
        format!("{:.0} min", magnitude / 60.0)
    } else if magnitude < 48.0 * 3600.0 {
        format!("{:.0} h", magnitude / 3600.0)
    } else {
        format!("{:.0} days", magnitude / 86_400.0)
    };
    if seconds > 0.0 {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

/// Reads a time flag: Unix seconds (`1767225600`, `1767225600.5`) or an RFC 3339 time with
/// its offset (`2026-01-01T00:00:00Z`, `2026-01-01T01:00:00+01:00`, fractions allowed). A
/// number that is not finite is passed on, to be refused by name with the command's other
/// checks of its input.
///
/// # Errors
/// A message naming what was expected; the value itself is shown by clap.
pub(crate) fn parse(text: &str) -> Result<f64, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Ok(seconds);
    }
    let stamp: jiff::Timestamp = text.parse().map_err(|e| {
        format!(
            "expected Unix seconds or an RFC 3339 time with its offset, such as \
             2026-12-01T14:43:21Z ({e})"
        )
    })?;
    Ok(stamp.as_duration().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_shown_in_utc_to_the_second_with_their_distance() {
        assert_eq!(
            shown(1_796_135_801.937_744_6, 1_796_135_772.7),
            "2026-12-01T14:36:42Z (in 29 s)"
        );
        assert_eq!(shown(0.0, 0.0), "1970-01-01T00:00:00Z (now)");
        assert_eq!(shown(-1.0, 0.0), "1969-12-31T23:59:59Z (1.0 s ago)");
        assert_eq!(
            shown(1.0e20, 0.0).split(' ').next(),
            Some("100000000000000000000")
        );
    }

    #[test]
    fn distances_are_in_the_unit_a_person_would_use() {
        assert_eq!(distance(0.6), "in 0.6 s");
        assert_eq!(distance(-29.4), "29 s ago");
        assert_eq!(distance(300.0), "in 5 min");
        assert_eq!(distance(-3.0 * 3600.0), "3 h ago");
        assert_eq!(distance(5.0 * 86_400.0), "in 5 days");
    }

    #[test]
    fn a_time_flag_takes_unix_seconds_or_rfc_3339_with_an_offset() {
        assert_eq!(parse("1767225600"), Ok(1_767_225_600.0));
        assert_eq!(parse("1767225600.25"), Ok(1_767_225_600.25));
        assert_eq!(parse("-5"), Ok(-5.0));
        assert_eq!(parse("2026-01-01T00:00:00Z"), Ok(1_767_225_600.0));
        assert_eq!(parse("2026-01-01T01:00:00+01:00"), Ok(1_767_225_600.0));
        assert_eq!(parse("2026-01-01T00:00:00.5Z"), Ok(1_767_225_600.5));
        for bad in [
            "tomorrow",
            "2026-01-01",
            "2026-01-01T00:00:00",
            "1 hour",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was read as a time");
        }
        // Left for the command's own check, which names the flag.
        assert!(parse("NaN").is_ok_and(f64::is_nan));
    }
}
