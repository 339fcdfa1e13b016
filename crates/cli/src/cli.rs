//! The command line: the program's subcommands (the backends, then the tools), upstream's
//! `--search a b c`, unambiguous flag prefixes, and process flags given after a subcommand.

use crate::args::{GlobalArgs, ProcessArgs};
use crate::backends::BackendCommand;
use clap::{CommandFactory, FromArgMatches, Parser};
use codalab_wm_core::settings::Settings;
use serde_json::Value;

/// Starts CodaLab workers on a compute backend as run bundles are staged, keeping the number
/// of workers between --min-workers and --max-workers.
///
/// Settings come from built-in defaults, then --config FILE (TOML), then the files of
/// CODALAB_WM_SECRETS_DIR named TABLE.KEY, then CODALAB_WM_* environment variables, then these
/// flags. Credentials come from --password-file, else from the files codalab-username and
/// codalab-password of CODALAB_WM_SECRETS_DIR (or systemd's $CREDENTIALS_DIRECTORY), else from
/// CODALAB_USERNAME and CODALAB_PASSWORD.
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
            Some(Command::Simulate(args)) => ProcessArgs {
                config: args.report.config.take(),
                ..Default::default()
            },
            Some(Command::Advise(args)) => ProcessArgs {
                config: args.report.config.take(),
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
    /// Replay the manager's history under other settings: what to change for a wait target or a cost cap
    Advise(crate::commands::advise::Args),
    /// Write a commented config template, or check a config file without contacting anything
    #[command(subcommand)]
    Config(crate::commands::config::ConfigCommand),
    /// Stop every worker job this manager owns (and what it created), or list them with --dry-run
    Down(crate::commands::down::Args),
    #[cfg(feature = "k8s")]
    Operator(codalab_wm_operator::command::OperatorArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell)
    Completions(crate::commands::completions::Args),
    /// Print the man page (roff)
    #[command(hide = true)]
    Man,
}

/// The command line, with the default of every global and `--worker-*` flag in its help, read
/// from `Settings::default()` (the one home of those defaults).
pub fn command() -> clap::Command {
    let defaults = serde_json::to_value(Settings::default()).unwrap_or_default();
    with_defaults(Cli::command(), &defaults)
}

/// `command` and its subcommands with the defaults of their global flags in their help.
fn with_defaults(command: clap::Command, defaults: &Value) -> clap::Command {
    let worker = defaults.get("worker").cloned().unwrap_or_default();
    let names: Vec<String> = command
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    let command = command.mut_args(|arg| {
        let id = arg.get_id().as_str();
        let value = defaults.get(id).or_else(|| worker.get(id));
        match (value, arg.get_help()) {
            (Some(value @ (Value::String(_) | Value::Number(_))), Some(help)) => {
                let shown = value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_owned);
                let help = format!("{help} [default: {shown}]");
                arg.help(help)
            }
            _ => arg,
        }
    });
    names.iter().fold(command, |command, name| {
        command.mut_subcommand(name, |sub| with_defaults(sub, defaults))
    })
}

/// Parses the command line as `main` does: upstream's `--search a b c` first rewritten by
/// [`normalise_search`]. Tests parse through this too, so they see what users get.
pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<String>,
{
    let mut command = command();
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
            "gce" => "--machine-type e2-standard-2",
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
