//! How the log is written: for a person, control characters escaped ([`escape`]) and blocks
//! of text (a dry run's batch script) shown as blocks on stdout ([`blocks`]) instead of one
//! escaped line; for a machine, JSON lines; the subscriber of both ([`init`]).

pub mod blocks;
pub mod escape;

pub use blocks::BlockPrinter;
pub use escape::{Escaping, escape, escape_lines};

use codalab_wm_core::settings::LogFormat;

/// Colour only for a person: stderr is a terminal and `NO_COLOR` is unset or empty (files,
/// pipes and journald get plain text).
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Logs to stderr: `--verbose` adds debug lines, `CODALAB_WM_LOG` overrides the filter.
pub fn init(verbose: bool, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let default = if verbose { "debug" } else { "info" };
    let filter = EnvFilter::try_from_env("CODALAB_WM_LOG").unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "{default},hyper=info,reqwest=info,rustls=info,h2=info,tower=info,aws=info,kube=info"
        ))
    });
    let _ = match format {
        LogFormat::Text => {
            use self::blocks::is_block;
            use tracing_subscriber::{filter::filter_fn, prelude::*};
            // The escaping writer must know whether colour codes are ours.
            let ansi = colour_on_stderr();
            let lines = tracing_subscriber::fmt::layer()
                .with_ansi(ansi)
                .with_writer(move || Escaping::new(std::io::stderr(), ansi))
                .with_filter(filter_fn(|metadata| !is_block(metadata)));
            let registry = tracing_subscriber::registry().with(filter);
            registry
                .with(lines)
                .with(BlockPrinter::stdout())
                .try_init()
                .is_ok()
        }
        LogFormat::Json => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .try_init()
            .is_ok(),
    };
}
