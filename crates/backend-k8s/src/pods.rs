//! Reading worker pods as the manager sees them: state, age, shape, and which finished pods
//! are past the history limit.

use crate::manifest::{CONTAINER_NAME, GPU_RESOURCE};
use codalab_wm_backend::backend::{JobState, PendingKind, WorkerJob};
use codalab_wm_backend::bundle::WorkerShape;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// Pod `status.reason`s of a Failed pod that the cluster, not the worker, ended: eviction
/// (node pressure, API eviction), preemption by a higher-priority pod, node shutdown.
pub const PREEMPTED_REASONS: &[&str] = &[
    "Evicted",
    "Preempting",
    "NodeShutdown",
    "Shutdown",
    "Terminated",
];

/// The job a pod stands for.
///
/// Pending is pending and Running is active, unless the pod is terminating (it has a
/// `deletionTimestamp`): a terminating pod is no longer capacity. Succeeded is ended and
/// Failed is failed, or preempted when the pod's reason is one of [`PREEMPTED_REASONS`].
/// `Unknown` (the node stopped reporting) still holds its resources, so it counts as active.
pub fn job_from_pod(pod: &Pod) -> WorkerJob {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let pod_reason = pod.status.as_ref().and_then(|s| s.reason.as_deref());
    let state = match (phase, terminating) {
        ("Failed", _) if pod_reason.is_some_and(|r| PREEMPTED_REASONS.contains(&r)) => {
            JobState::Preempted
        }
        ("Failed", _) => JobState::Failed,
        ("Succeeded", _) | (_, true) => JobState::Ended,
        ("Pending", false) => JobState::Pending,
        _ => JobState::Active,
    };
    let reason = if terminating && state == JobState::Ended {
        Some("Terminating".to_owned())
    } else {
        reason(pod)
    };
    WorkerJob {
        id: name.clone(),
        name,
        state,
        submitted_at: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| SystemTime::from(t.0)),
        shape: shape(pod),
        reason,
        expected_start: None,
    }
}

/// Whether the object with `uid` controls `pod` (its controller owner reference).
pub fn controlled_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// Whether the pod has finished (succeeded or failed).
pub fn is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The finished pods beyond the newest `keep`, oldest first (by when the worker container
/// finished, else by creation). Pods already being deleted are left alone.
pub fn finished_beyond_limit(pods: &[Pod], keep: usize) -> Vec<&Pod> {
    let mut finished: Vec<&Pod> = pods
        .iter()
        .filter(|p| is_finished(p) && p.metadata.deletion_timestamp.is_none())
        .collect();
    finished.sort_by_key(|p| (finished_at(p), p.metadata.name.clone()));
    let excess = finished.len().saturating_sub(keep);
    finished.truncate(excess);
    finished
}

fn finished_at(pod: &Pod) -> Option<SystemTime> {
    let terminated = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| {
            c.iter()
                .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        });
    terminated
        .or(pod.metadata.creation_timestamp.as_ref())
        .map(|t| SystemTime::from(t.0))
}

/// The most telling reason: the pod's (`Evicted` …), else the worker container's waiting
/// reason with its message (`ImagePullBackOff: Back-off pulling image …`,
/// `CreateContainerConfigError: secret "x" not found`) or its terminated reason (`Error` …),
/// else an unschedulable condition's with the scheduler's message (`Unschedulable: 0/3 nodes
/// are available: 3 Insufficient nvidia.com/gpu.`, what its `FailedScheduling` event says).
fn reason(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if let Some(reason) = status.reason.clone() {
        return Some(reason);
    }
    let with_message = |reason: &Option<String>, message: &Option<String>| match message {
        Some(message) if !message.is_empty() => Some(format!("{}: {message}", reason.as_ref()?)),
        _ => reason.clone(),
    };
    let container = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == CONTAINER_NAME);
    let from_container = container.and_then(|c| {
        let state = c.state.as_ref()?;
        (state.waiting.as_ref())
            .and_then(|w| with_message(&w.reason, &w.message))
            .or_else(|| state.terminated.as_ref()?.reason.clone())
    });
    from_container.or_else(|| {
        let unscheduled = (status.conditions.iter().flatten())
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        with_message(&unscheduled.reason, &unscheduled.message)
    })
}

/// What the cluster-autoscaler's `NotTriggerScaleUp` event on a pending pod is turned into
/// (its reason, then the event's message): no node group can grow to fit the pod.
pub const NOT_TRIGGER_SCALE_UP: &str = "NotTriggerScaleUp";

/// Container waiting reasons that no retry mends: the pod's settings are wrong.
const MISCONFIGURED: &[&str] = &[
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
];

/// Words of an image pull's message that say the image is not there or not ours to pull
/// (a registry that is down or throttles says otherwise, and is retried).
const IMAGE_MISSING: &[&str] = &[
    "not found",
    "manifest unknown",
    "pull access denied",
    "unauthorized",
    "repository does not exist",
];

/// What a pending pod's reason ([`job_from_pod`], or the autoscaler's event) says of it:
/// misconfigured when its image cannot be had (an invalid name, an image missing or refused)
/// or its container cannot be made from its settings (a Secret or key missing); no capacity
/// when the cluster-autoscaler says no node group can grow for it ([`NOT_TRIGGER_SCALE_UP`]);
/// else queued (unschedulable for now: a node may come, or a pod may end).
pub fn pending_kind(reason: Option<&str>) -> PendingKind {
    let Some(reason) = reason else {
        return PendingKind::Queued;
    };
    let (code, message) = reason.split_once(": ").unwrap_or((reason, ""));
    let pull = matches!(code, "ErrImagePull" | "ImagePullBackOff");
    if MISCONFIGURED.contains(&code) || pull && IMAGE_MISSING.iter().any(|w| message.contains(w)) {
        PendingKind::Misconfigured
    } else if code == NOT_TRIGGER_SCALE_UP {
        PendingKind::NoCapacity
    } else {
        PendingKind::Queued
    }
}

/// The worker shape from the container's limits, when they are whole CPUs, whole GPUs and
/// a memory size this backend writes (`<n>Mi`, `<n>Gi`, plain bytes).
fn shape(pod: &Pod) -> Option<WorkerShape> {
    let container = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER_NAME)?;
    let limits = container.resources.as_ref()?.limits.as_ref()?;
    let cpus = limits.get("cpu")?.0.parse().ok()?;
    let gpus = match limits.get(GPU_RESOURCE) {
        Some(q) => q.0.parse().ok()?,
        None => 0,
    };
    let memory_bytes = memory_bytes(limits)?;
    Some(WorkerShape {
        cpus,
        gpus,
        memory_bytes,
    })
}

fn memory_bytes(limits: &BTreeMap<String, Quantity>) -> Option<u64> {
    let text = limits.get("memory")?.0.as_str();
    let (digits, multiplier) = match text.len().checked_sub(2).map(|i| text.split_at(i)) {
        Some((n, "Ki")) => (n, 1 << 10),
        Some((n, "Mi")) => (n, 1 << 20),
        Some((n, "Gi")) => (n, 1 << 30),
        Some((n, "Ti")) => (n, 1 << 40),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(multiplier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn phase_pod(name: &str, phase: &str) -> Pod {
        pod(json!({"metadata": {"name": name}, "status": {"phase": phase}}))
    }

    #[test]
    fn phases_map_to_states() {
        let cases = [
            ("Pending", JobState::Pending),
            ("Running", JobState::Active),
            ("Unknown", JobState::Active),
            ("Succeeded", JobState::Ended),
            ("Failed", JobState::Failed),
        ];
        for (phase, state) in cases {
            assert_eq!(job_from_pod(&phase_pod("p", phase)).state, state, "{phase}");
        }
        assert_eq!(
            job_from_pod(&pod(json!({"metadata": {"name": "p"}}))).state,
            JobState::Pending
        );
    }

    #[test]
    fn evicted_pods_are_preempted_other_failures_failed() {
        let failed = |reason: &str| {
            job_from_pod(&pod(json!({
                "metadata": {"name": "p"},
                "status": {"phase": "Failed", "reason": reason,
                    "message": "The node was low on resource: memory."}
            })))
        };
        let evicted = failed("Evicted");
        assert_eq!(evicted.state, JobState::Preempted);
        assert_eq!(evicted.reason.as_deref(), Some("Evicted"));
        assert_eq!(failed("Preempting").state, JobState::Preempted);
        assert_eq!(failed("DeadlineExceeded").state, JobState::Failed);
        assert_eq!(
            job_from_pod(&phase_pod("p", "Failed")).state,
            JobState::Failed
        );
    }

    #[test]
    fn terminating_pods_are_not_capacity() {
        for phase in ["Pending", "Running"] {
            let job = job_from_pod(&pod(json!({
                "metadata": {"name": "p", "deletionTimestamp": "2026-11-21T10:00:00Z"},
                "status": {"phase": phase}
            })));
            assert_eq!(job.state, JobState::Ended, "{phase}");
            assert_eq!(job.reason.as_deref(), Some("Terminating"));
        }
    }

    #[test]
    fn facts_come_from_the_pod() {
        let job = job_from_pod(&pod(json!({
            "metadata": {"name": "cl-worker-1", "creationTimestamp": "2026-11-21T10:00:00Z"},
            "spec": {"containers": [{"name": "cl-worker", "resources": {
                "limits": {"cpu": "4", "memory": "2048Mi", "nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending", "containerStatuses": [{
                "name": "cl-worker", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "CreateContainerConfigError",
                    "message": "secret \"codalab-credentials\" not found"}}}]}
        })));
        assert_eq!(job.id, "cl-worker-1");
        assert_eq!(job.shape, Some(WorkerShape::from_flags(4, 1, 2048)));
        assert_eq!(
            job.reason.as_deref(),
            Some("CreateContainerConfigError: secret \"codalab-credentials\" not found")
        );
        let submitted = job
            .submitted_at
            .unwrap()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        assert_eq!(submitted.as_secs(), 1_795_255_200);
    }

    #[test]
    fn unschedulable_pods_say_so() {
        let job = job_from_pod(&pod(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}
        })));
        assert_eq!(
            job.reason.as_deref(),
            Some("Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
        );
        assert_eq!(pending_kind(job.reason.as_deref()), PendingKind::Queued);
    }

    /// #42 item 4: what a pending pod's reason says, with the messages the kubelet and the
    /// cluster-autoscaler give.
    #[test]
    fn a_pending_pods_reason_says_whether_it_can_ever_start() {
        let cases = [
            (
                "ImagePullBackOff: Back-off pulling image \"codalab/worker:nosuch\": ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image \"docker.io/codalab/worker:nosuch\": docker.io/codalab/worker:nosuch: not found",
                PendingKind::Misconfigured,
            ),
            (
                "ErrImagePull: pull access denied for private/worker, repository does not exist or may require 'docker login'",
                PendingKind::Misconfigured,
            ),
            (
                "InvalidImageName: Failed to apply default image tag \"Codalab/Worker\"",
                PendingKind::Misconfigured,
            ),
            (
                "CreateContainerConfigError: secret \"codalab-credentials\" not found",
                PendingKind::Misconfigured,
            ),
            // A registry that throttles or is down: the kubelet retries, and so does the pool.
            (
                "ErrImagePull: toomanyrequests: You have reached your pull rate limit.",
                PendingKind::Queued,
            ),
            ("ImagePullBackOff", PendingKind::Queued),
            (
                "NotTriggerScaleUp: pod didn't trigger scale-up: 1 max node group size reached",
                PendingKind::NoCapacity,
            ),
            (
                "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.",
                PendingKind::Queued,
            ),
            ("ContainerCreating", PendingKind::Queued),
        ];
        for (reason, kind) in cases {
            assert_eq!(pending_kind(Some(reason)), kind, "{reason}");
        }
        assert_eq!(pending_kind(None), PendingKind::Queued);
    }

    #[test]
    fn memory_quantities() {
        let limits = |m: &str| BTreeMap::from([("memory".to_owned(), Quantity(m.to_owned()))]);
        assert_eq!(memory_bytes(&limits("2048Mi")), Some(2048 << 20));
        assert_eq!(memory_bytes(&limits("2Gi")), Some(2 << 30));
        assert_eq!(memory_bytes(&limits("1000")), Some(1000));
        assert_eq!(memory_bytes(&limits("1.5Gi")), None);
        assert_eq!(memory_bytes(&limits("1G")), None);
    }

    #[test]
    fn the_oldest_finished_pods_go_first() {
        let finished = |name: &str, phase: &str, created: &str| {
            pod(
                json!({"metadata": {"name": name, "creationTimestamp": created}, "status": {"phase": phase}}),
            )
        };
        let pods = vec![
            finished("new", "Succeeded", "2026-11-21T12:00:00Z"),
            finished("old", "Failed", "2026-11-21T08:00:00Z"),
            phase_pod("running", "Running"),
            finished("mid", "Succeeded", "2026-11-21T10:00:00Z"),
        ];
        let names = |keep| -> Vec<String> {
            finished_beyond_limit(&pods, keep)
                .iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect()
        };
        assert_eq!(names(1), ["old", "mid"]);
        assert_eq!(names(0), ["old", "mid", "new"]);
        assert!(names(3).is_empty());
    }

    #[test]
    fn the_container_finish_time_wins_over_creation() {
        let pods = vec![
            pod(
                json!({"metadata": {"name": "a", "creationTimestamp": "2026-11-21T08:00:00Z"},
                "status": {"phase": "Succeeded", "containerStatuses": [{"name": "cl-worker", "image": "i",
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-11-21T20:00:00Z"}}}]}}),
            ),
            pod(
                json!({"metadata": {"name": "b", "creationTimestamp": "2026-11-21T09:00:00Z"},
                "status": {"phase": "Succeeded"}}),
            ),
        ];
        let oldest = finished_beyond_limit(&pods, 1);
        assert_eq!(oldest[0].metadata.name.as_deref(), Some("b"));
    }
}
