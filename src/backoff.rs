//! The one exponential backoff, and the randomness behind its jitter.
//!
//! [`Backoff`]: the step starts at `first` and doubles after each failure
//! up to `max`; each delay is the step times a random factor from the
//! jitter range (none by default), and never more than `max`. Used by the
//! informers (0.8 s to 30 s, jitter ×1–2 as client-go's), the MAAS client's
//! retries (0.2 s to 5 s, ±25 %) and the api poller's per-cluster probes
//! (2 s to 1 min, no jitter, so its schedule is exact).
//!
//! Beside the layers (like `metrics`): the MAAS client and the runtime both
//! use it, and neither may know the other.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    /// Each delay is the step times a factor picked in `[low, high]`.
    jitter: (f64, f64),
    step: Duration,
}

impl Backoff {
    /// Starts at `first`, doubling to `max`, without jitter.
    pub fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            jitter: (1.0, 1.0),
            step: first,
        }
    }

    /// Spreads each delay over `[low × step, high × step]` (still at most
    /// `max`), so that many clients do not retry in lockstep.
    pub fn with_jitter(mut self, low: f64, high: f64) -> Backoff {
        self.jitter = (low.max(0.0), high.max(low.max(0.0)));
        self
    }

    /// The delay before the next attempt; doubles the step for the one
    /// after.
    pub fn next_delay(&mut self) -> Duration {
        let (low, high) = self.jitter;
        let delay = random_between(self.step.mul_f64(low), self.step.mul_f64(high)).min(self.max);
        self.step = self.step.saturating_mul(2).min(self.max);
        delay
    }

    /// Back to `first`, after a success.
    pub fn reset(&mut self) {
        self.step = self.first;
    }
}

/// 64 random bits, for jitter and identities. Falls back to the clock if
/// the OS source fails: neither use needs cryptographic quality.
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::getrandom(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    }
}

/// A duration picked uniformly at random in `[min, max]`.
pub fn random_between(min: Duration, max: Duration) -> Duration {
    if max <= min {
        return min;
    }
    let fraction = (random_u64() >> 11) as f64 / (1u64 << 53) as f64;
    min + (max - min).mul_f64(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_to_the_cap_and_resets() {
        // The informers' backoff.
        let mut b = Backoff::new(800 * MS, Duration::from_secs(30)).with_jitter(1.0, 2.0);
        let first = b.next_delay();
        assert!(first >= 800 * MS && first <= 1600 * MS);
        let second = b.next_delay();
        assert!(second >= 1600 * MS);
        for _ in 0..10 {
            assert!(b.next_delay() <= Duration::from_secs(30));
        }
        b.reset();
        assert!(b.next_delay() <= 1600 * MS);
    }

    #[test]
    fn without_jitter_the_schedule_is_exact() {
        let mut b = Backoff::new(Duration::from_secs(2), Duration::from_secs(60));
        let delays: Vec<u64> = (0..7).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(delays, [2, 4, 8, 16, 32, 60, 60]);
    }

    #[test]
    fn jitter_spreads_around_the_step() {
        // The MAAS client's retries: ±25 %.
        let mut b = Backoff::new(200 * MS, Duration::from_secs(5)).with_jitter(0.75, 1.25);
        let first = b.next_delay();
        assert!(first >= 150 * MS && first <= 250 * MS, "{first:?}");
        b.next_delay();
        assert!(b.next_delay() >= 600 * MS, "the third step is 800 ms");
    }

    #[test]
    fn random_between_stays_in_range() {
        let (min, max) = (Duration::from_secs(300), Duration::from_secs(600));
        let picks: Vec<_> = (0..100).map(|_| random_between(min, max)).collect();
        assert!(picks.iter().all(|d| *d >= min && *d <= max));
        assert!(picks.iter().any(|d| *d != picks[0]), "not constant");
        assert_eq!(random_between(max, min), max);
    }
}
