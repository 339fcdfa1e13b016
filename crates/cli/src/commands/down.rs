//! `cl-worker-manager down`: stops every worker job this manager owns, on every pool, and
//! removes what the backends created besides jobs (AWS job definition revisions, the k8s
//! credentials Secret and finished pods, Slurm scratch directories of finished workers), like
//! `ray down`. With `--dry-run` it only lists what it would stop and remove.
//!
//! No running manager is needed: the backends are built from the same configuration as the
//! manager (`--config FILE`, `CODALAB_WM_*`, a backend subcommand with its flags), and find
//! their jobs and resources by the names, labels and tags they always use.

use crate::args::GlobalArgs;
use crate::backends::{BackendCommand, catalogue};
use anyhow::Result;
use codalab_wm_core::layout::Layout;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::{CleanupItem, Error, WorkerBackend, WorkerJob};
use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// How often `down` looks whether the stopped jobs have ended.
const POLL_INTERVAL: Duration = Duration::from_secs(1);

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

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The pool (the backend's name in the single-backend mode).
    pub pool: String,
    /// `job`, `job definition`, `secret`, `scratch dir`, `finished pod` …
    pub kind: String,
    /// Job id (and name), ARN, Secret name or path.
    pub name: String,
    /// What was (or, in a dry run, would be) done.
    pub action: String,
    /// Whether it went wrong.
    pub failed: bool,
}

/// Runs `cl-worker-manager down`.
pub async fn run(args: Args, global: GlobalArgs) -> Result<ExitCode> {
    let layers = crate::setup::layers(&global, args.backend.as_ref());
    let settings = crate::setup::settings(&layers)?;
    crate::setup::init_logging(settings.verbose, settings.log_format);
    let layout = Layout::new(&settings, &layers, &catalogue())?;
    let pools = crate::setup::build_pools(&layout, &placeholder_credentials()).await?;
    let pools: Vec<(String, Arc<dyn WorkerBackend>)> = pools
        .into_iter()
        .map(|p| (p.policy.name, p.backend))
        .collect();
    let wait = Duration::from_secs(args.wait_seconds);
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

/// Backends take the workers' CodaLab credentials when they are built, to hand them to the
/// workers they start. `down` starts nothing (it lists, stops and removes), so it never reads
/// the real ones: the backends get this placeholder, which only `start_worker_job` (never
/// called here: no job submitted, no job definition registered, no Secret written) would
/// send anywhere.
fn placeholder_credentials() -> Credentials {
    Credentials {
        username: "cl-worker-manager-down".into(),
        password: Secret::new("unused-by-down"),
    }
}

/// Stops the pool's pending and running jobs, waits up to `wait` for them to end, then
/// removes what the backend created (or, with `dry_run`, lists both).
pub async fn down_pool(
    pool: &str,
    backend: &dyn WorkerBackend,
    dry_run: bool,
    wait: Duration,
) -> Vec<Row> {
    let row = |kind: &str, name: String, action: String, failed: bool| Row {
        pool: pool.to_owned(),
        kind: kind.to_owned(),
        name,
        action,
        failed,
    };
    let jobs = match backend.get_worker_jobs().await {
        Ok(jobs) => jobs,
        Err(error) => {
            let action = format!("cannot list jobs: {error}");
            return vec![row("job", "-".into(), action, true)];
        }
    };
    let mut rows = Vec::new();
    let mut stopped = HashSet::new();
    for job in jobs.iter().filter(|j| j.state.is_capacity()) {
        let state = format!("{:?}", job.state).to_lowercase();
        let (action, failed) = if dry_run {
            (format!("would stop ({state})"), false)
        } else {
            match backend.stop_worker_job(job).await {
                Ok(()) => {
                    stopped.insert(job.id.clone());
                    (format!("stopped (was {state})"), false)
                }
                Err(error) => (format!("stop failed: {error}"), true),
            }
        };
        rows.push(row("job", job_label(job), action, failed));
    }
    if !stopped.is_empty()
        && let Err(still) = wait_until_ended(backend, &stopped, wait).await
    {
        tracing::warn!(jobs = %still, "stopped jobs have not ended yet; what they use is kept");
    }
    match backend.cleanup(dry_run).await {
        Ok(items) => rows.extend(
            items
                .into_iter()
                .map(|item| cleanup_row(pool, item, dry_run)),
        ),
        Err(Error::Unsupported { .. }) => {}
        Err(error) => rows.push(row(
            "resources",
            "-".into(),
            format!("cannot clean up: {error}"),
            true,
        )),
    }
    rows
}

fn job_label(job: &WorkerJob) -> String {
    if job.name.is_empty() || job.name == job.id {
        job.id.clone()
    } else {
        format!("{} ({})", job.id, job.name)
    }
}

fn cleanup_row(pool: &str, item: CleanupItem, dry_run: bool) -> Row {
    let (action, failed) = match (&item.error, item.removed, dry_run) {
        (_, _, true) => ("would remove".to_owned(), false),
        (Some(error), _, _) => (format!("remove failed: {error}"), true),
        (None, true, _) => ("removed".to_owned(), false),
        (None, false, _) => ("kept".to_owned(), false),
    };
    Row {
        pool: pool.to_owned(),
        kind: item.kind.to_owned(),
        name: item.name,
        action,
        failed,
    }
}

/// Polls the backend until none of the `stopped` jobs is pending or running, for at most
/// `wait`. Returns the ids still live when time is up.
async fn wait_until_ended(
    backend: &dyn WorkerBackend,
    stopped: &HashSet<String>,
    wait: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let live: Vec<String> = match backend.get_worker_jobs().await {
            Ok(jobs) => jobs
                .into_iter()
                .filter(|j| j.state.is_capacity() && stopped.contains(&j.id))
                .map(|j| j.id)
                .collect(),
            Err(error) => vec![format!("(cannot list: {error})")],
        };
        if live.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() + POLL_INTERVAL > deadline {
            return Err(live.join(", "));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The report: one aligned line per job and resource, then a summary.
pub fn render(rows: &[Row], dry_run: bool) -> String {
    let header = ["POOL", "KIND", "NAME", "ACTION"];
    let cells: Vec<[&str; 4]> = rows
        .iter()
        .map(|r| [&r.pool[..], &r.kind[..], &r.name[..], &r.action[..]])
        .collect();
    let mut widths = header.map(str::len);
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    for line in std::iter::once(&header).chain(&cells) {
        let text = format!(
            "{:w0$}  {:w1$}  {:w2$}  {}",
            line[0],
            line[1],
            line[2],
            line[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        out.push_str(text.trim_end());
        out.push('\n');
    }
    let jobs = rows.iter().filter(|r| r.kind == "job" && !r.failed).count();
    let other = rows.iter().filter(|r| r.kind != "job" && !r.failed).count();
    let failed = rows.iter().filter(|r| r.failed).count();
    out.push_str(&if dry_run {
        format!("dry run: would stop {jobs} job(s) and remove {other} resource(s); nothing was changed\n")
    } else {
        format!("stopped {jobs} job(s), removed {other} resource(s), {failed} failure(s)\n")
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_core::testing::FakeBackend;
    use codalab_wm_core::{JobState, WorkerShape};

    #[test]
    fn parses_a_backend_with_its_flags_and_the_global_ones() {
        let cli = crate::cli::parse_args([
            "cl-worker-manager",
            "down",
            "--dry-run",
            "--wait-seconds",
            "5",
            "local",
            "--cpus",
            "2",
        ])
        .unwrap();
        assert!(cli.global.process.dry_run);
        let Some(crate::cli::Command::Down(args)) = cli.command else {
            panic!("not down");
        };
        assert_eq!(args.wait_seconds, 5);
        assert_eq!(args.backend.map(|b| b.kind.name()), Some("local"));
        let cli =
            crate::cli::parse_args(["cl-worker-manager", "down", "--config", "wm.toml"]).unwrap();
        assert!(cli.global.process.config.is_some());
    }

    #[tokio::test]
    async fn stops_only_live_jobs_and_a_dry_run_stops_none() {
        let backend = FakeBackend::new(WorkerShape::from_flags(1, 0, 1024));
        backend.insert(WorkerJob::new("1", JobState::Active));
        backend.insert(WorkerJob::new("2", JobState::Pending));
        backend.insert(WorkerJob::new("3", JobState::Preempted));
        let rows = down_pool("p", &backend, true, Duration::ZERO).await;
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r.action.starts_with("would stop")));
        assert!(backend.stops().is_empty());
        let rows = down_pool("p", &backend, false, Duration::from_secs(5)).await;
        assert_eq!(backend.stops(), ["1", "2"]);
        assert!(rows.iter().all(|r| r.action.starts_with("stopped")));
        let report = render(&rows, false);
        assert!(
            report
                .starts_with("POOL  KIND  NAME  ACTION\np     job   1     stopped (was active)\n"),
            "{report}"
        );
        assert!(report.ends_with("stopped 2 job(s), removed 0 resource(s), 0 failure(s)\n"));
    }
}
