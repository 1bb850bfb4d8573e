//! Kubernetes timestamps: `metav1.Time` (RFC 3339 in UTC to the second,
//! `2006-01-02T15:04:05Z`: conditions, Events) and `metav1.MicroTime` (to
//! the microsecond, `2006-01-02T15:04:05.000000Z`: Leases), and reading any
//! RFC 3339 time back.
//!
//! The calendar arithmetic is jiff's, which the binary links anyway for
//! its log timestamps (env_logger).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::Timestamp;

/// `t` as a `metav1.Time`: second precision (the fraction is dropped).
pub fn time(t: SystemTime) -> String {
    format!("{:.0}", timestamp(t))
}

/// `t` as a `metav1.MicroTime`: six fractional digits.
pub fn micro_time(t: SystemTime) -> String {
    format!("{:.6}", timestamp(t))
}

/// A `metav1.Time` for seconds since the Unix epoch.
pub fn time_of_unix_seconds(secs: u64) -> String {
    time(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Seconds since the Unix epoch of an RFC 3339 time with any offset (a
/// fraction is dropped); `None` for anything else or a time before 1970.
pub fn unix_seconds(text: &str) -> Option<u64> {
    let t: Timestamp = text.trim().parse().ok()?;
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
        assert_eq!(unix_seconds("garbage"), None);
        assert_eq!(unix_seconds("1969-12-31T23:59:59Z"), None);
    }
}
