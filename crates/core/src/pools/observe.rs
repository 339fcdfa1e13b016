//! What the pools' plan reads each tick ([`PoolsObservation`]): the staged bundles, each pool's
//! jobs and memories, the server's side when known, and each pool's times.

use super::times;
use super::{PoolHealth, fallback};

use crate::backend::{JobState, PendingKind};
use crate::bundle::StagedBundle;
use crate::checkin::JobCheckin;
use crate::policy::Reason;
use std::time::Duration;

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
    /// What its platform says of it while it is pending ([`PendingKind`]; queued otherwise).
    /// Held (an admin or user hold, a dependency, a begin time), not for capacity: it counts
    /// toward `max` but is no starting worker (bundles do not wait for it; the pool launches
    /// beside it) and it stretches no estimate. Blocked (misconfigured, or no capacity to be
    /// had): withdrawn at once, as a job pending past `pending_timeout` is.
    pub pending: PendingKind,
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
            pending: PendingKind::Queued,
        }
    }

    /// Whether it is pending and its platform holds it by itself ([`PendingKind::Held`]).
    pub fn on_hold(&self) -> bool {
        self.state == JobState::Pending && self.pending == PendingKind::Held
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
    /// Launches the pool may still make in the rolling day for bundles hedged from other
    /// pools: its `hedges_per_day` less those it made ([`super::hedge`]).
    pub hedge_room: usize,
    /// A worker this manager launched in the pool has been seen checking in with the server
    /// (now or before a restart): the manager's view shows the pool's workers, so one that
    /// never checks in is broken, not invisible.
    pub checkins_seen: bool,
    /// Where the pool's new launches go, when it has a `fallback` ([`fallback`]).
    pub capacity: fallback::CapacityState,
    /// How long every decision has found pending jobs the pool no longer needs
    /// ([`super::PoolDecision::surplus`]), tick after tick; `None` when the last one found
    /// none.
    pub surplus_for: Option<Duration>,
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
    /// Of `overdue`, those a worker was already launched for ([`PoolsDecision::overdue_launches`](super::PoolsDecision::overdue_launches)
    /// of an earlier tick, as the manager remembers it): each takes a starting worker of a
    /// pool with room, never a new one, else waits ([`Reason::NotStartedByServer`]): an
    /// overdue bundle costs one launch, ever.
    pub launched_for: std::collections::BTreeSet<String>,
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
    pub times: Vec<times::PoolTimes>,
}
