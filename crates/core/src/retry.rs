//! Backoff for temporary failures: the one place where the loop decides how long to wait.

use std::time::Duration;

/// Exponential backoff: `base`, `2·base`, `4·base` … capped at `max`, reset by a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    /// A backoff starting at `base` and never waiting longer than `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max: max.max(base),
            failures: 0,
        }
    }

    /// Records a failure and returns how long to wait before the next try.
    pub fn failure(&mut self) -> Duration {
        let factor = 1u32.checked_shl(self.failures.min(16)).unwrap_or(u32::MAX);
        self.failures = self.failures.saturating_add(1);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// Records a success: the next failure waits `base` again.
    pub fn success(&mut self) {
        self.failures = 0;
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(60));
        let waits: Vec<u64> = (0..6).map(|_| backoff.failure().as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 60, 60]);
        assert_eq!(backoff.failures(), 6);
        backoff.success();
        assert_eq!(backoff.failure(), Duration::from_secs(5));
    }

    #[test]
    fn never_overflows() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
        for _ in 0..100 {
            assert!(backoff.failure() <= Duration::from_secs(300));
        }
    }
}
