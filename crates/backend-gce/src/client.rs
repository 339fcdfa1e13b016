//! A small typed client of the Compute Engine REST API (v1) for the calls the backend makes:
//! `instances.insert`, `instances.aggregatedList` (a filter, every page), `instances.delete`,
//! `zoneOperations.wait` and `globalOperations.aggregatedList` (preemptions). Paths and
//! parameters are the discovery document's (the fake checks them against it).

use crate::auth::TokenSource;
use crate::error::{BACKEND, response_error, transport_error};
use crate::models::{
    Instance, InstanceAggregatedList, InstanceResource, Operation, OperationAggregatedList,
};
use codalab_wm_backend::{Error, Result};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use std::time::{Duration, Instant};

/// Items per list page (the API's maximum).
pub const PAGE_SIZE: u32 = 500;
/// How long one `zoneOperations.wait` may take: the service answers when the operation is
/// done or after about two minutes.
pub const WAIT_CALL_TIMEOUT: Duration = Duration::from_secs(150);

/// What a delete found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Deleting, by this operation.
    Started(Operation),
    /// The instance was already gone.
    NotFound,
}

/// The client of one project.
#[derive(Debug)]
pub struct ComputeClient {
    http: reqwest::Client,
    base: String,
    project: String,
    auth: TokenSource,
}

impl ComputeClient {
    /// A client of `project` at API root `base` (`https://compute.googleapis.com/compute/v1/`).
    pub fn new(http: reqwest::Client, base: &str, project: &str, auth: TokenSource) -> Self {
        let base = format!("{}/", base.trim_end_matches('/'));
        Self {
            http,
            base,
            project: project.to_owned(),
            auth,
        }
    }

    /// The HTTP client, with `timeout` per request.
    pub fn http_client(timeout: Duration) -> Result<reqwest::Client> {
        reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| Error::InvalidConfig(format!("gce: cannot build an HTTP client: {e}")))
    }

    fn project_path(&self, rest: &str) -> String {
        format!("{}projects/{}/{rest}", self.base, segment(&self.project))
    }

    /// One call: the token, the request, the error mapping. `Ok(None)` is a 404.
    async fn call<T: DeserializeOwned>(
        &self,
        what: &'static str,
        method: Method,
        url: &str,
        query: &[(&str, &str)],
        body: Option<&InstanceResource>,
    ) -> Result<Option<T>> {
        let token = self.auth.token().await?;
        let mut request = self.http.request(method, url).bearer_auth(token);
        if url.ends_with("/wait") {
            request = request.timeout(WAIT_CALL_TIMEOUT);
        }
        if !query.is_empty() {
            request = request.query(query);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| transport_error(what, e))?;
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = response
            .bytes()
            .await
            .map_err(|e| transport_error(what, e))?;
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if status == StatusCode::UNAUTHORIZED {
            self.auth.invalidate().await;
        }
        if !status.is_success() {
            return Err(response_error(what, status, &headers, &bytes));
        }
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::InvalidReply {
                from: BACKEND.into(),
                what: what.into(),
                message: e.to_string(),
            })
    }

    fn not_found(what: &'static str, url: &str) -> Error {
        Error::backend(BACKEND, what, format!("{url}: not found (HTTP 404)"))
    }

    /// `instances.insert` in `zone`: the operation.
    pub async fn insert(&self, zone: &str, instance: &InstanceResource) -> Result<Operation> {
        let what = "insert an instance";
        let url = self.project_path(&format!("zones/{}/instances", segment(zone)));
        self.call(what, Method::POST, &url, &[], Some(instance))
            .await?
            .ok_or_else(|| Self::not_found(what, &url))
    }

    /// `instances.aggregatedList` with `filter`, every page: the instances of every zone.
    pub async fn list_instances(&self, filter: &str) -> Result<Vec<Instance>> {
        self.aggregated(
            "list instances",
            "aggregated/instances",
            filter,
            |page: InstanceAggregatedList| {
                let instances = page.items.into_values().flat_map(|scope| scope.instances);
                (instances.collect(), page.next_page_token)
            },
        )
        .await
    }

    /// `globalOperations.aggregatedList` of the `compute.instances.preempted` operations,
    /// every page: their target instances' URLs.
    pub async fn preempted_targets(&self) -> Result<Vec<String>> {
        let filter = "operationType = \"compute.instances.preempted\"";
        self.aggregated(
            "list preemptions",
            "aggregated/operations",
            filter,
            |page: OperationAggregatedList| {
                let operations = page.items.into_values().flat_map(|scope| scope.operations);
                (
                    operations.map(|o| o.target_link).collect(),
                    page.next_page_token,
                )
            },
        )
        .await
    }

    /// An `aggregatedList` at `path` with `filter`, every page, [`PAGE_SIZE`] a page: `take`
    /// gives a page's items and its next page token.
    async fn aggregated<P: DeserializeOwned, T>(
        &self,
        what: &'static str,
        path: &str,
        filter: &str,
        take: impl Fn(P) -> (Vec<T>, Option<String>),
    ) -> Result<Vec<T>> {
        let url = self.project_path(path);
        let size = PAGE_SIZE.to_string();
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![("filter", filter), ("maxResults", size.as_str())];
            if let Some(token) = &token {
                query.push(("pageToken", token));
            }
            let page: P = self
                .call(what, Method::GET, &url, &query, None)
                .await?
                .ok_or_else(|| Self::not_found(what, &url))?;
            let (found, next) = take(page);
            items.extend(found);
            match next.filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next),
                None => return Ok(items),
            }
        }
    }

    /// `instances.delete`.
    pub async fn delete(&self, zone: &str, name: &str) -> Result<DeleteOutcome> {
        let url = self.project_path(&format!(
            "zones/{}/instances/{}",
            segment(zone),
            segment(name)
        ));
        let operation = self
            .call("delete an instance", Method::DELETE, &url, &[], None)
            .await?;
        Ok(operation.map_or(DeleteOutcome::NotFound, DeleteOutcome::Started))
    }

    /// `zoneOperations.wait` until `operation` is DONE or `timeout` passed: the operation as
    /// last seen (maybe not DONE).
    pub async fn wait(&self, operation: &Operation, timeout: Duration) -> Result<Operation> {
        let what = "wait for an operation";
        let url = self.project_path(&format!(
            "zones/{}/operations/{}/wait",
            segment(operation.zone_name()),
            segment(&operation.name)
        ));
        let deadline = Instant::now() + timeout;
        let mut last = operation.clone();
        while last.status != "DONE" && Instant::now() < deadline {
            last = self
                .call(what, Method::POST, &url, &[], None)
                .await?
                .ok_or_else(|| Self::not_found(what, &url))?;
        }
        Ok(last)
    }
}

/// A path segment, percent-encoded.
fn segment(value: &str) -> String {
    utf8_percent_encode(value, NON_ALPHANUMERIC)
        .to_string()
        .replace("%2D", "-")
        .replace("%5F", "_")
        .replace("%2E", ".")
}
