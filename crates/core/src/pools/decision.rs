//! What the pools' plan decides ([`PoolsDecision`]): per pool, its launches, stops and
//! reasons; per staged bundle, which pool takes it or why none does.

use super::{BundleAssignment, BundleOnWorker, LaunchMode, UnmetDemand, UnservedBundle};
use crate::policy::{Decision, Reason};
use serde::{Deserialize, Serialize};

/// What one pool does this tick, and why.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolDecision {
    /// The pool's name.
    pub pool: String,
    /// The pool's launch mode.
    pub launch_mode: LaunchMode,
    /// Worker jobs to start now.
    pub launches: u32,
    /// Of those, the launches for bundles hedged from other pools ([`super::hedge`]): they
    /// count against the pool's `hedges_per_day`.
    pub hedges: u32,
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
    /// Pending jobs of this manager the pool no longer needs (its jobs stand above what its
    /// busy workers, `min` and the waiting bundles it could run need): withdrawn once every
    /// decision has found a surplus for `withdraw_after`, the ones withdrawn now included.
    pub surplus: usize,
    /// The pool races launches for waiting bundles and some pend (reason `raced`): the
    /// manager looks again after the pool's `race_watch`, sooner than `sleep_time`, so the
    /// losers are withdrawn as soon as the winners check in ([`PoolsDecision::next_tick`]).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::seconds::serialize_option",
        deserialize_with = "crate::seconds::deserialize_option"
    )]
    pub watch: Option<std::time::Duration>,
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
    /// Overdue bundles ([`ServerView::overdue`](super::ServerView::overdue)) a worker this tick launches is for: the
    /// manager remembers them ([`ServerView::launched_for`](super::ServerView::launched_for)) while they are staged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overdue_launches: Vec<String>,
}

impl PoolsDecision {
    /// Total launches over all pools.
    pub fn launches(&self) -> u32 {
        self.pools.iter().map(|p| p.launches).sum()
    }

    /// When the manager ticks next: after `sleep_time`, or sooner while a pool watches its
    /// race ([`PoolsDecision::watched_by`]).
    pub fn next_tick(&self, sleep_time: std::time::Duration) -> std::time::Duration {
        self.watched_by(sleep_time)
            .map_or(sleep_time, |(_, watch)| watch)
    }

    /// The pool whose race sets the next tick ([`PoolDecision::watch`], the soonest), with
    /// its `race_watch`, when that comes before `sleep_time`.
    pub fn watched_by(
        &self,
        sleep_time: std::time::Duration,
    ) -> Option<(&str, std::time::Duration)> {
        (self.pools.iter())
            .filter_map(|p| Some((p.pool.as_str(), p.watch?)))
            .filter(|(_, watch)| *watch < sleep_time)
            .min_by_key(|(_, watch)| *watch)
    }
}
