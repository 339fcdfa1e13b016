//! What a history says happened ([`crate::history`]): the arrivals (its `bundle` lines, as
//! `simulate --trace` reads them), the figures the replay is held to, what the platforms took
//! to start a worker, and what the history could not follow.

use super::super::report::nearest_rank;
use super::super::{SimError, WaitStats, Workload};
use crate::bundle::WorkerShape;
use crate::history::{Line, SettingsLine, SettingsWorker};
use std::collections::BTreeMap;
use std::time::Duration;

/// A history, read for `advise`.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Its arrivals.
    pub workload: Workload,
    /// Seconds from its first line to its last.
    pub span_seconds: f64,
    /// Seconds from its first bundle's arrival (the replay's start) to the last thing it saw
    /// end (a run, a worker) or happen: the replay runs as long
    /// ([`crate::simulate::SimConfig::until`]).
    pub until_seconds: f64,
    /// Runs that ended.
    pub bundles: usize,
    /// Their waits, staged → started on a worker.
    pub wait: WaitStats,
    /// Per pool (by name), its workers that ended: count, seconds active, never used
    /// (checked in, ran nothing), and launch → check-in times (seconds).
    pub pools: BTreeMap<String, PoolRecord>,
    /// Runs on a worker of no pool of the manager's.
    pub on_other_workers: usize,
    /// Bundles it could not follow, by why.
    pub unmodelled: BTreeMap<String, usize>,
    /// The settings changed this many times during it (reloads that changed a pool's).
    pub settings_changes: usize,
    /// Its last `settings` line: the settings it ran with at its end.
    pub settings: Option<SettingsLine>,
}

/// One pool's workers in a history.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolRecord {
    /// Workers that ended.
    pub workers: usize,
    /// Their active seconds.
    pub active_seconds: f64,
    /// Workers that checked in and ran nothing.
    pub unused: usize,
    /// Workers that failed before they checked in.
    pub failed: usize,
    /// Launch → first check-in, seconds, of those that checked in.
    pub checkins: Vec<f64>,
    /// Launch → running on the platform, seconds, of those that ran.
    pub placed: Vec<f64>,
}

impl PoolRecord {
    /// The start latency the simulator gives the pool: the 10th to the 90th percentile of
    /// its launch → check-in times (with few, their least and greatest), when one checked in.
    pub fn start_latency(&self) -> Option<(Duration, Duration)> {
        if self.checkins.is_empty() {
            return None;
        }
        let mut sorted = self.checkins.clone();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| nearest_rank(&sorted, q).map(|s| Duration::from_secs_f64(s.max(0.0)));
        Some((at(0.1)?, at(0.9)?))
    }
}

impl PoolRecord {
    /// The platform runs (and bills) the pool's jobs from about their launch: the median
    /// launch → running is under a quarter of the median launch → check-in (a local process,
    /// a VM billed while it boots), not after a queue (a Slurm partition's). The replay then
    /// bills its workers from their place ([`super::super::Platform::bills_start`]), as the
    /// history's `active` counts them.
    pub fn runs_from_launch(&self) -> bool {
        let median = |values: &[f64]| {
            let mut sorted = values.to_vec();
            sorted.sort_by(f64::total_cmp);
            sorted.get(sorted.len() / 2).copied()
        };
        match (median(&self.placed), median(&self.checkins)) {
            (Some(placed), Some(checked_in)) => placed <= checked_in / 4.0,
            _ => false,
        }
    }
}

impl Recorded {
    /// Reads a history's text (its day files, oldest first). Fails on a line that is not a
    /// history line, naming it, or when no run in it ended.
    pub fn parse(text: &str) -> Result<Self, SimError> {
        let workload = Workload::parse(text)?;
        let mut recorded = Self {
            workload,
            span_seconds: 0.0,
            until_seconds: 0.0,
            bundles: 0,
            wait: WaitStats::default(),
            pools: BTreeMap::new(),
            on_other_workers: 0,
            unmodelled: BTreeMap::new(),
            settings_changes: 0,
            settings: None,
        };
        let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
        let (mut first_arrival, mut last_end) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut waits = Vec::new();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let line: Line = serde_json::from_str(line).map_err(|e| SimError::Trace {
                line: index + 1,
                message: format!("not a line of the manager's history: {e}"),
            })?;
            first = first.min(line.time());
            last = last.max(line.time());
            last_end = last_end.max(line.ended());
            if let Line::Bundle(bundle) = &line {
                first_arrival = first_arrival.min(bundle.time);
            }
            recorded.take(line, &mut waits);
        }
        recorded.bundles = waits.len();
        if recorded.bundles == 0 {
            return Err(SimError::Config(
                "the history holds no run that ended: nothing to replay yet".into(),
            ));
        }
        recorded.wait = WaitStats::of(&mut waits);
        recorded.span_seconds = (last - first).max(0.0);
        recorded.until_seconds = (last_end - first_arrival).max(0.0);
        Ok(recorded)
    }

    fn take(&mut self, line: Line, waits: &mut Vec<u64>) {
        match line {
            Line::Bundle(bundle) => {
                waits.push((bundle.wait.max(0.0) * 1000.0).round() as u64);
                self.on_other_workers += usize::from(bundle.pool.is_empty());
            }
            Line::Worker(worker) => {
                let pool = self.pools.entry(worker.pool).or_default();
                pool.workers += 1;
                pool.active_seconds += worker.active;
                pool.unused += usize::from(worker.checked_in.is_some() && worker.runs == 0);
                pool.failed += usize::from(worker.end == "failed" && worker.checked_in.is_none());
                pool.checkins.extend(worker.checked_in);
                pool.placed.extend(worker.placed);
            }
            Line::Unmodelled(unmodelled) => {
                *self.unmodelled.entry(unmodelled.why).or_default() += 1;
            }
            Line::Settings(settings) => {
                let last = self.settings.replace(settings);
                let now = self.settings.as_ref().map(|s| (&s.pools, s.sleep_time));
                if last.is_some_and(|last| Some((&last.pools, last.sleep_time)) != now) {
                    self.settings_changes += 1;
                }
            }
            Line::Event(_) | Line::Decision(_) => {}
        }
    }

    /// `pool` as the last `settings` line writes it ([`SettingsLine::pool`]), if it names it.
    pub fn ran_pool(&self, pool: &str) -> Option<&serde_json::Map<String, serde_json::Value>> {
        let settings = self.settings.as_ref()?;
        (settings.pools.iter())
            .filter_map(|p| p.as_object())
            .find(|p| p.get("name").and_then(|n| n.as_str()) == Some(pool))
    }

    /// What one worker of `pool` offered as the last `settings` line says, if it says.
    pub fn ran_shape(&self, pool: &str) -> Option<WorkerShape> {
        let worker = self.ran_pool(pool)?.get("worker")?.clone();
        let worker = serde_json::from_value::<SettingsWorker>(worker).ok()?;
        Some(worker.shape())
    }

    /// Days the history spans (at least an hour's worth, so that a short one gives a rate).
    pub fn days(&self) -> f64 {
        self.span_seconds.max(3600.0) / 86_400.0
    }

    /// Worker-hours of the workers that ended, all pools.
    pub fn worker_hours(&self) -> f64 {
        self.pools.values().map(|p| p.active_seconds).sum::<f64>() / 3600.0
    }

    /// Workers that ended, all pools.
    pub fn launches(&self) -> usize {
        self.pools.values().map(|p| p.workers).sum()
    }

    /// The share of launches that failed before their worker checked in.
    pub fn failure_rate(&self) -> f64 {
        let failed: usize = self.pools.values().map(|p| p.failed).sum();
        match self.launches() {
            0 => 0.0,
            n => failed as f64 / n as f64,
        }
    }
}
