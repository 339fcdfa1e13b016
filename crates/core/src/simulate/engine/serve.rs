//! The simulated server: after every event that can let a bundle start (an arrival, a worker
//! checking in, a run ending, a ghost leaving), the CodaLab server's dispatch as
//! [`crate::dispatch`] models it starts staged bundles on the active workers with room: several
//! on one worker while its resources allow, in the server's order, within each owner's
//! `parallel_run_quota` (the simulated workers are the root user's, so shared).
//!
//! With [`SimConfig::ghost`] and [`SimConfig::checkin_gap`] (what `advise` replays with), the
//! dispatch is as the real 1.7.5 server ran the `advise` bench, in its bundle manager's log and
//! the workers': a round offers bundles in order, each to the worker it fits best, and the
//! offer is taken only while that worker is in a check-in; the first offer that is not (a
//! worker between check-ins, or an exited one the server still lists, offered first: each of
//! the 6 spells with one listed went so, round after round about 9 s apart, though new
//! workers with room were checking in) ends the round, and nothing after it starts. So one
//! worker fills before the next starts one, a run every check-in (5.4–7.8 s apart), and a
//! listed ghost holds every bundle until the server forgets it.

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
        // The dispatch model keeps its input's order between equally fit workers: ghosts first.
        room.splice(0..0, self.ghosts.iter().map(|&(ghost, _)| ghost));
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
        let mut offered_a_ghost = false;
        for placed in plan.bundles {
            let Placement::Worker { worker_id } = placed.placement else {
                continue;
            };
            let (Some(bundle), Some(&job)) = (bundle_of(&placed.uuid), ids.get(&worker_id)) else {
                continue;
            };
            if self.jobs[job as usize].phase != Phase::Active {
                offered_a_ghost = true;
                break;
            }
            if let Some(next) = self.listens_from(job, now).filter(|&at| at > now) {
                // It is not in a check-in: the offer fails as a ghost's does, and the round
                // ends; its next check-in brings the bundle.
                self.schedule(next, super::SERVE, 0, 0);
                break;
            }
            let class = self.class_of(bundle);
            let front = self.classes[class].queue.pop_front();
            debug_assert_eq!(front, Some(bundle), "a class starts oldest first");
            self.start_bundle(job, bundle, now);
        }
        if offered_a_ghost && self.serve_again.is_none() {
            let at = now + super::GHOST_ROUND_MS;
            self.serve_again = Some(at);
            self.schedule(at, super::SERVE_AGAIN, 0, 0);
        }
    }

    /// When `job`'s worker is next in a check-in the server can answer, from `now` on
    /// ([`SimConfig::checkin_gap`]: a check-in held for the gap, then a pause as long, from
    /// its start or from the check-in after one that brought a bundle); `None`: always.
    fn listens_from(&self, job: u32, now: u64) -> Option<u64> {
        let gap = self.config.checkin_gap?.as_millis() as u64;
        let from = self.jobs[job as usize].checkins_from;
        if now < from || gap == 0 {
            return Some(from.max(now));
        }
        let into = (now - from) % (2 * gap);
        Some(if into < gap {
            now
        } else {
            now + 2 * gap - into
        })
    }

    /// When the check-in `job`'s worker is in at `now` ends, if it is in one: `cl-worker`
    /// looks at its idle time between check-ins, so an idle exit waits for it.
    pub(super) fn in_checkin_until(&self, job: u32, now: u64) -> Option<u64> {
        let gap = self.config.checkin_gap?.as_millis() as u64;
        let from = self.jobs[job as usize].checkins_from;
        let into = now.checked_sub(from)? % (2 * gap).max(1);
        (into < gap).then(|| now + gap - into)
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
