//! The real aws-sdk-batch client against a moto server on 127.0.0.1 (`cargo xtask services up
//! moto`): moto runs each Batch job through the project's docker stub, so a job goes
//! SUBMITTED → … → RUNNING and stays RUNNING until it is terminated or the stub is told to end
//! it. Runs the core conformance suite, and checks job definition reuse, credential handling,
//! more than a hundred own jobs and the endpoint environment variables.
//!
//! Set `AWS_ENDPOINT_URL` to use another moto than `http://127.0.0.1:5055`, and
//! `SERVICES_DIR` when the services' state is not in `<repo>/.services`.

use crate::support::moto::*;
use codalab_wm_aws::{AwsBatchBackend, AwsBatchConfig};
use codalab_wm_core::testing::{Harness, Polling, require_service, run_conformance};
use codalab_wm_core::{JobState, WorkerBackend, WorkerJob, WorkerOptions};
use std::sync::Arc;

/// The conformance suite's harness: it has moto's state manager to itself, and new jobs it
/// holds are let go when it is dropped, also on a failed assertion.
struct MotoHarness {
    config: AwsBatchConfig,
    moto: StateManager,
}

#[async_trait::async_trait]
impl Harness for MotoHarness {
    async fn backend(&self) -> Arc<dyn WorkerBackend> {
        Arc::new(backend(&self.config).await)
    }
    async fn hold_new_jobs(&self) -> bool {
        self.moto.hold();
        true
    }
    async fn release_jobs(&self) {
        self.moto.release().unwrap();
    }
    async fn finish_job(&self, job: &WorkerJob) {
        let reply = docker_stub(
            "/stub/exit",
            &format!(r#"{{"name":"{}","code":0}}"#, job.id),
        );
        let ended = reply.contains(r#""exited": 1"#) || reply.contains(r#""deferred": true"#);
        assert!(ended, "the docker stub cannot end job {}: {reply}", job.id);
    }
    fn polling(&self) -> Polling {
        POLLING
    }
    fn worker_options(&self) -> WorkerOptions {
        worker()
    }
}

#[tokio::test]
async fn conformance() {
    if !require_service("moto", moto_available()) {
        return;
    }
    let harness = MotoHarness {
        config: fresh_config(),
        moto: StateManager::alone().await,
    };
    let result = run_conformance(&harness).await;
    clean_up(&backend(&harness.config).await).await;
    result.unwrap();
}

#[tokio::test]
async fn the_job_definition_is_registered_once_for_many_launches() {
    if !require_service("moto", moto_available()) {
        return;
    }
    let _moto = jobs_move().await;
    let config = fresh_config();
    let first = backend(&config).await;
    for _ in 0..3 {
        launch(&first).await;
    }
    let restarted = backend(&config).await;
    for _ in 0..2 {
        launch(&restarted).await;
    }
    let definitions = sdk_client(&config)
        .await
        .describe_job_definitions()
        .job_definition_name(&config.job_definition_name)
        .send()
        .await
        .unwrap();
    let revisions: Vec<_> = definitions
        .job_definitions()
        .iter()
        .map(|d| d.revision())
        .collect();
    assert_eq!(
        revisions,
        [Some(1)],
        "one revision for five launches by two manager processes"
    );
    let jobs = restarted.get_worker_jobs().await.unwrap();
    assert_eq!(jobs.len(), 5, "{jobs:?}");
    let arn = definitions.job_definitions()[0]
        .job_definition_arn()
        .unwrap();
    let described = sdk_client(&config)
        .await
        .describe_jobs()
        .set_jobs(Some(jobs.iter().map(|j| j.id.clone()).collect()))
        .send()
        .await;
    assert!(
        described
            .unwrap()
            .jobs()
            .iter()
            .all(|j| j.job_definition() == Some(arn))
    );
    clean_up(&restarted).await;
}

#[tokio::test]
async fn with_a_secret_arn_no_credential_is_registered() {
    if !require_service("moto", moto_available()) {
        return;
    }
    let _moto = jobs_move().await;
    let config = AwsBatchConfig {
        codalab_credentials_secret_arn: Some(SECRET_ARN.into()),
        execution_role_arn: Some(ROLE_ARN.into()),
        ..fresh_config()
    };
    let backend = backend(&config).await;
    let job = launch(&backend).await;
    let client = sdk_client(&config).await;
    let definitions = client
        .describe_job_definitions()
        .job_definition_name(&config.job_definition_name)
        .send()
        .await
        .unwrap();
    let registered = format!("{definitions:?}");
    assert!(
        !registered.contains(PASSWORD),
        "the password is in the job definition"
    );
    assert!(
        !registered.contains("moto-user"),
        "the user name is in the job definition"
    );
    let container = definitions.job_definitions()[0]
        .container_properties()
        .unwrap();
    let secrets: Vec<_> = container
        .secrets()
        .iter()
        .map(|s| (s.name(), s.value_from()))
        .collect();
    let password_from = format!("{SECRET_ARN}:password::");
    assert!(
        secrets.contains(&(Some("CODALAB_PASSWORD"), Some(password_from.as_str()))),
        "{secrets:?}"
    );
    let jobs = client.describe_jobs().jobs(&job.id).send().await.unwrap();
    assert!(
        !format!("{jobs:?}").contains(PASSWORD),
        "the password is in the job"
    );
    clean_up(&backend).await;
}

#[tokio::test]
async fn lists_more_than_a_hundred_own_jobs() {
    if !require_service("moto", moto_available()) {
        return;
    }
    let _moto = jobs_move().await;
    let config = fresh_config();
    let backend = backend(&config).await;
    let other = backend_with_prefix_of(&config).await;
    let mut started = Vec::new();
    for _ in 0..105 {
        started.push(launch(&backend).await.id);
    }
    let foreign = launch(&other).await;
    let listed = backend.get_worker_jobs().await.unwrap();
    let mut ids: Vec<String> = listed.iter().map(|j| j.id.clone()).collect();
    ids.sort();
    started.sort();
    assert_eq!(
        ids, started,
        "exactly our 105 jobs, not the other manager's"
    );
    assert!(listed.iter().all(|j| j.state.is_capacity()));
    clean_up(&backend).await;
    other.stop_worker_job(&foreign).await.unwrap();
}

/// A manager whose id starts with `config`'s manager id: its jobs match our name prefix.
async fn backend_with_prefix_of(config: &AwsBatchConfig) -> AwsBatchBackend {
    let id = format!("{}-gpu", config.manager_id());
    backend(&AwsBatchConfig {
        manager_id: Some(id),
        ..config.clone()
    })
    .await
}

#[tokio::test]
async fn a_stopped_job_is_ended_not_failed() {
    if !require_service("moto", moto_available()) {
        return;
    }
    let _moto = jobs_move().await;
    let backend = backend(&fresh_config()).await;
    let job = launch(&backend).await;
    backend.stop_worker_job(&job).await.unwrap();
    let ended = ended(&backend, &job.id).await;
    assert_eq!(ended.state, JobState::Ended, "{ended:?}");
}

/// A Spot reclaim, as AWS Batch reports it (the job FAILED with `Host EC2 (instance …)
/// terminated.`), set here through the real `TerminateJob` API on moto: the backend lists it
/// as preempted, a capacity event for a pool's `fallback` (issue #32), not a failure.
#[tokio::test]
async fn a_job_whose_spot_host_was_reclaimed_is_listed_as_preempted() {
    if !require_service("moto", moto_available()) {
        return;
    }
    let _moto = jobs_move().await;
    let config = fresh_config();
    let backend = backend(&config).await;
    let job = launch(&backend).await;
    (sdk_client(&config).await.terminate_job())
        .job_id(&job.id)
        .reason("Host EC2 (instance i-0123456789abcdef0) terminated.")
        .send()
        .await
        .unwrap();
    let ended = ended(&backend, &job.id).await;
    assert_eq!(ended.state, JobState::Preempted, "{ended:?}");
}

/// Child half of `the_endpoint_comes_from_the_environment`: the standard chain, nothing set
/// in code.
#[tokio::test]
#[ignore = "run by the_endpoint_comes_from_the_environment with the environment set"]
async fn child_lists_with_the_standard_chain() {
    let backend = AwsBatchBackend::new(fresh_config(), &worker(), &credentials())
        .await
        .unwrap();
    backend.get_worker_jobs().await.unwrap();
}

#[test]
fn the_endpoint_comes_from_the_environment() {
    if !require_service("moto", moto_available()) {
        return;
    }
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let child = |vars: &[(&str, &str)]| {
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command.args([
            "--exact",
            "moto::child_lists_with_the_standard_chain",
            "--ignored",
            "--quiet",
        ]);
        command
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("AWS_ENDPOINT_URL_BATCH")
            .env_remove("AWS_PROFILE");
        command.envs([
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]);
        command.envs(vars.iter().copied());
        command.output().unwrap()
    };
    let endpoint = endpoint();
    let general = child(&[("AWS_ENDPOINT_URL", &endpoint)]);
    assert!(
        general.status.success(),
        "AWS_ENDPOINT_URL: {}",
        String::from_utf8_lossy(&general.stdout)
    );
    let batch = child(&[
        ("AWS_ENDPOINT_URL", &dead),
        ("AWS_ENDPOINT_URL_BATCH", &endpoint),
    ]);
    assert!(
        batch.status.success(),
        "AWS_ENDPOINT_URL_BATCH wins: {}",
        String::from_utf8_lossy(&batch.stdout)
    );
    let wrong = child(&[("AWS_ENDPOINT_URL", &dead)]);
    assert!(
        !wrong.status.success(),
        "a dead endpoint must fail the child"
    );
}

/// The workers' secret names another CodaLab user than the manager's (review 1.3): refused at
/// start; the same user, or `codalab` (root), is fine; a secret it cannot read is a warning.
#[tokio::test]
async fn workers_of_another_account_in_the_secret_are_refused_at_start() {
    use codalab_wm_core::backend::check_worker_account;
    if !require_service("moto", moto_available()) {
        return;
    }
    let config = fresh_config();
    let secrets = aws_sdk_secretsmanager::Client::new(&sdk_config(&config).await);
    let created = secrets
        .create_secret()
        .name(format!("{}-creds", config.job_definition_name))
        .secret_string(r#"{"username": "bob", "password": "bobpw"}"#)
        .send()
        .await
        .unwrap();
    let with_secret = |arn: &str| AwsBatchConfig {
        codalab_credentials_secret_arn: Some(arn.to_owned()),
        execution_role_arn: Some(ROLE_ARN.into()),
        ..config.clone()
    };
    let bobs = backend(&with_secret(created.arn().unwrap())).await;
    let err = check_worker_account(&bobs, "alice").await.unwrap_err();
    assert!(err.is_fatal(), "{err}");
    assert!(
        err.to_string()
            .contains("the workers log in as CodaLab user `bob` but the manager as `alice`"),
        "{err}"
    );
    assert!(!err.to_string().contains("bobpw"), "{err}");
    check_worker_account(&bobs, "bob").await.unwrap();
    check_worker_account(&bobs, "codalab").await.unwrap();
    let unreadable = backend(&with_secret(SECRET_ARN)).await;
    check_worker_account(&unreadable, "alice")
        .await
        .expect("a secret it cannot read is a warning, not a refusal");
}
