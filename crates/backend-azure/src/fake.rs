//! An in-process fake of the Batch task API (feature `fake`), for transport and conformance
//! tests: what the Prism contract mock cannot do, because it keeps no state.
//!
//! It serves one job on `127.0.0.1:<random port>` and
//! - checks every request's Shared Key signature with [`SharedKeyCredential`] (403
//!   `AuthenticationFailed` when it is wrong or `ocp-date` is missing or stale), or a bearer
//!   token it issued from its Entra ID token endpoint (`POST /token`);
//! - requires `api-version` [`API_VERSION`] or [`SDK9_API_VERSION`] (what azure-batch 9.0.0,
//!   upstream's pinned SDK, sends);
//! - keeps tasks: add (409 `TaskExists` for a known id), list with the backend's `$filter`
//!   (other filters are refused with 400) and `$select`, paged through `odata.nextLink` (on
//!   the origin the request was sent to, from its `Host`, as the service's own host name is),
//!   terminate (404 `TaskNotFound`, 409 `TaskCompleted`);
//! - counts the job's tasks (`Job_GetTaskCounts`, `GET /jobs/{jobId}/taskcounts`) in the shape
//!   of the request's api-version: `TaskCountsResult` (`taskCounts` + `taskSlotCounts`) from
//!   2020-09-01.12.0 on, a bare `TaskCounts` before;
//! - answers queued faults (429 with `Retry-After`, 503, 500 …) before the real handling.
//!
//! Tasks start `active` while new tasks are held and `running` otherwise; the test moves them.

use crate::client::{API_VERSION, encode_query};
use crate::config::BATCH_SCOPE;
use crate::models::{
    BatchError, CloudTask, CloudTaskListResult, ErrorMessage, TaskExecutionInformation,
    TaskExecutionResult, TaskState, format_rfc3339,
};
use crate::sign::SharedKeyCredential;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use codalab_wm_core::secret::Secret;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// The api-version azure-batch 9.0.0 sends (upstream codalab 1.7.5's `AzureBatchWorkerManager`
/// uses that SDK). The fake accepts it besides [`API_VERSION`].
pub const SDK9_API_VERSION: &str = "2020-03-01.11.0";

/// The first api-version whose `Job_GetTaskCounts` answers a `TaskCountsResult` (azure-batch
/// 10.0.0: "Changed the response type of `GetTaskCounts` to return `TaskCountsResult`").
const TASK_COUNTS_RESULT_SINCE: &str = "2020-09-01.12.0";

/// How far `ocp-date` may be from now, as the service allows.
const CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);

/// A task the fake keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeTask {
    /// The task id.
    pub id: String,
    /// Its state.
    pub state: TaskState,
    /// The execution result, once completed.
    pub result: Option<TaskExecutionResult>,
    /// When it was added.
    pub created: SystemTime,
    /// The body it was added with.
    pub body: serde_json::Value,
}

/// A canned error answer, given to the next request that passes authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The HTTP status.
    pub status: u16,
    /// The Batch error code.
    pub code: String,
    /// The `Retry-After` header value, if any.
    pub retry_after: Option<String>,
}

impl Fault {
    /// A fault with `status` and error `code` and no `Retry-After`.
    pub fn new(status: u16, code: &str) -> Self {
        Self {
            status,
            code: code.to_owned(),
            retry_after: None,
        }
    }

    /// The same fault with a `Retry-After` header.
    pub fn retry_after(mut self, value: &str) -> Self {
        self.retry_after = Some(value.to_owned());
        self
    }
}

/// One request the fake answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The method.
    pub method: String,
    /// The raw path.
    pub path: String,
    /// The raw query.
    pub query: String,
    /// The status it got.
    pub status: u16,
}

#[derive(Debug)]
struct FakeState {
    base_url: String,
    job_id: String,
    key: SharedKeyCredential,
    tasks: BTreeMap<String, FakeTask>,
    hold: bool,
    page_size: usize,
    faults: VecDeque<Fault>,
    requests: Vec<RecordedRequest>,
    entra: Option<(String, Secret)>,
    tokens: Vec<String>,
}

type Shared = Arc<Mutex<FakeState>>;

/// A running fake Batch service. Stops when dropped.
#[derive(Debug)]
pub struct FakeBatch {
    url: String,
    state: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeBatch {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeBatch {
    /// Starts a fake for account `account` with key `key_base64`, serving job `job_id`.
    pub async fn start(account: &str, key_base64: &Secret, job_id: &str) -> std::io::Result<Self> {
        let key = SharedKeyCredential::new(account, key_base64).map_err(std::io::Error::other)?;
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(Mutex::new(FakeState {
            base_url: url.clone(),
            job_id: job_id.to_owned(),
            key,
            tasks: BTreeMap::new(),
            hold: false,
            page_size: 1000,
            faults: VecDeque::new(),
            requests: Vec::new(),
            entra: None,
            tokens: Vec::new(),
        }));
        let router = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { url, state, server })
    }

    fn state(&self) -> MutexGuard<'_, FakeState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The service URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Makes new tasks stay `active` (held) or start `running`.
    pub fn hold_new_tasks(&self, hold: bool) {
        self.state().hold = hold;
    }

    /// Lets every `active` task run, and new tasks start `running`.
    pub fn release(&self) {
        let mut state = self.state();
        state.hold = false;
        for task in state
            .tasks
            .values_mut()
            .filter(|t| t.state == TaskState::Active)
        {
            task.state = TaskState::Running;
        }
    }

    /// Completes task `id` with `result`, as a worker that exits.
    pub fn complete(&self, id: &str, result: TaskExecutionResult) {
        if let Some(task) = self.state().tasks.get_mut(id) {
            task.state = TaskState::Completed;
            task.result = Some(result);
        }
    }

    /// Adds a task directly, as another client would (e.g. one without the worker prefix).
    pub fn insert(&self, id: &str, state: TaskState) {
        let task = FakeTask {
            id: id.to_owned(),
            state,
            result: None,
            created: SystemTime::now(),
            body: serde_json::Value::Null,
        };
        self.state().tasks.insert(id.to_owned(), task);
    }

    /// Every task, by id.
    pub fn tasks(&self) -> Vec<FakeTask> {
        self.state().tasks.values().cloned().collect()
    }

    /// At most `size` tasks per list page (default 1000).
    pub fn set_page_size(&self, size: usize) {
        self.state().page_size = size.max(1);
    }

    /// Answers the next authenticated request with `fault`.
    pub fn push_fault(&self, fault: Fault) {
        self.state().faults.push_back(fault);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state().requests.clone()
    }

    /// Accepts Entra ID client-credentials requests for `client_id`/`client_secret` at the
    /// returned token URL, and the bearer tokens it issues.
    pub fn enable_entra(&self, client_id: &str, client_secret: &Secret) -> String {
        self.state().entra = Some((client_id.to_owned(), client_secret.clone()));
        format!("{}/token", self.url)
    }
}

async fn handle(State(shared): State<Shared>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let mut state = shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("").to_owned();
    let response = if parts.method == Method::POST && path == "/token" {
        token(&mut state, &body)
    } else {
        let request = Incoming {
            method: &parts.method,
            path: &path,
            query: &query,
            headers: &parts.headers,
            body: &body,
        };
        serve(&mut state, &request)
    };
    let status = response.status().as_u16();
    state.requests.push(RecordedRequest {
        method: parts.method.to_string(),
        path,
        query,
        status,
    });
    response
}

/// One request to the Batch API, as received.
struct Incoming<'a> {
    method: &'a Method,
    path: &'a str,
    query: &'a str,
    headers: &'a HeaderMap,
    body: &'a [u8],
}

impl Incoming<'_> {
    /// The origin the client sent the request to (`http://<Host>`), which the service's links
    /// point at; the fake's own URL when there is no `Host`.
    fn origin(&self, state: &FakeState) -> String {
        self.headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .filter(|host| !host.is_empty())
            .map_or_else(|| state.base_url.clone(), |host| format!("http://{host}"))
    }
}

fn serve(state: &mut FakeState, request: &Incoming<'_>) -> Response {
    let &Incoming {
        method,
        path,
        query,
        headers,
        body,
    } = request;
    if let Err(detail) = authenticate(state, method, path, query, headers) {
        let mut error = batch_error(
            "AuthenticationFailed",
            "Server failed to authenticate the request.",
        );
        error.values.push(crate::models::BatchErrorDetail {
            key: Some("AuthenticationErrorDetail".into()),
            value: Some(detail),
        });
        return json(StatusCode::FORBIDDEN, &error);
    }
    if headers.get_all(header::CONTENT_LENGTH).iter().count() > 1 {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidHeaderValue",
            "Content-Length is given twice",
        );
    }
    let params: BTreeMap<String, String> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let Some(api_version) = params
        .get("api-version")
        .map(String::as_str)
        .filter(|v| [API_VERSION, SDK9_API_VERSION].contains(v))
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidQueryParameterValue",
            "api-version is missing or unsupported",
        );
    };
    if let Some(fault) = state.faults.pop_front() {
        let status =
            StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = error(status, &fault.code, "injected fault");
        if let Some(value) = fault.retry_after.and_then(|v| v.parse().ok()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let segments: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (method.clone(), segments.as_slice()) {
        (_, ["jobs", job, ..]) if *job != state.job_id => error(
            StatusCode::NOT_FOUND,
            "JobNotFound",
            "The specified job does not exist.",
        ),
        (Method::POST, ["jobs", _, "tasks"]) => add_task(state, headers, body),
        (Method::GET, ["jobs", _, "tasks"]) => list_tasks(state, &params, &request.origin(state)),
        (Method::GET, ["jobs", _, "taskcounts"]) => task_counts(state, api_version),
        (Method::POST, ["jobs", _, "tasks", id, "terminate"]) => terminate(state, id),
        (Method::DELETE, ["jobs", _, "tasks", id]) => match state.tasks.remove(*id) {
            Some(_) => StatusCode::OK.into_response(),
            None => error(
                StatusCode::NOT_FOUND,
                "TaskNotFound",
                "The specified task does not exist.",
            ),
        },
        _ => error(
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            "The specified resource does not exist.",
        ),
    }
}

fn authenticate(
    state: &FakeState,
    method: &Method,
    path: &str,
    query: &str,
    headers: &HeaderMap,
) -> Result<(), String> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(token) = authorization.strip_prefix("Bearer ") {
        return if state.tokens.iter().any(|t| t == token) {
            Ok(())
        } else {
            Err("unknown bearer token".into())
        };
    }
    let date = headers
        .get("ocp-date")
        .and_then(|v| v.to_str().ok())
        .ok_or("ocp-date is missing")?;
    let date = httpdate::parse_http_date(date).map_err(|_| "ocp-date is not an HTTP date")?;
    let skew = date
        .duration_since(SystemTime::now())
        .or_else(|_| SystemTime::now().duration_since(date));
    if skew.map_or(true, |skew| skew > CLOCK_SKEW) {
        return Err("ocp-date is more than 15 minutes off".into());
    }
    let query = (!query.is_empty()).then_some(query);
    if state
        .key
        .verify(authorization, method.as_str(), path, query, headers)
    {
        Ok(())
    } else {
        Err("The MAC signature found in the HTTP request is not the same as any computed signature.".into())
    }
}

fn add_task(state: &mut FakeState, headers: &HeaderMap, body: &[u8]) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with("application/json") {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidHeaderValue",
            "Content-Type must be application/json",
        );
    }
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidRequestBody",
            "The request body is not valid JSON.",
        );
    };
    let (Some(id), Some(_)) = (
        body["id"].as_str().map(str::to_owned),
        body["commandLine"].as_str(),
    ) else {
        return error(
            StatusCode::BAD_REQUEST,
            "MissingRequiredProperty",
            "id and commandLine are required.",
        );
    };
    if state
        .tasks
        .keys()
        .any(|known| known.eq_ignore_ascii_case(&id))
    {
        return error(
            StatusCode::CONFLICT,
            "TaskExists",
            "The specified task already exists.",
        );
    }
    let task_state = if state.hold {
        TaskState::Active
    } else {
        TaskState::Running
    };
    let task = FakeTask {
        id: id.clone(),
        state: task_state,
        result: None,
        created: SystemTime::now(),
        body,
    };
    state.tasks.insert(id, task);
    (
        StatusCode::CREATED,
        [("etag", "0x1"), ("dataserviceid", "fake")],
    )
        .into_response()
}

/// The prefix of a `startswith(id,'<prefix>')` filter, the only kind the fake understands.
fn startswith_prefix(filter: &str) -> Option<&str> {
    let inner = filter
        .trim()
        .strip_prefix("startswith(")?
        .strip_suffix(')')?;
    let (field, value) = inner.split_once(',')?;
    (field.trim() == "id").then_some(())?;
    value.trim().strip_prefix('\'')?.strip_suffix('\'')
}

fn list_tasks(state: &FakeState, params: &BTreeMap<String, String>, origin: &str) -> Response {
    let prefix = match params.get("$filter") {
        None => "",
        Some(filter) => match startswith_prefix(filter) {
            Some(prefix) => prefix,
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "InvalidQueryParameterValue",
                    "unsupported $filter",
                );
            }
        },
    };
    let select: Option<Vec<&str>> = params
        .get("$select")
        .map(|s| s.split(',').map(str::trim).collect());
    let max = params
        .get("maxresults")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(1000)
        .clamp(1, 1000);
    let page_size = max.min(state.page_size);
    let skip = params
        .get("$skiptoken")
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(0);
    let matching: Vec<&FakeTask> = state
        .tasks
        .values()
        .filter(|t| t.id.starts_with(prefix))
        .collect();
    let value = matching
        .iter()
        .skip(skip)
        .take(page_size)
        .map(|t| cloud_task(t, select.as_deref()))
        .collect();
    let next_link = (skip + page_size < matching.len()).then(|| {
        let mut pairs: Vec<(&str, &str)> = params
            .iter()
            .filter(|(name, _)| *name != "$skiptoken")
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let skip = (skip + page_size).to_string();
        pairs.push(("$skiptoken", &skip));
        format!(
            "{origin}/jobs/{}/tasks?{}",
            state.job_id,
            encode_query(&pairs)
        )
    });
    json(StatusCode::OK, &CloudTaskListResult { value, next_link })
}

/// `Job_GetTaskCounts` over every task of the job (not only the workers): `active`,
/// `running` (with `preparing`), `completed`, and of those `succeeded`/`failed` by
/// `executionInfo.result`. From api-version [`TASK_COUNTS_RESULT_SINCE`] on the answer is a
/// `TaskCountsResult` whose `taskSlotCounts` weigh each task by its `requiredSlots` (1 when
/// not given); before, the bare `TaskCounts` of that api-version (azure-batch 9.0.0 reads it as
/// such).
fn task_counts(state: &FakeState, api_version: &str) -> Response {
    let mut tasks = [0_u64; 5];
    let mut slots = [0_u64; 5];
    for task in state.tasks.values() {
        let required = task.body["requiredSlots"].as_u64().unwrap_or(1);
        let mut count = |i: usize| {
            tasks[i] += 1;
            slots[i] += required;
        };
        match task.state {
            TaskState::Active => count(0),
            TaskState::Preparing | TaskState::Running => count(1),
            TaskState::Completed => {
                count(2);
                match task.result {
                    Some(TaskExecutionResult::Success) => count(3),
                    Some(TaskExecutionResult::Failure) => count(4),
                    None => {}
                }
            }
        }
    }
    let counts = |[active, running, completed, succeeded, failed]: [u64; 5]| {
        serde_json::json!({
            "active": active, "running": running, "completed": completed,
            "succeeded": succeeded, "failed": failed,
        })
    };
    let body = if api_version_at_least(api_version, TASK_COUNTS_RESULT_SINCE) {
        serde_json::json!({"taskCounts": counts(tasks), "taskSlotCounts": counts(slots)})
    } else {
        counts(tasks)
    };
    json(StatusCode::OK, &body)
}

/// Whether Batch api-version `version` (`YYYY-MM-DD.major.minor`) is `since` or later.
fn api_version_at_least(version: &str, since: &str) -> bool {
    let key = |v: &str| {
        let (date, rest) = v.split_once('.').unwrap_or((v, ""));
        let numbers: Vec<u64> = rest.split('.').filter_map(|n| n.parse().ok()).collect();
        (date.to_owned(), numbers)
    };
    key(version) >= key(since)
}

fn cloud_task(task: &FakeTask, select: Option<&[&str]>) -> CloudTask {
    let wanted = |name: &str| select.is_none_or(|s| s.contains(&name));
    CloudTask {
        id: task.id.clone(),
        state: wanted("state").then_some(task.state),
        creation_time: wanted("creationTime").then(|| format_rfc3339(task.created)),
        execution_info: wanted("executionInfo").then(|| TaskExecutionInformation {
            exit_code: task.result.map(|r| {
                if r == TaskExecutionResult::Success {
                    0
                } else {
                    1
                }
            }),
            result: task.result,
            failure_info: None,
        }),
    }
}

fn terminate(state: &mut FakeState, id: &str) -> Response {
    match state.tasks.get_mut(id) {
        None => error(
            StatusCode::NOT_FOUND,
            "TaskNotFound",
            "The specified task does not exist.",
        ),
        Some(task) if task.state == TaskState::Completed => error(
            StatusCode::CONFLICT,
            "TaskCompleted",
            "The specified task is already completed.",
        ),
        Some(task) => {
            task.state = TaskState::Completed;
            StatusCode::NO_CONTENT.into_response()
        }
    }
}

fn token(state: &mut FakeState, body: &[u8]) -> Response {
    let form: BTreeMap<String, String> = form_urlencoded::parse(body).into_owned().collect();
    let field = |name: &str| form.get(name).map(String::as_str).unwrap_or("");
    let valid = state.entra.as_ref().is_some_and(|(id, secret)| {
        field("grant_type") == "client_credentials"
            && field("client_id") == id
            && field("client_secret") == secret.expose()
    });
    if !valid || field("scope") != BATCH_SCOPE {
        let body = serde_json::json!({"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    let token = format!("fake-token-{}", state.tokens.len() + 1);
    state.tokens.push(token.clone());
    let body =
        serde_json::json!({"token_type": "Bearer", "expires_in": 3599, "access_token": token});
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn batch_error(code: &str, message: &str) -> BatchError {
    BatchError {
        code: Some(code.to_owned()),
        message: Some(ErrorMessage {
            lang: Some("en-US".into()),
            value: Some(message.to_owned()),
        }),
        values: Vec::new(),
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    json(status, &batch_error(code, message))
}

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        "application/json;odata=minimalmetadata"
            .parse()
            .expect("valid"),
    );
    response.headers_mut().insert(
        "request-id",
        uuid::Uuid::new_v4().to_string().parse().expect("valid"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
