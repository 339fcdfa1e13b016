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

/// Which launch record is a pool's, and a hash of its settings ([`super::Manager::keep_records`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordKey {
    /// The pool's name.
    pub pool: String,
    /// Its identity on its platform (its backend and the keys that name its jobs): names its
    /// record file.
    pub identity: String,
    /// A hash of everything the pool runs with (its backend's table, rules and worker
    /// settings), if known: a pool suspended for misconfiguration stays suspended over a
    /// restart with the same hash (or none), and is resumed by one with another.
    pub settings: Option<u64>,
}

impl RecordKey {
    /// The key of pool `pool` with record identity `identity`, its settings unknown.
    pub fn new(pool: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            pool: pool.into(),
            identity: identity.into(),
            settings: None,
        }
    }
}
