//! From a `CodaLabWorkerPool` to what core and the Kubernetes backend already understand:
//! its `[[pools]]` rules ([`PoolRules`], so the policy, its defaults and its checks are core's)
//! and its `[kubernetes]` table ([`KubernetesConfig`], the backend's defaults and checks).
//! Both go through serde with the config file's own keys, so an absent field takes the one
//! default the config file has.

use crate::crd::{CodaLabWorkerPool, CodaLabWorkerPoolSpec};
use codalab_wm_core::PoolPolicy;
use codalab_wm_core::describe::fields_of;
use codalab_wm_core::settings::{PoolRules, Settings};
use codalab_wm_k8s::{KubernetesConfig, names};
use serde_json::{Map, Value, json};

/// The backend every pool of the operator uses.
const BACKEND: &str = "kubernetes";

/// A pool resolved for one reconcile: its policy and its backend table.
#[derive(Debug, Clone)]
pub struct ResolvedPool {
    /// The pool's rules, as core's manager would run them.
    pub policy: PoolPolicy,
    /// The backend settings of its worker pods.
    pub kubernetes: KubernetesConfig,
}

/// The pool's name as core spells pool names (letters, digits, `_`).
pub fn pool_name(name: &str) -> String {
    name.replace(['-', '.'], "_")
}

/// The manager id marking the pool's pods (`codalab-wm/manager-id`): one per pool and
/// namespace, so pools never count each other's pods. `clwp-<name>` when that is a DNS label
/// as it is (the id of earlier releases, so an upgrade finds their pods again); otherwise
/// (a `.`, a doubled `-`, more than 58 characters) a readable start and a hash of the whole
/// name ([`names::hashed_label`]), so that `gpu-a.b`, `gpu-a-b` and `gpu--a-b` never share one
/// (review 2026-11-27 §1).
pub fn manager_id(name: &str) -> String {
    let plain = format!("clwp-{name}");
    if names::dns_label(&plain) == plain {
        plain
    } else {
        names::hashed_label(&plain)
    }
}

/// The id releases before the fix of review 2026-11-27 §1 gave pool `name`'s pods (lossy:
/// `gpu-a.b` and `gpu-a-b` shared it). Pods that carry it and not [`manager_id`] are an
/// earlier operator's; they are reported, never counted or stopped, and deleted with the pool
/// that controls them.
pub fn legacy_manager_id(name: &str) -> String {
    names::dns_label(&format!("clwp-{name}"))
}

/// The value of the pool's label on its pods (`codalab.org/pool`): its name when that is a
/// label value (at most 63 characters), otherwise a readable start and a hash of it
/// ([`names::hashed_label`]); never another pool's.
pub fn pool_label(name: &str) -> String {
    if names::is_label_value(name) && !name.contains('_') {
        name.to_owned()
    } else {
        names::hashed_label(name)
    }
}

/// Resolves `pool` (named `name` in `namespace`); the error names the bad setting.
pub fn resolve(
    pool: &CodaLabWorkerPool,
    name: &str,
    namespace: &str,
) -> Result<ResolvedPool, String> {
    if let Some(why) = &pool.spec.invalid {
        return Err(why.clone());
    }
    let rules = pool_rules(&pool.spec, name)?;
    let kubernetes = kubernetes_config(&pool.spec, name, namespace)?;
    kubernetes.validate().map_err(|e| e.to_string())?;
    let policy = rules.policy(&Settings::default(), kubernetes.worker_shape());
    policy.validate()?;
    Ok(ResolvedPool { policy, kubernetes })
}

/// The `[[pools]]` entry the spec describes: every field named like a `[[pools]]` key
/// ([`PoolRules::KEYS`], the spec's camelCase of it), so that the mapping cannot miss a field
/// the CRD adds.
pub fn pool_rules(spec: &CodaLabWorkerPoolSpec, name: &str) -> Result<PoolRules, String> {
    let given = given(spec)?;
    let mut entry: Map<String, Value> = (PoolRules::KEYS.iter())
        .filter_map(|key| Some((key.name.to_owned(), given.get(key.name)?.clone())))
        .collect();
    entry.insert("name".into(), json!(pool_name(name)));
    entry.insert("backend".into(), json!(BACKEND));
    serde_json::from_value(Value::Object(entry)).map_err(|e| format!("spec: {e}"))
}

/// The `[kubernetes]` table the spec describes: the pool's namespace, its manager id, the
/// given credentials Secret, every field named like a `[kubernetes]` key (the shape …), and
/// the image.
pub fn kubernetes_config(
    spec: &CodaLabWorkerPoolSpec,
    name: &str,
    namespace: &str,
) -> Result<KubernetesConfig, String> {
    let given = given(spec)?;
    let mut table: Map<String, Value> = (fields_of::<KubernetesConfig>().iter())
        .filter(|key| !PoolRules::KEYS.iter().any(|k| k.name == **key))
        .filter_map(|key| Some(((*key).to_owned(), given.get(*key)?.clone())))
        .collect();
    table.insert("namespace".into(), json!(namespace));
    table.insert("manager_id".into(), json!(manager_id(name)));
    table.insert("credentials_secret".into(), json!(spec.credentials_secret));
    if let Some(image) = &spec.pod_template.image {
        table.insert("image".into(), json!(image));
    }
    serde_json::from_value(Value::Object(table)).map_err(|e| format!("spec: {e}"))
}

/// The fields the spec sets (not `null`), by the config file's snake_case names.
fn given(spec: &CodaLabWorkerPoolSpec) -> Result<Map<String, Value>, String> {
    match serde_json::to_value(spec) {
        Ok(Value::Object(fields)) => Ok((fields.into_iter())
            .filter(|(_, value)| !value.is_null())
            .map(|(key, value)| (snake_case(&key), value))
            .collect()),
        Ok(_) => Err("spec: not an object".into()),
        Err(e) => Err(format!("spec: {e}")),
    }
}

/// `maxLaunchesPerTick` → `max_launches_per_tick`.
fn snake_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_core::LaunchMode;
    use std::time::Duration;

    fn pool(spec: Value) -> CodaLabWorkerPool {
        let mut spec = spec;
        spec["server"] = json!("https://codalab.example");
        spec["credentialsSecret"] = json!("codalab-creds");
        CodaLabWorkerPool::new("gpu-a", serde_json::from_value(spec).unwrap())
    }

    #[test]
    fn an_empty_spec_takes_the_config_files_defaults() {
        let resolved = resolve(&pool(json!({})), "gpu-a", "team").unwrap();
        let file: PoolRules =
            serde_json::from_value(json!({"name": "gpu_a", "backend": "kubernetes"})).unwrap();
        let expected = file.policy(
            &Settings::default(),
            KubernetesConfig::default().worker_shape(),
        );
        assert_eq!(resolved.policy, expected);
        assert_eq!(resolved.policy.launch_mode, LaunchMode::Target);
        let k = &resolved.kubernetes;
        assert_eq!(k.namespace, "team");
        assert_eq!(k.manager_id, "clwp-gpu-a");
        assert_eq!(k.credentials_secret.as_deref(), Some("codalab-creds"));
        assert_eq!((k.cpus, k.memory_mb), (1, 2048));
    }

    #[test]
    fn every_field_reaches_core() {
        let spec = json!({"min": 1, "max": 7, "tag": "gpu", "tagExclusive": true,
            "launchMode": "target", "maxLaunchesPerTick": 3, "pendingTimeout": 600,
            "startupGrace": 20, "checkinTimeout": 90, "minSecondsBetweenWorkers": 0,
            "cpus": 4, "gpus": 1, "memoryMb": 8192, "keepFinishedPods": 2,
            "podTemplate": {"image": "registry.local/worker:1"}});
        let resolved = resolve(&pool(spec), "gpu-a", "team").unwrap();
        let p = &resolved.policy;
        assert_eq!((p.min, p.max, p.max_launches_per_tick), (1, 7, 3));
        assert_eq!((p.tag.as_deref(), p.tag_exclusive), (Some("gpu"), true));
        assert_eq!(p.pending_timeout, Some(Duration::from_secs(600)));
        assert_eq!(p.startup_grace, Duration::from_secs(20));
        assert_eq!(p.checkin_timeout, Duration::from_secs(90));
        assert_eq!(p.min_seconds_between_workers, 0);
        assert_eq!((p.shape.cpus, p.shape.gpus), (4, 1));
        assert_eq!(resolved.kubernetes.keep_finished_pods, 2);
        assert_eq!(resolved.kubernetes.image(), "registry.local/worker:1");
    }

    /// A field added to the CRD reaches core through the mapping, or is one of the
    /// operator's own: none is dropped on the way.
    #[test]
    fn every_spec_field_is_a_pool_key_a_kubernetes_key_or_the_operators_own() {
        let own = ["server", "credentials_secret", "pod_template", "suspend"];
        let kubernetes = fields_of::<KubernetesConfig>();
        let schema = serde_json::to_value(schemars::schema_for!(CodaLabWorkerPoolSpec)).unwrap();
        let fields = schema["properties"].as_object().unwrap();
        assert!(fields.len() > own.len(), "{schema}");
        for field in fields.keys().map(|k| snake_case(k)) {
            let known = own.contains(&field.as_str())
                || PoolRules::KEYS.iter().any(|k| k.name == field)
                || kubernetes.contains(&field.as_str());
            assert!(
                known,
                "spec field `{field}` reaches neither core nor the backend"
            );
        }
    }

    #[test]
    fn core_checks_name_the_bad_setting() {
        let cases = [
            (json!({"min": 5, "max": 2}), "max (2) is less than min (5)"),
            (
                json!({"launchMode": "compat", "pendingTimeout": 60}),
                "pending_timeout needs",
            ),
            (json!({"tagExclusive": true}), "tag_exclusive needs a tag"),
            (json!({"cpus": 0}), "cpus must be at least 1"),
            (json!({"podTemplate": {"image": "a b"}}), "image must be"),
        ];
        for (spec, expected) in cases {
            let err = resolve(&pool(spec.clone()), "p", "ns").unwrap_err();
            assert!(err.contains(expected), "{spec}: {err}");
        }
    }

    /// Review 2026-11-27 §1: names that differ only in `.` vs `-`, a doubled `-`, or after
    /// character 58 once gave one id, and each pool took the other's pods for its own.
    #[test]
    fn two_pools_of_one_namespace_never_share_a_manager_id() {
        assert_ne!(manager_id("gpu-a.b"), manager_id("gpu-a-b"));
        assert_ne!(manager_id("gpu--a"), manager_id("gpu-a"));
        let long = "x".repeat(60);
        assert_ne!(
            manager_id(&format!("{long}-a")),
            manager_id(&format!("{long}-b"))
        );
        assert_ne!(pool_label("gpu-a.b"), pool_label("gpu-a-b"));
        assert_ne!(
            pool_label(&format!("{long}{long}-a")),
            pool_label(&format!("{long}{long}-b"))
        );
    }

    /// A name that is a label as it is keeps the id of earlier releases (its pods are found
    /// again after an upgrade); the others get a hashed one.
    #[test]
    fn plain_names_keep_their_id_and_label() {
        assert_eq!(manager_id("gpu-a"), "clwp-gpu-a");
        assert_eq!(pool_label("gpu-a"), "gpu-a");
        assert_eq!(pool_label("gpu-a.b"), "gpu-a.b");
        let hashed = manager_id("gpu-a.b");
        assert!(hashed.starts_with("clwp-gpu-a-b_"), "{hashed}");
        assert_eq!(legacy_manager_id("gpu-a.b"), "clwp-gpu-a-b");
    }

    #[test]
    fn names_become_core_pool_names_and_label_values() {
        assert_eq!(pool_name("gpu-a.b"), "gpu_a_b");
        for name in ["gpu-a.b", "a--b", &"x".repeat(80), &"y.z".repeat(80)] {
            for value in [manager_id(name), pool_label(name)] {
                assert!(names::is_label_value(&value), "{name}: {value}");
            }
        }
    }
}
