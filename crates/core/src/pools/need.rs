//! How many staged bundles the pool policy must see: what the pools can absorb, not the queue.
//!
//! [`plan_pools`](super::plan_pools) decides each pool from its *demand* (the bundles assigned
//! to it, plus those waiting for it), and past a point more demand changes nothing. That point,
//! the pool's **cap**, is per launch mode:
//!
//! - **target**: `max(max − busy, free) + 1`, where `busy` are the active jobs past their
//!   `startup_grace` and `free` the pending and starting ones. The target `busy + demand` is
//!   clamped at `max` from `max − busy` on; the `+ 1` keeps `max_reached` (demand beyond `max`)
//!   and `pending_covers_demand` (free ≥ demand) exactly as with the whole queue;
//! - **compat** (upstream's rules): `pending + 1`: upstream's rules read the staged count only
//!   as "> 0" and "≤ pending";
//! - a pool that takes no bundle this tick (unobserved, backing off, stuck job): 0.
//!
//! A pool's demand never shrinks when bundles are appended to the list (assignment is greedy,
//! oldest first), so once every pool's demand on the bundles read so far has reached its cap,
//! the decision on them is the decision on the whole queue: same launches, stops, targets and
//! reason codes (the `policy_sees_enough` test checks this on random cases). Only the counts
//! inside the reasons (`want_workers (staged=N)`) are those of the bundles read.
//! [`Need::missing`] is what the staged search pages on: Σ over the pools of what each still
//! misses, never more than Σ caps, and bundles that fit no pool add nothing.

use super::census::{Census, census};
use super::plan::{assignment, per_policy, unavailable};
use super::{LaunchMode, PoolObservation, PoolPolicy, ServerView, misfit};
use crate::bundle::StagedBundle;
use std::time::Duration;

/// What the pools can absorb this tick, given their jobs (see the module doc).
#[derive(Debug, Clone)]
pub struct Need<'a> {
    policies: &'a [PoolPolicy],
    observations: Vec<&'a PoolObservation>,
    now: Duration,
    caps: Vec<usize>,
    server: Option<&'a ServerView>,
    times: &'a [super::times::PoolTimes],
}

impl<'a> Need<'a> {
    /// The need of `policies` with jobs as `pools` shows them (one observation per policy, in
    /// order; a missing one counts as unobserved), at manager clock `now`.
    pub fn new(policies: &'a [PoolPolicy], pools: &'a [PoolObservation], now: Duration) -> Self {
        let observations = per_policy(pools, policies);
        let mut need = Self {
            policies,
            observations,
            now,
            caps: Vec::new(),
            server: None,
            times: &[],
        };
        need.caps = need.caps_now();
        need
    }

    /// The same need with the server's side known: demand counts workers as the dispatch
    /// model fills them ([`ServerView`]).
    pub fn with_server(mut self, server: Option<&'a ServerView>) -> Self {
        self.server = server;
        self.caps = self.caps_now();
        self
    }

    /// The same need with the pools' times known: bundles spill as `spill_after` says
    /// ([`super::spill`]).
    pub fn with_times(mut self, times: &'a [super::times::PoolTimes]) -> Self {
        self.times = times;
        self
    }

    fn caps_now(&self) -> Vec<usize> {
        let packs = self.server.is_some();
        self.policies
            .iter()
            .zip(&self.observations)
            .map(|(policy, observed)| {
                let census = census(policy, observed, self.now);
                cap(policy, &census, observed, packs, self.now)
            })
            .collect()
    }

    /// Per pool, in the order of the policies: the demand past which its decision no longer
    /// changes.
    pub fn caps(&self) -> &[usize] {
        &self.caps
    }

    /// Σ caps: the most bundles the pools can absorb this tick.
    pub fn total(&self) -> usize {
        self.caps.iter().sum()
    }

    /// How many more fitting bundles the pools miss, given the bundles `read` so far (oldest
    /// first): Σ over the pools of `cap − demand`, at least 0. Zero means that reading further
    /// changes no decision.
    pub fn missing(&self, read: &[StagedBundle]) -> usize {
        let demand = assignment(
            read,
            &self.observations,
            self.policies,
            self.now,
            self.server,
            self.times,
        )
        .workers;
        self.caps
            .iter()
            .zip(demand)
            .map(|(cap, demand)| cap.saturating_sub(demand))
            .sum()
    }

    /// Whether some pool could take `bundle` ([`misfit`]: queue and shape), whatever its jobs:
    /// a bundle no pool fits adds nothing to [`Need::missing`], now or at a later tick while
    /// the pools keep their settings.
    pub fn fits_some_pool(&self, bundle: &StagedBundle) -> bool {
        self.policies.iter().any(|p| misfit(p, bundle).is_none())
    }
}

/// The demand past which the decision of `policy` no longer changes (the module doc says why).
fn cap(
    policy: &PoolPolicy,
    census: &Census,
    observed: &PoolObservation,
    packs: bool,
    now: Duration,
) -> usize {
    if unavailable(policy, observed, census, now).is_some() {
        return 0;
    }
    match policy.launch_mode {
        LaunchMode::Compat => census.pending + 1,
        LaunchMode::Target => {
            let (busy, free) = (census.busy(packs), census.free(packs));
            (policy.max as usize).saturating_sub(busy).max(free) + 1
        }
    }
}

#[cfg(test)]
mod tests;
