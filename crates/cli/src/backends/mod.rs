//! The backend subcommands. Each backend module provides the same three items:
//! `TABLE` (its config-file table and env prefix), `Args` (its flags, all optional so that
//! they layer over the config file) and `build` (config → backend). Backends that are not
//! compiled in are recognised by name and refused with the feature to rebuild with.

use anyhow::Result;
use clap::Subcommand;
use codalab_wm_core::WorkerBackend;
use codalab_wm_core::command::WorkerOptions;
use codalab_wm_core::secret::Credentials;
use figment::Figment;
use figment::providers::Serialized;
use std::sync::Arc;

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "azure")]
pub mod azure;
#[cfg(feature = "k8s")]
pub mod k8s;
pub mod local;
#[cfg(feature = "slurm")]
pub mod slurm;

/// What every backend needs besides its own settings.
#[derive(Debug, Clone)]
pub struct BackendContext {
    /// Credentials the workers log in with.
    pub credentials: Credentials,
    /// The `cl-worker` settings (server included).
    #[allow(dead_code)]
    pub worker: WorkerOptions,
}

/// Every backend name with the cargo feature that compiles it in.
pub const ALL_BACKENDS: &[(&str, &str)] = &[
    ("local", ""),
    ("slurm-batch", "slurm"),
    ("aws-batch", "aws"),
    ("azure-batch", "azure"),
    ("kubernetes", "k8s"),
];

/// The backends compiled into this binary.
const COMPILED_IN: &[&str] = &[
    "local",
    #[cfg(feature = "slurm")]
    "slurm-batch",
    #[cfg(feature = "aws")]
    "aws-batch",
    #[cfg(feature = "azure")]
    "azure-batch",
    #[cfg(feature = "k8s")]
    "kubernetes",
];

/// Whether the backend `name` is compiled into this binary.
pub fn is_compiled_in(name: &str) -> bool {
    COMPILED_IN.contains(&name)
}

/// The backend to run, with its flags.
#[derive(Debug, Subcommand)]
pub enum BackendCommand {
    /// Run workers as child processes on this machine.
    Local(local::Args),
    /// Submit workers as Slurm batch jobs (sbatch), locally or on a login node over SSH.
    #[cfg(feature = "slurm")]
    #[command(name = "slurm-batch")]
    SlurmBatch(slurm::Args),
    /// Submit workers as AWS Batch jobs.
    #[cfg(feature = "aws")]
    #[command(name = "aws-batch")]
    AwsBatch(aws::Args),
    /// Submit workers as Azure Batch tasks.
    #[cfg(feature = "azure")]
    #[command(name = "azure-batch")]
    AzureBatch(azure::Args),
    /// Start workers as Kubernetes pods.
    #[cfg(feature = "k8s")]
    Kubernetes(k8s::Args),
}

impl BackendCommand {
    /// The backend's name on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            BackendCommand::Local(_) => "local",
            #[cfg(feature = "slurm")]
            BackendCommand::SlurmBatch(_) => "slurm-batch",
            #[cfg(feature = "aws")]
            BackendCommand::AwsBatch(_) => "aws-batch",
            #[cfg(feature = "azure")]
            BackendCommand::AzureBatch(_) => "azure-batch",
            #[cfg(feature = "k8s")]
            BackendCommand::Kubernetes(_) => "kubernetes",
        }
    }

    /// The backend's flags as a figment layer over its config table.
    pub fn flags(&self) -> Figment {
        match self {
            BackendCommand::Local(args) => Figment::from(Serialized::default(local::TABLE, args)),
            #[cfg(feature = "slurm")]
            BackendCommand::SlurmBatch(args) => {
                Figment::from(Serialized::default(slurm::TABLE, args))
            }
            #[cfg(feature = "aws")]
            BackendCommand::AwsBatch(args) => Figment::from(Serialized::default(aws::TABLE, args)),
            #[cfg(feature = "azure")]
            BackendCommand::AzureBatch(args) => {
                Figment::from(Serialized::default(azure::TABLE, args))
            }
            #[cfg(feature = "k8s")]
            BackendCommand::Kubernetes(args) => {
                Figment::from(Serialized::default(k8s::TABLE, args))
            }
        }
    }

    /// The subcommand with no flags, for a backend chosen in the config file (`backend = "…"`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "local" => Some(BackendCommand::Local(Default::default())),
            #[cfg(feature = "slurm")]
            "slurm-batch" => Some(BackendCommand::SlurmBatch(Default::default())),
            #[cfg(feature = "aws")]
            "aws-batch" => Some(BackendCommand::AwsBatch(Default::default())),
            #[cfg(feature = "azure")]
            "azure-batch" => Some(BackendCommand::AzureBatch(Default::default())),
            #[cfg(feature = "k8s")]
            "kubernetes" => Some(BackendCommand::Kubernetes(Default::default())),
            _ => None,
        }
    }

    /// Builds the backend from the merged configuration.
    pub async fn build(
        &self,
        config: &Figment,
        context: &BackendContext,
    ) -> Result<Arc<dyn WorkerBackend>> {
        match self {
            BackendCommand::Local(_) => local::build(config, context).await,
            #[cfg(feature = "slurm")]
            BackendCommand::SlurmBatch(_) => slurm::build(config, context).await,
            #[cfg(feature = "aws")]
            BackendCommand::AwsBatch(_) => aws::build(config, context).await,
            #[cfg(feature = "azure")]
            BackendCommand::AzureBatch(_) => azure::build(config, context).await,
            #[cfg(feature = "k8s")]
            BackendCommand::Kubernetes(_) => k8s::build(config, context).await,
        }
    }
}
