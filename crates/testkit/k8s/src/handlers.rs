//! The HTTP side of the fake: routing, the Kubernetes `Status` errors, and the pod and
//! secret operations.

use super::Fault;
use super::rules::{self, Cause};
use super::selectors;
use super::world::{Key, World, now, phase};
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Time};
use k8s_openapi::jiff::SignedDuration;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// A Kubernetes `Status` error response.
pub(crate) fn status(
    code: u16,
    reason: &str,
    message: impl Into<String>,
    details: Option<Value>,
) -> Response {
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

pub(crate) fn not_found(kind: &str, name: &str) -> Response {
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

pub(crate) fn json_response<T: serde::Serialize>(code: StatusCode, value: &T) -> Response {
    (code, axum::Json(value)).into_response()
}

/// Every request lands here: log, fault, hang, delay, kubelet, then route.
pub(super) async fn handle(
    State(world): State<Arc<Mutex<World>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
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
        if w.take_hang(&method, &body) {
            None
        } else {
            w.kubelet_tick();
            Some(w.delay)
        }
    };
    // A held request is never answered: the client gives up (its timeout), which drops this
    // future.
    let Some(delay) = delay else {
        return std::future::pending().await;
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let query: HashMap<String, String> = Query::try_from_uri(&uri)
        .map(|Query(q)| q)
        .unwrap_or_default();
    let segments: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    if let Some(response) = serve_other(&world, &method, &segments, &query, &headers, &body) {
        return response;
    }
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

/// Pod watches, discovery and the JSON store ([`crate::objects`]), or `None` for the typed
/// pod and secret routes.
fn serve_other(
    world: &Arc<Mutex<World>>,
    method: &Method,
    segments: &[&str],
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<Response> {
    let header = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let pods = matches!(
        segments,
        ["api", "v1", "pods"] | ["api", "v1", "namespaces", _, "pods"]
    );
    if pods && method == Method::GET && crate::watch::is_watch(query) {
        return Some(watch_pods(world, segments, query));
    }
    let w = world.lock().unwrap_or_else(|p| p.into_inner());
    if method == Method::GET
        && let Some(document) = crate::discovery::document(&w, segments)
    {
        return Some(document);
    }
    let target = crate::objects::target(&w, segments)?;
    drop(w);
    let request = crate::objects::Request {
        method: method.as_str(),
        query,
        body,
        content_type: &header(header::CONTENT_TYPE),
        table: crate::discovery::wants_table(&header(header::ACCEPT)),
    };
    Some(crate::objects::handle(world, target, &request))
}

fn watch_pods(
    world: &Arc<Mutex<World>>,
    segments: &[&str],
    query: &HashMap<String, String>,
) -> Response {
    let labels = match query
        .get("labelSelector")
        .map(|s| selectors::parse_label_selector(s))
        .transpose()
    {
        Ok(labels) => labels.unwrap_or_default(),
        Err(message) => return status(400, "BadRequest", message, None),
    };
    let namespace = match segments {
        [_, _, "namespaces", ns, _] => Some((*ns).to_owned()),
        _ => None,
    };
    let filter = crate::watch::WatchFilter {
        resource: "pods".into(),
        namespace,
        matches: Arc::new(move |pod: &Value| {
            let pod_labels: BTreeMap<String, String> =
                serde_json::from_value(pod["metadata"]["labels"].clone()).unwrap_or_default();
            labels.iter().all(|r| r.matches(&pod_labels))
        }),
    };
    crate::watch::stream(world.clone(), filter, query)
}

fn key(ns: &str, name: &str) -> Key {
    (ns.to_owned(), name.to_owned())
}

fn list_pods(world: &World, ns: Option<&str>, query: &HashMap<String, String>) -> Response {
    let labels = match query
        .get("labelSelector")
        .map(|s| selectors::parse_label_selector(s))
        .transpose()
    {
        Ok(labels) => labels.unwrap_or_default(),
        Err(message) => return status(400, "BadRequest", message, None),
    };
    let fields = match query
        .get("fieldSelector")
        .map(|s| selectors::parse_field_selector(s))
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
        .filter(|(_, pod)| selectors::field_selector_matches(&fields, pod))
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

/// Decodes a JSON request body (or a YAML one that is JSON, as kube sends), or answers 400.
pub(crate) fn decode_value(body: &Bytes) -> Result<Value, Box<Response>> {
    decode(body)
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
    let mut causes = rules::validate_pod(&pod);
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
    world.record_pod("ADDED", &pod);
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
        let pod = world.remove_pod(&key(ns, name)).unwrap_or_default();
        return json_response(StatusCode::OK, &pod);
    }
    let rv = world.next_rv();
    let pod = world.pods.get_mut(&key(ns, name)).expect("checked above");
    if pod.metadata.deletion_timestamp.is_none() {
        let at = crate::world::timestamp_now()
            .checked_add(SignedDuration::from_secs(grace))
            .unwrap_or_else(|_| crate::world::timestamp_now());
        pod.metadata.deletion_timestamp = Some(Time(at));
        pod.metadata.deletion_grace_period_seconds = Some(grace);
        pod.metadata.resource_version = Some(rv);
        let pod = pod.clone();
        world.record_pod("MODIFIED", &pod);
        return json_response(StatusCode::OK, &pod);
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
    let causes = rules::validate_secret(&secret);
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
    let causes = rules::validate_secret(&secret);
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
