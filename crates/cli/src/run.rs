//! Running the manager: the settings and their layout (`codalab_wm_core::layout`), the
//! backends built, the loop with its signals and exit codes.

use crate::args::GlobalArgs;
use crate::backends::{BackendCommand, catalogue};
use anyhow::{Context, Result, anyhow, bail};
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient};
use codalab_wm_core::layout::Layout;
use codalab_wm_core::manager::Outcome;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::settings::{Layers, LogFormat, Settings};
use codalab_wm_core::{Manager, Pool};
use figment::Figment;
use figment::providers::Serialized;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// Exit status when more launches failed than `--exit-after-num-failed` allows.
pub const EXIT_TOO_MANY_FAILURES: u8 = 3;

/// Exit status of `--once` when its tick or a launch in it failed.
pub const EXIT_ONCE_FAILED: u8 = 1;

/// The layers the settings come from: defaults < `--config` file < `CODALAB_WM_*` < flags.
pub fn layers(global: &GlobalArgs, backend: Option<&BackendCommand>) -> Layers {
    Layers {
        file: global.process.config.clone(),
        flags: Figment::from(Serialized::defaults(global)),
        backend: backend.map(|b| (b.kind, b.flags.clone())),
    }
}

/// The settings the layers give; a config file's problems are all listed with their lines.
pub fn settings(layers: &Layers) -> Result<Settings> {
    if let Some(path) = layers.file.as_deref().filter(|p| p.is_file()) {
        crate::diagnose::file_problems(path)?;
    }
    Ok(layers.settings(&catalogue())?)
}

/// Runs the manager until it is told to stop.
pub async fn run(global: GlobalArgs, backend: Option<BackendCommand>) -> Result<ExitCode> {
    let layers = layers(&global, backend.as_ref());
    let settings = settings(&layers)?;
    init_logging(settings.verbose, settings.log_format);
    let listener = match settings.listen {
        Some(addr) => Some(crate::http::bind(addr).await?),
        None => None,
    };
    // Every configuration problem is said before the credentials are looked for.
    let layout = Layout::new(&settings, &layers, &catalogue())?;
    let credentials = credentials(settings.password_file.as_deref())?;
    let mut manager = build_manager(layout.clone(), &settings, credentials).await?;
    crate::reload::install(&mut manager, layers, &settings, layout)?;
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
    exit_code(outcome)
}

fn exit_code(outcome: Outcome) -> Result<ExitCode> {
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

/// The manager the layout describes, each backend metered (`/metrics`).
pub async fn build_manager(
    layout: Layout,
    settings: &Settings,
    credentials: Credentials,
) -> Result<Manager> {
    let pools = build_pools(&layout, &credentials).await?;
    let client =
        CodaLabClient::with_options(&settings.server, credentials, &client_options(settings)?)?;
    let server = codalab_wm_core::secret::redact_url(client.server()).into_owned();
    let user = client.username().to_owned();
    if !layout.single {
        let count = pools.len();
        let mut manager = Manager::with_pools(layout.config, client, pools)?;
        manager.on_ready(move || {
            tracing::info!(
                server,
                user,
                pools = count,
                "started worker manager; {count} pools"
            );
        });
        return Ok(manager);
    }
    let pool = pools.into_iter().next().context("no backend")?;
    let name = pool.backend.name().to_owned();
    let shape = pool.backend.worker_shape().to_string();
    let (min_workers, max_workers) = (pool.policy.min, pool.policy.max);
    let launch_mode = pool.policy.launch_mode;
    let mut manager = Manager::new(layout.config, client, pool);
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

/// Every pool's backend, built and metered; each pool of `[[pools]]` is logged.
pub async fn build_pools(layout: &Layout, credentials: &Credentials) -> Result<Vec<Pool>> {
    let mut pools = Vec::new();
    for pool in &layout.pools {
        let (name, backend) = (&pool.policy.name, pool.kind.name());
        let built = pool
            .build(credentials)
            .await
            .with_context(|| match layout.single {
                true => format!("cannot set up the {backend} backend"),
                false => format!("cannot set up pool {name} ({backend})"),
            })?;
        let backend = codalab_wm_core::metrics::metered(built.backend, name);
        if !layout.single {
            log_pool(&built.policy, &*backend);
        }
        pools.push(Pool { backend, ..built });
    }
    Ok(pools)
}

fn log_pool(policy: &codalab_wm_core::PoolPolicy, backend: &dyn codalab_wm_core::WorkerBackend) {
    tracing::info!(
        pool = %policy.name,
        backend = backend.name(),
        min = policy.min,
        max = policy.max,
        tag = policy.tag.as_deref().unwrap_or(""),
        tag_exclusive = policy.tag_exclusive,
        cost = policy.cost,
        launch_mode = %policy.launch_mode,
        max_launches_per_tick = policy.max_launches_per_tick,
        pending_timeout_seconds = policy.pending_timeout.map(|d| d.as_secs()),
        "pool {} ready; workers get {}",
        policy.name,
        backend.worker_shape()
    );
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
