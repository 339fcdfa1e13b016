//! The HTTP side of the fake: routing, authentication and the task calls.

use crate::{FakeState, FakeTask, RecordedRequest, SDK9_API_VERSION, Shared};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use codalab_wm_azure::client::{API_VERSION, encode_query};
use codalab_wm_azure::config::BATCH_SCOPE;
use codalab_wm_azure::models::{
    BatchError, BatchErrorDetail, CloudTask, CloudTaskListResult, ErrorMessage,
    TaskExecutionInformation, TaskExecutionResult, TaskState, format_rfc3339,
};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// The first api-version whose `Job_GetTaskCounts` answers a `TaskCountsResult` (azure-batch
/// 10.0.0: "Changed the response type of `GetTaskCounts` to return `TaskCountsResult`").
pub(crate) const TASK_COUNTS_RESULT_SINCE: &str = "2020-09-01.12.0";

/// How far `ocp-date` may be from now, as the service allows.
const CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);

pub(crate) async fn handle(State(shared): State<Shared>, request: Request) -> Response {
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
        ..
    } = request;
    if let Err(detail) = authenticate(state, method, path, query, headers) {
        let mut error = batch_error(
            "AuthenticationFailed",
            "Server failed to authenticate the request.",
        );
        error.values.push(BatchErrorDetail {
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
    route(state, request, &params, api_version)
}

/// The operation a checked request asks for.
fn route(
    state: &mut FakeState,
    request: &Incoming<'_>,
    params: &BTreeMap<String, String>,
    api_version: &str,
) -> Response {
    let (method, headers, body) = (request.method, request.headers, request.body);
    let segments: Vec<String> = request
        .path
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
        (_, ["jobs", job, ..]) if !state.jobs.iter().any(|j| j == job) => error(
            StatusCode::NOT_FOUND,
            "JobNotFound",
            "The specified job does not exist.",
        ),
        (Method::POST, ["jobs", job, "tasks"]) => add_task(state, job, headers, body),
        (Method::GET, ["jobs", job, "tasks"]) => {
            list_tasks(state, job, params, &request.origin(state))
        }
        (Method::GET, ["jobs", job, "taskcounts"]) => task_counts(state, job, api_version),
        (Method::POST, ["jobs", _, "tasks", id, "terminate"]) => terminate(state, id),
        (Method::DELETE, ["jobs", _, "tasks", id]) => match state.tasks.remove(*id) {
            Some(_) => {
                state.task_jobs.remove(*id);
                StatusCode::OK.into_response()
            }
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

fn add_task(state: &mut FakeState, job: &str, headers: &HeaderMap, body: &[u8]) -> Response {
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
    state.task_jobs.insert(id.clone(), job.to_owned());
    state.tasks.insert(id, task);
    (
        StatusCode::CREATED,
        [("etag", "0x1"), ("dataserviceid", "fake")],
    )
        .into_response()
}

/// The prefix of a `startswith(id,'<prefix>')` filter, the only kind the fake understands.
pub(crate) fn startswith_prefix(filter: &str) -> Option<&str> {
    let inner = filter
        .trim()
        .strip_prefix("startswith(")?
        .strip_suffix(')')?;
    let (field, value) = inner.split_once(',')?;
    (field.trim() == "id").then_some(())?;
    value.trim().strip_prefix('\'')?.strip_suffix('\'')
}

fn list_tasks(
    state: &FakeState,
    job: &str,
    params: &BTreeMap<String, String>,
    origin: &str,
) -> Response {
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
        .filter(|t| t.id.starts_with(prefix) && state.job_of(&t.id) == job)
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
        format!("{origin}/jobs/{job}/tasks?{}", encode_query(&pairs))
    });
    json(StatusCode::OK, &CloudTaskListResult { value, next_link })
}

/// `Job_GetTaskCounts` over every task of the job (not only the workers): `active`,
/// `running` (with `preparing`), `completed`, and of those `succeeded`/`failed` by
/// `executionInfo.result`. From api-version [`TASK_COUNTS_RESULT_SINCE`] on the answer is a
/// `TaskCountsResult` whose `taskSlotCounts` weigh each task by its `requiredSlots` (1 when
/// not given); before, the bare `TaskCounts` of that api-version (azure-batch 9.0.0 reads it as
/// such).
fn task_counts(state: &FakeState, job: &str, api_version: &str) -> Response {
    let mut tasks = [0_u64; 5];
    let mut slots = [0_u64; 5];
    for task in state.tasks.values().filter(|t| state.job_of(&t.id) == job) {
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
pub(crate) fn api_version_at_least(version: &str, since: &str) -> bool {
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
