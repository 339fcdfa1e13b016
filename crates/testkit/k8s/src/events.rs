//! Events are one resource with two APIs: what is written through `events.k8s.io/v1` is read
//! through core `v1` too (as `kubectl describe` lists it, by `involvedObject`), converted as
//! the API server converts it (`regarding` → `involvedObject`, `note` → `message`,
//! `reportingController` → `source.component`, the series' count and last time).

use crate::objects::ResourceType;
use serde_json::{Value, json};

/// The store key of `events.k8s.io/v1` Events.
pub(crate) const NEW_EVENTS: &str = "events.k8s.io/events";

/// Whether `rt` is core `v1` Events.
pub(crate) fn is_core_events(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "events"
}

/// The fields a field selector may name for `rt` (the API server's own lists).
pub(crate) fn field_allowed(rt: &ResourceType, field: &str) -> bool {
    let common = matches!(field, "metadata.name" | "metadata.namespace");
    let events = rt.plural == "events"
        && (field.starts_with("involvedObject.")
            || field.starts_with("regarding.")
            || matches!(field, "reason" | "type" | "source" | "reportingController"));
    common || events
}

/// An `events.k8s.io/v1` Event as core `v1` shows it.
pub(crate) fn as_core_event(event: &Value) -> Value {
    let series = &event["series"];
    let last = if series.is_object() {
        series["lastObservedTime"].clone()
    } else {
        event["eventTime"].clone()
    };
    let count = series["count"].as_i64().unwrap_or(1);
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": event["metadata"],
        "involvedObject": event["regarding"],
        "reason": event["reason"], "message": event["note"], "type": event["type"],
        "action": event["action"],
        "source": {"component": event["reportingController"]},
        "reportingComponent": event["reportingController"],
        "reportingInstance": event["reportingInstance"],
        "eventTime": event["eventTime"], "firstTimestamp": event["eventTime"],
        "lastTimestamp": last, "count": count,
    })
}
