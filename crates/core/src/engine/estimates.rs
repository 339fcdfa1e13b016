//! What the manager learns for the start-time estimates ([`crate::estimate`]) and how it
//! scores them. Per pool it learns how long its launches take to check in (launch → the
//! worker's first listing by the server; until one has, the pool's `startup_grace` is the
//! prior; launches their platform queued, seen pending with a reason, are learned apart)
//! and how long a run takes on its workers (a run id listed on one of its workers,
//! then gone from that worker while the worker is still listed); the median of the last
//! [`SAMPLES`] of each. Every staged bundle's first estimate with a time is scored when the
//! bundle leaves `staged`: the error is the distance between the predicted start and the tick
//! that no longer read it (so within one `sleep_time`).

use super::runtime::PoolRuntime;
use crate::backend::{JobState, PendingKind};
use crate::checkin::CheckinView;
use crate::estimate::{BundleEstimate, PoolTimes, Starting};
use crate::status::ScoredEstimate;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;
use std::time::Duration;

/// Samples kept per pool and kind (the estimate is their median).
pub const SAMPLES: usize = 20;

/// One pool's learned times.
#[derive(Debug, Default)]
struct Learned {
    /// Launch time (manager clock) of each job launched here whose worker has not checked in.
    launched: FxHashMap<String, Duration>,
    /// Of those, the jobs seen pending with a reason (queued by their platform: Slurm's
    /// `Resources`, `Priority` …): their check-in is learned apart, as how long the queue
    /// holds a launch, not as the launch → check-in time of a free platform.
    queued: FxHashSet<String>,
    checkins: VecDeque<u64>,
    /// Launch → check-in of the launches their platform queued.
    queued_checkins: VecDeque<u64>,
    runs: VecDeque<u64>,
    /// Runs on the pool's workers: run uuid → (worker id, first seen).
    running: FxHashMap<String, (String, Duration)>,
}

/// What the manager remembers for the estimates between ticks.
#[derive(Debug, Default)]
pub(crate) struct EstimateMemory {
    pools: FxHashMap<String, Learned>,
    /// Each bundle's first predicted start (manager clock) and the estimate's kind.
    predicted: FxHashMap<String, (Duration, &'static str)>,
}

fn push(samples: &mut VecDeque<u64>, value: u64) {
    if samples.len() == SAMPLES {
        samples.pop_front();
    }
    samples.push_back(value);
}

fn median(samples: &VecDeque<u64>) -> Option<u64> {
    let mut sorted: Vec<u64> = samples.iter().copied().collect();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied()
}

impl EstimateMemory {
    /// Notes a job of `pool` launched at `now`.
    pub fn launched(&mut self, pool: &str, job_id: &str, now: Duration) {
        let learned = self.pools.entry(pool.to_owned()).or_default();
        learned.launched.insert(job_id.to_owned(), now);
    }

    /// Takes in a fresh view of the server's workers for `runtime`'s jobs at `now`: first
    /// check-ins of jobs launched here, and runs that started or ended on its workers.
    pub fn take_view(&mut self, runtime: &PoolRuntime, view: &CheckinView, now: Duration) {
        let learned = self.pools.entry(runtime.name().to_owned()).or_default();
        let listed: FxHashSet<&str> = runtime.listed.iter().map(|j| j.id.as_str()).collect();
        learned
            .launched
            .retain(|id, _| listed.contains(id.as_str()));
        learned
            .queued
            .retain(|id| learned.launched.contains_key(id));
        for job in &runtime.listed {
            let held = job.state == JobState::Pending && job.reason.is_some();
            if held && learned.launched.contains_key(&job.id) {
                learned.queued.insert(job.id.clone());
            }
        }
        let mut workers = FxHashSet::default();
        let mut runs = FxHashSet::default();
        for job in &runtime.listed {
            let Some(worker) = view.worker_of(&job.id, &job.name) else {
                continue;
            };
            if let Some(at) = learned.launched.remove(&job.id) {
                let samples = match learned.queued.remove(&job.id) {
                    true => &mut learned.queued_checkins,
                    false => &mut learned.checkins,
                };
                push(samples, now.saturating_sub(at).as_secs());
            }
            workers.insert(worker.worker_id.as_str());
            for run in &worker.run_uuids {
                runs.insert(run.as_str());
                (learned.running)
                    .entry(run.clone())
                    .or_insert_with(|| (worker.worker_id.clone(), now));
            }
        }
        let mut ended = Vec::new();
        learned.running.retain(|run, (worker, since)| {
            let gone = !runs.contains(run.as_str());
            if gone && workers.contains(worker.as_str()) {
                ended.push(now.saturating_sub(*since).as_secs());
            }
            !gone
        });
        for length in ended {
            push(&mut learned.runs, length);
        }
    }

    /// What is known of `runtime`'s times at `now`; `tick` is the manager's `sleep_time`.
    pub fn times(&self, runtime: &PoolRuntime, now: Duration, tick: Duration) -> PoolTimes {
        let policy = &runtime.pool.policy;
        let learned = self.pools.get(runtime.name());
        let checkin_seconds =
            (learned.and_then(|l| median(&l.checkins))).unwrap_or(policy.startup_grace.as_secs());
        let mut coming: Vec<Starting> = (runtime.listed.iter())
            .filter(|job| !runtime.stopping.contains(&job.id))
            .filter_map(|job| {
                let launched = *learned?.launched.get(&job.id)?;
                let starting = matches!(job.state, JobState::Pending | JobState::Active);
                starting.then(|| Starting {
                    job: job.id.clone(),
                    age: now.saturating_sub(launched).as_secs(),
                    pending: job.state == JobState::Pending,
                    reason: job.reason.clone(),
                    on_hold: runtime.pending_kind(job) != PendingKind::Queued,
                    // A forecast whose time has passed (the job ahead is still ending, as
                    // Slurm's completing state lasts) says "any moment", not "no forecast".
                    forecast: (runtime.forecasts.get(&job.id))
                        .map(|at| at.saturating_sub(now).as_secs()),
                })
            })
            .collect();
        coming.sort_by_key(|s| std::cmp::Reverse(s.age));
        let run_ages = (learned.iter())
            .flat_map(|l| l.running.values())
            .map(|(_, since)| now.saturating_sub(*since).as_secs())
            .collect();
        let jobs = (runtime.listed.iter())
            .filter(|job| !runtime.stopping.contains(&job.id))
            .filter(|job| matches!(job.state, JobState::Pending | JobState::Active))
            .count();
        let per_tick = u64::from(policy.max_launches_per_tick.max(1));
        PoolTimes {
            checkin_seconds,
            queued_seconds: learned.and_then(|l| median(&l.queued_checkins)),
            run_seconds: learned.and_then(|l| median(&l.runs)),
            coming,
            run_ages,
            launch_interval: policy
                .min_seconds_between_workers
                .max(tick.as_secs() / per_tick),
            room: Some((policy.max as usize).saturating_sub(jobs)),
        }
    }

    /// Takes this tick's estimates at `now`: remembers each bundle's first one with a time,
    /// and, when the tick read every staged bundle (`complete`), scores those of the bundles
    /// no longer staged.
    pub fn take(
        &mut self,
        estimates: &[BundleEstimate],
        read: &FxHashSet<&str>,
        complete: bool,
        now: Duration,
    ) -> Vec<ScoredEstimate> {
        let mut scored = Vec::new();
        if complete {
            self.predicted.retain(|uuid, (at, kind)| {
                if read.contains(uuid.as_str()) {
                    return true;
                }
                let error = now.abs_diff(*at).as_secs();
                scored.push(ScoredEstimate {
                    uuid: uuid.clone(),
                    kind,
                    error_seconds: error,
                });
                false
            });
        }
        for estimate in estimates {
            if let Some(seconds) = estimate.estimate.seconds() {
                (self.predicted)
                    .entry(estimate.uuid.clone())
                    .or_insert((now + Duration::from_secs(seconds), estimate.estimate.kind()));
            }
        }
        scored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_the_last_samples() {
        let mut samples = VecDeque::new();
        for value in [50, 10, 30] {
            push(&mut samples, value);
        }
        assert_eq!(median(&samples), Some(30));
        for value in 0..SAMPLES as u64 {
            push(&mut samples, 100 + value);
        }
        assert_eq!(samples.len(), SAMPLES);
        assert_eq!(median(&samples), Some(110));
        assert_eq!(median(&VecDeque::new()), None);
    }

    #[test]
    fn each_bundles_first_estimate_is_scored_when_it_leaves_staged() {
        use crate::estimate::StartEstimate;
        let mut memory = EstimateMemory::default();
        let checkin = |seconds| {
            let pool = "cpu".to_owned();
            BundleEstimate::new(
                "0xa",
                StartEstimate::WorkerCheckin {
                    pool,
                    job: None,
                    seconds,
                    forecast: false,
                },
            )
        };
        let read: FxHashSet<&str> = ["0xa"].into_iter().collect();
        let at = Duration::from_secs;
        assert!(memory.take(&[checkin(40)], &read, true, at(100)).is_empty());
        // A later estimate does not replace the first; a partial read scores nothing.
        assert!(memory.take(&[checkin(5)], &read, true, at(110)).is_empty());
        let none = FxHashSet::default();
        assert!(memory.take(&[], &none, false, at(130)).is_empty());
        let scored = memory.take(&[], &none, true, at(150));
        assert_eq!(
            scored,
            [ScoredEstimate {
                uuid: "0xa".into(),
                kind: "worker_checkin",
                error_seconds: 10
            }]
        );
        assert!(memory.take(&[], &none, true, at(160)).is_empty(), "once");
    }
}
