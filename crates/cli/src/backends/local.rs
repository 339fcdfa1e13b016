//! Flags and construction of the `local` backend (workers as child processes).

use super::BackendContext;
use anyhow::Result;
use codalab_wm_core::WorkerBackend;
use codalab_wm_core::local::{LocalBackend, LocalConfig};
use figment::Figment;
use std::path::PathBuf;
use std::sync::Arc;

/// The config-file table (and `CODALAB_WM_LOCAL__*` env prefix) of this backend.
pub const TABLE: &str = "local";

/// Flags of `cl-worker-manager local`.
#[derive(Debug, Default, clap::Args, serde::Serialize)]
pub struct Args {
    /// CPUs each worker may use; bundles asking more are filtered out [default: 1]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// GPUs each worker may use [default: 0]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Memory per worker in MiB [default: 2048]
    #[arg(long = "memory-mb")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Where worker records and logs are kept [default: $XDG_STATE_HOME/codalab-wm/local]
    #[arg(long = "state-dir")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// The manager's process flags, accepted after the backend name too.
    #[command(flatten)]
    #[serde(skip)]
    pub process: crate::args::ProcessArgs,
}

/// Builds the local backend from the `[local]` table.
pub async fn build(config: &Figment, context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
    let local: LocalConfig = config
        .focus(TABLE)
        .extract()
        .map_err(|e| crate::diagnose::settings_error(e, Some(TABLE)))?;
    let backend = LocalBackend::new(local, context.credentials.clone())?;
    Ok(Arc::new(backend))
}
