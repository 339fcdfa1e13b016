//! What-if simulation: replays a workload of bundle arrivals through the real pool policy
//! ([`plan_pools`](crate::pools::plan_pools)) and the manager's own per-pool memory (pending
//! and active times, stuck jobs being stopped, failure backoff, what the start-time
//! estimates learn), against a simulated backend and a simulated CodaLab server that
//! dispatches as [`crate::dispatch`] models the real one. It answers "what would these
//! min/max/burst/timeout settings have done to last week's workload?" in seconds,
//! deterministically for a seed.
//!
//! The model, event by event (times in milliseconds, no wall clock):
//! - **Bundles** arrive from a [`Workload`] (a trace or the Poisson generator) and are
//!   staged. After each arrival, worker check-in and run end, the server's dispatch
//!   ([`crate::dispatch::dispatch`]) starts staged bundles on the active workers: several
//!   on one worker while its CPUs, GPUs and memory (the server's 2 GiB default for a bundle
//!   that asks none) allow, in the server's order, each owner within their
//!   `parallel_run_quota` ([`SimConfig::quotas`]; the simulated workers are the root user's,
//!   so shared). A bundle runs for its `duration`; its queue wait is arrival to start.
//! - **The manager** ticks every `sleep_time` (every `race_watch` while a pool races its
//!   launches, as the manager's loop does: `PoolsDecision::next_tick`): it lists every
//!   pool's jobs, reads the server's workers (the active ones), builds the observation with
//!   the manager's pool memory, calls `plan_pools` on the server's model (or one bundle a worker:
//!   [`SimConfig::server_model`]), stops the jobs it says are stuck and launches what it
//!   says, and estimates when each staged bundle it read starts, exactly as
//!   [`Manager`](crate::Manager) does. Each bundle's first estimate is scored when it leaves
//!   staged (the report's `estimates`).
//! - **The backend**: a launched job stays pending for the start latency (uniform between
//!   the bounds), then becomes active, or fails (`failure_rate`), or never starts
//!   (`stuck_rate`: it stays pending until the policy's `pending_timeout` stops it). Failed
//!   jobs are listed once as failed, so backoff applies.
//! - **A pool's platform** ([`SimConfig::platforms`]) may have its own start latency, room
//!   for at most `slots` of the pool's jobs at once, and others filling it for part of
//!   every period (`busy`): a job ready while the platform is full stays pending, in launch
//!   order (listed with Slurm's reason `Resources`), until a slot frees or the busy spell
//!   ends. That is a free but queued Slurm partition beside a paid cloud pool (issue #32).
//!   A Spot pool's platform may have no capacity for part of every period (`stockout`: a
//!   launch fails as `Error::NoCapacity`), preempt a share of its launches before their
//!   worker is active (`preempt`) and reclaim active workers (`reclaim`, losing their runs,
//!   as the server marks them `worker_offline`): capacity events for the pool's `fallback`.
//! - **Workers** with no bundle for `worker_idle` exit (0: never), as `cl-worker
//!   --idle-seconds` does, and after `worker_max_runs` bundles when set. A worker that ends
//!   without having run a bundle is an unused launch.
//!
//! The simulation ends when every bundle that some pool can run has finished (or at `until`,
//! when that is later), or `drain` after the last arrival. Worker-hours count active
//! (billable) time until then.
//!
//! Per tick the work is bounded by the pools' sizes, not by the queue length: bundles are
//! grouped by request and owner, and the policy sees only the oldest `Σ max·cpus +
//! max(max·cpus) + 1` bundles of each group (over the pools that fit the group; a bundle holds
//! at least one CPU). That changes no launch and no stop: the group's pools can hold at most
//! `Σ max·cpus` of them, and what is left still exceeds the largest, beyond which demand is
//! clamped (the `policy_view_is_exact` test checks this on random cases); only the staged
//! counts inside the reasons shrink. The server's dispatch likewise sees of each group at most
//! as many bundles as the workers with room have free CPUs (the rest wait behind them).

pub mod advise;
mod engine;
#[cfg(test)]
mod race_tests;
pub mod report;
pub mod rng;
mod setup;
#[cfg(test)]
mod spill_tests;
#[cfg(test)]
mod tests;
pub mod what_if;
pub mod workload;

pub use report::{EstimateReport, PoolReport, SimReport, WaitStats};
pub use setup::SimPools;
pub use workload::{Arrival, BundleTemplate, PoissonRate, Workload};

use crate::pools::PoolPolicy;
use std::time::Duration;

/// Why a simulation could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A trace line could not be read.
    #[error("trace line {line}: {message}")]
    Trace {
        /// 1-based line (or element) number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The pools or the simulation settings are invalid.
    #[error("{0}")]
    Config(String),
}

/// The simulated backend and workers.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Time between two manager ticks (`--sleep-time`), unless a pool races its launches
    /// (its `race_watch`, as in the manager).
    pub sleep_time: Duration,
    /// A launched job is pending for a uniform time in `[start_latency.0, start_latency.1]`.
    pub start_latency: (Duration, Duration),
    /// Probability that a launched job fails before its worker is active.
    pub failure_rate: f64,
    /// Probability that a launched job never leaves pending (until stopped).
    pub stuck_rate: f64,
    /// A worker with no bundle for this long exits; zero: never.
    pub worker_idle: Duration,
    /// A worker exits after this many bundles (`--worker-exit-after-num-runs`).
    pub worker_max_runs: Option<u32>,
    /// Seed of the backend's randomness (latencies, failures).
    pub seed: u64,
    /// Stop this long after the last arrival even if bundles still wait.
    pub drain: Duration,
    /// Run at least this long from the first arrival, though every bundle has ended, and then
    /// until the workers have left (at most `worker_idle` and a minute more): they wait for
    /// runs and idle out, billed, as they did in what is replayed (`advise` runs to the end of
    /// the history, whose figures count the workers that ended; a run of the `advise` bench at
    /// 300 idle seconds spent a third of its worker-seconds after its last bundle). `None`: the
    /// run ends with its last bundle (the default).
    pub until: Option<Duration>,
    /// Owners' `parallel_run_quota` (the trace's `owner`): the simulated manager runs as the
    /// root user, so its workers are shared and each owner runs at most this many at once.
    pub quotas: std::collections::BTreeMap<String, u32>,
    /// Per pool (by name): how its platform starts jobs, when not as `start_latency` says.
    pub platforms: std::collections::BTreeMap<String, Platform>,
    /// Pools (by name) whose workers start as `cl-worker --preemptible` (what the manager gives
    /// every pool whose workers the platform may reclaim: `layout::preemptible`). CodaLab 1.7.5
    /// stages the runs of such a worker again when it goes offline, so a reclaim costs those
    /// runs the time they had run, not the runs; any other pool's reclaimed runs are lost.
    pub preemptible: std::collections::BTreeSet<String>,
    /// The policy plans on the server's dispatch model (workers hold several bundles, quotas
    /// hold bundles back), as the manager does when it knows its identity and the server's
    /// workers; false: one bundle a worker, as before (and when the server does not say).
    pub server_model: bool,
    /// The budget over all pools (`max_worker_hours_per_day`, `max_cost_per_day`); each
    /// pool's own is its policy's. Budgets apply as the manager applies them: the simulated
    /// run's days are rolling days from its start.
    pub budget: crate::budget::BudgetLimits,
    /// How long a worker that ended stays on the server's list: CodaLab 1.7.5 forgets a
    /// worker 60 s after its last check-in (`worker_timeout_seconds`), a `cl-worker` that exits
    /// when idle does not say so, and meanwhile the server's dispatch offers it every bundle it
    /// fits, each offer failing after 1.2 s (its log: "Socket message timeout" after four
    /// refused connections; the `advise` bench found bursts after an idle exit waiting for
    /// that cleanup), and forgets it only between two bundles (`engine/serve.rs`). With a
    /// ghost listed, the server's rounds take
    /// the bundles staged at one instant together. The manager sees it listed too, and counts
    /// its room unless the pool's workers outlive the listing
    /// ([`crate::checkin::outlives_the_listing`]).
    /// `None`: a worker leaves the list when it ends (the default).
    pub ghost: Option<Duration>,
    /// A worker's check-ins, as `cl-worker` 1.7.5 makes them: it takes one bundle per
    /// check-in, the next this long after the one that brought it ended (it checks in
    /// `--checkin-frequency-seconds`, 5 s, after the last ended; the server answers a check-in
    /// with one message and holds one without a message up to 5 s; one that brings a run ends
    /// 0.6 s after it began), and its idle clock starts once its first check-in has come back,
    /// this long after it started. The server's dispatch waits for the check-in of the worker
    /// it offers a bundle, and its rounds take the workers listed at their start
    /// (`engine/serve.rs`). The `advise` bench's logs: a worker's runs start 5.6 s apart
    /// (median; 5.4–7.8 s); one that ran nothing exits 38 s after it checked in, at 30 idle
    /// seconds. `None`: a worker takes all that fits at once, idle from its start (the default).
    pub checkin_gap: Option<Duration>,
    /// The `request_queue` the manager sees for the trace's bundle *i*, where one is given
    /// (else the trace's own): a bench's clairvoyant router, which sends each bundle to the
    /// pool whose tag it names while the server still dispatches by the bundle's own queue.
    pub route: Vec<String>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            sleep_time: Duration::from_secs(5),
            start_latency: (Duration::from_secs(60), Duration::from_secs(60)),
            failure_rate: 0.0,
            stuck_rate: 0.0,
            worker_idle: Duration::from_secs(600),
            worker_max_runs: None,
            seed: 1,
            drain: Duration::from_secs(24 * 3600),
            until: None,
            quotas: Default::default(),
            platforms: Default::default(),
            preemptible: Default::default(),
            server_model: true,
            budget: Default::default(),
            ghost: None,
            checkin_gap: None,
            route: Vec::new(),
        }
    }
}

/// How one pool's platform starts its jobs (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Platform {
    /// This pool's start latency bounds, instead of [`SimConfig::start_latency`].
    pub start_latency: Option<(Duration, Duration)>,
    /// At most this many of the pool's jobs are active at once; the others stay pending.
    pub slots: Option<u32>,
    /// `(every, for)`: others fill the platform for the first `for` of every `every` (from
    /// time 0); the pool's jobs that become ready then stay pending until it ends.
    pub busy: Option<(Duration, Duration)>,
    /// `(every, for)`: the platform has no capacity for the first `for` of every `every`: a
    /// launch then fails as a Spot stockout does (`Error::NoCapacity`).
    pub stockout: Option<(Duration, Duration)>,
    /// The share of launches preempted before their worker is active (a Spot VM reclaimed
    /// while it boots): listed once as preempted, then gone.
    pub preempt: f64,
    /// An active worker is reclaimed after this long on average (exponentially distributed,
    /// as a Spot VM's life): listed once as preempted, then gone. Its runs are staged again
    /// when the pool's workers are preemptible ([`SimConfig::preemptible`]), and lost
    /// otherwise (CodaLab 1.7.5 marks them `worker_offline`, and nothing stages them again).
    pub reclaim: Option<Duration>,
    /// Slurm's start forecast (`squeue --start`, which the backfill pass computes from the
    /// time limits of the jobs ahead): a job pending in a busy spell is listed with the
    /// spell's end as its expected start, as Slurm forecasts when the others' limits end with
    /// the spell. Off: no forecast (no backfill pass, or a platform that gives none).
    pub forecast: bool,
    /// The platform bills a worker from its place, while it starts (a cloud VM billed while
    /// it boots and `cl-worker` starts; a Slurm allocation), not from its check-in: a job
    /// withdrawn, failed or preempted after its place costs that time too. Off: starting is
    /// free (the simulator's default, which bills only active worker time).
    pub bills_start: bool,
}

impl Platform {
    /// When the busy spell that holds `now_ms` ends (milliseconds from the run's start), if
    /// one does: others fill the platform until then ([`Platform::busy`]).
    pub fn busy_until(&self, now_ms: u64) -> Option<u64> {
        spell_until(self.busy, now_ms)
    }

    /// When the stockout that holds `now_ms` ends, if one does: a launch then fails
    /// ([`Platform::stockout`]).
    pub fn stockout_until(&self, now_ms: u64) -> Option<u64> {
        spell_until(self.stockout, now_ms)
    }
}

/// When the spell of `(every, for)` that holds `now` ends, if one does.
fn spell_until(spells: Option<(Duration, Duration)>, now: u64) -> Option<u64> {
    let (every, spell) = spells?;
    let (every, spell) = (every.as_millis() as u64, spell.as_millis() as u64);
    let phase = now % every.max(1);
    (phase < spell).then(|| now - phase + spell)
}

impl SimConfig {
    fn validate(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::Config(m));
        if self.sleep_time.is_zero() {
            return bad("the sleep time must be positive".into());
        }
        for (name, rate) in [
            ("failure rate", self.failure_rate),
            ("stuck rate", self.stuck_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return bad(format!("the {name} {rate} is not between 0 and 1"));
            }
        }
        if self.failure_rate + self.stuck_rate > 1.0 {
            return bad("the failure rate plus the stuck rate exceed 1".into());
        }
        if self.start_latency.0 > self.start_latency.1 {
            return bad("the start latency's lower bound exceeds its upper bound".into());
        }
        for (pool, platform) in &self.platforms {
            if platform.start_latency.is_some_and(|(low, high)| low > high) {
                return bad(format!(
                    "pool {pool}: the start latency's lower bound exceeds its upper bound"
                ));
            }
            for (what, spells) in [("busy", platform.busy), ("stockout", platform.stockout)] {
                if spells.is_some_and(|(every, spell)| every.is_zero() || spell > every) {
                    return bad(format!(
                        "pool {pool}: a {what} spell must be a positive period and last no longer"
                    ));
                }
            }
            if platform.reclaim.is_some_and(|mean| mean.is_zero()) {
                return bad(format!(
                    "pool {pool}: the mean time to a reclaim must be positive"
                ));
            }
            if !(0.0..=1.0).contains(&platform.preempt) {
                return bad(format!(
                    "pool {pool}: the preempt share is not between 0 and 1"
                ));
            }
        }
        Ok(())
    }
}

/// Replays `workload` through `policies` (in declaration order, as in the config file).
pub fn simulate(
    workload: &Workload,
    policies: &[PoolPolicy],
    config: &SimConfig,
) -> Result<SimReport, SimError> {
    check(policies, config)?;
    Ok(engine::Sim::new(workload, policies, config).run())
}

/// [`simulate`], with what the manager's tick engine was given and did at every tick (for a
/// differential run of the real manager on the same inputs).
pub fn simulate_traced(
    workload: &Workload,
    policies: &[PoolPolicy],
    config: &SimConfig,
) -> Result<(SimReport, Vec<TickTrace>), SimError> {
    check(policies, config)?;
    Ok(engine::Sim::new(workload, policies, config)
        .traced()
        .run_traced())
}

/// One tick of a simulation, as the manager's tick engine saw it and what it did.
#[derive(Debug, Clone)]
pub struct TickTrace {
    /// The simulated clock.
    pub at: Duration,
    /// The server's workers (as `GET /rest/workers/info` lists them).
    pub workers: Vec<crate::checkin::CheckedInWorker>,
    /// The staged bundles the manager's search returned, oldest first.
    pub staged: Vec<crate::bundle::StagedBundle>,
    /// The owner of each run on the workers (what a search by its uuid says).
    pub run_owners: Vec<(String, String)>,
    /// Per pool, in the config's order.
    pub pools: Vec<PoolTrace>,
    /// The pool policy's whole decision.
    pub decision: crate::pools::PoolsDecision,
}

/// One pool in one [`TickTrace`].
#[derive(Debug, Clone, Default)]
pub struct PoolTrace {
    /// Its platform's listing.
    pub listing: Vec<crate::backend::WorkerJob>,
    /// Each launch: the job's id, or the platform's error.
    pub launches: Vec<Result<String, String>>,
    /// The jobs stopped.
    pub stops: Vec<String>,
    /// The codes of the decision's reasons, in order.
    pub reasons: Vec<&'static str>,
}

/// The checks [`simulate`] makes before it runs.
fn check(policies: &[PoolPolicy], config: &SimConfig) -> Result<(), SimError> {
    config.validate()?;
    if policies.is_empty() {
        return Err(SimError::Config("no pools to simulate".into()));
    }
    if policies.len() > 64 {
        return Err(SimError::Config("at most 64 pools can be simulated".into()));
    }
    let mut names = std::collections::HashSet::new();
    for policy in policies {
        policy.validate().map_err(SimError::Config)?;
        if !names.insert(policy.name.as_str()) {
            return Err(SimError::Config(format!(
                "two pools are named {}",
                policy.name
            )));
        }
    }
    Ok(())
}
