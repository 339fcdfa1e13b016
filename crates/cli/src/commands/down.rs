//! `cl-worker-manager down` (placeholder until it lands).

use crate::args::GlobalArgs;
use anyhow::{Result, bail};
use std::process::ExitCode;

/// Flags of `cl-worker-manager down`.
#[derive(Debug, Default, clap::Args)]
pub struct Args {}

/// Runs `cl-worker-manager down`.
pub async fn run(_args: Args, _global: GlobalArgs) -> Result<ExitCode> {
    bail!("`cl-worker-manager down` is not implemented yet")
}
