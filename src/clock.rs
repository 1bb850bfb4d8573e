//! Time arithmetic that cannot overflow. `Instant + Duration` and
//! `SystemTime + Duration` panic on overflow, and the release build aborts
//! on a panic: a delay that came from a peer (a `Retry-After`, a TTL) or a
//! tenant would stop the process for everyone. Every point in time the
//! product computes goes through [`later`] or [`system_later`], with the
//! delay clamped to [`FAR`]; `tests/clock_arithmetic.rs` fails on any
//! other `+` of a time and a duration in `src/`.
//!
//! Beside the layers (like `backoff`): every layer schedules.

use std::time::{Duration, Instant, SystemTime};

/// The longest delay anything in the process waits for: longer asks are a
/// day (a controller re-examines everything far more often than that).
pub const FAR: Duration = Duration::from_secs(24 * 3600);

/// `now + delay`, the delay clamped to [`FAR`]; `now` itself if even that
/// cannot be represented.
pub fn later(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay.min(FAR)).unwrap_or(now)
}

/// `t + delay` without a clamp on the delay (calendar times such as the
/// Unix epoch plus seconds read from a timestamp): `None` when not
/// representable.
pub fn system_later(t: SystemTime, delay: Duration) -> Option<SystemTime> {
    t.checked_add(delay)
}

/// A number of seconds sent by a peer (a `Retry-After` header or a
/// `Status`'s `retryAfterSeconds`), at most `max`.
pub fn peer_seconds(text: &str, max: Duration) -> Option<Duration> {
    let secs: u64 = text.trim().parse().ok()?;
    Some(Duration::from_secs(secs).min(max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflowing_delays_are_clamped_not_panics() {
        let now = Instant::now();
        assert_eq!(later(now, Duration::MAX), now + FAR);
        assert_eq!(later(now, Duration::from_secs(u64::MAX)), now + FAR);
        assert_eq!(
            later(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        assert_eq!(
            system_later(SystemTime::UNIX_EPOCH, Duration::from_secs(u64::MAX)),
            None
        );
        assert_eq!(
            peer_seconds("18446744073709551615", Duration::from_secs(30)),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            peer_seconds(" 7 ", Duration::from_secs(30)),
            Some(Duration::from_secs(7))
        );
        // Past u64: not a number of seconds at all.
        assert_eq!(
            peer_seconds("18446744073709551616", Duration::from_secs(30)),
            None
        );
        assert_eq!(peer_seconds("-1", Duration::from_secs(30)), None);
    }
}
