//! # codalab-wm-fake-azure
//!
//! An in-process fake of the Azure Batch task API, standing in for a Batch account's service
//! endpoint (`https://<account>.<region>.batch.azure.com`) and its Microsoft Entra ID token
//! endpoint, in the Azure backend's transport and conformance tests (this crate's `tests/`)
//! and in the bench (`bench-harness azure-fake`). Not published; production crates never
//! depend on it. It does what the Prism contract mock (`codalab-wm-azure`'s
//! `tests/prism_contract.rs`, validated against the official OpenAPI spec) cannot: it keeps
//! state.
//!
//! It serves one job on `127.0.0.1:<random port>` (plain HTTP) and
//! - checks every request's Shared Key signature with the backend's own
//!   [`SharedKeyCredential`] (whose unit tests reproduce the official SDK's vectors), 403
//!   `AuthenticationFailed` when it is wrong or `ocp-date` is missing or stale, or a bearer
//!   token it issued from its Entra ID token endpoint (`POST /token`);
//! - requires `api-version` [`API_VERSION`](codalab_wm_azure::client::API_VERSION) (the
//!   backend's) or [`SDK9_API_VERSION`] (what azure-batch 9.0.0, upstream's pinned SDK, sends);
//! - keeps tasks: add (409 `TaskExists` for a known id), list with the backend's `$filter`
//!   (other filters are refused with 400) and `$select`, paged through `odata.nextLink` (on
//!   the origin the request was sent to, from its `Host`, as the service's own host name is),
//!   terminate (404 `TaskNotFound`, 409 `TaskCompleted`), delete;
//! - counts the job's tasks (`Job_GetTaskCounts`, `GET /jobs/{jobId}/taskcounts`) in the shape
//!   of the request's api-version: `TaskCountsResult` (`taskCounts` + `taskSlotCounts`) from
//!   2020-09-01.12.0 on, a bare `TaskCounts` before;
//! - answers queued faults (429 with `Retry-After`, 503, 500 …) before the real handling.
//!
//! Tasks start `active` while new tasks are held and `running` otherwise; the test moves them.
//!
//! How faithful: the bodies are the backend's own models of the spec's types and the errors
//! carry the service's codes and shapes, but only the calls above exist; there are no pools,
//! nodes or scheduling (a task runs when the test says so), no task output or files, no
//! other `$filter` than `startswith(id,'…')`, and no account, quota or throttling of its own
//! (only injected faults).
//!
//! The backend's tests against this fake live in this crate (`tests/`), not in
//! `codalab-wm-azure`: this crate depends on the backend (one home for signing and the wire
//! models); as a dev-dependency of the backend it would make a dependency cycle, in which the
//! backend's unit tests would see a second copy of the backend's types.
#![warn(missing_docs)]

mod service;
#[cfg(test)]
mod tests;

use codalab_wm_azure::models::{TaskExecutionResult, TaskState};
use codalab_wm_azure::sign::SharedKeyCredential;
use codalab_wm_core::secret::Secret;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

/// The api-version azure-batch 9.0.0 sends (upstream codalab 1.7.5's `AzureBatchWorkerManager`
/// uses that SDK). The fake accepts it besides
/// [`API_VERSION`](codalab_wm_azure::client::API_VERSION).
pub const SDK9_API_VERSION: &str = "2020-03-01.11.0";

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
    /// The jobs it serves (the first given at start).
    jobs: Vec<String>,
    key: SharedKeyCredential,
    tasks: BTreeMap<String, FakeTask>,
    /// Each task's job.
    task_jobs: BTreeMap<String, String>,
    hold: bool,
    page_size: usize,
    faults: VecDeque<Fault>,
    requests: Vec<RecordedRequest>,
    entra: Option<(String, Secret)>,
    tokens: Vec<String>,
}

impl FakeState {
    /// The job of task `id` (the first job for one added directly, [`FakeBatch::insert`]).
    fn job_of(&self, id: &str) -> &str {
        (self.task_jobs.get(id)).map_or(self.jobs[0].as_str(), String::as_str)
    }
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
            jobs: vec![job_id.to_owned()],
            key,
            tasks: BTreeMap::new(),
            task_jobs: BTreeMap::new(),
            hold: false,
            page_size: 1000,
            faults: VecDeque::new(),
            requests: Vec::new(),
            entra: None,
            tokens: Vec::new(),
        }));
        let router = axum::Router::new()
            .fallback(service::handle)
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

    /// Serves job `job_id` too (an account's CPU and GPU jobs behind one service URL, as
    /// CodaLab's compose deployment has them); each job lists and counts its own tasks.
    pub fn also_serve(&self, job_id: &str) {
        self.state().jobs.push(job_id.to_owned());
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
