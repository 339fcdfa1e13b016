//! A pool's configured rules ([`PoolPolicy`]): its shape, bounds, launch mode, timeouts,
//! costs and budgets, validated once when the config is read.

use super::fallback;
use crate::bundle::WorkerShape;
use crate::policy::PolicyConfig;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Default [`PoolPolicy::startup_grace`]: a worker has this long to take a bundle after its
/// job became active.
/// Longer means fewer duplicate workers while workers check in; shorter means less waiting
/// when a starting worker was in fact taken by another bundle.
pub const DEFAULT_STARTUP_GRACE: Duration = Duration::from_secs(30);

/// How a pool decides its launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchMode {
    /// Upstream's rules: at most one launch per tick, vetoes as `cl-worker-manager` has them.
    #[default]
    Compat,
    /// An absolute target per tick, burst launches, stuck-pending replacement and backoff.
    Target,
}

impl fmt::Display for LaunchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LaunchMode::Compat => "compat",
            LaunchMode::Target => "target",
        })
    }
}

impl std::str::FromStr for LaunchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "compat" => Ok(LaunchMode::Compat),
            "target" => Ok(LaunchMode::Target),
            other => Err(format!(
                "unknown launch mode `{other}`: use compat or target"
            )),
        }
    }
}

/// The rules of one pool. It serializes as the config file names its keys, durations in
/// seconds (what a reload's log compares, key by key: `manager/reconfigure.rs`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolPolicy {
    /// The pool's name (unique).
    #[serde(skip)]
    pub name: String,
    /// What one worker provides.
    #[serde(serialize_with = "shown")]
    pub shape: WorkerShape,
    /// Workers kept at least.
    pub min: u32,
    /// Workers never exceeded (jobs being stopped count until gone).
    pub max: u32,
    /// The tag put on the pool's workers; bundles with `request_queue == tag` need it.
    pub tag: Option<String>,
    /// The pool's workers run only bundles with `request_queue == tag`.
    pub tag_exclusive: bool,
    /// Match `request_queue` against `tag` as the server does. `false` only in the single-backend
    /// mode ([`SingleBackendFlags`](super::SingleBackendFlags)), where (as upstream) the server-side search does the queue
    /// filtering.
    pub match_request_queue: bool,
    /// Check bundles against `shape` (`false` with `--no-prefilter`).
    pub check_shape: bool,
    /// Preference among pools of the same price (`cost_per_hour`): lower is preferred; ties go
    /// to the pool declared first.
    pub cost: f64,
    /// The longest wait the admin accepts on this pool while a pricier one would start a
    /// bundle sooner ([`preference_order`](super::preference_order), `pools/spill.rs`); `None`: any wait.
    #[serde(serialize_with = "crate::seconds::serialize_option")]
    pub spill_after: Option<Duration>,
    /// The wait on this pool past which a bundle is also launched for on a later fitting
    /// pool that would start it sooner and takes hedges (`pools/hedge.rs`); `None`: no hedge.
    #[serde(serialize_with = "crate::seconds::serialize_option")]
    pub hedge_after: Option<Duration>,
    /// Launches per rolling day this pool may make for bundles hedged from another pool.
    pub hedges_per_day: u32,
    /// Where new launches go when this pool's capacity fails ([`fallback`]).
    pub fallback: Option<fallback::Fallback>,
    /// Stop jobs pending longer than this (target mode only).
    #[serde(serialize_with = "crate::seconds::serialize_option")]
    pub pending_timeout: Option<Duration>,
    /// A job active for less than this is still starting its worker (which has not yet taken
    /// a bundle): it counts as free capacity, like a pending job (target mode).
    #[serde(serialize_with = "crate::seconds::serialize")]
    pub startup_grace: Duration,
    /// A running job whose worker has not checked in with the server for longer than this is
    /// lost: stopped and replaced, and the pool backs off (target mode; see [`crate::checkin`]).
    #[serde(serialize_with = "crate::seconds::serialize")]
    pub checkin_timeout: Duration,
    /// How long the pool's decisions must find pending jobs it no longer needs before they
    /// are withdrawn (target mode; see [`crate::pools`], rule 5).
    #[serde(serialize_with = "crate::seconds::serialize")]
    pub withdraw_after: Duration,
    /// Jobs kept launched or pending per worker the staged bundles need (at least 1): the
    /// first to check in take the bundles, the rest are withdrawn before they start
    /// ([`PoolPolicy::raced`]).
    pub race: f64,
    /// While the pool races launches for waiting bundles, the manager ticks this often
    /// instead of every `sleep_time` ([`PoolPolicy::DEFAULT_RACE_WATCH`]).
    #[serde(serialize_with = "crate::seconds::serialize")]
    pub race_watch: Duration,
    /// Compat or target.
    pub launch_mode: LaunchMode,
    /// Launches per tick at most (target mode).
    pub max_launches_per_tick: u32,
    /// Seconds between two launches of this pool.
    pub min_seconds_between_workers: u64,
    /// The pool's budget per rolling day (see [`crate::budget`]).
    #[serde(flatten)]
    pub budget: crate::budget::BudgetLimits,
    /// What one worker-hour of this pool costs: its price in the preference order, and
    /// what `max_cost_per_day` meters.
    pub cost_per_hour: Option<f64>,
    /// Bundles a worker runs before it exits (`--exit-after-num-runs`), when limited: the
    /// assignment gives a worker no more (the manager sets it from the pool's worker options).
    pub runs_per_worker: Option<i64>,
}

impl PoolPolicy {
    /// `withdraw_after` when unset: none. A job is withdrawn at the first decision that finds
    /// it unneeded: a platform starts a pending job within a minute or two, so a surplus
    /// waited for is mostly a worker that boots, finds nothing and idles out (in the #29
    /// bench, 4.3 % of launches unused at a minute, 1.1 % at one tick, 0.5 % at once). The
    /// price: a launch withdrawn is not there for the next bundle that arrives (the simulate
    /// golden trace: wait p50 0 → ~40 s on 4 of 10 seeds, 4 % fewer worker-hours), which a
    /// longer `withdraw_after` buys back. The staged read never hides bundles a pending job is
    /// needed for ([`crate::pools::Need`]).
    pub const DEFAULT_WITHDRAW_AFTER: Duration = Duration::ZERO;

    /// A target-mode pool with `min` 0, upstream's `max` and pacing, and otherwise the
    /// defaults of `[[pools]]`.
    pub fn new(name: impl Into<String>, shape: WorkerShape) -> Self {
        let limits = PolicyConfig::default();
        Self {
            name: name.into(),
            shape,
            min: 0,
            max: limits.max_workers,
            tag: None,
            tag_exclusive: false,
            match_request_queue: true,
            check_shape: true,
            cost: 0.0,
            spill_after: None,
            hedge_after: None,
            hedges_per_day: 0,
            fallback: None,
            pending_timeout: None,
            startup_grace: DEFAULT_STARTUP_GRACE,
            checkin_timeout: crate::checkin::DEFAULT_CHECKIN_TIMEOUT,
            withdraw_after: Self::DEFAULT_WITHDRAW_AFTER,
            race: Self::NO_RACE,
            race_watch: Self::DEFAULT_RACE_WATCH,
            launch_mode: LaunchMode::Target,
            max_launches_per_tick: 1,
            min_seconds_between_workers: limits.min_seconds_between_workers,
            budget: crate::budget::BudgetLimits::default(),
            cost_per_hour: None,
            runs_per_worker: None,
        }
    }

    /// Checks the pool's settings; the message names the pool and the setting.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        if self.max < self.min {
            return Err(format!(
                "pool {name}: max ({}) is less than min ({})",
                self.max, self.min
            ));
        }
        if self.max_launches_per_tick == 0 {
            return Err(format!(
                "pool {name}: max_launches_per_tick must be at least 1"
            ));
        }
        if !self.cost.is_finite() {
            return Err(format!("pool {name}: cost must be a finite number"));
        }
        if self.launch_mode == LaunchMode::Compat {
            if self.pending_timeout.is_some() {
                return Err(format!(
                    "pool {name}: pending_timeout needs launch_mode = \"target\" (compat keeps upstream's rules)"
                ));
            }
            for (key, set) in [
                ("spill_after", self.spill_after.is_some()),
                ("hedge_after", self.hedge_after.is_some()),
                ("hedges_per_day", self.hedges_per_day > 0),
                ("fallback", self.fallback.is_some()),
                ("race", self.race != Self::NO_RACE),
            ] {
                if set {
                    return Err(format!(
                        "pool {name}: {key} needs launch_mode = \"target\" (compat keeps upstream's rules)"
                    ));
                }
            }
            if self.max_launches_per_tick > 1 {
                return Err(format!(
                    "pool {name}: max_launches_per_tick {} needs launch mode target (compat launches at most one worker per tick, as upstream)",
                    self.max_launches_per_tick
                ));
            }
        }
        if let Some(fallback) = &self.fallback {
            if fallback.pool == *name {
                return Err(format!("pool {name}: fallback names the pool itself"));
            }
            if fallback.after == 0 || fallback.window.is_zero() {
                return Err(format!(
                    "pool {name}: fallback_after and fallback_window must be at least 1"
                ));
            }
        }
        if !(Self::NO_RACE..=Self::MAX_RACE).contains(&self.race) {
            return Err(format!(
                "pool {name}: race {} is not between {} (no race) and {}",
                self.race,
                Self::NO_RACE,
                Self::MAX_RACE
            ));
        }
        if self.race_watch < Duration::from_secs(1) {
            return Err(format!(
                "pool {name}: race_watch must be at least 1 second (it is how often the manager ticks while the pool races)"
            ));
        }
        if self.tag_exclusive && self.tag.as_deref().is_none_or(str::is_empty) {
            return Err(format!("pool {name}: tag_exclusive needs a tag"));
        }
        self.budget
            .validate(self.cost_per_hour)
            .map_err(|problem| format!("pool {name}: {problem}"))?;
        if self.budget.max_cost_per_day.is_some() && self.cost_per_hour.is_none() {
            return Err(format!(
                "pool {name}: max_cost_per_day needs cost_per_hour (what one worker-hour costs)"
            ));
        }
        Ok(())
    }
}

/// A value as its `Display` shows it.
fn shown<S: serde::Serializer>(value: &impl fmt::Display, to: S) -> Result<S::Ok, S::Error> {
    to.collect_str(value)
}

impl PoolPolicy {
    /// `race` when unset: one job per worker needed.
    pub const NO_RACE: f64 = 1.0;

    /// The largest `race`: past a few jobs per worker, a race only adds withdrawals.
    pub const MAX_RACE: f64 = 4.0;

    /// `race_watch` when unset: a second. A race is a bet on the next seconds: once the
    /// winners check in, each loser still pending may start until the next tick withdraws it,
    /// and one that starts boots a worker that finds nothing and idles out. At the default
    /// `sleep_time` of 5 s, losers that started in that window left 2.1 % of the launches on
    /// #29's trace with runs ×0.1 unused and cost 1.04× the no-waste floor; ticking every
    /// second while the race is open: none, 0.98× (`BENCH.md`, #42). A tick costs the
    /// CodaLab server about 17 ms of CPU (`BENCH.md`, server CPU per tick), so a pool racing
    /// through a burst costs it under 2 % of a core meanwhile.
    pub const DEFAULT_RACE_WATCH: Duration = Duration::from_secs(1);

    /// Jobs to keep launched or pending for `workers` needed by staged bundles:
    /// `ceil(race × workers)`. Start times vary (a queue, a node to find, an image to pull),
    /// so the first `workers` of more jobs check in sooner than `workers` jobs do; the others
    /// are withdrawn while they pend (rule 5), which costs nothing where pending is not billed.
    pub fn raced(&self, workers: usize) -> usize {
        (self.race * workers as f64).ceil() as usize
    }

    /// How long a retry after the fallback ([`fallback::CapacityState::Retrying`]) may go
    /// without its worker checking in before it counts as failed: its pending bound
    /// (`pending_timeout`, else `checkin_timeout`), then `checkin_timeout` to check in.
    pub fn retry_within(&self) -> Duration {
        self.pending_timeout.unwrap_or(self.checkin_timeout) + self.checkin_timeout
    }
}
