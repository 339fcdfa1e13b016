//! Flags and construction of the `slurm_batch` backend (placeholder until the backend lands).

use super::BackendContext;
use anyhow::Result;
use codalab_wm_core::WorkerBackend;
use figment::Figment;
use std::sync::Arc;

/// The config-file table (and `CODALAB_WM_SLURM_BATCH__*` env prefix) of this backend.
pub const TABLE: &str = "slurm_batch";

/// The backend's flags. Every field is optional so it layers over the config file.
#[derive(Debug, Default, clap::Args, serde::Serialize)]
pub struct Args {}

/// Builds the backend from the merged configuration (its table is `config.focus(TABLE)`).
pub async fn build(_config: &Figment, _context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
    anyhow::bail!("the slurm_batch backend is not implemented yet")
}
