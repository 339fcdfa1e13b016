//! The fake's own answers: the filter it understands, task counts per api-version, next links.

use super::*;
use crate::service::{TASK_COUNTS_RESULT_SINCE, api_version_at_least, startswith_prefix};
use axum::http::{HeaderMap, header};
use codalab_wm_azure::client::API_VERSION;

#[test]
fn understands_only_startswith_on_id() {
    assert_eq!(
        startswith_prefix("startswith(id,'cl_worker_')"),
        Some("cl_worker_")
    );
    assert_eq!(startswith_prefix(" startswith(id, 'x') "), Some("x"));
    assert_eq!(startswith_prefix("state eq 'active'"), None);
    assert_eq!(startswith_prefix("startswith(displayName,'x')"), None);
}

const ACCOUNT: &str = "myaccount";
const KEY: &str =
    "rPjzB9UC4AJ8NyYVjvLq6Um1DBTaIZTV2flP+5/RwL2wlNV4iWOA1rZbVIpVC184qWAusQzEYw9JwBCu68/htw==";
const JOB: &str = "codalab-workers";

/// A GET signed and sent as azure-batch 9.0.0's `job.get_task_counts` sends it: `Accept`,
/// `client-request-id`, `accept-language`, `ocp-date`, no `Content-Length`, Shared Key over
/// `/<account>/jobs/<job>/<what>` and the query (the signer reproduces the SDK's vectors).
async fn sdk_get(url: &str, path: &str, query: &str, host: Option<&str>) -> reqwest::Response {
    let key = SharedKeyCredential::new(ACCOUNT, &Secret::new(KEY)).unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(header::ACCEPT, "application/json".parse().unwrap());
    headers.insert(
        "client-request-id",
        uuid::Uuid::new_v4().to_string().parse().unwrap(),
    );
    headers.insert("accept-language", "en-US".parse().unwrap());
    headers.insert(
        "ocp-date",
        httpdate::fmt_http_date(SystemTime::now()).parse().unwrap(),
    );
    let authorization = key.authorization("GET", path, Some(query), &headers);
    headers.insert(header::AUTHORIZATION, authorization.parse().unwrap());
    if let Some(host) = host {
        headers.insert(header::HOST, host.parse().unwrap());
    }
    reqwest::Client::new()
        .get(format!("{url}{path}?{query}"))
        .headers(headers)
        .send()
        .await
        .unwrap()
}

async fn fake_with_tasks() -> FakeBatch {
    let fake = FakeBatch::start(ACCOUNT, &Secret::new(KEY), JOB)
        .await
        .unwrap();
    for (n, state) in [
        TaskState::Active,
        TaskState::Active,
        TaskState::Active,
        TaskState::Preparing,
        TaskState::Running,
        TaskState::Running,
        TaskState::Running,
        TaskState::Running,
    ]
    .into_iter()
    .enumerate()
    {
        fake.insert(&format!("cl_worker_{n}"), state);
    }
    fake.insert("other_task", TaskState::Running);
    for (id, result) in [
        ("done_ok", Some(TaskExecutionResult::Success)),
        ("done_bad", Some(TaskExecutionResult::Failure)),
        ("done_killed", None),
    ] {
        fake.insert(id, TaskState::Active);
        if let Some(result) = result {
            fake.complete(id, result);
        } else {
            fake.state().tasks.get_mut(id).unwrap().state = TaskState::Completed;
        }
    }
    fake
}

#[tokio::test]
async fn counts_tasks_as_a_task_counts_result() {
    let fake = fake_with_tasks().await;
    let query = format!("api-version={API_VERSION}");
    let reply = sdk_get(fake.url(), &format!("/jobs/{JOB}/taskcounts"), &query, None).await;
    assert_eq!(reply.status(), 200);
    let body: serde_json::Value = reply.json().await.unwrap();
    let counts = serde_json::json!({
        "active": 3, "running": 6, "completed": 3, "succeeded": 1, "failed": 1,
    });
    assert_eq!(
        body,
        serde_json::json!({"taskCounts": counts, "taskSlotCounts": counts})
    );
}

#[tokio::test]
async fn counts_tasks_as_bare_task_counts_for_azure_batch_9() {
    let fake = fake_with_tasks().await;
    let query = format!("api-version={SDK9_API_VERSION}");
    let reply = sdk_get(fake.url(), &format!("/jobs/{JOB}/taskcounts"), &query, None).await;
    assert_eq!(reply.status(), 200);
    let body: serde_json::Value = reply.json().await.unwrap();
    assert_eq!(
        body,
        serde_json::json!({
            "active": 3, "running": 6, "completed": 3, "succeeded": 1, "failed": 1,
        })
    );
}

#[tokio::test]
async fn task_counts_are_signed_versioned_and_per_job() {
    let fake = fake_with_tasks().await;
    let path = format!("/jobs/{JOB}/taskcounts");
    let reply = sdk_get(fake.url(), &path, "api-version=2019-08-01.10.0", None).await;
    assert_eq!(reply.status(), 400);
    let reply = sdk_get(
        fake.url(),
        "/jobs/other/taskcounts",
        "api-version=2020-03-01.11.0",
        None,
    )
    .await;
    assert_eq!(reply.status(), 404);
    let unsigned = reqwest::Client::new()
        .get(format!("{}{path}?api-version={API_VERSION}", fake.url()))
        .header("ocp-date", httpdate::fmt_http_date(SystemTime::now()))
        .header(header::AUTHORIZATION, format!("SharedKey {ACCOUNT}:AAAA"))
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 403);
}

#[tokio::test]
async fn next_links_point_at_the_origin_the_request_was_sent_to() {
    let fake = fake_with_tasks().await;
    fake.set_page_size(2);
    let path = format!("/jobs/{JOB}/tasks");
    let query = format!("api-version={API_VERSION}");
    let body: serde_json::Value = sdk_get(fake.url(), &path, &query, Some("proxy.test:8080"))
        .await
        .json()
        .await
        .unwrap();
    let next = body["odata.nextLink"].as_str().unwrap();
    assert!(
        next.starts_with("http://proxy.test:8080/jobs/codalab-workers/tasks?"),
        "{next}"
    );
    let body: serde_json::Value = sdk_get(fake.url(), &path, &query, None)
        .await
        .json()
        .await
        .unwrap();
    let next = body["odata.nextLink"].as_str().unwrap();
    assert!(next.starts_with(&format!("{}/jobs/", fake.url())), "{next}");
}

#[test]
fn task_counts_result_from_2020_09_on() {
    assert!(api_version_at_least(API_VERSION, TASK_COUNTS_RESULT_SINCE));
    assert!(api_version_at_least(
        "2020-09-01.12.0",
        TASK_COUNTS_RESULT_SINCE
    ));
    assert!(!api_version_at_least(
        SDK9_API_VERSION,
        TASK_COUNTS_RESULT_SINCE
    ));
    assert!(!api_version_at_least(
        "2020-09-01.11.0",
        TASK_COUNTS_RESULT_SINCE
    ));
}
