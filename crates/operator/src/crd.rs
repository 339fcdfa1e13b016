//! The `CodaLabWorkerPool` custom resource (`codalab.org/v1alpha1`, namespaced): one pool of
//! `cl-worker` pods, its spec mirroring a config file's `[[pools]]` entry with the
//! `kubernetes` backend, its status what the controller last saw and decided.
//!
//! The CRD is generated from these types ([`CustomResourceExt::crd`], printed by
//! `cl-worker-manager operator crd`) and checked in as `deploy/kubernetes/operator/crd.yaml`.
//! No default is written here: an absent field takes the default of the config file's
//! `[[pools]]` key (core's `PoolRules`) or `[kubernetes]` key (`KubernetesConfig`); the
//! schema shows `min`/`max` defaults read from core itself (so `kubectl get` prints them).

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The API group of the resource.
pub const GROUP: &str = "codalab.org";
/// The finalizer that makes the controller delete a pool's pods before the pool goes.
pub const FINALIZER: &str = "codalab.org/worker-pods";

/// The label every worker pod of a pool carries, with the pool's name.
pub const POOL_LABEL: &str = "codalab.org/pool";

/// A pool of CodaLab workers (`cl-worker` pods) scaled between `min` and `max` by the
/// bundles staged on a CodaLab server: the `[[pools]]` entry of the config file, as an object.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "codalab.org",
    version = "v1alpha1",
    kind = "CodaLabWorkerPool",
    plural = "codalabworkerpools",
    shortname = "clwp",
    namespaced,
    status = "CodaLabWorkerPoolStatus",
    derive = "PartialEq",
    doc = "A pool of CodaLab workers scaled by the bundles staged on a CodaLab server",
    printcolumn = r#"{"name": "Min", "type": "integer", "jsonPath": ".spec.min"}"#,
    printcolumn = r#"{"name": "Max", "type": "integer", "jsonPath": ".spec.max"}"#,
    printcolumn = r#"{"name": "Desired", "type": "integer", "jsonPath": ".status.desired"}"#,
    printcolumn = r#"{"name": "Ready", "type": "integer", "jsonPath": ".status.ready"}"#,
    printcolumn = r#"{"name": "Staged", "type": "integer", "jsonPath": ".status.staged"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CodaLabWorkerPoolSpec {
    /// URL of the CodaLab server whose staged bundles the pool serves.
    pub server: String,
    /// Secret (in the pool's namespace) with the keys `codalab-username` and
    /// `codalab-password`: the operator logs in with them and the workers read them.
    pub credentials_secret: String,
    /// Workers kept at least.
    #[serde(default = "defaults::min")]
    #[schemars(range(max = 4_294_967_295u32))]
    pub min: u32,
    /// Workers at most (pods being deleted count).
    #[serde(default = "defaults::max")]
    #[schemars(range(max = 4_294_967_295u32))]
    pub max: u32,
    /// Tag put on the workers; bundles with `request_queue` = tag need this pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The workers run only bundles of their tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_exclusive: Option<bool>,
    /// `target` (burst launches, pending timeout, backoff) or `compat` (upstream's rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_mode: Option<LaunchModeSpec>,
    /// Launches per reconcile at most (target mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 4_294_967_295u32))]
    pub max_launches_per_tick: Option<u32>,
    /// Seconds a pod may stay pending before it is deleted and the pool backs off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_timeout: Option<u64>,
    /// Seconds a pod that just started counts as free capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_grace: Option<u64>,
    /// Seconds a running pod whose worker has never checked in may run before it is reaped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkin_timeout: Option<u64>,
    /// Seconds between two launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_seconds_between_workers: Option<u64>,
    /// CPUs of one worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 4_294_967_295u32))]
    pub cpus: Option<u32>,
    /// GPUs (`nvidia.com/gpu`) of one worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 4_294_967_295u32))]
    pub gpus: Option<u32>,
    /// Memory of one worker, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Finished worker pods kept for inspection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 4_294_967_295u32))]
    pub keep_finished_pods: Option<u32>,
    /// What the worker pods look like beyond the worker itself.
    #[serde(default, skip_serializing_if = "PodTemplateSpec::is_empty")]
    pub pod_template: PodTemplateSpec,
    /// No launches while true (existing workers are left to finish).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Why the stored object could not be read as a pool (set by the operator's watcher, never
    /// part of the object): the reconcile reports it as InvalidSpec and acts on nothing else.
    #[serde(skip)]
    pub invalid: Option<String>,
}

impl CodaLabWorkerPoolSpec {
    /// The spec of a stored pool that does not read, with `why`.
    pub fn invalid(why: String) -> Self {
        let mut spec: Self =
            serde_json::from_value(serde_json::json!({"server": "", "credentialsSecret": ""}))
                .expect("a spec with its two required fields reads");
        spec.invalid = Some(why);
        spec
    }
}

/// `compat` or `target`, as the config file's `launch_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LaunchModeSpec {
    /// Upstream's rules: at most one launch per reconcile.
    Compat,
    /// An absolute target, burst launches, pending timeout and backoff.
    Target,
}

/// Overrides of the worker pods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateSpec {
    /// The worker image [default: codalab/worker:$CODALAB_VERSION, else codalab/worker:latest].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Nodes the workers may run on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the workers tolerate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// The workers' PriorityClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

impl PodTemplateSpec {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What the controller last saw and decided.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CodaLabWorkerPoolStatus {
    /// The `metadata.generation` of the spec this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Workers the pool wants now (the policy's target).
    #[serde(default)]
    pub desired: u32,
    /// Worker pods pending or starting.
    #[serde(default)]
    pub starting: u32,
    /// Worker pods running.
    #[serde(default)]
    pub ready: u32,
    /// Workers running a bundle.
    #[serde(default)]
    pub busy: u32,
    /// Staged bundles this pool can serve.
    #[serde(default)]
    pub staged: u32,
    /// When the controller last launched or deleted a worker pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// Ready, Scaling, BackingOff, Suspended, Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Staged bundles with no worker coming, by reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmet: Vec<UnmetStatus>,
    /// The failure streak (failed launches and pods, pods pending too long, lost workers) the
    /// pool backs off for; kept here so that a new leader backs off as the old one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<FailureStreak>,
    /// Worker pods whose worker has checked in with the server: never judged lost, whichever
    /// replica leads (a pod the server stops listing is vanished, presumed busy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checked_in: Vec<String>,
    /// Some worker of the pool has checked in: the operator can see this pool's workers, so a
    /// pod that never checks in may be judged lost.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub workers_seen: bool,
}

/// A pool's failure streak, as core's backoff counts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureStreak {
    /// Failures in a row.
    pub count: u32,
    /// When the last one happened.
    pub last_failure: Time,
    /// No launches before this.
    pub backoff_until: Time,
}

/// Staged bundles with no worker coming for one reason.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnmetStatus {
    /// The reason code (`max_reached`, `backing_off`, `no_fitting_pool` …).
    pub reason: String,
    /// How many bundles.
    pub bundles: u32,
}

/// The CRD as YAML (what `cl-worker-manager operator crd` prints).
pub fn crd_yaml() -> String {
    serde_yaml::to_string(&CodaLabWorkerPool::crd()).expect("a CRD serializes to YAML")
}

/// The CRD as JSON (to create it through the API).
pub fn crd_json() -> serde_json::Value {
    serde_json::to_value(CodaLabWorkerPool::crd()).expect("a CRD serializes to JSON")
}

/// The schema defaults, read from core's `[[pools]]` defaults (their one home).
mod defaults {
    use codalab_wm_core::settings::PoolRules;

    pub(super) fn rules() -> PoolRules {
        serde_json::from_value(serde_json::json!({"name": "x", "backend": "kubernetes"}))
            .expect("a pool with a name and a backend reads")
    }

    pub(super) fn min() -> u32 {
        rules().min
    }

    pub(super) fn max() -> u32 {
        rules().max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_says_what_kubectl_shows() {
        let crd = CodaLabWorkerPool::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("codalabworkerpools.codalab.org")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.short_names, Some(vec!["clwp".to_owned()]));
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Min", "Max", "Desired", "Ready", "Staged", "Age"]);
    }

    #[test]
    fn min_and_max_default_to_cores_pool_defaults() {
        let spec: CodaLabWorkerPoolSpec = serde_json::from_value(
            serde_json::json!({"server": "https://s", "credentialsSecret": "c"}),
        )
        .unwrap();
        let rules = defaults::rules();
        assert_eq!((spec.min, spec.max), (rules.min, rules.max));
        let schema = serde_json::to_value(CodaLabWorkerPool::crd()).unwrap();
        let max = &schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["max"];
        assert_eq!(max["default"], serde_json::json!(rules.max), "{max}");
    }
}
