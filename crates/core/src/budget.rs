//! Budgets: worker-hours (and cost) per rolling day, per pool and over all pools.
//!
//! The manager meters each pool's active worker time as the platform reports it (jobs in state
//! active, times the time between two ticks: [`UsageWindow::add`]) into hourly buckets of a
//! rolling 24-hour window. When a pool's budget, or the overall one, is used up, the pool
//! launches nothing (running workers finish their bundles; `min` is not kept up) with reason
//! `budget_reached`, until enough of the window has rolled past; before that, a tick launches
//! no more workers than the budget has room for, each reserved its minimum life
//! ([`launch_room`]). Everything here is pure: time is the manager's clock.
//!
//! The manager keeps each pool's window in its launch record (`--state-dir`), so a restart,
//! a crash or `--restart-after-seconds` goes on with the same day ([`UsageWindow::to_unix`],
//! [`UsageWindow::from_unix`]).

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// The window's length.
pub const WINDOW: Duration = Duration::from_secs(24 * 3600);
const BUCKET_SECONDS: u64 = 3600;
/// Longest gap between two ticks metered: a manager that was suspended does not bill the
/// time it did not see.
pub const MAX_METERED_GAP: Duration = Duration::from_secs(15 * 60);

/// The limits of one scope (a pool, or all pools), per rolling day. `None`: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct BudgetLimits {
    /// Worker-hours (active jobs × hours) per rolling 24 hours.
    pub max_worker_hours_per_day: Option<f64>,
    /// Cost (worker-hours × the pool's `cost_per_hour`) per rolling 24 hours.
    pub max_cost_per_day: Option<f64>,
}

impl BudgetLimits {
    /// Whether any limit is set.
    pub fn is_set(&self) -> bool {
        self.max_worker_hours_per_day.is_some() || self.max_cost_per_day.is_some()
    }

    /// What is wrong with the limits, naming the key, if anything.
    pub fn validate(&self, cost_per_hour: Option<f64>) -> Result<(), String> {
        for (key, value) in [
            ("max_worker_hours_per_day", self.max_worker_hours_per_day),
            ("max_cost_per_day", self.max_cost_per_day),
            ("cost_per_hour", cost_per_hour),
        ] {
            if let Some(v) = value
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!("{key} must be a number >= 0, not {v}"));
            }
        }
        Ok(())
    }
}

/// Active worker time in hourly buckets over the last [`WINDOW`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageWindow {
    /// `(hour on the manager clock, worker-seconds)`, oldest first; hours before the manager
    /// started (read from a launch record) are negative.
    buckets: VecDeque<(i64, f64)>,
}

impl UsageWindow {
    /// Adds `workers` active workers over `gap` (capped at [`MAX_METERED_GAP`]) ending at
    /// `now`, to the bucket of `now`.
    pub fn add(&mut self, now: Duration, workers: usize, gap: Duration) {
        let seconds = workers as f64 * gap.min(MAX_METERED_GAP).as_secs_f64();
        let hour = hour_of(now);
        match self.buckets.back_mut() {
            Some((h, used)) if *h == hour => *used += seconds,
            _ => self.buckets.push_back((hour, seconds)),
        }
        self.prune(now);
    }

    /// Charges `seconds` worker-seconds at `now` (a launch's minimum life, written ahead of
    /// its submit); a negative charge (the submit failed) takes back from the newest buckets,
    /// none below zero.
    pub fn charge(&mut self, now: Duration, seconds: f64) {
        if seconds >= 0.0 {
            let hour = hour_of(now);
            match self.buckets.back_mut() {
                Some((h, used)) if *h >= hour => *used += seconds,
                _ => self.buckets.push_back((hour, seconds)),
            }
            self.prune(now);
            return;
        }
        let mut left = -seconds;
        for (_, used) in self.buckets.iter_mut().rev() {
            let taken = left.min(*used);
            *used -= taken;
            left -= taken;
            if left <= 0.0 {
                break;
            }
        }
    }

    fn prune(&mut self, now: Duration) {
        while let Some(&(hour, _)) = self.buckets.front()
            && !in_window(hour, now)
        {
            self.buckets.pop_front();
        }
    }

    /// Worker-hours used in the window ending at `now`.
    pub fn worker_hours(&self, now: Duration) -> f64 {
        self.buckets
            .iter()
            .filter(|(hour, _)| in_window(*hour, now))
            .map(|(_, seconds)| seconds / 3600.0)
            .sum()
    }

    /// When (manager clock) the worker-hours in the window fall to `limit` or below as it rolls
    /// on with no new use; `None` if they already are.
    pub fn below_at(&self, now: Duration, limit: f64) -> Option<Duration> {
        let mut used = self.worker_hours(now);
        if used < limit {
            return None;
        }
        for (hour, seconds) in self.buckets.iter().filter(|(h, _)| in_window(*h, now)) {
            used -= seconds / 3600.0;
            if used < limit {
                return Some(bucket_end(*hour) + WINDOW);
            }
        }
        Some(now + WINDOW)
    }
}

impl UsageWindow {
    /// The sum of `parts`, each weighted (by 1 for worker-hours, by a cost per hour for cost).
    pub fn merged<'a>(parts: impl IntoIterator<Item = (&'a UsageWindow, f64)>) -> UsageWindow {
        let mut sums = std::collections::BTreeMap::<i64, f64>::new();
        for (window, weight) in parts {
            for (hour, seconds) in &window.buckets {
                *sums.entry(*hour).or_default() += seconds * weight;
            }
        }
        UsageWindow {
            buckets: sums.into_iter().collect(),
        }
    }

    /// The window as `(hour since the Unix epoch, worker-seconds)`, the manager clock's zero
    /// being `start` (time since the Unix epoch), for a launch record.
    pub fn to_unix(&self, start: Duration) -> Vec<(u64, f64)> {
        let start = start.as_secs() as i64;
        self.buckets
            .iter()
            .map(|&(hour, seconds)| {
                let unix = (start + hour * BUCKET_SECONDS as i64).max(0) as u64;
                (unix / BUCKET_SECONDS, seconds)
            })
            .collect()
    }

    /// The window of `buckets` read from a launch record (see [`UsageWindow::to_unix`]), each
    /// put in the manager-clock hour its end falls in (so it stays in the window no shorter
    /// than it would have).
    pub fn from_unix(buckets: &[(u64, f64)], start: Duration) -> Self {
        let start = start.as_secs() as i64;
        let mut window = UsageWindow::default();
        for &(unix_hour, seconds) in buckets {
            let end = (unix_hour as i64 + 1) * BUCKET_SECONDS as i64 - 1 - start;
            let hour = end.div_euclid(BUCKET_SECONDS as i64);
            match window.buckets.back_mut() {
                Some((h, used)) if *h == hour => *used += seconds,
                _ => window.buckets.push_back((hour, seconds)),
            }
        }
        window
    }
}

/// The status of one scope: its use in the window ending at `now` (`cost`: the window
/// weighted by cost per hour, when known) against `limits`, and when it resumes if reached.
pub fn status(
    scope: &str,
    limits: BudgetLimits,
    hours: &UsageWindow,
    cost: Option<&UsageWindow>,
    now: Duration,
) -> BudgetStatus {
    let used = Use {
        worker_hours: hours.worker_hours(now),
        cost: cost.map(|c| c.worker_hours(now)),
    };
    let mut status = judge(scope, limits, used);
    if status.reached.is_some() {
        let by_hours = limits
            .max_worker_hours_per_day
            .and_then(|max| hours.below_at(now, max));
        let by_cost = limits
            .max_cost_per_day
            .zip(cost)
            .and_then(|(max, window)| window.below_at(now, max));
        status.resumes_at_seconds = by_hours.max(by_cost).map(|at| at.as_secs());
    }
    status
}

/// The bucket (manager-clock hour) of `now`.
fn hour_of(now: Duration) -> i64 {
    (now.as_secs() / BUCKET_SECONDS) as i64
}

/// When bucket `hour` ends (manager clock; zero for buckets that ended before it started).
fn bucket_end(hour: i64) -> Duration {
    Duration::from_secs(((hour + 1) * BUCKET_SECONDS as i64).max(0) as u64)
}

/// Whether bucket `hour` is still in the window ending at `now`.
fn in_window(hour: i64, now: Duration) -> bool {
    bucket_end(hour) + WINDOW > now
}

/// A scope's use against its limits.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BudgetStatus {
    /// The pool, or `all pools`.
    pub scope: String,
    /// Worker-hours in the last 24 hours.
    pub worker_hours: f64,
    /// Cost in the last 24 hours, when a cost per hour is known.
    pub cost: Option<f64>,
    /// The limits.
    #[serde(flatten)]
    pub limits: BudgetLimits,
    /// Why no launches, when the budget is used up.
    pub reached: Option<String>,
    /// When launching resumes (seconds, manager clock), when the budget is used up.
    pub resumes_at_seconds: Option<u64>,
}

/// The overall scope's name.
pub const ALL_POOLS: &str = "all pools";

/// How many more workers a scope's budget lets a pool launch this tick: a budget is a launch
/// gate, and each worker launched (and each one pending or running) is reserved its minimum
/// life, `life` (a worker that finds no bundle exits after `idle_seconds`), so that one burst
/// tick cannot commit many times the limit. Bundles that run longer can still take the
/// scope past its limit: running workers are never stopped for a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchRoom {
    /// The pool, or `all pools`.
    pub scope: String,
    /// Workers that may still be launched.
    pub workers: u32,
    /// The figures, in words.
    pub detail: String,
}

/// The room `limits` leave a pool with `committed` workers (pending or running, in the
/// scope) of minimum life `life` each at `cost_per_hour`, after `used`; `None` without a
/// limit. The tighter of the two limits wins.
pub fn launch_room(
    scope: &str,
    limits: BudgetLimits,
    used: Use,
    (committed, life): (usize, Duration),
    cost_per_hour: Option<f64>,
) -> Option<LaunchRoom> {
    let life_hours = life.as_secs_f64() / 3600.0;
    let reserved = committed as f64 * life_hours;
    let room = |left: f64, per_worker: f64| -> u32 {
        match per_worker > 0.0 {
            true => (left / per_worker).floor().clamp(0.0, f64::from(u32::MAX)) as u32,
            false => u32::MAX,
        }
    };
    let hours = limits.max_worker_hours_per_day.map(|max| {
        let left = max - used.worker_hours - reserved;
        let words = format!(
            "{:.2} of {max} worker-hours used, {reserved:.2} reserved for {committed} workers' minimum life ({} s each)",
            used.worker_hours,
            life.as_secs()
        );
        (room(left, life_hours), words)
    });
    let cost = match (limits.max_cost_per_day, cost_per_hour) {
        (Some(max), Some(per_hour)) => {
            let left = max - used.cost.unwrap_or_default() - reserved * per_hour;
            let words = format!(
                "cost {:.2} of {max} used, {:.2} reserved for {committed} workers' minimum life",
                used.cost.unwrap_or_default(),
                reserved * per_hour
            );
            Some((room(left, life_hours * per_hour), words))
        }
        _ => None,
    };
    let (workers, detail) = [hours, cost]
        .into_iter()
        .flatten()
        .min_by_key(|(w, _)| *w)?;
    Some(LaunchRoom {
        scope: scope.to_owned(),
        workers,
        detail,
    })
}

/// What one scope used, for [`judge`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Use {
    /// Worker-hours in the window.
    pub worker_hours: f64,
    /// Cost in the window, when every worker counted has a cost per hour.
    pub cost: Option<f64>,
}

/// The status of a scope: whether a limit is reached (`used >= limit`) and which.
pub fn judge(scope: &str, limits: BudgetLimits, used: Use) -> BudgetStatus {
    let hours = limits
        .max_worker_hours_per_day
        .filter(|max| used.worker_hours >= *max)
        .map(|max| {
            format!(
                "{:.1} of {max} worker-hours in the last 24 h (max_worker_hours_per_day)",
                used.worker_hours
            )
        });
    let cost = match (limits.max_cost_per_day, used.cost) {
        (Some(max), Some(cost)) if cost >= max => Some(format!(
            "cost {cost:.2} of {max} in the last 24 h (max_cost_per_day)"
        )),
        _ => None,
    };
    BudgetStatus {
        scope: scope.to_owned(),
        worker_hours: used.worker_hours,
        cost: used.cost,
        limits,
        reached: hours.or(cost),
        resumes_at_seconds: None,
    }
}

#[cfg(test)]
mod tests;
