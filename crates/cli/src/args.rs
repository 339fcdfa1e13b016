//! Command-line flags of the manager: every flag of upstream's `cl-worker-manager`, same names,
//! same defaults, same meaning, plus a few of our own. Flags are optional here so that a flag
//! given overrides the config file and environment, and a flag not given does not. (Each
//! backend's flags are its config type's: `codalab_wm_core::describe`.)

use clap::ValueHint;
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

/// Flags that apply to every backend.
#[derive(Debug, Default, clap::Args, Serialize)]
pub struct GlobalArgs {
    /// URL of the CodaLab server, <http|https>://<hostname>[:<port>]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,

    /// URL the workers use to reach the server when it differs from --server (an address inside the cluster, a proxy) [default: --server]
    #[arg(long = "worker-server", value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_server: Option<String>,

    /// Accepted for compatibility with upstream (this manager never writes session state)
    #[arg(long = "temp-session")]
    #[serde(skip)]
    pub temp_session: bool,

    /// Minimum number of workers
    #[arg(long = "min-workers")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_workers: Option<u32>,

    /// Maximum number of workers
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

    /// Number of seconds to wait between checks
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

    /// Minimum time to wait between launching workers, in seconds
    #[arg(long = "min-seconds-between-workers")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_seconds_between_workers: Option<u64>,

    /// compat: upstream's rules (one launch per tick); target: absolute target with burst launches
    #[arg(long = "launch-mode", value_parser = parse_launch_mode)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch_mode: Option<LaunchMode>,

    /// Launches per tick at most, with --launch-mode target
    #[arg(long = "max-launches-per-tick")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_launches_per_tick: Option<u32>,

    /// Seconds a running worker job whose worker has never checked in with the server may run before it is stopped and replaced, with --launch-mode target
    #[arg(long = "worker-checkin-timeout")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_checkin_timeout: Option<u64>,

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

    /// Log format
    #[arg(long = "log-format", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,

    /// Serve the dashboard at /, /metrics (Prometheus), /healthz (ready), /livez (alive) and /status on this address, e.g. 127.0.0.1:9464 [default: off]
    #[arg(long, value_name = "ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<std::net::SocketAddr>,

    /// Host names the --listen server answers besides IP addresses and localhost (comma-separated, no port), against DNS rebinding [default: on a loopback address, none; on another, any]
    #[arg(long = "listen-hosts", value_name = "HOST", value_delimiter = ',')]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen_hosts: Option<Vec<String>>,

    /// Directory of the launch records: which jobs this manager launched (it stops no other), which checked in, the budget's day; keep it across restarts [default: $STATE_DIRECTORY/records under systemd, else $XDG_STATE_HOME/codalab-wm/records or ~/.local/state/codalab-wm/records]
    #[arg(long = "record-dir", value_name = "DIR", value_hint = ValueHint::DirPath)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record_dir: Option<PathBuf>,
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
            listen_hosts,
            verbose,
            record_dir,
        } = later;
        self.config = config.or(self.config.take());
        self.password_file = password_file.or(self.password_file.take());
        self.exit_after_num_failed = exit_after_num_failed.or(self.exit_after_num_failed);
        self.dry_run |= dry_run;
        self.ca_cert = ca_cert.or(self.ca_cert.take());
        self.insecure_skip_tls_verify |= insecure_skip_tls_verify;
        self.log_format = log_format.or(self.log_format);
        self.listen = listen.or(self.listen);
        self.listen_hosts = listen_hosts.or(self.listen_hosts.take());
        self.record_dir = record_dir.or(self.record_dir.take());
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

    /// Workers wait this long for extra runs before quitting, in seconds
    #[arg(long = "worker-idle-seconds")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_seconds: Option<u64>,

    /// Times a worker retries downloading dependencies after a failure
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

    /// The CodaLab worker executable to run
    #[arg(long = "worker-executable")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executable: Option<String>,

    /// Shared memory size in GB of the run containers started by the workers
    #[arg(long = "worker-shared-memory-size-gb")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_memory_size_gb: Option<u64>,

    /// The workers are preemptible: CodaLab stages their runs again when they go offline.
    /// Given by the manager to GCE Spot workers and pools with a `fallback` without asking
    #[arg(long = "worker-preemptible")]
    #[serde(skip_serializing_if = "is_false")]
    pub preemptible: bool,

    /// A variable of the manager's environment the workers get too (repeat or separate with
    /// commas); besides these they get only PATH, HOME, locale, TZ, DOCKER_*, proxies, CA
    /// bundles and their CodaLab credentials
    #[arg(long = "worker-env", value_delimiter = ',', value_name = "NAME")]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}
