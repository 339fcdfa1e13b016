//! The dispatch itself: the server's pass over the checked-in workers, then the new workers.

use super::fit::Slot;
use super::{
    BundleDispatch, Dispatch, DispatchInput, NewWorker, Owners, Placement, PoolShape, QueuedBundle,
    Resources, ServerWorker, Unmet, server_order,
};
use rustc_hash::FxHashMap;

/// The bundles' placements: first on the checked-in workers as the server places them, then
/// on new workers of the pools (see the module doc).
pub fn dispatch(input: DispatchInput) -> Dispatch {
    let DispatchInput {
        bundles,
        workers,
        pools,
        owners,
    } = input;
    let mut state = State {
        quota: owners.quota_left.clone(),
        owners,
        existing: live(&workers).map(slot_of).collect(),
        existing_ids: live(&workers).map(|w| w.worker_id.clone()).collect(),
        new: Vec::new(),
        rooms: pools.iter().map(|p| p.room).collect(),
        pools,
        plan: Dispatch::default(),
    };
    let ordered = server_order(bundles);
    let waiting: Vec<&QueuedBundle> = ordered
        .iter()
        .filter(|bundle| !state.place_on_existing(bundle))
        .collect();
    for bundle in waiting {
        let placement = state.place_on_new(bundle, &workers);
        state.record(bundle, placement);
    }
    let mut plan = state.plan;
    let position: FxHashMap<&str, usize> = ordered
        .iter()
        .enumerate()
        .map(|(i, b)| (b.bundle.uuid.as_str(), i))
        .collect();
    plan.bundles
        .sort_by_key(|b| position.get(b.uuid.as_str()).copied());
    plan
}

fn slot_of(worker: &ServerWorker) -> Slot {
    Slot {
        owner: worker.owner.clone(),
        tag: worker.tag.clone(),
        tag_exclusive: worker.tag_exclusive,
        free: worker.total.minus(worker.in_use),
        has_gpus: worker.total.gpus > 0,
        runs: worker.runs,
        runs_left: worker.runs_left,
    }
}

/// The plan as it is built.
struct State {
    owners: Owners,
    /// Quota left per owner, less what the plan placed on shared workers.
    quota: std::collections::BTreeMap<String, i64>,
    /// The checked-in workers that take bundles (terminating ones left out).
    existing: Vec<Slot>,
    /// Their ids.
    existing_ids: Vec<String>,
    /// The new workers planned, by index in `plan.new_workers`.
    new: Vec<Slot>,
    pools: Vec<PoolShape>,
    /// Room left per pool.
    rooms: Vec<usize>,
    plan: Dispatch,
}

impl State {
    fn quota_left(&self, owner: &str) -> i64 {
        self.quota.get(owner).copied().unwrap_or(i64::MAX)
    }

    /// Whether a bundle of `owner` may use `slot` now: its own worker, or a shared one while
    /// the owner has quota left (`_schedule_run_bundles_on_workers`).
    fn may_use(&self, owner: &str, slot: &Slot) -> bool {
        let root = self.owners.root.as_str();
        if slot.owner == root {
            self.quota_left(owner) > 0
        } else {
            slot.owner == owner
        }
    }

    /// The index of the slot of `slots` the server would start `bundle` on, if any.
    fn choose(&self, slots: &[Slot], bundle: &QueuedBundle, request: &Resources) -> Option<usize> {
        slots
            .iter()
            .enumerate()
            .filter(|(_, s)| self.may_use(bundle.owner(), s))
            .filter(|(_, s)| s.misfit(bundle.queue(), request).is_none())
            .min_by_key(|(i, s)| (s.preference(), *i))
            .map(|(i, _)| i)
    }

    /// Starts `bundle` on a checked-in worker if the server would; false when none takes it.
    fn place_on_existing(&mut self, bundle: &QueuedBundle) -> bool {
        let request = Resources::requested(&bundle.bundle);
        let Some(index) = self.choose(&self.existing, bundle, &request) else {
            return false;
        };
        self.take(bundle.owner(), &request, Which::Existing(index));
        let worker_id = self.existing_ids[index].clone();
        self.record(bundle, Placement::Worker { worker_id });
        true
    }

    /// A new worker for `bundle`: one planned that fits, else a new one of the first pool that
    /// fits and has room; else why none.
    fn place_on_new(&mut self, bundle: &QueuedBundle, workers: &[ServerWorker]) -> Placement {
        let request = Resources::requested(&bundle.bundle);
        if let Some(index) = self.choose(&self.new, bundle, &request) {
            self.take(bundle.owner(), &request, Which::New(index));
            return self.on_new(index, bundle);
        }
        if let Some(unmet) = self.owner_blocks(bundle, &request, workers) {
            return Placement::Unmet(unmet);
        }
        let (fitting, misfits) = self.pools_for(bundle, &request);
        if fitting.is_empty() {
            return Placement::Unmet(Unmet::NoFittingPool { misfits });
        }
        let Some(&pool) = fitting.iter().find(|&&p| self.rooms[p] > 0) else {
            let pools = fitting
                .iter()
                .map(|&p| self.pools[p].pool.clone())
                .collect();
            return Placement::Unmet(Unmet::NoRoom { pools });
        };
        self.rooms[pool] -= 1;
        self.new
            .push(Slot::new_of(&self.pools[pool], &self.owners.manager));
        self.plan.new_workers.push(NewWorker {
            pool: self.pools[pool].pool.clone(),
            bundles: Vec::new(),
        });
        let index = self.new.len() - 1;
        self.take(bundle.owner(), &request, Which::New(index));
        self.on_new(index, bundle)
    }

    /// Why the manager's new workers cannot take a bundle of this owner, whatever their shape.
    fn owner_blocks(
        &self,
        bundle: &QueuedBundle,
        request: &Resources,
        workers: &[ServerWorker],
    ) -> Option<Unmet> {
        let quota_left = self.quota_left(bundle.owner());
        held_back(&self.owners, quota_left, bundle, request, workers)
    }

    /// The pools whose new workers fit `bundle` (indices, in order), and the others' misfits.
    fn pools_for(
        &self,
        bundle: &QueuedBundle,
        request: &Resources,
    ) -> (Vec<usize>, Vec<(String, super::PoolMisfit)>) {
        let mut fitting = Vec::new();
        let mut misfits = Vec::new();
        for (index, pool) in self.pools.iter().enumerate() {
            match Slot::new_of(pool, &self.owners.manager).misfit(bundle.queue(), request) {
                None => fitting.push(index),
                Some(misfit) => misfits.push((pool.pool.clone(), misfit)),
            }
        }
        (fitting, misfits)
    }

    fn take(&mut self, owner: &str, request: &Resources, which: Which) {
        let slot = match which {
            Which::Existing(i) => &mut self.existing[i],
            Which::New(i) => &mut self.new[i],
        };
        slot.take(request);
        if slot.owner == self.owners.root {
            let left = self.quota.entry(owner.to_owned()).or_insert(i64::MAX);
            *left = left.saturating_sub(1);
        }
    }

    fn on_new(&mut self, index: usize, bundle: &QueuedBundle) -> Placement {
        let worker = &mut self.plan.new_workers[index];
        worker.bundles.push(bundle.bundle.uuid.clone());
        Placement::NewWorker {
            pool: worker.pool.clone(),
            worker: index,
        }
    }

    fn record(&mut self, bundle: &QueuedBundle, placement: Placement) {
        self.plan.bundles.push(BundleDispatch {
            uuid: bundle.bundle.uuid.clone(),
            owner: bundle.owner().to_owned(),
            placement,
        });
    }
}

/// Why the manager's new workers cannot take `bundle` for its owner (`quota_left` being the
/// owner's quota left now), whatever their shape; `None` when they can, or when the owner is
/// unknown (such a bundle is never held back).
pub(crate) fn held_back(
    owners: &Owners,
    quota_left: i64,
    bundle: &QueuedBundle,
    request: &Resources,
    workers: &[ServerWorker],
) -> Option<Unmet> {
    let owner = bundle.owner();
    let (root, manager) = (&owners.root, &owners.manager);
    if owner.is_empty() {
        return None;
    }
    if manager != root {
        return (owner != manager && !owners.group_shared).then(|| Unmet::NotOurs {
            owner: owner.to_owned(),
            manager: manager.clone(),
        });
    }
    if quota_left > 0 {
        return None;
    }
    let own = live(workers)
        .find(|w| w.owner == owner && w.owner != *root && fits_when_idle(w, bundle, request));
    Some(match own {
        Some(w) => Unmet::OwnWorker {
            owner: owner.to_owned(),
            worker_id: w.worker_id.clone(),
        },
        None => Unmet::QuotaExhausted {
            owner: owner.to_owned(),
            quota_left,
        },
    })
}

/// Which slot list an index is in.
#[derive(Clone, Copy)]
enum Which {
    Existing(usize),
    New(usize),
}

/// The workers that take bundles, in the order of [`State::existing`].
fn live(workers: &[ServerWorker]) -> impl Iterator<Item = &ServerWorker> {
    workers.iter().filter(|w| !w.terminating)
}

/// Whether `worker` could run `bundle` once its runs end (its tag, runs left and total).
fn fits_when_idle(worker: &ServerWorker, bundle: &QueuedBundle, request: &Resources) -> bool {
    let mut idle = slot_of(worker);
    idle.free = worker.total;
    idle.misfit(bundle.queue(), request).is_none()
}
