//! The real aws-sdk-batch client against an in-process HTTP server that speaks Batch's
//! restJson1 protocol: paging that moto does not do, throttling, server and client errors,
//! and job definition reuse. No external service needed.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use codalab_wm_aws::client::sdk_loader;
use codalab_wm_aws::definition::{MANAGER_ID_TAG, SPEC_HASH_TAG};
use codalab_wm_aws::{AwsBatchBackend, AwsBatchConfig, BatchClient, HostEnvironment};
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::{Error, JobState, LaunchRequest, WorkerBackend, WorkerJob, WorkerOptions};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// What the fake Batch API holds and what it was asked.
#[derive(Default)]
struct Api {
    jobs: Vec<Value>,
    definitions: Vec<Value>,
    /// Answers to give before any real one: (status, error type).
    failures: VecDeque<(u16, &'static str)>,
    calls: Vec<(String, Value)>,
}

type Shared = Arc<Mutex<Api>>;

const PAGE: usize = 100;

async fn handle(State(api): State<Shared>, uri: Uri, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
    let mut api = api.lock().unwrap();
    api.calls.push((uri.path().to_owned(), request.clone()));
    if let Some((status, kind)) = api.failures.pop_front() {
        let mut headers = HeaderMap::new();
        headers.insert("x-amzn-errortype", kind.parse().unwrap());
        let status = StatusCode::from_u16(status).unwrap();
        return (
            status,
            headers,
            json!({"message": format!("scripted {kind}")}).to_string(),
        )
            .into_response();
    }
    let reply = match uri.path() {
        "/v1/listjobs" => list_jobs(&api.jobs, &request),
        "/v1/describejobdefinitions" => json!({"jobDefinitions": api.definitions}),
        "/v1/registerjobdefinition" => {
            let revision = api.definitions.len() + 1;
            let name = request["jobDefinitionName"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let arn =
                format!("arn:aws:batch:us-east-1:123456789012:job-definition/{name}:{revision}");
            let mut stored = request.clone();
            stored["jobDefinitionArn"] = json!(arn);
            stored["revision"] = json!(revision);
            stored["status"] = json!("ACTIVE");
            api.definitions.push(stored);
            json!({"jobDefinitionName": name, "jobDefinitionArn": arn, "revision": revision})
        }
        "/v1/submitjob" => {
            let id = format!("job-{}", api.jobs.len());
            let name = request["jobName"].clone();
            api.jobs.push(json!({"jobId": id, "jobName": name, "status": "SUBMITTED", "createdAt": 1_700_000_000_000_i64}));
            json!({"jobId": id, "jobName": name, "jobArn": format!("arn:aws:batch:us-east-1:123456789012:job/{id}")})
        }
        "/v1/terminatejob" => json!({}),
        other => return (StatusCode::NOT_FOUND, format!("no route {other}")).into_response(),
    };
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        reply.to_string(),
    )
        .into_response()
}

/// `ListJobs` with the JOB_NAME filter (case-insensitive prefix), 100 per page, as AWS pages.
fn list_jobs(jobs: &[Value], request: &Value) -> Value {
    let prefix = request["filters"][0]["values"][0]
        .as_str()
        .unwrap_or("*")
        .trim_end_matches('*')
        .to_lowercase();
    let status = request["jobStatus"].as_str();
    let matching: Vec<&Value> = jobs
        .iter()
        .filter(|j| {
            j["jobName"]
                .as_str()
                .unwrap_or_default()
                .to_lowercase()
                .starts_with(&prefix)
        })
        .filter(|j| status.is_none_or(|s| j["status"] == s))
        .collect();
    let start: usize = request["nextToken"]
        .as_str()
        .map_or(0, |t| t.parse().unwrap());
    let page: Vec<&Value> = matching.iter().skip(start).take(PAGE).copied().collect();
    let mut reply = json!({"jobSummaryList": page});
    if start + PAGE < matching.len() {
        reply["nextToken"] = json!((start + PAGE).to_string());
    }
    reply
}

struct Server {
    api: Shared,
    url: String,
}

async fn server() -> Server {
    let api = Shared::default();
    let app = Router::new().fallback(handle).with_state(api.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server { api, url }
}

fn credentials() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new("pw-in-plain-env"),
    }
}

async fn backend(server: &Server, config: AwsBatchConfig) -> AwsBatchBackend {
    let sdk = sdk_loader(&config)
        .endpoint_url(&server.url)
        .credentials_provider(aws_sdk_batch::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .load()
        .await;
    let worker = WorkerOptions::default();
    AwsBatchBackend::with_client(
        config,
        &worker,
        &credentials(),
        HostEnvironment::default(),
        BatchClient::new(&sdk),
    )
    .unwrap()
}

fn job(name: &str, status: &str) -> Value {
    json!({"jobId": format!("id-{name}"), "jobName": name, "status": status, "createdAt": 1_700_000_000_000_i64})
}

fn hex(n: usize) -> String {
    format!("{n:032x}")
}

#[tokio::test]
async fn lists_own_jobs_across_pages() {
    let server = server().await;
    {
        let mut api = server.api.lock().unwrap();
        for n in 0..250 {
            let status = ["RUNNABLE", "RUNNING", "SUCCEEDED", "FAILED", "STARTING"][n % 5];
            api.jobs
                .push(job(&format!("codalab-worker-{}", hex(n)), status));
        }
        // Same prefix, other managers or other jobs: not ours.
        api.jobs
            .push(job(&format!("codalab-worker-gpu-{}", hex(1)), "RUNNING"));
        api.jobs
            .push(job(&format!("CODALAB-WORKER-{}", hex(2)), "RUNNING"));
        api.jobs.push(job("codalab-worker-manual", "RUNNING"));
        api.jobs.push(job("someone-else", "RUNNING"));
    }
    let backend = backend(&server, AwsBatchConfig::default()).await;
    let jobs = backend.get_worker_jobs().await.unwrap();
    assert_eq!(jobs.len(), 250);
    let count = |state| jobs.iter().filter(|j| j.state == state).count();
    assert_eq!(
        (count(JobState::Pending), count(JobState::Active)),
        (100, 50)
    );
    assert_eq!((count(JobState::Ended), count(JobState::Failed)), (50, 50));
    let calls = server.api.lock().unwrap().calls.clone();
    assert_eq!(calls.len(), 3, "three pages of at most 100");
    assert!(calls.iter().all(|(path, body)| path == "/v1/listjobs"
        && body["jobQueue"] == "codalab-batch-cpu"
        && body["filters"] == json!([{"name": "JOB_NAME", "values": ["codalab-worker-*"]}])));
}

#[tokio::test]
async fn job_filter_counts_live_jobs_of_the_queue_like_upstream() {
    let server = server().await;
    {
        let mut api = server.api.lock().unwrap();
        api.jobs.push(job("codalab-worker", "RUNNING"));
        api.jobs.push(job("codalab-worker", "RUNNABLE"));
        api.jobs.push(job("codalab-worker", "SUCCEEDED"));
        api.jobs.push(job("codalab-worker-x", "RUNNING"));
        api.jobs[1]["jobId"] = json!("other-id");
    }
    let config = AwsBatchConfig {
        job_filter: Some("codalab-worker".into()),
        ..AwsBatchConfig::default()
    };
    let jobs = backend(&server, config)
        .await
        .get_worker_jobs()
        .await
        .unwrap();
    let states: Vec<JobState> = jobs.iter().map(|j| j.state).collect();
    assert_eq!(
        jobs.len(),
        2,
        "full match only, live statuses only: {jobs:?}"
    );
    assert!(states.contains(&JobState::Active) && states.contains(&JobState::Pending));
    let calls = server.api.lock().unwrap().calls.clone();
    let statuses: Vec<&str> = calls
        .iter()
        .map(|(_, body)| body["jobStatus"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"]
    );
}

#[tokio::test]
async fn throttling_is_rate_limited_after_two_attempts() {
    let server = server().await;
    server
        .api
        .lock()
        .unwrap()
        .failures
        .extend([(429, "TooManyRequestsException"); 2]);
    let err = backend(&server, AwsBatchConfig::default())
        .await
        .get_worker_jobs()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::RateLimited { .. }), "{err:?}");
    assert!(err.is_temporary());
    assert!(
        err.to_string().contains("TooManyRequestsException"),
        "{err}"
    );
    assert_eq!(
        server.api.lock().unwrap().calls.len(),
        2,
        "the SDK tries twice, then the manager's backoff takes over"
    );
}

#[tokio::test]
async fn one_throttled_answer_is_retried_by_the_sdk() {
    let server = server().await;
    server
        .api
        .lock()
        .unwrap()
        .failures
        .push_back((429, "TooManyRequestsException"));
    let jobs = backend(&server, AwsBatchConfig::default())
        .await
        .get_worker_jobs()
        .await
        .unwrap();
    assert!(jobs.is_empty());
    assert_eq!(server.api.lock().unwrap().calls.len(), 2);
}

#[tokio::test]
async fn server_errors_are_temporary_and_never_zero_workers() {
    let server = server().await;
    server
        .api
        .lock()
        .unwrap()
        .failures
        .extend([(500, "ServerException"), (503, "ServiceUnavailable")]);
    let err = backend(&server, AwsBatchConfig::default())
        .await
        .get_worker_jobs()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Backend {
                temporary: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("aws-batch failed to list worker jobs: ServiceUnavailable"),
        "{err}"
    );
}

#[tokio::test]
async fn client_exceptions_are_permanent_with_their_message() {
    let server = server().await;
    server
        .api
        .lock()
        .unwrap()
        .failures
        .push_back((400, "ClientException"));
    let backend = backend(&server, AwsBatchConfig::default()).await;
    let err = backend.get_worker_jobs().await.unwrap_err();
    assert!(!err.is_temporary(), "{err:?}");
    assert_eq!(
        err.to_string(),
        "aws-batch failed to list worker jobs: ClientException: scripted ClientException"
    );
    assert_eq!(server.api.lock().unwrap().calls.len(), 1, "not retried");
}

#[tokio::test]
async fn unreachable_endpoint_is_temporary() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let server = Server {
        api: Shared::default(),
        url,
    };
    let err = backend(&server, AwsBatchConfig::default())
        .await
        .get_worker_jobs()
        .await
        .unwrap_err();
    assert!(err.is_temporary(), "{err:?}");
}

fn launch<'a>(unique: &'a str, worker: &'a WorkerOptions, dry_run: bool) -> LaunchRequest<'a> {
    LaunchRequest {
        unique,
        worker,
        dry_run,
    }
}

#[tokio::test]
async fn registers_once_and_submits_with_the_pinned_revision() {
    let server = server().await;
    let backend = backend(&server, AwsBatchConfig::default()).await;
    let worker = WorkerOptions::default();
    for n in 0..3 {
        let job = backend
            .start_worker_job(&launch(&hex(n), &worker, false))
            .await
            .unwrap();
        assert_eq!(job.state, JobState::Pending);
        assert_eq!(job.name, format!("codalab-worker-{}", hex(n)));
    }
    let api = server.api.lock().unwrap();
    let paths: Vec<&str> = api.calls.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v1/describejobdefinitions",
            "/v1/registerjobdefinition",
            "/v1/submitjob",
            "/v1/submitjob",
            "/v1/submitjob"
        ]
    );
    let submit = &api.calls[2].1;
    assert_eq!(
        submit["jobDefinition"],
        "arn:aws:batch:us-east-1:123456789012:job-definition/codalab-worker:1"
    );
    assert_eq!(submit["tags"][MANAGER_ID_TAG], "codalab-worker");
    assert_eq!(submit["containerOverrides"]["command"][0], "/bin/bash");
    let registered = &api.calls[1].1;
    assert_eq!(
        registered["tags"][SPEC_HASH_TAG],
        backend.job_definition().hash_tag().unwrap()
    );
    assert_eq!(
        registered["containerProperties"]["mountPoints"][1]["readOnly"],
        false
    );
}

#[tokio::test]
async fn reuses_an_active_revision_with_the_same_hash() {
    let server = server().await;
    let config = AwsBatchConfig::default();
    let hash = backend(&server, config.clone())
        .await
        .job_definition()
        .hash_tag()
        .unwrap()
        .to_owned();
    {
        let mut api = server.api.lock().unwrap();
        let definition = |revision: i32, hash: &str| {
            json!({"jobDefinitionName": "codalab-worker", "revision": revision, "status": "ACTIVE", "type": "container",
                   "jobDefinitionArn": format!("arn:aws:batch:us-east-1:123456789012:job-definition/codalab-worker:{revision}"),
                   "tags": {SPEC_HASH_TAG: hash}})
        };
        api.definitions = vec![
            definition(3, &hash),
            definition(7, "other"),
            definition(5, &hash),
            definition(6, "x"),
        ];
    }
    let backend = backend(&server, config).await;
    backend
        .start_worker_job(&launch(&hex(1), &WorkerOptions::default(), false))
        .await
        .unwrap();
    let api = server.api.lock().unwrap();
    assert!(
        api.calls
            .iter()
            .all(|(path, _)| path != "/v1/registerjobdefinition")
    );
    let submit = &api.calls.last().unwrap().1;
    assert_eq!(
        submit["jobDefinition"],
        "arn:aws:batch:us-east-1:123456789012:job-definition/codalab-worker:5"
    );
}

#[tokio::test]
async fn a_refused_submit_looks_the_definition_up_again() {
    let server = server().await;
    let backend = backend(&server, AwsBatchConfig::default()).await;
    let worker = WorkerOptions::default();
    backend
        .start_worker_job(&launch(&hex(1), &worker, false))
        .await
        .unwrap();
    server
        .api
        .lock()
        .unwrap()
        .failures
        .push_back((400, "ClientException"));
    let err = backend
        .start_worker_job(&launch(&hex(2), &worker, false))
        .await
        .unwrap_err();
    assert!(!err.is_temporary());
    assert!(
        err.to_string()
            .contains("failed to submit a worker job: ClientException"),
        "{err}"
    );
    backend
        .start_worker_job(&launch(&hex(3), &worker, false))
        .await
        .unwrap();
    let api = server.api.lock().unwrap();
    let lookups = api
        .calls
        .iter()
        .filter(|(p, _)| p == "/v1/describejobdefinitions")
        .count();
    assert_eq!(lookups, 2);
}

#[tokio::test]
async fn dry_run_calls_nothing() {
    let server = server().await;
    let backend = backend(&server, AwsBatchConfig::default()).await;
    let unique = hex(9);
    let job = backend
        .start_worker_job(&launch(&unique, &WorkerOptions::default(), true))
        .await
        .unwrap();
    assert_eq!(job.id, format!("dry-run-{unique}"));
    assert_eq!(job.state, JobState::Ended);
    backend.stop_worker_job(&job).await.unwrap();
    assert!(server.api.lock().unwrap().calls.is_empty());
}

#[tokio::test]
async fn stop_terminates_with_the_managers_reason() {
    let server = server().await;
    let backend = backend(&server, AwsBatchConfig::default()).await;
    backend
        .stop_worker_job(&WorkerJob::new("job-7", JobState::Active))
        .await
        .unwrap();
    let api = server.api.lock().unwrap();
    assert_eq!(api.calls[0].0, "/v1/terminatejob");
    assert_eq!(
        api.calls[0].1,
        json!({"jobId": "job-7", "reason": codalab_wm_aws::backend::STOP_REASON})
    );
}
