//! [`MeteredBackend`]: every backend call of a pool timed into
//! `codalab_wm_backend_request_duration_seconds{pool, op}` while the metrics are on.

use super::{METRICS, Metrics, PoolOp};
use async_trait::async_trait;
use codalab_wm_core::backend::{CleanupItem, LaunchRequest, PendingKind, WorkerBackend, WorkerJob};
use codalab_wm_core::bundle::WorkerShape;
use codalab_wm_core::error::Result;
use std::sync::Arc;
use std::time::Instant;

/// `backend`, timed per call into `codalab_wm_backend_request_duration_seconds{pool}` when
/// the metrics are on; `backend` itself otherwise.
pub fn metered(backend: Arc<dyn WorkerBackend>, pool: &str) -> Arc<dyn WorkerBackend> {
    match METRICS.get() {
        Some(metrics) => Arc::new(MeteredBackend {
            inner: backend,
            pool: pool.to_owned(),
            metrics,
        }),
        None => backend,
    }
}

/// A backend that times every call of the one it wraps.
#[derive(Debug)]
pub struct MeteredBackend {
    inner: Arc<dyn WorkerBackend>,
    pool: String,
    metrics: &'static Metrics,
}

impl MeteredBackend {
    fn observe(&self, op: &'static str, started: Instant) {
        let labels = PoolOp {
            pool: self.pool.clone(),
            op,
        };
        self.metrics
            .backend_requests
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
    }
}

#[async_trait]
impl WorkerBackend for MeteredBackend {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn worker_shape(&self) -> WorkerShape {
        self.inner.worker_shape()
    }

    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        let started = Instant::now();
        let result = self.inner.get_worker_jobs().await;
        self.observe("get_worker_jobs", started);
        result
    }

    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        let started = Instant::now();
        let result = self.inner.start_worker_job(request).await;
        self.observe("start_worker_job", started);
        result
    }

    fn job_output(&self, job: &WorkerJob) -> Option<String> {
        self.inner.job_output(job)
    }

    fn pending_kind(&self, job: &WorkerJob) -> PendingKind {
        self.inner.pending_kind(job)
    }

    fn take_reaped(&self) -> Vec<String> {
        self.inner.take_reaped()
    }

    async fn worker_account(&self) -> Result<codalab_wm_core::backend::WorkerAccount> {
        self.inner.worker_account().await
    }

    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        let started = Instant::now();
        let result = self.inner.stop_worker_job(job).await;
        self.observe("stop_worker_job", started);
        result
    }

    async fn cleanup(&self, dry_run: bool) -> Result<Vec<CleanupItem>> {
        self.inner.cleanup(dry_run).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every backend method reaches the wrapped backend: with the metrics on (`--listen`), a
    /// dropped `pending_kind` made every held Slurm job count as capacity (seen on the real
    /// cluster by `bench-harness slurm-forecast`).
    #[tokio::test]
    async fn the_metered_backend_forwards_every_method() {
        let metrics = super::super::enable_metrics();
        let checked = codalab_wm_core::testing::check_forwarding(|probe| MeteredBackend {
            inner: std::sync::Arc::new(probe),
            pool: "probe".into(),
            metrics,
        });
        assert_eq!(checked.await, Ok(()));
    }
}
