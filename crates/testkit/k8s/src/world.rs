//! The fake's state: the stored objects, the injected faults and the request log, and the
//! kubelet it can play.

use super::Fault;
use axum::http::Method;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// A fault waiting for its requests.
#[derive(Debug)]
pub(super) struct InjectedFault {
    pub(super) fault: Fault,
    pub(super) method: Option<Method>,
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
    /// Every request, as `METHOD /path?query`.
    pub(super) requests: Vec<String>,
    pub(super) auto_kubelet: bool,
    pub(super) hold: bool,
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
        self.pods.insert((namespace.to_owned(), name), pod);
    }

    pub(super) fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    pub(super) fn next_uid(&mut self) -> String {
        self.next_uid += 1;
        format!("6f1c2d3e-0000-4000-8000-{:012x}", self.next_uid)
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

/// The pod's phase (`Pending` when it has no status yet).
pub(super) fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// The current time as the API server writes it.
pub(super) fn now() -> Time {
    Time(Timestamp::now())
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
