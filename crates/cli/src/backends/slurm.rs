//! Flags and construction of the `slurm_batch` backend (workers as Slurm batch jobs, locally or
//! on a login node over SSH).
//!
//! `--password-file`, `--dry-run` and `--exit-after-num-failed` are global flags: the main
//! program puts the password file into this table (`password_file`), passes dry runs with each
//! launch and counts failed jobs itself.

use super::BackendContext;
use anyhow::Result;
use codalab_wm_core::WorkerBackend;
use codalab_wm_slurm::{SlurmBackend, SlurmConfig};
use figment::Figment;
use std::path::PathBuf;
use std::sync::Arc;

/// The config-file table (and `CODALAB_WM_SLURM_BATCH__*` env prefix) of this backend.
pub const TABLE: &str = "slurm_batch";

/// Flags of `cl-worker-manager slurm-batch`, boxed: there are many, and the subcommand enum
/// stays small.
#[derive(Debug, Default, clap::Args, serde::Serialize)]
pub struct Args {
    /// The flags themselves.
    #[command(flatten)]
    #[serde(flatten)]
    pub flags: Box<SlurmArgs>,
    /// The manager's process flags, accepted after the backend name too.
    #[command(flatten)]
    #[serde(skip)]
    pub process: crate::args::ProcessArgs,
}

/// Flags of `cl-worker-manager slurm-batch`, upstream's names. Every field is optional so it
/// layers over the config file; `--partition` is checked when the backend is built.
#[derive(Debug, Default, clap::Args, serde::Serialize)]
pub struct SlurmArgs {
    /// Name for the jobs this manager submits, as in `<user>-<job-name>-<id>` [default: codalab-slurm-worker]
    #[arg(long = "job-name")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// The worker nodes to run jobs on
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodelist: Option<String>,
    /// A comma-separated list of nodes to explicitly exclude from running jobs
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude: Option<String>,
    /// Name of the Slurm partition to submit to (required)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Number of CPUs for each worker [default: 1]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Number of GPUs for each worker; 0 requests none [default: 1]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// GPU type to request from Slurm (`--gres=gpu:<type>:<n>`)
    #[arg(long = "gpu-type")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Node features to request from Slurm (`--constraint`)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<String>,
    /// Memory (in MiB) for each worker [default: 2048]
    #[arg(long = "memory-mb")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Time limit of each worker job, in minutes or days-hours [default: 10-0]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// Slurm user whose jobs are tracked [default: the current user; over SSH the SSH user]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Directory for the job scripts and logs, one subdirectory per worker [default: slurm-worker-scratch]
    #[arg(long = "slurm-work-dir")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm_work_dir: Option<PathBuf>,
    /// Slurm account to charge the jobs to (no default: no --account line when unset)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Run the Slurm commands on this login node over SSH, HOST[:PORT] (needs --password-file)
    #[arg(long = "ssh-host", value_name = "HOST[:PORT]")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh_host: Option<String>,
    /// User to log in as on the SSH host [default: the current user]
    #[arg(long = "ssh-user")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh_user: Option<String>,
    /// Private key to log in with [default: ~/.ssh/id_ed25519]
    #[arg(long = "ssh-key", value_name = "PATH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh_key: Option<PathBuf>,
    /// known_hosts file the SSH host key must be in [default: ~/.ssh/known_hosts]
    #[arg(long = "ssh-known-hosts", value_name = "PATH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh_known_hosts: Option<PathBuf>,
}

/// Builds the Slurm backend from the `[slurm_batch]` table.
pub async fn build(config: &Figment, context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
    let slurm: SlurmConfig = config
        .focus(TABLE)
        .extract()
        .map_err(|e| crate::diagnose::settings_error(e, Some(TABLE)))?;
    let backend = SlurmBackend::new(&slurm, Some(context.credentials.clone()))?;
    Ok(Arc::new(backend))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use codalab_wm_core::WorkerOptions;
    use codalab_wm_core::secret::{Credentials, Secret};
    use figment::providers::{Format, Serialized, Toml};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn context() -> BackendContext {
        let credentials = Credentials {
            username: "u".into(),
            password: Secret::new("p"),
        };
        BackendContext {
            credentials,
            worker: WorkerOptions::default(),
        }
    }

    fn layered(file: &str, flags: &[&str]) -> Figment {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(flags.iter().copied())).unwrap();
        Figment::from(Toml::string(file)).merge(Serialized::default(TABLE, &cli.args))
    }

    #[test]
    fn flags_override_the_file_and_unset_flags_do_not() {
        let figment = layered(
            "[slurm_batch]\npartition = \"cpu\"\ncpus = 4\naccount = \"nlp\"\n",
            &[
                "--cpus",
                "2",
                "--gpus",
                "0",
                "--ssh-host",
                "login:2222",
                "--slurm-work-dir",
                "/scratch",
            ],
        );
        let config: SlurmConfig = figment.focus(TABLE).extract().unwrap();
        assert_eq!(config.partition.as_deref(), Some("cpu"));
        assert_eq!((config.cpus, config.gpus, config.memory_mb), (2, 0, 2048));
        assert_eq!(config.account.as_deref(), Some("nlp"));
        assert_eq!(config.ssh_host.as_deref(), Some("login:2222"));
        assert_eq!(config.slurm_work_dir, PathBuf::from("/scratch"));
    }

    #[tokio::test]
    async fn partition_is_required() {
        let err = build(&layered("", &["--cpus", "2"]), &context())
            .await
            .unwrap_err();
        assert!(
            format!("{err:#}")
                .contains("slurm-batch needs --partition (or `partition` in [slurm_batch])"),
            "{err:#}"
        );
    }

    #[tokio::test]
    async fn bad_keys_are_named() {
        let err = build(
            &layered("[slurm_batch]\npartiton = \"cpu\"\n", &[]),
            &context(),
        )
        .await
        .unwrap_err();
        assert!(format!("{err:#}").contains("partiton"), "{err:#}");
        let err = build(
            &layered("[slurm_batch]\ncpus = \"many\"\n", &[]),
            &context(),
        )
        .await
        .unwrap_err();
        assert!(format!("{err:#}").contains("cpus"), "{err:#}");
    }

    #[tokio::test]
    async fn builds_with_a_partition() {
        let backend = build(
            &layered("", &["--partition", "cpu", "--user", "alice"]),
            &context(),
        )
        .await
        .unwrap();
        assert_eq!(backend.name(), "slurm-batch");
    }
}
