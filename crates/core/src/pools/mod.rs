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
//!    A pool with `race` above 1 counts `ceil(race × workers)` for the workers its bundles fill
//!    ([`PoolPolicy::raced`], reason `raced`; not for an overdue bundle): the first to check
//!    in take the bundles, and rule 5 withdraws the others while they pend. While some pend,
//!    the decision asks for the next tick after the pool's `race_watch`, sooner than
//!    `sleep_time` ([`PoolDecision::watch`]), so they are withdrawn before they start.
//! 3. **Stuck pending.** A job pending longer than `pending_timeout` is stopped (`pending_timeout`
//!    reason); the pool takes no bundle that tick (the manager also backs it off), so the demand
//!    goes to the next fitting pool.
//! 4. **Failure memory** ([`backoff`]): a backing-off pool launches nothing and takes no bundle.
//!    **Lost workers** (target mode): a running job whose worker has **never** checked in for
//!    longer than `checkin_timeout` (over fresh views) is stopped (`worker_lost`) and, like a
//!    stuck one, the pool takes nothing that tick (the manager backs it off).
//! 5. **Withdraw** (target mode): when `active + pending` stands above the target, as many
//!    pending jobs as the surplus are cancelled before they start (`withdrawn`), the most
//!    recently submitted first: a launch whose bundle went to another worker, or away, costs
//!    nothing where pending is not billed (see [`crate::backend::JobState::Pending`]) instead
//!    of a worker that boots, finds nothing and idles out. No backoff: the pool did nothing
//!    wrong. Held jobs (on hold by the platform) are left alone. A pool that sends bundles
//!    elsewhere by their wait (`spill_after`, `hedge_after`) keeps its oldest such job once it
//!    has pended past the sooner of the two, as its probe of the queue (`kept_as_probe`).
//!
//! **What is never stopped** (the manager's invariant, see ARCHITECTURE.md): a rule stops a job
//! only when this manager launched it ([`ObservedJob::launched_here`]) and its worker never
//! checked in; a lost job is stopped only once a worker of the pool has been seen checking in
//! ([`PoolObservation::checkins_seen`]: otherwise the workers may log in as an account whose
//! workers the manager cannot see); a job is withdrawn only while it is pending, on the same
//! two conditions. Jobs a rule would stop but may not are kept, counted
//! toward `max`, and reported ([`Reason::NotStopped`](crate::policy::Reason::NotStopped)).
//! 6. **Compat** (`launch_mode = compat`): upstream's exact rules ([`crate::policy::plan`]) on the
//!    bundles assigned to the pool, with no backoff and no pending timeout; a compat pool takes
//!    every bundle that fits it.
//!
//! Upstream's single-backend mode is one pool whose policy [`SingleBackendFlags`] makes.
//! Everything here is pure; what the manager remembers per pool between ticks, its log lines
//! and its status snapshot live beside the loop ([`crate::manager`]).

mod assign;
pub mod backoff;
mod bins;
mod census;
#[cfg(test)]
mod checkin_tests;
mod decision;
pub mod fallback;
pub mod hedge;
#[cfg(test)]
mod hedge_tests;
pub mod need;
mod observe;
#[cfg(test)]
mod packing_tests;
mod plan;
mod pool;
mod race;
mod single;
pub mod spill;
#[cfg(test)]
mod spill_tests;
#[cfg(test)]
mod tests;
pub mod times;
pub mod unmet;
mod withdraw;
#[cfg(test)]
mod withdraw_tests;

pub use assign::{BundleAssignment, BundleOnWorker, Coverage, PoolVerdict, UnservedBundle, misfit};
pub use backoff::{Failure, FailureClass, FailureSignature, MISCONFIGURED_AFTER, PoolHealth};
pub use decision::{PoolDecision, PoolsDecision};
pub use hedge::Hedge;
pub use need::Need;
pub use observe::{ObservedJob, PoolObservation, PoolsObservation, ServerView};
pub use plan::{plan_pools, preference_order, with_fallbacks};
pub use pool::{DEFAULT_STARTUP_GRACE, LaunchMode, PoolPolicy};
pub use single::SingleBackendFlags;
pub use spill::{PoolWait, Spill};
pub use unmet::{BundleClass, UnmetDemand, UnmetReason};
