//! `cl-worker-manager completions SHELL` and the man page (placeholder until it lands).

use anyhow::{Result, bail};
use std::process::ExitCode;

/// Flags of `cl-worker-manager completions`.
#[derive(Debug, Default, clap::Args)]
pub struct Args {}

/// Prints shell completions.
pub fn run(_args: Args) -> Result<ExitCode> {
    bail!("`cl-worker-manager completions` is not implemented yet")
}

/// Prints the man page.
pub fn man() -> Result<ExitCode> {
    bail!("the man page is not implemented yet")
}
