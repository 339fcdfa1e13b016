//! Which pool a staged bundle goes to: shape and queue matching (as the CodaLab server matches
//! bundles to workers) and the capacity-aware assignment in preference order.

use super::PoolPolicy;
use crate::bundle::StagedBundle;
use crate::policy::Reason;

/// Why `pool` cannot run `bundle`, or `None` when it can. Mirrors the server's
/// `RunResources.dominates` (codalab/worker/bundle_state.py): a bundle with a `request_queue`
/// runs only on workers tagged with it; a bundle without one does not run on tag-exclusive
/// tagged workers. Then cpus, gpus and memory must fit the pool's worker shape.
pub fn misfit(pool: &PoolPolicy, bundle: &StagedBundle) -> Option<String> {
    if pool.match_request_queue {
        let tag = pool.tag.as_deref().filter(|t| !t.is_empty());
        if !bundle.request_queue.is_empty() {
            if tag != Some(bundle.request_queue.as_str()) {
                return Some(format!(
                    "request_queue={} does not match pool tag {}",
                    bundle.request_queue,
                    tag.unwrap_or("(none)")
                ));
            }
        } else if let Some(tag) = tag.filter(|_| pool.tag_exclusive) {
            return Some(format!(
                "no request_queue, and the pool is exclusive to tag {tag}"
            ));
        }
    }
    if !pool.check_shape {
        return None;
    }
    pool.shape.misfit(bundle).map(|m| m.to_string())
}

/// How an assigned bundle is (or will be) covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Coverage {
    /// A pending worker of the pool will take it.
    PendingWorker,
    /// The pool has room to launch a worker for it (this tick, or when rate and cap allow).
    NewWorker,
    /// A compat pool: upstream's rules decide.
    Compat,
}

/// A bundle given to a pool.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BundleAssignment {
    /// The bundle uuid.
    pub uuid: String,
    /// The pool's name.
    pub pool: String,
    /// How it is covered.
    pub coverage: Coverage,
}

/// One pool's verdict on a bundle it does not take.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PoolVerdict {
    /// The pool's name.
    pub pool: String,
    /// Why not.
    #[serde(flatten)]
    pub reason: Reason,
}

/// A staged bundle no pool takes this tick.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnservedBundle {
    /// The bundle uuid.
    pub uuid: String,
    /// The main reason: `no_fitting_pool`, or the verdict of the most preferred fitting pool
    /// (`backing_off`, `max_reached`, `pending_timeout`, `unobserved`).
    #[serde(flatten)]
    pub reason: Reason,
    /// Every pool's verdict, in preference order.
    pub pools: Vec<PoolVerdict>,
}

/// What a pool can take this tick, as the assignment sees it.
#[derive(Debug, Clone)]
pub(super) struct Slots {
    /// Why the pool takes nothing (backing off, unobserved, stuck), if so.
    pub unavailable: Option<Reason>,
    /// Compat pools take every fitting bundle.
    pub compat: bool,
    /// Pending workers not yet given a bundle.
    pub pending: usize,
    /// Launches the pool may still make before `max`.
    pub room: usize,
    /// `(jobs, max)` for the `max_reached` verdict.
    pub jobs_and_max: (usize, u32),
}

/// Assigns bundles to pools. `order` lists pool indices in preference order. Returns the
/// assignments (pool index, bundle index, coverage) and the unserved bundles.
pub(super) fn assign(
    bundles: &[StagedBundle],
    policies: &[PoolPolicy],
    order: &[usize],
    slots: &mut [Slots],
) -> (Vec<(usize, usize, Coverage)>, Vec<UnservedBundle>) {
    let fitting: Vec<Vec<usize>> = bundles
        .iter()
        .map(|b| {
            order
                .iter()
                .copied()
                .filter(|&p| misfit(&policies[p], b).is_none())
                .collect()
        })
        .collect();
    let mut assigned: Vec<Option<(usize, Coverage)>> = vec![None; bundles.len()];
    // Pass 1: existing pending workers first, most constrained bundles first, so that a
    // pending worker is not spent on a bundle that fits elsewhere too. A compat pool ends the
    // scan: the bundle is left to pass 2, where preference order decides between it and the
    // pools before it.
    let mut by_constraint: Vec<usize> = (0..bundles.len()).collect();
    by_constraint.sort_by_key(|&b| fitting[b].len());
    for &b in &by_constraint {
        for &p in &fitting[b] {
            let slot = &mut slots[p];
            if slot.unavailable.is_some() {
                continue;
            }
            if slot.compat {
                break;
            }
            if slot.pending > 0 {
                slot.pending -= 1;
                assigned[b] = Some((p, Coverage::PendingWorker));
                break;
            }
        }
    }
    // Pass 2: in bundle order, the first pool in preference order that is a compat pool (it
    // takes every bundle that reaches it, as upstream) or has room to launch.
    for b in 0..bundles.len() {
        if assigned[b].is_some() {
            continue;
        }
        for &p in &fitting[b] {
            let slot = &mut slots[p];
            if slot.unavailable.is_some() {
                continue;
            }
            if slot.compat {
                assigned[b] = Some((p, Coverage::Compat));
                break;
            }
            if slot.room > 0 {
                slot.room -= 1;
                assigned[b] = Some((p, Coverage::NewWorker));
                break;
            }
        }
    }
    let mut done = Vec::new();
    let mut unserved = Vec::new();
    for (b, bundle) in bundles.iter().enumerate() {
        if let Some((p, coverage)) = assigned[b] {
            done.push((p, b, coverage));
            continue;
        }
        unserved.push(unserved_bundle(bundle, policies, order, slots, &fitting[b]));
    }
    (done, unserved)
}

fn unserved_bundle(
    bundle: &StagedBundle,
    policies: &[PoolPolicy],
    order: &[usize],
    slots: &[Slots],
    fitting: &[usize],
) -> UnservedBundle {
    let pools: Vec<PoolVerdict> = order
        .iter()
        .map(|&p| {
            let reason = match misfit(&policies[p], bundle) {
                Some(detail) => Reason::Misfit { detail },
                None => slots[p].unavailable.clone().unwrap_or(Reason::MaxReached {
                    jobs: slots[p].jobs_and_max.0,
                    max: slots[p].jobs_and_max.1,
                }),
            };
            PoolVerdict {
                pool: policies[p].name.clone(),
                reason,
            }
        })
        .collect();
    let reason = match fitting.first() {
        None => Reason::NoFittingPool,
        Some(first) => pools
            .iter()
            .find(|v| v.pool == policies[*first].name)
            .map(|v| v.reason.clone())
            .unwrap_or(Reason::NoFittingPool),
    };
    UnservedBundle {
        uuid: bundle.uuid.clone(),
        reason,
        pools,
    }
}
