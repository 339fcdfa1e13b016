//! Command-line flags: every flag of upstream's `cl-worker-manager`, same names, same
//! defaults, same meaning, plus a few of our own. Flags are optional here so that a flag given
//! overrides the config file and environment, and a flag not given does not.

use crate::backends::BackendCommand;
use crate::settings::LogFormat;
use clap::{Parser, ValueHint};
use codalab_wm_core::LaunchMode;
use serde::Serialize;
use std::path::PathBuf;

fn is_false(value: &bool) -> bool {
    !*value
}

fn parse_launch_mode(value: &str) -> Result<LaunchMode, String> {
    value.parse()
}

/// Starts CodaLab workers on a compute backend as run bundles are staged, keeping the number
/// of workers between --min-workers and --max-workers.
///
/// Settings come from built-in defaults, then --config FILE (TOML), then CODALAB_WM_* environment
/// variables, then these flags. Credentials come from CODALAB_USERNAME and CODALAB_PASSWORD, or
/// from --password-file.
#[derive(Debug, Parser)]
#[command(name = "cl-worker-manager", version, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// A backend to run the manager on, or one of the tools.
// Parsed once at start; boxing the backend flags would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    #[command(flatten)]
    Backend(BackendCommand),
    /// Show what a running manager is doing (or what one tick would do), like `ray status`
    Status(crate::commands::status::Args),
    /// Replay a workload through the real scaling policy with a simulated backend
    Simulate(crate::commands::simulate::Args),
    /// Write a commented config template, or check a config file without contacting anything
    #[command(subcommand)]
    Config(crate::commands::config::ConfigCommand),
    /// Stop every worker job this manager owns (and what it created), or list them with --dry-run
    Down(crate::commands::down::Args),
    /// Print shell completions (bash, zsh, fish, elvish, powershell)
    Completions(crate::commands::completions::Args),
    /// Print the man page (roff)
    #[command(hide = true)]
    Man,
}

/// Flags that apply to every backend.
#[derive(Debug, Default, clap::Args, Serialize)]
pub struct GlobalArgs {
    /// TOML config file (defaults < file < CODALAB_WM_* env < flags)
    #[arg(long, value_hint = ValueHint::FilePath, global = true)]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// URL of the CodaLab server, <http|https>://<hostname>[:<port>] [default: https://worksheets.codalab.org]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,

    /// Accepted for compatibility with upstream (this manager never writes session state)
    #[arg(long = "temp-session")]
    #[serde(skip)]
    pub temp_session: bool,

    /// Minimum number of workers [default: 1]
    #[arg(long = "min-workers")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_workers: Option<u32>,

    /// Maximum number of workers [default: 10]
    #[arg(long = "max-workers")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_workers: Option<u32>,

    /// Monitor only runs that satisfy these criteria (CodaLab search keywords, e.g. tags=exp1)
    #[arg(long, num_args = 0.., action = clap::ArgAction::Append)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<Vec<String>>,

    /// Whether to print out extra information (debug logs)
    #[arg(long, global = true)]
    #[serde(skip_serializing_if = "is_false")]
    pub verbose: bool,

    /// Number of seconds to wait between checks [default: 5]
    #[arg(long = "sleep-time")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sleep_time: Option<u64>,

    /// Restart the worker manager after this many seconds have passed since launch (0: never)
    #[arg(long = "restart-after-seconds")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_after_seconds: Option<u64>,

    /// Do not filter run bundles by whether the created workers satisfy their requested resources
    #[arg(long = "no-prefilter")]
    #[serde(skip_serializing_if = "is_false")]
    pub no_prefilter: bool,

    /// Run one iteration and exit (upstream parses this flag but ignores it)
    #[arg(long)]
    #[serde(skip_serializing_if = "is_false")]
    pub once: bool,

    /// Minimum time to wait between launching workers, in seconds [default: 60]
    #[arg(long = "min-seconds-between-workers")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_seconds_between_workers: Option<u64>,

    /// File with the CodaLab user name (line 1) and password (line 2); must not be readable by group or others
    #[arg(long = "password-file", value_hint = ValueHint::FilePath, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,

    /// Exit with status 3 after more than this many worker jobs failed to start
    #[arg(long = "exit-after-num-failed", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_after_num_failed: Option<u32>,

    /// Print what would be submitted (secrets redacted) and submit nothing
    #[arg(long = "dry-run", global = true)]
    #[serde(skip_serializing_if = "is_false")]
    pub dry_run: bool,

    /// Extra CA certificate (PEM) to trust for the CodaLab server
    #[arg(long = "ca-cert", value_hint = ValueHint::FilePath, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,

    /// Accept any TLS certificate from the CodaLab server (dangerous; warns at every start)
    #[arg(long = "insecure-skip-tls-verify", global = true)]
    #[serde(skip_serializing_if = "is_false")]
    pub insecure_skip_tls_verify: bool,

    /// compat: upstream's rules (one launch per tick); target: absolute target with burst launches [default: compat]
    #[arg(long = "launch-mode", value_parser = parse_launch_mode)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch_mode: Option<LaunchMode>,

    /// Launches per tick at most, with --launch-mode target [default: 1]
    #[arg(long = "max-launches-per-tick")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_launches_per_tick: Option<u32>,

    /// Log format [default: text]
    #[arg(long = "log-format", value_enum, global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,

    /// Serve /metrics (Prometheus), /healthz and /status on this address, e.g. 127.0.0.1:9464 [default: off]
    #[arg(long, value_name = "ADDR", global = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<std::net::SocketAddr>,

    #[command(flatten)]
    #[serde(rename = "worker")]
    pub worker: WorkerArgs,
}

/// The `--worker-*` flags, passed down to every `cl-worker`.
#[derive(Debug, Default, clap::Args, Serialize)]
#[command(next_help_heading = "Worker options (passed to every cl-worker)")]
pub struct WorkerArgs {
    /// Tag to look for and put on workers
    #[arg(long = "worker-tag")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,

    /// Prefix to use for each worker's working directory
    #[arg(long = "worker-work-dir-prefix")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_dir_prefix: Option<String>,

    /// Maximum size of the temporary bundle data (e.g. 88g)
    #[arg(long = "worker-max-work-dir-size")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_work_dir_size: Option<String>,

    /// Delete a worker's working directory when the worker process exits
    #[arg(long = "worker-delete-work-dir-on-exit")]
    #[serde(skip_serializing_if = "is_false")]
    pub delete_work_dir_on_exit: bool,

    /// Workers wait this long for extra runs before quitting, in seconds [default: 600]
    #[arg(long = "worker-idle-seconds")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_seconds: Option<u64>,

    /// Times a worker retries downloading dependencies after a failure [default: 3]
    #[arg(long = "worker-download-dependencies-max-retries")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub download_dependencies_max_retries: Option<u32>,

    /// If specified, the worker waits this many seconds between check-ins
    #[arg(long = "worker-checkin-frequency-seconds")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkin_frequency_seconds: Option<u64>,

    /// If specified, the worker exits after finishing this many runs
    #[arg(long = "worker-exit-after-num-runs", allow_negative_numbers = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_after_num_runs: Option<i64>,

    /// The worker kills and restages all running bundles when terminated
    #[arg(long = "worker-pass-down-termination")]
    #[serde(skip_serializing_if = "is_false")]
    pub pass_down_termination: bool,

    /// The worker exits if it encounters an exception (rather than sleeping)
    #[arg(long = "worker-exit-on-exception")]
    #[serde(skip_serializing_if = "is_false")]
    pub exit_on_exception: bool,

    /// The worker only runs bundles that match its tag
    #[arg(long = "worker-tag-exclusive")]
    #[serde(skip_serializing_if = "is_false")]
    pub tag_exclusive: bool,

    /// The worker only runs bundles of this group
    #[arg(long = "worker-group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,

    /// The CodaLab worker executable to run [default: cl-worker]
    #[arg(long = "worker-executable")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executable: Option<String>,

    /// Shared memory size in GB of the run containers started by the workers
    #[arg(long = "worker-shared-memory-size-gb")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_memory_size_gb: Option<u64>,

    /// The workers are preemptible
    #[arg(long = "worker-preemptible")]
    #[serde(skip_serializing_if = "is_false")]
    pub preemptible: bool,
}

/// Rewrites upstream's `--search a b c` (argparse `nargs='*'`) into `--search a --search b
/// --search c`, stopping at the next flag or at a backend name, so that `--search x slurm-batch`
/// selects the backend instead of swallowing it (upstream's parser swallows it).
pub fn normalise_search(args: Vec<String>, subcommands: &[&str]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut in_search = false;
    for arg in args {
        if arg == "--search" {
            in_search = true;
            out.push(arg);
            continue;
        }
        if in_search && !arg.starts_with('-') && !subcommands.contains(&arg.as_str()) {
            if out.last().map(String::as_str) != Some("--search") {
                out.push("--search".into());
            }
            out.push(arg);
            continue;
        }
        in_search = false;
        out.push(arg);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn search_values_are_split_and_stop_at_backends() {
        let args = normalise_search(
            strings("wm --search a b slurm-batch --partition p"),
            &["slurm-batch"],
        );
        assert_eq!(
            args,
            strings("wm --search a --search b slurm-batch --partition p")
        );
        let args = normalise_search(strings("wm --search a --once local"), &["local"]);
        assert_eq!(args, strings("wm --search a --once local"));
        let args = normalise_search(strings("wm --search --once"), &[]);
        assert_eq!(args, strings("wm --search --once"));
    }
}
