//! The worker backend contract of [codalab-wm]: what a compute platform implements so that the
//! manager (`codalab-wm-core`) can run CodaLab workers on it, and nothing of the manager
//! itself. A backend crate depends on this crate only, so that a change to the policy, the
//! CodaLab client or the manager loop rebuilds no backend.
//!
//! - [`backend`]: the [`WorkerBackend`] trait, the jobs it reports, a launch request and a
//!   deployment's [`origin`](backend::origin);
//! - [`describe`]: how a backend describes itself (its flags, config table, defaults and help,
//!   written once on its config type) and builds itself from its table;
//! - [`command`]: the `cl-worker` options and command line every backend starts;
//! - [`bundle`]: a worker's shape and what a staged bundle requests;
//! - [`secret`]: credentials that never reach a log, a job spec or a bundle;
//! - [`error`]: the error every backend call returns;
//! - `conformance` (feature `conformance`): the suite a backend's service test runs.
//!
//! `codalab-wm-core` re-exports every module here under the same path
//! (`codalab_wm_core::backend`, `codalab_wm_core::describe` …).
//!
//! [codalab-wm]: https://github.com/codalab/codalab-wm
#![warn(missing_docs)]

pub mod backend;
pub mod bundle;
pub mod civil;
pub mod command;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod describe;
pub mod error;
pub mod secret;
pub mod size;

/// The `tracing` target of events that carry a block of text for a person, in the fields
/// `title` and `text` (a dry run's batch script): a text log shows them as a block on stdout
/// rather than as one escaped line (`codalab_wm_app::logging::BlockPrinter`); a JSON log has
/// them as any other event.
pub const BLOCK_TARGET: &str = "codalab_wm::block";

/// The CodaLab server workers and the manager talk to unless told otherwise (upstream's default).
pub const DEFAULT_SERVER: &str = "https://worksheets.codalab.org";

pub use async_trait::async_trait;
pub use backend::{CleanupItem, JobState, LaunchRequest, PendingKind, WorkerBackend, WorkerJob};
pub use bundle::{StagedBundle, WorkerShape};
pub use command::WorkerOptions;
pub use error::{Error, Result};
