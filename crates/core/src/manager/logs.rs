//! The manager's log lines about a tick's decision (one per pool, and one per unserved bundle
//! when its reason changes) and the decision's events for metrics. The pool of upstream's
//! single-backend mode ([`PoolPolicy::is_single_backend`]) speaks upstream's lines verbatim.

use crate::bundle::StagedBundle;
use crate::policy::Reason;
use crate::pools::{LaunchMode, PoolPolicy, PoolsDecision};
use crate::status::TickEvent;
use rustc_hash::FxHashSet;
use std::collections::{BTreeMap, HashMap};

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
    // Bundles newly unserved for the same reason, said once: (reason, why) → uuids.
    let mut groups: BTreeMap<(String, &'static str, String), Vec<&str>> = BTreeMap::new();
    for unserved in &decision.unserved {
        let code = unserved.reason.code();
        current.insert(unserved.uuid.clone(), code);
        if unserved.reason == Reason::NoFittingPool {
            filtered += 1;
        }
        if reported.get(&unserved.uuid) == Some(&code) {
            continue;
        }
        let why = verdicts(unserved, single);
        if single && unserved.reason == Reason::NoFittingPool {
            tracing::info!(bundle = %unserved.uuid, "filtered out bundle {} based on unfulfillable resource requested: {why}", unserved.uuid);
        } else {
            groups
                .entry((unserved.reason.to_string(), code, why))
                .or_default()
                .push(&unserved.uuid);
        }
    }
    for ((reason, code, why), uuids) in groups {
        // The pools' verdicts, unless they only repeat the reason (one pool said it).
        let why = match why.is_empty() || why == reason {
            true => String::new(),
            false => format!(" ({why})"),
        };
        match uuids.as_slice() {
            [uuid] => {
                tracing::info!(bundle = %uuid, reason = code, "bundle {uuid} is not served: {reason}{why}")
            }
            _ => {
                let shown = uuids.iter().take(UUIDS_SHOWN).copied().collect::<Vec<_>>();
                let more = uuids.len().saturating_sub(UUIDS_SHOWN);
                let more = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                tracing::info!(
                    bundles = uuids.len(),
                    reason = code,
                    "{} bundles are not served: {reason}{why}: {}{more}",
                    uuids.len(),
                    shown.join(", ")
                );
            }
        }
    }
    *reported = current;
    filtered
}

/// Bundles named in one "not served" line; the others are counted.
const UUIDS_SHOWN: usize = 5;

/// What each pool said of an unserved bundle (without the pool's name in the single mode).
fn verdicts(unserved: &crate::pools::UnservedBundle, single: bool) -> String {
    unserved
        .pools
        .iter()
        .map(|v| match single {
            true => v.reason.to_string(),
            false => format!("{}: {}", v.pool, v.reason),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Counts the bundles of the last tick's read (`window`, oldest first) that are no longer
/// staged, as far as this tick's read (`read`, oldest first) shows, then makes `window` this
/// tick's read. The staged list keeps its order (by id) and grows only at its end, so a bundle of
/// the last read that this read lacks has left the staged state (a worker took it, or it was
/// killed or deleted) when this read reached past it: when a later bundle of the last read is
/// in this one, or this read took the list to its end (`complete`). Bundles of the last read
/// beyond this one's reach are not counted (the pools needed fewer bundles this tick). In the
/// steady state (the same bundles tick after tick) `window` is not rewritten.
pub(crate) fn update_window(
    window: &mut Vec<String>,
    read: &[StagedBundle],
    complete: bool,
) -> usize {
    let now: FxHashSet<&str> = read.iter().map(|b| b.uuid.as_str()).collect();
    let reach = if complete {
        window.len()
    } else {
        window
            .iter()
            .rposition(|uuid| now.contains(uuid.as_str()))
            .map_or(0, |last| last + 1)
    };
    let removed = window[..reach]
        .iter()
        .filter(|uuid| !now.contains(uuid.as_str()))
        .count();
    let same = window.len() == read.len() && window.iter().zip(read).all(|(w, b)| *w == b.uuid);
    if !same {
        window.clear();
        window.extend(read.iter().map(|b| b.uuid.clone()));
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

/// Logs the bundles that spilled past a cheaper pool's `spill_after`, or were hedged on
/// another pool past their pool's `hedge_after`, when they first do (or go to another pool),
/// one line per reason; `spilled` remembers the bundles logged.
pub(crate) fn note_spills(spilled: &mut HashMap<String, String>, decision: &PoolsDecision) {
    use crate::pools::{Hedge, Spill};
    let mut lines: BTreeMap<String, (&str, usize)> = BTreeMap::new();
    let mut now = HashMap::new();
    for assignment in &decision.assignments {
        let to = match &assignment.spill {
            Some(
                Spill::Spilled { to, .. }
                | Spill::Hedged {
                    hedge: Hedge { to, .. },
                },
            ) => to,
            _ => continue,
        };
        let key = format!("{}:{to}", assignment.uuid);
        if !spilled.contains_key(&key) {
            let why = assignment.spill.as_ref().map(Spill::to_string);
            lines.entry(why.unwrap_or_default()).or_insert((to, 0)).1 += 1;
        }
        now.insert(key, to.clone());
    }
    for (why, (to, bundles)) in lines {
        tracing::info!(pool = to, bundles, "{bundles} bundle(s) {why}");
    }
    *spilled = now;
}

/// Upstream's INFO line for one of its own rules, verbatim (grep-based alerts written for the
/// Python manager keep working): `Want to launch a worker because we have 3 > 0 staged
/// bundles`, `Don't launch because …`, `Launch a worker because we are under the minimum …`.
fn upstream_line(reason: &Reason) -> Option<String> {
    match reason {
        Reason::MaxReached { jobs, max } if *jobs < *max as usize => None,
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
    use super::{Reason, upstream_line};

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
    use super::update_window;
    use crate::bundle::StagedBundle;

    fn read(uuids: &[&str]) -> Vec<StagedBundle> {
        uuids.iter().map(|u| StagedBundle::new(*u)).collect()
    }

    fn window(uuids: &[&str]) -> Vec<String> {
        uuids.iter().map(|u| (*u).to_owned()).collect()
    }

    /// (last read, this read, whether this read reached the end) → removed.
    #[test]
    fn removed_counts_what_this_read_reaches_past() {
        let cases: &[(&[&str], &[&str], bool, usize)] = &[
            // The same bundles: nothing left.
            (&["a", "b", "c"], &["a", "b", "c"], false, 0),
            // a and b were taken; c is still read: both left.
            (&["a", "b", "c"], &["c", "d", "e"], false, 2),
            // b was taken from the middle.
            (&["a", "b", "c"], &["a", "c", "d"], false, 1),
            // A shorter read (the pools need fewer): c is beyond its reach, not counted.
            (&["a", "b", "c"], &["a", "b"], false, 0),
            // a taken, and the read stops before c: only a counts.
            (&["a", "b", "c"], &["b"], false, 1),
            // The read reached the end of the list: every missing bundle left.
            (&["a", "b", "c"], &["b"], true, 2),
            (&["a", "b", "c"], &[], true, 3),
            // Nothing of the last read is in this one, and the list goes on: unknown, 0.
            (&["a", "b"], &["x", "y"], false, 0),
            (&[], &["a"], false, 0),
        ];
        for &(before, now, complete, removed) in cases {
            let mut known = window(before);
            assert_eq!(
                update_window(&mut known, &read(now), complete),
                removed,
                "{before:?} → {now:?} (complete: {complete})"
            );
            assert_eq!(known, window(now), "the window becomes this read");
        }
    }
}
