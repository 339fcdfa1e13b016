//! A pool the manager serves ([`Pool`]): its rules, its backend and the settings of its
//! workers. The manager keeps the backend (the tick engine knows its name only).

use crate::backend::WorkerBackend;
use crate::command::WorkerOptions;
use crate::engine::PoolSpec;
use crate::pools::{PoolPolicy, SingleBackendFlags};
use std::sync::Arc;

/// A pool the manager serves: its rules, its backend and the settings of its workers.
#[derive(Debug, Clone)]
pub struct Pool {
    /// The rules.
    pub policy: PoolPolicy,
    /// Where its workers run.
    pub backend: Arc<dyn WorkerBackend>,
    /// The `cl-worker` settings of its workers (tag and tag-exclusive included).
    pub worker: WorkerOptions,
}

impl Pool {
    /// The one pool of upstream's single-backend mode: named after `backend`, its policy from
    /// `flags` ([`SingleBackendFlags::policy`]); the manager narrows its staged search by the
    /// tag of `worker` (`--worker-tag` with `--worker-tag-exclusive`), as upstream.
    pub fn single_backend(
        flags: &SingleBackendFlags,
        backend: Arc<dyn WorkerBackend>,
        worker: WorkerOptions,
    ) -> Self {
        Self {
            policy: flags.policy(backend.name(), backend.worker_shape()),
            backend,
            worker,
        }
    }
}

/// The engine's view of a pool: everything but its backend, which the manager keeps.
impl From<&Pool> for PoolSpec {
    fn from(pool: &Pool) -> Self {
        Self {
            policy: pool.policy.clone(),
            worker: pool.worker.clone(),
            backend: pool.backend.name().to_owned(),
        }
    }
}
