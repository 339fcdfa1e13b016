//! `cl-worker-manager status` (placeholder until it lands).

use crate::args::GlobalArgs;
use anyhow::{Result, bail};
use std::process::ExitCode;

/// Flags of `cl-worker-manager status`.
#[derive(Debug, Default, clap::Args)]
pub struct Args {}

/// Runs `cl-worker-manager status`.
pub async fn run(_args: Args, _global: GlobalArgs) -> Result<ExitCode> {
    bail!("`cl-worker-manager status` is not implemented yet")
}
