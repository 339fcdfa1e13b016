//! `cl-worker-manager config init|check` (placeholder until it lands).

use crate::args::GlobalArgs;
use anyhow::{Result, bail};
use std::process::ExitCode;

/// `config` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Write a commented TOML template with every option and its default
    Init,
    /// Check a config file without contacting anything
    Check,
}

/// Runs `cl-worker-manager config …`.
pub async fn run(_command: ConfigCommand, _global: GlobalArgs) -> Result<ExitCode> {
    bail!("`cl-worker-manager config` is not implemented yet")
}
