//! Running the manager: the settings and their layout (`codalab_wm_core::layout`), the
//! backends built, the loop with its signals and exit codes.

use crate::args::GlobalArgs;
use crate::backends::{BackendCommand, catalogue};
use crate::setup::{build_manager, credentials, layers, settings};
use anyhow::{Context, Result, anyhow};
use codalab_wm_app::logging::init as init_logging;
use codalab_wm_core::layout::Layout;
use codalab_wm_core::manager::Outcome;
use std::process::ExitCode;

/// Exit status when more launches failed than `--exit-after-num-failed` allows.
pub const EXIT_TOO_MANY_FAILURES: u8 = 3;

/// Exit status of `--once` when its tick or a launch in it failed.
pub const EXIT_ONCE_FAILED: u8 = 1;

/// Exit status when `--restart-after-seconds` came and the program could not execute itself
/// again (its file removed, or not executable any more): a restart by the init system, from
/// the program its unit names, may mend it, so it is not one of the statuses the systemd unit
/// leaves down (1, 2).
pub const EXIT_RESTART_FAILED: u8 = 4;

/// Runs the manager until it is told to stop.
pub async fn run(global: GlobalArgs, backend: Option<BackendCommand>) -> Result<ExitCode> {
    let layers = layers(&global, backend.as_ref());
    let settings = settings(&layers)?;
    init_logging(settings.verbose, settings.log_format);
    crate::setup::raise_open_files_limit();
    let listener = match settings.listen {
        Some(addr) => Some(crate::http::bind(addr).await?),
        None => None,
    };
    // Every configuration problem is said before the credentials are looked for.
    let layout = Layout::new(&settings, &layers, &catalogue())?;
    let credentials = credentials(settings.password_file.as_deref())?;
    let mut manager = build_manager(layout.clone(), &settings, credentials).await?;
    crate::reload::install(&mut manager, layers, &settings, layout)?;
    if !settings.notify.is_empty() {
        let events = manager.subscribe_events();
        codalab_wm_core::notify::spawn(settings.notify.clone(), events, Default::default())
            .context("cannot set up the [[notify]] webhooks")?;
    }
    if let Some(listener) = listener {
        crate::http::spawn(listener, &settings, manager.subscribe_status());
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
            let said = codalab_wm_app::logging::escape(&error.to_string(), false);
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
        Outcome::Restart => {
            let error = restart();
            tracing::error!("{error:#}; exiting");
            eprintln!("error: {error:#}");
            Ok(ExitCode::from(EXIT_RESTART_FAILED))
        }
        Outcome::TooManyFailures { failed, limit } => {
            eprintln!(
                "error: {failed} worker jobs failed to start, more than --exit-after-num-failed {limit}"
            );
            Ok(ExitCode::from(EXIT_TOO_MANY_FAILURES))
        }
    }
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
fn restart() -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let exe = match program() {
        Ok(exe) => exe,
        Err(e) => return anyhow!("cannot restart: cannot find this program: {e}"),
    };
    tracing::info!(program = %exe.display(), "restarting");
    let error = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .exec();
    anyhow!("cannot restart {}: {error}", exe.display())
}

/// The file to execute again. Linux names a program whose file was replaced or removed since it
/// started `<path> (deleted)`; an upgrade (a package manager, `install`) puts the new program
/// at `<path>`, and that is the one a restart runs.
fn program() -> std::io::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    if exe.exists() {
        return Ok(exe);
    }
    let replaced = (exe.to_str()).and_then(|path| path.strip_suffix(" (deleted)"));
    Ok(replaced.map(std::path::PathBuf::from).unwrap_or(exe))
}
