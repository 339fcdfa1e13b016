//! `cl-worker-manager`: a drop-in, faster replacement for CodaLab's Python worker manager.
//!
//! This binary only parses argv (`cli`, `args`), keeps the one list of backends compiled in by
//! cargo features (`backends`), sets up logging and signals, serves `--listen` (`http`), and
//! hands over to `codalab_wm_core` (the settings and their layout, the manager, `down`, the
//! simulator and `advise`) and to `codalab_wm_app` (what people see: the page, `status`'s
//! view, the metrics, the config tooling, the simulator's and `advise`'s output), or, for
//! `operator`, to `codalab_wm_operator`. ARCHITECTURE.md at the repository root is the map.

mod args;
mod backends;
mod cli;
mod commands;
mod diagnose;
mod http;
mod reload;
mod run;
mod setup;

use anyhow::Result;
use cli::{Cli, Command};
use codalab_wm_core::Error;
use std::process::ExitCode;

/// Exit status for bad flags, config or credentials setup.
const EXIT_USAGE: u8 = 2;
/// Exit status when the server refuses the credentials (as upstream: 1).
const EXIT_UNAUTHENTICATED: u8 = 1;

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().collect();
    if let Some((name, feature)) = not_compiled_in(&raw) {
        eprintln!(
            "error: backend `{name}` is not compiled in: rebuild with `--features {feature}`"
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let cli = cli::parse_args(raw).unwrap_or_else(|error| error.exit());
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(dispatch(cli));
    // Blocking calls still running (an SSH command) are not waited for.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!(
                "error: {}",
                codalab_wm_app::logging::escape_lines(&format!("{error:#}"))
            );
            match error.downcast_ref::<Error>() {
                Some(Error::Unauthenticated { .. }) => ExitCode::from(EXIT_UNAUTHENTICATED),
                _ => ExitCode::from(EXIT_USAGE),
            }
        }
    }
}

/// A backend named on the command line that this binary was built without.
fn not_compiled_in(args: &[String]) -> Option<(&'static str, &'static str)> {
    let catalogue = backends::catalogue();
    args.iter().skip(1).find_map(|arg| {
        catalogue
            .entries()
            .iter()
            .find(|e| e.name == arg && e.kind.is_none())
            .map(|e| (e.name, e.feature))
    })
}

/// Runs the manager (no subcommand, or a backend) or one of the tools.
async fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        None => run::run(cli.global, None).await,
        Some(Command::Backend(backend)) => run::run(cli.global, Some(backend)).await,
        Some(Command::Status(args)) => commands::status::run(args, cli.global).await,
        Some(Command::Simulate(args)) => commands::simulate::run(args, cli.global).await,
        Some(Command::Advise(args)) => commands::advise::run(args, cli.global).await,
        Some(Command::Config(args)) => commands::config::run(args, cli.global).await,
        Some(Command::Down(args)) => commands::down::run(args, cli.global).await,
        #[cfg(feature = "k8s")]
        Some(Command::Operator(args)) => commands::operator(args).await,
        Some(Command::Completions(args)) => commands::completions::run(args, cli::command()),
        Some(Command::Man) => commands::completions::man(cli::command()),
    }
}
