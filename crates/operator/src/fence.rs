//! The Kubernetes backend behind the leader's fence: every pod create and delete asks
//! [`Leadership::is_leader`] right before it goes out, so a replica that lost the Lease in
//! the middle of a reconcile (its renew hung, another replica took over) stops acting at once
//! rather than at its next reconcile.

use crate::lease::Leadership;
use codalab_wm_core::backend::{
    CleanupItem, LaunchRequest, PendingKind, WorkerAccount, WorkerBackend, WorkerJob,
};
use codalab_wm_core::bundle::WorkerShape;
use codalab_wm_core::error::{Error, Result};

/// A backend that creates and deletes only while this replica is the leader.
#[derive(Debug)]
pub(crate) struct Fenced<B> {
    inner: B,
    leadership: Leadership,
}

impl<B> Fenced<B> {
    pub(crate) fn new(inner: B, leadership: Leadership) -> Self {
        Self { inner, leadership }
    }

    fn check(&self, operation: &'static str) -> Result<()> {
        if self.leadership.is_leader() {
            return Ok(());
        }
        Err(Error::Backend {
            backend: "kubernetes".to_owned(),
            operation,
            message: "this replica no longer holds the lease (another replica acts now)".to_owned(),
            temporary: true,
            source: None,
        })
    }
}

#[async_trait::async_trait]
impl<B: WorkerBackend> WorkerBackend for Fenced<B> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn worker_shape(&self) -> WorkerShape {
        self.inner.worker_shape()
    }

    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        self.inner.get_worker_jobs().await
    }

    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        self.check("create a worker pod")?;
        self.inner.start_worker_job(request).await
    }

    async fn stop_worker_job(&self, job: &WorkerJob) -> Result<()> {
        self.check("delete a worker pod")?;
        self.inner.stop_worker_job(job).await
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

    async fn worker_account(&self) -> Result<WorkerAccount> {
        self.inner.worker_account().await
    }

    /// Deletes nothing itself: `down` runs without a Lease, on the backend it builds.
    async fn cleanup(&self, dry_run: bool) -> Result<Vec<CleanupItem>> {
        self.inner.cleanup(dry_run).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_core::backend::JobState;
    use codalab_wm_core::command::WorkerOptions;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts the calls that reach the platform (a fake backend: nothing else is needed).
    #[derive(Debug, Default)]
    struct Counting(AtomicUsize);

    #[async_trait::async_trait]
    impl WorkerBackend for Counting {
        fn name(&self) -> &str {
            "counting"
        }
        fn worker_shape(&self) -> WorkerShape {
            WorkerShape::default()
        }
        async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
            Ok(Vec::new())
        }
        async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(WorkerJob::new(request.unique, JobState::Pending))
        }
        async fn stop_worker_job(&self, _job: &WorkerJob) -> Result<()> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// Every method reaches the Kubernetes backend (a dropped `pending_kind` would make a pod
    /// whose image cannot be pulled look like capacity).
    #[tokio::test]
    async fn the_fence_forwards_every_method() {
        let (tx, leadership) = Leadership::channel();
        tx.send_replace(Some(
            tokio::time::Instant::now() + std::time::Duration::from_secs(60),
        ));
        let checked =
            codalab_wm_core::testing::check_forwarding(|probe| Fenced::new(probe, leadership));
        assert_eq!(checked.await, Ok(()));
    }

    #[tokio::test]
    async fn a_replica_whose_fence_passed_creates_and_deletes_nothing() {
        let (tx, leadership) = Leadership::channel();
        let backend = Fenced::new(Counting::default(), leadership);
        let worker = WorkerOptions::default();
        let request = LaunchRequest {
            unique: "u",
            worker: &worker,
            dry_run: false,
        };
        let job = WorkerJob::new("p", JobState::Active);
        tx.send_replace(Some(
            tokio::time::Instant::now() + std::time::Duration::from_secs(60),
        ));
        backend.start_worker_job(&request).await.unwrap();
        backend.stop_worker_job(&job).await.unwrap();
        assert_eq!(backend.inner.0.load(Ordering::SeqCst), 2);
        // The fence passed in the middle of a reconcile (the loop said nothing since).
        tx.send_replace(Some(tokio::time::Instant::now()));
        let refused = backend.start_worker_job(&request).await.unwrap_err();
        assert!(
            refused.to_string().contains("no longer holds the lease"),
            "{refused}"
        );
        assert!(backend.stop_worker_job(&job).await.is_err());
        assert_eq!(
            backend.inner.0.load(Ordering::SeqCst),
            2,
            "nothing reached the platform"
        );
    }
}
