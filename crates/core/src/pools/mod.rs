//! Resource-aware pools: one manager, several worker shapes and backends.
//!
//! [`plan_pools`] is pure (time comes in as the manager clock, `now`, the time since the manager
//! started) and returns, for every pool, what to launch, which stuck jobs to stop and why, and
//! for every staged bundle which pool takes it or why none does. The rules:
//!
//! 1. **Assignment.** Each staged bundle goes to the most preferred pool (lowest `cost`, then
//!    declaration order) whose worker shape fits it and whose tag matches its `request_queue`
//!    the way the CodaLab server matches bundles to workers ([`misfit`]). Pending workers are
//!    used first (most constrained bundles first), then room to launch (up to `max`); a pool
//!    that is backing off, unobserved or has a stuck job takes nothing, so its demand falls back
//!    to the next fitting pool. Bundles no pool takes are [`UnservedBundle`]s with a reason
//!    (`no_fitting_pool`, `backing_off`, `max_reached`, …).
//! 2. **Target** (`launch_mode = target`). `target = clamp(min, busy + demand, max)` where
//!    demand is the workers the bundles assigned to the pool fill: one bundle a worker, or,
//!    with the server's side ([`ServerView`]), as many as the pool's shape holds, checked-in
//!    workers filled first by the dispatch model (see `assign.rs`). Once the server's
//!    worker list is read ([`crate::checkin`]), a worker that checked in and runs nothing, or has
//!    not checked in yet, is free capacity and one that runs a bundle is busy; without that
//!    list, a worker active for longer than `startup_grace` is presumed busy (an idle one would
//!    have taken the staged bundle already). Pending and starting workers are free capacity. So
//!    `target - (active + pending)` workers are launched,
//!    at most `max_launches_per_tick` per tick and never beyond `max` counting jobs being
//!    stopped. `min_seconds_between_workers` holds launches except those that restore `min`.
//! 3. **Stuck pending.** A job pending longer than `pending_timeout` is stopped (`pending_timeout`
//!    reason); the pool takes no bundle that tick (the manager also backs it off), so the demand
//!    goes to the next fitting pool.
//! 4. **Failure memory** ([`backoff`]): a backing-off pool launches nothing and takes no bundle.
//!    **Lost workers** (target mode): a running job whose worker has **never** checked in for
//!    longer than `checkin_timeout` (over fresh views) is stopped (`worker_lost`) and, like a
//!    stuck one, the pool takes nothing that tick (the manager backs it off).
//!
//! **What is never stopped** (the manager's invariant, see ARCHITECTURE.md): a rule stops a job
//! only when this manager launched it ([`ObservedJob::launched_here`]) and its worker never
//! checked in; a lost job is stopped only once a worker of the pool has been seen checking in
//! ([`PoolObservation::checkins_seen`]: otherwise the workers may log in as an account whose
//! workers the manager cannot see). Jobs a rule would stop but may not are kept, counted
//! toward `max`, and reported ([`Reason::NotStopped`]).
//! 5. **Compat** (`launch_mode = compat`): upstream's exact rules ([`crate::policy::plan`]) on the
//!    bundles assigned to the pool, with no backoff and no pending timeout; a compat pool takes
//!    every bundle that fits it.
//!
//! Upstream's single-backend mode is one pool whose policy [`SingleBackendFlags`] makes.
//! Everything here is pure; what the manager remembers per pool between ticks, its log lines
//! and its status snapshot live beside the loop ([`crate::manager`]).

mod assign;
pub mod backoff;
mod census;
#[cfg(test)]
mod checkin_tests;
pub mod fallback;
pub mod need;
#[cfg(test)]
mod packing_tests;
mod single;
pub mod spill;
#[cfg(test)]
mod spill_tests;
#[cfg(test)]
mod tests;
pub mod unmet;

pub use assign::{BundleAssignment, BundleOnWorker, Coverage, PoolVerdict, UnservedBundle, misfit};
pub use backoff::PoolHealth;
pub use need::Need;
pub use single::SingleBackendFlags;
pub use spill::{PoolWait, Spill};
pub use unmet::{BundleClass, UnmetDemand, UnmetReason};

use crate::backend::JobState;
use crate::bundle::{StagedBundle, WorkerShape};
use crate::checkin::JobCheckin;
use crate::policy::{Decision, Observation, PolicyConfig, Reason, plan};
use assign::{Assigned, Slots};
use census::{Census, census};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Default [`PoolPolicy::startup_grace`]: a worker has this long to take a bundle after its
/// job became active.
/// Longer means fewer duplicate workers while workers check in; shorter means less waiting
/// when a starting worker was in fact taken by another bundle.
pub const DEFAULT_STARTUP_GRACE: Duration = Duration::from_secs(30);

/// How a pool decides its launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchMode {
    /// Upstream's rules: at most one launch per tick, vetoes as `cl-worker-manager` has them.
    #[default]
    Compat,
    /// An absolute target per tick, burst launches, stuck-pending replacement and backoff.
    Target,
}

impl fmt::Display for LaunchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LaunchMode::Compat => "compat",
            LaunchMode::Target => "target",
        })
    }
}

impl std::str::FromStr for LaunchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "compat" => Ok(LaunchMode::Compat),
            "target" => Ok(LaunchMode::Target),
            other => Err(format!(
                "unknown launch mode `{other}`: use compat or target"
            )),
        }
    }
}

/// The rules of one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPolicy {
    /// The pool's name (unique).
    pub name: String,
    /// What one worker provides.
    pub shape: WorkerShape,
    /// Workers kept at least.
    pub min: u32,
    /// Workers never exceeded (jobs being stopped count until gone).
    pub max: u32,
    /// The tag put on the pool's workers; bundles with `request_queue == tag` need it.
    pub tag: Option<String>,
    /// The pool's workers run only bundles with `request_queue == tag`.
    pub tag_exclusive: bool,
    /// Match `request_queue` against `tag` as the server does. `false` only in the single-backend
    /// mode ([`SingleBackendFlags`]), where (as upstream) the server-side search does the queue
    /// filtering.
    pub match_request_queue: bool,
    /// Check bundles against `shape` (`false` with `--no-prefilter`).
    pub check_shape: bool,
    /// Preference among pools of the same price (`cost_per_hour`): lower is preferred; ties go
    /// to the pool declared first.
    pub cost: f64,
    /// The longest wait the admin accepts on this pool while a pricier one would start a
    /// bundle sooner ([`preference_order`], `pools/spill.rs`); `None`: any wait.
    pub spill_after: Option<Duration>,
    /// Where new launches go when this pool's capacity fails ([`fallback`]).
    pub fallback: Option<fallback::Fallback>,
    /// Stop jobs pending longer than this (target mode only).
    pub pending_timeout: Option<Duration>,
    /// A job active for less than this is still starting its worker (which has not yet taken
    /// a bundle): it counts as free capacity, like a pending job (target mode).
    pub startup_grace: Duration,
    /// A running job whose worker has not checked in with the server for longer than this is
    /// lost: stopped and replaced, and the pool backs off (target mode; see [`crate::checkin`]).
    pub checkin_timeout: Duration,
    /// Compat or target.
    pub launch_mode: LaunchMode,
    /// Launches per tick at most (target mode).
    pub max_launches_per_tick: u32,
    /// Seconds between two launches of this pool.
    pub min_seconds_between_workers: u64,
    /// The pool's budget per rolling day (see [`crate::budget`]).
    pub budget: crate::budget::BudgetLimits,
    /// What one worker-hour of this pool costs: its price in the preference order, and
    /// what `max_cost_per_day` meters.
    pub cost_per_hour: Option<f64>,
    /// Bundles a worker runs before it exits (`--exit-after-num-runs`), when limited: the
    /// assignment gives a worker no more (the manager sets it from the pool's worker options).
    pub runs_per_worker: Option<i64>,
}

impl PoolPolicy {
    /// A target-mode pool with `min` 0, upstream's `max` and pacing, and otherwise the
    /// defaults of `[[pools]]`.
    pub fn new(name: impl Into<String>, shape: WorkerShape) -> Self {
        let limits = PolicyConfig::default();
        Self {
            name: name.into(),
            shape,
            min: 0,
            max: limits.max_workers,
            tag: None,
            tag_exclusive: false,
            match_request_queue: true,
            check_shape: true,
            cost: 0.0,
            spill_after: None,
            fallback: None,
            pending_timeout: None,
            startup_grace: DEFAULT_STARTUP_GRACE,
            checkin_timeout: crate::checkin::DEFAULT_CHECKIN_TIMEOUT,
            launch_mode: LaunchMode::Target,
            max_launches_per_tick: 1,
            min_seconds_between_workers: limits.min_seconds_between_workers,
            budget: crate::budget::BudgetLimits::default(),
            cost_per_hour: None,
            runs_per_worker: None,
        }
    }

    /// Checks the pool's settings; the message names the pool and the setting.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        if self.max < self.min {
            return Err(format!(
                "pool {name}: max ({}) is less than min ({})",
                self.max, self.min
            ));
        }
        if self.max_launches_per_tick == 0 {
            return Err(format!(
                "pool {name}: max_launches_per_tick must be at least 1"
            ));
        }
        if !self.cost.is_finite() {
            return Err(format!("pool {name}: cost must be a finite number"));
        }
        if self.launch_mode == LaunchMode::Compat {
            if self.pending_timeout.is_some() {
                return Err(format!(
                    "pool {name}: pending_timeout needs launch_mode = \"target\" (compat keeps upstream's rules)"
                ));
            }
            for (key, set) in [
                ("spill_after", self.spill_after.is_some()),
                ("fallback", self.fallback.is_some()),
            ] {
                if set {
                    return Err(format!(
                        "pool {name}: {key} needs launch_mode = \"target\" (compat keeps upstream's rules)"
                    ));
                }
            }
            if self.max_launches_per_tick > 1 {
                return Err(format!(
                    "pool {name}: max_launches_per_tick {} needs launch mode target (compat launches at most one worker per tick, as upstream)",
                    self.max_launches_per_tick
                ));
            }
        }
        if let Some(fallback) = &self.fallback {
            if fallback.pool == *name {
                return Err(format!("pool {name}: fallback names the pool itself"));
            }
            if fallback.after == 0 || fallback.window.is_zero() {
                return Err(format!(
                    "pool {name}: fallback_after and fallback_window must be at least 1"
                ));
            }
        }
        if self.tag_exclusive && self.tag.as_deref().is_none_or(str::is_empty) {
            return Err(format!("pool {name}: tag_exclusive needs a tag"));
        }
        self.budget
            .validate(self.cost_per_hour)
            .map_err(|problem| format!("pool {name}: {problem}"))?;
        if self.budget.max_cost_per_day.is_some() && self.cost_per_hour.is_none() {
            return Err(format!(
                "pool {name}: max_cost_per_day needs cost_per_hour (what one worker-hour costs)"
            ));
        }
        Ok(())
    }
}

/// One job of a pool as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedJob {
    /// The platform's job id.
    pub id: String,
    /// Its state.
    pub state: JobState,
    /// How long the manager has seen it pending (zero when not pending).
    pub pending_for: Duration,
    /// How long the manager has seen it active (zero when not active).
    pub active_for: Duration,
    /// What the server's list of checked-in workers says of it.
    pub checkin: JobCheckin,
    /// This manager launched the job (its launch record holds the job's unique). A job matched
    /// only by name, label or filter may be another manager's or a person's: no rule stops it.
    pub launched_here: bool,
    /// Pending, and its platform holds it by itself (an admin or user hold, a dependency, a
    /// begin time: [`crate::backend::WorkerBackend::on_hold`]), not for capacity: it counts
    /// toward `max` but is no starting worker (bundles do not wait for it; the pool launches
    /// beside it) and it stretches no estimate.
    pub on_hold: bool,
}

impl ObservedJob {
    /// A job with no check-in information ([`JobCheckin::Unknown`]) that this manager did not
    /// launch (see [`ObservedJob::launched_here`]).
    pub fn new(
        id: impl Into<String>,
        state: JobState,
        pending_for: Duration,
        active_for: Duration,
    ) -> Self {
        Self {
            id: id.into(),
            state,
            pending_for,
            active_for,
            checkin: JobCheckin::Unknown,
            launched_here: false,
            on_hold: false,
        }
    }

    /// The same job, launched by this manager.
    pub fn launched_here(self) -> Self {
        Self {
            launched_here: true,
            ..self
        }
    }
}

/// What the manager saw of one pool.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolObservation {
    /// The pool's jobs, without those being stopped.
    pub jobs: Vec<ObservedJob>,
    /// Jobs the manager stopped that the platform still lists; they count toward `max`.
    pub stopping: usize,
    /// Time since this pool's last launch; `None` before the first.
    pub since_last_launch: Option<Duration>,
    /// The pool's failure memory.
    pub health: PoolHealth,
    /// Why the pool's jobs could not be listed this tick, if they could not.
    pub unobserved: Option<String>,
    /// The pool's budget (or the overall one) is used up: a [`Reason::BudgetReached`].
    pub budget_reached: Option<Reason>,
    /// How many workers the pool's budgets let it launch this tick, when it has one
    /// ([`crate::budget::launch_room`]).
    pub budget_room: Option<crate::budget::LaunchRoom>,
    /// A worker this manager launched in the pool has been seen checking in with the server
    /// (now or before a restart): the manager's view shows the pool's workers, so one that
    /// never checks in is broken, not invisible.
    pub checkins_seen: bool,
    /// Where the pool's new launches go, when it has a `fallback` ([`fallback`]).
    pub capacity: fallback::CapacityState,
}

/// The server's side of a tick, for the dispatch model ([`crate::dispatch`]): its checked-in
/// workers and who owns what. With it a worker holds several bundles and bundles the server
/// would give no new worker of this manager buy nothing; without it (the server did not
/// report a field the model needs, or its workers could not be listed) a worker takes one
/// bundle.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServerView {
    /// The server's checked-in workers, whoever runs them.
    pub workers: Vec<crate::dispatch::ServerWorker>,
    /// The root user, the manager's user and the owners' quotas.
    pub owners: crate::dispatch::Owners,
    /// Bundles the model put on a checked-in worker that the server has not started for too
    /// long (something the model does not see holds them): they go to the pools instead.
    pub overdue: std::collections::BTreeSet<String>,
    /// Of `overdue`, those a worker was already launched for ([`PoolsDecision::overdue_launches`]
    /// of an earlier tick, as the manager remembers it): each takes a starting worker of a
    /// pool with room, never a new one, else waits ([`Reason::NotStartedByServer`]): an
    /// overdue bundle costs one launch, ever.
    pub launched_for: std::collections::BTreeSet<String>,
}

impl PoolPolicy {
    /// How long a retry after the fallback ([`fallback::CapacityState::Retrying`]) may go
    /// without its worker checking in before it counts as failed: its pending bound
    /// (`pending_timeout`, else `checkin_timeout`), then `checkin_timeout` to check in.
    pub fn retry_within(&self) -> Duration {
        self.pending_timeout.unwrap_or(self.checkin_timeout) + self.checkin_timeout
    }
}

impl ServerView {
    /// Whether bundle `uuid` is overdue and already had its one worker launched for it.
    pub fn launched_for_overdue(&self, uuid: &str) -> bool {
        self.overdue.contains(uuid) && self.launched_for.contains(uuid)
    }

    /// Whether worker `worker_id` is the root user's (shared).
    pub fn is_shared(&self, worker_id: &str) -> bool {
        self.workers
            .iter()
            .any(|w| w.worker_id == worker_id && w.owner == self.owners.root)
    }
}

/// What the manager saw this tick.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolsObservation {
    /// Staged bundles.
    pub bundles: Vec<StagedBundle>,
    /// One observation per pool, in the order of the policies.
    pub pools: Vec<PoolObservation>,
    /// The server's side, when known (see [`ServerView`]).
    pub server: Option<ServerView>,
    /// What the manager learned of each pool's times, in the order of the policies (empty or
    /// short: nothing known of the rest). A pool's `spill_after` weighs them.
    pub times: Vec<crate::estimate::PoolTimes>,
}

/// What one pool does this tick, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolDecision {
    /// The pool's name.
    pub pool: String,
    /// The pool's launch mode.
    pub launch_mode: LaunchMode,
    /// Worker jobs to start now.
    pub launches: u32,
    /// Stuck jobs to stop now (each has a `pending_timeout` reason).
    pub stops: Vec<String>,
    /// The absolute target (target mode).
    pub target: Option<u32>,
    /// Staged bundles assigned to the pool.
    pub demand: usize,
    /// Workers those bundles fill: starting ones and new ones (as many as `demand` when a
    /// worker takes one bundle).
    pub workers_needed: usize,
    /// Active jobs.
    pub active: usize,
    /// Pending jobs (stuck ones included).
    pub pending: usize,
    /// Jobs being stopped.
    pub stopping: usize,
    /// Every rule that fired.
    pub reasons: Vec<Reason>,
}

impl PoolDecision {
    /// The reason codes joined by commas, for one-line logs.
    pub fn reason_codes(&self) -> String {
        self.reasons
            .iter()
            .map(Reason::code)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The decision as upstream's [`Decision`] (what `TickReport::decision` holds).
    pub fn as_upstream(&self) -> Decision {
        Decision {
            launches: self.launches,
            reasons: self.reasons.clone(),
        }
    }
}

/// What every pool does this tick, and where every staged bundle goes.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct PoolsDecision {
    /// One decision per pool, in the order of the policies.
    pub pools: Vec<PoolDecision>,
    /// Bundles given to a pool.
    pub assignments: Vec<BundleAssignment>,
    /// Bundles a checked-in worker takes now (with the server's side).
    pub on_workers: Vec<BundleOnWorker>,
    /// Bundles no pool takes, with the reason.
    pub unserved: Vec<UnservedBundle>,
    /// Every staged bundle with no worker coming this tick, by pool, class and reason.
    pub unmet: Vec<UnmetDemand>,
    /// Overdue bundles ([`ServerView::overdue`]) a worker this tick launches is for: the
    /// manager remembers them ([`ServerView::launched_for`]) while they are staged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overdue_launches: Vec<String>,
}

impl PoolsDecision {
    /// Total launches over all pools.
    pub fn launches(&self) -> u32 {
        self.pools.iter().map(|p| p.launches).sum()
    }
}

/// Pool indices in preference order: the cheapest first (`cost_per_hour`, none = free), then
/// the lower `cost`, then declaration order.
pub fn preference_order(policies: &[PoolPolicy]) -> Vec<usize> {
    let price = |p: &PoolPolicy| p.cost_per_hour.unwrap_or(0.0);
    let mut order: Vec<usize> = (0..policies.len()).collect();
    order.sort_by(|&a, &b| {
        let (a_, b_) = (&policies[a], &policies[b]);
        (price(a_).total_cmp(&price(b_)))
            .then(a_.cost.total_cmp(&b_.cost))
            .then(a.cmp(&b))
    });
    order
}

/// Launches the pool may still make before `max`; while it retries after its fallback, one
/// at most, and none while a job of it is starting.
fn room(policy: &PoolPolicy, observed: &PoolObservation, census: &Census, now: Duration) -> usize {
    let room = (policy.max as usize).saturating_sub(census.jobs);
    match on_fallback(policy, observed, now)
        .as_ref()
        .and_then(retrying)
    {
        Some(()) if census.pending + census.starting > 0 => 0,
        Some(()) => room.min(1),
        None => room,
    }
}

/// The preference order with each pool's `fallback` moved right after it (when it came
/// later): a bundle its pool cannot take goes there first.
pub fn with_fallbacks(mut order: Vec<usize>, policies: &[PoolPolicy]) -> Vec<usize> {
    for p in 0..policies.len() {
        let Some(fallback) = &policies[p].fallback else {
            continue;
        };
        let Some(f) = policies.iter().position(|q| q.name == fallback.pool) else {
            continue;
        };
        let (at, from) = (
            order.iter().position(|&i| i == p),
            order.iter().position(|&i| i == f),
        );
        if let (Some(at), Some(from)) = (at, from)
            && from > at + 1
        {
            let moved = order.remove(from);
            order.insert(at + 1, moved);
        }
    }
    order
}

/// Stands in for a pool that has no observation (counts as unobserved).
static NOT_OBSERVED: std::sync::LazyLock<PoolObservation> =
    std::sync::LazyLock::new(|| PoolObservation {
        unobserved: Some("no observation".into()),
        ..PoolObservation::default()
    });

/// One observation per policy, in order; a missing one is [`NOT_OBSERVED`].
fn per_policy<'a>(
    pools: &'a [PoolObservation],
    policies: &[PoolPolicy],
) -> Vec<&'a PoolObservation> {
    (0..policies.len())
        .map(|i| pools.get(i).unwrap_or(&NOT_OBSERVED))
        .collect()
}

/// Where `bundles` go and what each pool's demand is (rules 1, 3 and 4 of the module doc).
struct Assignment {
    censuses: Vec<Census>,
    assigned: Assigned,
    /// Per pool: the bundles assigned to it, plus those waiting because every fitting pool is
    /// full, counted at their preferred pool.
    demand: Vec<usize>,
    /// Per pool: the workers those bundles fill (each waiting bundle counts one).
    workers: Vec<usize>,
}

fn assignment(
    bundles: &[StagedBundle],
    observations: &[&PoolObservation],
    policies: &[PoolPolicy],
    now: Duration,
    server: Option<&ServerView>,
    times: &[crate::estimate::PoolTimes],
) -> Assignment {
    let packs = server.is_some();
    let censuses: Vec<Census> = policies
        .iter()
        .zip(observations)
        .map(|(policy, obs)| census(policy, obs, now))
        .collect();
    let slots: Vec<Slots> = policies
        .iter()
        .zip(observations)
        .zip(&censuses)
        .map(|((policy, obs), census)| Slots {
            unavailable: unavailable(policy, obs, census, now),
            compat: policy.launch_mode == LaunchMode::Compat,
            coming: census.free(packs),
            room: room(policy, obs, census, now),
            jobs_and_max: (census.jobs, policy.max),
        })
        .collect();
    let order = with_fallbacks(preference_order(policies), policies);
    let assigned = assign::assign(bundles, policies, &order, &slots, times, server);
    let mut demand = vec![0usize; policies.len()];
    for (p, ..) in &assigned.assigned {
        demand[*p] += 1;
    }
    let mut workers = assigned.workers.clone();
    // Bundles that wait because every fitting pool is full still count as demand of their
    // preferred pool (which then says `max_reached`); launches never exceed its room.
    let waiting: std::collections::HashSet<&str> = assigned
        .unserved
        .iter()
        .filter(|u| matches!(u.reason, Reason::MaxReached { .. }))
        .map(|u| u.uuid.as_str())
        .collect();
    for bundle in bundles.iter().filter(|b| waiting.contains(b.uuid.as_str())) {
        if let Some(&p) = order
            .iter()
            .find(|&&p| misfit(&policies[p], bundle).is_none())
        {
            demand[p] += 1;
            workers[p] += 1;
        }
    }
    // A compat pool's worker takes one bundle (upstream's rule).
    for p in (0..slots.len()).filter(|&p| slots[p].compat) {
        workers[p] = demand[p];
    }
    Assignment {
        censuses,
        assigned,
        demand,
        workers,
    }
}

/// Why a pool takes no bundle this tick (unobserved, backing off, stuck or lost job), if so.
fn unavailable(
    policy: &PoolPolicy,
    observed: &PoolObservation,
    census: &Census,
    now: Duration,
) -> Option<Reason> {
    observed
        .unobserved
        .as_ref()
        .map(|error| Reason::Unobserved {
            error: error.clone(),
        })
        .or_else(|| observed.budget_reached.clone())
        .or_else(|| census.backing_off.clone())
        .or_else(|| on_fallback(policy, observed, now).filter(|r| retrying(r).is_none()))
        .or_else(|| census.stuck.first().cloned())
        .or_else(|| census.lost.first().cloned())
}

/// The pool's `on_fallback` reason, when its capacity failed ([`fallback`]).
fn on_fallback(policy: &PoolPolicy, observed: &PoolObservation, now: Duration) -> Option<Reason> {
    let fallback = policy.fallback.as_ref()?.pool.clone();
    match &observed.capacity {
        fallback::CapacityState::Own => None,
        fallback::CapacityState::Fallback {
            retry_at_seconds,
            why,
            ..
        } => Some(Reason::OnFallback {
            fallback,
            retry_in_seconds: Some(retry_at_seconds.saturating_sub(now.as_secs())),
            why: why.clone(),
        }),
        fallback::CapacityState::Retrying { .. } => Some(Reason::OnFallback {
            fallback,
            retry_in_seconds: None,
            why: "the cool-down is over".into(),
        }),
    }
}

/// `Some(())` when `reason` is a retry: one launch tries the pool again.
fn retrying(reason: &Reason) -> Option<()> {
    matches!(
        reason,
        Reason::OnFallback {
            retry_in_seconds: None,
            ..
        }
    )
    .then_some(())
}

/// Decides launches, stops and assignments for every pool. Pure: `now` is the manager clock.
/// `observed.pools` must hold one entry per policy (a missing one counts as unobserved).
pub fn plan_pools(
    observed: &PoolsObservation,
    policies: &[PoolPolicy],
    now: Duration,
) -> PoolsDecision {
    let observations = per_policy(&observed.pools, policies);
    let server = observed.server.as_ref();
    let Assignment {
        censuses,
        assigned,
        demand,
        workers,
    } = assignment(
        &observed.bundles,
        &observations,
        policies,
        now,
        server,
        &observed.times,
    );
    let pools: Vec<PoolDecision> = policies
        .iter()
        .enumerate()
        .map(|(i, policy)| {
            let demand = Demand {
                bundles: demand[i],
                workers: workers[i],
                packs: server.is_some(),
            };
            decide(policy, observations[i], &censuses[i], demand, now)
        })
        .collect();
    let Assigned {
        assigned,
        unserved,
        on_workers,
        ..
    } = assigned;
    let assignments = assigned
        .into_iter()
        .map(|(p, b, coverage, worker, spill)| BundleAssignment {
            uuid: observed.bundles[b].uuid.clone(),
            pool: policies[p].name.clone(),
            coverage,
            worker,
            spill,
            overdue: server.is_some_and(|v| v.overdue.contains(&observed.bundles[b].uuid)),
        })
        .collect::<Vec<_>>();
    let starting: Vec<usize> = censuses.iter().map(|c| c.free(server.is_some())).collect();
    let unmet = unmet::unmet_demand(
        &observed.bundles,
        policies,
        &pools,
        &assignments,
        &unserved,
        &starting,
    );
    let overdue_launches = overdue_launches(&assignments, policies, &pools, &starting);
    PoolsDecision {
        pools,
        assignments,
        on_workers,
        unserved,
        unmet,
        overdue_launches,
    }
}

/// The overdue bundles a launch of this tick is for: put on a new worker of a pool, within
/// the launches it makes (its new workers follow its `starting` ones; a compat pool's
/// launch counts for its overdue bundles).
fn overdue_launches(
    assignments: &[BundleAssignment],
    policies: &[PoolPolicy],
    decisions: &[PoolDecision],
    starting: &[usize],
) -> Vec<String> {
    (assignments.iter())
        .filter(|a| a.overdue)
        .filter(|a| {
            let Some(p) = policies.iter().position(|p| p.name == a.pool) else {
                return false;
            };
            let launches = decisions[p].launches as usize;
            match a.coverage {
                Coverage::PendingWorker => false,
                Coverage::Compat => launches > 0,
                Coverage::NewWorker => a.worker.saturating_sub(starting[p]) < launches,
            }
        })
        .map(|a| a.uuid.clone())
        .collect()
}

/// A pool's demand: its bundles, and the workers they fill.
#[derive(Debug, Clone, Copy)]
struct Demand {
    bundles: usize,
    workers: usize,
    /// Workers hold several bundles (the server's side is known).
    packs: bool,
}

fn decide(
    policy: &PoolPolicy,
    observed: &PoolObservation,
    census: &Census,
    demand: Demand,
    now: Duration,
) -> PoolDecision {
    let mut decision = PoolDecision {
        pool: policy.name.clone(),
        launch_mode: policy.launch_mode,
        launches: 0,
        stops: Vec::new(),
        target: None,
        demand: demand.bundles,
        workers_needed: demand.workers,
        active: census.active,
        pending: census.pending + census.on_hold + census.stuck_ids.len(),
        stopping: observed.stopping,
        reasons: Vec::new(),
    };
    if let Some(error) = &observed.unobserved {
        decision.reasons.push(Reason::Unobserved {
            error: error.clone(),
        });
        return decision;
    }
    if policy.launch_mode == LaunchMode::Compat {
        if let Some(budget) = &observed.budget_reached {
            decision.reasons.push(budget.clone());
            return decision;
        }
        let upstream = plan(
            &Observation {
                staged: demand.bundles,
                pending: census.pending,
                active: census.active,
                since_last_launch: observed.since_last_launch,
            },
            &PolicyConfig {
                min_workers: policy.min,
                max_workers: policy.max,
                min_seconds_between_workers: policy.min_seconds_between_workers,
            },
        );
        decision.launches = upstream.launches;
        decision.reasons = upstream.reasons;
        cap_to_budget(observed, &mut decision);
        return decision;
    }
    decision.stops = census.stuck_ids.clone();
    decision.stops.extend(census.lost_ids.iter().cloned());
    decision.reasons.extend(census.stuck.iter().cloned());
    decision.reasons.extend(census.lost.iter().cloned());
    decision.reasons.extend(census.kept.iter().cloned());
    if let Some(backing_off) = &census.backing_off {
        decision.reasons.push(backing_off.clone());
        return decision;
    }
    if let Some(budget) = &observed.budget_reached {
        decision.reasons.push(budget.clone());
        return decision;
    }
    let fallback = on_fallback(policy, observed, now);
    if let Some(reason) = fallback.as_ref() {
        decision.reasons.push(reason.clone());
        if retrying(reason).is_none() {
            return decision;
        }
    }
    if !census.stuck_ids.is_empty() || !census.lost_ids.is_empty() {
        // The pool just showed it cannot start jobs (or workers): it launches nothing this
        // tick; the manager backs it off, and the next tick replaces the stopped jobs.
        return decision;
    }
    decide_target(policy, observed, census, demand, &mut decision);
    if fallback.is_some() {
        // Retrying: one launch tries the pool again, none while one is starting.
        let probe = room(policy, observed, census, now) as u32;
        decision.launches = decision.launches.min(probe);
    }
    cap_to_budget(observed, &mut decision);
    decision
}

/// No more launches than the pool's budgets have room for.
fn cap_to_budget(observed: &PoolObservation, decision: &mut PoolDecision) {
    let Some(room) = &observed.budget_room else {
        return;
    };
    if decision.launches > room.workers {
        decision.reasons.push(Reason::BudgetRoom {
            scope: room.scope.clone(),
            wanted: decision.launches,
            room: room.workers,
            detail: room.detail.clone(),
        });
        decision.launches = room.workers;
    }
}

fn decide_target(
    policy: &PoolPolicy,
    observed: &PoolObservation,
    census: &Census,
    demand: Demand,
    decision: &mut PoolDecision,
) {
    let reasons = &mut decision.reasons;
    reasons.push(if demand.bundles > 0 {
        Reason::WantWorkers {
            staged: demand.bundles,
        }
    } else {
        Reason::NoStagedBundles
    });
    if demand.workers < demand.bundles {
        reasons.push(Reason::Packed {
            bundles: demand.bundles,
            workers: demand.workers,
        });
    }
    let capacity = census.active + census.pending;
    let busy = census.busy(demand.packs);
    let target = (busy + demand.workers)
        .max(policy.min as usize)
        .min(policy.max as usize);
    decision.target = Some(target as u32);
    reasons.push(Reason::Target {
        target: target as u32,
        capacity,
    });
    let free = census.free(demand.packs);
    if demand.bundles > 0 && free >= demand.bundles {
        reasons.push(Reason::PendingCoversDemand {
            pending: free,
            staged: demand.bundles,
        });
    }
    let needed = target.saturating_sub(capacity);
    let room = (policy.max as usize).saturating_sub(census.jobs);
    if needed > room || busy + demand.workers > policy.max as usize {
        reasons.push(Reason::MaxReached {
            jobs: census.jobs,
            max: policy.max,
        });
    }
    let wanted = needed.min(room);
    let deficit = (policy.min as usize).saturating_sub(capacity).min(room);
    if deficit > 0 {
        reasons.push(Reason::BelowMin {
            jobs: capacity,
            min: policy.min,
        });
    }
    let mut allowed = wanted;
    if let Some(since) = observed.since_last_launch {
        let waited_seconds = since.as_secs();
        if waited_seconds < policy.min_seconds_between_workers && wanted > deficit {
            reasons.push(Reason::RateLimited {
                waited_seconds,
                min_seconds: policy.min_seconds_between_workers,
            });
            allowed = deficit;
        }
    }
    let cap = policy.max_launches_per_tick;
    let allowed = u32::try_from(allowed).unwrap_or(u32::MAX);
    if allowed > cap {
        reasons.push(Reason::LaunchCapReached {
            wanted: allowed,
            cap,
        });
    }
    decision.launches = allowed.min(cap);
}
