//! # codalab-wm-core
//!
//! The library to embed a worker manager for [CodaLab Worksheets]: the scaling policy, the
//! CodaLab client, the worker backend trait and the manager loop with its status snapshot and
//! events. It watches the run bundles a CodaLab server holds in state *staged* and starts
//! `cl-worker` jobs on a compute backend, keeping the number of workers between a minimum and
//! a maximum.
//!
//! What is **not** here: no compute platform but `local` (each is a crate of its own,
//! `codalab-wm-slurm`, `-aws`, …); nothing that renders for people — no HTML page, SVG chart,
//! terminal view, Prometheus registry or `config check`/`init` tooling (those are
//! `codalab-wm-app`'s, the application `cl-worker-manager` shows); no HTTP server and no
//! command line (`codalab-wm`, the binary). `cargo xtask architecture` holds that line: core's
//! normal dependencies carry no prometheus-client, axum or clap_complete.
//!
//! What is here:
//! - [`policy`]: the scaling policy, a pure function with reasons ([`policy::plan`]);
//! - [`pools`]: several pools (shapes, backends, tags, prices), burst targets, stuck-pending
//!   replacement, failure backoff, spill, hedge and fallback, also pure
//!   ([`pools::plan_pools`]); upstream's single-backend mode is one pool
//!   ([`pools::SingleBackendFlags`]);
//! - [`checkin`] and [`budget`]: matching jobs to the workers that checked in, the rolling-day
//!   budgets (pure);
//! - [`dispatch`]: a model of how the CodaLab server dispatches staged bundles to the workers
//!   (owners, quotas, resources, packing) and what is left for new workers: the pools'
//!   assignment plans on it (pure);
//! - [`estimate`]: when each staged bundle is expected to start, and why (pure);
//! - [`codalab`]: the CodaLab REST client (login, token refresh, identity check, staged search);
//! - [`backend`]: the [`WorkerBackend`] trait every compute platform implements;
//! - [`command`]: the `cl-worker` command line, as upstream builds it;
//! - [`describe`]: how a backend describes itself (name, table, flags, checks, build);
//! - [`settings`] and [`layout`]: the layered settings and the one assembly from them to
//!   pools with their backend tables, every rule about a combination of settings checked once;
//! - `engine`: the tick without I/O: what a tick remembers per pool and between ticks, and
//!   its steps (observe → plan → act), time passed in;
//! - [`manager`]: the loop that drives the engine against the server and the backends, with
//!   one error policy for retry and backoff, its log lines and its status snapshot
//!   ([`status`]); [`events`], the typed event stream, and [`notify`], its webhooks;
//! - [`down`]: `cl-worker-manager down`'s teardown of a pool's backend;
//! - [`simulate`]: the same engine against simulated platforms and a simulated server, and
//!   [`simulate::advise`], the manager's history replayed and swept;
//! - [`history`]: the manager's bounded record of its queue (runs with the server's times,
//!   workers, events, decisions, settings), which `advise` reads;
//! - [`local`] (feature `local`, on by default): a backend that runs workers as local
//!   processes;
//! - `testing` (feature `testing`): the backend conformance suite and an in-memory fake
//!   backend, for backend crates' tests; it is not a stable part of the public API.
//!
//! `examples/embed_with_status.rs` plugs a custom backend into the loop and serves its own
//! status from the snapshot and the event stream, with this crate alone.
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

pub mod budget;
pub mod checkin;
pub mod codalab;
#[cfg(all(test, feature = "local"))]
mod describe_tests;
pub mod dispatch;
pub mod down;
pub(crate) mod engine;
pub mod estimate;
pub mod events;
mod hash;
pub mod history;
mod interned;
pub mod layout;
#[cfg(feature = "local")]
pub mod local;
pub mod manager;
pub mod notify;
pub mod policy;
pub mod pools;
pub mod retry;
mod seconds;
pub mod settings;
pub mod simulate;
pub mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

// The backend contract, under the paths core has always had them.
pub use codalab_wm_backend::{
    BLOCK_TARGET, CleanupItem, DEFAULT_SERVER, Error, JobState, LaunchRequest, PendingKind, Result,
    StagedBundle, WorkerBackend, WorkerJob, WorkerOptions, WorkerShape, async_trait, backend,
    bundle, civil, command, describe, error, secret, size,
};
pub use manager::{Manager, ManagerConfig, Pool, RecordKey};
pub use pools::{LaunchMode, PoolPolicy, SingleBackendFlags};
