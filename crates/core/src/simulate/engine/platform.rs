//! A pool's platform as [`SimConfig::platforms`](super::super::SimConfig::platforms) models
//! it, as Slurm schedules: a launched job gets a place at once when the platform has room
//! (fewer than `slots` of the pool's jobs hold one, and no busy spell), and its worker is
//! active a start latency later; otherwise it pends in the platform's queue (listed with the
//! reason `Resources`) and gets a place, in launch order, when one frees or the spell ends.
//! While its worker starts, a placed job is listed running, as Slurm lists it.

use super::super::Platform;
use super::{Phase, READY, RECLAIM, Sim, UNBLOCK};
use std::collections::VecDeque;

/// One pool's platform during a run.
#[derive(Debug, Default)]
pub(super) struct PlatformState {
    pub platform: Platform,
    /// Jobs pending for a place, in launch order.
    queue: VecDeque<u32>,
    /// Jobs holding a place (starting or active).
    placed: usize,
}

impl PlatformState {
    pub fn new(platform: Option<&Platform>) -> Self {
        Self {
            platform: platform.copied().unwrap_or_default(),
            ..Self::default()
        }
    }

    /// Whether the platform is modelled as a queue (`slots` or `busy`), as Slurm is: a job
    /// it gives a place runs (Slurm's RUNNING) while its worker starts. Elsewhere a job is
    /// pending until its worker is up (a VM or container booting).
    pub fn is_queue(&self) -> bool {
        self.platform.slots.is_some() || self.platform.busy.is_some()
    }

    /// When the platform forecasts a job queued at `now` to get a place: the busy spell's end,
    /// if it forecasts ([`Platform::forecast`]) and a spell holds `now`.
    pub fn forecast(&self, now: u64) -> Option<u64> {
        self.platform
            .busy_until(now)
            .filter(|_| self.platform.forecast)
    }

    /// Whether the platform gives no place at `now`.
    fn full(&self, now: u64) -> bool {
        let taken = (self.platform.slots).is_some_and(|slots| self.placed >= slots as usize);
        taken || self.platform.busy_until(now).is_some()
    }
}

impl Sim<'_> {
    /// A launched `job` gets a place (its worker is active after its latency), or queues.
    pub(super) fn place(&mut self, job: u32, now: u64) {
        let pool = self.jobs[job as usize].pool;
        let state = &mut self.platforms[pool];
        if state.full(now) {
            self.jobs[job as usize].queued = true;
            state.queue.push_back(job);
            if let Some(end) = state.platform.busy_until(now) {
                self.schedule(end, UNBLOCK, pool as u32, 0);
            }
            return;
        }
        state.placed += 1;
        let worker = &mut self.jobs[job as usize];
        (worker.queued, worker.placed, worker.placed_at) = (false, true, now);
        let at = now + worker.latency;
        self.schedule(at, READY, job, 0);
    }

    /// Bills `job`'s worker time at its end, `now` (before its place is released): from its
    /// worker's check-in, or from its place where the platform bills a worker while it starts
    /// ([`Platform::bills_start`]). A job that never had a place costs nothing, nor one whose
    /// worker never became active where starting is free.
    pub(super) fn bill(&mut self, job: u32, now: u64) {
        let worker = &self.jobs[job as usize];
        let from = match (
            self.platforms[worker.pool].platform.bills_start,
            worker.phase,
        ) {
            (true, _) if worker.placed => worker.placed_at,
            (false, super::Phase::Active) => worker.active_at,
            _ => return,
        };
        self.stats[worker.pool].worker_ms += now.saturating_sub(from);
    }

    /// `job` ended (exited, failed or was stopped): its place, if it had one, goes to the
    /// next queued job.
    pub(super) fn release(&mut self, job: u32, now: u64) {
        let worker = &mut self.jobs[job as usize];
        let pool = worker.pool;
        if std::mem::take(&mut worker.placed) {
            self.platforms[pool].placed -= 1;
        }
        self.unblock(pool, now);
    }

    /// Gives `pool`'s queued jobs places, in launch order, while the platform has room.
    pub(super) fn unblock(&mut self, pool: usize, now: u64) {
        while !self.platforms[pool].full(now) {
            let Some(job) = self.platforms[pool].queue.pop_front() else {
                return;
            };
            if self.jobs[job as usize].phase == super::Phase::Pending {
                self.place(job, now);
            }
        }
    }
}

impl Sim<'_> {
    /// When `job`'s platform reclaims active workers, draws when it reclaims this one.
    pub(super) fn reclaim_later(&mut self, job: u32, now: u64) {
        let pool = self.jobs[job as usize].pool;
        if let Some(mean) = self.platforms[pool].platform.reclaim {
            let after = self.rng.exponential(mean.as_millis() as f64) as u64;
            self.schedule(now + after, RECLAIM, job, 0);
        }
    }

    /// The platform takes `job`'s worker away, and the job is listed once as preempted. The
    /// server stages its runs again when the pool's workers are preemptible (in their class's
    /// queue by age, as the server orders staged bundles); otherwise they are lost (the server
    /// marks them `worker_offline`).
    pub(super) fn reclaim(&mut self, job: u32, now: u64) {
        let worker = &mut self.jobs[job as usize];
        if worker.phase != Phase::Active {
            return;
        }
        let runs = std::mem::take(&mut worker.running);
        let pool = worker.pool;
        let busy = worker.busy_since.take().map_or(0, |since| now - since);
        for (bundle, _) in &runs {
            let owner = self.workload.arrivals[*bundle as usize].owner;
            *self.owner_runs.entry(owner).or_default() -= 1;
        }
        let restage = self.config.preemptible.contains(&self.policies[pool].name);
        let stats = &mut self.stats[pool];
        stats.busy_ms += busy;
        if !restage {
            self.runnable_left -= runs.len();
            stats.lost += runs.len();
            self.end_active(job, now, Phase::Preempted);
            return;
        }
        stats.restaged += runs.len();
        stats.rerun_ms += runs.iter().map(|(_, since)| now - since).sum::<u64>();
        self.end_active(job, now, Phase::Preempted);
        for (bundle, _) in runs {
            self.restarted.insert(bundle);
            let class = self.class_of(bundle);
            let queue = &mut self.classes[class].queue;
            queue.insert(queue.partition_point(|&b| b < bundle), bundle);
        }
        self.serve(now);
    }

    /// Whether `pool`'s platform has no capacity at `now` (a stockout spell).
    pub(super) fn stocked_out(&self, pool: usize, now: u64) -> bool {
        self.platforms[pool].platform.stockout_until(now).is_some()
    }
}
