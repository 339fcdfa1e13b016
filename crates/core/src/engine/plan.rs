//! The plan step: the budgets say which pools may launch, the pure pool policy decides, the
//! server memory takes the decision's placements and the bundles read, and every read
//! bundle's start is estimated (those that left `staged` are scored).

use super::Engine;
use crate::estimate::{BundleEstimate, estimate};
use crate::events::EventKind;
use crate::pools::{PoolsDecision, PoolsObservation, plan_pools};
use crate::status::ScoredEstimate;
use rustc_hash::FxHashSet;
use std::time::Duration;

/// What the plan step decided and expects.
#[derive(Debug)]
pub(crate) struct Planned {
    /// The pool policy's decision.
    pub decision: PoolsDecision,
    /// When each staged bundle read is expected to start, and why.
    pub estimates: Vec<BundleEstimate>,
    /// Estimates scored this tick: their bundles left `staged`.
    pub scored: Vec<ScoredEstimate>,
    /// Budgets reached or restored this tick.
    pub events: Vec<EventKind>,
}

impl Engine {
    /// Plans the tick `observed` (its staged bundles read; `complete` when the read covered
    /// every staged bundle) at `now`; `start` is the clock's zero as time since the Unix epoch
    /// (the budget use is kept in those terms).
    pub fn plan(
        &mut self,
        observed: &mut PoolsObservation,
        complete: bool,
        now: Duration,
        start: Duration,
    ) -> Planned {
        let events = self.apply_budgets(observed, now, start);
        let policies = self.policies();
        let decision = plan_pools(observed, &policies, now);
        let read: FxHashSet<&str> = (observed.bundles.iter()).map(|b| b.uuid.as_str()).collect();
        (self.server).take(&decision.on_workers, &read, now);
        if complete {
            for runtime in &mut self.pools {
                runtime
                    .record
                    .keep_overdue_launches(|uuid| read.contains(uuid));
            }
        }
        (self.server).read(&observed.bundles);
        let estimates = estimate(&decision, &observed.times);
        let scored = (self.estimates).take(&estimates, &read, complete, now);
        Planned {
            decision,
            estimates,
            scored,
            events,
        }
    }
}
