//! `cl-worker-manager config init|check`: the Ray-style workflow of a template whose
//! placeholders are customised (`grep -n XXX-CUSTOMIZE-THIS-XXX`), checked without contacting
//! anything, and reloaded into a running manager with SIGHUP (`crate::reload`).

use crate::args::GlobalArgs;
use crate::backends::program;
use anyhow::{Context, Result};
use codalab_wm_app::config::schema::PLACEHOLDER;
use codalab_wm_app::config::{check, template};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// `config` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Write a commented TOML template with every option and its default
    Init(InitArgs),
    /// Check a config file without contacting anything: placeholders left, unknown keys, wrong
    /// types, impossible combinations, with line numbers (exit 1 when any)
    Check(CheckArgs),
}

/// Flags of `config init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The backend whose table the template holds
    #[arg(long, default_value = "slurm-batch", value_parser = backend_names())]
    pub backend: String,
    /// Write a two-pool example ([[pools]]) instead of the single-backend mode
    #[arg(long)]
    pub pools: bool,
    /// Write to this file instead of stdout
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Overwrite --output if it exists
    #[arg(long)]
    pub force: bool,
}

/// Every backend name, compiled in or not (one that is not is refused with its feature).
fn backend_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(crate::backends::catalogue().names())
}

/// Flags of `config check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The config file to check
    pub file: PathBuf,
}

/// Runs `cl-worker-manager config …`.
pub async fn run(command: ConfigCommand, _global: GlobalArgs) -> Result<ExitCode> {
    match command {
        ConfigCommand::Init(args) => init(args),
        ConfigCommand::Check(args) => check_file(args),
    }
}

/// The template of `backend` (`slurm-batch` …), single-backend or with two pools.
pub fn template(backend: &str, pools: bool) -> Result<String> {
    let kind = crate::backends::catalogue().get(backend)?;
    Ok(template::render(kind, pools, &program()))
}

fn init(args: InitArgs) -> Result<ExitCode> {
    let text = template(&args.backend, args.pools)?;
    match &args.output {
        None => std::io::stdout()
            .write_all(text.as_bytes())
            .context("cannot write the template to stdout")?,
        Some(path) => {
            let mut options = std::fs::OpenOptions::new();
            options.write(true);
            if args.force {
                options.create(true).truncate(true);
            } else {
                options.create_new(true);
            }
            let mut file = options.open(path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    anyhow::anyhow!("{} exists: pass --force to overwrite it", path.display())
                } else {
                    anyhow::anyhow!("cannot write {}: {e}", path.display())
                }
            })?;
            file.write_all(text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "wrote {}; edit what `grep -n {} {}` shows, then run `cl-worker-manager config check {}`",
                path.display(),
                PLACEHOLDER,
                path.display(),
                path.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn check_file(args: CheckArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let diagnostics = check::check(&text, &program());
    let file = args.file.display();
    for diagnostic in &diagnostics {
        println!("{file}:{diagnostic}");
    }
    // Warnings are said; only problems fail the check.
    let problems = (diagnostics.iter())
        .filter(|d| d.kind != check::Kind::Warning)
        .count();
    if problems == 0 {
        eprintln!("{file}: ok");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{file}: {problems} problem(s)");
        Ok(ExitCode::FAILURE)
    }
}
