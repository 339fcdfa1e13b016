//! What a simulation found: per pool queue waits, cost and launches, and the series over time
//! (the text table and the SVG plot of a report are `codalab-wm-app`'s).

use crate::pools::LaunchMode;
use serde::Serialize;

/// Queue-wait percentiles (nearest rank) in seconds; `None` when no bundle ran.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct WaitStats {
    /// Median.
    pub p50_seconds: Option<f64>,
    /// 90th percentile.
    pub p90_seconds: Option<f64>,
    /// 99th percentile.
    pub p99_seconds: Option<f64>,
    /// Longest.
    pub max_seconds: Option<f64>,
}

impl WaitStats {
    /// The percentiles of `waits` (milliseconds; sorted in place).
    pub fn of(waits: &mut [u64]) -> Self {
        waits.sort_unstable();
        let rank = |p: f64| nearest_rank(waits, p / 100.0).map(|ms| ms as f64 / 1000.0);
        Self {
            p50_seconds: rank(50.0),
            p90_seconds: rank(90.0),
            p99_seconds: rank(99.0),
            max_seconds: rank(100.0),
        }
    }
}

/// The `q` quantile (0 to 1) of `sorted` by nearest rank: its ⌈q·n⌉-th value; `None` when
/// it is empty.
pub fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let n = sorted.len();
    (n > 0).then(|| sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1])
}

/// One pool's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolReport {
    /// The pool's name.
    pub name: String,
    /// Compat or target.
    pub launch_mode: LaunchMode,
    /// The worker shape.
    pub shape: String,
    /// `min`.
    pub min: u32,
    /// `max`.
    pub max: u32,
    /// Jobs launched.
    pub launches: u64,
    /// Workers that checked in and ended without running a bundle (bought for nothing).
    pub unused_launches: u64,
    /// Jobs that failed before their worker was active.
    pub failures: u64,
    /// Pending jobs stopped by `pending_timeout`.
    pub stuck_stops: u64,
    /// Pending jobs withdrawn before they started: no bundle needed them any more.
    #[serde(default)]
    pub withdrawn: u64,
    /// Most jobs (pending + active) at once.
    pub peak_workers: usize,
    /// Active worker time (what a cloud bills), hours.
    pub worker_hours: f64,
    /// Time workers spent running bundles, hours.
    pub busy_hours: f64,
    /// What the active worker time cost, when the pool has a `cost_per_hour`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Bundles started on the pool's workers.
    pub bundles_run: usize,
    /// Of those, runs lost with a reclaimed worker ([`super::Platform::reclaim`]).
    pub lost_runs: usize,
    /// Runs of reclaimed preemptible workers the server staged again
    /// ([`super::SimConfig::preemptible`]); each ran again from its start, on whichever pool
    /// took it (a bundle's first start alone counts in `bundles_run` and its wait).
    #[serde(skip_serializing_if = "is_zero")]
    pub restaged_runs: usize,
    /// The time those runs had run when their worker was reclaimed (work done again), hours.
    #[serde(skip_serializing_if = "is_zero_hours")]
    pub rerun_hours: f64,
    /// Queue waits of those bundles.
    pub wait: WaitStats,
}

/// Per tick values, downsampled to at most [`Series::MAX_ROWS`] rows by keeping the maximum
/// of each interval (peaks stay visible).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// Values per row.
    pub width: usize,
    /// Ticks per row.
    pub ticks_per_row: u64,
    /// Start time of each row, milliseconds.
    pub times_ms: Vec<u64>,
    /// `width` values per row, flattened.
    pub values: Vec<u32>,
    filled: u64,
}

impl Series {
    /// Rows kept at most (halved by merging pairs when reached).
    pub const MAX_ROWS: usize = 2048;

    /// An empty series of rows of `width` values.
    pub fn new(width: usize) -> Self {
        Self {
            width,
            ticks_per_row: 1,
            ..Self::default()
        }
    }

    /// Adds one tick's values.
    pub fn push(&mut self, time_ms: u64, row: &[u32]) {
        if !self.times_ms.is_empty() && self.filled < self.ticks_per_row {
            let start = self.values.len() - self.width;
            for (kept, value) in self.values[start..].iter_mut().zip(row) {
                *kept = (*kept).max(*value);
            }
            self.filled += 1;
            return;
        }
        if self.times_ms.len() == Self::MAX_ROWS {
            self.halve();
        }
        self.times_ms.push(time_ms);
        self.values.extend_from_slice(row);
        self.filled = 1;
    }

    fn halve(&mut self) {
        let width = self.width;
        let rows = self.times_ms.len() / 2;
        for r in 0..rows {
            self.times_ms[r] = self.times_ms[2 * r];
            for c in 0..width {
                self.values[r * width + c] =
                    self.values[2 * r * width + c].max(self.values[(2 * r + 1) * width + c]);
            }
        }
        self.times_ms.truncate(rows);
        self.values.truncate(rows * width);
        self.ticks_per_row *= 2;
    }

    /// The rows.
    pub fn rows(&self) -> impl Iterator<Item = (u64, &[u32])> {
        self.times_ms
            .iter()
            .copied()
            .zip(self.values.chunks(self.width.max(1)))
    }
}

/// How good one kind of start-time estimate was: each bundle's first estimate with a time,
/// scored when the bundle left staged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EstimateReport {
    /// The estimate's kind (`worker_checkin`, `after_runs`, …), or `all`.
    pub kind: String,
    /// Estimates scored.
    pub scored: usize,
    /// Their absolute errors, seconds.
    pub error: WaitStats,
}

impl EstimateReport {
    /// One report for all the estimates, then one per kind; `errors` are `(kind,
    /// milliseconds)`.
    pub fn of(errors: &mut [(&'static str, u64)]) -> Vec<Self> {
        if errors.is_empty() {
            return Vec::new();
        }
        let mut all: Vec<u64> = errors.iter().map(|(_, e)| *e).collect();
        let mut reports = vec![Self {
            kind: "all".into(),
            scored: all.len(),
            error: WaitStats::of(&mut all),
        }];
        errors.sort_unstable();
        for chunk in errors.chunk_by(|a, b| a.0 == b.0) {
            let mut kind: Vec<u64> = chunk.iter().map(|(_, e)| *e).collect();
            reports.push(Self {
                kind: chunk[0].0.into(),
                scored: kind.len(),
                error: WaitStats::of(&mut kind),
            });
        }
        reports
    }
}

/// Everything a simulation found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimReport {
    /// The seed used.
    pub seed: u64,
    /// Seconds between ticks.
    pub sleep_seconds: f64,
    /// Simulated time from the first arrival to the end.
    pub simulated_seconds: f64,
    /// Manager ticks simulated.
    pub ticks: u64,
    /// Bundles in the workload.
    pub bundles: usize,
    /// Bundles that started.
    pub started: usize,
    /// Bundles that finished.
    pub finished: usize,
    /// Bundles some pool could run that had not finished at the end (lost runs aside).
    pub unfinished: usize,
    /// Runs lost with reclaimed workers: CodaLab 1.7.5 marks them `worker_offline`, and
    /// nothing stages them again.
    pub lost: usize,
    /// Bundles no pool's workers can run (tag or resources).
    pub unrunnable: usize,
    /// Bundles still staged at the end that the policy fits to no pool.
    pub staged_for_no_pool: usize,
    /// The end came from the drain limit, not from the last bundle finishing.
    pub drained: bool,
    /// Queue waits over all pools.
    pub total_wait: WaitStats,
    /// The start-time estimates' absolute errors, by kind (as `/metrics` scores them).
    pub estimates: Vec<EstimateReport>,
    /// Per pool, in declaration order.
    pub pools: Vec<PoolReport>,
    /// Per pool staged bundles (preferred pool), jobs and active workers per tick.
    #[serde(skip)]
    pub series: Series,
}

impl SimReport {
    /// What the pools with a `cost_per_hour` cost in all; `None` when none has one.
    pub fn cost(&self) -> Option<f64> {
        let mut priced = self.pools.iter().filter_map(|p| p.cost).peekable();
        priced.peek()?;
        Some(priced.fold(0.0, |a, b| a + b))
    }
}

/// `serde`'s `skip_serializing_if` of a count that is zero.
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `serde`'s `skip_serializing_if` of hours that are zero.
fn is_zero_hours(h: &f64) -> bool {
    *h == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut waits: Vec<u64> = (1..=100).rev().map(|s| s * 1000).collect();
        let stats = WaitStats::of(&mut waits);
        assert_eq!(stats.p50_seconds, Some(50.0));
        assert_eq!(stats.p90_seconds, Some(90.0));
        assert_eq!(stats.p99_seconds, Some(99.0));
        assert_eq!(stats.max_seconds, Some(100.0));
        assert_eq!(WaitStats::of(&mut []), WaitStats::default());
    }

    #[test]
    fn series_keeps_peaks_when_halving() {
        let mut series = Series::new(1);
        for t in 0..(Series::MAX_ROWS as u64 * 3) {
            series.push(t, &[u32::from(t == 777)]);
        }
        assert!(series.times_ms.len() <= Series::MAX_ROWS);
        assert_eq!(series.ticks_per_row, 4);
        assert_eq!(series.rows().filter(|(_, v)| v[0] == 1).count(), 1);
        assert_eq!(series.times_ms[1], 4);
    }
}
