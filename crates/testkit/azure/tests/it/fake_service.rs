//! Stateful transport tests: [`AzureBatchBackend`] against this crate's in-process fake Batch
//! service ([`FakeBatch`]), which checks every Shared Key signature with the same
//! algorithm, keeps tasks, pages lists and injects 409/429/503/5xx answers. Runs the core
//! conformance suite (pending → active → gone, restart adoption, stop) over real HTTP on
//! 127.0.0.1.

use codalab_wm_azure::models::{TaskExecutionResult, TaskState};
use codalab_wm_azure::{AzureBatchBackend, AzureBatchConfig, EntraConfig};
use codalab_wm_core::command::WorkerOptions;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::{Harness, Polling, run_conformance};
use codalab_wm_core::{Error, JobState, LaunchRequest, WorkerBackend, WorkerJob};
use codalab_wm_fake_azure::{FakeBatch, Fault};
use std::sync::Arc;
use std::time::Duration;

const ACCOUNT: &str = "myaccount";
/// base64 of 64 bytes, like a real account key.
const KEY: &str =
    "rPjzB9UC4AJ8NyYVjvLq6Um1DBTaIZTV2flP+5/RwL2wlNV4iWOA1rZbVIpVC184qWAusQzEYw9JwBCu68/htw==";
const JOB: &str = "codalab-workers";

async fn fake() -> FakeBatch {
    FakeBatch::start(ACCOUNT, &Secret::new(KEY), JOB)
        .await
        .expect("fake batch service starts")
}

fn config(fake: &FakeBatch) -> AzureBatchConfig {
    let mut config = AzureBatchConfig::new(
        ACCOUNT,
        fake.url(),
        JOB,
        Secret::new("https://s.blob.core.windows.net/logs?sig=x"),
    );
    config.account_key = Some(Secret::new(KEY));
    config
}

fn backend_with(config: AzureBatchConfig) -> AzureBatchBackend {
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("pw"),
    };
    AzureBatchBackend::new(config, credentials).expect("valid config")
}

fn options() -> WorkerOptions {
    WorkerOptions {
        server: "http://127.0.0.1:9".into(),
        ..WorkerOptions::default()
    }
}

async fn start(backend: &AzureBatchBackend, unique: &str) -> codalab_wm_core::Result<WorkerJob> {
    let options = options();
    backend
        .start_worker_job(&LaunchRequest {
            unique,
            worker: &options,
            dry_run: false,
        })
        .await
}

struct FakeHarness {
    fake: FakeBatch,
    config: AzureBatchConfig,
}

#[async_trait::async_trait]
impl Harness for FakeHarness {
    async fn backend(&self) -> Arc<dyn WorkerBackend> {
        Arc::new(backend_with(self.config.clone()))
    }
    async fn hold_new_jobs(&self) -> bool {
        self.fake.hold_new_tasks(true);
        true
    }
    async fn release_jobs(&self) {
        self.fake.release();
    }
    async fn finish_job(&self, job: &WorkerJob) {
        self.fake.complete(&job.id, TaskExecutionResult::Success);
    }
    fn polling(&self) -> Polling {
        // The fake changes state synchronously: one poll sees every change.
        Polling {
            interval: Duration::ZERO,
            attempts: 2,
        }
    }
}

#[tokio::test]
async fn passes_the_conformance_suite_with_paging_and_foreign_tasks() {
    let fake = fake().await;
    fake.set_page_size(1);
    fake.insert("someone-elses-task", TaskState::Running);
    fake.insert("cl_worker_from_an_earlier_manager", TaskState::Running);
    let config = config(&fake);
    let harness = FakeHarness { fake, config };
    run_conformance(&harness).await.unwrap();

    let listed = backend_with(harness.config.clone())
        .get_worker_jobs()
        .await
        .unwrap();
    assert!(
        listed.iter().all(|job| job.id.starts_with("cl_worker_")),
        "{listed:?}"
    );
    assert_eq!(listed.len(), 3, "{listed:?}");
    let requests = harness.fake.requests();
    assert!(requests.iter().all(|r| r.status < 400), "{requests:?}");
    assert!(
        requests.iter().any(|r| r.query.contains("%24skiptoken=")),
        "paging was used: {requests:?}"
    );
}

#[tokio::test]
async fn lists_every_page_and_maps_states() {
    let fake = fake().await;
    fake.set_page_size(2);
    for (id, state) in [
        ("cl_worker_a", TaskState::Active),
        ("cl_worker_b", TaskState::Preparing),
        ("cl_worker_c", TaskState::Running),
        ("cl_worker_d", TaskState::Running),
        ("cl_worker_e", TaskState::Running),
    ] {
        fake.insert(id, state);
    }
    fake.complete("cl_worker_d", TaskExecutionResult::Success);
    fake.complete("cl_worker_e", TaskExecutionResult::Failure);
    let jobs = backend_with(config(&fake)).get_worker_jobs().await.unwrap();
    let states: Vec<(&str, JobState)> = jobs.iter().map(|j| (j.id.as_str(), j.state)).collect();
    assert_eq!(
        states,
        [
            ("cl_worker_a", JobState::Pending),
            ("cl_worker_b", JobState::Active),
            ("cl_worker_c", JobState::Active),
            ("cl_worker_d", JobState::Ended),
            ("cl_worker_e", JobState::Failed),
        ]
    );
    assert!(jobs.iter().all(|j| j.submitted_at.is_some()));
    let gets = fake.requests().iter().filter(|r| r.method == "GET").count();
    assert_eq!(gets, 3, "5 tasks at 2 per page");
}

#[tokio::test]
async fn adds_the_task_upstream_adds() {
    let fake = fake().await;
    let job = start(
        &backend_with(config(&fake)),
        "0123456789abcdef0123456789abcdef",
    )
    .await
    .unwrap();
    assert_eq!(
        (job.id.as_str(), job.state),
        (
            "cl_worker_0123456789abcdef0123456789abcdef",
            JobState::Pending
        )
    );
    let task = fake.tasks().pop().unwrap();
    assert_eq!(task.id, job.id);
    assert_eq!(
        task.body["containerSettings"]["imageName"]
            .as_str()
            .unwrap()
            .split(':')
            .next(),
        Some("codalab/worker")
    );
    assert_eq!(
        task.body["outputFiles"][0]["uploadOptions"]["uploadCondition"],
        "taskcompletion"
    );
}

#[tokio::test]
async fn task_exists_after_a_retried_add_counts_as_created() {
    let fake = fake().await;
    let backend = backend_with(config(&fake));
    let first = start(&backend, "feedbeef").await.unwrap();
    let again = start(&backend, "feedbeef").await.unwrap();
    assert_eq!(first.id, again.id);
    assert_eq!(fake.tasks().len(), 1);
    assert_eq!(
        fake.requests().iter().map(|r| r.status).collect::<Vec<_>>(),
        [201, 409]
    );
}

#[tokio::test]
async fn throttling_is_rate_limited_with_retry_after_and_never_retried_here() {
    let fake = fake().await;
    let backend = backend_with(config(&fake));
    fake.push_fault(Fault::new(429, "TooManyRequests").retry_after("7"));
    let err = backend.get_worker_jobs().await.unwrap_err();
    assert!(matches!(err, Error::RateLimited { .. }), "{err:?}");
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    assert!(err.to_string().contains("TooManyRequests"), "{err}");

    fake.push_fault(Fault::new(503, "ServerBusy").retry_after("2"));
    let err = start(&backend, "abc").await.unwrap_err();
    assert!(err.is_temporary());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
    assert!(fake.tasks().is_empty());

    fake.push_fault(Fault::new(500, "InternalError"));
    let err = backend.get_worker_jobs().await.unwrap_err();
    assert!(err.is_temporary() && err.retry_after().is_none(), "{err:?}");
    assert!(err.to_string().contains("InternalError"), "{err}");

    assert_eq!(
        fake.requests().len(),
        3,
        "one request per call: the backend never retries"
    );
    assert!(backend.get_worker_jobs().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_bad_signature_is_refused_with_the_services_reason() {
    let fake = fake().await;
    let mut wrong = config(&fake);
    wrong.account_key = Some(Secret::new("d3Jvbmcga2V5"));
    let err = backend_with(wrong).get_worker_jobs().await.unwrap_err();
    assert!(!err.is_temporary());
    let message = err.to_string();
    assert!(
        message.contains("AuthenticationFailed") && message.contains("HTTP 403"),
        "{message}"
    );
    assert!(message.contains("MAC signature"), "{message}");
}

#[tokio::test]
async fn other_errors_carry_code_and_message() {
    let fake = fake().await;
    let mut other_job = config(&fake);
    other_job.job_id = "no-such-job".into();
    let err = start(&backend_with(other_job), "abc").await.unwrap_err();
    assert!(!err.is_temporary());
    assert!(
        err.to_string()
            .contains("JobNotFound: The specified job does not exist. [HTTP 404"),
        "{err}"
    );
}

#[tokio::test]
async fn stop_terminates_and_is_idempotent() {
    let fake = fake().await;
    let backend = backend_with(config(&fake));
    let job = start(&backend, "abc").await.unwrap();
    backend.stop_worker_job(&job).await.unwrap();
    assert_eq!(fake.tasks()[0].state, TaskState::Completed);
    backend.stop_worker_job(&job).await.unwrap();
    backend
        .stop_worker_job(&WorkerJob::new("cl_worker_gone", JobState::Active))
        .await
        .unwrap();
    let statuses: Vec<u16> = fake.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [201, 204, 409, 404]);
    assert!(
        backend
            .stop_worker_job(&WorkerJob::new("not-ours", JobState::Active))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn entra_id_tokens_are_fetched_once_and_sent_as_bearer() {
    let fake = fake().await;
    let secret = Secret::new("client-secret");
    let token_url = fake.enable_entra("app-id", &secret);
    let mut entra = config(&fake);
    entra.account_key = None;
    entra.entra = Some(EntraConfig {
        tenant_id: "tenant".into(),
        client_id: "app-id".into(),
        client_secret: secret,
        token_url: Some(token_url.clone()),
        scope: None,
    });
    let backend = backend_with(entra.clone());
    start(&backend, "abc").await.unwrap();
    assert_eq!(backend.get_worker_jobs().await.unwrap().len(), 1);
    let token_requests = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/token")
        .count();
    assert_eq!(token_requests, 1, "the token is cached");

    let mut wrong = entra;
    wrong.entra.as_mut().unwrap().client_secret = Secret::new("wrong");
    let err = backend_with(wrong).get_worker_jobs().await.unwrap_err();
    assert!(!err.is_temporary());
    assert!(err.to_string().contains("invalid_client"), "{err}");
    assert!(!err.to_string().contains("wrong"), "{err}");
}
