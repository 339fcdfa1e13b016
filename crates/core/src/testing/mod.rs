//! Test support shared by every backend crate: the backend conformance suite and an in-memory
//! fake backend. Enabled with the `testing` feature.
//!
//! A backend's service test implements [`Harness`] for its real (or faithfully faked) platform
//! and calls [`run_conformance`]. The suite checks the behaviour the manager relies on:
//! a started job is listed (pending while the platform holds it, then active), a new backend
//! instance finds it again (restart adoption), `stop` ends it, and a job that ends by itself
//! stops counting as capacity.

pub mod fake_codalab;

use crate::backend::{JobState, LaunchRequest, WorkerBackend, WorkerJob, new_unique};
use crate::bundle::WorkerShape;
use crate::command::WorkerOptions;
use crate::error::{Error, Result};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// How the suite polls the platform for a state change: a bounded number of polls.
#[derive(Debug, Clone, Copy)]
pub struct Polling {
    /// Time between two polls.
    pub interval: Duration,
    /// Polls before giving up.
    pub attempts: u32,
}

impl Default for Polling {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(250),
            attempts: 120,
        }
    }
}

/// Platform hooks for the conformance suite.
#[async_trait::async_trait]
pub trait Harness: Send + Sync {
    /// A new backend instance that owns the same jobs, as a restarted manager would build it.
    async fn backend(&self) -> Arc<dyn WorkerBackend>;
    /// Makes jobs started from now on wait (fill the node, hold the queue). Returns `false`
    /// when the platform cannot hold jobs; the suite then skips the pending check.
    async fn hold_new_jobs(&self) -> bool;
    /// Lets held jobs run.
    async fn release_jobs(&self);
    /// Makes `job` end by itself, as a worker that exits when idle.
    async fn finish_job(&self, job: &WorkerJob);
    /// How to poll this platform.
    fn polling(&self) -> Polling {
        Polling::default()
    }
    /// The worker options used for launches.
    fn worker_options(&self) -> WorkerOptions {
        WorkerOptions {
            server: "http://127.0.0.1:9".into(),
            ..WorkerOptions::default()
        }
    }
}

/// Polls `backend` until the job with `id` satisfies `accept` (an absent job is passed as `None`).
pub async fn wait_for_job(
    backend: &dyn WorkerBackend,
    id: &str,
    polling: Polling,
    what: &str,
    accept: impl Fn(Option<&WorkerJob>) -> bool,
) -> Result<Option<WorkerJob>, String> {
    let mut last = None;
    for attempt in 0..polling.attempts {
        if attempt > 0 {
            tokio::time::sleep(polling.interval).await;
        }
        let jobs = backend
            .get_worker_jobs()
            .await
            .map_err(|e| format!("listing jobs: {e}"))?;
        let job = jobs.into_iter().find(|j| j.id == id);
        if accept(job.as_ref()) {
            return Ok(job);
        }
        last = job;
    }
    Err(format!("job {id} never became {what}; last seen: {last:?}"))
}

/// Runs the conformance suite. Returns a description of the first failed expectation.
pub async fn run_conformance(harness: &dyn Harness) -> Result<(), String> {
    let polling = harness.polling();
    let options = harness.worker_options();
    let backend = harness.backend().await;
    let held = harness.hold_new_jobs().await;

    let unique = new_unique();
    let request = LaunchRequest {
        unique: &unique,
        worker: &options,
        dry_run: false,
    };
    let job = backend
        .start_worker_job(&request)
        .await
        .map_err(|e| format!("starting a job: {e}"))?;
    if !job.state.is_capacity() {
        return Err(format!(
            "a job just started must count as capacity, got {:?}",
            job.state
        ));
    }
    if held {
        wait_for_job(&*backend, &job.id, polling, "pending", |j| {
            j.is_some_and(|j| j.state == JobState::Pending)
        })
        .await?;
    }
    harness.release_jobs().await;
    wait_for_job(&*backend, &job.id, polling, "active", |j| {
        j.is_some_and(|j| j.state == JobState::Active)
    })
    .await?;

    let restarted = harness.backend().await;
    let adopted = wait_for_job(
        &*restarted,
        &job.id,
        polling,
        "adopted after a restart",
        |j| j.is_some_and(|j| j.state == JobState::Active),
    )
    .await?;
    let adopted = adopted.ok_or("adopted job vanished")?;
    restarted
        .stop_worker_job(&adopted)
        .await
        .map_err(|e| format!("stopping {}: {e}", adopted.id))?;
    wait_for_job(&*restarted, &job.id, polling, "gone after stop", |j| {
        j.is_none_or(|j| !j.state.is_capacity())
    })
    .await?;

    let unique = new_unique();
    let request = LaunchRequest {
        unique: &unique,
        worker: &options,
        dry_run: false,
    };
    let second = restarted
        .start_worker_job(&request)
        .await
        .map_err(|e| format!("starting a job: {e}"))?;
    wait_for_job(&*restarted, &second.id, polling, "active", |j| {
        j.is_some_and(|j| j.state == JobState::Active)
    })
    .await?;
    harness.finish_job(&second).await;
    wait_for_job(
        &*restarted,
        &second.id,
        polling,
        "gone after it ended",
        |j| j.is_none_or(|j| !j.state.is_capacity()),
    )
    .await?;
    Ok(())
}

/// An in-memory backend for tests and simulations: jobs start pending, and the test moves them.
#[derive(Debug, Clone)]
pub struct FakeBackend {
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
}

impl FakeBackend {
    /// A fake backend whose workers have `shape`.
    pub fn new(shape: WorkerShape) -> Self {
        Self {
            shape,
            inner: Arc::default(),
        }
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
    pub fn fail_starting(&self, message: Option<&str>) {
        self.state().fail_start = message.map(str::to_owned);
    }
}

#[async_trait::async_trait]
impl WorkerBackend for FakeBackend {
    fn name(&self) -> &str {
        "fake"
    }

    fn worker_shape(&self) -> WorkerShape {
        self.shape
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
        let job = WorkerJob::new(state.next_id.to_string(), initial);
        state
            .launches
            .push(request.worker.build_command(request.unique, "workdir"));
        state.jobs.push(job.clone());
        Ok(job)
    }

    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        self.set_state(&job.id, JobState::Ended);
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
