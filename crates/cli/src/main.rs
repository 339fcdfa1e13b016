//! `cl-worker-manager`: a drop-in, faster replacement for CodaLab's Python worker manager.
//!
//! This binary only parses flags, layers the configuration, sets up logging and signals, and
//! hands over to [`codalab_wm_core::Manager`]. Backends are compiled in by cargo features.

mod args;
mod backends;
mod settings;

use anyhow::{Context, Result, anyhow, bail};
use args::{Cli, normalise_search};
use backends::{ALL_BACKENDS, BackendCommand, BackendContext, is_compiled_in};
use clap::Parser;
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient};
use codalab_wm_core::manager::Outcome;
use codalab_wm_core::policy::PolicyConfig;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::{Error, Manager, ManagerConfig};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use settings::{LogFormat, Settings};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// Exit status for bad flags, config or credentials setup.
const EXIT_USAGE: u8 = 2;
/// Exit status when the server refuses the credentials (as upstream: 1).
const EXIT_UNAUTHENTICATED: u8 = 1;
/// Exit status when more launches failed than `--exit-after-num-failed` allows.
const EXIT_TOO_MANY_FAILURES: u8 = 3;

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().collect();
    if let Some((name, feature)) = not_compiled_in(&raw) {
        eprintln!(
            "error: backend `{name}` is not compiled in: rebuild with `--features {feature}`"
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let names: Vec<&str> = ALL_BACKENDS.iter().map(|(name, _)| *name).collect();
    let cli = Cli::parse_from(normalise_search(raw, &names));
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            match error.downcast_ref::<Error>() {
                Some(Error::Unauthenticated { .. }) => ExitCode::from(EXIT_UNAUTHENTICATED),
                _ => ExitCode::from(EXIT_USAGE),
            }
        }
    }
}

/// A backend named on the command line that this binary was built without.
fn not_compiled_in(args: &[String]) -> Option<(&'static str, &'static str)> {
    args.iter().skip(1).find_map(|arg| {
        ALL_BACKENDS
            .iter()
            .find(|(name, _)| name == arg && !is_compiled_in(name))
            .map(|(name, feature)| (*name, *feature))
    })
}

/// The configuration layers, lowest first.
fn figment(cli: &Cli) -> Result<Figment> {
    let mut figment = Figment::from(Serialized::defaults(Settings::default()));
    if let Some(path) = &cli.global.config {
        if !path.is_file() {
            bail!("config file {} does not exist", path.display());
        }
        figment = figment.merge(Toml::file_exact(path));
    }
    figment = figment.merge(Env::prefixed("CODALAB_WM_").split("__"));
    figment = figment.merge(Serialized::defaults(&cli.global));
    if let Some(backend) = &cli.backend {
        figment = figment.merge(backend.flags());
    }
    Ok(figment)
}

async fn run(cli: Cli) -> Result<ExitCode> {
    let mut figment = figment(&cli)?;
    let settings: Settings = figment
        .extract()
        .map_err(|e| anyhow!("invalid configuration: {e}"))?;
    init_logging(settings.verbose, settings.log_format);

    let backend_command = match cli.backend {
        Some(command) => command,
        None => {
            let names: Vec<&str> = ALL_BACKENDS.iter().map(|(n, _)| *n).collect();
            let name = settings.backend.as_deref().ok_or_else(|| {
                anyhow!("no backend given: name one of {} (or set `backend = \"…\"` in the config file)", names.join(", "))
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
    let policy = PolicyConfig {
        min_workers: settings.min_workers,
        max_workers: settings.max_workers,
        min_seconds_between_workers: settings.min_seconds_between_workers,
    };
    policy.validate().map_err(|e| anyhow!(e))?;
    let credentials = credentials(settings.password_file.as_deref())?;
    if let Some(path) = &settings.password_file {
        // Backends that pass the file on to workers (Slurm) read it from their own table.
        figment = figment.merge(Serialized::default("slurm_batch.password_file", path));
    }
    let worker = settings.worker.options(&settings.server);
    let context = BackendContext {
        credentials: credentials.clone(),
        worker: worker.clone(),
    };
    let backend = backend_command
        .build(&figment, &context)
        .await
        .with_context(|| format!("cannot set up the {} backend", backend_command.name()))?;
    tracing::info!(
        backend = backend.name(),
        server = %settings.server,
        user = %credentials.username,
        min_workers = policy.min_workers,
        max_workers = policy.max_workers,
        "started worker manager; workers get {}",
        backend.worker_shape()
    );
    let client =
        CodaLabClient::with_options(&settings.server, credentials, &client_options(&settings)?)?;
    let config = ManagerConfig {
        policy,
        search: settings.search.clone(),
        sleep_time: Duration::from_secs(settings.sleep_time),
        no_prefilter: settings.no_prefilter,
        restart_after: settings.restart_after_seconds.map(Duration::from_secs),
        exit_after_num_failed: settings.exit_after_num_failed,
        dry_run: settings.dry_run,
        worker,
        ..ManagerConfig::default()
    };
    let mut manager = Manager::new(config, client, backend);
    let shutdown = shutdown_signal()?;
    match manager.run(settings.once, shutdown).await? {
        Outcome::Shutdown => {
            tracing::info!("shutdown requested; exiting");
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Once => Ok(ExitCode::SUCCESS),
        Outcome::Restart => Err(restart()),
        Outcome::TooManyFailures { failed, limit } => {
            eprintln!(
                "error: {failed} worker jobs failed to start, more than --exit-after-num-failed {limit}"
            );
            Ok(ExitCode::from(EXIT_TOO_MANY_FAILURES))
        }
    }
}

/// TLS options of the CodaLab connection.
fn client_options(settings: &Settings) -> Result<ClientOptions> {
    let mut options = ClientOptions::default();
    if let Some(path) = &settings.ca_cert {
        let pem = std::fs::read(path).with_context(|| format!("cannot read --ca-cert {}", path.display()))?;
        options.ca_certificates.push(pem);
    }
    if settings.insecure_skip_tls_verify {
        tracing::warn!(
            server = %settings.server,
            "--insecure-skip-tls-verify: the CodaLab server's certificate is NOT verified; \
             anyone on the network path can read the credentials"
        );
        options.insecure_skip_tls_verify = true;
    }
    Ok(options)
}

/// Credentials from `--password-file` (user on line 1, password on line 2) or from
/// `CODALAB_USERNAME`/`CODALAB_PASSWORD`.
fn credentials(password_file: Option<&Path>) -> Result<Credentials> {
    if let Some(path) = password_file {
        use std::os::unix::fs::PermissionsExt;
        let metadata = std::fs::metadata(path)
            .with_context(|| format!("cannot read password file {}", path.display()))?;
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

fn init_logging(verbose: bool, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let default = if verbose { "debug" } else { "info" };
    let filter = EnvFilter::try_from_env("CODALAB_WM_LOG").unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "{default},hyper=info,reqwest=info,rustls=info,h2=info,tower=info,aws=info,kube=info"
        ))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// A watch channel that turns `true` on SIGINT or SIGTERM.
fn shutdown_signal() -> Result<tokio::sync::watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let (sender, receiver) = tokio::sync::watch::channel(false);
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT received; finishing the current step"),
            _ = terminate.recv() => tracing::info!("SIGTERM received; finishing the current step"),
        }
        let _ = sender.send(true);
    });
    Ok(receiver)
}

/// Re-executes this program with the same arguments (`--restart-after-seconds`). Returns only
/// on failure.
fn restart() -> anyhow::Error {
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
