//! A model of how the CodaLab server dispatches staged run bundles to checked-in workers, and
//! what is left for new workers of the manager's pools. Pure; the policy plans on it
//! (`pools/assign.rs`). `crates/cli/tests/it/dispatch_differential.rs` checks it against the real
//! bundle manager: one staged set, real `cl-worker`s of several shapes and owners, the same
//! bundles of each kind on each worker.
//!
//! Each rule mirrors the real server's code (CodaLab 1.7.5, `codalab/server/bundle_manager.py`
//! unless named otherwise):
//! - **Order** ([`server_order`]): `_schedule_run_bundles_on_workers` sorts each user's staged
//!   bundles by `request_priority` (higher first; none after every priority ≥ 0 and before the
//!   negative ones), those with a `request_queue` first among equals, the sort stable; each
//!   user keeps the positions their bundles had in the staged list (all staged run bundles by
//!   creation), so users stay interleaved. A user's staged bundles that the caller does not
//!   give (another manager's `--search`) hold positions too: a high-priority bundle can take
//!   the place of an older one of its owner's that the caller did not read.
//! - **Which workers a bundle may use**: the bundle's owner's own workers (`WorkerInfoAccessor
//!   .get_user_workers` in `server/worker_info_accessor.py`), and the workers of the root user
//!   (`codalab`, shared) only while the owner has `parallel_run_quota` left
//!   (`BundleModel.get_user_parallel_run_quota_left` in `model/bundle_model.py`: the quota less
//!   the owner's runs on workers that are not the owner's). A bundle started on a shared worker
//!   takes one from its owner's quota. The root user's own bundles use the shared workers under
//!   the root user's quota. Workers shared through a group are not modelled.
//! - **Private workers are not preferred**: the docstring says "private first", but the code
//!   concatenates the owner's and the shared workers and sorts them all by the key below.
//! - **Fit** (`dispatch/fit.rs`): `RunResources.dominates` (`worker/bundle_state.py`): a
//!   bundle with a `request_queue` (an optional `tag=` prefix dropped, `has_tag_match`) runs
//!   only on a worker with that tag; one without runs on no tag-exclusive tagged worker; a
//!   worker with 0 runs left takes nothing; free cpus, gpus and memory must each be at least
//!   the request. A terminating worker takes nothing (`BundleModel.transition_bundle_starting`).
//! - **Requests**: `_compute_request_cpus` (0 or none → 1), `_compute_request_gpus` (none → 0),
//!   `_compute_request_memory` (none → 2 GiB).
//! - **Free resources**: `_deduct_worker_resources` subtracts the runs' requests from what the
//!   worker reports; each bundle started subtracts its request and one run left, so a worker
//!   takes several bundles while its resources allow (packing).
//! - **Which worker**: `_filter_and_sort_workers` sorts the fitting workers by: tag-exclusive
//!   first, fewer free GPUs (or, with none free, CPU-only first), more of the bundle's
//!   dependencies cached, fewer free CPUs, fewer runs, then at random. Dependencies are not
//!   modelled (all equal) and the random tie is broken by input order here, so which of two
//!   equal workers takes a bundle may differ from the server; how many bundles are placed on
//!   workers of a kind does not.
//!
//! Owners are compared as strings: the caller names them alike on both sides (the server's
//! worker list gives user ids, the staged search user names).
//!
//! Not modelled: disk (`request_disk`, `free_disk_bytes`), the run permission check, workers
//! going offline mid-dispatch, and the bundles the server fails for asking more than the
//! limits (`_get_staged_bundles_to_run`). `GET /rest/workers/info` reports no memory in use: the
//! caller gives it ([`ServerWorker::from_checkin`]).
//!
//! **New workers.** Bundles no checked-in worker takes are then given, in the same order, to
//! new workers of the pools ([`PoolShape`], in the caller's order of preference): first to a
//! new worker already planned that fits (as the server would pack them once it checks in), else
//! to a new one of the first pool that fits and has room. New workers belong to the manager's
//! user: shared when that is the root user (quota applies), private otherwise. A bundle no new
//! worker can take gets an [`Unmet`] reason: its owner's quota is used up (or an own worker will
//! take it), the manager's workers are private to another user, no pool fits, or the pools that
//! fit have no room.

mod fit;
mod order;
mod plan;

pub use fit::PoolMisfit;
pub use order::server_order;
pub use plan::dispatch;
pub(crate) use plan::held_back;

use crate::bundle::{Misfit, StagedBundle, WorkerShape};
use crate::checkin::CheckedInWorker;
use std::collections::BTreeMap;
use std::fmt;

/// The memory the server gives a bundle that asks for none (`_compute_request_memory`: `2g`).
pub const DEFAULT_REQUEST_MEMORY: i64 = 2 << 30;

/// CPUs, GPUs and memory, signed as the server's arithmetic is (what is free can go below 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resources {
    /// CPUs.
    pub cpus: i64,
    /// GPUs.
    pub gpus: i64,
    /// Memory in bytes.
    pub memory_bytes: i64,
}

impl Resources {
    /// What a worker of `shape` has.
    pub fn of_shape(shape: &WorkerShape) -> Self {
        Self {
            cpus: shape.cpus.into(),
            gpus: shape.gpus.into(),
            memory_bytes: clamp(shape.memory_bytes),
        }
    }

    /// What the server reserves for `bundle`, with its defaults for requests not given.
    pub fn requested(bundle: &StagedBundle) -> Self {
        Self {
            cpus: i64::from(bundle.request_cpus.max(1)),
            gpus: bundle.request_gpus.into(),
            memory_bytes: match bundle.request_memory {
                0 => DEFAULT_REQUEST_MEMORY,
                bytes => clamp(bytes),
            },
        }
    }

    /// These resources less `other`.
    pub fn minus(self, other: Self) -> Self {
        Self {
            cpus: self.cpus.saturating_sub(other.cpus),
            gpus: self.gpus.saturating_sub(other.gpus),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
        }
    }

    /// The first of cpus, gpus and memory in which these resources fall short of `request`.
    pub fn shortfall(&self, request: &Self) -> Option<Misfit> {
        let count = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
        let bytes = |n: i64| u64::try_from(n.max(0)).unwrap_or(0);
        if self.cpus < request.cpus {
            Some(Misfit::Cpus {
                requested: count(request.cpus),
                available: count(self.cpus),
            })
        } else if self.gpus < request.gpus {
            Some(Misfit::Gpus {
                requested: count(request.gpus),
                available: count(self.gpus),
            })
        } else if self.memory_bytes < request.memory_bytes {
            Some(Misfit::Memory {
                requested: bytes(request.memory_bytes),
                available: bytes(self.memory_bytes),
            })
        } else {
            None
        }
    }
}

fn clamp(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// A staged bundle as the server's dispatch sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedBundle {
    /// The bundle; its `owner_id` names users as [`ServerWorker::owner`] does.
    pub bundle: StagedBundle,
}

impl QueuedBundle {
    /// The owner's id ("" when unknown: such a bundle is never held back for its owner).
    pub fn owner(&self) -> &str {
        self.bundle.owner_id.as_deref().unwrap_or("")
    }

    /// Its `request_priority`, when it has one.
    pub fn priority(&self) -> Option<i64> {
        self.bundle.priority
    }

    /// The queue it asks for, the server's optional `tag=` prefix dropped ("" for none).
    pub fn queue(&self) -> &str {
        let queue = self.bundle.request_queue.as_str();
        match queue.strip_prefix("tag=") {
            Some(rest) if !rest.is_empty() => rest,
            _ => queue,
        }
    }
}

/// A checked-in worker as the server's dispatch sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerWorker {
    /// Its `--id`.
    pub worker_id: String,
    /// The user who runs it (the root user: a shared worker).
    pub owner: String,
    /// Its tag ("" for none).
    pub tag: String,
    /// It runs only bundles that ask for its tag.
    pub tag_exclusive: bool,
    /// What it reports it has.
    pub total: Resources,
    /// What its runs hold.
    pub in_use: Resources,
    /// The runs it has.
    pub runs: usize,
    /// Runs it will still start (`None`: no limit known).
    pub runs_left: Option<i64>,
    /// It is shutting down.
    pub terminating: bool,
}

impl ServerWorker {
    /// The worker of a `GET /rest/workers/info` entry, its runs holding `memory_in_use` bytes
    /// (the reply does not say), or the name of the first field the model needs and the server
    /// did not report.
    pub fn from_checkin(
        worker: &CheckedInWorker,
        memory_in_use: u64,
    ) -> Result<Self, &'static str> {
        let total = Resources {
            cpus: worker.cpus.ok_or("cpus")?.into(),
            gpus: worker.gpus.ok_or("gpus")?.into(),
            memory_bytes: clamp(worker.memory_bytes.ok_or("memory_bytes")?),
        };
        let in_use = Resources {
            cpus: worker.cpus_in_use.ok_or("cpus_in_use")?.into(),
            gpus: worker.gpus_in_use.ok_or("gpus_in_use")?.into(),
            memory_bytes: clamp(memory_in_use),
        };
        Ok(Self {
            worker_id: worker.worker_id.clone(),
            owner: worker.user_id.clone().ok_or("user_id")?,
            tag: worker.tag.clone().unwrap_or_default(),
            tag_exclusive: worker.tag_exclusive.unwrap_or(false),
            total,
            in_use,
            runs: worker.run_uuids.len(),
            runs_left: worker.exit_after_num_runs,
            terminating: worker.is_terminating,
        })
    }
}

/// The workers a pool can add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolShape {
    /// The pool's name.
    pub pool: String,
    /// What each of its workers has.
    pub shape: WorkerShape,
    /// Its workers' tag ("" for none).
    pub tag: String,
    /// Its workers run only bundles that ask for their tag.
    pub tag_exclusive: bool,
    /// Runs each worker starts before it exits (`--exit-after-num-runs`; `None`: no limit).
    pub runs_per_worker: Option<i64>,
    /// New workers it may still start (its max, budget and pacing allowing).
    pub room: usize,
}

/// Who owns what: the root user, the manager's user, and the owners' quota left.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Owners {
    /// The root user (`codalab`): its workers are shared.
    pub root: String,
    /// The user the manager runs as: its new workers are this user's.
    pub manager: String,
    /// Each owner's `parallel_run_quota` left for shared workers; an owner not listed has no
    /// limit.
    pub quota_left: BTreeMap<String, i64>,
    /// The manager's workers are shared with a group (`--group`): other users' bundles may
    /// run on them, so none is held back as [`Unmet::NotOurs`].
    pub group_shared: bool,
}

impl Owners {
    /// `owner`'s quota left for shared workers (`i64::MAX`: no limit known).
    pub fn quota_left_of(&self, owner: &str) -> i64 {
        self.quota_left.get(owner).copied().unwrap_or(i64::MAX)
    }
}

/// Everything the model reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DispatchInput {
    /// The staged bundles, in the server's staged order.
    pub bundles: Vec<QueuedBundle>,
    /// The checked-in workers.
    pub workers: Vec<ServerWorker>,
    /// The pools new workers can come from, preferred first.
    pub pools: Vec<PoolShape>,
    /// Owners and quotas.
    pub owners: Owners,
}

/// Where one bundle goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The server starts it on this checked-in worker now.
    Worker {
        /// The worker's id.
        worker_id: String,
    },
    /// A new worker of `pool` will take it: new worker number `worker` of the plan.
    NewWorker {
        /// The pool.
        pool: String,
        /// Its index in [`Dispatch::new_workers`].
        worker: usize,
    },
    /// No new worker of this manager would get it.
    Unmet(Unmet),
}

/// Why no new worker of this manager would get a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmet {
    /// The owner has no `parallel_run_quota` left for shared workers.
    QuotaExhausted {
        /// The owner.
        owner: String,
        /// The quota left (0 or less).
        quota_left: i64,
    },
    /// The owner's quota is used up and a worker of the owner's own fits it: it takes the
    /// bundle when it has room.
    OwnWorker {
        /// The owner.
        owner: String,
        /// The worker.
        worker_id: String,
    },
    /// The manager's workers are private to another user.
    NotOurs {
        /// The bundle's owner.
        owner: String,
        /// The manager's user.
        manager: String,
    },
    /// No pool's workers can run it.
    NoFittingPool {
        /// Each pool and why not.
        misfits: Vec<(String, PoolMisfit)>,
    },
    /// The pools that fit can start no more workers.
    NoRoom {
        /// Those pools.
        pools: Vec<String>,
    },
}

/// Why the server gives a bundle no new worker of this manager, for its owner: the kinds of
/// [`Unmet`] that hold a bundle back whatever the pools.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    /// [`Unmet::QuotaExhausted`].
    QuotaExhausted,
    /// [`Unmet::OwnWorker`].
    OwnWorker,
    /// [`Unmet::NotOurs`].
    NotOurs,
}

impl Hold {
    /// The machine-readable name.
    pub fn code(self) -> &'static str {
        match self {
            Hold::QuotaExhausted => "quota_exhausted",
            Hold::OwnWorker => "own_worker",
            Hold::NotOurs => "not_ours",
        }
    }
}

impl Unmet {
    /// The hold and the owner a bundle is held back for (quota, own worker, not ours), if
    /// that is why.
    pub fn hold(&self) -> Option<(Hold, &str)> {
        match self {
            Unmet::QuotaExhausted { owner, .. } => Some((Hold::QuotaExhausted, owner)),
            Unmet::OwnWorker { owner, .. } => Some((Hold::OwnWorker, owner)),
            Unmet::NotOurs { owner, .. } => Some((Hold::NotOurs, owner)),
            Unmet::NoFittingPool { .. } | Unmet::NoRoom { .. } => None,
        }
    }

    /// The machine-readable name.
    pub fn code(&self) -> &'static str {
        match self {
            Unmet::NoFittingPool { .. } => "no_fitting_pool",
            Unmet::NoRoom { .. } => "no_room",
            held => held.hold().map_or("", |(hold, _)| hold.code()),
        }
    }
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmet::QuotaExhausted { owner, quota_left } => write!(
                f,
                "{owner} has no parallel_run_quota left for shared workers ({quota_left} left)"
            ),
            Unmet::OwnWorker { owner, worker_id } => write!(
                f,
                "{owner} has no parallel_run_quota left; their own worker {worker_id} will take it"
            ),
            Unmet::NotOurs { owner, manager } => write!(
                f,
                "owned by {owner}, and the manager's workers are private to {manager}"
            ),
            Unmet::NoFittingPool { misfits } => {
                f.write_str("no pool's workers can run it")?;
                for (i, (pool, misfit)) in misfits.iter().enumerate() {
                    let sep = if i == 0 { ": " } else { "; " };
                    write!(f, "{sep}{pool}: {misfit}")?;
                }
                Ok(())
            }
            Unmet::NoRoom { pools } => write!(
                f,
                "the pools that fit it ({}) can start no more workers",
                pools.join(", ")
            ),
        }
    }
}

/// One bundle's placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleDispatch {
    /// The bundle uuid.
    pub uuid: String,
    /// Its owner ("" when unknown).
    pub owner: String,
    /// Where it goes.
    pub placement: Placement,
}

/// A new worker the plan needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWorker {
    /// Its pool.
    pub pool: String,
    /// The bundles it takes, in dispatch order.
    pub bundles: Vec<String>,
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dispatch {
    /// Every bundle, in the order the server dispatches them.
    pub bundles: Vec<BundleDispatch>,
    /// The new workers that take the bundles no checked-in worker takes.
    pub new_workers: Vec<NewWorker>,
}

impl Dispatch {
    /// New workers of `pool` the plan needs.
    pub fn new_workers_of(&self, pool: &str) -> usize {
        self.new_workers.iter().filter(|w| w.pool == pool).count()
    }

    /// The placement of bundle `uuid`.
    pub fn placement(&self, uuid: &str) -> Option<&Placement> {
        self.bundles
            .iter()
            .find(|b| b.uuid == uuid)
            .map(|b| &b.placement)
    }
}

#[cfg(test)]
mod tests;
