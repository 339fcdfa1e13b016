//! Failure memory of one pool, as cluster-autoscaler keeps it per node group: a failed launch
//! backs the pool off for 5 minutes, doubling per further failure up to 30 minutes; a success
//! forgets the streak, and so do 3 hours without a failure.
//!
//! Each failure has a class ([`FailureClass`]). Every class backs off; a capacity failure also
//! sends the pool's launches to its `fallback` ([`super::fallback`]); and
//! [`MISCONFIGURED_AFTER`] misconfiguration failures in a row with the same error *suspend*
//! the pool: it launches nothing, whatever its backoff, until an admin resumes it (a reload,
//! or a restart with changed settings) or one of its jobs turns out to work. The failures of
//! a misconfigured pool cost money (each worker that boots and exits before checking in is
//! billed), so what it can spend is bounded by that count, not by time.
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
/// Misconfiguration failures in a row, with the same error, that suspend a pool.
pub const MISCONFIGURED_AFTER: u32 = 3;

/// What a failure says about its pool, and so what the manager does about it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The pool's settings are wrong: the platform refused the submit for good (credentials,
    /// an image, executable, queue or partition that does not exist), or a worker never got to
    /// check in (it exited first, or no check-in of the pool's workers is ever seen). Backs
    /// off; [`MISCONFIGURED_AFTER`] in a row with the same error suspend the pool.
    Misconfiguration,
    /// The platform has no room: no capacity for a launch, a job pending past the pool's
    /// `pending_timeout`. Backs off; the pool's launches go to its `fallback`.
    Capacity,
    /// Something failed for a while: a worker that checked in and then vanished. Backs off.
    #[default]
    /// (A submit the platform answered with a 5xx, a throttle or a network error is retried
    /// at a later tick without a backoff: it says nothing about the pool.)
    Transient,
}

impl FailureClass {
    /// Every class, in the order `status` and the metrics list them.
    pub const ALL: [FailureClass; 3] = [
        FailureClass::Misconfiguration,
        FailureClass::Capacity,
        FailureClass::Transient,
    ];

    /// The machine-readable name (`misconfiguration`, `capacity`, `transient`).
    pub fn code(self) -> &'static str {
        match self {
            FailureClass::Misconfiguration => "misconfiguration",
            FailureClass::Capacity => "capacity",
            FailureClass::Transient => "transient",
        }
    }
}

/// What one failure is: its class, and its error in a form that is the same when the same
/// thing fails again (ids, numbers and times left out: [`FailureSignature::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Its class.
    pub class: FailureClass,
    /// Its error, without what changes from one try to the next.
    pub signature: FailureSignature,
}

impl Failure {
    /// A transient failure, whose error is not kept (the operator's: it keeps a streak, not
    /// the errors).
    pub const TRANSIENT: Failure = Failure {
        class: FailureClass::Transient,
        signature: FailureSignature(0),
    };
}

/// An error's text without what changes from one try to the next: every word with a digit in
/// it (job ids, launch uniques, times, ports) is left out, and what is left is hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FailureSignature(pub u64);

impl FailureSignature {
    /// The signature of `kind` (what failed: `submit_failed` …) with error text `text`.
    pub fn of(kind: &str, text: &str) -> Self {
        let words = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|word| !word.is_empty() && !word.chars().any(|c| c.is_ascii_digit()));
        let kept: Vec<&str> = std::iter::once(kind).chain(words).collect();
        Self(crate::hash::fnv1a(kept.join(" ").as_bytes()))
    }
}

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
    /// Misconfiguration failures in a row with the same error ([`MISCONFIGURED_AFTER`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub misconfigured: u32,
    /// The error of those failures.
    #[serde(skip)]
    pub signature: FailureSignature,
    /// The pool launches nothing until an admin resumes it ([`PoolHealth::resume`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

impl PoolHealth {
    /// The backoff after `failures` failures in a row (5 min, 10, 20, then 30 min).
    pub fn delay(failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        INITIAL_BACKOFF
            .saturating_mul(1u32 << doublings)
            .min(MAX_BACKOFF)
    }

    /// Records a failed launch at `now` and starts (or lengthens) the backoff; returns whether
    /// this failure suspended the pool (the [`MISCONFIGURED_AFTER`]th misconfiguration in a
    /// row with the same error).
    pub fn record_failure(&mut self, now: Duration, failure: Failure) -> bool {
        self.expire(now);
        self.failures += 1;
        self.last_failure = Some(now);
        self.backoff_until = Some(now + Self::delay(self.failures));
        if failure.class != FailureClass::Misconfiguration {
            return false;
        }
        match self.misconfigured > 0 && self.signature == failure.signature {
            true => self.misconfigured += 1,
            false => (self.misconfigured, self.signature) = (1, failure.signature),
        }
        let suspends = !self.suspended && self.misconfigured >= MISCONFIGURED_AFTER;
        self.suspended |= suspends;
        suspends
    }

    /// Records a success (a job of the pool became active, or its worker checked in): the
    /// streak is forgotten. A suspension stays: a job that runs does not show that the pool's
    /// settings work (its worker may never reach the server); a check-in does, and its caller
    /// then resumes the pool.
    pub fn record_success(&mut self) {
        if !self.suspended {
            *self = Self::default();
        }
    }

    /// Lifts a suspension and forgets the streak (an admin's act: a reload, changed settings).
    pub fn resume(&mut self) {
        *self = Self::default();
    }

    /// Forgets the streak when the last failure is [`RESET_AFTER`] old; a suspended pool keeps
    /// it until it is resumed ([`PoolHealth::resume`]).
    pub fn expire(&mut self, now: Duration) {
        if !self.suspended
            && self
                .last_failure
                .is_some_and(|last| now.saturating_sub(last) >= RESET_AFTER)
        {
            *self = Self::default();
        }
    }

    /// A suspended pool as a restart finds it in its record: its launches stay suspended
    /// after `failures` misconfiguration failures in a row.
    pub fn suspended_after(failures: u32) -> Self {
        Self {
            misconfigured: failures,
            suspended: true,
            ..Self::default()
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
    const BLIP: Failure = Failure::TRANSIENT;

    fn misconfigured(error: &str) -> Failure {
        Failure {
            class: FailureClass::Misconfiguration,
            signature: FailureSignature::of("submit_failed", error),
        }
    }

    /// (what happens, whether the pool is suspended after it)
    #[test]
    fn three_misconfigurations_in_a_row_with_the_same_error_suspend_the_pool() {
        let s = Duration::from_secs;
        let partition = "sbatch: error: invalid partition specified: gpu (job 1201)";
        let mut health = PoolHealth::default();
        let table = [
            ("misconfigured", misconfigured(partition), false),
            (
                "the same error, another job id",
                misconfigured(&partition.replace("1201", "1202")),
                false,
            ),
            (
                "a capacity failure between: not a misconfiguration",
                Failure {
                    class: FailureClass::Capacity,
                    ..misconfigured(partition)
                },
                false,
            ),
            (
                "the same error a third time",
                misconfigured(partition),
                true,
            ),
        ];
        for (at, (what, failure, suspended)) in table.into_iter().enumerate() {
            let suspends = health.record_failure(s(at as u64 * 3600), failure);
            assert_eq!(health.suspended, suspended, "{what}");
            assert_eq!(
                suspends, suspended,
                "{what}: reported once, when it suspends"
            );
        }
        assert!(
            !health.record_failure(s(4 * 3600), misconfigured(partition)),
            "suspends once"
        );
        health.expire(s(100 * 3600));
        assert!(
            health.suspended,
            "a suspension outlasts the streak's 3 hours"
        );
        health.resume();
        assert_eq!(health, PoolHealth::default(), "resumed: nothing left");

        // Another error restarts the count; a success forgets it, and a suspension with it.
        let mut health = PoolHealth::default();
        health.record_failure(s(0), misconfigured(partition));
        health.record_failure(s(1), misconfigured("image not found"));
        health.record_failure(s(2), misconfigured(partition));
        assert_eq!(
            (health.misconfigured, health.suspended),
            (1, false),
            "errors differ"
        );
        let mut health = PoolHealth::suspended_after(3);
        health.record_success();
        assert!(
            health.suspended,
            "a job that runs does not lift it (a check-in does)"
        );
    }

    #[test]
    fn signatures_leave_out_ids_numbers_and_times() {
        let sig = |text| FailureSignature::of("ended_before_checkin", text);
        assert_eq!(
            sig("job 41: exit code 127 at 2026-11-29T10:01:02 (clwm-0a1b2c3d)"),
            sig("job 97: exit code 127 at 2026-11-29T11:41:09 (clwm-9f8e7d6c)")
        );
        assert_ne!(sig("image pull failed"), sig("executable not found"));
        assert_ne!(
            FailureSignature::of("submit_failed", "x"),
            FailureSignature::of("pending_timeout", "x"),
            "what failed is part of it"
        );
    }

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
        health.record_failure(s(100), BLIP);
        assert_eq!(
            health.backing_off(s(100)),
            Some(s(400)),
            "first failure: 5 min"
        );
        assert_eq!(health.backing_off(s(399)), Some(s(400)));
        assert_eq!(health.backing_off(s(400)), None, "backoff over");
        health.record_failure(s(400), BLIP);
        assert_eq!(health.backing_off(s(400)), Some(s(1000)), "second: 10 min");
        health.record_failure(s(1000), BLIP);
        health.record_failure(s(2200), BLIP);
        assert_eq!(health.failures, 4);
        assert_eq!(
            health.backing_off(s(2200)),
            Some(s(4000)),
            "fourth: 30 min cap"
        );
        health.record_success();
        assert_eq!(health, PoolHealth::default(), "a success resets");
        health.record_failure(s(5000), BLIP);
        health.record_failure(s(5300), BLIP);
        assert_eq!(health.failures, 2);
        // 3 h after the last failure, the streak is forgotten: the next failure is a first one.
        health.record_failure(s(5300 + 3 * 3600), BLIP);
        assert_eq!(health.failures, 1);
        assert_eq!(
            health.backing_off(s(5300 + 3 * 3600)),
            Some(s(5600 + 3 * 3600))
        );
        let mut health = PoolHealth::default();
        health.record_failure(s(0), BLIP);
        health.expire(s(3 * 3600 - 1));
        assert_eq!(health.failures, 1, "not yet 3 h");
        health.expire(s(3 * 3600));
        assert_eq!(health.failures, 0, "3 h without failure");
    }

    #[test]
    fn serialises_seconds() {
        let mut health = PoolHealth::default();
        health.record_failure(Duration::from_secs(10), BLIP);
        assert_eq!(
            serde_json::to_string(&health).unwrap(),
            r#"{"failures":1,"last_failure":10,"backoff_until":310}"#
        );
    }
}
