//! `cl-worker-manager completions SHELL` and the man page, both generated from the same clap
//! definitions as `--help` (`clap_complete`, `clap_mangen`), so they never drift from the flags.

use crate::args::Cli;
use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use std::io::Write;
use std::process::ExitCode;

/// Flags of `cl-worker-manager completions`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  cl-worker-manager completions bash > /etc/bash_completion.d/cl-worker-manager
  cl-worker-manager completions zsh > \"${fpath[1]}/_cl-worker-manager\"
  cl-worker-manager completions fish > ~/.config/fish/completions/cl-worker-manager.fish")]
pub struct Args {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Prints shell completions.
pub fn run(args: Args) -> Result<ExitCode> {
    let mut out = Vec::new();
    write_completions(args.shell, &mut out);
    std::io::stdout()
        .write_all(&out)
        .context("cannot write the completions")?;
    Ok(ExitCode::SUCCESS)
}

/// The completion script for `shell`.
pub fn write_completions(shell: Shell, out: &mut impl Write) {
    clap_complete::generate(shell, &mut Cli::command(), "cl-worker-manager", out);
}

/// Prints the man page (roff): the top-level page with every global flag and the subcommands.
pub fn man() -> Result<ExitCode> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .context("cannot render the man page")?;
    std::io::stdout()
        .write_all(&out)
        .context("cannot write the man page")?;
    Ok(ExitCode::SUCCESS)
}
