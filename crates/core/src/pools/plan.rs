//! [`plan_pools`]: the pure plan over every pool (the rules are in the module's docs).

use super::assign::{self, Assigned, Slots};
use super::census::{Census, census};
use super::race;
use super::times;
use super::{
    BundleAssignment, Coverage, LaunchMode, PoolDecision, PoolObservation, PoolPolicy,
    PoolsDecision, PoolsObservation, ServerView, fallback, misfit, unmet,
};

use crate::bundle::StagedBundle;
use crate::policy::{Observation, PolicyConfig, Reason, plan};
use std::time::Duration;

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
pub(super) fn per_policy<'a>(
    pools: &'a [PoolObservation],
    policies: &[PoolPolicy],
) -> Vec<&'a PoolObservation> {
    (0..policies.len())
        .map(|i| pools.get(i).unwrap_or(&NOT_OBSERVED))
        .collect()
}

/// Where `bundles` go and what each pool's demand is (rules 1, 3 and 4 of the module doc).
pub(super) struct Assignment {
    censuses: Vec<Census>,
    assigned: Assigned,
    /// Per pool: the bundles assigned to it, plus those waiting because every fitting pool is
    /// full, counted at their preferred pool.
    demand: Vec<usize>,
    /// Per pool: the workers those bundles fill (each waiting bundle counts one).
    pub(super) workers: Vec<usize>,
    /// Per pool: the bundles that wait for a worker (assigned to any pool, waiting for room, or
    /// put on a checked-in worker the server has not started them on) and that it could run:
    /// what its pending jobs may still be needed for, though the bundles went elsewhere
    /// (spilled: the first worker that checks in takes them).
    fitting: Vec<usize>,
}

pub(super) fn assignment(
    bundles: &[StagedBundle],
    observations: &[&PoolObservation],
    policies: &[PoolPolicy],
    now: Duration,
    server: Option<&ServerView>,
    times: &[times::PoolTimes],
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
            hedge_room: obs.hedge_room,
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
    let fitting = fitting(bundles, policies, &assigned, &waiting);
    Assignment {
        censuses,
        assigned,
        demand,
        workers,
        fitting,
    }
}

/// Per pool, the bundles that wait for a worker and that it could run
/// ([`Assignment::fitting`]): those assigned to a pool (a hedged one once), those waiting for
/// room (`waiting`), and those the dispatch model puts on a checked-in worker, which wait too
/// until the server starts them (the model cannot see the memory a worker uses, so the
/// server may not).
fn fitting(
    bundles: &[StagedBundle],
    policies: &[PoolPolicy],
    assigned: &Assigned,
    waiting: &std::collections::HashSet<&str>,
) -> Vec<usize> {
    let assigned_bundles: std::collections::BTreeSet<usize> =
        assigned.assigned.iter().map(|(_, b, ..)| *b).collect();
    let on_workers: std::collections::HashSet<&str> = (assigned.on_workers.iter())
        .map(|b| b.uuid.as_str())
        .collect();
    let still_staged = |b: &&StagedBundle| {
        waiting.contains(b.uuid.as_str()) || on_workers.contains(b.uuid.as_str())
    };
    let waiting_for_workers =
        (assigned_bundles.iter().map(|b| &bundles[*b])).chain(bundles.iter().filter(still_staged));
    let mut fitting = vec![0usize; policies.len()];
    for bundle in waiting_for_workers {
        for (p, policy) in policies.iter().enumerate() {
            fitting[p] += usize::from(misfit(policy, bundle).is_none());
        }
    }
    fitting
}

/// Why a pool takes no bundle this tick (unobserved, backing off, stuck or lost job), if so.
pub(super) fn unavailable(
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
    let is_overdue = |b: &StagedBundle| server.is_some_and(|v| v.overdue.contains(&b.uuid));
    let Assignment {
        censuses,
        assigned,
        demand,
        workers,
        fitting,
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
            let overdue = (assigned.assigned.iter())
                .filter(|(p, b, ..)| *p == i && is_overdue(&observed.bundles[*b]))
                .count();
            let demand = Demand {
                bundles: demand[i],
                workers: workers[i],
                fitting: fitting[i],
                overdue,
                packs: server.is_some(),
            };
            let mut decision = decide(policy, observations[i], &censuses[i], demand, now);
            // As many of its launches count against `hedges_per_day` as it has new workers for
            // hedges (at most its launches): never fewer than the hedges it buys.
            let hedged = assigned.hedged.get(i).copied().unwrap_or(0) as u32;
            decision.hedges = hedged.min(decision.launches);
            decision
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
            overdue: is_overdue(&observed.bundles[b]),
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
    /// Bundles waiting for a worker that the pool could run, wherever they were assigned.
    fitting: usize,
    /// Of its bundles, those overdue ([`super::ServerView::overdue`]).
    overdue: usize,
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
        hedges: 0,
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
        surplus: 0,
        watch: None,
        reasons: Vec::new(),
    };
    if let Some(error) = &observed.unobserved {
        decision.reasons.push(Reason::Unobserved {
            error: error.clone(),
        });
        return decision;
    }
    if policy.launch_mode == LaunchMode::Compat {
        decide_compat(policy, observed, census, demand, &mut decision);
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

/// Rule 5 (module doc): upstream's exact rules on the bundles assigned to a compat pool, within
/// its budget.
fn decide_compat(
    policy: &PoolPolicy,
    observed: &PoolObservation,
    census: &Census,
    demand: Demand,
    decision: &mut PoolDecision,
) {
    if let Some(budget) = &observed.budget_reached {
        decision.reasons.push(budget.clone());
        return;
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
    cap_to_budget(observed, decision);
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
    let raced = race::jobs(policy, demand.workers, demand.overdue);
    let target = (busy + raced)
        .max(policy.min as usize)
        .min(policy.max as usize);
    decision.target = Some(target as u32);
    reasons.extend(race::said(policy, (demand.workers, raced), busy));
    decision.watch = race::watch(policy, (demand.workers, raced), census.pending);
    reasons.push(Reason::Target {
        target: target as u32,
        capacity,
    });
    let free = census.free(demand.packs);
    if demand.bundles > 0 && free >= demand.bundles.max(raced) {
        reasons.push(Reason::PendingCoversDemand {
            pending: free,
            staged: demand.bundles,
        });
    }
    let needed = target.saturating_sub(capacity);
    let room = (policy.max as usize).saturating_sub(census.jobs);
    let unraced = (busy + demand.workers).max(policy.min as usize);
    if unraced.saturating_sub(capacity) > room || busy + demand.workers > policy.max as usize {
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
    decision.launches = paced(policy, observed, (wanted, deficit), reasons);
    let wanted = busy + raced.max(demand.fitting);
    super::withdraw::withdraw(policy, observed, census, (wanted, capacity), decision);
}

/// The launches the pool's pacing allows of `wanted`: only the `deficit` below `min` within
/// `min_seconds_between_workers` of the last launch, and at most `max_launches_per_tick`.
fn paced(
    policy: &PoolPolicy,
    observed: &PoolObservation,
    (wanted, deficit): (usize, usize),
    reasons: &mut Vec<Reason>,
) -> u32 {
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
    allowed.min(cap)
}
