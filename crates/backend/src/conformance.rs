//! The backend conformance suite (feature `conformance`): a backend's service test implements
//! [`Harness`] for its real (or faithfully faked) platform and calls [`run_conformance`]. The
//! suite checks the behaviour the manager relies on: a started job is listed (pending while
//! the platform holds it, then active), a new backend instance finds it again (restart
//! adoption), `stop` ends it, and a job that ends by itself stops counting as capacity. Like
//! object_store's `integration` module, it is public for the backend crates' tests, but it is
//! not a stable part of the public API.

use crate::backend::{JobState, LaunchRequest, WorkerBackend, WorkerJob, new_unique};
use crate::command::WorkerOptions;
use std::sync::Arc;
use std::time::Duration;

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
