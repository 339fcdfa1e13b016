//! Test support: an in-memory fake backend, the services the tests need, and (re-exported
//! from the backend contract, `codalab_wm_backend::conformance`) the backend conformance
//! suite. Enabled with the `testing` feature. Like object_store's `integration` module, it is
//! public for the tests of other crates, but it is not a stable part of the public API: it
//! changes with what the manager relies on.
//!
//! The fake servers (CodaLab, Azure Batch, Kubernetes) are crates of their own under
//! `crates/testkit/`, so that this feature pulls in no HTTP server.

use crate::backend::{JobState, LaunchRequest, PendingKind, WorkerBackend, WorkerJob};
use crate::bundle::WorkerShape;
use crate::error::{Error, Result};
pub use codalab_wm_backend::conformance::{
    Harness, Polling, Probe, check_forwarding, run_conformance, wait_for_job,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The capacity switches among a tick's `events`, in order (`to_fallback`, `retry`, …).
pub fn capacity_switches(events: &[crate::status::TickEvent]) -> Vec<&'static str> {
    (events.iter())
        .filter_map(|e| match e {
            crate::status::TickEvent::CapacitySwitched(switch) => Some(switch.switch),
            _ => None,
        })
        .collect()
}

/// Checks that the file at `path` (a snapshot checked in: a `--help`, a generated reference
/// page, a manifest) holds `generated`, what the code makes of it now. With `UPDATE_GOLDEN`
/// set it writes `generated` there instead. Panics naming the file and the command that
/// rewrites it (`regenerate`) when the two differ.
pub fn check_generated(path: &std::path::Path, generated: &str, regenerate: &str) {
    if let Some(stale) = stale_generated(path, generated, regenerate) {
        panic!("{stale}");
    }
}

/// [`check_generated`] without the panic: `Some` of what is stale, for a test that checks
/// several files and reports them all.
pub fn stale_generated(
    path: &std::path::Path,
    generated: &str,
    regenerate: &str,
) -> Option<String> {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, generated)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return None;
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    if checked_in == generated {
        return None;
    }
    let line = (checked_in.lines().zip(generated.lines()))
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| checked_in.lines().count().min(generated.lines().count()));
    Some(format!(
        "{} is stale (from line {}): `UPDATE_GOLDEN=1 {regenerate}` rewrites it; review the diff",
        path.display(),
        line + 1
    ))
}

/// Whether a test that needs service `name` can run. When the service is missing: under
/// `CI=true` this panics (a CI run must never skip), elsewhere it prints how to start the
/// service and returns `false` so the test returns early.
pub fn require_service(name: &str, available: bool) -> bool {
    if available {
        return true;
    }
    let hint =
        format!("service `{name}` is not running: start it with `cargo xtask services up {name}`");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{hint} (CI=true: tests that need a service fail instead of skipping)");
    }
    eprintln!("skipping: {hint}");
    false
}

/// Where `cargo xtask services` keeps the services' state (venvs, sockets, logs):
/// `SERVICES_DIR` when set, else the workspace's `.services`, as the service scripts decide.
pub fn services_dir() -> std::path::PathBuf {
    std::env::var_os("SERVICES_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.services"))
}

/// What Debian's `promtool check metrics` (prometheus 2.42) objects to in the metrics `text`
/// (the OpenMetrics text a `/metrics` serves): its lines, less one artefact of that version,
/// which reads the text format and so reports an OpenMetrics counter's sample `x_total` as a
/// family without help text. `None` when `promtool` is missing (under `CI=true` it panics: a
/// CI run must never skip).
pub fn promtool_problems(text: &str) -> Option<Vec<String>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let spawned = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = spawned else {
        let hint = "no `promtool` on PATH: install Debian's with `apt-get install prometheus`";
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{hint} (CI=true)"
        );
        eprintln!("skipping: {hint}");
        return None;
    };
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(text.as_bytes())
        .expect("promtool reads its stdin");
    drop(stdin);
    let out = child.wait_with_output().expect("promtool ends");
    let counters: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let artefact = |line: &str| {
        line.strip_suffix("_total no help text")
            .is_some_and(|family| counters.contains(&family))
    };
    let said = [out.stdout, out.stderr].map(|b| String::from_utf8_lossy(&b).into_owned());
    Some(
        said.iter()
            .flat_map(|s| s.lines())
            .filter(|l| !l.trim().is_empty() && !artefact(l))
            .map(str::to_owned)
            .collect(),
    )
}

/// An in-memory backend for tests and simulations: jobs start pending, and the test moves them.
#[derive(Debug, Clone)]
pub struct FakeBackend {
    name: &'static str,
    shape: WorkerShape,
    inner: Arc<Mutex<FakeState>>,
}

#[derive(Debug, Default)]
struct FakeState {
    jobs: Vec<WorkerJob>,
    launches: Vec<Vec<String>>,
    next_id: u64,
    fail_list: Option<String>,
    fail_start: Option<String>,
    start_active: bool,
    stops: Vec<String>,
    slow_stop: bool,
    unique_names: bool,
    /// The kind the platform gives pending jobs with a reason, by reason.
    kinds: Vec<(String, PendingKind)>,
}

impl FakeBackend {
    /// A fake backend whose workers have `shape`.
    pub fn new(shape: WorkerShape) -> Self {
        Self::named("fake", shape)
    }

    /// A fake backend called `name` (as `WorkerBackend::name` reports it).
    pub fn named(name: &'static str, shape: WorkerShape) -> Self {
        Self {
            name,
            shape,
            inner: Arc::default(),
        }
    }

    /// The ids of the jobs stopped so far, in order.
    pub fn stops(&self) -> Vec<String> {
        self.state().stops.clone()
    }

    /// With `true`, a stopped job stays listed in its state until [`FakeBackend::set_state`]
    /// ends it (a platform that takes a while to cancel).
    pub fn slow_stop(&self, slow: bool) {
        self.state().slow_stop = slow;
    }

    /// With `true`, a started job is named `fake-worker-<unique>` (as Slurm names its jobs), so
    /// that its worker's check-in can be matched ([`crate::checkin`]); otherwise its name is
    /// its id and its check-in is never matched.
    pub fn unique_names(&self, on: bool) {
        self.state().unique_names = on;
    }

    /// The current jobs.
    pub fn jobs(&self) -> Vec<WorkerJob> {
        self.state().jobs.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sets the state of job `id`.
    pub fn set_state(&self, id: &str, state: JobState) {
        if let Some(job) = self.state().jobs.iter_mut().find(|j| j.id == id) {
            job.state = state;
        }
    }

    /// Sets the state and reason of job `id`, as the platform reports a job that ended (a
    /// preempted job with the platform's reason).
    pub fn set_state_with_reason(&self, id: &str, state: JobState, reason: Option<&str>) {
        if let Some(job) = self.state().jobs.iter_mut().find(|j| j.id == id) {
            job.state = state;
            job.reason = reason.map(str::to_owned);
        }
    }

    /// Sets the platform's forecast of job `id`'s start ([`WorkerJob::expected_start`], as
    /// Slurm's `squeue --start` gives it).
    pub fn set_expected_start(&self, id: &str, at: Option<std::time::SystemTime>) {
        if let Some(job) = self.state().jobs.iter_mut().find(|j| j.id == id) {
            job.expected_start = at;
        }
    }

    /// Says that a pending job whose reason is `reason` is of `kind`
    /// ([`WorkerBackend::pending_kind`]), as a platform tells a held or blocked job.
    pub fn pending_kind_of(&self, reason: &str, kind: PendingKind) {
        self.state().kinds.push((reason.to_owned(), kind));
    }

    /// Whether new jobs start `Active` (a platform with free capacity) instead of `Pending`.
    pub fn start_active(&self, active: bool) {
        self.state().start_active = active;
    }

    /// Adds a job as if another manager process had started it.
    pub fn insert(&self, job: WorkerJob) {
        self.state().jobs.push(job);
    }

    /// The argv of every launch so far.
    pub fn launches(&self) -> Vec<Vec<String>> {
        self.state().launches.clone()
    }

    /// Makes `get_worker_jobs` fail (temporarily) with `message`, or succeed again with `None`.
    pub fn fail_listing(&self, message: Option<&str>) {
        self.state().fail_list = message.map(str::to_owned);
    }

    /// Makes `start_worker_job` fail (permanently) with `message`, or succeed again with `None`.
    /// A message that starts with `no capacity: ` fails as the platform having no capacity
    /// ([`Error::NoCapacity`]: a stockout).
    pub fn fail_starting(&self, message: Option<&str>) {
        self.state().fail_start = message.map(str::to_owned);
    }
}

#[async_trait::async_trait]
impl WorkerBackend for FakeBackend {
    fn name(&self) -> &str {
        self.name
    }

    fn worker_shape(&self) -> WorkerShape {
        self.shape
    }

    fn pending_kind(&self, job: &WorkerJob) -> PendingKind {
        let kinds = &self.state().kinds;
        let kind = kinds
            .iter()
            .find(|(reason, _)| job.reason.as_ref() == Some(reason));
        kind.map_or(PendingKind::Queued, |(_, kind)| *kind)
    }

    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        let state = self.state();
        if let Some(message) = &state.fail_list {
            return Err(Error::backend_temporary(
                "fake",
                "list worker jobs",
                message.clone(),
            ));
        }
        Ok(state.jobs.clone())
    }

    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        let mut state = self.state();
        if let Some(message) = &state.fail_start {
            if let Some(stockout) = message.strip_prefix("no capacity: ") {
                return Err(Error::NoCapacity {
                    backend: "fake".into(),
                    message: stockout.to_owned(),
                });
            }
            return Err(Error::backend(
                "fake",
                "submit a worker job",
                message.clone(),
            ));
        }
        if request.dry_run {
            return Ok(WorkerJob::new(
                format!("dry-run-{}", request.unique),
                JobState::Ended,
            ));
        }
        state.next_id += 1;
        let initial = if state.start_active {
            JobState::Active
        } else {
            JobState::Pending
        };
        let mut job = WorkerJob::new(state.next_id.to_string(), initial);
        if state.unique_names {
            job.name = format!("fake-worker-{}", request.unique);
        }
        state
            .launches
            .push(request.worker.build_command(request.unique, "workdir"));
        state.jobs.push(job.clone());
        Ok(job)
    }

    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        let slow = {
            let mut state = self.state();
            state.stops.push(job.id.clone());
            state.slow_stop
        };
        if !slow {
            self.set_state(&job.id, JobState::Ended);
        }
        Ok(())
    }
}

/// The conformance harness for [`FakeBackend`], proving the suite itself.
#[derive(Debug)]
pub struct FakeHarness {
    backend: FakeBackend,
}

impl Default for FakeHarness {
    fn default() -> Self {
        let backend = FakeBackend::new(WorkerShape::from_flags(1, 0, 1024));
        backend.start_active(true);
        Self { backend }
    }
}

#[async_trait::async_trait]
impl Harness for FakeHarness {
    async fn backend(&self) -> Arc<dyn WorkerBackend> {
        Arc::new(self.backend.clone())
    }
    async fn hold_new_jobs(&self) -> bool {
        self.backend.start_active(false);
        true
    }
    async fn release_jobs(&self) {
        self.backend.start_active(true);
        for job in self.backend.get_worker_jobs().await.unwrap_or_default() {
            if job.state == JobState::Pending {
                self.backend.set_state(&job.id, JobState::Active);
            }
        }
    }
    async fn finish_job(&self, job: &WorkerJob) {
        self.backend.set_state(&job.id, JobState::Ended);
    }
    fn polling(&self) -> Polling {
        Polling {
            interval: Duration::from_millis(1),
            attempts: 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaction_ticks_burst_versus_compat() {
        use crate::pools::LaunchMode;
        let burst = ReactionScenario::default();
        let compat = ReactionScenario {
            launch_mode: LaunchMode::Compat,
            max_launches_per_tick: 1,
            ..burst
        };
        // Upstream: one launch per 60 s at 5 s per tick: 1 + 99 · 12 ticks.
        assert_eq!(reaction_ticks(&compat), Some(1189));
        // Bursts of 10 every 60 s: 1 + 9 · 12 ticks.
        assert_eq!(reaction_ticks(&burst), Some(109));
        let unpaced = ReactionScenario {
            min_seconds_between_workers: 0,
            ..burst
        };
        assert_eq!(reaction_ticks(&unpaced), Some(10));
        let all_at_once = ReactionScenario {
            max_launches_per_tick: 100,
            ..burst
        };
        assert_eq!(reaction_ticks(&all_at_once), Some(1));
        assert_eq!(
            reaction_ticks(&ReactionScenario {
                min_seconds_between_workers: 0,
                ..compat
            }),
            Some(100)
        );
        assert_eq!(
            reaction_ticks(&ReactionScenario {
                max_workers: 50,
                ..burst
            }),
            None
        );
    }

    #[tokio::test]
    async fn the_fake_backend_passes_the_suite() {
        run_conformance(&FakeHarness::default()).await.unwrap();
    }

    /// A backend that forgets its jobs on restart must fail the suite (the suite can fail).
    #[derive(Debug, Default)]
    struct ForgetfulHarness(FakeHarness);

    #[async_trait::async_trait]
    impl Harness for ForgetfulHarness {
        async fn backend(&self) -> Arc<dyn WorkerBackend> {
            let backend = self.0.backend().await;
            let calls = backend.get_worker_jobs().await.unwrap_or_default();
            if calls.iter().any(|j| j.state == JobState::Active) {
                return Arc::new(FakeBackend::new(WorkerShape::default()));
            }
            backend
        }
        async fn hold_new_jobs(&self) -> bool {
            self.0.hold_new_jobs().await
        }
        async fn release_jobs(&self) {
            self.0.release_jobs().await
        }
        async fn finish_job(&self, job: &WorkerJob) {
            self.0.finish_job(job).await
        }
        fn polling(&self) -> Polling {
            self.0.polling()
        }
    }

    #[tokio::test]
    async fn a_forgetful_backend_fails_the_suite() {
        let err = run_conformance(&ForgetfulHarness::default())
            .await
            .unwrap_err();
        assert!(err.contains("adopted after a restart"), "{err}");
    }
}

/// A scenario for [`reaction_ticks`]: `bundles` staged bundles appear at once, nothing is
/// running, and submitted jobs stay pending (the worst case: no worker comes up during the
/// burst, so only the policy paces the launches).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReactionScenario {
    /// Staged bundles.
    pub bundles: usize,
    /// Compat (upstream's one launch per tick) or target (burst).
    pub launch_mode: crate::pools::LaunchMode,
    /// `--max-launches-per-tick` (target mode).
    pub max_launches_per_tick: u32,
    /// `--max-workers`.
    pub max_workers: u32,
    /// `--min-seconds-between-workers`.
    pub min_seconds_between_workers: u64,
    /// `--sleep-time`: time between two ticks.
    pub sleep_time: Duration,
}

impl Default for ReactionScenario {
    /// 100 bundles, burst of 10 per tick, max 100 workers, upstream's 60 s between launches
    /// and 5 s between ticks.
    fn default() -> Self {
        Self {
            bundles: 100,
            launch_mode: crate::pools::LaunchMode::Target,
            max_launches_per_tick: 10,
            max_workers: 100,
            min_seconds_between_workers: 60,
            sleep_time: Duration::from_secs(5),
        }
    }
}

/// The bench figure of issue #8: how many ticks until `scenario.bundles` staged bundles got as
/// many submissions, through the real pure policy ([`crate::pools::plan_pools`]; a compat pool
/// runs upstream's [`crate::policy::plan`]). Tick 1 runs at time 0, tick `k` at
/// `(k - 1) · sleep_time`. Deterministic; `None` when launches stop before every bundle got
/// one (e.g. `max_workers` below the bundle count).
pub fn reaction_ticks(scenario: &ReactionScenario) -> Option<u64> {
    use crate::bundle::StagedBundle;
    use crate::pools::{ObservedJob, PoolObservation, PoolPolicy, PoolsObservation, plan_pools};
    let policy = PoolPolicy {
        min: 0,
        max: scenario.max_workers,
        launch_mode: scenario.launch_mode,
        max_launches_per_tick: scenario.max_launches_per_tick,
        min_seconds_between_workers: scenario.min_seconds_between_workers,
        ..PoolPolicy::new("bench", WorkerShape::from_flags(1, 0, 1024))
    };
    let bundles: Vec<StagedBundle> = (0..scenario.bundles)
        .map(|n| StagedBundle::new(format!("0x{n:032x}")))
        .collect();
    let mut pending: Vec<ObservedJob> = Vec::new();
    let mut last_launch = None;
    // Without a launch for longer than the rate limit plus two ticks, none will come.
    let stall = scenario.min_seconds_between_workers / scenario.sleep_time.as_secs().max(1) + 2;
    let mut idle = 0;
    for tick in 1..=1_000_000u64 {
        let now = scenario.sleep_time * u32::try_from(tick - 1).ok()?;
        let observed = PoolsObservation {
            server: None,
            bundles: bundles.clone(),
            pools: vec![PoolObservation {
                jobs: pending.clone(),
                since_last_launch: last_launch.map(|t: Duration| now - t),
                ..PoolObservation::default()
            }],
            times: Vec::new(),
        };
        let launches = plan_pools(&observed, std::slice::from_ref(&policy), now).launches();
        idle = if launches == 0 { idle + 1 } else { 0 };
        if idle > stall {
            return None;
        }
        for _ in 0..launches {
            pending.push(ObservedJob::new(
                pending.len().to_string(),
                JobState::Pending,
                Duration::ZERO,
                Duration::ZERO,
            ));
            last_launch = Some(now);
        }
        if pending.len() >= scenario.bundles {
            return Some(tick);
        }
    }
    None
}
