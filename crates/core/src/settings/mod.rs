//! The manager's settings, layered with figment: built-in defaults, then `--config FILE`
//! (TOML), then `CODALAB_WM_*` environment variables (`__` separates tables:
//! `CODALAB_WM_WORKER__TAG`, `CODALAB_WM_SLURM_BATCH__PARTITION`), then command-line flags.
//! Unknown keys are errors that name the key.
//!
//! Instead of one backend, the config file can declare several pools, served by one manager
//! (see `codalab_wm_core::pools`); each pool's backend settings go in a sub-table named like
//! the backend's top-level table:
//!
//! ```toml
//! [[pools]]
//! name = "cpu"                # letters, digits, `_`
//! backend = "slurm-batch"
//! max = 20                    # min = 0, max = 10 by default
//! cost = 1                    # the cheapest fitting pool gets a bundle (ties: file order)
//! pending_timeout = 900       # stop jobs pending longer, the next fitting pool takes over
//! max_launches_per_tick = 5   # launch_mode = "target" is the default for pools
//! [pools.slurm_batch]
//! partition = "cpu"
//! gpus = 0
//!
//! [[pools]]
//! name = "gpu"
//! backend = "slurm-batch"
//! cost = 10
//! tag = "gpu"                 # bundles with request_queue = "gpu" need this pool
//! [pools.slurm_batch]
//! partition = "gpu"
//! gpus = 1
//! ```
//!
//! A Slurm pool without `job_name` gets `codalab-slurm-worker-<pool>` and a local pool without
//! `state_dir` its own subdirectory, so that pools never adopt each other's jobs (each backend
//! says so itself: `BackendConfig::placement_defaults`). Other backends must be given distinct
//! queues, jobs or namespaces per pool.
//!
//! The backend tables (`[slurm_batch]`, `[pools.local]` …) are not fields here: the backends
//! are known at run time ([`crate::describe::Catalogue`]), and each reads its own table.

use crate::LaunchMode;
use crate::command::WorkerOptions;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

mod bounds;
mod edit;
mod load;
mod pool_keys;
pub use crate::error::{ENV_PREFIX, invalid, suggestion};
pub use bounds::MAX_SECONDS;
pub use edit::Edit;
pub use load::Layers;
pub use pool_keys::{PoolKey, PoolRules};

/// Output format of the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Every global setting, as the config file spells it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// URL of the CodaLab server.
    pub server: String,
    /// URL the workers use to reach the server, when it differs from `server`.
    pub worker_server: Option<String>,
    /// Accepted for compatibility with upstream; this manager never writes session state.
    pub temp_session: bool,
    /// Minimum number of workers.
    pub min_workers: u32,
    /// Maximum number of workers.
    pub max_workers: u32,
    /// Extra search keywords.
    pub search: Vec<String>,
    /// Debug logging.
    pub verbose: bool,
    /// Seconds between ticks.
    pub sleep_time: u64,
    /// Re-execute after this many seconds.
    pub restart_after_seconds: Option<u64>,
    /// Do not prefilter bundles against the worker shape.
    pub no_prefilter: bool,
    /// Run one tick and exit.
    pub once: bool,
    /// Minimum seconds between two launches.
    pub min_seconds_between_workers: u64,
    /// File with the CodaLab user name (line 1) and password (line 2).
    pub password_file: Option<PathBuf>,
    /// Exit (non-zero) after more than this many failed launches.
    pub exit_after_num_failed: Option<u32>,
    /// Render launches without submitting.
    pub dry_run: bool,
    /// Extra CA certificate (PEM) for the CodaLab server.
    pub ca_cert: Option<PathBuf>,
    /// Accept any TLS certificate from the CodaLab server.
    pub insecure_skip_tls_verify: bool,
    /// Log format.
    pub log_format: LogFormat,
    /// Serve `/metrics`, `/healthz`, `/status` and the dashboard at `/` on this address
    /// (`--listen`); off when unset.
    pub listen: Option<std::net::SocketAddr>,
    /// Host names (no port) the `--listen` server answers besides IP addresses and
    /// `localhost` (`--listen-hosts`), against DNS rebinding; empty: any name on a
    /// non-loopback address, none on a loopback one (`codalab_wm_app::listen::HostRule`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listen_hosts: Vec<String>,
    /// Where the manager keeps each pool's launch record (which jobs it launched, which
    /// checked in, the budget's day) across restarts (`--record-dir`); unset:
    /// `records` in [`default_state_dir`].
    pub record_dir: Option<PathBuf>,
    /// Days of the queue's history kept in `history` under the record dir, for `advise`
    /// ([`crate::history`]); 0: no history.
    pub history_days: u32,
    /// Megabytes the history may take at most (the oldest days go first).
    pub history_max_mb: u64,
    /// Launch mode of the single backend (`--launch-mode`): compat (upstream) or target.
    pub launch_mode: LaunchMode,
    /// Launches per tick at most in target mode (`--max-launches-per-tick`).
    pub max_launches_per_tick: u32,
    /// Seconds a running worker job whose worker has never checked in with the server may run
    /// before it is lost, stopped and replaced (`--worker-checkin-timeout`; target mode).
    pub worker_checkin_timeout: u64,
    /// Worker-hours per rolling 24 hours over all pools; launches stop when reached.
    pub max_worker_hours_per_day: Option<f64>,
    /// Cost per rolling 24 hours over all pools (pools with `cost_per_hour`).
    pub max_cost_per_day: Option<f64>,
    /// What one worker-hour of the single backend costs (pools set their own).
    pub cost_per_hour: Option<f64>,
    /// `[[notify]]`: webhooks told about events.
    pub notify: Vec<crate::notify::NotifySettings>,
    /// The backend to run when no subcommand is given.
    pub backend: Option<String>,
    /// `[[pools]]`: several pools served by one manager (instead of one backend).
    pub pools: Vec<PoolSettings>,
    /// The `cl-worker` settings (`--worker-*`).
    pub worker: WorkerSettings,
}

impl Default for Settings {
    fn default() -> Self {
        let limits = crate::policy::PolicyConfig::default();
        Self {
            server: crate::DEFAULT_SERVER.to_owned(),
            worker_server: None,
            temp_session: true,
            min_workers: limits.min_workers,
            max_workers: limits.max_workers,
            search: Vec::new(),
            verbose: false,
            sleep_time: 5,
            restart_after_seconds: None,
            no_prefilter: false,
            once: false,
            min_seconds_between_workers: limits.min_seconds_between_workers,
            password_file: None,
            exit_after_num_failed: None,
            dry_run: false,
            ca_cert: None,
            insecure_skip_tls_verify: false,
            log_format: LogFormat::Text,
            listen: None,
            listen_hosts: Vec::new(),
            record_dir: None,
            history_days: crate::history::HistoryLimits::default().days,
            history_max_mb: crate::history::HistoryLimits::default().max_bytes >> 20,
            launch_mode: LaunchMode::Compat,
            max_launches_per_tick: 1,
            worker_checkin_timeout: crate::checkin::DEFAULT_CHECKIN_TIMEOUT.as_secs(),
            max_worker_hours_per_day: None,
            max_cost_per_day: None,
            cost_per_hour: None,
            notify: Vec::new(),
            backend: None,
            pools: Vec::new(),
            worker: WorkerSettings::default(),
        }
    }
}

impl Settings {
    /// The URL the workers use to reach the server: `worker_server`, else `server`.
    pub fn worker_server(&self) -> &str {
        self.worker_server.as_deref().unwrap_or(&self.server)
    }

    /// The directory of the launch records: `record_dir`, else `records` in
    /// [`default_state_dir`].
    pub fn record_dir(&self) -> PathBuf {
        (self.record_dir.clone()).unwrap_or_else(|| default_state_dir().join("records"))
    }

    /// The history's directory (`history` in the record dir) and limits, unless
    /// `history_days` is 0.
    pub fn history(&self) -> Option<(PathBuf, crate::history::HistoryLimits)> {
        let limits = crate::history::HistoryLimits {
            days: self.history_days,
            max_bytes: self.history_max_mb.saturating_mul(1 << 20),
        };
        (self.history_days > 0).then(|| (self.record_dir().join("history"), limits))
    }

    /// Each of `listen_hosts` is a host name ([`is_host_name`]); the error
    /// names the first that is not.
    pub fn check_listen_hosts(&self) -> Result<(), String> {
        let bad = |name: &&String| !is_host_name(name);
        match self.listen_hosts.iter().find(bad) {
            Some(name) => Err(format!(
                "`listen_hosts` (--listen-hosts): {name:?} is not a host name; give names without port or scheme, e.g. wm.example.org"
            )),
            None => Ok(()),
        }
    }
}

/// The manager's default state dir (launch records, the `local` backend's workers):
/// `$STATE_DIRECTORY` (the first of the dirs systemd's `StateDirectory=` gives a service,
/// itself), else `$XDG_STATE_HOME/codalab-wm`, else `~/.local/state/codalab-wm`, else
/// `codalab-wm` in the temporary directory (which `config check` warns about: a private or
/// cleaned `/tmp` loses the records).
pub fn default_state_dir() -> PathBuf {
    state_dir_from(|name| std::env::var_os(name))
}

/// [`default_state_dir`] with the environment given by `var`.
fn state_dir_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    let set = |name: &str| var(name).filter(|value| !value.is_empty());
    if let Some(dirs) = set("STATE_DIRECTORY") {
        // systemd joins several StateDirectory= entries with ':'.
        let first = dirs.to_string_lossy().split(':').next().map(PathBuf::from);
        if let Some(first) = first.filter(|dir| dir.is_absolute()) {
            return first;
        }
    }
    let base = set("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("codalab-wm")
}

/// Whether `dir` lies in the temporary directory (`$TMPDIR`, `/tmp`, `/var/tmp`), which a
/// systemd unit's `PrivateTmp=` or a reboot empties.
pub fn is_under_temp_dir(dir: &std::path::Path) -> bool {
    let temp = [std::env::temp_dir(), "/tmp".into(), "/var/tmp".into()];
    temp.iter().any(|t| dir.starts_with(t))
}

/// Creates `dir` and its missing parents, private (0700), if it does not exist (the state
/// dirs: launch records, the `local` backend's workers).
pub(crate) fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// One `[[pools]]` entry: its rules, and its backend's settings in the sub-table named like
/// the backend's top-level table (`[pools.slurm_batch]`, `[pools.local]` …).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolSettings {
    /// The pool's own keys.
    #[serde(flatten)]
    pub rules: PoolRules,
    /// Every other key: the backend sub-table, or a mistake the layout names.
    #[serde(flatten)]
    pub tables: BTreeMap<String, serde_json::Value>,
}

/// The `[worker]` table: the `--worker-*` flags. Its server is always the global `server`
/// ([`WorkerOptions::for_server`]).
pub type WorkerSettings = WorkerOptions;

/// Whether `name` may be given to `--listen-hosts`: letters, digits, `.`, `-` and `_`, no
/// port or scheme (the `Host` of a request is compared without its port).
pub fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && (name.chars()).all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

#[cfg(test)]
mod state_dir_tests {
    use super::*;
    use std::ffi::OsString;
    use std::path::Path;

    fn with(vars: &[(&str, &str)]) -> PathBuf {
        state_dir_from(|name| {
            (vars.iter())
                .find(|(key, _)| *key == name)
                .map(|(_, value)| OsString::from(value))
        })
    }

    #[test]
    fn systemds_state_directory_comes_first_and_is_the_dir_itself() {
        let all = [
            ("STATE_DIRECTORY", "/var/lib/codalab-wm:/var/lib/other"),
            ("XDG_STATE_HOME", "/xdg"),
            ("HOME", "/home/u"),
        ];
        assert_eq!(with(&all), Path::new("/var/lib/codalab-wm"));
        assert_eq!(with(&all[1..]), Path::new("/xdg/codalab-wm"));
        assert_eq!(
            with(&all[2..]),
            Path::new("/home/u/.local/state/codalab-wm")
        );
        let relative = [("STATE_DIRECTORY", "relative"), ("HOME", "/home/u")];
        assert_eq!(
            with(&relative),
            Path::new("/home/u/.local/state/codalab-wm")
        );
        assert_eq!(with(&[]), std::env::temp_dir().join("codalab-wm"));
        assert!(is_under_temp_dir(&with(&[])));
        assert!(!is_under_temp_dir(&with(&all)));
    }
}
