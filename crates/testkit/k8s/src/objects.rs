//! Objects other than pods and secrets, kept as JSON: CustomResourceDefinitions and the custom
//! resources they define (served as soon as the CRD is created), `coordination.k8s.io/v1`
//! Leases and Events (`events.k8s.io/v1` and core `v1`). What the API server does for them:
//!
//! - create (uid, resourceVersion, creationTimestamp, `metadata.generation` 1, `generateName`;
//!   409 AlreadyExists; with the status subresource the status sent is dropped);
//! - update (PUT) and patch (merge patch, JSON patch; server-side apply is taken as a merge
//!   patch) of the object and of its `/status`: a `metadata.resourceVersion` that is not the
//!   stored one is a 409 Conflict (and a custom resource's PUT without one a 422, as the CRD
//!   strategy allows no unconditional update); with the status subresource the main endpoint
//!   ignores the status and `/status` changes only the status; `metadata.generation` goes up
//!   when anything but metadata and status changes; a write that changes nothing keeps the resourceVersion;
//! - delete: an object with finalizers gets a `deletionTimestamp` and goes when its last
//!   finalizer is removed; others go at once;
//! - list and watch (label selectors, `metadata.name`/`metadata.namespace` field selectors),
//!   as a `Table` when kubectl asks for one ([`crate::discovery`]).

use crate::handlers::{decode_value, json_response, not_found, status};
use crate::watch::{self, WatchFilter};
use crate::world::{World, now};
use crate::{patch, selectors};
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// A kind of object the fake serves from its JSON store.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceType {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) plural: String,
    pub(crate) kind: String,
    pub(crate) namespaced: bool,
    /// Whether `/status` is a subresource.
    pub(crate) status: bool,
    pub(crate) short_names: Vec<String>,
    /// The CRD's `additionalPrinterColumns`.
    pub(crate) columns: Vec<Value>,
    /// Defined by a CRD: an update (PUT) must name the resourceVersion it replaces.
    pub(crate) custom: bool,
}

impl ResourceType {
    fn builtin(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status: false,
            short_names: Vec::new(),
            columns: Vec::new(),
            custom: false,
        }
    }

    /// The key of the resource in the store and the change log (`group/plural`).
    pub(crate) fn id(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The resources built in besides pods and secrets.
pub(crate) fn builtins() -> Vec<ResourceType> {
    vec![
        ResourceType::builtin("coordination.k8s.io", "v1", "leases", "Lease", true),
        ResourceType::builtin("events.k8s.io", "v1", "events", "Event", true),
        ResourceType::builtin("", "v1", "events", "Event", true),
        ResourceType::builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        ),
    ]
}

const CRDS: &str = "apiextensions.k8s.io/customresourcedefinitions";

impl World {
    /// Every resource type served now: the built-ins and one per version of each stored CRD.
    pub(crate) fn resource_types(&self) -> Vec<ResourceType> {
        let mut types = builtins();
        for ((resource, _, _), crd) in &self.objects {
            if resource == CRDS {
                types.extend(crd_types(crd));
            }
        }
        types
    }

    /// `(apiVersion, kind)` of a resource id (for bookmarks).
    pub(crate) fn kind_of(&self, id: &str) -> (String, String) {
        if id == "pods" {
            return ("v1".into(), "Pod".into());
        }
        self.resource_types()
            .into_iter()
            .find(|t| t.id() == id)
            .map_or_else(Default::default, |t| (t.api_version(), t.kind))
    }
}

/// The types a CRD defines (one per served version).
fn crd_types(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .map(|v| ResourceType {
            group: text(&spec["group"]),
            version: text(&v["name"]),
            plural: text(&names["plural"]),
            kind: text(&names["kind"]),
            namespaced: spec["scope"] == "Namespaced",
            status: v["subresources"]["status"].is_object(),
            short_names: names["shortNames"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect(),
            columns: v["additionalPrinterColumns"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            custom: true,
        })
        .collect()
}

/// A request for a stored object: its type, namespace, name and subresource.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) rt: ResourceType,
    pub(crate) namespace: String,
    pub(crate) name: Option<String>,
    pub(crate) status: bool,
}

/// The target of a path under `/apis/<group>/<version>/…` or `/api/v1/…events`, when the fake
/// serves that resource.
pub(crate) fn target(world: &World, segments: &[&str]) -> Option<Target> {
    let (group, version, rest) = match segments {
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => ((*ns).to_owned(), rest),
        _ => (String::new(), rest),
    };
    let (plural, name, status) = match rest {
        [plural] => (*plural, None, false),
        [plural, name] => (*plural, Some((*name).to_owned()), false),
        [plural, name, "status"] => (*plural, Some((*name).to_owned()), true),
        _ => return None,
    };
    let rt = world
        .resource_types()
        .into_iter()
        .find(|t| t.group == group && t.version == version && t.plural == plural)?;
    if status && !rt.status {
        return None;
    }
    Some(Target {
        rt,
        namespace,
        name,
        status,
    })
}

/// A request the JSON store serves.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub(crate) method: &'a str,
    pub(crate) query: &'a HashMap<String, String>,
    pub(crate) body: &'a Bytes,
    pub(crate) content_type: &'a str,
    pub(crate) table: bool,
}

/// Serves `request` on `target`.
pub(crate) fn handle(world: &Arc<Mutex<World>>, target: Target, request: &Request<'_>) -> Response {
    if request.method == "GET" && target.name.is_none() && watch::is_watch(request.query) {
        return match list_filter(&target, request.query) {
            Ok(filter) => watch::stream(world.clone(), filter, request.query),
            Err(response) => *response,
        };
    }
    let mut w = world.lock().unwrap_or_else(|p| p.into_inner());
    let name = target.name.clone().unwrap_or_default();
    match (request.method, target.name.is_some()) {
        ("GET", false) => list(&w, &target, request),
        ("GET", true) => match w.objects.get(&key(&target, &name)) {
            Some(object) if request.table => {
                crate::discovery::table(&target.rt, std::slice::from_ref(object), &w)
            }
            Some(object) => json_response(StatusCode::OK, object),
            None => not_found(&target.rt.plural, &name),
        },
        ("POST", false) => create(&mut w, &target, request.body),
        ("PUT", true) => update(&mut w, &target, &name, request.body),
        ("PATCH", true) => patch_object(&mut w, &target, &name, request),
        ("DELETE", true) => delete(&mut w, &target, &name),
        _ => status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            None,
        ),
    }
}

fn key(target: &Target, name: &str) -> (String, String, String) {
    (target.rt.id(), target.namespace.clone(), name.to_owned())
}

/// The label and field selectors of a list or watch, as a test of an object.
fn list_filter(
    target: &Target,
    query: &HashMap<String, String>,
) -> Result<WatchFilter, Box<Response>> {
    let bad = |message: String| Box::new(status(400, "BadRequest", message, None));
    let labels = match query.get("labelSelector") {
        Some(s) => selectors::parse_label_selector(s).map_err(bad)?,
        None => Vec::new(),
    };
    let mut fields = Vec::new();
    for term in query
        .get("fieldSelector")
        .map_or("", |s| s)
        .split(',')
        .filter(|t| !t.is_empty())
    {
        let (field, value) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .ok_or_else(|| bad(format!("invalid selector: '{term}'")))?;
        if !crate::events::field_allowed(&target.rt, field) {
            return Err(bad(format!("field label not supported: {field}")));
        }
        fields.push((format!("/{}", field.replace('.', "/")), value.to_owned()));
    }
    Ok(WatchFilter {
        resource: target.rt.id(),
        namespace: (!target.namespace.is_empty()).then(|| target.namespace.clone()),
        matches: Arc::new(move |object: &Value| {
            let object_labels: BTreeMap<String, String> =
                serde_json::from_value(object["metadata"]["labels"].clone()).unwrap_or_default();
            labels.iter().all(|r| r.matches(&object_labels))
                && fields.iter().all(|(pointer, v)| {
                    object.pointer(pointer).and_then(Value::as_str) == Some(v.as_str())
                })
        }),
    })
}

fn list(world: &World, target: &Target, request: &Request<'_>) -> Response {
    let filter = match list_filter(target, request.query) {
        Ok(filter) => filter,
        Err(response) => return *response,
    };
    let id = target.rt.id();
    let core_events = crate::events::is_core_events(&target.rt);
    let items: Vec<Value> = world
        .objects
        .iter()
        .filter(|((r, ns, _), _)| {
            (*r == id || (core_events && r == crate::events::NEW_EVENTS))
                && (target.namespace.is_empty() || *ns == target.namespace)
        })
        .map(
            |((r, _, _), object)| match r == crate::events::NEW_EVENTS && core_events {
                true => crate::events::as_core_event(object),
                false => object.clone(),
            },
        )
        .filter(|object| (filter.matches)(object))
        .collect();
    if request.table {
        return crate::discovery::table(&target.rt, &items, world);
    }
    let body = json!({
        "kind": format!("{}List", target.rt.kind), "apiVersion": target.rt.api_version(),
        "metadata": {"resourceVersion": world.resource_version.to_string()},
        "items": items,
    });
    json_response(StatusCode::OK, &body)
}

fn create(world: &mut World, target: &Target, body: &Bytes) -> Response {
    let mut object = match decode_value(body) {
        Ok(object) => object,
        Err(response) => return *response,
    };
    let meta = &object["metadata"];
    let namespace_ok = meta["namespace"]
        .as_str()
        .is_none_or(|ns| ns == target.namespace);
    if !namespace_ok && target.rt.namespaced {
        return status(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
            None,
        );
    }
    let mut name = meta["name"].as_str().unwrap_or_default().to_owned();
    if name.is_empty()
        && let Some(prefix) = meta["generateName"].as_str()
    {
        name = format!("{prefix}{:05x}", world.next_uid + 1);
    }
    if name.is_empty() {
        return status(
            422,
            "Invalid",
            format!(
                "{} is invalid: metadata.name: Required value: name or generateName is required",
                target.rt.kind
            ),
            None,
        );
    }
    if world.objects.contains_key(&key(target, &name)) {
        return status(
            409,
            "AlreadyExists",
            format!(
                "{}.{} \"{name}\" already exists",
                target.rt.plural, target.rt.group
            ),
            Some(json!({"name": name, "group": target.rt.group, "kind": target.rt.plural})),
        );
    }
    if target.rt.status
        && let Some(o) = object.as_object_mut()
    {
        o.remove("status");
    }
    object["apiVersion"] = json!(target.rt.api_version());
    object["kind"] = json!(target.rt.kind);
    let uid = world.next_uid();
    let rv = world.next_rv();
    let meta = &mut object["metadata"];
    meta["name"] = json!(name);
    meta["uid"] = json!(uid);
    meta["resourceVersion"] = json!(rv);
    meta["creationTimestamp"] = json!(now());
    meta["generation"] = json!(1);
    if target.rt.namespaced {
        meta["namespace"] = json!(target.namespace);
    }
    world.objects.insert(key(target, &name), object.clone());
    world.record(&target.rt.id(), &target.namespace, "ADDED", object.clone());
    json_response(StatusCode::CREATED, &object)
}

fn update(world: &mut World, target: &Target, name: &str, body: &Bytes) -> Response {
    match decode_value(body) {
        // Custom resources allow no unconditional update (the CRD strategy's rule).
        Ok(object) if target.rt.custom && object["metadata"]["resourceVersion"].is_null() => {
            let message = format!(
                "{} \"{name}\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                target.rt.kind
            );
            status(422, "Invalid", message, None)
        }
        Ok(object) => store(world, target, name, object),
        Err(response) => *response,
    }
}

fn patch_object(world: &mut World, target: &Target, name: &str, request: &Request<'_>) -> Response {
    let Some(old) = world.objects.get(&key(target, name)).cloned() else {
        return not_found(&target.rt.plural, name);
    };
    let patch = match decode_value(request.body) {
        Ok(patch) => patch,
        Err(response) => return *response,
    };
    let patched = if request
        .content_type
        .starts_with("application/json-patch+json")
    {
        patch::json_patch(old, &patch)
    } else {
        Ok(patch::merge_patch(old, &patch))
    };
    match patched {
        Ok(object) => store(world, target, name, object),
        Err(message) => status(422, "Invalid", message, None),
    }
}

/// Stores `sent` as the new `name` (an update or a patch's result), as the API server does.
fn store(world: &mut World, target: &Target, name: &str, sent: Value) -> Response {
    let Some(old) = world.objects.get(&key(target, name)).cloned() else {
        return not_found(&target.rt.plural, name);
    };
    let rv = old["metadata"]["resourceVersion"].clone();
    let sent_rv = &sent["metadata"]["resourceVersion"];
    if !sent_rv.is_null() && *sent_rv != rv {
        let message = format!(
            "Operation cannot be fulfilled on {}.{} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            target.rt.plural, target.rt.group
        );
        return status(
            409,
            "Conflict",
            message,
            Some(json!({"name": name, "group": target.rt.group, "kind": target.rt.plural})),
        );
    }
    let new = merged(&target.rt, target.status, &old, sent);
    if new == old {
        return json_response(StatusCode::OK, &old);
    }
    finish_write(world, target, name, new)
}

/// What a write of `sent` over `old` stores: the status alone through `/status`, everything
/// but the status through the main endpoint (with the status subresource), never the
/// server-owned metadata; the generation bumped when the spec part changed.
fn merged(rt: &ResourceType, to_status: bool, old: &Value, sent: Value) -> Value {
    let mut new = if to_status {
        let mut new = old.clone();
        new["status"] = sent["status"].clone();
        new
    } else {
        let mut new = sent;
        if rt.status {
            new["status"] = old["status"].clone();
        }
        new
    };
    if new["status"].is_null()
        && let Some(o) = new.as_object_mut()
    {
        o.remove("status");
    }
    new["apiVersion"] = old["apiVersion"].clone();
    new["kind"] = old["kind"].clone();
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "generation",
        "resourceVersion",
    ] {
        match old["metadata"].get(field) {
            Some(value) => new["metadata"][field] = value.clone(),
            None => {
                new["metadata"].as_object_mut().map(|m| m.remove(field));
            }
        }
    }
    let spec_of = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("metadata");
            o.remove("status");
        }
        v
    };
    if spec_of(&new) != spec_of(old) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        new["metadata"]["generation"] = json!(generation + 1);
    }
    new
}

/// Stores `new` with a new resourceVersion, or removes it when it was being deleted and its
/// last finalizer is gone.
fn finish_write(world: &mut World, target: &Target, name: &str, mut new: Value) -> Response {
    new["metadata"]["resourceVersion"] = json!(world.next_rv());
    let finalizers_left = new["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    let deleting = !new["metadata"]["deletionTimestamp"].is_null();
    if deleting && !finalizers_left {
        world.objects.remove(&key(target, name));
        world.record(&target.rt.id(), &target.namespace, "DELETED", new.clone());
        return json_response(StatusCode::OK, &new);
    }
    world.objects.insert(key(target, name), new.clone());
    world.record(&target.rt.id(), &target.namespace, "MODIFIED", new.clone());
    json_response(StatusCode::OK, &new)
}

fn delete(world: &mut World, target: &Target, name: &str) -> Response {
    let Some(mut object) = world.objects.get(&key(target, name)).cloned() else {
        return not_found(&target.rt.plural, name);
    };
    let finalizers = object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if finalizers {
        if object["metadata"]["deletionTimestamp"].is_null() {
            object["metadata"]["deletionTimestamp"] = json!(now());
            object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            return finish_write(world, target, name, object);
        }
        return json_response(StatusCode::OK, &object);
    }
    world.objects.remove(&key(target, name));
    object["metadata"]["resourceVersion"] = json!(world.next_rv());
    world.record(
        &target.rt.id(),
        &target.namespace,
        "DELETED",
        object.clone(),
    );
    json_response(StatusCode::OK, &object)
}
