//! # codalab-wm-aws
//!
//! The AWS Batch backend of codalab-wm (`cl-worker-manager aws-batch`): each worker is a Batch
//! job running the `codalab/worker` image, with the host's docker socket and a work directory
//! mounted, as upstream's `AWSBatchWorkerManager` submits it. Differences from upstream:
//!
//! - the job definition is registered only when it changes (its hash is a tag, and an ACTIVE
//!   revision with the same hash is reused); the per-worker command goes in the submit request;
//! - jobs are named `<manager id>-<worker id>` and tagged, and only this manager's jobs are
//!   counted (all pages), unless `--job-filter` asks for upstream's queue-wide count;
//! - `--codalab-credentials-secret-arn` keeps the CodaLab credentials out of the job definition;
//! - workers can be stopped (`TerminateJob`), and API errors are classified (throttling,
//!   temporary, permanent) instead of being counted as "no workers".
//!
//! Modules: [`config`] (the options), [`definition`] (job definition and submit request as
//! data), [`client`] (the SDK calls), [`backend`] (the trait implementation), [`error`] (SDK
//! errors to codalab-wm errors).
//!
//! The backend describes itself to the program ([`describe`]): [`AwsBatchConfig`] is at once its flags,
//! its config table and its defaults, and [`KIND`] is its line in the binary's list of backends.
#![warn(missing_docs)]

pub mod backend;
pub mod client;
pub mod config;
pub mod definition;
pub mod describe;
pub mod error;

pub use backend::AwsBatchBackend;
pub use client::BatchClient;
pub use config::AwsBatchConfig;
pub use definition::{HostEnvironment, JobDefinitionSpec};
pub use describe::KIND;
