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
    ///
    /// Each worker is a `cl-worker` process in its own process group. It inherits the manager's
    /// environment (DOCKER_HOST, which the real cl-worker needs to reach its Docker engine; PATH;
    /// proxies) plus CODALAB_USERNAME/CODALAB_PASSWORD, and writes its output to
    /// `<state-dir>/<worker-id>.log`. `cl-worker-manager down local` stops them.
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

    /// The manager's process flags given after the backend name (`local --dry-run`), taken
    /// out so they join those given before it.
    pub fn take_process(&mut self) -> crate::args::ProcessArgs {
        let process = match self {
            BackendCommand::Local(args) => &mut args.process,
            #[cfg(feature = "slurm")]
            BackendCommand::SlurmBatch(args) => &mut args.process,
            #[cfg(feature = "aws")]
            BackendCommand::AwsBatch(args) => &mut args.process,
            #[cfg(feature = "azure")]
            BackendCommand::AzureBatch(args) => &mut args.process,
            #[cfg(feature = "k8s")]
            BackendCommand::Kubernetes(args) => &mut args.process,
        };
        std::mem::take(process)
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

    /// The backend's config-file table (`slurm_batch`, `local` …).
    pub fn table(&self) -> &'static str {
        match self {
            BackendCommand::Local(_) => local::TABLE,
            #[cfg(feature = "slurm")]
            BackendCommand::SlurmBatch(_) => slurm::TABLE,
            #[cfg(feature = "aws")]
            BackendCommand::AwsBatch(_) => aws::TABLE,
            #[cfg(feature = "azure")]
            BackendCommand::AzureBatch(_) => azure::TABLE,
            #[cfg(feature = "k8s")]
            BackendCommand::Kubernetes(_) => k8s::TABLE,
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

/// The config-file table of backend `name`, compiled in or not.
pub fn table_of(name: &str) -> Option<&'static str> {
    match name {
        "local" => Some("local"),
        "slurm-batch" => Some("slurm_batch"),
        "aws-batch" => Some("aws_batch"),
        "azure-batch" => Some("azure_batch"),
        "kubernetes" => Some("kubernetes"),
        _ => None,
    }
}

/// Builds backend `name` from `settings`, a figment holding the backend's own table as its
/// root (a `[[pools]]` entry's `[pools.<table>]`): the same `build` the subcommand uses runs on
/// it, so the same validation and the same errors (unknown keys named) apply.
pub async fn build_by_name(
    name: &str,
    settings: Figment,
    context: &BackendContext,
) -> Result<Arc<dyn WorkerBackend>> {
    let names: Vec<&str> = ALL_BACKENDS.iter().map(|(n, _)| *n).collect();
    if let Some((_, feature)) = ALL_BACKENDS
        .iter()
        .find(|(n, _)| *n == name && !is_compiled_in(n))
    {
        anyhow::bail!("backend `{name}` is not compiled in: rebuild with `--features {feature}`");
    }
    let command = BackendCommand::from_name(name).ok_or_else(|| {
        anyhow::anyhow!("unknown backend `{name}`: use one of {}", names.join(", "))
    })?;
    let table: serde_json::Value = settings
        .extract()
        .map_err(|e| crate::diagnose::settings_error(e, Some(command.table())))?;
    let config = Figment::from(Serialized::default(command.table(), table));
    command.build(&config, context).await
}
