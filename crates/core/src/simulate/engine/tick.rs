//! The manager's side of the simulation: one tick lists the simulated jobs into the manager's
//! pool memory, plans with `plan_pools` and acts (stops stuck jobs, launches new ones whose
//! fate the configured rates draw), as `Manager::tick` does.

use super::{Fate, Job, Phase, READY, Sim};
use crate::backend::{JobState, WorkerJob};
use crate::bundle::StagedBundle;
use crate::pools::{PoolsObservation, plan_pools};
use std::time::Duration;

impl Sim<'_> {
    /// One manager tick: list, observe, plan, act, as `Manager::tick` does.
    pub(super) fn tick(&mut self, now_ms: u64) {
        self.ticks += 1;
        let now = Duration::from_millis(now_ms);
        for pool in 0..self.policies.len() {
            let jobs = &mut self.jobs;
            self.pool_jobs[pool].retain(|&j| jobs[j as usize].phase != Phase::Gone);
            let listing = self.pool_jobs[pool]
                .iter()
                .map(|&j| {
                    let job = &mut jobs[j as usize];
                    let state = match job.phase {
                        Phase::Pending => JobState::Pending,
                        Phase::Active => JobState::Active,
                        _ => {
                            job.phase = Phase::Gone;
                            JobState::Failed
                        }
                    };
                    WorkerJob::new(job.id.clone(), state)
                })
                .collect();
            // The news (failures, recoveries) is the runtime's own business: it backs off.
            let _ = self.runtimes[pool].take_listing(listing, now);
        }
        let observed = PoolsObservation {
            server: None,
            pools: self
                .runtimes
                .iter_mut()
                .map(|r| r.observation(now, None, None))
                .collect(),
            bundles: self.policy_view(),
        };
        let decision = plan_pools(&observed, &self.policies, now);
        for (pool, decision) in decision.pools.iter().enumerate() {
            if !decision.stops.is_empty() {
                for id in &decision.stops {
                    self.stop(pool, id);
                }
                let runtime = &mut self.runtimes[pool];
                let _ = runtime.fail(
                    now,
                    "pending_timeout",
                    format!("jobs {} pending too long", decision.stops.join(", ")),
                );
            }
            for _ in 0..decision.launches {
                self.launch(pool, now_ms);
            }
        }
        self.sample(now_ms);
    }

    /// The staged bundles as the manager's search returns them: arrival order, at most
    /// the class's `view_cap` of each class (see the module doc).
    fn policy_view(&self) -> Vec<StagedBundle> {
        let mut picked: Vec<u32> = self
            .classes
            .iter()
            .filter(|c| c.visible)
            .flat_map(|c| c.queue.iter().take(c.view_cap).copied())
            .collect();
        picked.sort_unstable();
        picked.into_iter().map(|b| self.staged_bundle(b)).collect()
    }

    fn stop(&mut self, pool: usize, id: &str) {
        let found = self.pool_jobs[pool]
            .iter()
            .copied()
            .find(|&j| self.jobs[j as usize].id == id);
        if let Some(job) = found
            && self.jobs[job as usize].phase == Phase::Pending
        {
            self.jobs[job as usize].phase = Phase::Gone;
            self.stats[pool].live -= 1;
            self.stats[pool].stuck_stops += 1;
            self.runtimes[pool].stopping.insert(id.to_owned());
        }
    }

    fn launch(&mut self, pool: usize, now_ms: u64) {
        let stats = &mut self.stats[pool];
        stats.launches += 1;
        stats.live += 1;
        stats.peak = stats.peak.max(stats.live);
        // A launch unique ends the id, as on every platform: the pool's launch record holds it.
        let unique = format!("{:032x}", stats.launches);
        let id = format!("{}-{unique}", self.policies[pool].name);
        self.runtimes[pool].record.launching(&unique);
        let draw = self.rng.next_f64();
        let (low, high) = self.config.start_latency;
        let latency = self
            .rng
            .between(low.as_millis() as u64, high.as_millis() as u64);
        let fate = if draw < self.config.stuck_rate {
            Fate::Stuck
        } else if draw < self.config.stuck_rate + self.config.failure_rate {
            Fate::Fail
        } else {
            Fate::Start
        };
        self.runtimes[pool].launched(
            &WorkerJob::new(id.clone(), JobState::Pending),
            Duration::from_millis(now_ms),
        );
        let job = self.jobs.len() as u32;
        self.jobs.push(Job {
            pool,
            id,
            phase: Phase::Pending,
            fate,
            active_at: 0,
            running: None,
            runs: 0,
            idle_since: 0,
            idle_generation: 0,
        });
        self.pool_jobs[pool].push(job);
        if fate != Fate::Stuck {
            self.schedule(now_ms + latency, READY, job, 0);
        }
    }
}
