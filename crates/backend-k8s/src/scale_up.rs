//! The cluster-autoscaler's word on pending pods: a `NotTriggerScaleUp` Event says that no
//! node group can grow to fit the pod (each at its maximum size, or none whose nodes would
//! fit it), so it waits for capacity nobody will add. Read with one list of the namespace's
//! Events of that reason, only while a pod of ours is unschedulable; what it finds replaces
//! the pod's `Unschedulable` reason ([`crate::pods::pending_kind`]: no capacity).

use crate::pods::NOT_TRIGGER_SCALE_UP;
use codalab_wm_backend::backend::{JobState, WorkerJob};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// How recent the autoscaler's last word must be: it says it again on every scan (every
/// 10 s by default) while the pod stays unschedulable, so an older one is no longer meant.
pub const FRESH: Duration = Duration::from_secs(120);

/// Events read in one list: the namespace's `NotTriggerScaleUp` Events are a few per pending
/// pod, and a pod not among these is only read as unschedulable.
const LIMIT: u32 = 500;

/// Whether `job` is a pod the scheduler could not place (the autoscaler's word is sought).
pub fn unschedulable(job: &WorkerJob) -> bool {
    job.state == JobState::Pending
        && (job.reason.as_deref()).is_some_and(|r| r.starts_with("Unschedulable"))
}

/// The namespace's `NotTriggerScaleUp` Events (one page of them).
pub async fn list(events: &Api<Event>) -> kube::Result<Vec<Event>> {
    let params = ListParams::default()
        .fields(&format!("reason={NOT_TRIGGER_SCALE_UP}"))
        .limit(LIMIT);
    Ok(events.list(&params).await?.items)
}

/// The autoscaler's message for each pod of `uids` (pod uid → pod name) that it said no to
/// within [`FRESH`] of `now`, by pod name; the latest word of each.
pub fn refusals(
    events: &[Event],
    uids: &HashMap<String, String>,
    now: SystemTime,
) -> HashMap<String, String> {
    let mut latest: HashMap<String, (SystemTime, String)> = HashMap::new();
    for event in events {
        let object = &event.involved_object;
        if event.reason.as_deref() != Some(NOT_TRIGGER_SCALE_UP)
            || object.kind.as_deref() != Some("Pod")
        {
            continue;
        }
        let Some(name) = object.uid.as_ref().and_then(|uid| uids.get(uid)) else {
            continue;
        };
        let Some(at) = last_seen(event) else {
            continue;
        };
        if now.duration_since(at).unwrap_or_default() > FRESH {
            continue;
        }
        let message = event.message.clone().unwrap_or_default();
        let newer = latest.get(name).is_none_or(|(seen, _)| *seen < at);
        if newer {
            latest.insert(name.clone(), (at, message));
        }
    }
    (latest.into_iter())
        .map(|(name, (_, message))| (name, message))
        .collect()
}

/// When the Event was last said: its series' last observation, its last timestamp, or its
/// event time.
fn last_seen(event: &Event) -> Option<SystemTime> {
    let series = (event.series.as_ref()).and_then(|s| s.last_observed_time.as_ref());
    let time = (series.map(|t| t.0))
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.event_time.as_ref().map(|t| t.0))?;
    Some(SystemTime::from(time))
}

/// Gives each unschedulable job the autoscaler refused its word as reason
/// (`NotTriggerScaleUp: pod didn't trigger scale-up: …`).
pub fn apply(jobs: &mut [WorkerJob], refusals: &HashMap<String, String>) {
    for job in jobs.iter_mut().filter(|j| unschedulable(j)) {
        if let Some(message) = refusals.get(&job.id) {
            job.reason = Some(format!("{NOT_TRIGGER_SCALE_UP}: {message}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::pending_kind;
    use codalab_wm_backend::PendingKind;
    use serde_json::json;

    fn event(uid: &str, reason: &str, last: &str, message: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{uid}.1"), "namespace": "codalab"},
            "involvedObject": {"kind": "Pod", "name": "ignored", "uid": uid},
            "reason": reason, "message": message, "lastTimestamp": last,
            "source": {"component": "cluster-autoscaler"}, "type": "Normal"
        }))
        .unwrap()
    }

    fn at(text: &str) -> SystemTime {
        let time: k8s_openapi::jiff::Timestamp = text.parse().unwrap();
        SystemTime::from(time)
    }

    #[test]
    fn a_fresh_refusal_of_our_pod_makes_it_a_pod_no_capacity_will_come_for() {
        let uids = HashMap::from([
            ("u1".to_owned(), "cl-worker-1".to_owned()),
            ("u2".to_owned(), "cl-worker-2".to_owned()),
        ]);
        let said = "pod didn't trigger scale-up: 1 max node group size reached";
        let events = [
            event(
                "u1",
                NOT_TRIGGER_SCALE_UP,
                "2026-11-29T12:00:00Z",
                "older word",
            ),
            event("u1", NOT_TRIGGER_SCALE_UP, "2026-11-29T12:01:30Z", said),
            // Stale: said 10 minutes ago, not since (the pod may have a node coming).
            event("u2", NOT_TRIGGER_SCALE_UP, "2026-11-29T11:52:00Z", said),
            // Another pod's, and another reason.
            event("u9", NOT_TRIGGER_SCALE_UP, "2026-11-29T12:01:30Z", said),
            event("u1", "TriggeredScaleUp", "2026-11-29T12:01:40Z", "scale-up"),
        ];
        let refusals = refusals(&events, &uids, at("2026-11-29T12:02:00Z"));
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert_eq!(refusals["cl-worker-1"], said);
        let unschedulable = |id: &str| WorkerJob {
            reason: Some("Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.".into()),
            ..WorkerJob::new(id, JobState::Pending)
        };
        let mut jobs = [unschedulable("cl-worker-1"), unschedulable("cl-worker-2")];
        apply(&mut jobs, &refusals);
        let kinds: Vec<_> = jobs
            .iter()
            .map(|j| pending_kind(j.reason.as_deref()))
            .collect();
        assert_eq!(kinds, [PendingKind::NoCapacity, PendingKind::Queued]);
        assert_eq!(
            jobs[0].reason.as_deref(),
            Some("NotTriggerScaleUp: pod didn't trigger scale-up: 1 max node group size reached")
        );
    }
}
