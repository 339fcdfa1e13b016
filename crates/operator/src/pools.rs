//! The pools the controller reconciles, read one object at a time so that one bad object never
//! blinds the operator.
//!
//! kube's typed watcher fails the whole list when one object does not deserialize (and drops a
//! watch event that does not), so a single pool with `max: 5000000000` stored before the CRD
//! had a maximum stopped every pool in the cluster after the next restart (review §5.3). Here
//! the watcher reads the objects as JSON ([`DynamicObject`]) and each is parsed on its own: one
//! that does not read reaches the reconcile as a pool whose spec says why
//! ([`CodaLabWorkerPoolSpec::invalid`]), which it reports as `InvalidSpec` in the pool's status
//! without acting; a status that does not read is dropped (the next reconcile writes it again).
//! Watcher errors are logged at warn and reach `/healthz` ([`crate::health`]).

use crate::crd::{CodaLabWorkerPool, CodaLabWorkerPoolSpec};
use crate::health::Health;
use futures_util::{Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use std::sync::Arc;

/// The pools of `client` (in `namespace`, or in all), as the controller's trigger stream and
/// its store.
pub fn watch(
    client: kube::Client,
    namespace: Option<&str>,
    health: Arc<Health>,
) -> (
    Store<CodaLabWorkerPool>,
    impl Stream<Item = Result<CodaLabWorkerPool, watcher::Error>> + Send + 'static,
) {
    let resource = ApiResource::erase::<CodaLabWorkerPool>(&());
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    let (reader, writer) = reflector::store();
    let events = watcher::watcher(api, watcher::Config::default()).map(move |event| {
        note(&health, &event);
        event.map(parse_event)
    });
    (
        reader,
        reflector::reflector(writer, events).applied_objects(),
    )
}

fn note(health: &Health, event: &Result<Event<DynamicObject>, watcher::Error>) {
    match event {
        Ok(Event::InitDone) => health.pools_listed(),
        Ok(_) => health.pools_ok(),
        Err(error) => {
            tracing::warn!(%error, "cannot list or watch the CodaLabWorkerPools");
            health.pools_failed(&error.to_string(), tokio::time::Instant::now());
        }
    }
}

fn parse_event(event: Event<DynamicObject>) -> Event<CodaLabWorkerPool> {
    match event {
        Event::Apply(object) => Event::Apply(parse(object)),
        Event::Delete(object) => Event::Delete(parse(object)),
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(parse(object)),
        Event::InitDone => Event::InitDone,
    }
}

/// The pool `object` holds; one that does not read carries why in its spec.
pub fn parse(object: DynamicObject) -> CodaLabWorkerPool {
    let data = object.data;
    let metadata = object.metadata;
    let spec = match spec(&data) {
        Ok(spec) => spec,
        Err(why) => {
            let name = metadata.name.as_deref().unwrap_or_default();
            let namespace = metadata.namespace.as_deref().unwrap_or_default();
            tracing::warn!(pool = %name, %namespace, %why, "the pool's spec does not read");
            CodaLabWorkerPoolSpec::invalid(why)
        }
    };
    let status = data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    CodaLabWorkerPool {
        metadata,
        spec,
        status,
    }
}

/// The spec in `data`, or what is wrong with it, naming the field.
fn spec(data: &serde_json::Value) -> Result<CodaLabWorkerPoolSpec, String> {
    let value = data.get("spec").cloned().unwrap_or_default();
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            format!("spec: {inner}")
        } else {
            format!("spec.{path}: {inner}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(spec: serde_json::Value, status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "codalab.org/v1alpha1", "kind": "CodaLabWorkerPool",
            "metadata": {"name": "gpu", "namespace": "team"},
            "spec": spec, "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_pool_that_does_not_read_says_why_and_keeps_its_name() {
        let good = json!({"server": "https://s", "credentialsSecret": "c", "max": 4});
        let pool = parse(object(good.clone(), json!({"desired": 2})));
        assert_eq!(pool.spec.max, 4);
        assert_eq!(pool.spec.invalid, None);
        assert_eq!(pool.status.unwrap().desired, 2);
        let cases = [
            (
                json!({"server": "https://s", "credentialsSecret": "c", "max": 5_000_000_000u64}),
                "spec.max: invalid value: integer `5000000000`, expected u32",
            ),
            (
                json!({"server": "https://s", "credentialsSecret": "c", "podTemplate": {"image": 3}}),
                "spec.podTemplate.image: invalid type: integer `3`, expected a string",
            ),
            (
                json!({"server": "https://s"}),
                "spec: missing field `credentialsSecret`",
            ),
        ];
        for (spec, why) in cases {
            let pool = parse(object(spec, json!({})));
            assert_eq!(pool.metadata.name.as_deref(), Some("gpu"));
            assert_eq!(pool.spec.invalid.as_deref(), Some(why));
        }
        // A status that does not read is dropped; the spec still counts.
        let pool = parse(object(good, json!({"desired": -1})));
        assert_eq!((pool.spec.max, pool.status), (4, None));
    }
}
