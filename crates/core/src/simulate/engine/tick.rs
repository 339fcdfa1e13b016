//! The manager's side of the simulation: one tick lists the simulated jobs into the manager's
//! pool memory, reads the server's workers (the active ones, as `GET /rest/workers/info`
//! lists them), plans with `plan_pools` on the server's dispatch model, acts (stops stuck
//! jobs, launches new ones whose fate the configured rates draw) and estimates when each
//! staged bundle starts, as `Manager::tick` does; each estimate is scored when its bundle
//! leaves staged.

use super::{Fate, Job, Phase, ROOT, Sim};
use crate::backend::{JobState, WorkerJob};
use crate::bundle::StagedBundle;
use crate::checkin::{CheckedInWorker, CheckinView, Sighting};
use crate::codalab::UserIdentity;
use crate::estimate::estimate;
use crate::manager::server_view::server_view;
use crate::pools::{PoolsDecision, PoolsObservation, ServerView, plan_pools};
use rustc_hash::FxHashSet;
use std::time::Duration;

impl Sim<'_> {
    /// One manager tick: list, observe, plan, act, as `Manager::tick` does.
    pub(super) fn tick(&mut self, now_ms: u64) {
        self.ticks += 1;
        let now = Duration::from_millis(now_ms);
        for pool in 0..self.policies.len() {
            let jobs = &mut self.jobs;
            self.pool_jobs[pool].retain(|&j| jobs[j as usize].phase != Phase::Gone);
            // A queue (Slurm) runs a job it gives a place: RUNNING while its worker starts.
            let runs_placed = self.platforms[pool].is_queue();
            let listing = self.pool_jobs[pool]
                .iter()
                .map(|&j| {
                    let job = &mut jobs[j as usize];
                    let state = match job.phase {
                        Phase::Pending if job.placed && runs_placed => JobState::Active,
                        Phase::Pending => JobState::Pending,
                        Phase::Active => JobState::Active,
                        Phase::Preempted => {
                            job.phase = Phase::Gone;
                            JobState::Preempted
                        }
                        _ => {
                            job.phase = Phase::Gone;
                            JobState::Failed
                        }
                    };
                    WorkerJob {
                        reason: job.queued.then(|| "Resources".to_owned()),
                        ..WorkerJob::new(job.id.clone(), state)
                    }
                })
                .collect();
            // The news (failures, recoveries) is the runtime's own business: it backs off.
            let _ = self.runtimes[pool].take_listing(listing, now);
            let _ = self.runtimes[pool].capacity_tick(now);
        }
        let view = self.checkin_view();
        self.requests.forget(view.workers());
        for runtime in &self.runtimes {
            self.estimates.take_view(runtime, &view, now);
        }
        let sighting = Sighting {
            view: &view,
            fresh: true,
            fresh_since: Duration::ZERO,
        };
        let tick = self.config.sleep_time;
        let observed = PoolsObservation {
            server: self.server_view(&view),
            pools: (self.runtimes.iter_mut())
                .map(|r| r.observation(now, None, Some(sighting)))
                .collect(),
            bundles: self.policy_view(),
            times: (self.runtimes.iter())
                .map(|runtime| self.estimates.times(runtime, now, tick))
                .collect(),
        };
        let decision = plan_pools(&observed, &self.policies, now);
        self.estimate(&observed, &decision, now);
        self.requests.read(&observed.bundles);
        for (pool, decision) in decision.pools.iter().enumerate() {
            if !decision.stops.is_empty() {
                for id in &decision.stops {
                    self.stop(pool, id, now_ms);
                }
                let runtime = &mut self.runtimes[pool];
                let _ = runtime.fail(
                    now,
                    "pending_timeout",
                    format!("jobs {} pending too long", decision.stops.join(", ")),
                );
            }
            for _ in 0..decision.launches {
                if !self.launch(pool, now_ms) {
                    break;
                }
            }
        }
        self.sample(now_ms);
    }

    /// The server's workers as `GET /rest/workers/info` lists them: the active ones.
    fn checkin_view(&self) -> CheckinView {
        let workers = (self.pool_jobs.iter().flatten().copied())
            .filter(|&j| self.jobs[j as usize].phase == Phase::Active)
            .map(|j| {
                let worker = self.server_worker(j, false);
                CheckedInWorker {
                    worker_id: worker.worker_id,
                    run_uuids: (self.jobs[j as usize].running.iter())
                        .map(|&(b, _)| super::uuid_of(b))
                        .collect(),
                    user_id: Some(worker.owner),
                    tag: Some(worker.tag),
                    tag_exclusive: Some(worker.tag_exclusive),
                    cpus: u32::try_from(worker.total.cpus).ok(),
                    gpus: u32::try_from(worker.total.gpus).ok(),
                    memory_bytes: u64::try_from(worker.total.memory_bytes).ok(),
                    cpus_in_use: u32::try_from(worker.in_use.cpus).ok(),
                    gpus_in_use: u32::try_from(worker.in_use.gpus).ok(),
                    exit_after_num_runs: worker.runs_left,
                    ..CheckedInWorker::default()
                }
            })
            .collect();
        CheckinView::new(workers)
    }

    /// What the manager knows of the server, as `Manager` builds it (`server_view`), with each
    /// owner's quota left; none when the simulation plans one bundle a worker.
    fn server_view(&self, view: &CheckinView) -> Option<ServerView> {
        if !self.config.server_model {
            return None;
        }
        let identity = UserIdentity {
            id: ROOT.to_owned(),
            root: true,
        };
        let requests = &self.requests;
        let in_use = |worker: &_| requests.in_use(worker);
        let mut server = server_view(Some(&identity), Some(view.workers()), false, &in_use).ok()?;
        server.owners.quota_left = self.owners().quota_left;
        Some(server)
    }

    /// The tick's start-time estimates, as the manager makes them; scores those of the
    /// bundles that left staged.
    fn estimate(&mut self, observed: &PoolsObservation, decision: &PoolsDecision, now: Duration) {
        let estimates = estimate(decision, &observed.times);
        let read: FxHashSet<&str> = (observed.bundles.iter()).map(|b| b.uuid.as_str()).collect();
        for scored in self.estimates.take(&estimates, &read, true, now) {
            (self.estimate_errors).push((scored.kind, scored.error_seconds * 1000));
        }
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

    fn stop(&mut self, pool: usize, id: &str, now_ms: u64) {
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
            self.release(job, now_ms);
        }
    }

    /// One launch on `pool`; `false` when its platform had no capacity (the manager then
    /// launches no more there this tick, and the pool backs off).
    fn launch(&mut self, pool: usize, now_ms: u64) -> bool {
        let now = Duration::from_millis(now_ms);
        if self.stocked_out(pool, now_ms) {
            let what = "simulated has no capacity for a worker now: stockout".to_owned();
            self.stats[pool].failures += 1;
            let runtime = &mut self.runtimes[pool];
            runtime.last_launch = Some(now);
            let _ = runtime.fail(now, "submit_failed", what.clone());
            let _ = runtime.capacity_event(now, what);
            return false;
        }
        let stats = &mut self.stats[pool];
        stats.launches += 1;
        stats.live += 1;
        stats.peak = stats.peak.max(stats.live);
        // A launch unique ends the id, as on every platform: the pool's launch record holds it.
        // Unique across pools, as the manager's are: the server's view names workers by it.
        let unique = format!("{:032x}", self.jobs.len() + 1);
        let id = format!("{}-{unique}", self.policies[pool].name);
        self.runtimes[pool].record.launching(&unique);
        let draw = self.rng.next_f64();
        let platform = self.platforms[pool].platform.start_latency;
        let (low, high) = platform.unwrap_or(self.config.start_latency);
        let latency = self
            .rng
            .between(low.as_millis() as u64, high.as_millis() as u64);
        let preempt = self.platforms[pool].platform.preempt;
        let fate = if draw < self.config.stuck_rate {
            Fate::Stuck
        } else if draw < self.config.stuck_rate + self.config.failure_rate {
            Fate::Fail
        } else if draw < self.config.stuck_rate + self.config.failure_rate + preempt {
            Fate::Preempt
        } else {
            Fate::Start
        };
        self.runtimes[pool].launched(&WorkerJob::new(id.clone(), JobState::Pending), now);
        self.estimates.launched(&self.policies[pool].name, &id, now);
        let job = self.jobs.len() as u32;
        self.jobs.push(Job {
            pool,
            id,
            unique,
            phase: Phase::Pending,
            fate,
            active_at: 0,
            running: Vec::new(),
            in_use: Default::default(),
            started: 0,
            busy_since: None,
            idle_generation: 0,
            queued: false,
            placed: false,
            latency,
        });
        self.pool_jobs[pool].push(job);
        if fate != Fate::Stuck {
            self.place(job, now_ms);
        }
        true
    }
}
