//! Start-time estimates: for every staged bundle the manager reads, when it is expected to
//! start and why (issue #29). Pure: read from the tick's decision ([`PoolsDecision`]) and
//! what the manager learned of each pool ([`PoolTimes`]).
//!
//! - **now**: a checked-in worker has room for it ([`PoolsDecision::on_workers`]);
//! - **when a worker checks in**: a starting worker of its pool takes it (the pool's
//!   launch → check-in time less the worker's age; a job still pending past that time is
//!   queued on its platform: about as long again as it has waited), or a new one (that time,
//!   not before the pool's most queued job, after the launches paced ahead of it);
//! - **after runs end**: its pool is at its max; it starts when enough runs on the pool's
//!   workers end (each run's expected length less its age, then one run length a bundle);
//! - **after the backoff**: its pool backs off; the backoff's end, then a worker's check-in;
//! - **overdue**, with no figure: the running worker it waits for is past the pool's
//!   check-in time ("expected N s ago"), or the server has not started the bundle on a
//!   checked-in worker that fits (the one worker launched for it may not start it either);
//! - **not while** ("not yet: …"): its owner's quota, workers private to another user, no fitting pool, a
//!   budget, a pool that cannot be listed, or max reached with nothing running that could end.

use crate::policy::Reason;
use crate::pools::PoolsDecision;
pub use crate::pools::times::{PoolTimes, Starting, minutes};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;

/// When a staged bundle is expected to start, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StartEstimate {
    /// A checked-in worker has room: the server starts it within seconds.
    Now {
        /// The worker.
        worker_id: String,
    },
    /// When a worker of `pool` checks in: a starting one (`job`) or a new one.
    WorkerCheckin {
        /// The pool.
        pool: String,
        /// The starting worker's job, or `None` for a worker still to launch.
        job: Option<String>,
        /// Seconds from now.
        seconds: u64,
        /// The figure rests on the platform's own forecast of the start of that job, or of
        /// the queued one a new worker waits behind (Slurm's `squeue --start`); else on what
        /// the manager learned of the pool's launches.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        forecast: bool,
    },
    /// When runs on the pool's workers end: `ahead` bundles wait before it.
    AfterRuns {
        /// The pool.
        pool: String,
        /// Bundles ahead of it for the pool's runs.
        ahead: usize,
        /// Seconds from now.
        seconds: u64,
    },
    /// A starting worker of `pool` (`job`, running) should have checked in
    /// `overdue_seconds` ago, by the pool's launch → check-in time: no figure.
    WorkerOverdue {
        /// The pool.
        pool: String,
        /// The starting worker's job.
        job: String,
        /// Seconds past the time it was expected.
        overdue_seconds: u64,
    },
    /// The server has not started the bundle on a checked-in worker that fits
    /// ([`crate::pools::ServerView::overdue`]): one new worker of `pool` is launched for it,
    /// where the server may not start it either: no figure.
    Overdue {
        /// The pool.
        pool: String,
    },
    /// When the pool's backoff ends and a worker checks in.
    AfterBackoff {
        /// The pool.
        pool: String,
        /// Seconds from now.
        seconds: u64,
    },
    /// Not while `reason` holds.
    NotWhile {
        /// The reason's code (`quota_exhausted`, `no_fitting_pool`, `max_reached`, …).
        #[serde(deserialize_with = "crate::interned::deserialize")]
        reason: crate::interned::Code,
        /// In words.
        detail: String,
    },
}

impl StartEstimate {
    /// Seconds from now, when there is an estimate.
    pub fn seconds(&self) -> Option<u64> {
        match self {
            StartEstimate::Now { .. } => Some(0),
            StartEstimate::WorkerCheckin { seconds, .. }
            | StartEstimate::AfterRuns { seconds, .. }
            | StartEstimate::AfterBackoff { seconds, .. } => Some(*seconds),
            StartEstimate::WorkerOverdue { .. }
            | StartEstimate::Overdue { .. }
            | StartEstimate::NotWhile { .. } => None,
        }
    }

    /// The machine-readable kind (the `kind` label of the metrics).
    pub fn kind(&self) -> &'static str {
        match self {
            StartEstimate::Now { .. } => "now",
            StartEstimate::WorkerCheckin { .. } => "worker_checkin",
            StartEstimate::AfterRuns { .. } => "after_runs",
            StartEstimate::AfterBackoff { .. } => "after_backoff",
            StartEstimate::WorkerOverdue { .. } => "worker_overdue",
            StartEstimate::Overdue { .. } => "overdue",
            StartEstimate::NotWhile { .. } => "not_while",
        }
    }
}

impl fmt::Display for StartEstimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartEstimate::Now { worker_id } => write!(f, "now: worker {worker_id} has room"),
            StartEstimate::WorkerCheckin {
                pool,
                job,
                seconds,
                forecast,
            } => {
                match job {
                    Some(job) => write!(f, "in ~{seconds} s, when job {job} of {pool} checks in")?,
                    None => write!(f, "in ~{seconds} s, when a new worker of {pool} checks in")?,
                }
                match forecast {
                    true => write!(f, " (by its platform's forecast of the start)"),
                    false => Ok(()),
                }
            }
            StartEstimate::AfterRuns {
                pool,
                ahead,
                seconds,
            } => write!(
                f,
                "in ~{seconds} s, when runs on the workers of {pool} end ({ahead} ahead of it)"
            ),
            StartEstimate::AfterBackoff { pool, seconds } => {
                write!(
                    f,
                    "in ~{seconds} s, when {pool} stops backing off and a worker checks in"
                )
            }
            StartEstimate::WorkerOverdue {
                pool,
                job,
                overdue_seconds,
            } => write!(
                f,
                "overdue: job {job} of {pool} was expected to check in {overdue_seconds} s ago"
            ),
            StartEstimate::Overdue { pool } => write!(
                f,
                "overdue: the server has not started it on a checked-in worker that fits; one new worker of {pool} is launched for it, where it may not start either"
            ),
            StartEstimate::NotWhile { detail, .. } => write!(f, "not yet: {detail}"),
        }
    }
}

/// One bundle's estimate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleEstimate {
    /// The bundle uuid.
    pub uuid: String,
    /// When and why.
    #[serde(flatten)]
    pub estimate: StartEstimate,
    /// Seconds from the tick until it starts, when there is an estimate. Not read back: the
    /// key is the estimate's own `seconds` too (`estimate.seconds()` says it again).
    #[serde(skip_deserializing)]
    pub seconds: Option<u64>,
    /// The estimate in words (what `status` and the page show), with how `spill_after`
    /// weighed on its pool, when it did.
    pub text: String,
    /// How `spill_after` weighed on its pool ([`crate::pools::Spill`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill: Option<crate::pools::Spill>,
}

impl BundleEstimate {
    /// Bundle `uuid`'s `estimate`.
    pub fn new(uuid: &str, estimate: StartEstimate) -> Self {
        Self {
            uuid: uuid.to_owned(),
            seconds: estimate.seconds(),
            text: estimate.to_string(),
            estimate,
            spill: None,
        }
    }

    /// This estimate, saying how `spill_after` weighed on its pool.
    fn with_spill(mut self, spill: Option<&crate::pools::Spill>) -> Self {
        if let Some(spill) = spill {
            self.text = format!("{}; {spill}", self.text);
            self.spill = Some(spill.clone());
        }
        self
    }
}

/// A pool nothing is known of.
static UNKNOWN: PoolTimes = PoolTimes {
    checkin_seconds: 0,
    queued_seconds: None,
    run_seconds: None,
    coming: Vec::new(),
    run_ages: Vec::new(),
    launch_interval: 0,
    room: None,
};

/// The estimate of every bundle the decision places or leaves waiting. `times` holds one
/// entry per pool, in the decision's order.
pub fn estimate(decision: &PoolsDecision, times: &[PoolTimes]) -> Vec<BundleEstimate> {
    let mut out: Vec<BundleEstimate> = (decision.on_workers.iter())
        .map(|b| {
            let worker_id = b.worker_id.clone();
            BundleEstimate::new(&b.uuid, StartEstimate::Now { worker_id })
        })
        .collect();
    let pools: BTreeMap<&str, (&PoolTimes, usize)> = (decision.pools.iter().enumerate())
        .map(|(i, p)| {
            let times = times.get(i).unwrap_or(&UNKNOWN);
            (p.pool.as_str(), (times, p.launches as usize))
        })
        .collect();
    let times_of = |pool: &str| pools.get(pool).copied().unwrap_or((&UNKNOWN, 0));
    // First the bundles on workers within each pool's max, noting when each starts: the
    // bundles beyond it wait for one of those runs (or a run already going) to end.
    let mut planned: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut estimates: Vec<Option<StartEstimate>> = Vec::new();
    for assignment in &decision.assignments {
        let (times, launches) = times_of(&assignment.pool);
        let pool = assignment.pool.as_str();
        let beyond = (times.room).is_some_and(|room| assignment.worker >= times.starting() + room);
        estimates.push(match (assignment.overdue, beyond) {
            (true, _) => Some(StartEstimate::Overdue {
                pool: pool.to_owned(),
            }),
            (false, true) => None,
            (false, false) => {
                let estimate = on_worker(pool, times, assignment.worker, launches);
                let start = planned.entry(pool).or_default();
                start.extend(estimate.seconds());
                Some(estimate)
            }
        });
    }
    let mut ahead: BTreeMap<String, usize> = BTreeMap::new();
    let mut after_runs_of = |pool: &str, times: &PoolTimes| {
        let position = ahead.entry(pool.to_owned()).or_default();
        *position += 1;
        let starts = planned.get(pool).map_or(&[][..], Vec::as_slice);
        after_runs(pool, *position - 1, times, starts)
    };
    for (assignment, estimate) in decision.assignments.iter().zip(estimates) {
        let estimate = estimate
            .unwrap_or_else(|| after_runs_of(&assignment.pool, times_of(&assignment.pool).0));
        let estimate =
            BundleEstimate::new(&assignment.uuid, estimate).with_spill(assignment.spill.as_ref());
        push_sooner(&mut out, estimate);
    }
    for unserved in &decision.unserved {
        let pool = (unserved.pools.iter())
            .find(|v| v.reason.code() == unserved.reason.code())
            .map(|v| v.pool.as_str());
        let times = pool.map_or(&UNKNOWN, |p| times_of(p).0);
        let estimate = match (&unserved.reason, pool) {
            (Reason::MaxReached { .. }, Some(pool)) => after_runs_of(pool, times),
            (
                Reason::BackingOff {
                    remaining_seconds, ..
                },
                Some(pool),
            ) => StartEstimate::AfterBackoff {
                pool: pool.to_owned(),
                seconds: remaining_seconds + times.checkin_seconds,
            },
            (reason, _) => StartEstimate::NotWhile {
                reason: reason.code(),
                detail: reason.to_string(),
            },
        };
        out.push(BundleEstimate::new(&unserved.uuid, estimate));
    }
    out
}

/// Adds `estimate` to `out`; a hedged bundle's second assignment follows its first, and the
/// bundle starts on the sooner of the two.
fn push_sooner(out: &mut Vec<BundleEstimate>, estimate: BundleEstimate) {
    match out.last_mut() {
        Some(last) if last.uuid == estimate.uuid => {
            if estimate.seconds.unwrap_or(u64::MAX) < last.seconds.unwrap_or(u64::MAX) {
                *last = estimate;
            }
        }
        _ => out.push(estimate),
    }
}

/// A bundle for worker `worker` of `pool` (see [`crate::pools::BundleAssignment::worker`]):
/// it checks in as [`PoolTimes::worker_wait`] says; a new one once the launches ahead of it
/// (this tick's start now, the others one pacing interval apart) are made.
fn on_worker(pool: &str, times: &PoolTimes, worker: usize, launches: usize) -> StartEstimate {
    let wait = times.worker_wait(worker);
    if let Some(starting) = times.starting_at(worker) {
        if let Some(overdue_seconds) = times.overdue_by(starting) {
            return StartEstimate::WorkerOverdue {
                pool: pool.to_owned(),
                job: starting.job.clone(),
                overdue_seconds,
            };
        }
        return StartEstimate::WorkerCheckin {
            pool: pool.to_owned(),
            job: Some(starting.job.clone()),
            seconds: wait,
            forecast: times.forecast_used(worker),
        };
    }
    let new = worker - times.starting();
    let paced = (new + 1).saturating_sub(launches) as u64;
    StartEstimate::WorkerCheckin {
        pool: pool.to_owned(),
        job: None,
        seconds: paced * times.launch_interval + wait,
        forecast: times.forecast_used(worker),
    }
}

/// The bundle with `ahead` bundles before it, waiting for runs on `pool`'s workers to end:
/// each run going ends after the pool's run length less its age, each run planned (a bundle
/// on a worker within the pool's max, starting in `planned` seconds) a run length after it
/// starts; then each freed place runs one waiting bundle for a run length.
fn after_runs(pool: &str, ahead: usize, times: &PoolTimes, planned: &[u64]) -> StartEstimate {
    let known = !times.run_ages.is_empty() || !planned.is_empty();
    let Some(run) = times.run_seconds.filter(|_| known) else {
        let detail = match planned.len() {
            0 => format!(
                "{pool} is at its max and no run on its workers is known to end (no run time learned yet)"
            ),
            n => format!(
                "{pool}'s max is taken by the {n} bundles planned on its workers ahead of it, and no run time is learned yet to say when one ends"
            ),
        };
        return StartEstimate::NotWhile {
            reason: "max_reached",
            detail,
        };
    };
    let going = (times.run_ages.iter()).map(|age| run.saturating_sub(*age));
    let coming = planned.iter().map(|start| start + run);
    let mut free: BinaryHeap<Reverse<u64>> = going.chain(coming).map(Reverse).collect();
    let mut start = 0;
    for _ in 0..=ahead {
        let Reverse(at) = free.pop().unwrap_or(Reverse(0));
        start = at;
        free.push(Reverse(at + run));
    }
    StartEstimate::AfterRuns {
        pool: pool.to_owned(),
        ahead,
        seconds: start,
    }
}

#[cfg(test)]
mod tests;
