//! The end of a run: when it is over, the plot's samples and the report.

use super::super::report::{EstimateReport, PoolReport, SimReport, WaitStats};
use super::{Phase, Sim};

/// How long past [`SimConfig::until`](crate::simulate::SimConfig::until) and an idle exit a run waits
/// for its workers to leave (a check-in, the tick that sees the exit), before it ends with
/// them billed to then.
const UNTIL_SLACK_MS: u64 = 60_000;

impl Sim<'_> {
    /// Every arrival came, and every bundle some pool can run has ended.
    pub(super) fn done(&self) -> bool {
        self.cursor == self.workload.arrivals.len() && self.runnable_left == 0
    }

    /// When the run ended, if it is over by `until` (ms): every bundle has ended, and with
    /// [`SimConfig::until`](crate::simulate::SimConfig::until), that time has passed and its
    /// workers have left (those that wait for runs at most `worker_idle` more: what happened
    /// counts the workers that ended), with nothing else due.
    pub(super) fn over_by(&self, until: u64) -> Option<u64> {
        if !self.done() {
            return None;
        }
        let last_arrival = self.workload.arrivals.last().map_or(0, |a| a.at_ms);
        let end = self.last_finish.max(last_arrival);
        let Some(until_ms) = self.config.until.map(|u| u.as_millis() as u64) else {
            return Some(end);
        };
        let idle_ms = self.config.worker_idle.as_millis() as u64;
        let left = self.stats.iter().all(|s| s.live == 0);
        let due = (self.events.peek()).is_some_and(|e| e.0.0 <= until);
        if until >= until_ms && left && !due {
            return Some(end.max(until_ms).max(self.last_event));
        }
        (until >= until_ms + idle_ms + UNTIL_SLACK_MS).then_some(until)
    }

    pub(super) fn sample(&mut self, now_ms: u64) {
        let n = self.policies.len();
        let mut row = vec![0u32; 3 * n];
        for class in &self.classes {
            if let Some(p) = class.preferred {
                row[3 * p] += class.queue.len() as u32;
            }
        }
        for (p, stats) in self.stats.iter().enumerate() {
            row[3 * p + 1] = stats.live as u32;
            row[3 * p + 2] = stats.active as u32;
        }
        self.series.push(now_ms, &row);
    }

    pub(super) fn report(mut self, end: u64, drained: bool) -> SimReport {
        for job in 0..self.jobs.len() as u32 {
            self.bill(job, end);
            let job = &self.jobs[job as usize];
            if job.phase == Phase::Active {
                let stats = &mut self.stats[job.pool];
                if let Some(since) = job.busy_since {
                    stats.busy_ms += end.saturating_sub(since);
                }
                stats.unused += u64::from(job.started == 0);
            }
        }
        let no_pool = (self.classes.iter())
            .filter(|c| c.preferred.is_none())
            .map(|c| c.queue.len())
            .sum();
        let estimates = EstimateReport::of(&mut self.estimate_errors);
        // Runs lost with reclaimed workers (`worker_offline` on the server).
        let lost = self.stats.iter().map(|s| s.lost).sum::<usize>();
        let mut all_waits = Vec::new();
        let pools: Vec<PoolReport> = self
            .policies
            .iter()
            .zip(&mut self.stats)
            .map(|(policy, stats)| {
                all_waits.extend_from_slice(&stats.waits);
                PoolReport {
                    name: policy.name.clone(),
                    launch_mode: policy.launch_mode,
                    shape: policy.shape.to_string(),
                    min: policy.min,
                    max: policy.max,
                    launches: stats.launches,
                    unused_launches: stats.unused,
                    failures: stats.failures,
                    stuck_stops: stats.stuck_stops,
                    withdrawn: stats.withdrawn,
                    peak_workers: stats.peak,
                    worker_hours: hours(stats.worker_ms),
                    busy_hours: hours(stats.busy_ms),
                    cost: (policy.cost_per_hour)
                        .map(|price| (hours(stats.worker_ms) * price * 1000.0).round() / 1000.0),
                    bundles_run: stats.waits.len(),
                    lost_runs: stats.lost,
                    restaged_runs: stats.restaged,
                    rerun_hours: hours(stats.rerun_ms),
                    wait: WaitStats::of(&mut stats.waits),
                }
            })
            .collect();
        SimReport {
            seed: self.config.seed,
            sleep_seconds: self.config.sleep_time.as_secs_f64(),
            simulated_seconds: end as f64 / 1000.0,
            ticks: self.ticks,
            bundles: self.workload.arrivals.len(),
            started: self.started,
            finished: self.finished,
            unfinished: self.workload.arrivals.len() - self.finished - self.unrunnable - lost,
            lost,
            unrunnable: self.unrunnable,
            staged_for_no_pool: no_pool,
            drained,
            total_wait: WaitStats::of(&mut all_waits),
            estimates,
            pools,
            series: self.series,
        }
    }
}

fn hours(ms: u64) -> f64 {
    (ms as f64 / 3_600_000.0 * 1000.0).round() / 1000.0
}
