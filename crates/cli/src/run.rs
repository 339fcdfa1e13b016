//! Running the manager: layering the configuration, building the backend or the pools, and
//! the loop with its signals and exit codes.

use crate::args::GlobalArgs;
use crate::backends::{self, ALL_BACKENDS, BackendCommand, BackendContext, is_compiled_in};
use crate::settings::{LogFormat, Settings};
use anyhow::{Context, Result, anyhow, bail};
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient};
use codalab_wm_core::manager::Outcome;
use codalab_wm_core::policy::PolicyConfig;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::{Manager, ManagerConfig, Pool, SingleBackendFlags};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// Exit status when more launches failed than `--exit-after-num-failed` allows.
pub const EXIT_TOO_MANY_FAILURES: u8 = 3;

/// Prefix of the environment variables that set configuration keys (`__` separates tables).
pub const ENV_PREFIX: &str = "CODALAB_WM_";

/// Exit status of `--once` when its tick or a launch in it failed.
pub const EXIT_ONCE_FAILED: u8 = 1;

/// The configuration layers, lowest first.
pub fn figment(global: &GlobalArgs, backend: Option<&BackendCommand>) -> Result<Figment> {
    layered(
        global.process.config.as_deref(),
        flag_layers(global, backend),
    )
}

/// The layers from the command line (global flags, then the backend's), highest of all.
pub fn flag_layers(global: &GlobalArgs, backend: Option<&BackendCommand>) -> Figment {
    let mut flags = Figment::from(Serialized::defaults(global));
    if let Some(backend) = backend {
        flags = flags.merge(backend.flags());
    }
    flags
}

/// Defaults, then the config file at `path`, then `CODALAB_WM_*`, then `flags` (what a reload
/// reads again, with the flags given at start).
pub fn layered(path: Option<&Path>, flags: Figment) -> Result<Figment> {
    let mut figment = Figment::from(Serialized::defaults(Settings::default()));
    if let Some(path) = path {
        if !path.is_file() {
            bail!("config file {} does not exist", path.display());
        }
        crate::diagnose::file_problems(path)?;
        figment = figment.merge(Toml::file_exact(path));
    }
    // `CODALAB_WM_LOG` is the log filter (see `init_logging`), not a setting.
    figment = figment.merge(Env::prefixed(ENV_PREFIX).ignore(&["LOG"]).split("__"));
    Ok(figment.merge(flags))
}

/// The settings the layers give, with every duration in its range.
pub fn settings(figment: &Figment) -> Result<Settings> {
    let settings: Settings = figment
        .extract()
        .map_err(|e| crate::diagnose::settings_error(e, None))?;
    settings
        .check_durations()
        .map_err(|e| anyhow!("invalid configuration: {e}"))?;
    Ok(settings)
}

/// Runs the manager until it is told to stop.
pub async fn run(global: GlobalArgs, backend: Option<BackendCommand>) -> Result<ExitCode> {
    let figment = figment(&global, backend.as_ref())?;
    let settings = settings(&figment)?;
    init_logging(settings.verbose, settings.log_format);
    let listener = match settings.listen {
        Some(addr) => Some(crate::http::bind(addr).await?),
        None => None,
    };
    let flags = flag_layers(&global, backend.as_ref());
    let start = figment.clone();
    let mut manager = build_manager(backend, figment, &settings).await?;
    crate::commands::config::reload::install(
        &mut manager,
        global.process.config,
        flags,
        &start,
        &settings,
    )?;
    if let Some(listener) = listener {
        let sleep_time = Duration::from_secs(settings.sleep_time);
        crate::http::spawn(listener, manager.subscribe_status(), sleep_time);
    }
    let shutdown = shutdown_signal()?;
    let outcome = match manager.run(settings.once, shutdown).await {
        Ok(outcome) => outcome,
        // A refused password (1) and a configuration the server cannot serve (2) keep their own
        // exit statuses; any other failed --once tick exits 1.
        Err(
            error @ (codalab_wm_core::Error::Unauthenticated { .. }
            | codalab_wm_core::Error::InvalidConfig(_)),
        ) => return Err(error.into()),
        Err(error) if settings.once => {
            // The error may quote the server: no raw control characters.
            let said = crate::log_escape::escape(&error.to_string(), false);
            eprintln!("error: --once: the tick failed: {said}");
            return Ok(ExitCode::from(EXIT_ONCE_FAILED));
        }
        Err(error) => return Err(error.into()),
    };
    match outcome {
        Outcome::Shutdown => {
            tracing::info!("shutdown requested; exiting");
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Once { launch_errors: 0 } => Ok(ExitCode::SUCCESS),
        Outcome::Once { launch_errors } => {
            eprintln!(
                "error: --once: {launch_errors} worker launch(es) failed (see the log above)"
            );
            Ok(ExitCode::from(EXIT_ONCE_FAILED))
        }
        Outcome::Restart => Err(restart()),
        Outcome::TooManyFailures { failed, limit } => {
            eprintln!(
                "error: {failed} worker jobs failed to start, more than --exit-after-num-failed {limit}"
            );
            Ok(ExitCode::from(EXIT_TOO_MANY_FAILURES))
        }
    }
}

/// The manager the settings describe: one backend (the subcommand or `backend = "…"`) or
/// the `[[pools]]` of the config file.
pub async fn build_manager(
    backend: Option<BackendCommand>,
    figment: Figment,
    settings: &Settings,
) -> Result<Manager> {
    if settings.pools.is_empty() {
        return single_backend(backend, figment, settings).await;
    }
    if backend.is_some() || settings.backend.is_some() {
        bail!(
            "choose either a backend (a subcommand or `backend = \"…\"`) or [[pools]] in the config file, not both"
        );
    }
    let config = manager_config(settings);
    let credentials = credentials(settings.password_file.as_deref())?;
    let pools = build_pools(settings, &credentials).await?;
    let client =
        CodaLabClient::with_options(&settings.server, credentials, &client_options(settings)?)?;
    let server = codalab_wm_core::secret::redact_url(client.server()).into_owned();
    let user = client.username().to_owned();
    let count = pools.len();
    let mut manager = Manager::with_pools(config, client, pools)?;
    manager.on_ready(move || {
        tracing::info!(
            server,
            user,
            pools = count,
            "started worker manager; {count} pools"
        );
    });
    Ok(manager)
}

/// The manager settings shared by both modes.
pub fn manager_config(settings: &Settings) -> ManagerConfig {
    ManagerConfig {
        search: settings.search.clone(),
        sleep_time: Duration::from_secs(settings.sleep_time),
        // 0 is off, as upstream (`if args.restart_after_seconds and …`).
        restart_after: settings
            .restart_after_seconds
            .filter(|s| *s > 0)
            .map(Duration::from_secs),
        exit_after_num_failed: settings.exit_after_num_failed,
        dry_run: settings.dry_run,
        ..ManagerConfig::default()
    }
}

/// The flags of upstream's single-backend mode, which shape its one pool.
pub fn single_backend_flags(settings: &Settings) -> SingleBackendFlags {
    SingleBackendFlags {
        limits: PolicyConfig {
            min_workers: settings.min_workers,
            max_workers: settings.max_workers,
            min_seconds_between_workers: settings.min_seconds_between_workers,
        },
        no_prefilter: settings.no_prefilter,
        launch_mode: settings.launch_mode,
        max_launches_per_tick: settings.max_launches_per_tick,
        ..SingleBackendFlags::default()
    }
}

/// Upstream's mode: one backend, from the subcommand or `backend = "…"`.
pub async fn single_backend(
    command: Option<BackendCommand>,
    mut figment: Figment,
    settings: &Settings,
) -> Result<Manager> {
    let backend_command = match command {
        Some(command) => command,
        None => {
            let names: Vec<&str> = ALL_BACKENDS.iter().map(|(n, _)| *n).collect();
            let name = settings.backend.as_deref().ok_or_else(|| {
                anyhow!("no backend given: name one of {} (or set `backend = \"…\"` or [[pools]] in the config file)", names.join(", "))
            })?;
            if let Some((name, feature)) = ALL_BACKENDS
                .iter()
                .find(|(n, _)| *n == name && !is_compiled_in(n))
            {
                bail!("backend `{name}` is not compiled in: rebuild with `--features {feature}`");
            }
            BackendCommand::from_name(name).ok_or_else(|| {
                anyhow!(
                    "unknown backend `{name}` in `backend`: use one of {}",
                    names.join(", ")
                )
            })?
        }
    };
    let config = manager_config(settings);
    let flags = single_backend_flags(settings);
    flags.validate().map_err(|e| anyhow!(e))?;
    let worker = settings.worker.for_server(&settings.server);
    let credentials = credentials(settings.password_file.as_deref())?;
    if let Some(path) = &settings.password_file {
        // Backends that pass the file on to workers (Slurm) read it from their own table.
        figment = figment.merge(Serialized::default("slurm_batch.password_file", path));
    }
    let context = BackendContext {
        credentials: credentials.clone(),
        worker: worker.clone(),
    };
    let backend = backend_command
        .build(&figment, &context)
        .await
        .with_context(|| format!("cannot set up the {} backend", backend_command.name()))?;
    let pool = backend.name().to_owned();
    let backend = codalab_wm_core::metrics::metered(backend, &pool);
    let (name, shape) = (
        backend.name().to_owned(),
        backend.worker_shape().to_string(),
    );
    let (min_workers, max_workers) = (flags.limits.min_workers, flags.limits.max_workers);
    let launch_mode = flags.launch_mode;
    let client =
        CodaLabClient::with_options(&settings.server, credentials, &client_options(settings)?)?;
    let server = codalab_wm_core::secret::redact_url(client.server()).into_owned();
    let user = client.username().to_owned();
    let pool = Pool::single_backend(&flags, backend, worker);
    let mut manager = Manager::new(config, client, pool);
    // Said once the server answered and took the credentials, not before.
    manager.on_ready(move || {
        tracing::info!(
            backend = name,
            server,
            user,
            min_workers,
            max_workers,
            launch_mode = %launch_mode,
            "started worker manager; workers get {shape}"
        );
    });
    Ok(manager)
}

/// The `[[pools]]` of the config file, each with its backend built by the backend's own
/// `build` on the pool's `[pools.<table>]`.
pub async fn build_pools(settings: &Settings, credentials: &Credentials) -> Result<Vec<Pool>> {
    if settings.worker.tag.is_some() || settings.worker.tag_exclusive {
        bail!(
            "with [[pools]], set `tag` and `tag_exclusive` per pool, not --worker-tag/--worker-tag-exclusive or [worker] tag"
        );
    }
    let mut pools = Vec::new();
    let mut job_names: Vec<(String, String)> = Vec::new();
    for entry in &settings.pools {
        let name = &entry.name;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("pool name `{name}` must be letters, digits and `_`");
        }
        let table = backends::table_of(&entry.backend).ok_or_else(|| {
            let names: Vec<&str> = ALL_BACKENDS.iter().map(|(n, _)| *n).collect();
            anyhow!(
                "pool {name}: unknown backend `{}`: use one of {}",
                entry.backend,
                names.join(", ")
            )
        })?;
        let mut value = serde_json::Value::Object(Default::default());
        for (given, settings) in entry.tables() {
            if given != table {
                bail!(
                    "pool {name}: [pools.{given}] does not belong to backend {}; its settings go in [pools.{table}]",
                    entry.backend
                );
            }
            value = settings.clone();
        }
        let object = value
            .as_object_mut()
            .ok_or_else(|| anyhow!("pool {name}: [pools.{table}] must be a table"))?;
        own_jobs(name, table, object, settings);
        if table == "slurm_batch" {
            let job_name = object
                .get("job_name")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned();
            job_names.push((name.clone(), job_name));
        }
        let mut worker = settings.worker.for_server(&settings.server);
        worker.tag = entry.tag.clone();
        worker.tag_exclusive = entry.tag_exclusive;
        let context = BackendContext {
            credentials: credentials.clone(),
            worker: worker.clone(),
        };
        let backend = backends::build_by_name(
            &entry.backend,
            Figment::from(Serialized::defaults(value)),
            &context,
        )
        .await
        .with_context(|| format!("cannot set up pool {name} ({})", entry.backend))?;
        let backend = codalab_wm_core::metrics::metered(backend, name);
        let policy = entry.policy(settings, backend.worker_shape());
        policy.validate().map_err(|e| anyhow!(e))?;
        tracing::info!(
            pool = %name,
            backend = backend.name(),
            min = policy.min,
            max = policy.max,
            tag = policy.tag.as_deref().unwrap_or(""),
            tag_exclusive = policy.tag_exclusive,
            cost = policy.cost,
            launch_mode = %policy.launch_mode,
            max_launches_per_tick = policy.max_launches_per_tick,
            pending_timeout_seconds = entry.pending_timeout,
            "pool {name} ready; workers get {}",
            backend.worker_shape()
        );
        pools.push(Pool {
            policy,
            backend,
            worker,
        });
    }
    for (a, job_a) in &job_names {
        for (b, job_b) in &job_names {
            if a != b && format!("{job_b}-").starts_with(&format!("{job_a}-")) {
                bail!(
                    "pools {a} and {b} would own each other's Slurm jobs: job_name `{job_a}` is a prefix of `{job_b}`; give them distinct job names"
                );
            }
        }
    }
    Ok(pools)
}

/// Keeps the jobs of two pools apart: a Slurm pool without `job_name` gets
/// `codalab-slurm-worker-<pool>`, a local pool without `state_dir` its own subdirectory; the
/// global `--password-file` reaches Slurm pools as it reaches `[slurm_batch]`.
pub fn own_jobs(
    pool: &str,
    table: &str,
    object: &mut serde_json::Map<String, serde_json::Value>,
    settings: &Settings,
) {
    match table {
        "slurm_batch" => {
            object
                .entry("job_name")
                .or_insert_with(|| format!("codalab-slurm-worker-{pool}").into());
            if let Some(path) = &settings.password_file {
                object
                    .entry("password_file")
                    .or_insert_with(|| path.display().to_string().into());
            }
        }
        "local" => {
            let dir = codalab_wm_core::local::LocalConfig::default()
                .state_dir
                .join(pool);
            object
                .entry("state_dir")
                .or_insert_with(|| dir.display().to_string().into());
        }
        _ => {}
    }
}

/// TLS options of the CodaLab connection.
pub fn client_options(settings: &Settings) -> Result<ClientOptions> {
    let mut options = ClientOptions::default();
    if let Some(path) = &settings.ca_cert {
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read --ca-cert {}", path.display()))?;
        if let Err(error) = codalab_wm_core::codalab::tls::parse_ca_certificates(&pem) {
            bail!("--ca-cert {}: {error}", path.display());
        }
        options.ca_certificates.push(pem);
    }
    if settings.insecure_skip_tls_verify {
        tracing::warn!(
            server = %codalab_wm_core::secret::redact_url(&settings.server),
            "--insecure-skip-tls-verify: the CodaLab server's certificate is NOT verified; \
             anyone on the network path can read the credentials"
        );
        options.insecure_skip_tls_verify = true;
    }
    Ok(options)
}

/// Credentials from `--password-file` (user on line 1, password on line 2) or from
/// `CODALAB_USERNAME`/`CODALAB_PASSWORD`.
pub fn credentials(password_file: Option<&Path>) -> Result<Credentials> {
    if let Some(path) = password_file {
        use std::os::unix::fs::PermissionsExt;
        let metadata = std::fs::metadata(path)
            .with_context(|| format!("cannot read password file {}", path.display()))?;
        if !metadata.is_file() {
            bail!(
                "password file {} is not a regular file: give a file holding the user name on line 1 and the password on line 2",
                path.display()
            );
        }
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            bail!(
                "password file {} is accessible by group or others (mode {mode:03o}): run `chmod 600 {}`",
                path.display(),
                path.display()
            );
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read password file {}", path.display()))?;
        let mut lines = text.lines();
        let username = lines.next().unwrap_or_default().trim().to_owned();
        let password = lines.next().unwrap_or_default().trim().to_owned();
        if username.is_empty() || password.is_empty() {
            bail!(
                "password file {} must hold the user name on line 1 and the password on line 2",
                path.display()
            );
        }
        return Ok(Credentials {
            username,
            password: Secret::new(password),
        });
    }
    let username = std::env::var("CODALAB_USERNAME").unwrap_or_default();
    let password = std::env::var("CODALAB_PASSWORD").unwrap_or_default();
    if username.is_empty() || password.is_empty() {
        bail!(
            "no CodaLab credentials: set CODALAB_USERNAME and CODALAB_PASSWORD, or pass --password-file"
        );
    }
    Ok(Credentials {
        username,
        password: Secret::new(password),
    })
}

/// Colour only for a person: stderr is a terminal and `NO_COLOR` is unset or empty (files,
/// pipes and journald get plain text).
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Logs to stderr: `--verbose` adds debug lines, `CODALAB_WM_LOG` overrides the filter.
pub fn init_logging(verbose: bool, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let default = if verbose { "debug" } else { "info" };
    let filter = EnvFilter::try_from_env("CODALAB_WM_LOG").unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "{default},hyper=info,reqwest=info,rustls=info,h2=info,tower=info,aws=info,kube=info"
        ))
    });
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Text => {
            // The escaping writer must know whether colour codes are ours.
            let ansi = colour_on_stderr();
            builder
                .with_ansi(ansi)
                .with_writer(move || crate::log_escape::Escaping::new(std::io::stderr(), ansi))
                .try_init()
        }
        LogFormat::Json => builder
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .try_init(),
    };
}

/// Exit status on a second SIGINT (128 + 2, as a shell reports it).
pub const EXIT_SECOND_SIGINT: u8 = 130;
/// Exit status on a second SIGTERM (128 + 15).
pub const EXIT_SECOND_SIGTERM: u8 = 143;

/// A watch channel that turns `true` on the first SIGINT or SIGTERM (the manager cancels the
/// step in flight and exits 0); a second signal exits at once with 130 (SIGINT) or 143
/// (SIGTERM).
pub fn shutdown_signal() -> Result<tokio::sync::watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let (sender, receiver) = tokio::sync::watch::channel(false);
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    tokio::spawn(async move {
        let mut first = true;
        loop {
            let (name, status) = tokio::select! {
                _ = interrupt.recv() => ("SIGINT", EXIT_SECOND_SIGINT),
                _ = terminate.recv() => ("SIGTERM", EXIT_SECOND_SIGTERM),
            };
            if !first {
                tracing::warn!("second signal ({name}); exiting at once");
                eprintln!("cl-worker-manager: second signal ({name}); exiting at once");
                std::process::exit(i32::from(status));
            }
            first = false;
            tracing::info!("{name} received; stopping (a second signal exits at once)");
            let _ = sender.send(true);
        }
    });
    Ok(receiver)
}

/// Re-executes this program with the same arguments (`--restart-after-seconds`). Returns only
/// on failure.
pub fn restart() -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return anyhow!("cannot restart: cannot find this program: {e}"),
    };
    tracing::info!(program = %exe.display(), "restarting");
    let error = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .exec();
    anyhow!("cannot restart {}: {error}", exe.display())
}
