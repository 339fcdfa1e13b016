//! The manager's side of the simulation: one tick drives the manager's tick engine
//! ([`crate::engine`]) as `Manager::tick` does, over the simulated platforms and server: each
//! pool's listing, the server's workers (the active ones, as `GET /rest/workers/info` lists
//! them), the staged bundles as the manager's search reads them; then the plan (budgets, the
//! pool policy on the server's dispatch model, the estimates, scored when their bundles leave
//! staged) and the act step: stops and launches, whose fate the configured rates draw.

use super::super::{PoolTrace, TickTrace};
use super::{Fate, Job, Phase, ROOT, Sim};
use crate::backend::{JobState, WorkerJob};
use crate::bundle::StagedBundle;
use crate::checkin::{CheckedInWorker, CheckinView};
use crate::codalab::UserIdentity;
use crate::engine::Listing;
use crate::error::{Error, Result};
use crate::policy::Reason;
use crate::pools::{PoolDecision, PoolsDecision, PoolsObservation};
use crate::status::TickEvent;
use std::time::{Duration, UNIX_EPOCH};

/// What the observe step gives the rest of the tick.
struct Observed {
    pools: PoolsObservation,
    events: Vec<TickEvent>,
    /// Each pool's trace so far, when traced.
    traces: Vec<PoolTrace>,
    /// The server's workers, when traced.
    workers: Option<Vec<CheckedInWorker>>,
}

/// The simulated runs' clock starts at the Unix epoch (the budget use is kept in its terms).
const START: Duration = Duration::ZERO;

impl Sim<'_> {
    /// One manager tick: observe, plan, act, as `Manager::tick` does; returns when the next
    /// one comes, as the manager's loop decides it ([`PoolsDecision::next_tick`]).
    pub(super) fn tick(&mut self, now_ms: u64) -> Duration {
        self.ticks += 1;
        let now = Duration::from_millis(now_ms);
        let mut observed = self.observe(now);
        let planned = (self.engine).plan(&mut observed.pools, true, now, START);
        for scored in planned.scored {
            (self.estimate_errors).push((scored.kind, scored.error_seconds * 1000));
        }
        let decision = planned.decision;
        let next_tick = decision.next_tick(self.config.sleep_time);
        let mut events = observed.events;
        for (pool, decided) in decision.pools.iter().enumerate() {
            let trace = observed.traces.get_mut(pool);
            events.extend(self.act(pool, decided, now_ms, trace));
        }
        self.engine.decided(&decision, now, START);
        self.engine.launched_for_overdue(&decision, &events);
        if let Some(workers) = observed.workers {
            let staged = observed.pools.bundles;
            self.keep_trace(now, workers, staged, observed.traces, &decision);
        }
        self.sample(now_ms);
        next_tick
    }

    /// The observe step: each pool's listing and the server's workers into the engine, then
    /// the staged bundles the manager's search returns, and the owners' quotas left.
    fn observe(&mut self, now: Duration) -> Observed {
        let tracing = self.trace.is_some();
        let mut traces: Vec<PoolTrace> = Vec::new();
        let listings = (0..self.policies.len())
            .map(|pool| {
                let jobs = self.listing(pool, now);
                if tracing {
                    traces.push(PoolTrace {
                        listing: jobs.clone(),
                        ..PoolTrace::default()
                    });
                }
                let listing = Listing {
                    jobs,
                    ..Listing::default()
                };
                Ok((self.engine).listed(pool, listing, now, START))
            })
            .collect();
        let view = self.checkin_view();
        let workers = tracing.then(|| view.workers().to_vec());
        let mut events = self.engine.take_checkins(Some(Ok(view)), now);
        let identity = UserIdentity {
            id: ROOT.to_owned(),
            root: true,
        };
        let identity = self.config.server_model.then_some(&identity);
        let mut observation = self.engine.observe(listings, identity, now);
        if let Some(server) = observation.pools.server.as_mut() {
            server.owners.quota_left = self.owners().quota_left;
        }
        observation.pools.bundles = self.policy_view();
        events.append(&mut observation.events);
        Observed {
            pools: observation.pools,
            events,
            traces,
            workers,
        }
    }

    /// The act step of pool `pool`: the stops and launches `decided` names, each result handed
    /// to the engine; returns the events.
    fn act(
        &mut self,
        pool: usize,
        decided: &PoolDecision,
        now_ms: u64,
        mut trace: Option<&mut PoolTrace>,
    ) -> Vec<TickEvent> {
        let now = Duration::from_millis(now_ms);
        let mut events = self.engine.note_kept(pool, decided, now);
        if !decided.stops.is_empty() {
            let results = (decided.stops.iter())
                .map(|id| {
                    let withdrawn = (decided.reasons.iter())
                        .any(|r| matches!(r, Reason::Withdrawn { job_id, .. } if job_id == id));
                    (id.clone(), self.stop(pool, id, withdrawn, now_ms))
                })
                .collect();
            let server = "the simulated server";
            events.extend((self.engine).stopped(pool, decided, results, server, now));
        }
        if let Some(trace) = trace.as_deref_mut() {
            trace.stops = decided.stops.clone();
            trace.reasons = decided.reasons.iter().map(|r| r.code()).collect();
        }
        for _ in 0..decided.launches {
            let unique = format!("{:032x}", self.jobs.len() + 1);
            self.engine.launching(pool, &unique, now, START);
            let result = self.submit(pool, &unique, now_ms);
            if let Some(trace) = trace.as_deref_mut() {
                let launch = result.as_ref().map(|job| job.id.clone());
                trace.launches.push(launch.map_err(|e| e.to_string()));
            }
            let outcome = (self.engine).launch_result(pool, &unique, &result, false, now, START);
            events.extend(outcome.events);
            if !outcome.go_on {
                break;
            }
        }
        events
    }

    /// Keeps the tick's trace (see [`TickTrace`]).
    fn keep_trace(
        &mut self,
        at: Duration,
        workers: Vec<CheckedInWorker>,
        staged: Vec<StagedBundle>,
        pools: Vec<PoolTrace>,
        decision: &PoolsDecision,
    ) {
        let run_owners = (workers.iter())
            .flat_map(|w| w.run_uuids.iter())
            .filter_map(|uuid| {
                let arrival = &self.workload.arrivals[super::bundle_of(uuid)? as usize];
                Some((uuid.clone(), self.workload.owner_of(arrival).to_owned()))
            })
            .collect();
        let trace = TickTrace {
            at,
            run_owners,
            workers,
            staged,
            pools,
            decision: decision.clone(),
        };
        self.trace.get_or_insert_default().push(trace);
    }

    /// Pool `pool`'s jobs, as its platform lists them at `now`: a job that ended is listed
    /// once more (failed or preempted), then gone; a queued one with its platform's forecast
    /// of its start, if it makes one.
    fn listing(&mut self, pool: usize, now: Duration) -> Vec<WorkerJob> {
        let forecast = (self.platforms[pool].forecast(now.as_millis() as u64))
            .map(|at| UNIX_EPOCH + START + Duration::from_millis(at));
        let jobs = &mut self.jobs;
        self.pool_jobs[pool].retain(|&j| jobs[j as usize].phase != Phase::Gone);
        // A queue (Slurm) runs a job it gives a place: RUNNING while its worker starts.
        let runs_placed = self.platforms[pool].is_queue();
        self.pool_jobs[pool]
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
                    expected_start: forecast.filter(|_| job.queued),
                    ..WorkerJob::new(job.id.clone(), state)
                }
            })
            .collect()
    }

    /// The server's workers as `GET /rest/workers/info` lists them: the active ones, and the
    /// ghosts of those that ended ([`SimConfig::ghost`](super::super::SimConfig::ghost)).
    fn checkin_view(&self) -> CheckinView {
        let ghosts = self.ghosts.iter().map(|&(job, _)| job);
        let workers = (self.pool_jobs.iter().flatten().copied())
            .filter(|&j| self.jobs[j as usize].phase == Phase::Active)
            .chain(ghosts)
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

    /// The staged bundles as the manager's search returns them: arrival order, at most
    /// the class's `view_cap` of each class (see the module doc); each with the queue
    /// [`SimConfig::route`](super::super::SimConfig::route) gives it, if any (the server
    /// dispatches by its own).
    fn policy_view(&self) -> Vec<StagedBundle> {
        let mut picked: Vec<u32> = self
            .classes
            .iter()
            .filter(|c| c.visible)
            .flat_map(|c| c.queue.iter().take(c.view_cap).copied())
            .collect();
        picked.sort_unstable();
        let routed = |b: u32, bundle: StagedBundle| match self.config.route.get(b as usize) {
            Some(queue) => StagedBundle {
                request_queue: queue.clone(),
                ..bundle
            },
            None => bundle,
        };
        (picked.into_iter())
            .map(|b| routed(b, self.staged_bundle(b)))
            .collect()
    }

    /// Stops job `id` of `pool` (`withdrawn`: a pending job no longer needed; else a stuck
    /// one); the simulated platform stops every job (one already gone too).
    fn stop(&mut self, pool: usize, id: &str, withdrawn: bool, now_ms: u64) -> Result<(), String> {
        let found =
            (self.pool_jobs[pool].iter().copied()).find(|&j| self.jobs[j as usize].id == id);
        let Some(job) = found else {
            return Ok(());
        };
        match self.jobs[job as usize].phase {
            Phase::Pending => {
                self.bill(job, now_ms);
                self.jobs[job as usize].phase = Phase::Gone;
                self.stats[pool].live -= 1;
                match withdrawn {
                    true => self.stats[pool].withdrawn += 1,
                    false => self.stats[pool].stuck_stops += 1,
                }
                self.release(job, now_ms);
            }
            Phase::Active => self.end_active(job, now_ms, Phase::Gone),
            _ => {}
        }
        Ok(())
    }

    /// Submits a job of unique `unique` to `pool`'s platform: none when it has no capacity.
    fn submit(&mut self, pool: usize, unique: &str, now_ms: u64) -> Result<WorkerJob> {
        if self.stocked_out(pool, now_ms) {
            self.stats[pool].failures += 1;
            return Err(Error::NoCapacity {
                backend: "simulated".to_owned(),
                message: "stockout".to_owned(),
            });
        }
        let stats = &mut self.stats[pool];
        stats.launches += 1;
        stats.live += 1;
        stats.peak = stats.peak.max(stats.live);
        // A launch unique ends the id, as on every platform: the pool's launch record holds it.
        // Unique across pools, as the manager's are: the server's view names workers by it.
        let id = format!("{}-{unique}", self.policies[pool].name);
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
        let job = self.jobs.len() as u32;
        self.jobs.push(Job {
            pool,
            id: id.clone(),
            unique: unique.to_owned(),
            phase: Phase::Pending,
            fate,
            active_at: 0,
            running: Vec::new(),
            in_use: Default::default(),
            started: 0,
            checkins_from: 0,
            busy_since: None,
            idle_generation: 0,
            queued: false,
            placed: false,
            latency,
            placed_at: 0,
        });
        self.pool_jobs[pool].push(job);
        if fate != Fate::Stuck {
            self.place(job, now_ms);
        }
        Ok(WorkerJob::new(id, JobState::Pending))
    }
}
