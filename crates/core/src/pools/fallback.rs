//! Falling back from a pool whose capacity fails (issue #32): a Spot pool that keeps being
//! preempted or stocked out names a `fallback` pool (`gpu-spot` → `gpu-standard`). After
//! `after` capacity events within `window` (a preemption, a launch the platform had no
//! capacity for, a job pending past `pending_timeout`), its new launches go to the fallback;
//! after `cooldown` without another, one launch tries the pool again, and its worker's
//! check-in takes the pool back; no check-in within the pool's bounds
//! ([`super::PoolPolicy::retry_within`]) is a failed retry, back to the fallback. `min_on_demand` keeps that many of the pair's workers on the
//! fallback whenever the pool has bundles. The memory ([`Capacity`]) is the manager's; the
//! plan reads its state ([`CapacityState`]). Pure: times are the manager clock.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// `fallback_after`'s default: capacity events within the window that switch the pool.
pub const DEFAULT_AFTER: u32 = 3;
/// `fallback_window`'s default.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(30 * 60);
/// `fallback_cooldown`'s default: time on the fallback before the pool is tried again.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(30 * 60);

/// A pool's fallback rules (`fallback` and the keys beside it); it serializes as those keys
/// say it, durations in seconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fallback {
    /// The pool new launches go to.
    pub pool: String,
    /// Capacity events within `window` that switch.
    pub after: u32,
    /// How far back capacity events count.
    #[serde(serialize_with = "crate::seconds::serialize")]
    pub window: Duration,
    /// Time on the fallback, since the last capacity event, before a launch tries again.
    #[serde(serialize_with = "crate::seconds::serialize")]
    pub cooldown: Duration,
    /// Workers of the pair kept on the fallback whenever this pool has bundles.
    pub min_on_demand: u32,
}

impl Fallback {
    /// The defaults, falling back to `pool`.
    pub fn to(pool: impl Into<String>) -> Self {
        Self {
            pool: pool.into(),
            after: DEFAULT_AFTER,
            window: DEFAULT_WINDOW,
            cooldown: DEFAULT_COOLDOWN,
            min_on_demand: 0,
        }
    }
}

/// Why pool `pool`'s `fallback` cannot be, among the pools `names`: it names no pool.
pub fn unknown(pool: &str, fallback: &str, names: &[&str]) -> Option<String> {
    (!names.contains(&fallback)).then(|| {
        format!(
            "pool {pool}: fallback {fallback} is not a pool (pools: {})",
            names.join(", ")
        )
    })
}

/// Where a pool with a `fallback` takes its new launches.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CapacityState {
    /// On its own capacity.
    #[default]
    Own,
    /// New launches go to the fallback.
    Fallback {
        /// Since when (manager clock, seconds).
        since_seconds: u64,
        /// When a launch tries the pool again, unless another capacity event comes first.
        retry_at_seconds: u64,
        /// Why, in words.
        why: String,
    },
    /// One launch tries the pool again; its worker's check-in takes the pool back.
    Retrying {
        /// Since when (manager clock, seconds).
        since_seconds: u64,
    },
}

/// A change of [`CapacityState`], for the log and the events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switch {
    /// New launches go to the fallback, because of `why`.
    ToFallback {
        /// Why.
        why: String,
    },
    /// The cool-down is over: one launch tries the pool again.
    Retry,
    /// A worker of the pool checked in: the pool takes its launches again.
    Restored,
}

impl fmt::Display for Switch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Switch::ToFallback { why } => write!(f, "new launches go to the fallback: {why}"),
            Switch::Retry => write!(f, "cool-down over: one launch tries the pool again"),
            Switch::Restored => write!(
                f,
                "a worker of the pool checked in: it takes its launches again"
            ),
        }
    }
}

/// A [`Capacity`] as a launch record keeps it across restarts: its times in seconds since
/// the Unix epoch (the manager clock starts again at zero in the next process).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CapacityRecord {
    /// Recent capacity events: when, and what.
    #[serde(default)]
    pub events: Vec<(u64, String)>,
    /// `own`, `fallback` or `retrying`.
    pub state: String,
    /// Fallback or retrying since.
    #[serde(default)]
    pub since: u64,
    /// Fallback: when a launch tries the pool again.
    #[serde(default)]
    pub retry_at: u64,
    /// Fallback: why, in words.
    #[serde(default)]
    pub why: String,
}

/// What the manager remembers of one pool's capacity.
#[derive(Debug, Clone, Default)]
pub struct Capacity {
    /// Recent capacity events: when, and what.
    events: VecDeque<(Duration, String)>,
    /// The pool's state.
    pub state: CapacityState,
}

impl Capacity {
    /// A capacity event at `now` (a preemption, a stockout, a job pending past its
    /// timeout): the switch it causes, if any.
    pub fn event(&mut self, rules: &Fallback, now: Duration, what: String) -> Option<Switch> {
        let start = now.saturating_sub(rules.window);
        self.events.retain(|(at, _)| *at >= start);
        self.events.push_back((now, what));
        let retry_at = (now + rules.cooldown).as_secs();
        match self.state {
            CapacityState::Own if self.events.len() >= rules.after as usize => {
                let why = self.why(rules);
                self.switch_to_fallback(now, retry_at, why)
            }
            CapacityState::Own => None,
            CapacityState::Fallback {
                ref mut retry_at_seconds,
                ..
            } => {
                *retry_at_seconds = retry_at;
                None
            }
            CapacityState::Retrying { .. } => {
                let what = self.events.back().map_or("", |(_, w)| w.as_str());
                let why = format!("the retry failed: {what}");
                self.switch_to_fallback(now, retry_at, why)
            }
        }
    }

    /// The clock reads `now`: the cool-down may be over.
    pub fn tick(&mut self, now: Duration) -> Option<Switch> {
        match self.state {
            CapacityState::Fallback {
                retry_at_seconds, ..
            } if now.as_secs() >= retry_at_seconds => {
                self.state = CapacityState::Retrying {
                    since_seconds: now.as_secs(),
                };
                Some(Switch::Retry)
            }
            _ => None,
        }
    }

    /// The clock reads `now` while a retry may have been made `within` ago or longer
    /// ([`super::PoolPolicy::retry_within`]): its worker has not checked in.
    pub fn retry_overdue(
        &mut self,
        rules: &Fallback,
        now: Duration,
        within: Duration,
    ) -> Option<Switch> {
        let CapacityState::Retrying { since_seconds } = self.state else {
            return None;
        };
        if now.as_secs() < since_seconds.saturating_add(within.as_secs()) {
            return None;
        }
        let within = super::times::minutes(within.as_secs());
        let why = format!("the retry failed: its worker did not check in within {within}");
        self.switch_to_fallback(now, (now + rules.cooldown).as_secs(), why)
    }

    /// A worker of the pool checked in for the first time.
    pub fn checked_in(&mut self) -> Option<Switch> {
        match self.state {
            CapacityState::Retrying { .. } => {
                self.state = CapacityState::Own;
                self.events.clear();
                Some(Switch::Restored)
            }
            _ => None,
        }
    }

    fn switch_to_fallback(
        &mut self,
        now: Duration,
        retry_at_seconds: u64,
        why: String,
    ) -> Option<Switch> {
        self.state = CapacityState::Fallback {
            since_seconds: now.as_secs(),
            retry_at_seconds,
            why: why.clone(),
        };
        self.events.clear();
        Some(Switch::ToFallback { why })
    }

    /// The memory as a launch record keeps it (`start`: the manager clock's zero, as time
    /// since the Unix epoch).
    pub fn to_unix(&self, start: Duration) -> CapacityRecord {
        let unix = |at: u64| start.as_secs() + at;
        let events = (self.events.iter())
            .map(|(at, what)| (unix(at.as_secs()), what.clone()))
            .collect();
        let (state, since, retry_at, why) = match &self.state {
            CapacityState::Own => ("own", 0, 0, String::new()),
            CapacityState::Fallback {
                since_seconds,
                retry_at_seconds,
                why,
            } => (
                "fallback",
                unix(*since_seconds),
                unix(*retry_at_seconds),
                why.clone(),
            ),
            CapacityState::Retrying { since_seconds } => {
                ("retrying", unix(*since_seconds), 0, String::new())
            }
        };
        CapacityRecord {
            events,
            state: state.to_owned(),
            since,
            retry_at,
            why,
        }
    }

    /// The memory `record` keeps, on the clock of a manager started at `start` (times before
    /// it read as its start: the events count a little longer, never less).
    pub fn from_unix(record: &CapacityRecord, start: Duration) -> Self {
        let clock = |unix: u64| unix.saturating_sub(start.as_secs());
        let events = (record.events.iter())
            .map(|(at, what)| (Duration::from_secs(clock(*at)), what.clone()))
            .collect();
        let state = match record.state.as_str() {
            "fallback" => CapacityState::Fallback {
                since_seconds: clock(record.since),
                retry_at_seconds: clock(record.retry_at),
                why: record.why.clone(),
            },
            "retrying" => CapacityState::Retrying {
                since_seconds: clock(record.since),
            },
            _ => CapacityState::Own,
        };
        Self { events, state }
    }

    /// "3 capacity events in 30 min, the last: job 12 preempted".
    fn why(&self, rules: &Fallback) -> String {
        let last = self.events.back().map_or("", |(_, what)| what.as_str());
        let window = super::times::minutes(rules.window.as_secs());
        format!(
            "{} capacity events in {window}, the last: {last}",
            self.events.len()
        )
    }
}

#[cfg(test)]
mod tests;
