//! Kubernetes timestamps: `metav1.Time` (RFC 3339 in UTC to the second,
//! `2006-01-02T15:04:05Z`: conditions, Events) and `metav1.MicroTime` (to
//! the microsecond, `2006-01-02T15:04:05.000000Z`: Leases), and reading any
//! RFC 3339 time back.
//!
//! The calendar arithmetic and the formatting are jiff's, which the binary
//! links anyway for its log timestamps (env_logger). Reading is a few lines
//! here: jiff's general parser (time zones, RFC 9557) would add 135 KB to
//! the binary for the one shape Kubernetes writes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::civil::DateTime;
use jiff::tz::Offset;
use jiff::Timestamp;

/// `t` as a `metav1.Time`: second precision (the fraction is dropped).
pub fn time(t: SystemTime) -> String {
    format!("{:.0}", timestamp(t))
}

/// `t` as a `metav1.MicroTime`: six fractional digits.
pub fn micro_time(t: SystemTime) -> String {
    format!("{:.6}", timestamp(t))
}

/// A `metav1.Time` for seconds since the Unix epoch (the last time jiff
/// can show for more seconds than that).
pub fn time_of_unix_seconds(secs: u64) -> String {
    crate::clock::system_later(UNIX_EPOCH, Duration::from_secs(secs))
        .map_or_else(|| format!("{:.0}", Timestamp::MAX), time)
}

/// Seconds since the Unix epoch of an RFC 3339 time,
/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±hh:mm)` (the fraction is dropped);
/// `None` for anything else or a time before 1970.
pub fn unix_seconds(text: &str) -> Option<u64> {
    let text = text.trim();
    let field = |at: usize, len: usize| -> Option<i64> {
        let digits = text.get(at..at + len)?;
        digits
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let separators = text.get(4..5)? == "-"
        && text.get(7..8)? == "-"
        && matches!(text.get(10..11)?, "T" | "t")
        && text.get(13..14)? == ":"
        && text.get(16..17)? == ":";
    if !separators {
        return None;
    }
    let small = |v: i64| i8::try_from(v).ok();
    let datetime = DateTime::new(
        i16::try_from(field(0, 4)?).ok()?,
        small(field(5, 2)?)?,
        small(field(8, 2)?)?,
        small(field(11, 2)?)?,
        small(field(14, 2)?)?,
        small(field(17, 2)?)?,
        0,
    )
    .ok()?;
    // After the seconds: an optional fraction, then the offset.
    let rest = text.get(19..)?;
    let zone = match rest.strip_prefix('.') {
        Some(fraction) => fraction.trim_start_matches(|c: char| c.is_ascii_digit()),
        None => rest,
    };
    let offset_seconds = match zone {
        "Z" | "z" => 0,
        _ => {
            let sign = match zone.get(..1)? {
                "+" => 1,
                "-" => -1,
                _ => return None,
            };
            if zone.len() != 6 || zone.get(3..4)? != ":" {
                return None;
            }
            let hours: i32 = zone.get(1..3)?.parse().ok()?;
            let minutes: i32 = zone.get(4..6)?.parse().ok()?;
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let offset = Offset::from_seconds(offset_seconds).ok()?;
    let t = offset.to_timestamp(datetime).ok()?;
    u64::try_from(t.as_second()).ok()
}

/// `t` as a jiff timestamp, clamped to jiff's range (years -9999 to 9999)
/// so that no clock value can fail to format.
fn timestamp(t: SystemTime) -> Timestamp {
    Timestamp::try_from(t).unwrap_or(if t < UNIX_EPOCH {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_kubernetes_times() {
        let t = UNIX_EPOCH + Duration::from_micros(1_764_470_096_123_456);
        assert_eq!(time(t), "2025-11-30T02:34:56Z");
        assert_eq!(micro_time(t), "2025-11-30T02:34:56.123456Z");
        assert_eq!(time(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(micro_time(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(time(leap), "2000-02-29T00:00:00Z");
        assert_eq!(time_of_unix_seconds(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn reads_rfc3339_back() {
        for secs in [0u64, 951_782_400, 1_700_000_000, 4_102_444_799] {
            assert_eq!(unix_seconds(&time_of_unix_seconds(secs)), Some(secs));
        }
        assert_eq!(
            unix_seconds("2023-11-14T23:13:20.5+01:00"),
            Some(1_700_000_000)
        );
        assert_eq!(
            unix_seconds("2025-11-30T02:34:56.123456Z"),
            Some(1_764_470_096)
        );
        assert_eq!(
            unix_seconds("2023-11-14T17:13:20-05:00"),
            Some(1_700_000_000)
        );
        for bad in [
            "garbage",
            "1969-12-31T23:59:59Z",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20+0100",
            "2023-13-14T22:13:20Z",
            "2023-11-14 22:13:20Z",
            "2023-11-14T22:13:2xZ",
            "+023-11-14T22:13:20Z",
        ] {
            assert_eq!(unix_seconds(bad), None, "{bad}");
        }
    }
}
