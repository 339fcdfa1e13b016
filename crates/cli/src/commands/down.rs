//! `cl-worker-manager down`: stops every worker job this manager owns, on every pool, and
//! removes what the backends created besides jobs (AWS job definition revisions, the k8s
//! credentials Secret and finished pods, Slurm scratch directories of finished workers), like
//! `ray down`. With `--dry-run` it only lists what it would stop and remove.
//!
//! No running manager is needed: the backends are built from the same configuration as the
//! manager (`--config FILE`, `CODALAB_WM_*`, a backend subcommand with its flags), and find
//! their jobs and resources by the names, labels and tags they always use, and the origin
//! when they know the workers' user ([`codalab_wm_core::down::credentials`]).

use crate::args::GlobalArgs;
use crate::backends::{BackendCommand, catalogue};
use anyhow::Result;
use codalab_wm_core::WorkerBackend;
use codalab_wm_core::down::{credentials, down_pool, render};
use codalab_wm_core::layout::Layout;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Flags of `cl-worker-manager down`: the global flags (`--config`, `--dry-run` …) and,
/// optionally, the backend subcommand with its flags, as when running the manager.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// TOML config file of the manager whose jobs to stop (its backend or [[pools]])
    #[arg(long, value_hint = clap::ValueHint::FilePath)]
    pub config: Option<std::path::PathBuf>,
    /// List the jobs that would be stopped and what would be removed; change nothing
    #[arg(long = "dry-run")]
    pub dry_run: bool,
    /// Seconds to wait for the stopped jobs to end before removing what they used
    #[arg(long = "wait-seconds", default_value_t = 60)]
    pub wait_seconds: u64,
    /// Stop running worker jobs without asking, even at a terminal (a run their worker has
    /// is lost unless the worker restages it); without a terminal `down` never asks
    #[arg(long)]
    pub yes: bool,
    /// When down does not know the manager's server or the workers' CodaLab user, stop the jobs
    /// of every deployment under the configuration's names all the same (Slurm, Kubernetes and
    /// GCE pools: other servers' and users' jobs too); without it such a down refuses
    #[arg(long = "all-origins")]
    pub all_origins: bool,
    /// The backend and its flags; without one, `backend = "…"` or [[pools]] of the config
    #[command(subcommand)]
    pub backend: Option<BackendCommand>,
}

impl Args {
    /// `--config`, `--dry-run` and the backend's process flags, to join those before `down`.
    pub fn take_process(&mut self) -> crate::args::ProcessArgs {
        let mut process = self
            .backend
            .as_mut()
            .map(|b| std::mem::take(&mut b.process))
            .unwrap_or_default();
        process.config = self.config.take().or(process.config);
        process.dry_run |= self.dry_run;
        process
    }
}

/// Runs `cl-worker-manager down`.
pub async fn run(args: Args, global: GlobalArgs) -> Result<ExitCode> {
    let layers = crate::setup::layers(&global, args.backend.as_ref());
    let settings = crate::setup::settings(&layers)?;
    codalab_wm_app::logging::init(settings.verbose, settings.log_format);
    let mut layout = Layout::new(&settings, &layers, &catalogue())?;
    // Whether the config or the environment named the server, even the default one: its
    // value alone cannot tell (review 2026-11-27 §2).
    let server_known = layers.given("server")?;
    let every_origin = args.all_origins || settings.dry_run;
    let password_file = settings.password_file.as_deref();
    let credentials = credentials(&mut layout, password_file, server_known, every_origin)?;
    let pools = crate::setup::build_pools(&layout, &credentials).await?;
    let pools: Vec<(String, Arc<dyn WorkerBackend>)> = pools
        .into_iter()
        .map(|p| (p.policy.name, p.backend))
        .collect();
    let wait = Duration::from_secs(args.wait_seconds);
    if !settings.dry_run && !confirm_running(&pools, args.yes).await {
        eprintln!("nothing stopped");
        return Ok(ExitCode::FAILURE);
    }
    let mut rows = Vec::new();
    for (pool, backend) in &pools {
        rows.extend(down_pool(pool, backend.as_ref(), settings.dry_run, wait).await);
    }
    print!("{}", render(&rows, settings.dry_run));
    Ok(if rows.iter().any(|r| r.failed) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Says, before anything is stopped, which running jobs `down` will stop: a worker that runs
/// a bundle loses that run (CodaLab 1.7.5 marks it `worker_offline` and never stages it
/// again) unless it restages it on termination or is preemptible. At a terminal it asks
/// (unless `--yes`); without one (scripts, units, CI) it says so and goes on, so that scripts
/// keep working.
async fn confirm_running(pools: &[(String, Arc<dyn WorkerBackend>)], yes: bool) -> bool {
    let mut running = Vec::new();
    for (pool, backend) in pools {
        if let Ok(jobs) = backend.get_worker_jobs().await {
            let active = jobs
                .iter()
                .filter(|j| j.state == codalab_wm_core::JobState::Active);
            running.extend(active.map(|j| format!("{pool}: {}", j.id)));
        }
    }
    if running.is_empty() {
        return true;
    }
    eprintln!(
        "warning: {} running worker job(s) will be stopped: {}.\n\
         A bundle their worker runs is LOST (CodaLab marks it worker_offline and never stages \
         it again) unless the worker restages it on termination (--worker-pass-down-termination; \
         Slurm workers always do) or is preemptible. To stop without losing runs, drain first: \
         reload with max = 0 for every pool, wait until `status` shows no busy worker (idle \
         workers exit by themselves), then run down.",
        running.len(),
        running.join(", ")
    );
    use std::io::IsTerminal;
    if yes || !std::io::stdin().is_terminal() {
        return true;
    }
    eprint!("stop them? [y/N] ");
    let mut answer = String::new();
    let _ = std::io::stdin().read_line(&mut answer);
    matches!(answer.trim(), "y" | "Y" | "yes")
}

#[cfg(test)]
mod tests;
