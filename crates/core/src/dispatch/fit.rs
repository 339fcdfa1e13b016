//! Whether a worker can take a bundle (`RunResources.dominates`) and which fitting worker the
//! server prefers (`_filter_and_sort_workers`).

use super::{PoolShape, Resources};
use crate::bundle::Misfit;
use std::fmt;

/// A worker the plan can give bundles to: a checked-in one, or a new one of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Slot {
    /// Who owns it.
    pub owner: String,
    /// Its tag ("" for none).
    pub tag: String,
    /// It runs only bundles that ask for its tag.
    pub tag_exclusive: bool,
    /// What is free on it, as the server counts it.
    pub free: Resources,
    /// It reported GPUs (`has_gpus`, from what it reports, not what is free).
    pub has_gpus: bool,
    /// Runs it had when the dispatch began (the server does not count those it starts).
    pub runs: usize,
    /// Runs it will still start (`None`: no limit known).
    pub runs_left: Option<i64>,
}

impl Slot {
    /// A new worker of `pool`, owned by `owner`.
    pub fn new_of(pool: &PoolShape, owner: &str) -> Self {
        let free = Resources::of_shape(&pool.shape);
        Self {
            owner: owner.to_owned(),
            tag: pool.tag.clone(),
            tag_exclusive: pool.tag_exclusive,
            free,
            has_gpus: free.gpus > 0,
            runs: 0,
            runs_left: pool.runs_per_worker,
        }
    }

    /// Why this worker cannot take a bundle asking for `queue` and `request`, or `None`.
    pub fn misfit(&self, queue: &str, request: &Resources) -> Option<PoolMisfit> {
        if !queue.is_empty() {
            if self.tag != queue {
                return Some(PoolMisfit::Queue {
                    requested: queue.to_owned(),
                    tag: self.tag.clone(),
                });
            }
        } else if self.tag_exclusive && !self.tag.is_empty() {
            return Some(PoolMisfit::Exclusive {
                tag: self.tag.clone(),
            });
        }
        if self.runs_left == Some(0) {
            return Some(PoolMisfit::NoRunsLeft);
        }
        self.free.shortfall(request).map(PoolMisfit::Resources)
    }

    /// The server's preference among fitting workers, smallest first: tag-exclusive, fewer
    /// free GPUs (none free: CPU-only first), fewer free CPUs, fewer runs. (Dependencies
    /// cached, between GPUs and CPUs in the server's key, are taken as equal.)
    pub fn preference(&self) -> (bool, i64, i64, usize) {
        let gpus = match self.free.gpus {
            0 => i64::from(self.has_gpus),
            free => free,
        };
        (!self.tag_exclusive, gpus, self.free.cpus, self.runs)
    }

    /// Takes a bundle holding `request`.
    pub fn take(&mut self, request: &Resources) {
        self.free = self.free.minus(*request);
        self.runs_left = self.runs_left.map(|n| n - 1);
    }
}

/// Why a worker (of a pool) cannot run a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolMisfit {
    /// The bundle asks for a queue the workers are not tagged with.
    Queue {
        /// The queue asked for.
        requested: String,
        /// The workers' tag ("" for none).
        tag: String,
    },
    /// The bundle asks for no queue and the workers run only bundles asking for their tag.
    Exclusive {
        /// The workers' tag.
        tag: String,
    },
    /// The workers start no runs (`exit_after_num_runs` 0).
    NoRunsLeft,
    /// The bundle asks for more than a worker has.
    Resources(Misfit),
}

impl fmt::Display for PoolMisfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolMisfit::Queue { requested, tag } if tag.is_empty() => {
                write!(f, "request_queue={requested}, workers have no tag")
            }
            PoolMisfit::Queue { requested, tag } => {
                write!(
                    f,
                    "request_queue={requested} does not match worker tag {tag}"
                )
            }
            PoolMisfit::Exclusive { tag } => {
                write!(
                    f,
                    "no request_queue, and the workers are exclusive to tag {tag}"
                )
            }
            PoolMisfit::NoRunsLeft => {
                f.write_str("the workers start no runs (exit_after_num_runs 0)")
            }
            PoolMisfit::Resources(misfit) => misfit.fmt(f),
        }
    }
}
