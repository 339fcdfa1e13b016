//! The manager loop: observe → plan → act → sleep.
//!
//! One [`Manager::tick`] does what one upstream iteration does, for every pool: list each
//! pool's worker jobs, search the staged bundles the pools can absorb
//! ([`Need`](crate::pools::Need): oldest first, no more than can change a decision), ask the
//! pool policy ([`plan_pools`](crate::pools::plan_pools)) which pool takes which bundle and
//! what each pool launches or stops, then do it. [`Manager::new`] is upstream's single-backend mode (one pool,
//! [`LaunchMode::Compat`] by default: exactly [`policy::plan`](crate::policy::plan));
//! [`Manager::with_pools`] serves several pools. The manager remembers per pool what the pure
//! policy needs: last launch, failure backoff, jobs being stopped, since when jobs are pending.
//! [`Manager::status`] is a snapshot for a status view; each [`TickReport`] lists the tick's
//! [`TickEvent`]s for metrics. [`Manager::run`] repeats it every
//! `sleep_time`, and is the one place that decides what an error means for the loop: fatal
//! errors stop it, everything else is retried with exponential backoff (logged once per
//! streak), so a server or batch system that is down never crashes the manager and never
//! leads to launches on stale data.

use crate::backend::{JobState, LaunchRequest, WorkerBackend, WorkerJob, new_unique};
use crate::codalab::{CodaLabClient, SearchResult, SkippedBundle, staged_keywords};
use crate::command::WorkerOptions;
use crate::error::{Error, Result};
use crate::policy::{Decision, PolicyConfig};
use crate::pools::logs;
use crate::pools::runtime::{self, PoolRuntime};
use crate::pools::status::{Counters, FailureRecord, LaunchResult, Status, TickEvent};
use crate::pools::{
    LaunchMode, Need, Pool, PoolDecision, PoolObservation, PoolPolicy, PoolsDecision,
    PoolsObservation, plan_pools,
};
use crate::retry::Backoff;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

mod reconfigure;
mod shutdown;
mod streak;
pub use reconfigure::{Change, Reconfiguration};
pub use shutdown::SUBMIT_GRACE;

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
    /// Launch mode of the single-backend pool (`--launch-mode`; compat is upstream's rules).
    pub launch_mode: LaunchMode,
    /// Launches per tick at most in target mode (`--max-launches-per-tick`).
    pub max_launches_per_tick: u32,
    /// Stop jobs of the single-backend pool pending longer than this (target mode only).
    pub pending_timeout: Option<Duration>,
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
            launch_mode: LaunchMode::Compat,
            max_launches_per_tick: 1,
            pending_timeout: None,
        }
    }
}

/// What one tick saw and did.
#[derive(Debug, Clone)]
pub struct TickReport {
    /// The search keywords used.
    pub keywords: Vec<String>,
    /// Staged bundles matching the search, read or not (the server's `.count`).
    pub staged: usize,
    /// Staged bundles read this tick, oldest first: what the pools can absorb, plus those
    /// that fit no pool before them (the pool policy sees these; see `pools::need`).
    pub read: usize,
    /// Search requests this tick: pages, and the count unless the pages read the whole list.
    pub search_requests: usize,
    /// Bundles read last tick that are no longer staged, as far as this tick's read shows
    /// (see `pools::logs::update_window`).
    pub removed: usize,
    /// Bundles read this tick that fit no pool (the prefilter).
    pub filtered: usize,
    /// Bundles read this tick and skipped because a field was malformed.
    pub malformed: usize,
    /// Worker jobs that count (pending + active).
    pub jobs: usize,
    /// Active worker jobs.
    pub active: usize,
    /// Pending worker jobs.
    pub pending: usize,
    /// Jobs seen failed for the first time this tick.
    pub newly_failed: Vec<WorkerJob>,
    /// Upstream's decision: in the single-backend mode the pool's decision with its reasons;
    /// with several pools the total launches and no reasons (see `pools`).
    pub decision: Decision,
    /// Jobs started this tick (all pools).
    pub launched: Vec<WorkerJob>,
    /// Launches that failed this tick, with the error.
    pub launch_errors: Vec<String>,
    /// The pool policy's decision: per pool launches, stops and reasons; per bundle the pool
    /// or the reason none takes it.
    pub pools: PoolsDecision,
    /// What happened, for metrics: launches by result, stops by reason, decisions by reason,
    /// unserved bundles by reason, failed jobs, backoffs (see [`TickEvent::counter`]).
    pub events: Vec<TickEvent>,
}

/// Why [`Manager::run`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A shutdown was requested (SIGINT/SIGTERM).
    Shutdown,
    /// `--once`: one tick was run.
    Once {
        /// Launches that failed in that tick (the caller exits non-zero when any did).
        launch_errors: usize,
    },
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

/// The worker manager: one CodaLab server, one or more pools of workers.
#[derive(Debug)]
pub struct Manager {
    config: ManagerConfig,
    client: CodaLabClient,
    pools: Vec<PoolRuntime>,
    /// The single-backend mode of upstream (one pool, queue matching by the server search).
    single: bool,
    started: Instant,
    /// Time added by [`Manager::advance_clock`].
    skipped: Duration,
    /// The uuids read last tick, oldest first (for "removed since last time").
    window: Vec<String>,
    /// Unserved bundles already logged, with the reason logged.
    reported: HashMap<String, &'static str>,
    reported_malformed: HashSet<String>,
    num_failed: u32,
    ticks: u64,
    counters: Counters,
    recent_failures: VecDeque<FailureRecord>,
    status: watch::Sender<Status>,
    /// New configurations to apply before the next tick ([`Manager::reload_from`]).
    reloads: Option<mpsc::UnboundedReceiver<Reconfiguration>>,
    /// When the current tick started, for [`Status::last_tick_duration_seconds`].
    tick_started: Instant,
    /// Called once the server answered and took the credentials ([`Manager::on_ready`]).
    on_ready: Option<ReadyHook>,
    /// A submit in flight, a shutdown requested.
    stop_flags: shutdown::StopFlags,
}

/// What [`Manager::on_ready`] runs.
struct ReadyHook(Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for ReadyHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadyHook")
    }
}

impl Manager {
    /// A manager for one `backend`, fed by `client`: upstream's single-backend mode. The pool
    /// is named after the backend and follows `config.launch_mode` (compat by default).
    pub fn new(
        config: ManagerConfig,
        client: CodaLabClient,
        backend: Arc<dyn WorkerBackend>,
    ) -> Self {
        let pool = Self::single_pool(&config, backend);
        Self::build(config, client, vec![pool], true)
    }

    /// A manager for several pools. Pool names must be unique and each policy valid; the
    /// staged search is not narrowed by a tag (each pool matches `request_queue` itself).
    pub fn with_pools(
        config: ManagerConfig,
        client: CodaLabClient,
        pools: Vec<Pool>,
    ) -> Result<Self> {
        if pools.is_empty() {
            return Err(Error::InvalidConfig("no pools configured".into()));
        }
        let mut names = HashSet::new();
        for pool in &pools {
            pool.policy.validate().map_err(Error::InvalidConfig)?;
            if !names.insert(pool.policy.name.as_str()) {
                return Err(Error::InvalidConfig(format!(
                    "two pools are named {}",
                    pool.policy.name
                )));
            }
        }
        Ok(Self::build(config, client, pools, false))
    }

    fn build(config: ManagerConfig, client: CodaLabClient, pools: Vec<Pool>, single: bool) -> Self {
        Self {
            config,
            client,
            pools: pools.into_iter().map(PoolRuntime::new).collect(),
            single,
            started: Instant::now(),
            on_ready: None,
            skipped: Duration::ZERO,
            window: Vec::new(),
            reported: HashMap::new(),
            reported_malformed: HashSet::new(),
            num_failed: 0,
            ticks: 0,
            counters: Counters::default(),
            recent_failures: VecDeque::new(),
            status: watch::channel(Status::default()).0,
            reloads: None,
            tick_started: Instant::now(),
            stop_flags: shutdown::StopFlags::default(),
        }
    }

    /// The backend (of the first pool).
    pub fn backend(&self) -> &Arc<dyn WorkerBackend> {
        &self.pools[0].pool.backend
    }

    /// The pools' policies, in declaration order.
    pub fn policies(&self) -> Vec<PoolPolicy> {
        self.pools.iter().map(|p| p.pool.policy.clone()).collect()
    }

    /// Failed launches counted so far.
    pub fn num_failed(&self) -> u32 {
        self.num_failed
    }

    /// The status snapshot as of the last tick.
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// A receiver that sees every new status snapshot (one per tick), for a status server
    /// running beside [`Manager::run`].
    pub fn subscribe_status(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// The manager clock: time since the manager started (plus [`Manager::advance_clock`]).
    pub fn clock(&self) -> Duration {
        self.started.elapsed() + self.skipped
    }

    /// Moves the manager clock forward by `by`, as if that much time had passed: for
    /// simulations and tests of time-based rules (rate limit, pending timeout, backoff)
    /// without sleeping.
    pub fn advance_clock(&mut self, by: Duration) {
        self.skipped += by;
    }

    fn keywords(&self) -> Vec<String> {
        let (tag, exclusive) = if self.single {
            (
                self.config.worker.tag.as_deref(),
                self.config.worker.tag_exclusive,
            )
        } else {
            (None, false)
        };
        staged_keywords(&self.config.search, self.client.username(), tag, exclusive)
    }

    /// One iteration. Errors are those of the server search or, when every pool's listing
    /// fails, the first listing error (a pool whose listing fails while others succeed is
    /// skipped with reason `unobserved`). A failed launch is reported in the [`TickReport`]
    /// and counted, not returned.
    pub async fn tick(&mut self) -> Result<TickReport> {
        self.ticks += 1;
        self.tick_started = Instant::now();
        let result = self.tick_inner().await;
        if let Err(error) = &result {
            let kind = tick_error_kind(error).to_owned();
            self.counters.count(("server_errors", String::new(), kind));
            let now = self.clock();
            self.status.send_modify(|status| {
                status.uptime_seconds = now.as_secs();
                status.ticks = self.ticks;
                status.last_error = Some(error.to_string());
                status.last_tick_duration_seconds = self.tick_started.elapsed().as_secs_f64();
                status.counters = self.counters.snapshot();
            });
        }
        result
    }

    /// Runs `hook` once, at the first tick whose login succeeds (the server answered and took
    /// the credentials), before that tick searches: where the CLI says "started worker manager".
    pub fn on_ready(&mut self, hook: impl FnOnce() + Send + 'static) {
        self.on_ready = Some(ReadyHook(Box::new(hook)));
    }

    async fn tick_inner(&mut self) -> Result<TickReport> {
        if self.on_ready.is_some() {
            self.client.login().await?;
            if let Some(ReadyHook(hook)) = self.on_ready.take() {
                hook();
            }
        }
        let mut unobserved = Vec::with_capacity(self.pools.len());
        let mut first_error = None;
        let mut news = Vec::new();
        let listed_at = self.clock();
        for runtime in &mut self.pools {
            match runtime.pool.backend.get_worker_jobs().await {
                Ok(jobs) => {
                    news.push(runtime.take_listing(jobs, listed_at));
                    unobserved.push(None);
                }
                Err(error) => {
                    tracing::warn!(pool = runtime.name(), %error, "cannot list the pool's jobs; skipping the pool this tick");
                    unobserved.push(Some(error.to_string()));
                    first_error.get_or_insert(error);
                }
            }
        }
        if let Some(error) = first_error.filter(|_| unobserved.iter().all(Option::is_some)) {
            return Err(error);
        }
        let now = self.clock();
        let mut events = Vec::new();
        let mut newly_failed = Vec::new();
        for item in news {
            self.num_failed += item.newly_failed.len() as u32;
            newly_failed.extend(item.newly_failed);
            events.extend(item.events);
            runtime::remember(&mut self.recent_failures, item.failures);
        }
        let pools: Vec<PoolObservation> = self
            .pools
            .iter_mut()
            .zip(unobserved)
            .map(|(runtime, error)| runtime.observation(now, error))
            .collect();
        let policies = self.policies();
        let keywords = self.keywords();
        let search = self
            .read_staged(&keywords, &policies, &pools, now, &events)
            .await?;
        let malformed = self.note_malformed(&search.skipped);
        let removed = logs::update_window(&mut self.window, &search.bundles, search.complete);
        let observed = PoolsObservation {
            pools,
            bundles: search.bundles,
        };
        let decision = plan_pools(&observed, &policies, now);
        let single = self.single;
        let filtered = logs::note_unserved(&mut self.reported, single, &decision);
        logs::log_decisions(
            self.pools.iter().map(|p| &p.pool.policy),
            &decision,
            single,
            search.total,
            removed,
        );
        let totals = |f: fn(&PoolDecision) -> usize| decision.pools.iter().map(f).sum::<usize>();
        let (active, pending) = (totals(|d| d.active), totals(|d| d.pending));
        let upstream = if self.single {
            decision.pools[0].as_upstream()
        } else {
            Decision {
                launches: decision.launches(),
                reasons: Vec::new(),
            }
        };
        events.extend(logs::decision_events(&decision));
        let mut report = TickReport {
            keywords,
            staged: search.total,
            read: observed.bundles.len(),
            search_requests: search.requests,
            removed,
            filtered,
            malformed,
            jobs: active + pending,
            active,
            pending,
            newly_failed,
            decision: upstream,
            launched: Vec::new(),
            launch_errors: Vec::new(),
            pools: decision,
            events,
        };
        self.act(&mut report).await;
        self.counters.add(&report.events);
        self.publish_status(&report);
        Ok(report)
    }

    /// The staged bundles the pools can absorb ([`Need`]): the server renders no more. When
    /// the search fails, the listing's `events` still count.
    async fn read_staged(
        &mut self,
        keywords: &[String],
        policies: &[PoolPolicy],
        pools: &[PoolObservation],
        now: Duration,
        events: &[TickEvent],
    ) -> Result<SearchResult> {
        let need = Need::new(policies, pools, now);
        let result = self.client.staged_for(keywords, &need).await;
        if result.is_err() {
            self.counters.add(events);
        }
        result
    }

    /// Logs each malformed bundle once (while it stays malformed); returns how many there are.
    fn note_malformed(&mut self, skipped: &[SkippedBundle]) -> usize {
        for bundle in skipped {
            if self.reported_malformed.insert(bundle.uuid.clone()) {
                tracing::warn!(bundle = %bundle.uuid, reason = %bundle.reason, "skipping malformed bundle");
            }
        }
        let now: HashSet<&str> = skipped.iter().map(|s| s.uuid.as_str()).collect();
        self.reported_malformed
            .retain(|uuid| now.contains(uuid.as_str()));
        skipped.len()
    }

    /// Stops stuck jobs, then launches, pool by pool.
    async fn act(&mut self, report: &mut TickReport) {
        let decisions = report.pools.pools.clone();
        for (index, decision) in decisions.iter().enumerate() {
            self.stop_stuck(index, decision, report).await;
            for _ in 0..decision.launches {
                if self.stop_flags.stopping() || !self.launch(index, report).await {
                    break;
                }
            }
        }
        for (runtime, decision) in self.pools.iter_mut().zip(&report.pools.pools) {
            runtime.last_decision = Some(decision.clone());
            runtime.assigned = report
                .pools
                .assignments
                .iter()
                .filter(|a| a.pool == decision.pool)
                .map(|a| a.uuid.clone())
                .collect();
        }
    }

    async fn stop_stuck(&mut self, index: usize, decision: &PoolDecision, report: &mut TickReport) {
        if decision.stops.is_empty() {
            return;
        }
        let now = self.clock();
        let runtime = &mut self.pools[index];
        for id in &decision.stops {
            let job = runtime
                .listed
                .iter()
                .find(|j| &j.id == id)
                .cloned()
                .unwrap_or_else(|| WorkerJob::new(id.clone(), JobState::Pending));
            let result = runtime.pool.backend.stop_worker_job(&job).await;
            let ok = result.is_ok();
            match result {
                Ok(()) => {
                    tracing::info!(pool = runtime.name(), job = %id, reason = "pending_timeout", "stopped a stuck pending job; its demand goes to the next fitting pool");
                    runtime.stopping.insert(id.clone());
                }
                Err(error) => {
                    tracing::warn!(pool = runtime.name(), job = %id, %error, "cannot stop a stuck pending job");
                }
            }
            report.events.push(TickEvent::Stop {
                pool: runtime.name().to_owned(),
                job_id: id.clone(),
                reason: "pending_timeout",
                ok,
            });
        }
        let news = runtime.fail(
            now,
            "pending_timeout",
            format!("jobs {} pending too long", decision.stops.join(", ")),
        );
        report.events.extend(news.events);
        runtime::remember(&mut self.recent_failures, news.failures);
    }

    /// One launch on pool `index`. Returns whether to go on launching on this pool this tick.
    async fn launch(&mut self, index: usize, report: &mut TickReport) -> bool {
        let unique = new_unique();
        let dry_run = self.config.dry_run;
        let now = self.clock();
        let runtime = &mut self.pools[index];
        let pool_name = runtime.name().to_owned();
        let request = LaunchRequest {
            unique: &unique,
            worker: &runtime.pool.worker,
            dry_run,
        };
        let submitting = shutdown::Submitting::new(&self.stop_flags.submitting);
        let result = runtime.pool.backend.start_worker_job(&request).await;
        drop(submitting);
        let (outcome, go_on) = match result {
            Ok(job) => {
                let output = runtime.pool.backend.job_output(&job);
                tracing::info!(pool = %pool_name, job = %job.id, backend = runtime.pool.backend.name(), dry_run, output = output.as_deref(), "started a worker job{}", output.as_deref().map(|o| format!("; its output goes to {o}")).unwrap_or_default());
                runtime.launched(&job, now);
                report.launched.push(job);
                (
                    if dry_run {
                        LaunchResult::DryRun
                    } else {
                        LaunchResult::Started
                    },
                    true,
                )
            }
            Err(error) if error.is_temporary() => {
                tracing::warn!(pool = %pool_name, %error, "could not start a worker job; will retry on a later tick");
                report.launch_errors.push(error.to_string());
                (LaunchResult::TemporaryError, false)
            }
            Err(error) => {
                runtime.last_launch = Some(now);
                self.num_failed += 1;
                tracing::error!(pool = %pool_name, %error, failed = self.num_failed, "failed to start a worker job");
                report.launch_errors.push(error.to_string());
                let news = runtime.fail(now, "submit_failed", error.to_string());
                report.events.extend(news.events);
                runtime::remember(&mut self.recent_failures, news.failures);
                (
                    LaunchResult::Failed,
                    runtime.pool.policy.launch_mode == LaunchMode::Compat,
                )
            }
        };
        report.events.push(TickEvent::Launch {
            pool: pool_name,
            result: outcome,
        });
        go_on
    }

    fn publish_status(&self, report: &TickReport) {
        let now = self.clock();
        let status = Status {
            uptime_seconds: now.as_secs(),
            ticks: self.ticks,
            last_error: None,
            last_success_seconds: Some(now.as_secs()),
            last_tick_duration_seconds: self.tick_started.elapsed().as_secs_f64(),
            staged: report.staged,
            pools: self.pools.iter().map(|p| p.status(now)).collect(),
            unserved: report.pools.unserved.clone(),
            recent_failures: self.recent_failures.iter().cloned().collect(),
            counters: self.counters.snapshot(),
        };
        self.status.send_replace(status);
    }

    /// Whether `--exit-after-num-failed` has been exceeded.
    fn too_many_failures(&self) -> Option<Outcome> {
        let limit = self.config.exit_after_num_failed?;
        (self.num_failed > limit).then_some(Outcome::TooManyFailures {
            failed: self.num_failed,
            limit,
        })
    }

    /// Ticks every `sleep_time` until a shutdown is requested (`shutdown` turns `true`: the
    /// tick in flight is cancelled, see [`SUBMIT_GRACE`]), one tick ran with `once`, the
    /// restart time came, or an error is fatal.
    pub async fn run(
        &mut self,
        once: bool,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<Outcome> {
        let mut backoff = Backoff::new(
            self.config.sleep_time.max(Duration::from_millis(100)),
            self.config.max_backoff,
        );
        let mut streak = streak::Streak::new(self.started);
        loop {
            self.apply_reloads();
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
            let Some(result) = self.tick_or_shutdown(&mut shutdown).await else {
                return Ok(Outcome::Shutdown);
            };
            let mut launch_errors = 0;
            let delay = match result {
                Ok(report) => {
                    launch_errors = report.launch_errors.len();
                    if let Some((after, kind)) = streak.success(Instant::now()) {
                        tracing::info!(after, "recovered from: {kind}");
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
                    let report = streak.failure(error_kind(&error), Instant::now());
                    let retry_in_seconds = wait.as_secs();
                    match report {
                        _ if !error.is_temporary() => {
                            tracing::error!(%error, retry_in_seconds, "tick failed");
                        }
                        Some(streak::Report { failures, since }) => {
                            tracing::warn!(%error, failures, retry_in_seconds, "tick skipped ({failures} failed in a row, {since})");
                        }
                        None => tracing::debug!(%error, retry_in_seconds, "tick skipped again"),
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
                return Ok(Outcome::Once { launch_errors });
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

/// The `kind` label of a failed tick in the `server_errors` counter (few, stable values).
fn tick_error_kind(error: &Error) -> &'static str {
    match error {
        Error::Unreachable { .. } => "unreachable",
        Error::Server { status: 429, .. } | Error::RateLimited { .. } => "rate_limited",
        Error::Server { status, .. } if *status >= 500 => "server_error",
        Error::Server { .. } => "client_error",
        Error::Unauthenticated { .. } => "unauthenticated",
        Error::InvalidReply { .. } => "invalid_reply",
        Error::Backend { .. } | Error::Unsupported { .. } => "backend",
        _ => "other",
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
