//! Deadlines that cannot overflow.
//!
//! `Instant + Duration` panics when the sum does not fit the platform's clock, and
//! `Duration * n` when the product does not fit a `Duration`. Config validation bounds every
//! duration (`config`), but a timer is set from values combined at run time (a backoff doubled
//! per quarantine, a limit reloaded by SIGHUP), so every deadline sweepd computes goes through
//! here: the result saturates at [`FAR`] from its start, a point no run reaches.

use std::time::{Duration, Instant};

/// About 30 years: what tokio caps its own timers at (1000 years overflows some platforms'
/// clocks, 100 years others').
pub const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `t + d`, or `t + FAR` where `d` is longer than [`FAR`].
pub fn after(t: Instant, d: Duration) -> Instant {
    // `t + FAR` fits every clock sweepd runs on; were it not to, a deadline that has passed is
    // a wrong outcome, not a crash.
    t.checked_add(d.min(FAR)).unwrap_or(t)
}

/// A tokio deadline `d` from now, saturating as [`after`] does.
pub fn deadline(d: Duration) -> tokio::time::Instant {
    tokio::time::Instant::from_std(after(Instant::now(), d))
}

/// `d * factor`, or `Duration::MAX` where the product does not fit (a caller takes the minimum
/// with its own limit).
pub fn times(d: Duration, factor: u32) -> Duration {
    d.checked_mul(factor).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_saturates_instead_of_panicking() {
        let t = Instant::now();
        assert_eq!(after(t, Duration::from_secs(5)), t + Duration::from_secs(5));
        assert_eq!(after(t, Duration::MAX), t + FAR);
        assert_eq!(after(t, FAR + Duration::from_secs(1)), t + FAR);
    }

    #[test]
    fn deadline_of_an_absurd_duration_is_far_not_a_panic() {
        let before = tokio::time::Instant::now();
        let d = deadline(Duration::MAX);
        assert!(d >= before + FAR);
        assert!(deadline(Duration::ZERO) >= before);
    }

    #[test]
    fn times_saturates() {
        assert_eq!(times(Duration::from_secs(60), 4), Duration::from_secs(240));
        assert_eq!(times(Duration::MAX, 2), Duration::MAX);
        assert_eq!(
            times(Duration::from_secs(u64::MAX / 2), 1 << 20),
            Duration::MAX
        );
    }
}
