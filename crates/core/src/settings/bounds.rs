//! The range of every duration setting: the error names the flag and the config key.

use super::{PoolRules, Settings};

/// The longest duration any setting may give, in seconds (a year): far above any sane value,
/// far below where adding it to a clock overflows.
pub const MAX_SECONDS: u64 = 365 * 24 * 60 * 60;

/// A duration setting to check: its flag (empty for config-only keys), its config key, the
/// value given and the least value allowed.
struct Bound {
    flag: &'static str,
    key: String,
    value: u64,
    min: u64,
}

impl Settings {
    /// Every duration setting in its sane range (`sleep_time` ≥ 1, every one ≤ [`MAX_SECONDS`]);
    /// the error names the flag and the config key. `restart_after_seconds = 0` means off.
    pub fn check_durations(&self) -> Result<(), String> {
        let bound = |flag, key: &str, value, min| Bound {
            flag,
            key: key.to_owned(),
            value,
            min,
        };
        let mut bounds = vec![
            bound("--sleep-time", "sleep_time", self.sleep_time, 1),
            bound(
                "--min-seconds-between-workers",
                "min_seconds_between_workers",
                self.min_seconds_between_workers,
                0,
            ),
            bound(
                "--worker-checkin-timeout",
                "worker_checkin_timeout",
                self.worker_checkin_timeout,
                1,
            ),
            bound(
                "--worker-idle-seconds",
                "worker.idle_seconds",
                self.worker.idle_seconds,
                0,
            ),
        ];
        let optional = [
            (
                "--restart-after-seconds",
                "restart_after_seconds",
                self.restart_after_seconds,
            ),
            (
                "--worker-checkin-frequency-seconds",
                "worker.checkin_frequency_seconds",
                self.worker.checkin_frequency_seconds,
            ),
        ];
        for (flag, key, value) in optional {
            bounds.extend(value.map(|v| bound(flag, key, v, 0)));
        }
        bounds.iter().try_for_each(Bound::check)?;
        self.pools
            .iter()
            .try_for_each(|p| p.rules.check_durations())
    }
}

impl PoolRules {
    /// The pool's duration settings in their range (≤ [`MAX_SECONDS`]).
    pub fn check_durations(&self) -> Result<(), String> {
        let keys = [
            ("pending_timeout", self.pending_timeout),
            ("startup_grace", self.startup_grace),
            ("checkin_timeout", self.checkin_timeout),
            (
                "min_seconds_between_workers",
                self.min_seconds_between_workers,
            ),
        ];
        for (key, value) in keys {
            let Some(value) = value else { continue };
            Bound {
                flag: "",
                key: format!("pools.{key}` of pool `{}", self.name),
                value,
                min: 0,
            }
            .check()?;
        }
        Ok(())
    }
}

impl Bound {
    fn check(&self) -> Result<(), String> {
        if (self.min..=MAX_SECONDS).contains(&self.value) {
            return Ok(());
        }
        let name = if self.flag.is_empty() {
            format!("`{}`", self.key)
        } else {
            format!("{} (`{}` in the config file)", self.flag, self.key)
        };
        Err(format!(
            "{name} is {} seconds: it must be between {} and {MAX_SECONDS} (a year)",
            self.value, self.min
        ))
    }
}

impl Settings {
    /// The budget keys (numbers ≥ 0; a cost limit needs a cost per hour somewhere) and every
    /// `[[notify]]` entry (an http(s) URL, known event codes); the error names the key.
    pub fn check_budgets_and_notify(&self) -> Result<(), String> {
        let overall = crate::budget::BudgetLimits {
            max_worker_hours_per_day: self.max_worker_hours_per_day,
            max_cost_per_day: self.max_cost_per_day,
        };
        overall.validate(self.cost_per_hour)?;
        let costed = self.cost_per_hour.is_some()
            || self.pools.iter().any(|p| p.rules.cost_per_hour.is_some());
        if self.max_cost_per_day.is_some() && !costed {
            return Err("max_cost_per_day needs cost_per_hour (at the top level for the single backend, or per pool)".into());
        }
        if self.cost_per_hour.is_some() && !self.pools.is_empty() {
            return Err("with [[pools]], set cost_per_hour per pool, not at the top level".into());
        }
        self.notify
            .iter()
            .enumerate()
            .try_for_each(|(index, hook)| hook.validate(index))
    }
}
