//! The HTTP side of the fake: authentication, faults, the discovery document's checks, then
//! the calls a manager makes.

use crate::Shared;
use crate::discovery::{Discovery, Method};
use crate::oauth;
use crate::state::{Effect, FakeInstance, FakeState, RecordedRequest};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub(crate) async fn handle(State(shared): State<Shared>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 4 << 20)
        .await
        .unwrap_or_default();
    let mut state = shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("").to_owned();
    state.advance();
    let (status, answer, method_id, rejection) = if parts.method == "POST" && path == "/token" {
        let (status, answer) = oauth::token(&mut state, &body);
        (status, answer, None, None)
    } else if parts.method == "GET" && path == oauth::METADATA_TOKEN_PATH {
        let (status, answer) = oauth::metadata_token(&mut state, &parts.headers);
        (status, answer, None, None)
    } else {
        let call = Call {
            method: parts.method.as_str(),
            path: &path,
            query: &query,
            headers: &parts.headers,
            body: &body,
        };
        api(&mut state, &call)
    };
    state.requests.push(RecordedRequest {
        method: parts.method.to_string(),
        path,
        query,
        method_id,
        status: status.as_u16(),
        rejection,
    });
    (status, axum::Json(answer)).into_response()
}

struct Call<'a> {
    method: &'a str,
    path: &'a str,
    query: &'a str,
    headers: &'a HeaderMap,
    body: &'a [u8],
}

type Answer = (StatusCode, Value, Option<String>, Option<String>);

/// The service's error body.
pub(crate) fn error(status: u16, reason: &str, message: &str) -> (StatusCode, Value) {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {
        "code": status,
        "message": message,
        "errors": [{"message": message, "domain": "global", "reason": reason}],
    }});
    (code, body)
}

fn api(state: &mut FakeState, call: &Call<'_>) -> Answer {
    let token = call
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if !token.is_some_and(|t| state.tokens.contains(t)) {
        let (status, body) = error(
            401,
            "authError",
            "Request had invalid authentication credentials.",
        );
        return (status, body, None, None);
    }
    let doc = Discovery::compute();
    let checked = doc
        .route(call.method, call.path)
        .and_then(|(method, params)| {
            let query: Vec<(String, String)> = form_urlencoded::parse(call.query.as_bytes())
                .into_owned()
                .collect();
            doc.check_query(method, &params, &query)?;
            let body = parse_body(call.body)?;
            doc.check_body(method, body.as_ref())?;
            Ok((method, params, query, body))
        });
    let (method, params, query, body) = match checked {
        Ok(checked) => checked,
        Err(rejection) => {
            let reason = if rejection.status == 404 {
                "notFound"
            } else {
                "invalid"
            };
            let (status, body) = error(rejection.status, reason, &rejection.message);
            return (status, body, None, Some(rejection.message));
        }
    };
    let id = Some(method.id.clone());
    if let Some(fault) = state.take_fault(&method.id) {
        let (status, body) = error(fault.status, &fault.reason, "injected fault");
        return (status, body, id, None);
    }
    if params.get("project") != Some(&state.project) {
        let (status, body) = error(404, "notFound", "The resource 'projects/…' was not found");
        return (status, body, id, None);
    }
    let request = ApiRequest {
        params,
        query,
        body: body.unwrap_or(Value::Null),
    };
    let (status, answer) = dispatch(state, method, &request);
    (status, answer, id, None)
}

fn parse_body(body: &[u8]) -> Result<Option<Value>, crate::discovery::Rejection> {
    if body.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| crate::discovery::Rejection {
            status: 400,
            message: format!("Invalid JSON payload received. {e}"),
        })
}

struct ApiRequest {
    params: BTreeMap<String, String>,
    query: Vec<(String, String)>,
    body: Value,
}

impl ApiRequest {
    fn param(&self, name: &str) -> &str {
        self.params.get(name).map_or("", String::as_str)
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn dispatch(state: &mut FakeState, method: &Method, request: &ApiRequest) -> (StatusCode, Value) {
    match method.id.as_str() {
        "compute.instances.insert" => insert(state, request),
        "compute.instances.list" | "compute.instances.aggregatedList" => {
            list_instances(state, request, method.id.ends_with("aggregatedList"))
        }
        "compute.instances.get" => match state.find(request.param("instance")) {
            Some(key) if key.0 == request.param("zone") => {
                (StatusCode::OK, state.instance_json(&state.instances[&key]))
            }
            _ => not_found(request.param("instance")),
        },
        "compute.instances.delete" => delete(state, request),
        "compute.zoneOperations.get" | "compute.zoneOperations.wait" => {
            match state.operations.get(request.param("operation")) {
                Some(op) if op.zone == request.param("zone") => {
                    (StatusCode::OK, state.operation_json(op))
                }
                _ => not_found(request.param("operation")),
            }
        }
        "compute.globalOperations.aggregatedList" => list_operations(state, request),
        other => error(
            501,
            "notImplemented",
            &format!("the fake does not serve {other}"),
        ),
    }
}

fn not_found(name: &str) -> (StatusCode, Value) {
    error(
        404,
        "notFound",
        &format!("The resource '{name}' was not found"),
    )
}

fn insert(state: &mut FakeState, request: &ApiRequest) -> (StatusCode, Value) {
    let zone = request.param("zone").to_owned();
    let name = request.body["name"].as_str().unwrap_or_default().to_owned();
    if state.find(&name).is_some() {
        return error(
            409,
            "alreadyExists",
            &format!(
                "The resource 'projects/{}/zones/{zone}/instances/{name}' already exists",
                state.project
            ),
        );
    }
    let link = state.instance_link(&zone, &name);
    if state.exhausted.contains(&zone) {
        let mut op = state.operation(&zone, "insert", link, Effect::None);
        op.error = Some((
            "ZONE_RESOURCE_POOL_EXHAUSTED".into(),
            format!(
                "The zone 'projects/{}/zones/{zone}' does not have enough resources available to fulfill the request.",
                state.project
            ),
        ));
        state.operations.insert(op.name.clone(), op.clone());
        return (StatusCode::OK, state.operation_json(&op));
    }
    let labels = request.body["labels"]
        .as_object()
        .map(|l| {
            l.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let instance = FakeInstance {
        zone: zone.clone(),
        name: name.clone(),
        id: state.next_id().to_string(),
        status: "PROVISIONING".into(),
        labels,
        body: request.body.clone(),
        created: "2026-11-23T10:00:00.000-08:00".into(),
    };
    state
        .instances
        .insert((zone.clone(), name.clone()), instance);
    let op = state.operation(&zone, "insert", link, Effect::Run(name));
    (StatusCode::OK, state.operation_json(&op))
}

fn delete(state: &mut FakeState, request: &ApiRequest) -> (StatusCode, Value) {
    let (zone, name) = (request.param("zone"), request.param("instance"));
    let key = (zone.to_owned(), name.to_owned());
    let Some(instance) = state.instances.get_mut(&key) else {
        return not_found(name);
    };
    instance.status = "STOPPING".into();
    let link = state.instance_link(zone, name);
    let op = state.operation(zone, "delete", link, Effect::Remove(name.to_owned()));
    (StatusCode::OK, state.operation_json(&op))
}

/// A filter of `field = "value"` terms joined by `AND` (or juxtaposed), each maybe in
/// parentheses: the form a manager sends. Anything else is refused, so a test notices.
fn parse_filter(filter: &str) -> Result<Vec<(String, String)>, String> {
    let mut terms = Vec::new();
    let mut rest = filter.trim();
    while !rest.is_empty() {
        rest = rest.strip_prefix("AND").unwrap_or(rest).trim_start();
        let inner_end = if rest.starts_with('(') {
            rest.find(')').ok_or("unbalanced parenthesis")?
        } else {
            rest.find(" AND ").unwrap_or(rest.len())
        };
        let term = rest[..inner_end].trim_start_matches('(');
        let (field, value) = term
            .split_once('=')
            .ok_or_else(|| format!("the fake's filter takes `field = \"value\"`, not `{term}`"))?;
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .ok_or_else(|| format!("the fake's filter wants a quoted value in `{term}`"))?;
        terms.push((field.trim().to_owned(), value.to_owned()));
        rest = rest[inner_end..].trim_start_matches(')').trim_start();
    }
    Ok(terms)
}

fn matches(value: &Value, terms: &[(String, String)]) -> bool {
    terms.iter().all(|(field, wanted)| {
        let found = field
            .split('.')
            .try_fold(value, |v, part| v.get(part))
            .and_then(Value::as_str);
        found == Some(wanted.as_str())
    })
}

/// One page of `items` and the token of the next.
fn page(
    request: &ApiRequest,
    page_size: usize,
    items: Vec<Value>,
) -> Result<(Vec<Value>, Option<String>), (StatusCode, Value)> {
    let start: usize = match request.query("pageToken") {
        None => 0,
        Some(token) => token
            .strip_prefix("page-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| error(400, "invalid", "Invalid value for field 'pageToken'"))?,
    };
    let size = request
        .query("maxResults")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(500)
        .clamp(1, 500)
        .min(page_size);
    let end = (start + size).min(items.len());
    let next = (end < items.len()).then(|| format!("page-{end}"));
    Ok((items.get(start..end).unwrap_or_default().to_vec(), next))
}

fn filtered(request: &ApiRequest, items: Vec<Value>) -> Result<Vec<Value>, (StatusCode, Value)> {
    let terms = match request.query("filter") {
        Some(filter) => parse_filter(filter).map_err(|e| error(400, "invalid", &e))?,
        None => Vec::new(),
    };
    Ok(items.into_iter().filter(|v| matches(v, &terms)).collect())
}

fn list_instances(
    state: &FakeState,
    request: &ApiRequest,
    aggregated: bool,
) -> (StatusCode, Value) {
    let zone = request.param("zone");
    let all: Vec<Value> = state
        .instances
        .values()
        .filter(|i| aggregated || i.zone == zone)
        .map(|i| state.instance_json(i))
        .collect();
    let (items, next) =
        match filtered(request, all).and_then(|all| page(request, state.page_size, all)) {
            Ok(page) => page,
            Err(error) => return error,
        };
    let mut answer = if aggregated {
        let scopes = by_zone(items, "instances");
        json!({"kind": "compute#instanceAggregatedList", "items": scopes})
    } else {
        json!({"kind": "compute#instanceList", "items": items})
    };
    if let Some(next) = next {
        answer["nextPageToken"] = json!(next);
    }
    (StatusCode::OK, answer)
}

fn list_operations(state: &FakeState, request: &ApiRequest) -> (StatusCode, Value) {
    let all: Vec<Value> = state
        .operations
        .values()
        .map(|o| state.operation_json(o))
        .collect();
    let (items, next) =
        match filtered(request, all).and_then(|all| page(request, state.page_size, all)) {
            Ok(page) => page,
            Err(error) => return error,
        };
    let scopes = by_zone(items, "operations");
    let mut answer = json!({"kind": "compute#operationAggregatedList", "items": scopes});
    if let Some(next) = next {
        answer["nextPageToken"] = json!(next);
    }
    (StatusCode::OK, answer)
}

/// An aggregated list's `items`: `zones/<zone>` → `{<field>: [...]}`.
fn by_zone(items: Vec<Value>, field: &str) -> serde_json::Map<String, Value> {
    let mut scopes = serde_json::Map::new();
    for item in items {
        let zone = item["zone"].as_str().unwrap_or("");
        let zone = zone.rsplit('/').next().unwrap_or("").to_owned();
        let scope = scopes
            .entry(format!("zones/{zone}"))
            .or_insert_with(|| json!({field: []}));
        if let Some(list) = scope[field].as_array_mut() {
            list.push(item);
        }
    }
    scopes
}
