//! The manager's log lines about a tick's decision (one per pool, and one per unserved bundle
//! when its reason changes) and the decision's events for metrics. The pool of upstream's
//! single-backend mode ([`PoolPolicy::is_single_backend`]) speaks upstream's lines verbatim.

use super::status::TickEvent;
use crate::policy::Reason;
use crate::pools::{LaunchMode, PoolPolicy, PoolsDecision, PoolsObservation};
use rustc_hash::FxHashSet;
use std::collections::HashMap;

/// Logs unserved bundles once per bundle and reason (`reported` remembers what was
/// logged); returns how many fit no pool.
pub(crate) fn note_unserved(
    reported: &mut HashMap<String, &'static str>,
    policies: &[PoolPolicy],
    decision: &PoolsDecision,
) -> usize {
    let single = matches!(policies, [pool] if pool.is_single_backend());
    let mut current: HashMap<String, &'static str> = HashMap::new();
    let mut filtered = 0;
    for unserved in &decision.unserved {
        let code = unserved.reason.code();
        current.insert(unserved.uuid.clone(), code);
        if unserved.reason == Reason::NoFittingPool {
            filtered += 1;
        }
        if reported.get(&unserved.uuid) == Some(&code) {
            continue;
        }
        let why = unserved
            .pools
            .iter()
            .map(|v| {
                if single {
                    v.reason.to_string()
                } else {
                    format!("{}: {}", v.pool, v.reason)
                }
            })
            .collect::<Vec<_>>()
            .join("; ");
        if single && unserved.reason == Reason::NoFittingPool {
            tracing::info!(bundle = %unserved.uuid, "filtered out bundle {} based on unfulfillable resource requested: {why}", unserved.uuid);
        } else {
            tracing::info!(bundle = %unserved.uuid, reason = code, "bundle {} is not served: {} ({why})", unserved.uuid, unserved.reason);
        }
    }
    *reported = current;
    filtered
}

/// The uuids of the bundles that fit some pool.
pub(crate) fn fitting_uuids<'a>(
    observed: &'a PoolsObservation,
    decision: &PoolsDecision,
) -> FxHashSet<&'a str> {
    let misfits: FxHashSet<&str> = decision
        .unserved
        .iter()
        .filter(|u| u.reason == Reason::NoFittingPool)
        .map(|u| u.uuid.as_str())
        .collect();
    observed
        .bundles
        .iter()
        .filter(|b| !misfits.contains(b.uuid.as_str()))
        .map(|b| b.uuid.as_str())
        .collect()
}

/// Makes `known` the staged set `now` and returns how many of `known` left it. In the steady
/// state (the same bundles tick after tick) nothing is allocated.
pub(crate) fn update_staged(known: &mut FxHashSet<String>, now: &FxHashSet<&str>) -> usize {
    let removed = known.iter().filter(|u| !now.contains(u.as_str())).count();
    if removed > 0 || known.len() != now.len() {
        *known = now.iter().map(|u| (*u).to_owned()).collect();
    }
    removed
}

/// Logs each pool's decision (upstream's line in the single-backend compat mode) and, at
/// debug level, every reason.
pub(crate) fn log_decisions(
    policies: &[PoolPolicy],
    decision: &PoolsDecision,
    staged: usize,
    removed: usize,
) {
    for (policy, pool) in policies.iter().zip(&decision.pools) {
        let upstream = policy.is_single_backend() && policy.launch_mode == LaunchMode::Compat;
        if upstream {
            let jobs = pool.active + pool.pending;
            tracing::info!(
                staged = staged,
                removed,
                jobs,
                active = pool.active,
                pending = pool.pending,
                launches = pool.launches,
                reasons = %pool.reason_codes(),
                "{} staged bundles ({removed} removed since last time), {jobs} worker jobs (min={}, max={}) ({} active, {} pending)",
                staged,
                policy.min,
                policy.max,
                pool.active,
                pool.pending,
            );
        } else {
            tracing::info!(
                pool = %pool.pool,
                demand = pool.demand,
                active = pool.active,
                pending = pool.pending,
                stopping = pool.stopping,
                target = pool.target,
                launches = pool.launches,
                stops = pool.stops.len(),
                reasons = %pool.reason_codes(),
                "pool {}: {} bundles assigned, {} active, {} pending, {} stopping (min={}, max={}): launch {}, stop {}",
                pool.pool,
                pool.demand,
                pool.active,
                pool.pending,
                pool.stopping,
                policy.min,
                policy.max,
                pool.launches,
                pool.stops.len(),
            );
        }
        for reason in &pool.reasons {
            match upstream_line(reason).filter(|_| upstream) {
                Some(line) => tracing::info!(reason = reason.code(), "{line}"),
                None => tracing::debug!(pool = %pool.pool, reason = reason.code(), "{reason}"),
            }
        }
        if upstream && pool.launches > 0 {
            tracing::info!("Starting a worker!");
        }
    }
}

/// Upstream's INFO line for one of its own rules, verbatim (grep-based alerts written for the
/// Python manager keep working): `Want to launch a worker because we have 3 > 0 staged
/// bundles`, `Don't launch because …`, `Launch a worker because we are under the minimum …`.
fn upstream_line(reason: &Reason) -> Option<String> {
    match reason {
        Reason::WantWorkers { .. }
        | Reason::RateLimited { .. }
        | Reason::PendingCoversDemand { .. }
        | Reason::MaxReached { .. }
        | Reason::BelowMin { .. } => {
            let text = reason.to_string();
            let mut chars = text.chars();
            let first = chars.next()?.to_ascii_uppercase();
            Some(std::iter::once(first).chain(chars).collect())
        }
        _ => None,
    }
}

/// One event per reason of every pool's decision and per unserved bundle.
pub(crate) fn decision_events(decision: &PoolsDecision) -> Vec<TickEvent> {
    let pools = decision.pools.iter().flat_map(|pool| {
        pool.reasons.iter().map(|reason| TickEvent::Decision {
            pool: pool.pool.clone(),
            reason: reason.code(),
        })
    });
    let bundles = decision.unserved.iter().map(|u| TickEvent::Unserved {
        bundle: u.uuid.clone(),
        reason: u.reason.code(),
    });
    pools.chain(bundles).collect()
}

#[cfg(test)]
mod tests {
    use super::{Reason, update_staged, upstream_line};

    /// The exact lines of upstream's `worker_manager.py` (codalab-worksheets 1.7.5).
    #[test]
    fn upstream_lines_are_verbatim() {
        let cases = [
            (
                Reason::WantWorkers { staged: 3 },
                "Want to launch a worker because we have 3 > 0 staged bundles",
            ),
            (
                Reason::RateLimited {
                    waited_seconds: 4,
                    min_seconds: 60,
                },
                "Don't launch because waited 4 < 60 seconds since last worker",
            ),
            (
                Reason::PendingCoversDemand {
                    pending: 2,
                    staged: 1,
                },
                "Don't launch because still more pending workers than staged bundles (2 >= 1)",
            ),
            (
                Reason::MaxReached { jobs: 10, max: 10 },
                "Don't launch because too many workers already (10 >= 10)",
            ),
            (
                Reason::BelowMin { jobs: 0, min: 1 },
                "Launch a worker because we are under the minimum (0 < 1)",
            ),
        ];
        for (reason, line) in cases {
            assert_eq!(upstream_line(&reason).as_deref(), Some(line));
        }
        assert_eq!(upstream_line(&Reason::NoStagedBundles), None);
    }
    use rustc_hash::FxHashSet;

    fn known(uuids: &[&str]) -> FxHashSet<String> {
        uuids.iter().map(|u| (*u).to_owned()).collect()
    }

    fn now<'a>(uuids: &[&'a str]) -> FxHashSet<&'a str> {
        uuids.iter().copied().collect()
    }

    #[test]
    fn update_staged_counts_the_bundles_that_left() {
        let mut staged = known(&["a", "b", "c"]);
        assert_eq!(update_staged(&mut staged, &now(&["a", "b", "c"])), 0);
        assert_eq!(staged, known(&["a", "b", "c"]));
        assert_eq!(update_staged(&mut staged, &now(&["b", "d"])), 2);
        assert_eq!(staged, known(&["b", "d"]));
        assert_eq!(update_staged(&mut staged, &now(&["b", "d", "e"])), 0);
        assert_eq!(staged, known(&["b", "d", "e"]));
        assert_eq!(update_staged(&mut staged, &now(&[])), 3);
        assert!(staged.is_empty());
    }
}
