//! Failure memory of one pool, as cluster-autoscaler keeps it per node group: a failed launch
//! backs the pool off for 5 minutes, doubling per further failure up to 30 minutes; a success
//! forgets the streak, and so do 3 hours without a failure.
//!
//! Pure: time is the manager clock (time since the manager started), passed in.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// First backoff after a failure.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(5 * 60);
/// Longest backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30 * 60);
/// A streak is forgotten after this long without a failure.
pub const RESET_AFTER: Duration = Duration::from_secs(3 * 60 * 60);

/// The failure streak of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolHealth {
    /// Failures in the current streak.
    pub failures: u32,
    /// When the last failure happened (manager clock).
    #[serde(
        serialize_with = "crate::seconds::serialize_option",
        deserialize_with = "crate::seconds::deserialize_option"
    )]
    pub last_failure: Option<Duration>,
    /// The pool is skipped until then (manager clock).
    #[serde(
        serialize_with = "crate::seconds::serialize_option",
        deserialize_with = "crate::seconds::deserialize_option"
    )]
    pub backoff_until: Option<Duration>,
}

impl PoolHealth {
    /// The backoff after `failures` failures in a row (5 min, 10, 20, then 30 min).
    pub fn delay(failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        INITIAL_BACKOFF
            .saturating_mul(1u32 << doublings)
            .min(MAX_BACKOFF)
    }

    /// Records a failed launch at `now` and starts (or lengthens) the backoff.
    pub fn record_failure(&mut self, now: Duration) {
        self.expire(now);
        self.failures += 1;
        self.last_failure = Some(now);
        self.backoff_until = Some(now + Self::delay(self.failures));
    }

    /// Records a success (a job of the pool became active): the streak is forgotten.
    pub fn record_success(&mut self) {
        *self = Self::default();
    }

    /// Forgets the streak when the last failure is [`RESET_AFTER`] old.
    pub fn expire(&mut self, now: Duration) {
        if self
            .last_failure
            .is_some_and(|last| now.saturating_sub(last) >= RESET_AFTER)
        {
            *self = Self::default();
        }
    }

    /// The end of the backoff when the pool is backing off at `now`.
    pub fn backing_off(&self, now: Duration) -> Option<Duration> {
        self.backoff_until.filter(|until| *until > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60;

    #[test]
    fn delays_double_from_5_to_30_minutes() {
        let delays: Vec<u64> = (1..=6)
            .map(|n| PoolHealth::delay(n).as_secs() / MIN)
            .collect();
        assert_eq!(delays, [5, 10, 20, 30, 30, 30]);
        assert_eq!(PoolHealth::delay(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn backoff_table() {
        let s = Duration::from_secs;
        // (what happens, at second, backing off until (seconds) afterwards at that moment)
        let mut health = PoolHealth::default();
        assert_eq!(health.backing_off(s(0)), None, "fresh pool");
        health.record_failure(s(100));
        assert_eq!(
            health.backing_off(s(100)),
            Some(s(400)),
            "first failure: 5 min"
        );
        assert_eq!(health.backing_off(s(399)), Some(s(400)));
        assert_eq!(health.backing_off(s(400)), None, "backoff over");
        health.record_failure(s(400));
        assert_eq!(health.backing_off(s(400)), Some(s(1000)), "second: 10 min");
        health.record_failure(s(1000));
        health.record_failure(s(2200));
        assert_eq!(health.failures, 4);
        assert_eq!(
            health.backing_off(s(2200)),
            Some(s(4000)),
            "fourth: 30 min cap"
        );
        health.record_success();
        assert_eq!(health, PoolHealth::default(), "a success resets");
        health.record_failure(s(5000));
        health.record_failure(s(5300));
        assert_eq!(health.failures, 2);
        // 3 h after the last failure, the streak is forgotten: the next failure is a first one.
        health.record_failure(s(5300 + 3 * 3600));
        assert_eq!(health.failures, 1);
        assert_eq!(
            health.backing_off(s(5300 + 3 * 3600)),
            Some(s(5600 + 3 * 3600))
        );
        let mut health = PoolHealth::default();
        health.record_failure(s(0));
        health.expire(s(3 * 3600 - 1));
        assert_eq!(health.failures, 1, "not yet 3 h");
        health.expire(s(3 * 3600));
        assert_eq!(health.failures, 0, "3 h without failure");
    }

    #[test]
    fn serialises_seconds() {
        let mut health = PoolHealth::default();
        health.record_failure(Duration::from_secs(10));
        assert_eq!(
            serde_json::to_string(&health).unwrap(),
            r#"{"failures":1,"last_failure":10,"backoff_until":310}"#
        );
    }
}
