//! # codalab-wm-gce
//!
//! The Google Compute Engine backend of codalab-wm (`cl-worker-manager gce`): each worker is
//! one instance `cl-worker-<unique>` (a Spot VM by default, deleted by Compute Engine when
//! preempted), labelled `codalab-wm-manager=<id>`, `codalab-wm-pool=<pool>` and
//! `codalab-wm-origin=<origin>` (instances of another origin are not listed), whose startup
//! script runs `cl-worker` in the worker image with docker and powers off when it exits.
//! Stopped and terminated instances are reaped (deleted) by the manager.
//!
//! Its own small REST client on `reqwest` (the official `google-cloud-compute-v1` crate was
//! measured unfit: a second HTTP and TLS stack, gRPC and OpenTelemetry crates, a C build and
//! minutes of compile for five calls):
//! - [`auth`]: Application Default Credentials (a service account key file, or the metadata
//!   server);
//! - [`client`]: insert, aggregated list (all pages), delete, operation wait, preemptions;
//! - [`models`]: the bodies, named as the discovery document names them;
//! - [`spec`]: the insert body and the startup script, as plain data;
//! - [`error`]: answers to codalab-wm errors;
//! - [`config`]: [`GceConfig`]; [`backend`]: [`GceBackend`].
//!
//! No emulator exists for Compute Engine: the backend is tested against the fake in
//! `crates/testkit/gce`, which checks every request against Google's discovery document.
#![warn(missing_docs)]

pub mod auth;
pub mod backend;
pub mod client;
pub mod config;
pub mod describe;
pub mod error;
pub mod models;
pub mod spec;

pub use backend::GceBackend;
pub use config::{GceConfig, Provisioning};
pub use describe::KIND;
