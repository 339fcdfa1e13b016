//! Contract test: requests validated by a Prism mock of the official Batch OpenAPI spec.
//!
//! `cargo xtask services up azure-mock` serves the vendored `spec/BatchService.json` with
//! Stoplight Prism on 127.0.0.1:4010 with `--errors`: a request that breaks the spec (wrong
//! field name or type, missing `api-version`, out-of-range `maxresults` …) gets a 4xx and the
//! reasons in the `sl-violations` response header. Every request the backend sends (add,
//! list with filter and select, terminate) must pass with a 2xx and no violation, and a
//! deliberately wrong request must be rejected, proving the check can fail. Prism checks
//! that `Authorization` is present, not the signature: the fake service checks that.

use codalab_wm_azure::backend::{TASK_FILTER, TASK_SELECT};
use codalab_wm_azure::{AzureBatchBackend, AzureBatchConfig};
use codalab_wm_core::command::WorkerOptions;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::require_service;
use codalab_wm_core::{JobState, LaunchRequest, WorkerBackend, WorkerJob};
use reqwest::header::{CONTENT_LENGTH, HeaderValue};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const PRISM: &str = "127.0.0.1:4010";

fn prism_answers() -> bool {
    let address: SocketAddr = PRISM.parse().expect("valid address");
    TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok()
}

fn backend() -> AzureBatchBackend {
    let mut config = AzureBatchConfig::new(
        "myaccount",
        format!("http://{PRISM}"),
        "codalab-workers",
        Secret::new("https://store.blob.core.windows.net/logs?sv=2022-11-02&sig=x"),
    );
    config.account_key = Some(Secret::new("a2V5"));
    config.cpus = 2;
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("pw"),
    };
    AzureBatchBackend::new(config, credentials).expect("valid config")
}

fn options() -> WorkerOptions {
    WorkerOptions {
        server: "https://worksheets.example".into(),
        tag: Some("azure".into()),
        work_dir_prefix: Some("/mnt/batch/work".into()),
        ..WorkerOptions::default()
    }
}

/// Sends `request` and returns the status and the `sl-violations` header (empty when none).
async fn send(request: reqwest::Request) -> (u16, String) {
    let response = reqwest::Client::new()
        .execute(request)
        .await
        .expect("prism answers");
    let violations = response
        .headers()
        .get("sl-violations")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (response.status().as_u16(), violations)
}

fn assert_valid(what: &str, (status, violations): (u16, String), expected: u16) {
    assert!(
        violations.is_empty(),
        "{what}: spec violations: {violations}"
    );
    assert_eq!(status, expected, "{what}: status");
}

#[tokio::test]
async fn every_request_the_backend_sends_passes_spec_validation() {
    if !require_service("azure-mock", prism_answers()) {
        return;
    }
    let backend = backend();
    let client = backend.client();
    let options = options();
    let task = backend.task_for(&LaunchRequest {
        unique: "0123456789abcdef0123456789abcdef",
        worker: &options,
        dry_run: false,
    });

    assert_valid(
        "Task_Add",
        send(client.add_task_request(&task).await.unwrap()).await,
        201,
    );
    let list = client
        .list_tasks_request(TASK_FILTER, TASK_SELECT)
        .await
        .unwrap();
    assert!(
        list.url().query().unwrap().contains("%24filter=startswith"),
        "{}",
        list.url()
    );
    assert_valid("Task_List", send(list).await, 200);
    assert_valid(
        "Task_Terminate",
        send(client.terminate_task_request(&task.id).await.unwrap()).await,
        204,
    );
    assert_valid(
        "Task_Delete",
        send(client.delete_task_request(&task.id).await.unwrap()).await,
        200,
    );

    // The backend's own calls succeed end to end, and the list page parses as a
    // CloudTaskListResult (Prism's placeholder page has a placeholder next link, so only one
    // page is read here; the fake service tests paging).
    let job = backend
        .start_worker_job(&LaunchRequest {
            unique: "abc",
            worker: &options,
            dry_run: false,
        })
        .await
        .unwrap();
    assert_eq!(job.state, JobState::Pending);
    backend
        .stop_worker_job(&WorkerJob::new(job.id, JobState::Active))
        .await
        .unwrap();
    let page = client
        .list_tasks_page(
            client
                .list_tasks_request(TASK_FILTER, TASK_SELECT)
                .await
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(!page.value.is_empty());
}

#[tokio::test]
async fn a_wrong_request_is_rejected_so_the_check_can_fail() {
    if !require_service("azure-mock", prism_answers()) {
        return;
    }
    let backend = backend();
    let client = backend.client();
    let options = options();
    let task = backend.task_for(&LaunchRequest {
        unique: "abc",
        worker: &options,
        dry_run: false,
    });

    // A task without its required commandLine and with a wrongly typed requiredSlots.
    let mut request = client.add_task_request(&task).await.unwrap();
    let body = br#"{"id":"cl_worker_abc","requiredSlots":"one"}"#.to_vec();
    request
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    *request.body_mut() = Some(body.into());
    let (status, violations) = send(request).await;
    assert_eq!(status, 422, "{violations}");
    assert!(
        violations.contains("commandLine") && violations.contains("requiredSlots"),
        "{violations}"
    );

    // A list without api-version.
    let mut request = client
        .list_tasks_request(TASK_FILTER, TASK_SELECT)
        .await
        .unwrap();
    request.url_mut().set_query(Some("maxresults=5000"));
    let (status, violations) = send(request).await;
    assert_eq!(status, 422, "{violations}");
    assert!(
        violations.contains("api-version") && violations.contains("maxresults"),
        "{violations}"
    );
}
