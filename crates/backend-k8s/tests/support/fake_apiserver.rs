//! A fake Kubernetes API server for the backend's transport tests.
//!
//! It speaks real HTTP on `127.0.0.1:<free port>` and real Kubernetes JSON (k8s-openapi types,
//! `Status` error objects), so the real `kube::Client` talks to it through hyper, its URL and
//! query encoding and its error decoding. It serves the subset the backend uses:
//!
//! - pods: list (label and field selectors), create (fills uid, resourceVersion,
//!   creationTimestamp, phase `Pending`; 409 AlreadyExists; 422 Invalid for a subset of pod
//!   validation, GPU limit rules included), get, delete (404, uid and resourceVersion
//!   preconditions → 409, graceful deletion of scheduled running pods sets
//!   `deletionTimestamp`);
//! - secrets: create, get, replace, delete;
//! - test hooks playing the kubelet (`set_phase`, `remove_pod`, or an automatic kubelet that
//!   runs pending pods one request later) and injecting faults (any status, throttling with
//!   `Retry-After`, a garbage body, a slow answer).

use super::fake_rules::{self, Cause};
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A fault the server answers with instead of serving a request.
#[derive(Debug, Clone)]
pub enum Fault {
    /// A `Status` error with this code (reason and message as the API server words them).
    Status(u16),
    /// 429 with `Retry-After` and `details.retryAfterSeconds`.
    Throttle { retry_after_seconds: u32 },
    /// 200 with a body that is not JSON.
    Garbage,
}

#[derive(Debug)]
struct InjectedFault {
    fault: Fault,
    method: Option<Method>,
    remaining: usize,
}

type Key = (String, String);

#[derive(Debug, Default)]
struct World {
    pods: BTreeMap<Key, Pod>,
    secrets: BTreeMap<Key, Secret>,
    resource_version: u64,
    next_uid: u64,
    faults: VecDeque<InjectedFault>,
    delay: Option<Duration>,
    requests: Vec<String>,
    auto_kubelet: bool,
    hold: bool,
}

impl World {
    fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn next_uid(&mut self) -> String {
        self.next_uid += 1;
        format!("6f1c2d3e-0000-4000-8000-{:012x}", self.next_uid)
    }

    /// Takes the first fault that applies to `method`.
    fn take_fault(&mut self, method: &Method) -> Option<Fault> {
        let index = self
            .faults
            .iter()
            .position(|f| f.method.as_ref().is_none_or(|m| m == method))?;
        let entry = &mut self.faults[index];
        entry.remaining -= 1;
        let fault = entry.fault.clone();
        if entry.remaining == 0 {
            self.faults.remove(index);
        }
        Some(fault)
    }

    /// What the kubelet and the scheduler did since the last request: pods being deleted are
    /// gone, pending pods are scheduled and running (unless held).
    fn kubelet_tick(&mut self) {
        if !self.auto_kubelet {
            return;
        }
        self.pods
            .retain(|_, pod| pod.metadata.deletion_timestamp.is_none());
        if self.hold {
            return;
        }
        let pending: Vec<Key> = self
            .pods
            .iter()
            .filter(|(_, p)| phase(p) == "Pending")
            .map(|(k, _)| k.clone())
            .collect();
        for key in pending {
            let rv = self.next_rv();
            if let Some(pod) = self.pods.get_mut(&key) {
                apply_phase(pod, "Running", rv);
            }
        }
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// Sets `phase` as the kubelet would report it: scheduled on a node, the worker container
/// running or terminated.
fn apply_phase(pod: &mut Pod, phase: &str, resource_version: String) {
    let spec = pod.spec.get_or_insert_with(Default::default);
    if phase != "Pending" && spec.node_name.is_none() {
        spec.node_name = Some("fake-node-1".to_owned());
    }
    let container = spec
        .containers
        .first()
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()));
    let state = match phase {
        "Running" => json!({"running": {"startedAt": now()}}),
        "Succeeded" => {
            json!({"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now()}})
        }
        "Failed" => json!({"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": now()}}),
        _ => json!({"waiting": {"reason": "ContainerCreating"}}),
    };
    let statuses = container.map(|(name, image)| {
        json!([{"name": name, "image": image, "imageID": "", "ready": phase == "Running",
                "restartCount": 0, "state": state}])
    });
    let status = pod.status.get_or_insert_with(Default::default);
    status.phase = Some(phase.to_owned());
    if let Some(statuses) = statuses {
        status.container_statuses = serde_json::from_value(statuses).ok();
    }
    pod.metadata.resource_version = Some(resource_version);
}

/// The fake API server; cheap to clone, every clone drives the same world.
#[derive(Debug, Clone)]
pub struct FakeApiServer {
    url: String,
    world: Arc<Mutex<World>>,
}

impl FakeApiServer {
    /// Starts a server on a free loopback port (in the current tokio runtime).
    pub async fn start() -> Self {
        let world = Arc::new(Mutex::new(World::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(world.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.expect("fake api server") });
        Self { url, world }
    }

    /// The base URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.world
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every request so far, as `METHOD /path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.world().requests.clone()
    }

    /// The pods of `namespace`, by name.
    pub fn pods(&self, namespace: &str) -> BTreeMap<String, Pod> {
        let world = self.world();
        world
            .pods
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|((_, n), p)| (n.clone(), p.clone()))
            .collect()
    }

    /// Secret `name` of `namespace`.
    pub fn secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        self.world()
            .secrets
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Stores `pod` as is (a pod some other client created), filling uid and resourceVersion.
    pub fn insert_pod(&self, namespace: &str, mut pod: Pod) {
        let mut world = self.world();
        pod.metadata.uid = Some(world.next_uid());
        pod.metadata.resource_version = Some(world.next_rv());
        pod.metadata.namespace = Some(namespace.to_owned());
        let name = pod
            .metadata
            .name
            .clone()
            .expect("a pod to insert needs a name");
        world.pods.insert((namespace.to_owned(), name), pod);
    }

    /// Plays the kubelet: pod `name` reports `phase`.
    pub fn set_phase(&self, namespace: &str, name: &str, phase: &str) {
        let mut world = self.world();
        let rv = world.next_rv();
        let pod = world
            .pods
            .get_mut(&(namespace.to_owned(), name.to_owned()))
            .expect("no such pod");
        apply_phase(pod, phase, rv);
    }

    /// Plays the kubelet confirming a graceful deletion: the pod is gone.
    pub fn remove_pod(&self, namespace: &str, name: &str) {
        self.world()
            .pods
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// Turns the automatic kubelet on or off: before each request, terminating pods vanish and
    /// pending pods start running (unless [`hold`](Self::hold) is on).
    pub fn auto_kubelet(&self, on: bool) {
        self.world().auto_kubelet = on;
    }

    /// Makes the automatic kubelet leave pending pods pending (no node has room).
    pub fn hold(&self, on: bool) {
        self.world().hold = on;
    }

    /// Answers the next `times` requests (of `method`, or any) with `fault`.
    pub fn inject(&self, fault: Fault, method: Option<Method>, times: usize) {
        self.world().faults.push_back(InjectedFault {
            fault,
            method,
            remaining: times,
        });
    }

    /// Delays every answer by `delay` (a slow or hanging API server).
    pub fn set_delay(&self, delay: Option<Duration>) {
        self.world().delay = delay;
    }
}

/// A Kubernetes `Status` error response.
fn status(code: u16, reason: &str, message: impl Into<String>, details: Option<Value>) -> Response {
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message.into(), "reason": reason, "code": code,
    });
    if let Some(details) = details {
        body["details"] = details;
    }
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, axum::Json(body)).into_response()
}

fn not_found(kind: &str, name: &str) -> Response {
    status(
        404,
        "NotFound",
        format!("{kind} \"{name}\" not found"),
        Some(json!({"name": name, "kind": kind})),
    )
}

fn invalid(kind: &str, name: &str, causes: Vec<Cause>) -> Response {
    let list: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let message = format!(
        "{} \"{name}\" is invalid: [{}]",
        kind_title(kind),
        list.join(", ")
    );
    let causes: Vec<Value> = causes
        .iter()
        .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
        .collect();
    status(
        422,
        "Invalid",
        message,
        Some(json!({"name": name, "kind": kind_title(kind), "causes": causes})),
    )
}

fn kind_title(kind: &str) -> &'static str {
    if kind == "pods" { "Pod" } else { "Secret" }
}

fn fault_response(fault: Fault) -> Response {
    match fault {
        Fault::Status(code) => {
            let (reason, message) = match code {
                401 => ("Unauthorized", "Unauthorized".to_owned()),
                403 => (
                    "Forbidden",
                    "pods is forbidden: User \"system:serviceaccount:codalab:wm\" cannot list resource \"pods\" \
                     in API group \"\" in the namespace \"default\""
                        .to_owned(),
                ),
                500 => ("InternalError", "Internal error occurred: etcdserver: request timed out".to_owned()),
                503 => ("ServiceUnavailable", "the server is currently unable to handle the request".to_owned()),
                504 => ("Timeout", "Timeout: request did not complete within the allowed duration".to_owned()),
                _ => ("Unknown", format!("injected failure {code}")),
            };
            status(code, reason, message, None)
        }
        Fault::Throttle {
            retry_after_seconds,
        } => {
            let mut response = status(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                Some(json!({"retryAfterSeconds": retry_after_seconds})),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_seconds));
            response
        }
        Fault::Garbage => (StatusCode::OK, "<html>gateway says hello</html>").into_response(),
    }
}

fn json_response<T: serde::Serialize>(code: StatusCode, value: &T) -> Response {
    (code, axum::Json(value)).into_response()
}

/// Every request lands here: log, fault, delay, kubelet, then route.
async fn handle(
    State(world): State<Arc<Mutex<World>>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let delay = {
        let mut w = world.lock().unwrap_or_else(|p| p.into_inner());
        w.requests.push(format!(
            "{method} {}",
            uri.path_and_query().map_or("", |p| p.as_str())
        ));
        if let Some(fault) = w.take_fault(&method) {
            return fault_response(fault);
        }
        w.kubelet_tick();
        w.delay
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let query: HashMap<String, String> = Query::try_from_uri(&uri)
        .map(|Query(q)| q)
        .unwrap_or_default();
    let segments: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let mut w = world.lock().unwrap_or_else(|p| p.into_inner());
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["version"]) => json_response(
            StatusCode::OK,
            &json!({"major": "1", "minor": "37", "gitVersion": "v1.37.0-fake", "platform": "linux/amd64"}),
        ),
        ("GET", ["api", "v1", "pods"]) => list_pods(&w, None, &query),
        ("GET", ["api", "v1", "namespaces", ns, "pods"]) => list_pods(&w, Some(ns), &query),
        ("POST", ["api", "v1", "namespaces", ns, "pods"]) => create_pod(&mut w, ns, &body),
        ("GET", ["api", "v1", "namespaces", ns, "pods", name]) => {
            match w.pods.get(&key(ns, name)) {
                Some(pod) => json_response(StatusCode::OK, pod),
                None => not_found("pods", name),
            }
        }
        ("DELETE", ["api", "v1", "namespaces", ns, "pods", name]) => {
            delete_pod(&mut w, ns, name, &body)
        }
        ("POST", ["api", "v1", "namespaces", ns, "secrets"]) => create_secret(&mut w, ns, &body),
        ("GET", ["api", "v1", "namespaces", ns, "secrets", name]) => {
            match w.secrets.get(&key(ns, name)) {
                Some(secret) => json_response(StatusCode::OK, secret),
                None => not_found("secrets", name),
            }
        }
        ("PUT", ["api", "v1", "namespaces", ns, "secrets", name]) => {
            replace_secret(&mut w, ns, name, &body)
        }
        ("DELETE", ["api", "v1", "namespaces", ns, "secrets", name]) => {
            match w.secrets.remove(&key(ns, name)) {
                Some(secret) => json_response(StatusCode::OK, &secret),
                None => not_found("secrets", name),
            }
        }
        _ => status(
            404,
            "NotFound",
            "the server could not find the requested resource",
            None,
        ),
    }
}

fn key(ns: &str, name: &str) -> Key {
    (ns.to_owned(), name.to_owned())
}

fn list_pods(world: &World, ns: Option<&str>, query: &HashMap<String, String>) -> Response {
    let labels = match query
        .get("labelSelector")
        .map(|s| fake_rules::parse_label_selector(s))
        .transpose()
    {
        Ok(labels) => labels.unwrap_or_default(),
        Err(message) => return status(400, "BadRequest", message, None),
    };
    let fields = match query
        .get("fieldSelector")
        .map(|s| fake_rules::parse_field_selector(s))
        .transpose()
    {
        Ok(fields) => fields.unwrap_or_default(),
        Err(message) => return status(400, "BadRequest", message, None),
    };
    let empty = BTreeMap::new();
    let items: Vec<Value> = world
        .pods
        .iter()
        .filter(|((pod_ns, _), _)| ns.is_none_or(|ns| ns == pod_ns))
        .filter(|(_, pod)| {
            labels
                .iter()
                .all(|r| r.matches(pod.metadata.labels.as_ref().unwrap_or(&empty)))
        })
        .filter(|(_, pod)| fake_rules::field_selector_matches(&fields, pod))
        .map(|(_, pod)| {
            // On the wire, list items carry no kind and apiVersion.
            let mut item = serde_json::to_value(pod).unwrap_or_default();
            if let Some(object) = item.as_object_mut() {
                object.remove("kind");
                object.remove("apiVersion");
            }
            item
        })
        .collect();
    let body = json!({
        "kind": "PodList", "apiVersion": "v1",
        "metadata": {"resourceVersion": world.resource_version.to_string()},
        "items": items,
    });
    json_response(StatusCode::OK, &body)
}

/// Decodes a request body as the API server would, or answers 400.
fn decode<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(status(
            400,
            "BadRequest",
            format!("the body of the request was in an unknown format: {e}"),
            None,
        ))
    })
}

/// 400 when the object names another namespace than the URL.
fn check_namespace(object_ns: Option<&str>, ns: &str) -> Result<(), Box<Response>> {
    match object_ns {
        Some(other) if other != ns => Err(Box::new(status(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
            None,
        ))),
        _ => Ok(()),
    }
}

fn create_pod(world: &mut World, ns: &str, body: &Bytes) -> Response {
    let mut pod: Pod = match decode(body) {
        Ok(pod) => pod,
        Err(response) => return *response,
    };
    if let Err(response) = check_namespace(pod.metadata.namespace.as_deref(), ns) {
        return *response;
    }
    if pod.metadata.name.as_deref().is_none_or(str::is_empty)
        && let Some(prefix) = pod.metadata.generate_name.clone()
    {
        pod.metadata.name = Some(format!("{prefix}{:05x}", world.next_uid + 1));
    }
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut causes = fake_rules::validate_pod(&pod);
    if name.is_empty() {
        causes.insert(
            0,
            Cause {
                field: "metadata.name".into(),
                reason: "FieldValueRequired",
                message: "Required value: name or generateName is required".into(),
            },
        );
    }
    if !causes.is_empty() {
        return invalid("pods", &name, causes);
    }
    if world.pods.contains_key(&key(ns, &name)) {
        return status(
            409,
            "AlreadyExists",
            format!("pods \"{name}\" already exists"),
            Some(json!({"name": name, "kind": "pods"})),
        );
    }
    pod.metadata.namespace = Some(ns.to_owned());
    pod.metadata.uid = Some(world.next_uid());
    pod.metadata.resource_version = Some(world.next_rv());
    pod.metadata.creation_timestamp = Some(now());
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.restart_policy
        .get_or_insert_with(|| "Always".to_owned());
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".to_owned());
    spec.termination_grace_period_seconds.get_or_insert(30);
    pod.status = serde_json::from_value(json!({"phase": "Pending", "qosClass": "Burstable"})).ok();
    world.pods.insert(key(ns, &name), pod.clone());
    json_response(StatusCode::CREATED, &pod)
}

fn delete_pod(world: &mut World, ns: &str, name: &str, body: &Bytes) -> Response {
    let options: DeleteOptions = if body.is_empty() {
        DeleteOptions::default()
    } else {
        match decode(body) {
            Ok(options) => options,
            Err(response) => return *response,
        }
    };
    let Some(pod) = world.pods.get(&key(ns, name)) else {
        return not_found("pods", name);
    };
    let preconditions = options.preconditions.unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if let Some(wanted) = preconditions.uid.filter(|w| *w != uid) {
        return status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on pods \"{name}\": Precondition failed: UID in precondition: \
                 {wanted}, UID in object meta: {uid}"
            ),
            Some(json!({"name": name, "kind": "pods"})),
        );
    }
    let rv = pod.metadata.resource_version.clone().unwrap_or_default();
    if let Some(wanted) = preconditions.resource_version.filter(|w| *w != rv) {
        return status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on pods \"{name}\": Precondition failed: ResourceVersion in \
                 precondition: {wanted}, ResourceVersion in object meta: {rv}"
            ),
            Some(json!({"name": name, "kind": "pods"})),
        );
    }
    // As the pod strategy: unscheduled or finished pods go at once, others gracefully.
    let scheduled = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    let finished = matches!(phase(pod), "Succeeded" | "Failed");
    let grace = options
        .grace_period_seconds
        .or(pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30);
    if !scheduled || finished || grace == 0 {
        let pod = world.pods.remove(&key(ns, name)).unwrap_or_default();
        return json_response(StatusCode::OK, &pod);
    }
    let rv = world.next_rv();
    let pod = world.pods.get_mut(&key(ns, name)).expect("checked above");
    if pod.metadata.deletion_timestamp.is_none() {
        let at = Timestamp::now()
            .checked_add(SignedDuration::from_secs(grace))
            .unwrap_or_else(|_| Timestamp::now());
        pod.metadata.deletion_timestamp = Some(Time(at));
        pod.metadata.deletion_grace_period_seconds = Some(grace);
        pod.metadata.resource_version = Some(rv);
    }
    json_response(StatusCode::OK, &*pod)
}

/// Merges `stringData` into `data`, as the API server does.
fn fold_string_data(secret: &mut Secret) {
    if let Some(strings) = secret.string_data.take() {
        let data = secret.data.get_or_insert_with(Default::default);
        for (k, v) in strings {
            data.insert(k, k8s_openapi::ByteString(v.into_bytes()));
        }
    }
}

fn create_secret(world: &mut World, ns: &str, body: &Bytes) -> Response {
    let mut secret: Secret = match decode(body) {
        Ok(secret) => secret,
        Err(response) => return *response,
    };
    if let Err(response) = check_namespace(secret.metadata.namespace.as_deref(), ns) {
        return *response;
    }
    let name = secret.metadata.name.clone().unwrap_or_default();
    let causes = fake_rules::validate_secret(&secret);
    if !causes.is_empty() {
        return invalid("secrets", &name, causes);
    }
    if world.secrets.contains_key(&key(ns, &name)) {
        return status(
            409,
            "AlreadyExists",
            format!("secrets \"{name}\" already exists"),
            Some(json!({"name": name, "kind": "secrets"})),
        );
    }
    fold_string_data(&mut secret);
    secret.metadata.namespace = Some(ns.to_owned());
    secret.metadata.uid = Some(world.next_uid());
    secret.metadata.resource_version = Some(world.next_rv());
    secret.metadata.creation_timestamp = Some(now());
    world.secrets.insert(key(ns, &name), secret.clone());
    json_response(StatusCode::CREATED, &secret)
}

fn replace_secret(world: &mut World, ns: &str, name: &str, body: &Bytes) -> Response {
    let mut secret: Secret = match decode(body) {
        Ok(secret) => secret,
        Err(response) => return *response,
    };
    if let Err(response) = check_namespace(secret.metadata.namespace.as_deref(), ns) {
        return *response;
    }
    if secret.metadata.name.as_deref() != Some(name) {
        return status(
            400,
            "BadRequest",
            "the name of the object does not match the name on the URL",
            None,
        );
    }
    let causes = fake_rules::validate_secret(&secret);
    if !causes.is_empty() {
        return invalid("secrets", name, causes);
    }
    let rv = world.next_rv();
    let Some(stored) = world.secrets.get_mut(&key(ns, name)) else {
        return not_found("secrets", name);
    };
    if let Some(wanted) = secret.metadata.resource_version.as_ref()
        && Some(wanted) != stored.metadata.resource_version.as_ref()
    {
        return status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on secrets \"{name}\": the object has been modified; please apply \
                 your changes to the latest version and try again"
            ),
            Some(json!({"name": name, "kind": "secrets"})),
        );
    }
    fold_string_data(&mut secret);
    secret.metadata.namespace = Some(ns.to_owned());
    secret.metadata.uid = stored.metadata.uid.clone();
    secret.metadata.creation_timestamp = stored.metadata.creation_timestamp.clone();
    secret.metadata.resource_version = Some(rv);
    *stored = secret.clone();
    json_response(StatusCode::OK, &secret)
}
