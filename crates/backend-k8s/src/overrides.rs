//! What a caller adds to the worker Pods beyond the backend's own manifest: node selector,
//! tolerations, priority class, owner references and extra labels (the operator's
//! `podTemplate` and the pool that owns the pods).

use k8s_openapi::api::core::v1::{Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::collections::BTreeMap;

/// Additions to every worker Pod; empty by default (the Pod is the backend's alone).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodOverrides {
    /// Nodes the workers may run on.
    pub node_selector: BTreeMap<String, String>,
    /// Taints the workers tolerate.
    pub tolerations: Vec<Toleration>,
    /// The workers' PriorityClass.
    pub priority_class_name: Option<String>,
    /// The objects owning the Pods (garbage collected with them).
    pub owner_references: Vec<OwnerReference>,
    /// Labels added to the backend's own (which win on a clash).
    pub labels: BTreeMap<String, String>,
}

impl PodOverrides {
    /// Applies the additions to `pod`.
    pub fn apply(&self, pod: &mut Pod) {
        if !self.labels.is_empty() {
            let labels = pod.metadata.labels.get_or_insert_with(Default::default);
            for (key, value) in &self.labels {
                labels.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
        if !self.owner_references.is_empty() {
            pod.metadata.owner_references = Some(self.owner_references.clone());
        }
        let spec = pod.spec.get_or_insert_with(Default::default);
        if !self.node_selector.is_empty() {
            spec.node_selector = Some(self.node_selector.clone());
        }
        if !self.tolerations.is_empty() {
            spec.tolerations = Some(self.tolerations.clone());
        }
        if let Some(class) = &self.priority_class_name {
            spec.priority_class_name = Some(class.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn overrides_land_in_the_pod_and_never_replace_the_backends_labels() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {"app": "cl-worker"}},
            "spec": {"containers": [{"name": "cl-worker"}]}}))
        .unwrap();
        let overrides = PodOverrides {
            node_selector: BTreeMap::from([("pool".into(), "gpu".into())]),
            tolerations: vec![
                serde_json::from_value(json!({"key": "gpu", "operator": "Exists"})).unwrap(),
            ],
            priority_class_name: Some("batch".into()),
            labels: BTreeMap::from([
                ("app".into(), "x".into()),
                ("codalab.org/pool".into(), "gpu".into()),
            ]),
            ..PodOverrides::default()
        };
        overrides.apply(&mut pod);
        let value = serde_json::to_value(&pod).unwrap();
        assert_eq!(
            value["metadata"]["labels"],
            json!({"app": "cl-worker", "codalab.org/pool": "gpu"})
        );
        assert_eq!(value["spec"]["nodeSelector"], json!({"pool": "gpu"}));
        assert_eq!(value["spec"]["tolerations"][0]["key"], "gpu");
        assert_eq!(value["spec"]["priorityClassName"], "batch");
        let mut plain = pod.clone();
        PodOverrides::default().apply(&mut plain);
        assert_eq!(plain, pod, "no overrides change nothing");
    }
}
