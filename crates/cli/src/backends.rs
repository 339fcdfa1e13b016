//! The backends this binary knows: the one list a new backend is added to (one line, gated
//! by its cargo feature), and the backend subcommands built from it. Each backend describes
//! itself ([`codalab_wm_core::describe`]): its flags, table, checks and construction.

use crate::args::{GlobalArgs, ProcessArgs, WorkerArgs};
use clap::{ArgMatches, Args, Command, FromArgMatches};
use codalab_wm_app::config::schema::Program;
use codalab_wm_core::describe::flag_docs;
use codalab_wm_core::describe::{BackendKind, Catalogue, Entry};

/// An entry of the list: name, config table, cargo feature and, when that feature is on, the
/// backend crate's description.
macro_rules! backend {
    ($name:literal, $table:literal, $feature:literal, $kind:path) => {
        Entry {
            name: $name,
            table: $table,
            feature: $feature,
            kind: {
                #[cfg(feature = $feature)]
                let kind: Option<&'static dyn BackendKind> = Some(&$kind);
                #[cfg(not(feature = $feature))]
                let kind: Option<&'static dyn BackendKind> = None;
                kind
            },
        }
    };
}

/// Every backend, in the order `--help` lists them.
pub fn catalogue() -> Catalogue {
    Catalogue::new(vec![
        Entry {
            name: "local",
            table: "local",
            feature: "",
            kind: Some(&codalab_wm_core::local::KIND),
        },
        backend!(
            "slurm-batch",
            "slurm_batch",
            "slurm",
            codalab_wm_slurm::KIND
        ),
        backend!("aws-batch", "aws_batch", "aws", codalab_wm_aws::KIND),
        backend!(
            "azure-batch",
            "azure_batch",
            "azure",
            codalab_wm_azure::KIND
        ),
        backend!("kubernetes", "kubernetes", "k8s", codalab_wm_k8s::KIND),
        backend!("gce", "gce", "gce", codalab_wm_gce::KIND),
    ])
}

/// A backend named on the command line, with the flags given for it.
#[derive(Debug)]
pub struct BackendCommand {
    /// The backend.
    pub kind: &'static dyn BackendKind,
    /// Its flags given, as its table's keys.
    pub flags: serde_json::Value,
    /// The manager's process flags given after the backend name.
    pub process: ProcessArgs,
}

impl BackendCommand {
    /// The subcommand of `kind`: its own flags and the manager's process flags (whose doc
    /// must not replace the backend's).
    pub fn command(kind: &dyn BackendKind) -> Command {
        let own = kind.command();
        let (about, long_about) = (own.get_about().cloned(), own.get_long_about().cloned());
        let command = ProcessArgs::augment_args(own);
        let command = match about {
            Some(about) => command.about(about),
            None => command,
        };
        match long_about {
            Some(long_about) => command.long_about(long_about),
            None => command,
        }
    }
}

impl FromArgMatches for BackendCommand {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let (name, sub) = matches.subcommand().ok_or_else(|| {
            clap::Error::raw(clap::error::ErrorKind::MissingSubcommand, "no backend")
        })?;
        let kind = catalogue()
            .kinds()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                clap::Error::raw(
                    clap::error::ErrorKind::InvalidSubcommand,
                    format!("unknown backend `{name}`"),
                )
            })?;
        Ok(Self {
            kind,
            flags: kind.given_flags(sub)?,
            process: ProcessArgs::from_arg_matches(sub)?,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Subcommand for BackendCommand {
    fn augment_subcommands(command: Command) -> Command {
        catalogue().kinds().fold(command, |command, kind| {
            command.subcommand(Self::command(kind))
        })
    }

    fn augment_subcommands_for_update(command: Command) -> Command {
        Self::augment_subcommands(command)
    }

    fn has_subcommand(name: &str) -> bool {
        catalogue().kinds().any(|k| k.name() == name)
    }
}

/// This program's backends and the help of its flags, for the config file tooling.
pub fn program() -> Program {
    Program {
        catalogue: catalogue(),
        top_docs: flag_docs::<GlobalArgs>(),
        worker_docs: flag_docs::<WorkerArgs>(),
    }
}
