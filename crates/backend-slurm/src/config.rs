//! The options of the Slurm backend: upstream's `slurm-batch` flags plus the SSH login node.
//!
//! [`SlurmConfig`] is what the config file's `[slurm_batch]` table and the flags deserialize
//! into; [`SlurmConfig::validate`] checks it once and resolves the defaults that depend on the
//! machine (the current user), giving the [`Settings`] the backend runs with.

use codalab_wm_backend::command::{MAX_CHECKIN_ID_LEN, checkin_id};
use codalab_wm_backend::{Error, Result, WorkerShape};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Settings of the `slurm-batch` backend, with upstream's names and defaults: the flags of
/// `cl-worker-manager slurm-batch` and the `[slurm_batch]` table (defaults written once, in the
/// flags). `--password-file`, `--dry-run` and `--exit-after-num-failed` are global flags: the
/// password file reaches this table through its placement defaults (`describe.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct SlurmConfig {
    /// Name for the jobs this manager submits, as in `<user>-<job-name>-<id>`
    #[arg(long, default_value = "codalab-slurm-worker")]
    pub job_name: String,
    /// The worker nodes to run jobs on
    #[arg(long)]
    pub nodelist: Option<String>,
    /// A comma-separated list of nodes to explicitly exclude from running jobs
    #[arg(long)]
    pub exclude: Option<String>,
    /// Name of the Slurm partition to submit to (required)
    #[arg(long)]
    pub partition: Option<String>,
    /// Number of CPUs for each worker
    #[arg(long, default_value_t = 1)]
    pub cpus: u32,
    /// Number of GPUs for each worker; 0 requests none
    #[arg(long, default_value_t = 1)]
    pub gpus: u32,
    /// GPU type to request from Slurm (`--gres=gpu:<type>:<n>`)
    #[arg(long)]
    pub gpu_type: Option<String>,
    /// Node features to request from Slurm (`--constraint`)
    #[arg(long)]
    pub constraint: Option<String>,
    /// Memory (in MiB) for each worker
    #[arg(long, default_value_t = 2048)]
    pub memory_mb: u64,
    /// Time limit of each worker job, in minutes or days-hours
    #[arg(long, default_value = "10-0")]
    pub time: String,
    /// Slurm user whose jobs are tracked [default: the current user; over SSH the SSH user]
    #[arg(long)]
    pub user: Option<String>,
    /// A file with the CodaLab user name and password on two lines, passed to every worker as
    /// `--password-file` (the global `password_file` when unset); readable at the same path
    /// on the compute nodes. Required over SSH: the password never travels over SSH.
    #[arg(skip)]
    pub password_file: Option<PathBuf>,
    /// Directory for the job scripts and logs, one subdirectory per worker
    #[arg(long, default_value = "slurm-worker-scratch")]
    pub slurm_work_dir: PathBuf,
    /// Slurm account to charge the jobs to (no default: no --account line when unset)
    #[arg(long)]
    pub account: Option<String>,
    /// Run the Slurm commands on this login node over SSH, HOST or HOST:PORT (needs --password-file)
    #[arg(long, value_name = "HOST[:PORT]")]
    pub ssh_host: Option<String>,
    /// User to log in as on the SSH host [default: the current user]
    #[arg(long)]
    pub ssh_user: Option<String>,
    /// Private key to log in with [default: ~/.ssh/id_ed25519]
    #[arg(long, value_name = "PATH")]
    pub ssh_key: Option<PathBuf>,
    /// known_hosts file the SSH host key must be in [default: ~/.ssh/known_hosts]
    #[arg(long, value_name = "PATH")]
    pub ssh_known_hosts: Option<PathBuf>,
    /// Seconds a Slurm command (`squeue`, `sbatch`, `scancel` …) may run before it is killed
    /// and the step retried on a later tick (1 to 3600; over SSH each call has a 60 s limit).
    #[arg(skip = crate::transport::DEFAULT_TIMEOUT.as_secs())]
    pub command_timeout_seconds: u64,
}

/// The longest `command_timeout_seconds` allowed.
pub const MAX_COMMAND_TIMEOUT_SECONDS: u64 = 3600;

impl Default for SlurmConfig {
    fn default() -> Self {
        codalab_wm_backend::describe::defaults()
    }
}

/// Where the Slurm commands run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// On this machine.
    Local,
    /// On a login node over SSH.
    Ssh(SshTarget),
}

/// A login node and how to log in to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// Host name or address.
    pub host: String,
    /// TCP port (22 unless given as `HOST:PORT`).
    pub port: u16,
    /// Login user.
    pub user: String,
    /// Private key file.
    pub key: PathBuf,
    /// known_hosts file the host key must be in.
    pub known_hosts: PathBuf,
}

/// A validated [`SlurmConfig`] with every default resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The options as given (partition checked to be present).
    pub config: SlurmConfig,
    /// The partition.
    pub partition: String,
    /// The Slurm user whose jobs are listed and who appears in job names.
    pub user: String,
    /// Where the commands run.
    pub target: Target,
}

impl Settings {
    /// `<user>-<job-name>-`: the name prefix of every job this manager owns.
    pub fn job_name_prefix(&self) -> String {
        format!("{}-{}-", self.user, self.config.job_name)
    }

    /// Refuses a user and job name whose workers' check-in ids (`host-<user>-<job_name>-<32
    /// hex>`) the server cannot keep: such a worker never matches its job.
    fn check_worker_id_length(&self) -> Result<()> {
        let worker_id = format!(
            "{}{}",
            self.job_name_prefix(),
            codalab_wm_backend::backend::new_unique()
        );
        let len = checkin_id(&worker_id).len();
        let Some(over) = len.checked_sub(MAX_CHECKIN_ID_LEN).filter(|o| *o > 0) else {
            return Ok(());
        };
        let job_name = &self.config.job_name;
        let why = format!(
            "with user {:?} makes worker ids of {len} characters (`host-<user>-<job_name>-<32 \
             hex>`), over the {MAX_CHECKIN_ID_LEN} the CodaLab server keeps (the worker would \
             never be matched): shorten --job-name to at most {} characters",
            self.user,
            job_name.len().saturating_sub(over)
        );
        Err(invalid("job_name", job_name, &why))
    }

    /// The resources of one worker job.
    pub fn worker_shape(&self) -> WorkerShape {
        WorkerShape::from_flags(self.config.cpus, self.config.gpus, self.config.memory_mb)
    }
}

fn invalid(key: &str, value: &str, why: &str) -> Error {
    Error::InvalidConfig(format!("slurm_batch `{key}` = {value:?} {why}"))
}

/// Values that end up in `#SBATCH --key=value` lines or job names must be one word.
fn check_word(key: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(invalid(key, value, "must not be empty"));
    }
    if value
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '|')
    {
        return Err(invalid(
            key,
            value,
            "must not contain whitespace, control characters or `|`",
        ));
    }
    Ok(())
}

fn check_optional_word(key: &str, value: Option<&String>) -> Result<()> {
    // Empty means unset, as upstream's `''` defaults.
    value
        .filter(|v| !v.is_empty())
        .map_or(Ok(()), |v| check_word(key, v))
}

/// The user running this process: `$USER`, `$LOGNAME`, then `id -un`.
pub fn current_user() -> Option<String> {
    let from_env = ["USER", "LOGNAME"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok())
        .find(|u| !u.is_empty());
    from_env.or_else(|| {
        let output = std::process::Command::new("id").arg("-un").output().ok()?;
        let name = String::from_utf8(output.stdout).ok()?.trim().to_owned();
        (output.status.success() && !name.is_empty()).then_some(name)
    })
}

fn home_file(name: &str) -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    home.join(".ssh").join(name)
}

/// Splits `HOST[:PORT]`; an IPv6 address goes in brackets (`[::1]:2222`).
pub fn parse_host_port(value: &str) -> Result<(String, u16)> {
    let bad = || invalid("ssh_host", value, "is not HOST or HOST:PORT");
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        (host, after.strip_prefix(':'))
    } else {
        match value.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port)),
            _ => (value, None),
        }
    };
    let port = port.map_or(Ok(22), |p| p.parse::<u16>().map_err(|_| bad()))?;
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}

impl SlurmConfig {
    /// Checks every option and resolves the defaults that depend on this machine.
    pub fn validate(&self) -> Result<Settings> {
        let partition = self.partition.clone().ok_or_else(|| {
            Error::InvalidConfig(
                "slurm-batch needs --partition (or `partition` in [slurm_batch])".to_owned(),
            )
        })?;
        check_word("partition", &partition)?;
        check_word("job_name", &self.job_name)?;
        check_word("time", &self.time)?;
        for (key, value) in [
            ("nodelist", &self.nodelist),
            ("exclude", &self.exclude),
            ("gpu_type", &self.gpu_type),
            ("constraint", &self.constraint),
            ("account", &self.account),
            ("user", &self.user),
        ] {
            check_optional_word(key, value.as_ref())?;
        }
        if self.cpus == 0 {
            return Err(invalid("cpus", "0", "must be at least 1"));
        }
        if self.memory_mb == 0 {
            return Err(invalid("memory_mb", "0", "must be at least 1"));
        }
        if !(1..=MAX_COMMAND_TIMEOUT_SECONDS).contains(&self.command_timeout_seconds) {
            let value = self.command_timeout_seconds.to_string();
            let why = format!("must be between 1 and {MAX_COMMAND_TIMEOUT_SECONDS} seconds");
            return Err(invalid("command_timeout_seconds", &value, &why));
        }
        check_word("slurm_work_dir", &self.slurm_work_dir.to_string_lossy())?;
        if let Some(file) = &self.password_file {
            check_word("password_file", &file.to_string_lossy())?;
        }
        let target = self.target()?;
        let user = match (&self.user, &target) {
            (Some(user), _) if !user.is_empty() => user.clone(),
            (_, Target::Ssh(ssh)) => ssh.user.clone(),
            (_, Target::Local) => current_user().ok_or_else(|| {
                Error::InvalidConfig("cannot tell the current user: set slurm_batch `user`".into())
            })?,
        };
        check_word("user", &user)?;
        let settings = Settings {
            config: self.clone(),
            partition,
            user,
            target,
        };
        settings.check_worker_id_length()?;
        Ok(settings)
    }

    fn target(&self) -> Result<Target> {
        let Some(host) = &self.ssh_host else {
            return Ok(Target::Local);
        };
        let (host, port) = parse_host_port(host)?;
        if self.password_file.is_none() {
            return Err(Error::InvalidConfig(format!(
                "slurm-batch over ssh (ssh_host = {host:?}) needs --password-file: the CodaLab password \
                 is never sent over ssh, workers read it from that file on the cluster"
            )));
        }
        let user = match &self.ssh_user {
            Some(user) => user.clone(),
            None => current_user().ok_or_else(|| {
                Error::InvalidConfig(
                    "cannot tell the current user: set slurm_batch `ssh_user`".into(),
                )
            })?,
        };
        let key = self
            .ssh_key
            .clone()
            .unwrap_or_else(|| home_file("id_ed25519"));
        let known_hosts = self
            .ssh_known_hosts
            .clone()
            .unwrap_or_else(|| home_file("known_hosts"));
        Ok(Target::Ssh(SshTarget {
            host,
            port,
            user,
            key,
            known_hosts,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SlurmConfig {
        SlurmConfig {
            partition: Some("cpu".into()),
            user: Some("alice".into()),
            ..SlurmConfig::default()
        }
    }

    #[test]
    fn defaults_are_upstreams() {
        let c = SlurmConfig::default();
        assert_eq!(
            (
                c.job_name.as_str(),
                c.cpus,
                c.gpus,
                c.memory_mb,
                c.time.as_str()
            ),
            ("codalab-slurm-worker", 1, 1, 2048, "10-0")
        );
        assert_eq!(c.slurm_work_dir, PathBuf::from("slurm-worker-scratch"));
        assert_eq!(c.account, None);
    }

    #[test]
    fn partition_is_required() {
        let err = SlurmConfig::default().validate().unwrap_err().to_string();
        assert!(
            err.contains("slurm-batch needs --partition (or `partition` in [slurm_batch])"),
            "{err}"
        );
    }

    #[test]
    fn values_written_into_sbatch_lines_are_one_word() {
        let err = SlurmConfig {
            partition: Some("a b".into()),
            ..config()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration: slurm_batch `partition` = \"a b\" must not contain whitespace, \
             control characters or `|`"
        );
        let err = SlurmConfig {
            account: Some("x\ny".into()),
            ..config()
        }
        .validate()
        .unwrap_err();
        assert!(err.to_string().contains("`account`"), "{err}");
        assert!(
            SlurmConfig {
                cpus: 0,
                ..config()
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn local_settings() {
        let settings = config().validate().unwrap();
        assert_eq!(settings.target, Target::Local);
        assert_eq!(settings.job_name_prefix(), "alice-codalab-slurm-worker-");
        assert_eq!(settings.worker_shape(), WorkerShape::from_flags(1, 1, 2048));
    }

    /// The server keeps worker ids of 127 characters (#28 item 5): `host-alice-` (11), the
    /// job name, `-` and 32 hex digits; so 83 characters of job name fit and 84 do not.
    #[test]
    fn worker_ids_over_127_characters_are_refused() {
        let named = |len: usize| SlurmConfig {
            job_name: "j".repeat(len),
            ..config()
        };
        assert!(named(83).validate().is_ok());
        let err = named(84).validate().unwrap_err().to_string();
        assert!(err.contains("slurm_batch `job_name` = \"jjj"), "{err}");
        assert!(
            err.contains("with user \"alice\" makes worker ids of 128 characters"),
            "{err}"
        );
        assert!(
            err.contains("over the 127 the CodaLab server keeps"),
            "{err}"
        );
        assert!(
            err.contains("shorten --job-name to at most 83 characters"),
            "{err}"
        );
    }

    #[test]
    fn ssh_needs_a_password_file_and_takes_its_user() {
        let ssh = SlurmConfig {
            user: None,
            ssh_host: Some("login:2222".into()),
            ssh_user: Some("bob".into()),
            ..config()
        };
        let err = ssh.validate().unwrap_err().to_string();
        assert!(err.contains("needs --password-file"), "{err}");
        let settings = SlurmConfig {
            password_file: Some("/home/bob/pw".into()),
            ..ssh
        }
        .validate()
        .unwrap();
        assert_eq!(settings.user, "bob");
        let Target::Ssh(target) = settings.target else {
            panic!("not ssh")
        };
        assert_eq!(
            (target.host.as_str(), target.port, target.user.as_str()),
            ("login", 2222, "bob")
        );
    }

    #[test]
    fn host_port_forms() {
        assert_eq!(parse_host_port("h").unwrap(), ("h".into(), 22));
        assert_eq!(
            parse_host_port("127.0.0.1:2222").unwrap(),
            ("127.0.0.1".into(), 2222)
        );
        assert_eq!(parse_host_port("[::1]:23").unwrap(), ("::1".into(), 23));
        assert_eq!(parse_host_port("::1").unwrap(), ("::1".into(), 22));
        for bad in ["h:x", ":22", "h:0", "[::1"] {
            assert!(parse_host_port(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = serde_json::from_str::<SlurmConfig>(r#"{"partitoin": "cpu"}"#).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `partitoin`"),
            "{err}"
        );
    }
}
