//! Which pool a staged bundle goes to: shape and queue matching (as the CodaLab server matches
//! bundles to workers) and the capacity-aware assignment in preference order.

pub use super::bins::Coverage;
use super::bins::{Bins, Room};
use super::hedge::{self, Hedge, Unhedged};
use super::spill::{self, Candidate, PoolWait, Spill};
use super::times::PoolTimes;
use super::{PoolPolicy, ServerView};
use crate::bundle::StagedBundle;
use crate::dispatch::{
    DispatchInput, Hold, Placement, QueuedBundle, Resources, Unmet, dispatch, held_back,
    server_order,
};
use crate::policy::Reason;
use rustc_hash::{FxHashMap, FxHashSet};
use std::borrow::Cow;
use std::collections::BTreeMap;

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

/// A bundle given to a pool.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BundleAssignment {
    /// The bundle uuid.
    pub uuid: String,
    /// The pool's name.
    pub pool: String,
    /// How it is covered.
    pub coverage: Coverage,
    /// Which of the pool's workers takes it: its starting ones first (oldest first), then new
    /// ones in launch order (a compat pool: the bundle's place among the pool's bundles).
    pub worker: usize,
    /// How `spill_after` weighed: it waits on a pool that has one, or it spilled past
    /// cheaper pools (see `pools/spill.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill: Option<Spill>,
    /// The server has not started it on a checked-in worker the dispatch model gave it to
    /// ([`super::ServerView::overdue`]): the pool's worker is launched for it once.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub overdue: bool,
}

/// One pool's verdict on a bundle it does not take.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolVerdict {
    /// The pool's name.
    pub pool: String,
    /// Why not.
    #[serde(flatten)]
    pub reason: Reason,
}

/// A staged bundle no pool takes this tick.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// Workers started and not yet given bundles by the server (pending, or running and not
    /// checked in): they take bundles before new ones.
    pub coming: usize,
    /// Launches the pool may still make before `max`.
    pub room: usize,
    /// `(jobs, max)` for the `max_reached` verdict.
    pub jobs_and_max: (usize, u32),
    /// Launches the pool may still make today for bundles hedged from other pools
    /// ([`super::hedge`]).
    pub hedge_room: usize,
}

/// A staged bundle the server starts on a checked-in worker that has room for it now: no
/// worker is launched for it ([`crate::dispatch`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BundleOnWorker {
    /// The bundle uuid.
    pub uuid: String,
    /// The worker's id.
    pub worker_id: String,
}

/// Where the bundles go (see [`assign`]).
#[derive(Debug, Clone, Default)]
pub(super) struct Assigned {
    /// (pool index, bundle index, coverage, worker index: see [`BundleAssignment::worker`],
    /// how `spill_after` weighed).
    pub assigned: Vec<(usize, usize, Coverage, usize, Option<Spill>)>,
    /// Bundles no pool takes, and bundles held back for their owner.
    pub unserved: Vec<UnservedBundle>,
    /// Bundles a checked-in worker takes now.
    pub on_workers: Vec<BundleOnWorker>,
    /// Per pool: the workers (starting and new) its bundles fill.
    pub workers: Vec<usize>,
    /// Per pool: of its new workers, those launched for hedges ([`super::hedge`]).
    pub hedged: Vec<usize>,
}

/// Assigns bundles to pools. `order` lists pool indices in preference order.
///
/// Without the server's side (`server` is `None`) a worker takes one bundle and bundles go in
/// the staged order. With it, the dispatch model ([`crate::dispatch`]) first starts bundles on
/// the checked-in workers that have room and holds back those the server would give no new
/// worker of this manager (their owner's quota, their own worker, workers private to another
/// user); the others go in the server's order, each to the most preferred fitting pool, onto a
/// worker of that pool that still has room for it (starting ones first), else a new one while
/// the pool has room; past a pool's `spill_after` (by `times`), to a later pool that starts it
/// sooner ([`spill`]). A worker has room while the CPUs, GPUs and memory of the pool's shape,
/// less the requests of the bundles it took (with the server's defaults), cover the bundle; a
/// worker with no bundle yet takes any bundle that fits the pool ([`misfit`]).
pub(super) fn assign(
    bundles: &[StagedBundle],
    policies: &[PoolPolicy],
    order: &[usize],
    slots: &[Slots],
    times: &[PoolTimes],
    server: Option<&ServerView>,
) -> Assigned {
    let mut out = Assigned {
        workers: vec![0; policies.len()],
        ..Assigned::default()
    };
    let (rest, mut owners) = match server {
        Some(view) => server_pass(bundles, view, &mut out),
        None => ((0..bundles.len()).collect(), None),
    };
    let mut bins: Vec<Bins> = policies
        .iter()
        .zip(slots)
        .map(|(policy, slot)| {
            let room = Room {
                coming: slot.coming,
                new: slot.room,
                hedges: slot.hedge_room,
            };
            Bins::new(policy, room, server.is_some())
        })
        .collect();
    for b in rest {
        let bundle = &bundles[b];
        if let Some(held) = owners.as_ref().and_then(|o| o.holds(bundle)) {
            out.unserved.push(held);
            continue;
        }
        let fitting: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&p| misfit(&policies[p], bundle).is_none())
            .collect();
        let request = Resources::requested(bundle);
        let launched_for = server.is_some_and(|view| view.launched_for_overdue(&bundle.uuid));
        let pools = Pools {
            policies,
            slots,
            times,
            new_workers: !launched_for,
        };
        match place(&request, &fitting, &pools, &mut bins) {
            Some(Placed { main, hedge }) => {
                if let Some(owners) = owners.as_mut() {
                    owners.spend(bundle);
                }
                let (p, coverage, worker, spill) = main;
                out.assigned.push((p, b, coverage, worker, spill));
                if let Some((q, coverage, worker, spill)) = hedge {
                    out.assigned.push((q, b, coverage, worker, spill));
                }
            }
            None if launched_for && !fitting.is_empty() => out.unserved.push(UnservedBundle {
                uuid: bundle.uuid.clone(),
                reason: Reason::NotStartedByServer,
                pools: Vec::new(),
            }),
            None => out
                .unserved
                .push(unserved_bundle(bundle, policies, order, slots, &fitting)),
        }
    }
    for (workers, bins) in out.workers.iter_mut().zip(&bins) {
        *workers = bins.used();
    }
    out.hedged = bins.iter().map(|bins| bins.hedged).collect();
    out
}

/// What [`place`] weighs a bundle against.
struct Pools<'a> {
    policies: &'a [PoolPolicy],
    slots: &'a [Slots],
    times: &'a [PoolTimes],
    /// Whether the bundle may have a worker launched for it (an overdue bundle already had
    /// its one: it takes only workers that are starting or launched for others).
    new_workers: bool,
}

/// Where a bundle goes: a pool, how, which of its workers and how `spill_after` weighed.
type Place = (usize, Coverage, usize, Option<Spill>);

/// Where [`place`] put a bundle: its pool, and the pool it is hedged on, if it is.
struct Placed {
    main: Place,
    hedge: Option<Place>,
}

/// The pool of `fitting` (in preference order) that takes a bundle holding `request`, as
/// [`spill::choose`] rules on each pool's wait ([`PoolTimes::worker_wait`]); it takes the
/// bundle, and so does the pool it is hedged on ([`hedge`]), if any. `None`: no fitting pool
/// can take it this tick.
fn place(
    request: &Resources,
    fitting: &[usize],
    pools: &Pools,
    bins: &mut [Bins],
) -> Option<Placed> {
    let Pools {
        policies,
        slots,
        times,
        new_workers,
    } = *pools;
    let fitting = &on_demand_first(fitting, policies, slots, bins);
    let peeked: Vec<Option<usize>> = (fitting.iter())
        .map(|&p| match &slots[p] {
            slot if slot.unavailable.is_some() => None,
            slot if slot.compat => new_workers.then_some(usize::MAX),
            _ => bins[p].peek(request, new_workers).map(|(_, worker)| worker),
        })
        .collect();
    let wait = |p: usize, worker: usize| times.get(p).map_or(0, |t| t.worker_wait(worker));
    let candidates: Vec<Candidate> = (fitting.iter().zip(&peeked))
        .map(|(&p, worker)| Candidate {
            wait: worker.map(|worker| wait(p, worker)),
            spill_after: policies[p].spill_after.map(|d| d.as_secs()),
        })
        .collect();
    let (chosen, passed) = spill::choose(&candidates);
    let chosen = chosen?;
    let pool_wait = |k: usize| {
        let (p, worker) = (fitting[k], worker_of(&peeked, k));
        Some(PoolWait {
            pool: policies[p].name.clone(),
            wait_seconds: candidates[k].wait?,
            spill_after_seconds: candidates[k].spill_after?,
            basis: times
                .get(p)
                .map(|t| t.wait_basis(worker))
                .unwrap_or_default(),
        })
    };
    let spill = match passed.is_empty() {
        false => Some(Spill::Spilled {
            to: policies[fitting[chosen]].name.clone(),
            wait_seconds: candidates[chosen].wait.unwrap_or(0),
            from: passed.iter().filter_map(|&k| pool_wait(k)).collect(),
        }),
        true => pool_wait(chosen).map(|on| Spill::Waits { on }),
    };
    let p = fitting[chosen];
    if slots[p].compat {
        bins[p].compat += 1;
        let main = (p, Coverage::Compat, bins[p].compat - 1, spill);
        return Some(Placed { main, hedge: None });
    }
    let (coverage, worker) = bins[p].take(request, new_workers)?;
    let choice = Choice {
        fitting,
        candidates: &candidates,
        peeked: &peeked,
        chosen,
    };
    let (hedge, unhedged) = hedge_on(request, &choice, pools, bins);
    let main = (p, coverage, worker, spill.or(unhedged));
    Some(Placed { main, hedge })
}

/// How [`place`] weighed a bundle: the fitting pools, each one's wait, the worker it would
/// take, and the pool chosen (an index into `fitting`).
struct Choice<'a> {
    fitting: &'a [usize],
    candidates: &'a [Candidate],
    peeked: &'a [Option<usize>],
    chosen: usize,
}

/// The hedge of a bundle placed as `choice` says ([`hedge`]): the pool it is hedged on (which
/// takes it), or, when its wait is past its pool's `hedge_after` and none is, why not.
fn hedge_on(
    request: &Resources,
    choice: &Choice,
    pools: &Pools,
    bins: &mut [Bins],
) -> (Option<Place>, Option<Spill>) {
    let Choice {
        fitting,
        candidates,
        peeked,
        chosen,
    } = *choice;
    let (policies, slots) = (pools.policies, pools.slots);
    let new_workers = pools.new_workers;
    let p = fitting[chosen];
    let accepts = |k: usize| {
        let q = fitting[k];
        let slot = &slots[q];
        slot.unavailable.is_none() && !slot.compat && bins[q].may_hedge(request, new_workers)
    };
    let Some(hedge_after) = policies[p].hedge_after.map(|d| d.as_secs()) else {
        return (None, None);
    };
    let wait = candidates[chosen].wait.unwrap_or(0);
    let basis = (pools.times.get(p))
        .map(|t| t.wait_basis(worker_of(peeked, chosen)))
        .unwrap_or_default();
    let waits: Vec<Option<u64>> = candidates.iter().map(|c| c.wait).collect();
    let k = match hedge::target(&waits, chosen, Some(hedge_after), accepts) {
        None => return (None, None),
        Some(Ok(k)) => k,
        Some(Err(why)) => {
            let unhedged = Unhedged {
                pool: policies[p].name.clone(),
                wait_seconds: wait,
                hedge_after_seconds: hedge_after,
                why: why.to_owned(),
            };
            return (None, Some(Spill::Unhedged { unhedged }));
        }
    };
    let q = fitting[k];
    let Some((coverage, worker)) = bins[q].take_hedge(request, new_workers) else {
        return (None, None);
    };
    let hedge = Hedge {
        to: policies[q].name.clone(),
        wait_seconds: candidates[k].wait.unwrap_or(0),
        from: policies[p].name.clone(),
        from_wait_seconds: wait,
        hedge_after_seconds: hedge_after,
        basis,
    };
    (
        Some((q, coverage, worker, Some(Spill::Hedged { hedge }))),
        None,
    )
}

/// The worker [`Bins::peek`] named for candidate `k`.
fn worker_of(peeked: &[Option<usize>], k: usize) -> usize {
    peeked[k].unwrap_or(usize::MAX)
}

/// `fitting` with the first available pool's `fallback` tried first while the fallback has
/// fewer than the pool's `min_on_demand` workers (jobs, and new ones this tick); `fitting`
/// itself, not copied, otherwise (every bundle of every tick comes here).
fn on_demand_first<'a>(
    fitting: &'a [usize],
    policies: &[PoolPolicy],
    slots: &[Slots],
    bins: &[Bins],
) -> Cow<'a, [usize]> {
    let short = || {
        let first = *fitting.iter().find(|&&p| slots[p].unavailable.is_none())?;
        let rules = (policies[first].fallback.as_ref()).filter(|f| f.min_on_demand > 0)?;
        let at = fitting
            .iter()
            .position(|&p| policies[p].name == rules.pool)?;
        let workers = slots[fitting[at]].jobs_and_max.0 + bins[fitting[at]].launched();
        (workers < rules.min_on_demand as usize).then_some(at)
    };
    match short() {
        Some(at) => {
            let mut order = fitting.to_vec();
            let fallback = order.remove(at);
            order.insert(0, fallback);
            Cow::Owned(order)
        }
        None => Cow::Borrowed(fitting),
    }
}

/// The owners' quotas as the assignment spends them (with the server's side).
struct OwnerQuotas<'a> {
    view: &'a ServerView,
    quota: BTreeMap<String, i64>,
}

impl OwnerQuotas<'_> {
    /// The bundle held back for its owner, if the server would give it no new worker of ours.
    fn holds(&self, bundle: &StagedBundle) -> Option<UnservedBundle> {
        let queued = QueuedBundle {
            bundle: bundle.clone(),
        };
        let quota_left = self.quota_left(queued.owner());
        let request = Resources::requested(bundle);
        let held = held_back(
            &self.view.owners,
            quota_left,
            &queued,
            &request,
            &self.view.workers,
        )?;
        Some(held_bundle(&bundle.uuid, &held, held.hold()?))
    }

    fn quota_left(&self, owner: &str) -> i64 {
        self.quota.get(owner).copied().unwrap_or(i64::MAX)
    }

    /// A bundle of this owner goes to a new worker of ours: shared ones spend their quota.
    fn spend(&mut self, bundle: &StagedBundle) {
        let owners = &self.view.owners;
        if owners.manager != owners.root {
            return;
        }
        if let Some(left) = bundle
            .owner_id
            .as_ref()
            .and_then(|owner| self.quota.get_mut(owner))
        {
            *left -= 1;
        }
    }
}

/// Bundle `uuid`, held back for its owner as `held` says (`hold`: its kind and the owner).
fn held_bundle(uuid: &str, held: &Unmet, (hold, owner): (Hold, &str)) -> UnservedBundle {
    UnservedBundle {
        uuid: uuid.to_owned(),
        reason: Reason::Held {
            code: hold,
            owner: owner.to_owned(),
            detail: held.to_string(),
        },
        pools: Vec::new(),
    }
}

/// The server's pass over its checked-in workers ([`dispatch`]): bundles it starts now go to
/// `out.on_workers`, bundles held back for their owner to `out.unserved`; returns the others'
/// indices in the server's order, and the owners' quotas left after the pass.
fn server_pass<'a>(
    bundles: &[StagedBundle],
    view: &'a ServerView,
    out: &mut Assigned,
) -> (Vec<usize>, Option<OwnerQuotas<'a>>) {
    let index: FxHashMap<&str, usize> = bundles
        .iter()
        .enumerate()
        .map(|(i, b)| (b.uuid.as_str(), i))
        .collect();
    let queued = |b: &StagedBundle| QueuedBundle { bundle: b.clone() };
    let ordered = server_order(bundles.iter().map(queued).collect());
    let plan = dispatch(DispatchInput {
        bundles: bundles
            .iter()
            .filter(|b| !view.overdue.contains(&b.uuid))
            .map(queued)
            .collect(),
        workers: view.workers.clone(),
        pools: Vec::new(),
        owners: view.owners.clone(),
    });
    let mut quotas = OwnerQuotas {
        view,
        quota: view.owners.quota_left.clone(),
    };
    let mut settled = FxHashSet::default();
    for placed in &plan.bundles {
        match &placed.placement {
            Placement::Worker { worker_id } => {
                if view.is_shared(worker_id) {
                    quotas.spend(&bundles[index[placed.uuid.as_str()]]);
                }
                out.on_workers.push(BundleOnWorker {
                    uuid: placed.uuid.clone(),
                    worker_id: worker_id.clone(),
                });
            }
            Placement::Unmet(held) => match held.hold() {
                Some(hold) => out.unserved.push(held_bundle(&placed.uuid, held, hold)),
                None => continue,
            },
            Placement::NewWorker { .. } => continue,
        }
        settled.insert(placed.uuid.as_str());
    }
    let rest = ordered
        .iter()
        .map(|q| q.bundle.uuid.as_str())
        .filter(|uuid| !settled.contains(uuid))
        .map(|uuid| index[uuid])
        .collect();
    (rest, Some(quotas))
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
