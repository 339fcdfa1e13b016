//! The manager loop: observe → plan → act → sleep.
//!
//! One [`Manager::tick`] does what one upstream iteration does: search the staged bundles,
//! prefilter them against the worker shape, list the backend's worker jobs, ask the
//! [`policy`](crate::policy) and start what it decided. [`Manager::run`] repeats it every
//! `sleep_time`, and is the one place that decides what an error means for the loop: fatal
//! errors stop it, everything else is retried with exponential backoff (logged once per
//! streak), so a server or batch system that is down never crashes the manager and never
//! leads to launches on stale data.

use crate::backend::{JobState, LaunchRequest, WorkerBackend, WorkerJob, new_unique};
use crate::bundle::prefilter;
use crate::codalab::{CodaLabClient, staged_keywords};
use crate::command::WorkerOptions;
use crate::error::{Error, Result};
use crate::policy::{Decision, Observation, PolicyConfig, plan};
use crate::retry::Backoff;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Everything the loop needs besides the server and the backend.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Worker count limits and launch pacing.
    pub policy: PolicyConfig,
    /// Extra search keywords (`--search`).
    pub search: Vec<String>,
    /// Time between ticks (`--sleep-time`).
    pub sleep_time: Duration,
    /// Do not drop bundles that ask more than a worker has (`--no-prefilter`).
    pub no_prefilter: bool,
    /// Re-execute after this long (`--restart-after-seconds`).
    pub restart_after: Option<Duration>,
    /// Stop after more than this many failed launches (`--exit-after-num-failed`).
    pub exit_after_num_failed: Option<u32>,
    /// Render launches without submitting anything (`--dry-run`).
    pub dry_run: bool,
    /// The `cl-worker` settings.
    pub worker: WorkerOptions,
    /// Longest wait between tries while the server or backend keeps failing.
    pub max_backoff: Duration,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        Self {
            policy: PolicyConfig::default(),
            search: Vec::new(),
            sleep_time: Duration::from_secs(5),
            no_prefilter: false,
            restart_after: None,
            exit_after_num_failed: None,
            dry_run: false,
            worker: WorkerOptions::default(),
            max_backoff: Duration::from_secs(300),
        }
    }
}

/// What one tick saw and did.
#[derive(Debug, Clone)]
pub struct TickReport {
    /// The search keywords used.
    pub keywords: Vec<String>,
    /// Staged bundles after the prefilter.
    pub staged: usize,
    /// Bundles staged last tick and not any more.
    pub removed: usize,
    /// Bundles dropped by the prefilter.
    pub filtered: usize,
    /// Bundles skipped because a field was malformed.
    pub malformed: usize,
    /// Worker jobs that count (pending + active).
    pub jobs: usize,
    /// Active worker jobs.
    pub active: usize,
    /// Pending worker jobs.
    pub pending: usize,
    /// Jobs seen failed for the first time this tick.
    pub newly_failed: Vec<WorkerJob>,
    /// The policy's decision.
    pub decision: Decision,
    /// Jobs started this tick.
    pub launched: Vec<WorkerJob>,
    /// Launches that failed this tick, with the error.
    pub launch_errors: Vec<String>,
}

/// Why [`Manager::run`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A shutdown was requested (SIGINT/SIGTERM).
    Shutdown,
    /// `--once`: one tick was run.
    Once,
    /// `--restart-after-seconds` elapsed: the caller re-executes the program.
    Restart,
    /// More failed launches than `--exit-after-num-failed` allows.
    TooManyFailures {
        /// Failed launches counted.
        failed: u32,
        /// The limit.
        limit: u32,
    },
}

/// The worker manager: one CodaLab server, one backend.
#[derive(Debug)]
pub struct Manager {
    config: ManagerConfig,
    client: CodaLabClient,
    backend: Arc<dyn WorkerBackend>,
    started: Instant,
    last_launch: Option<Instant>,
    staged_uuids: HashSet<String>,
    reported_misfits: HashSet<String>,
    failed_seen: HashSet<String>,
    num_failed: u32,
}

impl Manager {
    /// A manager for `backend`, fed by `client`.
    pub fn new(
        config: ManagerConfig,
        client: CodaLabClient,
        backend: Arc<dyn WorkerBackend>,
    ) -> Self {
        Self {
            config,
            client,
            backend,
            started: Instant::now(),
            last_launch: None,
            staged_uuids: HashSet::new(),
            reported_misfits: HashSet::new(),
            failed_seen: HashSet::new(),
            num_failed: 0,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn WorkerBackend> {
        &self.backend
    }

    /// Failed launches counted so far.
    pub fn num_failed(&self) -> u32 {
        self.num_failed
    }

    /// One iteration. Errors are those of the server search or the job listing; a failed
    /// launch is reported in the [`TickReport`] and counted, not returned.
    pub async fn tick(&mut self) -> Result<TickReport> {
        let keywords = staged_keywords(
            &self.config.search,
            self.client.username(),
            self.config.worker.tag.as_deref(),
            self.config.worker.tag_exclusive,
        );
        let search = self.client.search_bundles(&keywords).await?;
        let malformed = search.skipped.len();
        for skipped in &search.skipped {
            if self.reported_misfits.insert(skipped.uuid.clone()) {
                tracing::warn!(bundle = %skipped.uuid, reason = %skipped.reason, "skipping malformed bundle");
            }
        }
        let (bundles, rejected) = if self.config.no_prefilter {
            (search.bundles, Vec::new())
        } else {
            prefilter(search.bundles, &self.backend.worker_shape())
        };
        for (bundle, misfit) in &rejected {
            if self.reported_misfits.insert(bundle.uuid.clone()) {
                tracing::info!(
                    bundle = %bundle.uuid,
                    "filtered out bundle {} based on unfulfillable resource requested: {misfit}",
                    bundle.uuid
                );
            }
        }
        let current: HashSet<&str> = bundles
            .iter()
            .map(|b| b.uuid.as_str())
            .chain(rejected.iter().map(|(b, _)| b.uuid.as_str()))
            .chain(search.skipped.iter().map(|s| s.uuid.as_str()))
            .collect();
        self.reported_misfits
            .retain(|uuid| current.contains(uuid.as_str()));
        let new_staged: HashSet<String> = bundles.iter().map(|b| b.uuid.clone()).collect();
        let removed = self.staged_uuids.difference(&new_staged).count();
        self.staged_uuids = new_staged;

        let jobs = self.backend.get_worker_jobs().await?;
        let newly_failed = self.note_failures(&jobs);
        let pending = jobs.iter().filter(|j| j.state == JobState::Pending).count();
        let active = jobs.iter().filter(|j| j.state == JobState::Active).count();
        let observed = Observation {
            staged: bundles.len(),
            pending,
            active,
            since_last_launch: self.last_launch.map(|t| t.elapsed()),
        };
        let decision = plan(&observed, &self.config.policy);
        let policy = self.config.policy;
        tracing::info!(
            staged = observed.staged,
            removed,
            jobs = observed.jobs(),
            active,
            pending,
            launches = decision.launches,
            reasons = %decision.reason_codes(),
            "{} staged bundles ({removed} removed since last time), {} worker jobs (min={}, max={}) ({active} active, {pending} pending)",
            observed.staged,
            observed.jobs(),
            policy.min_workers,
            policy.max_workers,
        );
        for reason in &decision.reasons {
            tracing::debug!(reason = reason.code(), "{reason}");
        }
        let mut report = TickReport {
            keywords,
            staged: observed.staged,
            removed,
            filtered: rejected.len(),
            malformed,
            jobs: observed.jobs(),
            active,
            pending,
            newly_failed,
            decision,
            launched: Vec::new(),
            launch_errors: Vec::new(),
        };
        for _ in 0..report.decision.launches {
            self.launch(&mut report).await;
        }
        Ok(report)
    }

    /// Counts jobs seen failed for the first time; forgets ids the backend no longer lists.
    fn note_failures(&mut self, jobs: &[WorkerJob]) -> Vec<WorkerJob> {
        let listed: HashSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        self.failed_seen.retain(|id| listed.contains(id.as_str()));
        let mut newly_failed = Vec::new();
        for job in jobs.iter().filter(|j| j.state == JobState::Failed) {
            if self.failed_seen.insert(job.id.clone()) {
                self.num_failed += 1;
                tracing::error!(
                    job = %job.id,
                    reason = job.reason.as_deref().unwrap_or("unknown"),
                    failed = self.num_failed,
                    "worker job failed"
                );
                newly_failed.push(job.clone());
            }
        }
        newly_failed
    }

    async fn launch(&mut self, report: &mut TickReport) {
        let unique = new_unique();
        let request = LaunchRequest {
            unique: &unique,
            worker: &self.config.worker,
            dry_run: self.config.dry_run,
        };
        match self.backend.start_worker_job(&request).await {
            Ok(job) => {
                tracing::info!(job = %job.id, backend = self.backend.name(), dry_run = self.config.dry_run, "started a worker job");
                self.last_launch = Some(Instant::now());
                report.launched.push(job);
            }
            Err(error) if error.is_temporary() => {
                tracing::warn!(%error, "could not start a worker job; will retry on a later tick");
                report.launch_errors.push(error.to_string());
            }
            Err(error) => {
                self.last_launch = Some(Instant::now());
                self.num_failed += 1;
                tracing::error!(%error, failed = self.num_failed, "failed to start a worker job");
                report.launch_errors.push(error.to_string());
            }
        }
    }

    /// Whether `--exit-after-num-failed` has been exceeded.
    fn too_many_failures(&self) -> Option<Outcome> {
        let limit = self.config.exit_after_num_failed?;
        (self.num_failed > limit).then_some(Outcome::TooManyFailures {
            failed: self.num_failed,
            limit,
        })
    }

    /// Ticks every `sleep_time` until a shutdown is requested (`shutdown` turns `true`), one
    /// tick ran with `once`, the restart time came, or an error is fatal.
    pub async fn run(
        &mut self,
        once: bool,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<Outcome> {
        let mut backoff = Backoff::new(
            self.config.sleep_time.max(Duration::from_millis(100)),
            self.config.max_backoff,
        );
        let mut streak: Option<String> = None;
        loop {
            if let Some(limit) = self.config.restart_after
                && self.started.elapsed() > limit
            {
                tracing::info!(
                    "{} seconds have elapsed since this manager was started, more than {}; restarting",
                    self.started.elapsed().as_secs(),
                    limit.as_secs()
                );
                return Ok(Outcome::Restart);
            }
            let delay = match self.tick().await {
                Ok(_) => {
                    if let Some(kind) = streak.take() {
                        tracing::info!(after = backoff.failures(), "recovered from: {kind}");
                    }
                    backoff.success();
                    self.config.sleep_time
                }
                Err(error) if error.is_fatal() || once => return Err(error),
                Err(error) => {
                    let wait = error
                        .retry_after()
                        .unwrap_or_default()
                        .max(backoff.failure());
                    let kind = error_kind(&error);
                    if streak.as_deref() != Some(kind.as_str()) || !error.is_temporary() {
                        let level_error = !error.is_temporary();
                        if level_error {
                            tracing::error!(%error, retry_in_seconds = wait.as_secs(), "tick failed");
                        } else {
                            tracing::warn!(%error, retry_in_seconds = wait.as_secs(), "tick skipped (temporary error; further ones in this streak are logged at debug level)");
                        }
                        streak = Some(kind);
                    } else {
                        tracing::debug!(%error, retry_in_seconds = wait.as_secs(), "tick skipped again");
                    }
                    wait
                }
            };
            if let Some(outcome) = self.too_many_failures() {
                tracing::error!(
                    "failed to start {} worker jobs in total, more than --exit-after-num-failed {}; exiting",
                    self.num_failed,
                    self.config.exit_after_num_failed.unwrap_or_default()
                );
                return Ok(outcome);
            }
            if once {
                return Ok(Outcome::Once);
            }
            if *shutdown.borrow() {
                return Ok(Outcome::Shutdown);
            }
            tracing::debug!("sleeping {} seconds", delay.as_secs());
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.wait_for(|stop| *stop) => return Ok(Outcome::Shutdown),
            }
        }
    }
}

/// A short key for "the same kind of error" so that a streak is logged once.
fn error_kind(error: &Error) -> String {
    match error {
        Error::Server { what, status, .. } => format!("{what}:{status}"),
        Error::Unreachable { what, .. } => format!("unreachable:{what}"),
        Error::InvalidReply { from, what, .. } => format!("invalid:{from}:{what}"),
        Error::RateLimited { backend, .. } => format!("throttled:{backend}"),
        Error::Backend {
            backend, operation, ..
        } => format!("{backend}:{operation}"),
        other => other.to_string(),
    }
}
