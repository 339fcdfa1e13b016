//! # codalab-wm-core
//!
//! The core of codalab-wm, a worker manager for [CodaLab Worksheets]: it watches the run
//! bundles a CodaLab server holds in state *staged* and starts `cl-worker` jobs on a compute
//! backend, keeping the number of workers between a minimum and a maximum.
//!
//! The crate holds everything that is not platform-specific:
//! - [`policy`]: the scaling policy, a pure function with reasons ([`policy::plan`]);
//! - [`pools`]: several pools (shapes, backends, tags), burst targets, stuck-pending
//!   replacement and failure backoff, also pure ([`pools::plan_pools`]); upstream's
//!   single-backend mode is one pool ([`pools::SingleBackendFlags`]);
//! - [`codalab`]: the CodaLab REST client (login, token refresh, identity check, staged search);
//! - [`backend`]: the [`WorkerBackend`] trait every compute platform implements;
//! - [`command`]: the `cl-worker` command line, as upstream builds it;
//! - [`describe`]: how a backend describes itself (name, table, flags, checks, build);
//! - [`settings`] and [`layout`]: the layered settings and the one assembly from them to
//!   pools with their backend tables, every rule about a combination of settings checked once;
//! - [`manager`]: the loop that observes, plans, acts and reports, with one error policy for
//!   retry and backoff; what it remembers per pool, its log lines and its status snapshot
//!   ([`manager::status`]);
//! - [`local`] (feature `local`): a backend that runs workers as local processes.
//!
//! ## Embedding the manager with your own backend
//!
//! ```no_run
//! use codalab_wm_core::{
//!     async_trait, LaunchRequest, Manager, ManagerConfig, Pool, Result, SingleBackendFlags,
//!     WorkerBackend, WorkerJob, WorkerOptions, WorkerShape, codalab::CodaLabClient,
//!     secret::{Credentials, Secret},
//! };
//! use std::sync::Arc;
//!
//! #[derive(Debug)]
//! struct MyCluster;
//!
//! #[async_trait]
//! impl WorkerBackend for MyCluster {
//!     fn name(&self) -> &str { "my-cluster" }
//!     fn worker_shape(&self) -> WorkerShape { WorkerShape::from_flags(4, 0, 16 * 1024) }
//!     async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> { Ok(vec![]) }
//!     async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
//!         let argv = request.worker.build_command(request.unique, "/scratch/workdir");
//!         // ... submit `argv` to your cluster ...
//!         # let _ = argv;
//!         Ok(WorkerJob::new(request.unique, codalab_wm_core::JobState::Pending))
//!     }
//! }
//!
//! # async fn run() -> Result<()> {
//! let credentials = Credentials { username: "alice".into(), password: Secret::new("pw") };
//! let client = CodaLabClient::new("http://127.0.0.1:2900", credentials)?;
//! // Upstream's single-backend mode with its default flags (min 1, max 10 workers, compat).
//! let pool = Pool::single_backend(
//!     &SingleBackendFlags::default(),
//!     Arc::new(MyCluster),
//!     WorkerOptions::default(),
//! );
//! let mut manager = Manager::new(ManagerConfig::default(), client, pool);
//! manager.tick().await?;
//! # Ok(())
//! # }
//! ```
//!
//! [CodaLab Worksheets]: https://worksheets.codalab.org
#![warn(missing_docs)]

pub mod backend;
pub mod budget;
pub mod bundle;
pub mod checkin;
pub mod codalab;
pub mod command;
pub mod describe;
pub mod error;
pub mod events;
pub mod layout;
#[cfg(feature = "local")]
pub mod local;
pub mod manager;
pub mod notify;
pub mod policy;
pub mod pools;
pub mod retry;
pub mod secret;
pub mod settings;
pub mod simulate;
pub mod size;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use async_trait::async_trait;
pub use backend::{CleanupItem, JobState, LaunchRequest, WorkerBackend, WorkerJob};
pub use bundle::{StagedBundle, WorkerShape};
pub use command::WorkerOptions;
pub use error::{Error, Result};
pub use manager::{Manager, ManagerConfig, Pool};
pub use pools::{LaunchMode, PoolPolicy, SingleBackendFlags};

/// The CodaLab server workers and the manager talk to unless told otherwise (upstream's default).
pub const DEFAULT_SERVER: &str = "https://worksheets.codalab.org";
