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
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;

/// What the manager knows of one pool's times, in seconds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolTimes {
    /// From a launch to the worker's first check-in, of launches the platform did not queue:
    /// learned from the pool's own launches, or the prior.
    pub checkin_seconds: u64,
    /// The same, of launches the platform queued (seen pending with a reason), once one of
    /// them has checked in: how long the platform's queue held them.
    pub queued_seconds: Option<u64>,
    /// How long a run takes on the pool's workers, once one was seen to end.
    pub run_seconds: Option<u64>,
    /// The pool's starting workers (pending, or running and not checked in), oldest first;
    /// those on hold ([`Starting::on_hold`]) are left out of every wait.
    pub coming: Vec<Starting>,
    /// Seconds since each run on the pool's workers was first seen.
    pub run_ages: Vec<u64>,
    /// Seconds between two launches of the pool beyond this tick's (its pacing).
    pub launch_interval: u64,
    /// New workers the pool may still start (its max less its jobs); `None`: no limit known.
    /// A bundle the decision puts on a new worker beyond these waits for runs to end (compat
    /// pools assign every bundle, as upstream counts them).
    pub room: Option<usize>,
}

/// A starting worker of a pool: launched, not yet checked in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Starting {
    /// Its job id.
    pub job: String,
    /// Seconds since its launch.
    pub age: u64,
    /// Still pending on its platform (queued, not yet running).
    pub pending: bool,
    /// The platform's reason for its state (Slurm's `Resources`, `Priority` …), when it
    /// gives one.
    pub reason: Option<String>,
    /// Its platform holds it by itself, not for capacity (Slurm's `JobHeldAdmin`,
    /// `Dependency` …: [`crate::backend::WorkerBackend::on_hold`]): no starting worker of
    /// the pool, and no queue a new one waits behind.
    pub on_hold: bool,
}

impl Starting {
    /// Whether its platform holds it in a queue: pending with a reason.
    pub fn held(&self) -> bool {
        self.pending && self.reason.is_some()
    }

    /// Seconds until it checks in when such a launch takes `typical` seconds: the rest of
    /// that time; a job still pending past it, about as long again as it has waited (the
    /// one figure a queue gives away).
    fn wait(&self, typical: u64) -> u64 {
        if self.pending && self.age >= typical {
            self.age
        } else {
            typical.saturating_sub(self.age)
        }
    }
}

impl PoolTimes {
    /// The pool's starting workers bundles may wait for (those not on hold), oldest first.
    fn waiting(&self) -> impl Iterator<Item = &Starting> {
        self.coming.iter().filter(|s| !s.on_hold)
    }

    /// How many starting workers bundles may wait for (not on hold): the pool's first workers
    /// in [`crate::pools::BundleAssignment::worker`]'s numbering.
    pub fn starting(&self) -> usize {
        self.waiting().count()
    }

    /// Starting worker `worker` (not on hold), if it is one.
    fn starting_at(&self, worker: usize) -> Option<&Starting> {
        self.waiting().nth(worker)
    }

    /// Seconds until worker `worker` of the pool checks in (its index as in
    /// [`crate::pools::BundleAssignment::worker`]; pacing aside): a starting one after the
    /// launch → check-in time of its kind (queued by its platform, or not) less its age, or,
    /// pending past it, as long again as it has waited; a new one after the pool's check-in
    /// time, and not before the queued job ahead of it.
    pub fn worker_wait(&self, worker: usize) -> u64 {
        match self.starting_at(worker) {
            Some(starting) => self.wait_of(starting),
            None => (self.ahead())
                .map_or(0, |s| self.wait_of(s))
                .max(self.checkin_seconds),
        }
    }

    /// What [`PoolTimes::worker_wait`] rests on for worker `worker`, in words: "job 12
    /// pending 35 min: Resources" or "a worker checks in in ~2 min".
    pub fn wait_basis(&self, worker: usize) -> String {
        let queued = match self.starting_at(worker) {
            Some(starting) => Some(starting).filter(|s| self.is_queued(s)),
            None => self.ahead(),
        };
        let Some(s) = queued else {
            return format!("a worker checks in in ~{}", minutes(self.checkin_seconds));
        };
        let reason = (s.reason.as_deref()).map_or_else(String::new, |r| format!(": {r}"));
        let learned = match self.queued_seconds {
            Some(typical) if s.held() && s.age < typical => {
                format!("; queued launches took ~{}", minutes(typical))
            }
            _ => String::new(),
        };
        format!("job {} pending {}{reason}{learned}", s.job, minutes(s.age))
    }

    /// Seconds a running (not pending) starting worker is past the launch → check-in time
    /// of its kind, when it is.
    fn overdue_by(&self, starting: &Starting) -> Option<u64> {
        let typical = match self.queued_seconds {
            Some(queued) if starting.held() => queued,
            _ => self.checkin_seconds,
        };
        (!starting.pending && starting.age > typical).then(|| starting.age - typical)
    }

    fn wait_of(&self, starting: &Starting) -> u64 {
        let typical = match self.queued_seconds {
            Some(queued) if starting.held() => queued,
            _ => self.checkin_seconds,
        };
        starting.wait(typical)
    }

    /// Queued: held by its platform, or pending past the pool's check-in time.
    fn is_queued(&self, starting: &Starting) -> bool {
        starting.held() || (starting.pending && starting.age >= self.checkin_seconds)
    }

    /// The queued job a new launch would wait behind the longest, if any.
    fn ahead(&self) -> Option<&Starting> {
        (self.waiting())
            .filter(|s| self.is_queued(s))
            .max_by_key(|s| self.wait_of(s))
    }
}

/// `seconds` in words: "45 s", "4 min", "2 h 5 min" (whole minutes rounded up, so a longer
/// time never reads shorter).
pub fn minutes(seconds: u64) -> String {
    let whole = seconds.div_ceil(60);
    match seconds {
        0..120 => format!("{seconds} s"),
        _ if whole < 120 => format!("{whole} min"),
        _ => format!("{} h {} min", whole / 60, whole % 60),
    }
}

/// When a staged bundle is expected to start, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
        reason: &'static str,
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
                job: Some(job),
                seconds,
            } => write!(f, "in ~{seconds} s, when job {job} of {pool} checks in"),
            StartEstimate::WorkerCheckin { pool, seconds, .. } => {
                write!(f, "in ~{seconds} s, when a new worker of {pool} checks in")
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BundleEstimate {
    /// The bundle uuid.
    pub uuid: String,
    /// When and why.
    #[serde(flatten)]
    pub estimate: StartEstimate,
    /// Seconds from the tick until it starts, when there is an estimate.
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
    let mut ahead: BTreeMap<&str, usize> = BTreeMap::new();
    for assignment in &decision.assignments {
        let (times, launches) = times_of(&assignment.pool);
        let pool = assignment.pool.as_str();
        let beyond = (times.room).is_some_and(|room| assignment.worker >= times.starting() + room);
        let estimate = if assignment.overdue {
            StartEstimate::Overdue {
                pool: pool.to_owned(),
            }
        } else if beyond {
            let position = ahead.entry(pool).or_default();
            *position += 1;
            after_runs(pool, *position - 1, times)
        } else {
            on_worker(pool, times, assignment.worker, launches)
        };
        out.push(
            BundleEstimate::new(&assignment.uuid, estimate).with_spill(assignment.spill.as_ref()),
        );
    }
    for unserved in &decision.unserved {
        let pool = (unserved.pools.iter())
            .find(|v| v.reason.code() == unserved.reason.code())
            .map(|v| v.pool.as_str());
        let times = pool.map_or(&UNKNOWN, |p| times_of(p).0);
        let estimate = match (&unserved.reason, pool) {
            (Reason::MaxReached { .. }, Some(pool)) => {
                let position = ahead.entry(pool).or_default();
                *position += 1;
                after_runs(pool, *position - 1, times)
            }
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
        };
    }
    let new = worker - times.starting();
    let paced = (new + 1).saturating_sub(launches) as u64;
    StartEstimate::WorkerCheckin {
        pool: pool.to_owned(),
        job: None,
        seconds: paced * times.launch_interval + wait,
    }
}

/// The bundle with `ahead` bundles before it, waiting for runs on `pool`'s workers to end:
/// each run ends after the pool's run length less its age, then each freed place runs one
/// waiting bundle for a run length.
fn after_runs(pool: &str, ahead: usize, times: &PoolTimes) -> StartEstimate {
    let Some(run) = times.run_seconds.filter(|_| !times.run_ages.is_empty()) else {
        return StartEstimate::NotWhile {
            reason: "max_reached",
            detail: format!(
                "{pool} is at its max and no run on its workers is known to end (no run time learned yet)"
            ),
        };
    };
    let mut free: BinaryHeap<Reverse<u64>> = (times.run_ages.iter())
        .map(|age| Reverse(run.saturating_sub(*age)))
        .collect();
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
