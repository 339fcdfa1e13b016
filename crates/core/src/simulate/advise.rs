//! `cl-worker-manager advise`: the manager's own history ([`crate::history`]) replayed on the
//! simulator under the settings in force, held against what happened, then under other
//! settings that trade wait against money: the frontier of those, and the point that meets
//! the admin's wait target or cost cap.
//!
//! The replay's platforms are the history's: each pool's start latency is the 10th to 90th
//! percentile of its workers' launch → check-in times, a pool whose jobs run from about their
//! launch bills its workers from then (as the history's `active` counts them), launches fail
//! at the history's share (unless the caller set them), its workers are as big as the
//! history's settings say, and the server dispatches as the real 1.7.5 one ran it: one bundle
//! per worker check-in ([`WORKER_CHECKS_IN_AFTER`]), a worker that ended kept on its list for
//! [`SERVER_FORGETS_AFTER`] and offered every bundle first. The settings swept ([`Knob`]):
//! `worker.idle_seconds`, and per pool `max`, `min` and `spill_after` (when set): every
//! combination while there are at most [`MAX_GRID`], else each alone and idle seconds with
//! each `max`. Budgets, fallback,
//! hedges and races are replayed as set, not swept. The simulations run on every core.

mod calibrate;
mod recorded;
#[cfg(test)]
mod tests;

pub use calibrate::{SERVER_FORGETS_AFTER, WORKER_CHECKS_IN_AFTER};
pub use recorded::{PoolRecord, Recorded};

use super::{SimConfig, SimError, SimReport, simulate};
use crate::budget::BudgetLimits;
use crate::pools::PoolPolicy;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Points swept in a full grid at most; beyond, one knob at a time.
pub const MAX_GRID: usize = 96;

/// Replays of the settings in force, each with its own random draws (start times, failures),
/// whose least and most figures say how far the replay moves with them ([`Spread`]).
pub const REPLAY_DRAWS: u32 = 8;

/// What the admin asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ask {
    /// The wait p90 (staged → running) to meet.
    pub p90: Option<Duration>,
    /// The cost per day not to exceed (worker-hours per day when no pool has a price).
    pub max_cost_per_day: Option<f64>,
}

/// A wait as the admin writes it: seconds (`90`), or with a unit (`90s`, `15m`, `2h`, `1d`).
pub fn parse_wait(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let scale = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => f64::NAN,
    };
    let seconds = number.trim().parse::<f64>().map(|n| n * scale);
    match seconds {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "`{text}` is not a wait: give seconds, or a number with s, m, h or d (15m)"
        )),
    }
}

/// Wait and money, per day of the history.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Figures {
    /// Median wait, staged → running, seconds.
    pub wait_p50_seconds: Option<f64>,
    /// 90th percentile wait, seconds.
    pub wait_p90_seconds: Option<f64>,
    /// Worker-hours per day.
    pub worker_hours_per_day: f64,
    /// Cost per day, when a pool has a `cost_per_hour`.
    pub cost_per_day: Option<f64>,
    /// Launches per day.
    pub launches_per_day: f64,
}

impl Figures {
    /// What `max_cost_per_day` is compared with: the cost, else the worker-hours.
    pub fn spend(&self) -> f64 {
        self.cost_per_day.unwrap_or(self.worker_hours_per_day)
    }

    fn p90(&self) -> f64 {
        self.wait_p90_seconds.unwrap_or(f64::INFINITY)
    }
}

/// How far the replay's figures move with its random draws: each figure's least and most
/// over [`REPLAY_DRAWS`] replays of the settings in force, the first the replay shown.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Spread {
    /// Replays run.
    pub draws: u32,
    /// The least of each figure.
    pub least: Figures,
    /// The most of each figure.
    pub most: Figures,
}

impl Spread {
    /// The spread of `draws`' figures.
    fn of(draws: &[Figures]) -> Self {
        let pick = |f: fn(&Figures) -> Option<f64>, most: bool| {
            let values = draws.iter().filter_map(f);
            match most {
                true => values.reduce(f64::max),
                false => values.reduce(f64::min),
            }
        };
        let figures = |most: bool| Figures {
            wait_p50_seconds: pick(|f| f.wait_p50_seconds, most),
            wait_p90_seconds: pick(|f| f.wait_p90_seconds, most),
            worker_hours_per_day: pick(|f| Some(f.worker_hours_per_day), most).unwrap_or(0.0),
            cost_per_day: pick(|f| f.cost_per_day, most),
            launches_per_day: pick(|f| Some(f.launches_per_day), most).unwrap_or(0.0),
        };
        Spread {
            draws: draws.len() as u32,
            least: figures(false),
            most: figures(true),
        }
    }
}

/// One setting changed from the settings in force.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "key", rename_all = "snake_case")]
pub enum Knob {
    /// `worker.idle_seconds` (0: never).
    IdleSeconds {
        /// The value.
        seconds: u64,
    },
    /// A pool's `max`.
    Max {
        /// The pool's index.
        pool: usize,
        /// The value.
        workers: u32,
    },
    /// A pool's `min`.
    Min {
        /// The pool's index.
        pool: usize,
        /// The value.
        workers: u32,
    },
    /// A pool's `spill_after`.
    SpillAfter {
        /// The pool's index.
        pool: usize,
        /// The value, seconds.
        seconds: u64,
    },
    /// A target-mode pool's `max_launches_per_tick` (its burst).
    Burst {
        /// The pool's index.
        pool: usize,
        /// The value.
        launches: u32,
    },
    /// A pool without its `fallback`.
    NoFallback {
        /// The pool's index.
        pool: usize,
    },
    /// The overall budget (`max_worker_hours_per_day`, `max_cost_per_day`) times `factor`;
    /// 0: none.
    Budget {
        /// The factor.
        factor: f64,
    },
}

/// One point of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// The settings changed (none: the settings in force).
    pub changes: Vec<Knob>,
    /// Its figures.
    pub figures: Figures,
    /// Bundles it left unfinished (a pool too small to run them).
    pub unfinished: usize,
    /// No other point waits less at no more cost.
    pub on_frontier: bool,
}

/// What was asked, and so how the recommendation was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// The cheapest point that meets the p90 within the cost cap.
    Both,
    /// The cheapest point that meets the p90.
    P90,
    /// The point that waits least within the cost cap.
    Cost,
    /// Nothing asked: the cheapest point that waits no longer than the settings in force.
    NoWorse,
}

/// `advise`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// Days the history spans.
    pub days: f64,
    /// Runs in it.
    pub bundles: usize,
    /// Whether cost is money (a pool has a `cost_per_hour`) or worker-hours.
    pub priced: bool,
    /// What happened, per day.
    pub recorded: Figures,
    /// The points; the first is the settings in force (the replay).
    pub points: Vec<Point>,
    /// How far the replay moves with its random draws.
    pub spread: Spread,
    /// How the recommendation was chosen.
    pub goal: Goal,
    /// The recommended point, if one meets what was asked.
    pub recommended: Option<usize>,
    /// What the replay could not model.
    pub gaps: Gaps,
}

impl Advice {
    /// The replay of the settings in force.
    pub fn replayed(&self) -> &Point {
        &self.points[0]
    }
}

/// What the replay could not model.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Gaps {
    /// Bundles the history could not follow, by why.
    pub unmodelled: BTreeMap<String, usize>,
    /// Runs on workers of no pool of the manager's (replayed on the pools).
    pub on_other_workers: usize,
    /// Reloads during the history (replayed under the settings in force throughout).
    pub settings_changes: usize,
    /// Pools with too few check-ins to measure their start latency (the default used).
    pub latency_unmeasured: Vec<String>,
    /// Pools in the history that the settings in force do not have.
    pub pools_gone: Vec<String>,
    /// Pools whose workers the settings given describe otherwise than the history's settings
    /// did: replayed with the workers that ran (the backend's shape flags cannot be given with
    /// `advise`, and a replay of other workers would not be one).
    pub shapes_from_history: Vec<ShapeFromHistory>,
    /// Settings given that differ from those the history ran with at its end (`pool.key: …`):
    /// the replay runs the settings given.
    pub settings_differ: Vec<String>,
    /// Runs of the history that no pool's workers can run in the replay (their queue or their
    /// shape): left out of its waits.
    pub unrunnable: usize,
}

/// A pool replayed with the workers the history ran, not those the settings given describe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShapeFromHistory {
    /// The pool.
    pub pool: String,
    /// What one worker offers as the settings given say.
    pub given: String,
    /// As the history's settings said.
    pub ran: String,
}

/// Replays `recorded` under `policies` and `config` (the settings in force), sweeps, and
/// recommends for `ask`.
pub fn advise(
    recorded: &Recorded,
    policies: &[PoolPolicy],
    config: &SimConfig,
    ask: Ask,
) -> Result<Advice, SimError> {
    let (policies, config, mut gaps) = calibrate::calibrate(recorded, policies, config);
    let policies = &policies[..];
    let grid = grid(policies, &config);
    let mut runs = run_all(recorded, policies, &config, &grid)?;
    let draws = runs.split_off(grid.len());
    gaps.unrunnable = runs.first().map_or(0, |replay| replay.unrunnable);
    let priced = policies.iter().any(|p| p.cost_per_hour.is_some());
    let days = recorded.days();
    let mut points: Vec<Point> = (grid.into_iter().zip(runs))
        .map(|(changes, report)| Point {
            figures: figures(&report, days),
            unfinished: report.unfinished,
            changes,
            on_frontier: false,
        })
        .collect();
    let replays: Vec<Figures> = (points.first().map(|replay| replay.figures).into_iter())
        .chain(draws.iter().map(|report| figures(report, days)))
        .collect();
    mark_frontier(&mut points);
    let (goal, recommended) = recommend(&points, ask);
    Ok(Advice {
        days,
        bundles: recorded.bundles,
        priced,
        recorded: recorded_figures(recorded, policies),
        points,
        spread: Spread::of(&replays),
        goal,
        recommended,
        gaps,
    })
}

/// The points to simulate: the settings in force first, then the sweep (see the module doc).
fn grid(policies: &[PoolPolicy], config: &SimConfig) -> Vec<Vec<Knob>> {
    let idle = config.worker_idle.as_secs();
    let mut dims: Vec<Vec<Knob>> = vec![
        [60, 300, 600, 1800]
            .into_iter()
            .filter(|s| *s != idle)
            .map(|seconds| Knob::IdleSeconds { seconds })
            .collect(),
    ];
    if config.budget.is_set() {
        dims.push(
            [0.0, 0.5, 2.0]
                .map(|factor| Knob::Budget { factor })
                .to_vec(),
        );
    }
    for (pool, policy) in policies.iter().enumerate() {
        dims.extend(
            pool_dims(pool, policy)
                .into_iter()
                .filter(|d| !d.is_empty()),
        );
    }
    let size: usize = dims.iter().map(|d| d.len() + 1).product();
    match size <= MAX_GRID {
        true => product(&dims),
        false => one_at_a_time(&dims),
    }
}

/// The other values of a pool's settings: `max` halved and doubled, `min` 0 (or 1), and when
/// set, `spill_after` halved and doubled, the burst 1 or `max` (target mode), no fallback.
fn pool_dims(pool: usize, policy: &PoolPolicy) -> Vec<Vec<Knob>> {
    let (min, max) = (policy.min, policy.max);
    let maxes = [max / 2, max.saturating_mul(2)];
    let mut dims = vec![
        (maxes.into_iter())
            .filter(|m| *m != max && *m >= min.max(1))
            .map(|workers| Knob::Max { pool, workers })
            .collect(),
    ];
    let other_min = if min > 0 { 0 } else { 1.min(max) };
    dims.push(
        (other_min != min)
            .then_some(Knob::Min {
                pool,
                workers: other_min,
            })
            .into_iter()
            .collect(),
    );
    if let Some(spill) = policy.spill_after.map(|d| d.as_secs()) {
        dims.push(
            [spill / 2, spill.saturating_mul(2).max(60)]
                .into_iter()
                .filter(|s| *s != spill)
                .map(|seconds| Knob::SpillAfter { pool, seconds })
                .collect(),
        );
    }
    if policy.launch_mode == crate::pools::LaunchMode::Target {
        let burst = policy.max_launches_per_tick;
        dims.push(
            [1, max.max(1)]
                .into_iter()
                .filter(|b| *b != burst)
                .map(|launches| Knob::Burst { pool, launches })
                .take(1)
                .collect(),
        );
    }
    if policy.fallback.is_some() {
        dims.push(vec![Knob::NoFallback { pool }]);
    }
    dims
}

/// Every combination of one choice per dimension (or none: the value in force).
fn product(dims: &[Vec<Knob>]) -> Vec<Vec<Knob>> {
    let mut points = vec![Vec::new()];
    for dim in dims {
        let mut next = Vec::with_capacity(points.len() * (dim.len() + 1));
        for point in &points {
            next.push(point.clone());
            for knob in dim {
                let mut with = point.clone();
                with.push(*knob);
                next.push(with);
            }
        }
        points = next;
    }
    points
}

/// The settings in force, each knob alone, and idle seconds with each pool's `max`.
fn one_at_a_time(dims: &[Vec<Knob>]) -> Vec<Vec<Knob>> {
    let mut points = vec![Vec::new()];
    points.extend(dims.iter().flatten().map(|k| vec![*k]));
    let maxes = (dims.iter().flatten()).filter(|k| matches!(k, Knob::Max { .. }));
    for max in maxes {
        points.extend(dims[0].iter().map(|idle| vec![*idle, *max]));
    }
    points
}

/// `policies` and `config` with `changes` applied.
pub fn apply(
    changes: &[Knob],
    policies: &[PoolPolicy],
    config: &SimConfig,
) -> (Vec<PoolPolicy>, SimConfig) {
    let (mut policies, mut config) = (policies.to_vec(), config.clone());
    for change in changes {
        match *change {
            Knob::IdleSeconds { seconds } => config.worker_idle = Duration::from_secs(seconds),
            Knob::Max { pool, workers } => policies[pool].max = workers,
            Knob::Min { pool, workers } => policies[pool].min = workers,
            Knob::SpillAfter { pool, seconds } => {
                policies[pool].spill_after = Some(Duration::from_secs(seconds))
            }
            Knob::Burst { pool, launches } => policies[pool].max_launches_per_tick = launches,
            Knob::NoFallback { pool } => policies[pool].fallback = None,
            Knob::Budget { factor } => config.budget = scaled(config.budget, factor),
        }
    }
    (policies, config)
}

/// `budget` times `factor`; 0: none.
pub fn scaled(budget: BudgetLimits, factor: f64) -> BudgetLimits {
    let scale = |limit: Option<f64>| limit.filter(|_| factor > 0.0).map(|l| l * factor);
    BudgetLimits {
        max_worker_hours_per_day: scale(budget.max_worker_hours_per_day),
        max_cost_per_day: scale(budget.max_cost_per_day),
    }
}

/// Simulates every point, then the settings in force again under the next
/// [`REPLAY_DRAWS`]` - 1` seeds (after the points, in that order), on every core.
fn run_all(
    recorded: &Recorded,
    policies: &[PoolPolicy],
    config: &SimConfig,
    grid: &[Vec<Knob>],
) -> Result<Vec<SimReport>, SimError> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let runs = grid.len() + REPLAY_DRAWS as usize - 1;
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let results = std::sync::Mutex::new((0..runs).map(|_| None).collect::<Vec<_>>());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(runs) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= runs {
                        break;
                    }
                    let (changes, draw) = match grid.get(index) {
                        Some(changes) => (&changes[..], 0),
                        None => (&[][..], (index + 1 - grid.len()) as u64),
                    };
                    let (policies, mut config) = apply(changes, policies, config);
                    config.seed = config.seed.wrapping_add(draw);
                    let report = simulate(&recorded.workload, &policies, &config);
                    let mut results = results.lock().unwrap_or_else(|p| p.into_inner());
                    results[index] = Some(report);
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(SimError::Config("a simulation did not run".into()))))
        .collect()
}

/// A simulation's figures per day of a history of `days`.
fn figures(report: &SimReport, days: f64) -> Figures {
    let hours: f64 = report.pools.iter().map(|p| p.worker_hours).sum();
    let launches: u64 = report.pools.iter().map(|p| p.launches).sum();
    Figures {
        wait_p50_seconds: report.total_wait.p50_seconds,
        wait_p90_seconds: report.total_wait.p90_seconds,
        worker_hours_per_day: hours / days,
        cost_per_day: report.cost().map(|c| c / days),
        launches_per_day: launches as f64 / days,
    }
}

/// What the history says happened, per day, priced at the pools' `cost_per_hour`.
fn recorded_figures(recorded: &Recorded, policies: &[PoolPolicy]) -> Figures {
    let days = recorded.days();
    let price = |name: &str| {
        (policies.iter())
            .find(|p| p.name == name)
            .and_then(|p| p.cost_per_hour)
    };
    let priced = policies.iter().any(|p| p.cost_per_hour.is_some());
    let cost = (recorded.pools.iter())
        .map(|(name, pool)| pool.active_seconds / 3600.0 * price(name).unwrap_or(0.0))
        .sum::<f64>();
    Figures {
        wait_p50_seconds: recorded.wait.p50_seconds,
        wait_p90_seconds: recorded.wait.p90_seconds,
        worker_hours_per_day: recorded.worker_hours() / days,
        cost_per_day: priced.then_some(cost / days),
        launches_per_day: recorded.launches() as f64 / days,
    }
}

/// Marks the points no other point beats on both wait p90 and cost; of points that tie on
/// both, the one with the fewest changes (the first swept among those) stands for them. A
/// point that leaves more bundles unfinished than the settings in force is never on it.
fn mark_frontier(points: &mut [Point]) {
    let unfinished = points.first().map_or(0, |p| p.unfinished);
    let eligible: Vec<bool> = points.iter().map(|p| p.unfinished <= unfinished).collect();
    let beats = |j: usize, i: usize| {
        let (a, b) = (&points[j], &points[i]);
        let (ca, cb) = (a.figures.spend(), b.figures.spend());
        let (wa, wb) = (a.figures.p90(), b.figures.p90());
        let simpler = (a.changes.len(), j) < (b.changes.len(), i);
        ca <= cb && wa <= wb && (ca < cb || wa < wb || simpler)
    };
    let marks: Vec<bool> = (0..points.len())
        .map(|i| eligible[i] && !(0..points.len()).any(|j| eligible[j] && beats(j, i)))
        .collect();
    for (point, mark) in points.iter_mut().zip(marks) {
        point.on_frontier = mark;
    }
}

/// The point that meets `ask` (see [`Goal`]), among the frontier's.
fn recommend(points: &[Point], ask: Ask) -> (Goal, Option<usize>) {
    let p90 = ask.p90.map(|d| d.as_secs_f64());
    let cap = ask.max_cost_per_day;
    let in_force = points[0].figures;
    let candidates = (0..points.len()).filter(|i| points[*i].on_frontier);
    let cheapest = |fits: &dyn Fn(&Figures) -> bool| {
        (candidates.clone())
            .filter(|i| fits(&points[*i].figures))
            .min_by(|a, b| {
                points[*a]
                    .figures
                    .spend()
                    .total_cmp(&points[*b].figures.spend())
            })
    };
    match (p90, cap) {
        (Some(p90), Some(cap)) => (
            Goal::Both,
            cheapest(&|f| f.p90() <= p90 && f.spend() <= cap),
        ),
        (Some(p90), None) => (Goal::P90, cheapest(&|f| f.p90() <= p90)),
        (None, Some(cap)) => (
            Goal::Cost,
            (candidates.clone())
                .filter(|i| points[*i].figures.spend() <= cap)
                .min_by(|a, b| {
                    points[*a]
                        .figures
                        .p90()
                        .total_cmp(&points[*b].figures.p90())
                }),
        ),
        (None, None) => (Goal::NoWorse, cheapest(&|f| f.p90() <= in_force.p90())),
    }
}
