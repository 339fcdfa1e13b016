//! The simulated server: after every event that can let a bundle start (an arrival, a worker
//! checking in, a run ending, a ghost leaving), the CodaLab server's dispatch as
//! [`crate::dispatch`] models it starts staged bundles on the active workers with room: several
//! on one worker while its resources allow, in the server's order, within each owner's
//! `parallel_run_quota` (the simulated workers are the root user's, so shared).
//!
//! With [`SimConfig::ghost`] and [`SimConfig::checkin_gap`] (what `advise` replays with), the
//! dispatch is as the real 1.7.5 server ran the `advise` bench (its bundle manager's log, the
//! workers' logs, and `BundleManager._schedule_run_bundles_on_workers`):
//! - a round ([`Round`]) takes the bundles staged and the workers listed at its start: a worker
//!   that checks in later waits for the next round, which comes 1 s after one that waited;
//! - it makes its offers one at a time, each bundle in the server's order to the worker it fits
//!   best, and waits for that worker's next check-in, which takes the bundle: one bundle a
//!   check-in, so one worker fills before the next starts one, its runs 5.6 s apart (the
//!   median of the bench's 31 back-to-back starts; 5.4–7.8 s), and nothing else starts
//!   meanwhile;
//! - it counts a run's room free from the worker's check-in after the run's end, the one that
//!   reports it gone (`Sim::finish`);
//! - it offers every bundle to every exited worker it still lists (a ghost) that the bundle
//!   fits, before a live one: each offer fails after 1.2 s ("Socket message timeout"), and the
//!   server forgets a ghost only between bundles. So a burst that finds a ghost listed waits
//!   for those offers, round after round, and a pool that counts the ghost's room launches
//!   only once the server has forgotten it.
//!
//! The bench's server waits for a live worker's next check-in before it sends, where upstream's
//! `cl-ws-server` wakes the worker at once (`xtask/services/codalab/launch.py` says why): with a
//! websocket server, offers to live workers wait less than this replays. An exited worker is
//! not waited for, there as upstream.

use super::{Job, Phase, ROOT, Sim, bundle_of};
use crate::command::checkin_id;
use crate::dispatch::{
    DispatchInput, Owners, Placement, QueuedBundle, Resources, ServerWorker, Unmet, dispatch,
};
#[cfg(doc)]
use crate::simulate::SimConfig;
use std::collections::{HashMap, VecDeque};

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

/// A dispatch round of the server, as CodaLab 1.7.5's bundle manager runs one: it takes the
/// workers listed at its start (a worker that checks in later waits for the next round), then
/// makes its offers one at a time, each bundle in the server's order to the worker the
/// dispatch model chose. Without [`SimConfig::checkin_gap`] and [`SimConfig::ghost`] no offer
/// waits, and a round is over at the instant it began.
#[derive(Debug, Default)]
pub(super) struct Round {
    /// The offers still to make: a bundle, and the worker chosen for it (`None`: no listed
    /// worker has room for it, and only the ghosts it fits are offered it).
    offers: VecDeque<(u32, Option<u32>)>,
    /// The live workers with room at the round's start, where an offer goes when its worker
    /// is a ghost or has no room left.
    workers: Vec<u32>,
    /// The first offer's bundle has been offered to the ghosts it fits.
    ghosts_tried: bool,
    /// Until when it waits on its offer (a worker's next check-in, or ghosts that never take
    /// one): the server's dispatch is one loop, so nothing else starts meanwhile.
    waiting_until: Option<u64>,
    /// An offer waited: the server sleeps before its next round.
    waited: bool,
}

/// What an offer to a ghost costs the server's dispatch before it tries the bundle's next
/// worker: `send_json_message`'s 1 s timeout, in which it tries the worker's socket every
/// 0.3 s; the bench server's log of 2026-11-30 21:02, "Connection refused" four times and then
/// "Socket message timeout" 1.2 s after the first try, offer after offer.
const GHOST_OFFER_MS: u64 = 1_200;

/// Between the end of a dispatch round that waited and the next (the bench server's
/// `cl-bundle-manager --sleep-time 1`).
const ROUND_PAUSE_MS: u64 = 1_000;

impl Sim<'_> {
    /// Makes the server's offers from `now` on, until one waits or the round is over.
    pub(super) fn serve(&mut self, now: u64) {
        let waiting = (self.round.as_ref()).and_then(|round| round.waiting_until);
        if waiting.is_some_and(|until| now < until) {
            return;
        }
        loop {
            // Its clean-up, before each bundle it offers: it forgets the workers it has not
            // heard from for long enough.
            self.ghosts.retain(|&(_, until)| until > now);
            if self.round.is_none() {
                self.round = self.round_at();
            }
            let Some(round) = self.round.as_mut() else {
                return;
            };
            round.waiting_until = None;
            let Some(&(bundle, chosen)) = round.offers.front() else {
                let waited = round.waited;
                self.round = None;
                if waited {
                    self.serve_at(now + ROUND_PAUSE_MS);
                }
                return;
            };
            let request = Resources::requested(&self.staged_bundle(bundle));
            let round = self.round.as_mut().expect("a round is in progress");
            if !std::mem::replace(&mut round.ghosts_tried, true) {
                // It offers the bundle to each listed ghost it fits, in turn, before a live
                // worker (the dispatch model keeps ghosts first between equally fit workers).
                let ghosts = (self.ghosts.iter())
                    .filter(|&&(ghost, _)| self.fits(ghost, &request))
                    .count() as u64;
                if ghosts > 0 {
                    self.wait(now + GHOST_OFFER_MS * ghosts);
                    return;
                }
            }
            let round = self.round.as_ref().expect("a round is in progress");
            let live = |job: u32| self.jobs[job as usize].phase == Phase::Active;
            let to = chosen
                .filter(|&job| live(job) && self.fits(job, &request))
                .or_else(|| self.best_fit(&round.workers, bundle));
            if let Some(job) = to
                && let Cycle::Before { next } = self.cycle(job, now)
            {
                // It is not in a check-in: the server waits for its next one, which takes
                // the bundle.
                self.wait(next);
                return;
            }
            let round = self.round.as_mut().expect("a round is in progress");
            round.offers.pop_front();
            round.ghosts_tried = false;
            if let Some(job) = to {
                let class = self.class_of(bundle);
                let queue = &mut self.classes[class].queue;
                if let Some(at) = queue.iter().position(|&b| b == bundle) {
                    queue.remove(at);
                }
                self.start_bundle(job, bundle, now);
            }
        }
    }

    /// The round the server would begin now: the staged bundles it offers, each to the worker
    /// the dispatch model chooses among the listed ones; `None` when it offers nothing.
    fn round_at(&self) -> Option<Round> {
        if !(self.classes.iter()).any(|c| c.server_mask != 0 && !c.queue.is_empty()) {
            return None;
        }
        let workers: Vec<u32> = (self.pool_jobs.iter().flatten().copied())
            .filter(|&j| self.has_room(&self.jobs[j as usize]))
            .collect();
        // The dispatch model keeps its input's order between equally fit workers: ghosts first.
        let room: Vec<u32> = (self.ghosts.iter().map(|&(ghost, _)| ghost))
            .chain(workers.iter().copied())
            .collect();
        // Each bundle holds at least one CPU: of a class (one request, one owner) at most the
        // free CPUs can start, and they are its oldest (the rest wait behind them). A ghost
        // is offered every bundle it fits, as no offer to it succeeds.
        let limit: usize = match self.ghosts.is_empty() {
            true => (room.iter())
                .map(|&j| self.free(&self.jobs[j as usize]).cpus.max(0) as usize)
                .sum(),
            false => usize::MAX,
        };
        let mut view: Vec<u32> = (self.classes.iter())
            .filter(|c| c.server_mask != 0)
            .flat_map(|c| c.queue.iter().take(limit).copied())
            .collect();
        if view.is_empty() {
            return None;
        }
        view.sort_unstable();
        let offers: VecDeque<(u32, Option<u32>)> = (self.placements(&view, &room).into_iter())
            .filter_map(|(bundle, placement, job)| match placement {
                Placement::Worker { .. } => Some((bundle, job)),
                // An owner with no quota left is not offered the shared workers, ghosts
                // or not.
                Placement::Unmet(
                    Unmet::QuotaExhausted { .. } | Unmet::OwnWorker { .. } | Unmet::NotOurs { .. },
                ) => None,
                _ if !self.ghosts.is_empty() => Some((bundle, None)),
                _ => None,
            })
            .collect();
        (!offers.is_empty()).then_some(Round {
            offers,
            workers,
            ..Round::default()
        })
    }

    /// The round waits on its offer until `until`.
    fn wait(&mut self, until: u64) {
        let round = self.round.as_mut().expect("a round waits on its offer");
        (round.waiting_until, round.waited) = (Some(until), true);
        self.serve_at(until);
    }

    /// Whether `job`'s worker has room for `request`, as the server counts it.
    fn fits(&self, job: u32, request: &Resources) -> bool {
        self.free(&self.jobs[job as usize])
            .shortfall(request)
            .is_none()
    }

    /// Where the dispatch model places `bundles` on the workers `room` as the server lists
    /// them now: each bundle in the server's order, its placement, and the worker's job when
    /// it is one of `room`.
    fn placements(&self, bundles: &[u32], room: &[u32]) -> Vec<(u32, Placement, Option<u32>)> {
        let ids: HashMap<String, u32> = (room.iter())
            .map(|&j| (checkin_id(&self.jobs[j as usize].unique), j))
            .collect();
        let plan = dispatch(DispatchInput {
            bundles: (bundles.iter())
                .map(|&b| QueuedBundle {
                    bundle: self.staged_bundle(b),
                })
                .collect(),
            workers: room.iter().map(|&j| self.server_worker(j, true)).collect(),
            pools: Vec::new(),
            owners: self.owners(),
        });
        (plan.bundles.into_iter())
            .filter_map(|placed| {
                let job = match &placed.placement {
                    Placement::Worker { worker_id } => ids.get(worker_id).copied(),
                    _ => None,
                };
                Some((bundle_of(&placed.uuid)?, placed.placement, job))
            })
            .collect()
    }

    /// Of `workers`, the one with room that the server would start `bundle` on now, as the
    /// dispatch model chooses (its fit and its preference among those that fit).
    fn best_fit(&self, workers: &[u32], bundle: u32) -> Option<u32> {
        let room: Vec<u32> = (workers.iter().copied())
            .filter(|&j| self.has_room(&self.jobs[j as usize]))
            .collect();
        let placed = self.placements(&[bundle], &room).into_iter().next();
        placed.and_then(|(_, _, job)| job)
    }

    /// Where `job`'s worker is in its check-in cycle at `now` ([`SimConfig::checkin_gap`]: a
    /// check-in held for the gap, then a pause as long, from its first check-in or from the
    /// one after a check-in that brought a bundle).
    pub(super) fn cycle(&self, job: u32, now: u64) -> Cycle {
        Cycle::at(
            self.checkin_gap(),
            self.jobs[job as usize].checkins_from,
            now,
        )
    }

    /// When `job`'s worker's next check-in begins after `now`: after the one it is in, or the
    /// one it waits for; `None` where no cycle is modelled.
    pub(super) fn next_checkin(&self, job: u32, now: u64) -> Option<u64> {
        match self.cycle(job, now) {
            Cycle::Always => None,
            Cycle::In { until } => Some(until + self.checkin_gap()?),
            Cycle::Before { next } => Some(next),
        }
    }

    /// [`SimConfig::checkin_gap`] in ms.
    pub(super) fn checkin_gap(&self) -> Option<u64> {
        self.config.checkin_gap.map(|gap| gap.as_millis() as u64)
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
