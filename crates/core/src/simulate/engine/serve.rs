//! The simulated server: after every event that can let a bundle start (an arrival, a worker
//! checking in, a run ending, a ghost leaving), the CodaLab server's dispatch as
//! [`crate::dispatch`] models it starts staged bundles on the active workers with room: several
//! on one worker while its resources allow, in the server's order, within each owner's
//! `parallel_run_quota` (the simulated workers are the root user's, so shared). A bundle the
//! dispatch gives an exited worker still on the list ([`SimConfig::ghost`]) does not start, nor
//! do the later bundles of its class this round; the next round comes 9 s later, the ghosts
//! placed among the workers at random again (the server breaks ties so).

use super::{Job, Phase, ROOT, Sim, bundle_of};
use crate::command::checkin_id;
use crate::dispatch::{
    DispatchInput, Owners, Placement, QueuedBundle, Resources, ServerWorker, dispatch,
};
#[cfg(doc)]
use crate::simulate::SimConfig;
use std::collections::HashMap;

impl Sim<'_> {
    /// Starts what the server would start now.
    pub(super) fn serve(&mut self, now: u64) {
        if !(self.classes.iter()).any(|c| c.server_mask != 0 && !c.queue.is_empty()) {
            return;
        }
        let mut room: Vec<u32> = (self.pool_jobs.iter().flatten().copied())
            .filter(|&j| self.has_room(&self.jobs[j as usize]))
            .collect();
        // The server breaks ties between equally fit workers at random: ghosts go among the
        // workers in an order drawn each round (the dispatch model keeps its input's order
        // between ties).
        for &(ghost, _) in &self.ghosts {
            let at = self.rng.between(0, room.len() as u64) as usize;
            room.insert(at, ghost);
        }
        if room.is_empty() {
            return;
        }
        // Each bundle holds at least one CPU: of a class (one request, one owner) at most the
        // free CPUs can start, and they are its oldest (the rest wait behind them).
        let limit: usize = (room.iter())
            .map(|&j| self.free(&self.jobs[j as usize]).cpus.max(0) as usize)
            .sum();
        let mut view: Vec<u32> = (self.classes.iter())
            .filter(|c| c.server_mask != 0)
            .flat_map(|c| c.queue.iter().take(limit).copied())
            .collect();
        if view.is_empty() {
            return;
        }
        view.sort_unstable();
        let ids: HashMap<String, u32> = (room.iter())
            .map(|&j| (checkin_id(&self.jobs[j as usize].unique), j))
            .collect();
        let plan = dispatch(DispatchInput {
            bundles: (view.iter())
                .map(|&b| QueuedBundle {
                    bundle: self.staged_bundle(b),
                })
                .collect(),
            workers: room.iter().map(|&j| self.server_worker(j, true)).collect(),
            pools: Vec::new(),
            owners: self.owners(),
        });
        let mut offered_a_ghost = std::collections::HashSet::new();
        for placed in plan.bundles {
            let Placement::Worker { worker_id } = placed.placement else {
                continue;
            };
            let (Some(bundle), Some(&job)) = (bundle_of(&placed.uuid), ids.get(&worker_id)) else {
                continue;
            };
            let class = self.class_of(bundle);
            if self.jobs[job as usize].phase != Phase::Active || offered_a_ghost.contains(&class) {
                offered_a_ghost.insert(class);
                continue;
            }
            let front = self.classes[class].queue.pop_front();
            debug_assert_eq!(front, Some(bundle), "a class starts oldest first");
            self.start_bundle(job, bundle, now);
        }
        if !offered_a_ghost.is_empty() && self.serve_again.is_none() {
            let at = now + super::GHOST_ROUND_MS;
            self.serve_again = Some(at);
            self.schedule(at, super::SERVE_AGAIN, 0, 0);
        }
    }

    /// What is free on `job`'s worker, as the server counts it.
    fn free(&self, job: &Job) -> Resources {
        Resources::of_shape(&self.policies[job.pool].shape).minus(job.in_use)
    }

    fn has_room(&self, job: &Job) -> bool {
        let runs_left = self
            .config
            .worker_max_runs
            .is_none_or(|max| job.started < max);
        job.phase == Phase::Active && runs_left && self.free(job).cpus > 0
    }

    /// `job`'s worker as the server lists it; `memory_known`: with the memory its runs hold
    /// (the server's own count; `GET /rest/workers/info` does not report it to the manager).
    pub(super) fn server_worker(&self, job: u32, memory_known: bool) -> ServerWorker {
        let worker = &self.jobs[job as usize];
        let policy = &self.policies[worker.pool];
        let mut in_use = worker.in_use;
        if !memory_known {
            in_use.memory_bytes = 0;
        }
        ServerWorker {
            worker_id: checkin_id(&worker.unique),
            owner: ROOT.to_owned(),
            tag: policy.tag.clone().unwrap_or_default(),
            tag_exclusive: policy.tag_exclusive,
            total: Resources::of_shape(&policy.shape),
            in_use,
            runs: worker.running.len(),
            runs_left: (self.config.worker_max_runs)
                .map(|max| i64::from(max) - i64::from(worker.started)),
            terminating: false,
        }
    }

    /// The root user (the manager's, and its workers') and each owner's quota left.
    pub(super) fn owners(&self) -> Owners {
        let quota_left = (self.quotas.iter())
            .map(|(&owner, &quota)| {
                let runs = self.owner_runs.get(&owner).copied().unwrap_or(0);
                (self.workload.owners[owner as usize].clone(), quota - runs)
            })
            .collect();
        Owners {
            root: ROOT.to_owned(),
            manager: ROOT.to_owned(),
            quota_left,
            group_shared: false,
        }
    }
}
