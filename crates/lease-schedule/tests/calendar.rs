//! The calendar: cron expressions and their shorthands in IANA time zones, across both
//! daylight-saving changes of a year, and bad expressions and zones refused by name.

use lease_domain::Timestamp;
use lease_schedule::Calendar;

fn at(rfc3339: &str) -> Timestamp {
    let t: jiff::Timestamp = rfc3339.parse().unwrap();
    Timestamp::new(t.as_second() as f64).unwrap()
}

fn text(t: Timestamp) -> String {
    jiff::SignedDuration::try_from_secs_f64(t.get())
        .ok()
        .and_then(|d| jiff::Timestamp::from_duration(d).ok())
        .unwrap()
        .to_string()
}

/// Every tick after `from` up to `to`, as RFC 3339 in UTC.
fn ticks(calendar: &Calendar, from: &str, to: &str) -> Vec<String> {
    let (mut t, end) = (at(from), at(to));
    let mut found = Vec::new();
    while let Some(next) = calendar.next_after(t) {
        if next > end {
            break;
        }
        found.push(text(next));
        t = next;
    }
    found
}

#[test]
fn a_daily_time_in_the_spring_gap_fires_once_just_after_it() {
    // Europe/Paris, 2026-03-29: 02:00 local becomes 03:00 (01:00 UTC).
    let calendar = Calendar::new("30 2 * * *", "Europe/Paris").unwrap();
    assert_eq!(
        ticks(&calendar, "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z"),
        [
            "2026-03-28T01:30:00Z", // 02:30 CET
            "2026-03-29T01:00:00Z", // 02:30 does not exist: 03:00 CEST, the first minute after
            "2026-03-30T00:30:00Z", // 02:30 CEST
        ]
    );
}

#[test]
fn a_daily_time_in_the_autumn_repeat_fires_once_at_its_first_occurrence() {
    // Europe/Paris, 2026-10-25: 03:00 local goes back to 02:00 (01:00 UTC); 02:30 happens twice.
    let calendar = Calendar::new("30 2 * * *", "Europe/Paris").unwrap();
    assert_eq!(
        ticks(&calendar, "2026-10-23T12:00:00Z", "2026-10-26T12:00:00Z"),
        [
            "2026-10-24T00:30:00Z", // 02:30 CEST
            "2026-10-25T00:30:00Z", // 02:30 CEST, the first of the two
            "2026-10-26T01:30:00Z", // 02:30 CET
        ]
    );
}

#[test]
fn an_interval_runs_through_the_repeated_hour_and_skips_the_missing_one() {
    let every_half_hour = Calendar::new("*/30 * * * *", "Europe/Paris").unwrap();
    // The repeated hour (02:00-03:00 local, twice): every occurrence fires, 30 minutes apart.
    assert_eq!(
        ticks(
            &every_half_hour,
            "2026-10-24T23:45:00Z",
            "2026-10-25T02:10:00Z"
        ),
        [
            "2026-10-25T00:00:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T01:30:00Z",
            "2026-10-25T02:00:00Z",
        ]
    );
    // The missing hour: nothing between 02:00 and 03:00 local, no tick twice.
    assert_eq!(
        ticks(
            &every_half_hour,
            "2026-03-29T00:15:00Z",
            "2026-03-29T02:10:00Z"
        ),
        [
            "2026-03-29T00:30:00Z", // 01:30 CET
            "2026-03-29T01:00:00Z", // 03:00 CEST
            "2026-03-29T01:30:00Z",
            "2026-03-29T02:00:00Z",
        ]
    );
}

#[test]
fn shorthands_and_names_read_as_cron_does() {
    let hourly = Calendar::new("@hourly", "UTC").unwrap();
    assert_eq!(
        ticks(&hourly, "2026-01-01T00:00:00Z", "2026-01-01T03:00:00Z"),
        [
            "2026-01-01T01:00:00Z",
            "2026-01-01T02:00:00Z",
            "2026-01-01T03:00:00Z"
        ]
    );
    let daily = Calendar::new("@daily", "America/New_York").unwrap();
    assert_eq!(
        ticks(&daily, "2026-01-01T00:00:00Z", "2026-01-02T12:00:00Z"),
        ["2026-01-01T05:00:00Z", "2026-01-02T05:00:00Z"]
    );
    // Weekdays by name, at 09:00 in Tokyo (no daylight saving).
    let weekdays = Calendar::new("0 9 * * MON-FRI", "Asia/Tokyo").unwrap();
    assert_eq!(
        ticks(&weekdays, "2026-12-04T00:00:00Z", "2026-12-08T12:00:00Z"),
        ["2026-12-07T00:00:00Z", "2026-12-08T00:00:00Z"]
    );
}

#[test]
fn the_most_recent_ticks_are_counted_back_from_now_and_never_before_the_start() {
    let minutely = Calendar::new("* * * * *", "UTC").unwrap();
    let recent = minutely.recent(at("2026-01-01T00:00:00Z"), at("2026-01-01T00:10:30Z"), 3);
    let shown: Vec<String> = recent.into_iter().map(text).collect();
    assert_eq!(
        shown,
        [
            "2026-01-01T00:08:00Z",
            "2026-01-01T00:09:00Z",
            "2026-01-01T00:10:00Z"
        ]
    );
    // A tick at exactly now is due; one at exactly the start is not (it fired already).
    let recent = minutely.recent(at("2026-01-01T00:08:00Z"), at("2026-01-01T00:10:00Z"), 9);
    assert_eq!(recent.len(), 2);
    assert!(
        minutely
            .recent(at("2026-01-01T00:10:00Z"), at("2026-01-01T00:10:59Z"), 9)
            .is_empty()
    );
}

#[test]
fn a_bad_expression_or_zone_is_refused_naming_it() {
    for (cron, zone, named) in [
        ("61 * * * *", "UTC", "\"61 * * * *\""),
        ("* * * *", "UTC", "\"* * * *\""),
        ("0 0 * * * *", "UTC", "\"0 0 * * * *\""),
        ("@sometimes", "UTC", "\"@sometimes\""),
        ("0 3 * * *", "Mars/Olympus", "\"Mars/Olympus\""),
        ("0 3 * * *", "", "\"\""),
    ] {
        let err = Calendar::new(cron, zone).unwrap_err().to_string();
        assert!(err.contains(named), "{cron} in {zone}: {err}");
    }
    let long = "1,".repeat(150) + "1 * * * *";
    assert!(
        Calendar::new(&long, "UTC")
            .unwrap_err()
            .to_string()
            .contains("bytes")
    );
}
