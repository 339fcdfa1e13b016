//! Failed worker tasks do not linger in the Batch job, and `cl-worker-manager down` deletes
//! the completed ones: [`AzureBatchBackend`] against the in-process fake Batch service.
//!
//! A failed task is listed (so the manager logs and counts it once), then deleted by the next
//! listing (a dry run's listing deletes nothing). [`WorkerBackend::cleanup`] deletes every
//! completed own task (a dry run only lists them) and leaves running tasks and tasks without
//! the worker prefix alone.

use codalab_wm_azure::models::{TaskExecutionResult, TaskState};
use codalab_wm_azure::{AzureBatchBackend, AzureBatchConfig};
use codalab_wm_core::command::WorkerOptions;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::{JobState, LaunchRequest, WorkerBackend};
use codalab_wm_fake_azure::FakeBatch;

const ACCOUNT: &str = "myaccount";
const KEY: &str =
    "rPjzB9UC4AJ8NyYVjvLq6Um1DBTaIZTV2flP+5/RwL2wlNV4iWOA1rZbVIpVC184qWAusQzEYw9JwBCu68/htw==";
const JOB: &str = "codalab-workers";

async fn setup() -> (FakeBatch, AzureBatchBackend) {
    let fake = FakeBatch::start(ACCOUNT, &Secret::new(KEY), JOB)
        .await
        .unwrap();
    let mut config = AzureBatchConfig::new(
        ACCOUNT,
        fake.url(),
        JOB,
        Secret::new("https://s.blob.core.windows.net/logs?sig=x"),
    );
    config.account_key = Some(Secret::new(KEY));
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("pw"),
    };
    let backend = AzureBatchBackend::new(config, credentials).unwrap();
    (fake, backend)
}

async fn start(backend: &AzureBatchBackend, unique: &str) -> String {
    let options = WorkerOptions {
        server: "http://127.0.0.1:9".into(),
        ..WorkerOptions::default()
    };
    backend
        .start_worker_job(&LaunchRequest {
            unique,
            worker: &options,
            dry_run: false,
        })
        .await
        .unwrap()
        .id
}

fn task_ids(fake: &FakeBatch) -> Vec<String> {
    fake.tasks().into_iter().map(|t| t.id).collect()
}

#[tokio::test]
async fn a_failed_task_is_listed_once_then_deleted() {
    let (fake, backend) = setup().await;
    let failed = start(&backend, "f1").await;
    let running = start(&backend, "r1").await;
    fake.complete(&failed, TaskExecutionResult::Failure);
    let jobs = backend.get_worker_jobs().await.unwrap();
    let seen = jobs.iter().find(|j| j.id == failed).unwrap();
    assert_eq!(seen.state, JobState::Failed);
    assert_eq!(
        task_ids(&fake).len(),
        2,
        "not deleted before it was reported"
    );
    let jobs = backend.get_worker_jobs().await.unwrap();
    assert!(jobs.iter().all(|j| j.id != failed), "{jobs:?}");
    assert_eq!(task_ids(&fake), [running]);
}

/// A dry run (`read_only`) deletes nothing, and lists the failed task once as a real run does
/// (not again at every other listing).
#[tokio::test]
async fn a_dry_run_deletes_no_failed_task() {
    let (fake, backend) = setup().await;
    let failed = start(&backend, "f1").await;
    fake.complete(&failed, TaskExecutionResult::Failure);
    let backend = backend.read_only(true);
    let first = backend.get_worker_jobs().await.unwrap();
    assert!(first.iter().any(|j| j.id == failed), "{first:?}");
    for _ in 0..2 {
        let later = backend.get_worker_jobs().await.unwrap();
        assert!(later.iter().all(|j| j.id != failed), "{later:?}");
    }
    let deletes = fake.requests().into_iter().filter(|r| r.method == "DELETE");
    assert_eq!(deletes.count(), 0, "a dry run sent a DELETE");
    assert_eq!(task_ids(&fake), [failed]);
}

#[tokio::test]
async fn cleanup_deletes_completed_own_tasks_only() {
    let (fake, backend) = setup().await;
    let done = start(&backend, "d1").await;
    let running = start(&backend, "r1").await;
    fake.complete(&done, TaskExecutionResult::Success);
    fake.insert("someone-elses-task", TaskState::Completed);

    let listed = backend.cleanup(true).await.unwrap();
    let shown: Vec<_> = listed
        .iter()
        .map(|i| (i.kind, i.name.as_str(), i.removed))
        .collect();
    // What `down` will delete once it has stopped the live task: both.
    assert_eq!(
        shown,
        [
            ("finished task", done.as_str(), false),
            ("finished task", running.as_str(), false)
        ]
    );
    assert_eq!(task_ids(&fake).len(), 3, "a dry run deletes nothing");

    // down: stop the live task, then clean up.
    for job in backend.get_worker_jobs().await.unwrap() {
        if job.state.is_capacity() {
            backend.stop_worker_job(&job).await.unwrap();
        }
    }
    let removed = backend.cleanup(false).await.unwrap();
    assert_eq!(removed.len(), 2, "{removed:?}");
    let names = |items: &[codalab_wm_core::CleanupItem]| {
        let mut names: Vec<String> = items.iter().map(|i| i.name.clone()).collect();
        names.sort();
        names
    };
    assert_eq!(
        names(&removed),
        names(&listed),
        "the dry run listed what was removed"
    );
    assert!(removed.iter().all(|i| i.removed && i.error.is_none()));
    assert_eq!(task_ids(&fake), ["someone-elses-task"]);
    assert!(backend.get_worker_jobs().await.unwrap().is_empty());
    drop(running);
}
