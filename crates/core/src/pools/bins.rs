//! The workers of one pool as the assignment fills them ([`Bins`]): its starting ones, then
//! new ones while it has room (and, for hedged bundles, hedges left); each with what it can
//! still hold.

use super::PoolPolicy;
use crate::dispatch::Resources;

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

/// What a pool can fill this tick.
#[derive(Debug, Clone, Copy)]
pub(super) struct Room {
    /// Its starting workers (pending, or running and not checked in).
    pub coming: usize,
    /// New workers it may still launch.
    pub new: usize,
    /// Of those, how many it may launch for hedges.
    pub hedges: usize,
}

/// The workers of one pool the assignment fills: its starting ones, then new ones.
pub(super) struct Bins {
    pub(super) bins: Vec<Bin>,
    /// What a new worker has.
    shape: Resources,
    /// Bundles per worker at most (`Some(1)` without the server's side).
    runs: Option<i64>,
    /// New workers the pool may still start.
    room: usize,
    /// Bundles given to the pool as a compat pool (one a worker).
    pub(super) compat: usize,
    /// New workers the pool may still launch for hedges ([`super::hedge`]).
    hedge_room: usize,
    /// New workers launched for hedges.
    pub(super) hedged: usize,
}

/// One worker of a pool as the assignment fills it.
pub(super) struct Bin {
    free: Resources,
    runs_left: Option<i64>,
    taken: usize,
    coming: bool,
}

impl Bins {
    pub(super) fn new(policy: &PoolPolicy, room: Room, packs: bool) -> Self {
        let shape = Resources::of_shape(&policy.shape);
        let runs = if packs {
            policy.runs_per_worker
        } else {
            Some(1)
        };
        let bins = (0..room.coming)
            .map(|_| Bin {
                free: shape,
                runs_left: runs,
                taken: 0,
                coming: true,
            })
            .collect();
        Self {
            bins,
            shape,
            runs,
            room: room.new,
            compat: 0,
            hedge_room: room.hedges,
            hedged: 0,
        }
    }

    /// Whether a hedged bundle holding `request` may go to the pool: onto a worker it has or
    /// launches anyway, or onto a new one while its hedges allow.
    pub(super) fn may_hedge(&self, request: &Resources, new_worker: bool) -> bool {
        match self.peek(request, new_worker) {
            Some((_, index)) => index < self.bins.len() || self.hedge_room > 0,
            None => false,
        }
    }

    /// [`Bins::take`] for a hedged bundle: a new worker for it counts against the pool's
    /// hedges.
    pub(super) fn take_hedge(
        &mut self,
        request: &Resources,
        new_worker: bool,
    ) -> Option<(Coverage, usize)> {
        if !self.may_hedge(request, new_worker) {
            return None;
        }
        let before = self.bins.len();
        let taken = self.take(request, new_worker)?;
        if self.bins.len() > before {
            self.hedge_room -= 1;
            self.hedged += 1;
        }
        Some(taken)
    }

    /// The worker that would take a bundle holding `request`: the first with room for it, or
    /// (`new_worker`) a new one while the pool has room; how it is covered and which worker,
    /// or `None`.
    pub(super) fn peek(&self, request: &Resources, new_worker: bool) -> Option<(Coverage, usize)> {
        match self.bins.iter().position(|bin| bin.has_room(request)) {
            Some(index) if self.bins[index].coming => Some((Coverage::PendingWorker, index)),
            Some(index) => Some((Coverage::NewWorker, index)),
            None if self.room > 0 && new_worker => Some((Coverage::NewWorker, self.bins.len())),
            None => None,
        }
    }

    /// Gives a bundle holding `request` to the worker [`Bins::peek`] names.
    pub(super) fn take(
        &mut self,
        request: &Resources,
        new_worker: bool,
    ) -> Option<(Coverage, usize)> {
        let (coverage, index) = self.peek(request, new_worker)?;
        if index == self.bins.len() {
            self.room -= 1;
            self.bins.push(Bin {
                free: self.shape,
                runs_left: self.runs,
                taken: 0,
                coming: false,
            });
        }
        let bin = &mut self.bins[index];
        bin.free = bin.free.minus(*request);
        bin.runs_left = bin.runs_left.map(|n| n - 1);
        bin.taken += 1;
        Some((coverage, index))
    }

    /// New workers this tick's bundles fill.
    pub(super) fn launched(&self) -> usize {
        self.bins.iter().filter(|bin| !bin.coming).count()
    }

    /// Workers given at least one bundle.
    pub(super) fn used(&self) -> usize {
        self.bins.iter().filter(|bin| bin.taken > 0).count()
    }
}

impl Bin {
    fn has_room(&self, request: &Resources) -> bool {
        if self.taken == 0 {
            return true;
        }
        self.runs_left.is_none_or(|n| n > 0) && self.free.shortfall(request).is_none()
    }
}
