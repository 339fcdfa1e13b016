//! A small client for the three Batch data-plane operations the backend uses: add a task
//! (`Task_Add`), list tasks with `$filter`/`$select` across all pages (`Task_List`) and
//! terminate a task (`Task_Terminate`).
//!
//! Every request carries `ocp-date` and a `client-request-id`, and is signed with Shared Key
//! (see [`sign`](crate::sign)) or carries an Entra ID bearer token. Requests are built as
//! [`reqwest::Request`]s by public methods, so the contract test sends exactly what the
//! backend sends. The client never retries: the manager loop does, based on the error.

use crate::auth::Auth;
use crate::error::{BACKEND, invalid_reply, response_error, transport_error};
use crate::models::{CloudTask, CloudTaskListResult, TaskAddParameter};
use codalab_wm_backend::Error;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderValue,
};
use reqwest::{Method, Request, StatusCode, Url};
use std::time::{Duration, SystemTime};

/// The Batch REST api-version this client speaks (the vendored spec's `info.version`).
pub const API_VERSION: &str = "2024-07-01.20.0";

/// The content type the Batch SDKs send with a JSON body.
pub const JSON_CONTENT_TYPE: &str = "application/json; odata=minimalmetadata";

/// Most tasks the service returns per page (the spec's maximum).
pub const MAX_RESULTS: u32 = 1000;

/// Pages followed at most in one listing (a million tasks), against a service that loops.
const MAX_PAGES: usize = 1000;

/// Characters left as they are in a query value: RFC 3986 unreserved.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// What adding a task came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddOutcome {
    /// The service created the task (201).
    Created,
    /// A task with this id already exists (409 `TaskExists`): an earlier try got through.
    AlreadyExists,
}

/// What terminating a task came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminateOutcome {
    /// The service terminated the task (204).
    Terminated,
    /// The task had already completed (409 `TaskCompleted`).
    AlreadyCompleted,
    /// There is no such task (404 `TaskNotFound`).
    NotFound,
}

/// A client for the tasks of one Batch job.
#[derive(Debug)]
pub struct BatchClient {
    http: reqwest::Client,
    base: Url,
    job_id: String,
    auth: Auth,
}

impl BatchClient {
    /// A client for job `job_id` of the account at `service_url`.
    pub fn new(
        service_url: &str,
        job_id: &str,
        auth: Auth,
        http: reqwest::Client,
    ) -> Result<Self, Error> {
        let base = Url::parse(service_url.trim_end_matches('/')).map_err(|e| {
            Error::InvalidConfig(format!(
                "azure_batch: service_url `{service_url}` is not a URL: {e}"
            ))
        })?;
        if base.cannot_be_a_base() || base.query().is_some() {
            return Err(Error::InvalidConfig(format!(
                "azure_batch: service_url `{service_url}` must be a plain base URL"
            )));
        }
        Ok(Self {
            http,
            base,
            job_id: job_id.to_owned(),
            auth,
        })
    }

    /// An HTTP client suited to the Batch service (rustls, timeouts, user agent).
    pub fn http_client(timeout: Duration) -> Result<reqwest::Client, Error> {
        reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("codalab-wm/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::InvalidConfig(format!("cannot build the HTTP client: {e}")))
    }

    /// The job the client adds tasks to.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// `<service>/jobs/<job>/tasks[/<more>…]?api-version=…&<query>`.
    fn url(&self, more: &[&str], query: &[(&str, &str)]) -> Url {
        let mut url = self.base.clone();
        {
            let mut segments = url.path_segments_mut().expect("checked in new: a base URL");
            segments
                .pop_if_empty()
                .extend(["jobs", self.job_id.as_str(), "tasks"])
                .extend(more);
        }
        let mut pairs = vec![("api-version", API_VERSION)];
        pairs.extend_from_slice(query);
        url.set_query(Some(&encode_query(&pairs)));
        url
    }

    /// A signed request. Bodiless POSTs send and sign `Content-Length: 0`, as the SDKs do.
    async fn prepare(
        &self,
        method: Method,
        url: Url,
        json: Option<Vec<u8>>,
    ) -> Result<Request, Error> {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        headers.insert(
            "ocp-date",
            header_value(&httpdate::fmt_http_date(SystemTime::now())),
        );
        headers.insert(
            "client-request-id",
            header_value(&uuid::Uuid::new_v4().to_string()),
        );
        headers.insert("return-client-request-id", HeaderValue::from_static("true"));
        let body = match json {
            Some(body) => {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON_CONTENT_TYPE));
                Some(body)
            }
            None if method == Method::GET || method == Method::HEAD => None,
            None => Some(Vec::new()),
        };
        if let Some(body) = &body {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        let authorization = match &self.auth {
            Auth::SharedKey(key) => {
                key.authorization(method.as_str(), url.path(), url.query(), &headers)
            }
            Auth::Entra(source) => format!("Bearer {}", source.token().await?.expose()),
        };
        let mut authorization = header_value(&authorization);
        authorization.set_sensitive(true);
        headers.insert(AUTHORIZATION, authorization);
        let mut request = Request::new(method, url);
        *request.headers_mut() = headers;
        *request.body_mut() = body.map(Into::into);
        Ok(request)
    }

    /// The signed `Task_Add` request for `task`.
    pub async fn add_task_request(&self, task: &TaskAddParameter) -> Result<Request, Error> {
        let body = serde_json::to_vec(task)
            .map_err(|e| Error::backend(BACKEND, "submit a worker job", e.to_string()))?;
        self.prepare(Method::POST, self.url(&[], &[]), Some(body))
            .await
    }

    /// The signed `Task_List` request for the first page.
    pub async fn list_tasks_request(&self, filter: &str, select: &str) -> Result<Request, Error> {
        let max = MAX_RESULTS.to_string();
        let query = [
            ("$filter", filter),
            ("$select", select),
            ("maxresults", max.as_str()),
        ];
        self.prepare(Method::GET, self.url(&[], &query), None).await
    }

    /// The signed request for the page at `next_link`, which must be on the service's origin.
    pub async fn next_page_request(&self, next_link: &str) -> Result<Request, Error> {
        let url = self
            .base
            .join(next_link)
            .ok()
            .filter(|url| url.origin() == self.base.origin())
            .ok_or_else(|| {
                invalid_reply(
                    "list worker jobs",
                    "odata.nextLink is not a URL of the service",
                )
            })?;
        let url = if url.query_pairs().any(|(name, _)| name == "api-version") {
            url
        } else {
            let mut url = url;
            url.query_pairs_mut()
                .append_pair("api-version", API_VERSION);
            url
        };
        self.prepare(Method::GET, url, None).await
    }

    /// The signed `Task_Terminate` request for task `task_id`.
    pub async fn terminate_task_request(&self, task_id: &str) -> Result<Request, Error> {
        self.prepare(Method::POST, self.url(&[task_id, "terminate"], &[]), None)
            .await
    }

    /// The signed `Task_Delete` request for task `task_id`.
    pub async fn delete_task_request(&self, task_id: &str) -> Result<Request, Error> {
        self.prepare(Method::DELETE, self.url(&[task_id], &[]), None)
            .await
    }

    /// Sends `request` and returns the status, headers and body of the reply.
    async fn send(
        &self,
        request: Request,
        operation: &'static str,
    ) -> Result<(StatusCode, HeaderMap, Vec<u8>), Error> {
        let (method, path) = (request.method().clone(), request.url().path().to_owned());
        let response = self
            .http
            .execute(request)
            .await
            .map_err(|e| transport_error(operation, e))?;
        let (status, headers) = (response.status(), response.headers().clone());
        let body = response
            .bytes()
            .await
            .map_err(|e| transport_error(operation, e))?
            .to_vec();
        let request_id = headers
            .get("request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-");
        tracing::debug!(backend = BACKEND, %method, path, status = status.as_u16(), request_id, "batch request");
        Ok((status, headers, body))
    }

    /// Adds `task` to the job.
    pub async fn add_task(&self, task: &TaskAddParameter) -> Result<AddOutcome, Error> {
        const OPERATION: &str = "submit a worker job";
        let (status, headers, body) = self
            .send(self.add_task_request(task).await?, OPERATION)
            .await?;
        match status {
            s if s.is_success() => Ok(AddOutcome::Created),
            StatusCode::CONFLICT
                if crate::error::error_code(&body).as_deref() == Some("TaskExists") =>
            {
                Ok(AddOutcome::AlreadyExists)
            }
            _ => Err(response_error(OPERATION, status, &headers, &body)),
        }
    }

    /// Every task of the job matching `filter`, with the properties in `select`, following
    /// `odata.nextLink` to the last page.
    pub async fn list_tasks(&self, filter: &str, select: &str) -> Result<Vec<CloudTask>, Error> {
        let mut tasks = Vec::new();
        let mut request = self.list_tasks_request(filter, select).await?;
        let mut seen_links: Vec<String> = Vec::new();
        loop {
            let page = self.list_tasks_page(request).await?;
            tasks.extend(page.value);
            let Some(next) = page.next_link.filter(|link| !link.is_empty()) else {
                return Ok(tasks);
            };
            if seen_links.contains(&next) || seen_links.len() >= MAX_PAGES {
                return Err(invalid_reply(
                    "list worker jobs",
                    "odata.nextLink repeats or never ends",
                ));
            }
            request = self.next_page_request(&next).await?;
            seen_links.push(next);
        }
    }

    /// Sends one `Task_List` request and parses the page.
    pub async fn list_tasks_page(&self, request: Request) -> Result<CloudTaskListResult, Error> {
        const OPERATION: &str = "list worker jobs";
        let (status, headers, body) = self.send(request, OPERATION).await?;
        if !status.is_success() {
            return Err(response_error(OPERATION, status, &headers, &body));
        }
        serde_json::from_slice(&body)
            .map_err(|e| invalid_reply(OPERATION, format!("not a CloudTaskListResult: {e}")))
    }

    /// Terminates task `task_id`.
    pub async fn terminate_task(&self, task_id: &str) -> Result<TerminateOutcome, Error> {
        const OPERATION: &str = "stop a worker job";
        let (status, headers, body) = self
            .send(self.terminate_task_request(task_id).await?, OPERATION)
            .await?;
        if status.is_success() {
            return Ok(TerminateOutcome::Terminated);
        }
        match (status, crate::error::error_code(&body).as_deref()) {
            (StatusCode::CONFLICT, Some("TaskCompleted")) => Ok(TerminateOutcome::AlreadyCompleted),
            (StatusCode::NOT_FOUND, Some("TaskNotFound")) => Ok(TerminateOutcome::NotFound),
            _ => Err(response_error(OPERATION, status, &headers, &body)),
        }
    }
}

impl BatchClient {
    /// Deletes task `task_id`; returns whether it existed.
    pub async fn delete_task(&self, task_id: &str) -> Result<bool, Error> {
        const OPERATION: &str = "delete a finished worker task";
        let (status, headers, body) = self
            .send(self.delete_task_request(task_id).await?, OPERATION)
            .await?;
        if status.is_success() {
            return Ok(true);
        }
        match (status, crate::error::error_code(&body).as_deref()) {
            (StatusCode::NOT_FOUND, Some("TaskNotFound")) => Ok(false),
            _ => Err(response_error(OPERATION, status, &headers, &body)),
        }
    }
}

/// `name=value&…` with every value percent-encoded (spaces as `%20`, as the SDKs send them).
pub fn encode_query(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(name, value)| {
            format!(
                "{}={}",
                utf8_percent_encode(name, QUERY_VALUE),
                utf8_percent_encode(value, QUERY_VALUE)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A header value from text we made ourselves (dates, uuids, base64): always valid.
fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign::SharedKeyCredential;
    use codalab_wm_backend::secret::Secret;

    fn client(service_url: &str) -> BatchClient {
        let key = SharedKeyCredential::new("acct", &Secret::new("a2V5")).unwrap();
        BatchClient::new(
            service_url,
            "job 1",
            Auth::SharedKey(key),
            reqwest::Client::new(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn list_request_has_filter_select_and_a_valid_signature() {
        let client = client("https://acct.westeurope.batch.azure.com/");
        let request = client
            .list_tasks_request("startswith(id,'cl_worker_')", "id,state")
            .await
            .unwrap();
        assert_eq!(
            request.url().as_str(),
            "https://acct.westeurope.batch.azure.com/jobs/job%201/tasks?api-version=2024-07-01.20.0\
             &%24filter=startswith%28id%2C%27cl_worker_%27%29&%24select=id%2Cstate&maxresults=1000"
        );
        assert!(request.body().is_none());
        assert!(request.headers().get(CONTENT_LENGTH).is_none());
        let authorization = request.headers()[AUTHORIZATION]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(request.headers()[AUTHORIZATION].is_sensitive());
        let key = SharedKeyCredential::new("acct", &Secret::new("a2V5")).unwrap();
        let string_to_sign = key.string_to_sign(
            "GET",
            request.url().path(),
            request.url().query(),
            request.headers(),
        );
        assert!(string_to_sign.ends_with(
            "/acct/jobs/job%201/tasks\n$filter:startswith(id,'cl_worker_')\n$select:id,state\n\
             api-version:2024-07-01.20.0\nmaxresults:1000"
        ));
        assert!(key.verify(
            &authorization,
            "GET",
            request.url().path(),
            request.url().query(),
            request.headers()
        ));
    }

    #[tokio::test]
    async fn bodiless_post_signs_content_length_zero() {
        let client = client("https://acct.westeurope.batch.azure.com");
        let request = client.terminate_task_request("cl_worker_1").await.unwrap();
        assert_eq!(request.method(), Method::POST);
        assert_eq!(
            request.url().path(),
            "/jobs/job%201/tasks/cl_worker_1/terminate"
        );
        assert_eq!(request.headers()[CONTENT_LENGTH], "0");
        assert_eq!(request.body().and_then(|b| b.as_bytes()), Some(&b""[..]));
    }

    #[tokio::test]
    async fn next_links_must_stay_on_the_service() {
        let client = client("https://acct.westeurope.batch.azure.com");
        let request = client
            .next_page_request(
                "https://acct.westeurope.batch.azure.com/jobs/j/tasks?api-version=x&$skiptoken=a",
            )
            .await
            .unwrap();
        assert_eq!(request.url().query(), Some("api-version=x&$skiptoken=a"));
        let request = client
            .next_page_request("/jobs/j/tasks?$skiptoken=a")
            .await
            .unwrap();
        assert_eq!(
            request.url().query(),
            Some("$skiptoken=a&api-version=2024-07-01.20.0")
        );
        let err = client
            .next_page_request("https://evil.example/jobs/j/tasks")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("odata.nextLink"), "{err}");
    }

    #[test]
    fn query_values_use_percent_twenty_for_spaces() {
        assert_eq!(
            encode_query(&[("$filter", "state eq 'active'")]),
            "%24filter=state%20eq%20%27active%27"
        );
    }
}
