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

/// Checks that a wrapper backend (metrics around every call, a lease fence) forwards every
/// method of [`WorkerBackend`] to the backend it wraps: `wrap` wraps a [`Probe`], whose answers
/// all differ from the trait's defaults, so a method the wrapper forgot answers the default and
/// the check names it. A wrapper that drops [`WorkerBackend::pending_kind`] makes every held
/// job look like capacity. `Err` lists every method not forwarded.
pub async fn check_forwarding<W: WorkerBackend>(
    wrap: impl FnOnce(Probe) -> W,
) -> Result<(), String> {
    use crate::backend::{CleanupItem, PendingKind, WorkerAccount};
    let wrapped = wrap(Probe(()));
    let job = WorkerJob::new(PROBE, JobState::Pending);
    let worker = WorkerOptions::default();
    let request = LaunchRequest {
        unique: PROBE,
        worker: &worker,
        dry_run: false,
    };
    let cleanup = wrapped.cleanup(true).await.ok();
    let checks = [
        ("name", wrapped.name() == PROBE),
        ("worker_shape", wrapped.worker_shape() == Probe::shape()),
        (
            "get_worker_jobs",
            wrapped
                .get_worker_jobs()
                .await
                .is_ok_and(|jobs| jobs.len() == 1),
        ),
        (
            "start_worker_job",
            wrapped.start_worker_job(&request).await.is_ok(),
        ),
        (
            "job_output",
            wrapped.job_output(&job).as_deref() == Some(PROBE),
        ),
        (
            "pending_kind",
            wrapped.pending_kind(&job) == PendingKind::Held,
        ),
        ("take_reaped", wrapped.take_reaped() == [PROBE]),
        (
            "worker_account",
            matches!(wrapped.worker_account().await, Ok(WorkerAccount::Named(n)) if n == PROBE),
        ),
        (
            "stop_worker_job",
            wrapped.stop_worker_job(&job).await.is_ok(),
        ),
        (
            "cleanup",
            cleanup.is_some_and(|items: Vec<CleanupItem>| items.len() == 1),
        ),
    ];
    let missed: Vec<&str> = (checks.iter())
        .filter(|(_, forwarded)| !forwarded)
        .map(|(method, _)| *method)
        .collect();
    match missed.is_empty() {
        true => Ok(()),
        false => Err(format!("not forwarded: {}", missed.join(", "))),
    }
}

/// What the probe answers with.
const PROBE: &str = "probe";

/// A backend whose every answer differs from [`WorkerBackend`]'s defaults
/// ([`check_forwarding`]).
#[derive(Debug)]
pub struct Probe(());

impl Probe {
    fn shape() -> crate::bundle::WorkerShape {
        crate::bundle::WorkerShape::from_flags(3, 1, 3000)
    }
}

#[async_trait::async_trait]
impl WorkerBackend for Probe {
    fn name(&self) -> &str {
        PROBE
    }

    fn worker_shape(&self) -> crate::bundle::WorkerShape {
        Self::shape()
    }

    async fn get_worker_jobs(&self) -> crate::error::Result<Vec<WorkerJob>> {
        Ok(vec![WorkerJob::new(PROBE, JobState::Pending)])
    }

    async fn start_worker_job(
        &self,
        request: &LaunchRequest<'_>,
    ) -> crate::error::Result<WorkerJob> {
        Ok(WorkerJob::new(request.unique, JobState::Pending))
    }

    fn job_output(&self, _job: &WorkerJob) -> Option<String> {
        Some(PROBE.to_owned())
    }

    fn pending_kind(&self, _job: &WorkerJob) -> crate::backend::PendingKind {
        crate::backend::PendingKind::Held
    }

    fn take_reaped(&self) -> Vec<String> {
        vec![PROBE.to_owned()]
    }

    async fn worker_account(&self) -> crate::error::Result<crate::backend::WorkerAccount> {
        Ok(crate::backend::WorkerAccount::Named(PROBE.to_owned()))
    }

    async fn stop_worker_job(&self, _job: &WorkerJob) -> crate::error::Result<()> {
        Ok(())
    }

    async fn cleanup(
        &self,
        _dry_run: bool,
    ) -> crate::error::Result<Vec<crate::backend::CleanupItem>> {
        Ok(vec![crate::backend::CleanupItem::found("probe", PROBE)])
    }
}
