//! `cl-worker-manager simulate` (placeholder until it lands).

use crate::args::GlobalArgs;
use anyhow::{Result, bail};
use std::process::ExitCode;

/// Flags of `cl-worker-manager simulate`.
#[derive(Debug, Default, clap::Args)]
pub struct Args {}

/// Runs `cl-worker-manager simulate`.
pub async fn run(_args: Args, _global: GlobalArgs) -> Result<ExitCode> {
    bail!("`cl-worker-manager simulate` is not implemented yet")
}
