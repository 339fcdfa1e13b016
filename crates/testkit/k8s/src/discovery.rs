//! What `kubectl` reads before it acts: API discovery (`/api`, `/apis`, the resource lists of
//! each group version, the CRDs' groups included), and the server-side `Table` `kubectl get`
//! prints (a CRD's `additionalPrinterColumns`). There is no OpenAPI document (`/openapi/*` is
//! 404), so kubectl runs with `--validate=false`.

use crate::handlers::json_response;
use crate::objects::ResourceType;
use crate::world::World;
use axum::http::StatusCode;
use axum::response::Response;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// The discovery document at `segments`, if it is one.
pub(crate) fn document(world: &World, segments: &[&str]) -> Option<Response> {
    let types = world.resource_types();
    let body = match segments {
        ["api"] => json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
        ["apis"] => groups(&types),
        ["api", "v1"] => resources("v1", &core_types(&types)),
        ["apis", group, version] => {
            let of_group: Vec<ResourceType> = types
                .into_iter()
                .filter(|t| t.group == *group && t.version == *version)
                .collect();
            if of_group.is_empty() {
                return None;
            }
            resources(&format!("{group}/{version}"), &of_group)
        }
        _ => return None,
    };
    Some(json_response(StatusCode::OK, &body))
}

/// Pods and secrets (served by the typed handlers) and the core types of the JSON store.
fn core_types(types: &[ResourceType]) -> Vec<ResourceType> {
    let typed = |plural: &str, kind: &str| ResourceType {
        group: String::new(),
        version: "v1".into(),
        plural: plural.into(),
        kind: kind.into(),
        namespaced: true,
        status: false,
        custom: false,
        short_names: if plural == "pods" {
            vec!["po".into()]
        } else {
            Vec::new()
        },
        columns: Vec::new(),
    };
    let mut core = vec![typed("pods", "Pod"), typed("secrets", "Secret")];
    core.extend(types.iter().filter(|t| t.group.is_empty()).cloned());
    core
}

fn groups(types: &[ResourceType]) -> Value {
    let mut names: Vec<(&str, &str)> = types
        .iter()
        .filter(|t| !t.group.is_empty())
        .map(|t| (t.group.as_str(), t.version.as_str()))
        .collect();
    names.sort();
    names.dedup();
    let groups: Vec<Value> = names
        .iter()
        .map(|(group, version)| {
            let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
            json!({"name": group, "versions": [gv], "preferredVersion": gv})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn resources(group_version: &str, types: &[ResourceType]) -> Value {
    let verbs = [
        "create", "delete", "get", "list", "patch", "update", "watch",
    ];
    let mut list = Vec::new();
    for t in types {
        let singular = t.kind.to_lowercase();
        list.push(
            json!({"name": t.plural, "singularName": singular, "namespaced": t.namespaced,
            "kind": t.kind, "verbs": verbs, "shortNames": t.short_names}),
        );
        if t.status {
            list.push(
                json!({"name": format!("{}/status", t.plural), "singularName": "",
                "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": list})
}

/// Whether the request asks for a `Table` (kubectl's `Accept: application/json;as=Table;…`).
pub(crate) fn wants_table(accept: &str) -> bool {
    accept.contains("as=Table")
}

/// `objects` as the `Table` kubectl prints: Name, then the printer columns (or Age).
pub(crate) fn table(rt: &ResourceType, objects: &[Value], world: &World) -> Response {
    let age = json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"});
    let columns: Vec<Value> = if rt.columns.is_empty() {
        vec![age]
    } else {
        rt.columns.clone()
    };
    let mut definitions = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace.", "priority": 0})];
    definitions.extend(columns.iter().map(|c| {
        json!({"name": c["name"], "type": c["type"],
        "format": c.get("format").cloned().unwrap_or(json!("")), "description": "",
        "priority": c.get("priority").cloned().unwrap_or(json!(0))})
    }));
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let mut cells = vec![object["metadata"]["name"].clone()];
            cells.extend(columns.iter().map(|c| cell(object, c)));
            let metadata = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": object["metadata"]});
            json!({"cells": cells, "object": metadata})
        })
        .collect();
    let body = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": world.resource_version.to_string()},
        "columnDefinitions": definitions, "rows": rows});
    json_response(StatusCode::OK, &body)
}

/// One cell: the value at the column's simple JSON path (`.spec.max`); dates as an age.
fn cell(object: &Value, column: &Value) -> Value {
    let path = column["jsonPath"].as_str().unwrap_or_default();
    let pointer = path.replace('.', "/");
    let value = object.pointer(&pointer).cloned().unwrap_or(Value::Null);
    if column["type"] == "date" {
        return match value.as_str().and_then(|t| t.parse::<Timestamp>().ok()) {
            Some(at) => json!(age(at)),
            None => json!("<unknown>"),
        };
    }
    value
}

fn age(at: Timestamp) -> String {
    let seconds = crate::world::timestamp_now()
        .duration_since(at)
        .as_secs()
        .max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{}h", s / 3600),
    }
}
