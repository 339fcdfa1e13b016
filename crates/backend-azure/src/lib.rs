//! # codalab-wm-azure
//!
//! The Azure Batch backend of codalab-wm (`cl-worker-manager azure-batch`): each worker is a
//! container task `cl_worker_<unique>` in one Batch job, as upstream's
//! `AzureBatchWorkerManager` starts them.
//!
//! No maintained Rust crate covers the Batch data plane, so this crate has its own small
//! client on `reqwest` + `serde` for the three operations it needs, against api-version
//! [`client::API_VERSION`] (the OpenAPI spec is vendored in `spec/`):
//! - [`sign`]: Shared Key signing, checked against vectors made with the official SDK;
//! - [`auth`]: Shared Key or Microsoft Entra ID client-credentials tokens;
//! - [`client`]: add a task, list tasks (all pages), terminate a task;
//! - [`models`]: the request and response bodies, as the spec names them;
//! - [`error`]: Batch errors to codalab-wm errors (throttling, temporary, permanent);
//! - [`config`]: [`AzureBatchConfig`], upstream's flags;
//! - [`backend`]: [`AzureBatchBackend`], the [`WorkerBackend`](codalab_wm_backend::WorkerBackend);
//!
//! The stateful fake of the service, and this backend's tests against it, are in
//! `crates/testkit/azure` (`codalab-wm-fake-azure`).
//!
//! The backend describes itself to the program ([`describe`]): [`AzureBatchConfig`] is at once its flags,
//! its config table and its defaults, and [`KIND`] is its line in the binary's list of backends.
#![warn(missing_docs)]

pub mod auth;
pub mod backend;
pub mod client;
pub mod config;
pub mod describe;
pub mod error;
pub mod models;
pub mod sign;

pub use backend::AzureBatchBackend;
pub use config::{AzureBatchConfig, EntraConfig};
pub use describe::KIND;
