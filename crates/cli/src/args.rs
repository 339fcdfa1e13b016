//! Command-line flags: every flag of upstream's `cl-worker-manager`, same names, same
//! defaults, same meaning, plus a few of our own. Flags are optional here so that a flag given
//! overrides the config file and environment, and a flag not given does not.

use crate::backends::BackendCommand;
use clap::{CommandFactory, FromArgMatches, Parser, ValueHint};
use codalab_wm_core::LaunchMode;
use codalab_wm_core::settings::LogFormat;
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
// `infer_long_args`: like upstream's argparse, an unambiguous prefix of a long flag is
// accepted (`--max-w 4`), on every subcommand too (the setting is global).
#[command(
    name = "cl-worker-manager",
    version,
    max_term_width = 100,
    infer_long_args = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// Joins the process flags given after the subcommand (`local --dry-run`, `down
    /// --config F`) to those given before it; the later ones win.
    fn absorb_subcommand_flags(&mut self) {
        let later = match &mut self.command {
            Some(Command::Backend(backend)) => std::mem::take(&mut backend.process),
            Some(Command::Down(args)) => args.take_process(),
            Some(Command::Status(args)) => args.take_process(),
            Some(Command::Simulate(args)) => crate::args::ProcessArgs {
                config: args.config.take(),
                ..Default::default()
            },
            _ => return,
        };
        self.global.process.absorb(later);
    }
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

    /// Monitor only runs that satisfy these criteria (CodaLab search keywords, e.g. `--search
    /// tags=exp1 .owner=alice`); the keywords end at the next flag or at the backend name
    // Upstream's `nargs='*'` is emulated by `normalise_search`, which turns `--search a b` into
    // `--search=a --search=b`: one value per occurrence, given with `=`, so that neither a
    // backend name nor a subcommand after the keywords can ever be taken as one.
    #[arg(
        long,
        value_name = "KW",
        num_args = 0..=1,
        require_equals = true,
        action = clap::ArgAction::Append
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<Vec<String>>,

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

    /// compat: upstream's rules (one launch per tick); target: absolute target with burst launches [default: compat]
    #[arg(long = "launch-mode", value_parser = parse_launch_mode)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch_mode: Option<LaunchMode>,

    /// Launches per tick at most, with --launch-mode target [default: 1]
    #[arg(long = "max-launches-per-tick")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_launches_per_tick: Option<u32>,

    #[command(flatten)]
    #[serde(flatten)]
    pub process: ProcessArgs,

    #[command(flatten)]
    #[serde(rename = "worker")]
    pub worker: WorkerArgs,
}

/// Flags of the manager process (config file, credentials, logging, failure limit, dry run,
/// TLS, endpoints): before the backend name or after it (`local --dry-run`), not on the tools
/// they do not apply to (`completions`, `config`, `simulate`). A flag after the backend name
/// wins over the same flag before it.
#[derive(Debug, Default, clap::Args, Serialize)]
#[command(next_help_heading = "Manager process options")]
pub struct ProcessArgs {
    /// TOML config file (defaults < file < CODALAB_WM_* env < flags)
    #[arg(long, value_hint = ValueHint::FilePath)]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Whether to print out extra information (debug logs)
    #[arg(long)]
    #[serde(skip_serializing_if = "is_false")]
    pub verbose: bool,

    /// File with the CodaLab user name (line 1) and password (line 2); must not be readable by group or others
    #[arg(long = "password-file", value_hint = ValueHint::FilePath)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,

    /// Exit with status 3 after more than this many worker jobs failed to start
    #[arg(long = "exit-after-num-failed")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_after_num_failed: Option<u32>,

    /// Print what would be submitted (secrets redacted) and submit nothing
    #[arg(long = "dry-run")]
    #[serde(skip_serializing_if = "is_false")]
    pub dry_run: bool,

    /// Extra CA certificate (PEM) to trust for the CodaLab server
    #[arg(long = "ca-cert", value_hint = ValueHint::FilePath)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,

    /// Accept any TLS certificate from the CodaLab server (dangerous; warns at every start)
    #[arg(long = "insecure-skip-tls-verify")]
    #[serde(skip_serializing_if = "is_false")]
    pub insecure_skip_tls_verify: bool,

    /// Log format [default: text]
    #[arg(long = "log-format", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,

    /// Serve /metrics (Prometheus), /healthz and /status on this address, e.g. 127.0.0.1:9464 [default: off]
    #[arg(long, value_name = "ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<std::net::SocketAddr>,
}

impl ProcessArgs {
    /// Takes the flags given in `later` (after the backend name) over these.
    pub fn absorb(&mut self, later: ProcessArgs) {
        let ProcessArgs {
            config,
            password_file,
            exit_after_num_failed,
            dry_run,
            ca_cert,
            insecure_skip_tls_verify,
            log_format,
            listen,
            verbose,
        } = later;
        self.config = config.or(self.config.take());
        self.password_file = password_file.or(self.password_file.take());
        self.exit_after_num_failed = exit_after_num_failed.or(self.exit_after_num_failed);
        self.dry_run |= dry_run;
        self.ca_cert = ca_cert.or(self.ca_cert.take());
        self.insecure_skip_tls_verify |= insecure_skip_tls_verify;
        self.log_format = log_format.or(self.log_format);
        self.listen = listen.or(self.listen);
        self.verbose |= verbose;
    }
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

/// Parses the command line as `main` does: upstream's `--search a b c` first rewritten by
/// [`normalise_search`]. Tests parse through this too, so they see what users get.
pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<String>,
{
    let mut command = Cli::command();
    command.build();
    let mut stops: Vec<String> = crate::backends::catalogue()
        .names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    stops.extend(command.get_subcommands().map(|c| c.get_name().to_owned()));
    let longs: Vec<String> = command
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect();
    let args = normalise_search(args.into_iter().map(Into::into).collect(), &stops, &longs);
    let mut matches = command
        .try_get_matches_from_mut(args.clone())
        .map_err(|e| explain_ambiguous(e, &command, &args))?;
    let mut cli = Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut command))?;
    cli.absorb_subcommand_flags();
    Ok(cli)
}

/// clap reports a prefix that several long flags share as an unknown argument with one
/// suggestion; name them all instead (`--max` is ambiguous: --max-workers, …).
fn explain_ambiguous(error: clap::Error, command: &clap::Command, args: &[String]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::UnknownArgument {
        return error;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
        return error;
    };
    let Some(prefix) = arg.strip_prefix("--").filter(|p| !p.contains('=')) else {
        return error;
    };
    let mut matching: Vec<String> = longs_where(command, args, arg)
        .filter(|long| long.starts_with(prefix))
        .map(|long| format!("--{long}"))
        .collect();
    matching.sort();
    matching.dedup();
    if matching.len() < 2 {
        return error;
    }
    let mut command = command.clone();
    command.error(
        ErrorKind::UnknownArgument,
        format!(
            "`{arg}` is ambiguous: it could be {}; write more of the flag",
            matching.join(", ")
        ),
    )
}

/// The long flags of the (sub)command that `arg` was given to: the subcommands named in
/// `args` before it are followed from `command`.
fn longs_where<'a>(
    command: &'a clap::Command,
    args: &[String],
    arg: &str,
) -> impl Iterator<Item = &'a str> {
    let mut current = command;
    for word in args.iter().skip(1).take_while(|w| *w != arg) {
        if let Some(sub) = current.find_subcommand(word) {
            current = sub;
        }
    }
    current.get_arguments().filter_map(|a| a.get_long())
}

/// Whether `arg` names `--search`: in full, or (as `infer_long_args` accepts) by a prefix
/// that no other long flag of `longs` shares.
fn is_search_flag(arg: &str, longs: &[String]) -> bool {
    let Some(name) = arg.strip_prefix("--") else {
        return false;
    };
    if name == "search" {
        return true;
    }
    !name.is_empty()
        && "search".starts_with(name)
        && longs
            .iter()
            .filter(|long| long.starts_with(name))
            .all(|long| long == "search")
}

/// Rewrites upstream's `--search a b c` (argparse `nargs='*'`) into `--search=a --search=b
/// --search=c`, stopping at the next flag or at a subcommand (`stops`: backends and tools),
/// so that `--search x slurm-batch` selects the backend instead of swallowing it (upstream's
/// parser swallows it). A bare `--search` stays as it is (no keywords).
pub fn normalise_search(args: Vec<String>, stops: &[String], longs: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut in_search = false;
    let mut pending_bare = false;
    for arg in args {
        if is_search_flag(&arg, longs) {
            if pending_bare {
                out.push("--search".into());
            }
            in_search = true;
            pending_bare = true;
            continue;
        }
        if in_search && !arg.starts_with('-') && !stops.contains(&arg) {
            out.push(format!("--search={arg}"));
            pending_bare = false;
            continue;
        }
        if pending_bare {
            out.push("--search".into());
        }
        in_search = false;
        pending_bare = false;
        out.push(arg);
    }
    if pending_bare {
        out.push("--search".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<&str> {
        s.split_whitespace().collect()
    }

    fn parse(s: &str) -> Result<Cli, clap::Error> {
        parse_args(words(s))
    }

    /// One flag of each backend's own, to show it reached the backend's parser.
    fn own_flag(backend: &str) -> &'static str {
        match backend {
            "local" => "--cpus 1",
            "slurm-batch" => "--partition cpu",
            "aws-batch" => "--job-queue q",
            "azure-batch" => "--account-name a",
            "kubernetes" => "--namespace n",
            other => panic!("no flag for {other}"),
        }
    }

    #[test]
    fn search_keywords_stop_at_every_backend_and_its_flags_parse() {
        for kind in crate::backends::catalogue().kinds() {
            let backend = kind.name();
            let flag = own_flag(backend);
            for line in [
                format!("wm --search tags=x {backend} {flag}"),
                format!("wm --search tags=x .owner=alice {backend} {flag}"),
                format!("wm --search a b --once {backend} {flag}"),
                format!("wm --sea tags=x {backend} {flag}"),
            ] {
                let cli = parse(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
                let Some(Command::Backend(command)) = &cli.command else {
                    panic!("{line}: no backend parsed");
                };
                assert_eq!(command.kind.name(), backend, "{line}");
                let search = cli.global.search.clone().unwrap();
                assert!(search.len() == 1 || search.len() == 2, "{line}: {search:?}");
                assert!(search.iter().all(|kw| !kw.starts_with('-')), "{search:?}");
            }
        }
    }

    #[test]
    fn the_readme_search_example_parses() {
        let cli = parse("wm --search a b slurm-batch --partition p").unwrap();
        assert_eq!(cli.global.search, Some(vec!["a".into(), "b".into()]));
        assert!(matches!(cli.command, Some(Command::Backend(_))));
    }

    #[test]
    fn a_bare_search_has_no_keywords_and_keeps_the_backend() {
        let cli = parse("wm --search local --cpus 2").unwrap();
        assert_eq!(cli.global.search, Some(vec![]));
        assert!(matches!(cli.command, Some(Command::Backend(_))));
        let cli = parse("wm --search --once").unwrap();
        assert_eq!(cli.global.search, Some(vec![]));
        assert!(cli.global.once);
    }

    #[test]
    fn search_stops_at_the_tools_too() {
        let cli = parse("wm --search a b simulate --arrivals poisson:1").unwrap();
        assert_eq!(cli.global.search, Some(vec!["a".into(), "b".into()]));
        assert!(matches!(cli.command, Some(Command::Simulate(_))));
    }

    #[test]
    fn unambiguous_prefixes_of_long_flags_are_accepted() {
        let cli = parse("wm --max-w 4 --min-w 2 --once local --mem 512").unwrap();
        assert_eq!(cli.global.max_workers, Some(4));
        assert_eq!(cli.global.min_workers, Some(2));
        let Some(Command::Backend(local)) = cli.command else {
            panic!("not local");
        };
        assert_eq!(local.flags, serde_json::json!({"memory_mb": 512}));
    }

    #[test]
    fn an_ambiguous_prefix_is_an_error_naming_the_candidates() {
        let error = parse("wm --max 4 local").unwrap_err().to_string();
        assert!(
            error.contains(
                "`--max` is ambiguous: it could be --max-launches-per-tick, --max-workers; write more of the flag"
            ),
            "{error}"
        );
    }

    #[test]
    fn process_flags_after_the_backend_join_those_before() {
        let cli = parse("wm --config a.toml local --dry-run --config b.toml").unwrap();
        assert!(cli.global.process.dry_run);
        assert_eq!(cli.global.process.config, Some("b.toml".into()));
        let cli = parse("wm down --dry-run --config c.toml local --cpus 2").unwrap();
        assert!(cli.global.process.dry_run);
        assert_eq!(cli.global.process.config, Some("c.toml".into()));
    }

    #[test]
    fn tools_refuse_manager_flags_that_do_not_apply() {
        for line in [
            "wm completions bash --listen 127.0.0.1:1",
            "wm config check --config wm.toml wm.toml",
            "wm simulate --arrivals poisson:1 --password-file pw",
            "wm down --exit-after-num-failed 1",
        ] {
            assert!(parse(line).is_err(), "{line} parsed");
        }
    }
}
