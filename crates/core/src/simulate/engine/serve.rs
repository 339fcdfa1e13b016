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
//! listed ghost holds every bundle until the server forgets it. (In a run where the manager
//! launched at once, two workers that checked in 4 s after the burst took nothing in the
//! 50 s the server still listed an exited worker, and idled out: 2026-11-30 15:01, its log.)

use super::{Job, Phase, ROOT, Sim, bundle_of};
use crate::command::checkin_id;
use crate::dispatch::{
    DispatchInput, Owners, Placement, QueuedBundle, Resources, ServerWorker, dispatch,
};
#[cfg(doc)]
use crate::simulate::SimConfig;
use std::collections::HashMap;

/// Where a worker is in its check-in cycle: only in a check-in does it take a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cycle {
    /// No cycle is modelled: it takes a bundle whenever it has room.
    Always,
    /// In a check-in that ends at `until` (ms).
    In { until: u64 },
    /// Between check-ins: the next begins at `next` (ms).
    Before { next: u64 },
}

impl Cycle {
    /// The position at `now` of a worker whose check-ins of `gap` ms (`None`: no cycle)
    /// begin at `from`.
    fn at(gap: Option<u64>, from: u64, now: u64) -> Self {
        let Some(gap) = gap else {
            return Cycle::Always;
        };
        if now < from {
            return Cycle::Before { next: from };
        }
        if gap == 0 {
            return Cycle::Always;
        }
        let into = (now - from) % (2 * gap);
        match into < gap {
            true => Cycle::In {
                until: now + gap - into,
            },
            false => Cycle::Before {
                next: now + 2 * gap - into,
            },
        }
    }
}

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
            if let Cycle::Before { next } = self.cycle(job, now) {
                // It is not in a check-in: the offer fails as a ghost's does, and the round
                // ends; its next check-in brings the bundle.
                self.serve_at(next);
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

    /// Where `job`'s worker is in its check-in cycle at `now` ([`SimConfig::checkin_gap`]: a
    /// check-in held for the gap, then a pause as long, from its first check-in or from the
    /// one after a check-in that brought a bundle).
    pub(super) fn cycle(&self, job: u32, now: u64) -> Cycle {
        let gap = self.config.checkin_gap.map(|gap| gap.as_millis() as u64);
        Cycle::at(gap, self.jobs[job as usize].checkins_from, now)
    }

    /// Serves at `at` (once, however many ask for that instant).
    pub(super) fn serve_at(&mut self, at: u64) {
        if self.serves.insert(at) {
            self.schedule(at, super::SERVE, 0, 0);
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

#[cfg(test)]
mod tests {
    use super::Cycle;

    #[test]
    fn a_worker_listens_for_the_gap_then_pauses_as_long() {
        use Cycle::{Always, Before, In};
        let cases = [
            // (gap, from, now, position)
            (None, 10, 0, Always),
            (Some(0), 10, 0, Before { next: 10 }),
            (Some(0), 10, 12, Always),
            (Some(5), 10, 3, Before { next: 10 }),
            (Some(5), 10, 10, In { until: 15 }),
            (Some(5), 10, 14, In { until: 15 }),
            (Some(5), 10, 15, Before { next: 20 }),
            (Some(5), 10, 19, Before { next: 20 }),
            (Some(5), 10, 20, In { until: 25 }),
            (Some(5), 10, 1_003, In { until: 1_005 }),
            (Some(5), 10, 1_007, Before { next: 1_010 }),
        ];
        for (gap, from, now, position) in cases {
            assert_eq!(Cycle::at(gap, from, now), position, "{gap:?} {from} {now}");
        }
    }
}
