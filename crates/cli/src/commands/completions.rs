//! `cl-worker-manager completions SHELL` and the man page, both generated from the same clap
//! definitions as `--help` (`clap_complete`, `clap_mangen`), so they never drift from the flags.

use anyhow::{Context, Result};
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

/// The program's name, as completions register it.
const BIN: &str = "cl-worker-manager";

/// Prints shell completions of `command` (the program's whole command line).
pub fn run(args: Args, command: clap::Command) -> Result<ExitCode> {
    let mut out = Vec::new();
    write_completions(args.shell, command, &mut out);
    write_stdout(&out, "the completions")
}

/// Writes `bytes` to stdout. A reader that has gone (`completions bash | head`) is not an
/// error: the reader took what it wanted.
fn write_stdout(bytes: &[u8], what: &str) -> Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        result => {
            result.with_context(|| format!("cannot write {what}"))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The completion script for `shell`.
pub fn write_completions(shell: Shell, mut command: clap::Command, out: &mut impl Write) {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, BIN, &mut script);
    if shell == Shell::Bash {
        script = fix_bash_function_names(&script);
    }
    let _ = out.write_all(&script);
}

/// Works around clap-rs/clap#6421: for a binary name with `-`, clap_complete's bash script
/// labels each subcommand's case `cl__subcmd__worker__subcmd__manager__…` while its dispatch
/// builds `cl__worker__manager__…`, so no subcommand's flags complete. The labels are
/// renamed to what the dispatch builds.
fn fix_bash_function_names(script: &[u8]) -> Vec<u8> {
    let wrong = BIN.replace('-', "__subcmd__");
    let right = BIN.replace('-', "__");
    String::from_utf8_lossy(script)
        .replace(&wrong, &right)
        .into_bytes()
}

/// Prints the man page (roff) of `command`: the top-level page with every global flag and the
/// subcommands.
pub fn man(command: clap::Command) -> Result<ExitCode> {
    let mut out = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut out)
        .context("cannot render the man page")?;
    write_stdout(&out, "the man page")
}
