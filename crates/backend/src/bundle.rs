//! Staged run bundles as the manager sees them, and the worker shape they must fit.

use crate::size::HumanBytes;
use std::fmt;

/// A run bundle in state `staged`, waiting for a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedBundle {
    /// The bundle uuid (`0x…`).
    pub uuid: String,
    /// The owner's user name, when the server included it.
    pub owner: Option<String>,
    /// The owner's user id (`relationships.owner`), when the server gave it: what the
    /// server's worker list names owners by (`codalab_wm_core::dispatch`).
    pub owner_id: Option<String>,
    /// Its `request_priority`, when it has one (the server dispatches higher first).
    pub priority: Option<i64>,
    /// CPUs requested (0 when not given).
    pub request_cpus: u32,
    /// GPUs requested (0 when not given).
    pub request_gpus: u32,
    /// Memory requested in bytes (0 when not given).
    pub request_memory: u64,
    /// The queue (worker tag) requested, empty when none.
    pub request_queue: String,
    /// The bundle's tags.
    pub tags: Vec<String>,
    /// When the bundle was created (seconds since the epoch), when known.
    pub created: Option<i64>,
}

impl StagedBundle {
    /// A bundle with the given uuid asking for nothing in particular (handy in tests).
    pub fn new(uuid: impl Into<String>) -> Self {
        Self {
            uuid: uuid.into(),
            owner: None,
            owner_id: None,
            priority: None,
            request_cpus: 0,
            request_gpus: 0,
            request_memory: 0,
            request_queue: String::new(),
            tags: Vec::new(),
            created: None,
        }
    }
}

/// The resources one worker job provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WorkerShape {
    /// CPUs per worker.
    pub cpus: u32,
    /// GPUs per worker.
    pub gpus: u32,
    /// Memory per worker, in bytes.
    pub memory_bytes: u64,
}

impl WorkerShape {
    /// A shape from the `--cpus`, `--gpus` and `--memory-mb` flags.
    pub fn from_flags(cpus: u32, gpus: u32, memory_mb: u64) -> Self {
        Self {
            cpus,
            gpus,
            memory_bytes: memory_mb.saturating_mul(1 << 20),
        }
    }

    /// Why `bundle` does not fit this shape, or `None` when it does. Checks cpus, then gpus,
    /// then memory, in upstream's order, and reports the first one that is too large.
    pub fn misfit(&self, bundle: &StagedBundle) -> Option<Misfit> {
        if u64::from(bundle.request_cpus) > u64::from(self.cpus) {
            Some(Misfit::Cpus {
                requested: bundle.request_cpus,
                available: self.cpus,
            })
        } else if bundle.request_gpus > self.gpus {
            Some(Misfit::Gpus {
                requested: bundle.request_gpus,
                available: self.gpus,
            })
        } else if bundle.request_memory > self.memory_bytes {
            Some(Misfit::Memory {
                requested: bundle.request_memory,
                available: self.memory_bytes,
            })
        } else {
            None
        }
    }
}

impl fmt::Display for WorkerShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} CPUs, {} GPUs, {}",
            self.cpus,
            self.gpus,
            HumanBytes(self.memory_bytes)
        )
    }
}

/// Which request of a bundle exceeds the worker shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misfit {
    /// More CPUs than a worker has.
    Cpus {
        /// Requested.
        requested: u32,
        /// Available on a worker.
        available: u32,
    },
    /// More GPUs than a worker has.
    Gpus {
        /// Requested.
        requested: u32,
        /// Available on a worker.
        available: u32,
    },
    /// More memory than a worker has.
    Memory {
        /// Requested bytes.
        requested: u64,
        /// Available bytes on a worker.
        available: u64,
    },
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfit::Cpus {
                requested,
                available,
            } => {
                write!(f, "request_cpus={requested} > worker cpus={available}")
            }
            Misfit::Gpus {
                requested,
                available,
            } => {
                write!(f, "request_gpus={requested} > worker gpus={available}")
            }
            Misfit::Memory {
                requested,
                available,
            } => write!(
                f,
                "request_memory={} > worker memory={}",
                HumanBytes(*requested),
                HumanBytes(*available)
            ),
        }
    }
}

/// Splits bundles into those that fit `shape` and those that do not, with the reason.
pub fn prefilter(
    bundles: Vec<StagedBundle>,
    shape: &WorkerShape,
) -> (Vec<StagedBundle>, Vec<(StagedBundle, Misfit)>) {
    let mut fitting = Vec::with_capacity(bundles.len());
    let mut rejected = Vec::new();
    for bundle in bundles {
        match shape.misfit(&bundle) {
            None => fitting.push(bundle),
            Some(misfit) => rejected.push((bundle, misfit)),
        }
    }
    (fitting, rejected)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(cpus: u32, gpus: u32, memory: u64) -> StagedBundle {
        StagedBundle {
            request_cpus: cpus,
            request_gpus: gpus,
            request_memory: memory,
            ..StagedBundle::new("0x1")
        }
    }

    #[test]
    fn misfit_checks_in_upstream_order() {
        let shape = WorkerShape::from_flags(4, 1, 8192);
        let cases = [
            (bundle(1, 0, 0), None),
            (bundle(4, 1, 8192 << 20), None),
            (bundle(5, 0, 0), Some("request_cpus=5 > worker cpus=4")),
            (
                bundle(5, 2, u64::MAX),
                Some("request_cpus=5 > worker cpus=4"),
            ),
            (
                bundle(4, 2, u64::MAX),
                Some("request_gpus=2 > worker gpus=1"),
            ),
            (
                bundle(1, 0, (8192 << 20) + 1),
                Some("request_memory=8.0 GiB > worker memory=8.0 GiB"),
            ),
        ];
        for (bundle, expected) in cases {
            assert_eq!(
                shape.misfit(&bundle).map(|m| m.to_string()).as_deref(),
                expected,
                "{bundle:?}"
            );
        }
    }

    #[test]
    fn prefilter_splits() {
        let shape = WorkerShape::from_flags(2, 0, 1024);
        let (fit, rejected) = prefilter(
            vec![bundle(1, 0, 0), bundle(8, 0, 0), bundle(1, 1, 0)],
            &shape,
        );
        assert_eq!(fit.len(), 1);
        assert_eq!(rejected.len(), 2);
        assert!(matches!(rejected[0].1, Misfit::Cpus { requested: 8, .. }));
        assert!(matches!(rejected[1].1, Misfit::Gpus { requested: 1, .. }));
    }
}
