//! The fake's state: the stored objects, the injected faults and the request log, and the
//! kubelet it can play.

use super::Fault;
use crate::watch::Change;
use axum::http::Method;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// A fault waiting for its requests.
#[derive(Debug)]
pub(super) struct InjectedFault {
    pub(super) fault: Fault,
    pub(super) method: Option<Method>,
    pub(super) remaining: usize,
}

/// Requests held unanswered: `method` requests whose body contains `needle`.
#[derive(Debug)]
pub(super) struct Hang {
    pub(super) method: Method,
    pub(super) needle: String,
    pub(super) remaining: usize,
}

/// `(namespace, name)`.
pub(super) type Key = (String, String);

/// Everything the fake API server knows; one per server, behind a mutex.
#[derive(Debug, Default)]
pub(super) struct World {
    pub(super) pods: BTreeMap<Key, Pod>,
    pub(super) secrets: BTreeMap<Key, Secret>,
    pub(super) resource_version: u64,
    pub(super) next_uid: u64,
    pub(super) faults: VecDeque<InjectedFault>,
    pub(super) delay: Option<Duration>,
    pub(super) hangs: Vec<Hang>,
    /// Every request, as `METHOD /path?query`.
    pub(super) requests: Vec<String>,
    pub(super) auto_kubelet: bool,
    pub(super) hold: bool,
    /// Objects other than pods and secrets (custom resources, CRDs, Leases, Events), as JSON,
    /// by `(resource, namespace, name)`; see [`crate::objects`].
    pub(super) objects: BTreeMap<(String, String, String), Value>,
    /// Every change since [`oldest_watchable`](Self::oldest_watchable), oldest first.
    pub(super) changes: Vec<Change>,
    /// A watch from an older resourceVersion gets 410 Gone.
    pub(super) oldest_watchable: u64,
    /// Wakes the watches at every change.
    pub(super) notify: Arc<tokio::sync::Notify>,
}

impl World {
    /// Stores `pod` under its name in `namespace`, with a fresh uid and resourceVersion.
    pub(super) fn insert_pod(&mut self, namespace: &str, mut pod: Pod) {
        pod.metadata.uid = Some(self.next_uid());
        pod.metadata.resource_version = Some(self.next_rv());
        pod.metadata.namespace = Some(namespace.to_owned());
        let name = pod
            .metadata
            .name
            .clone()
            .expect("a pod to insert needs a name");
        self.record_pod("ADDED", &pod);
        self.pods.insert((namespace.to_owned(), name), pod);
    }

    /// Logs a change of `object` (whose resourceVersion is the change's) and wakes the watches.
    pub(super) fn record(
        &mut self,
        resource: &str,
        namespace: &str,
        kind: &'static str,
        object: Value,
    ) {
        let rv = object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.resource_version);
        self.changes.push(Change {
            rv,
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            kind,
            object,
        });
        self.notify.notify_waiters();
    }

    /// Logs a change of a pod.
    pub(super) fn record_pod(&mut self, kind: &'static str, pod: &Pod) {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let mut object = serde_json::to_value(pod).unwrap_or_default();
        object["kind"] = json!("Pod");
        object["apiVersion"] = json!("v1");
        self.record("pods", &namespace, kind, object);
    }

    /// Forgets the changes so far: a watch from before now gets 410 Gone.
    pub(super) fn compact(&mut self) {
        self.changes.clear();
        self.oldest_watchable = self.resource_version;
    }

    pub(super) fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    pub(super) fn next_uid(&mut self) -> String {
        self.next_uid += 1;
        format!("6f1c2d3e-0000-4000-8000-{:012x}", self.next_uid)
    }

    /// Removes a pod (the kubelet confirmed its deletion, or it needed no grace).
    pub(super) fn remove_pod(&mut self, key: &Key) -> Option<Pod> {
        let mut pod = self.pods.remove(key)?;
        pod.metadata.resource_version = Some(self.next_rv());
        self.record_pod("DELETED", &pod);
        Some(pod)
    }

    /// Whether a request of `method` with `body` is to be held unanswered (counting it).
    pub(super) fn take_hang(&mut self, method: &Method, body: &[u8]) -> bool {
        let body = String::from_utf8_lossy(body);
        let Some(index) = self
            .hangs
            .iter()
            .position(|h| h.method == method && body.contains(&h.needle))
        else {
            return false;
        };
        self.hangs[index].remaining -= 1;
        if self.hangs[index].remaining == 0 {
            self.hangs.remove(index);
        }
        true
    }

    /// Takes the first fault that applies to `method`.
    pub(super) fn take_fault(&mut self, method: &Method) -> Option<Fault> {
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
    pub(super) fn kubelet_tick(&mut self) {
        if !self.auto_kubelet {
            return;
        }
        let gone: Vec<Key> = self
            .pods
            .iter()
            .filter(|(_, pod)| pod.metadata.deletion_timestamp.is_some())
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.remove_pod(&key);
        }
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
                let pod = pod.clone();
                self.record_pod("MODIFIED", &pod);
            }
        }
    }
}

/// The pod's phase (`Pending` when it has no status yet).
pub(super) fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// The current time as the API server writes it.
pub(super) fn now() -> Time {
    Time(timestamp_now())
}

/// The current time (without jiff's `std` feature, which not every build of this crate has).
pub(super) fn timestamp_now() -> Timestamp {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::new(since.as_secs() as i64, since.subsec_nanos() as i32).unwrap_or_default()
}

/// Sets `phase` as the kubelet would report it: scheduled on a node, the worker container
/// running or terminated.
pub(super) fn apply_phase(pod: &mut Pod, phase: &str, resource_version: String) {
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
