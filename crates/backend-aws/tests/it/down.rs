//! What `cl-worker-manager down` does on AWS Batch, against moto on 127.0.0.1 (`cargo xtask
//! services up moto`): stop every own job that is still a worker, then [`WorkerBackend::cleanup`]
//! deregisters the job definition revisions this manager registered (tagged with its manager
//! id and a spec hash). A dry run lists them and changes nothing; another manager's jobs and
//! job definitions are left alone.
//!
//! Set `AWS_ENDPOINT_URL` to use another moto than `http://127.0.0.1:5055`.

use crate::support::moto::{
    POLLING, fresh_config, jobs_move, moto_available, sdk_client, sdk_config,
};
use codalab_wm_aws::{AwsBatchBackend, AwsBatchConfig, BatchClient, HostEnvironment};
use codalab_wm_core::backend::new_unique;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::require_service;
use codalab_wm_core::{LaunchRequest, WorkerBackend, WorkerJob, WorkerOptions};
use std::collections::BTreeSet;

fn worker(prefix: &str) -> WorkerOptions {
    WorkerOptions {
        server: "http://127.0.0.1:9".into(),
        work_dir_prefix: Some(prefix.into()),
        ..WorkerOptions::default()
    }
}

/// A backend; `work_root` changes the job definition (a new revision for the same name).
async fn backend(config: &AwsBatchConfig, work_root: &str) -> AwsBatchBackend {
    let credentials = Credentials {
        username: "moto-user".into(),
        password: Secret::new("moto-test-password"),
    };
    let client = BatchClient::new(&sdk_config(config).await);
    AwsBatchBackend::with_client(
        config.clone(),
        &worker(work_root),
        &credentials,
        HostEnvironment::default(),
        client,
    )
    .unwrap()
}

async fn launch(backend: &AwsBatchBackend, work_root: &str) -> WorkerJob {
    backend
        .start_worker_job(&LaunchRequest {
            unique: &new_unique(),
            worker: &worker(work_root),
            dry_run: false,
        })
        .await
        .unwrap()
}

/// `(arn, status)` of every revision of the job definition named in `config`.
async fn revisions(config: &AwsBatchConfig) -> BTreeSet<(String, String)> {
    sdk_client(config)
        .await
        .describe_job_definitions()
        .job_definition_name(&config.job_definition_name)
        .send()
        .await
        .unwrap()
        .job_definitions()
        .iter()
        .map(|d| {
            (
                d.job_definition_arn().unwrap_or_default().to_owned(),
                d.status().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn live(jobs: &[WorkerJob]) -> Vec<&WorkerJob> {
    jobs.iter().filter(|j| j.state.is_capacity()).collect()
}

/// `down` on one backend: stop every live own job, wait (bounded) until none is live, clean up.
async fn down(backend: &AwsBatchBackend) -> Vec<codalab_wm_core::CleanupItem> {
    for job in live(&backend.get_worker_jobs().await.unwrap()) {
        backend.stop_worker_job(job).await.unwrap();
    }
    for _ in 0..POLLING.attempts {
        if live(&backend.get_worker_jobs().await.unwrap()).is_empty() {
            break;
        }
        tokio::time::sleep(POLLING.interval).await;
    }
    backend.cleanup(false).await.unwrap()
}

#[tokio::test]
async fn down_terminates_own_jobs_and_deregisters_own_job_definitions() {
    if !require_service("moto", moto_available()) {
        return;
    }
    let _moto = jobs_move().await;
    let config = fresh_config();
    let first = backend(&config, "/tmp").await;
    launch(&first, "/tmp").await;
    launch(&first, "/tmp").await;
    let second = backend(&config, "/scratch").await;
    launch(&second, "/scratch").await;
    let own = revisions(&config).await;
    assert_eq!(own.len(), 2, "two specs, two revisions: {own:?}");
    assert!(own.iter().all(|(_, status)| status == "ACTIVE"));

    let other_config = fresh_config();
    let other = backend(&other_config, "/tmp").await;
    let other_job = launch(&other, "/tmp").await;

    // Dry run: both revisions listed, nothing deregistered, no job touched.
    let listed = first.cleanup(true).await.unwrap();
    let arns: BTreeSet<String> = listed.iter().map(|i| i.name.clone()).collect();
    let own_arns: BTreeSet<String> = own.iter().map(|(arn, _)| arn.clone()).collect();
    assert_eq!(arns, own_arns);
    assert!(
        listed
            .iter()
            .all(|i| i.kind == "job definition" && !i.removed)
    );
    assert_eq!(revisions(&config).await, own);
    assert_eq!(live(&first.get_worker_jobs().await.unwrap()).len(), 3);

    let removed = down(&first).await;
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert!(removed.iter().all(|i| i.removed && i.error.is_none()));
    let jobs = first.get_worker_jobs().await.unwrap();
    assert_eq!(jobs.len(), 3);
    assert!(
        live(&jobs).is_empty(),
        "no own job RUNNABLE/RUNNING: {jobs:?}"
    );
    let after = revisions(&config).await;
    assert!(
        after.iter().all(|(_, status)| status == "INACTIVE"),
        "{after:?}"
    );

    // The other manager's job and job definition are still there.
    let other_jobs = other.get_worker_jobs().await.unwrap();
    assert!(
        other_jobs
            .iter()
            .any(|j| j.id == other_job.id && j.state.is_capacity())
    );
    assert!(
        revisions(&other_config)
            .await
            .iter()
            .all(|(_, status)| status == "ACTIVE")
    );
    assert!(
        first.cleanup(true).await.unwrap().is_empty(),
        "nothing left"
    );
    down(&other).await;
}
