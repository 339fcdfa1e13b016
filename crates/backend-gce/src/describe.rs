//! The Compute Engine backend as the program sees it: its name, table, flags (those of
//! [`GceConfig`]), what `config check` needs and how it is built.

use crate::{GceBackend, GceConfig};
use codalab_wm_backend::describe::{BackendConfig, BackendContext, Kind, Placement};
use codalab_wm_backend::{Result, WorkerBackend, WorkerShape};
use serde_json::{Map, Value};
use std::sync::Arc;

/// The description of the Compute Engine backend, for the program's list of backends.
pub static KIND: Kind<GceConfig> = Kind::new();

#[codalab_wm_backend::async_trait]
impl BackendConfig for GceConfig {
    const NAME: &'static str = crate::error::BACKEND;
    const TABLE: &'static str = "gce";
    const ABOUT: &'static str = "Start workers as Compute Engine instances (Spot VMs by default)";
    const REQUIRED: &'static [(&'static str, &'static str)] = &[
        ("project", "\"XXX-CUSTOMIZE-THIS-XXX\""),
        ("zones", "[\"XXX-CUSTOMIZE-THIS-XXX\"]"),
        ("password_secret", "\"XXX-CUSTOMIZE-THIS-XXX\""),
    ];
    const BY_ORIGIN: bool = true;
    const IDENTITY: &'static [&'static str] = &["project", "manager_id", "pool"];
    const EXTRA_DOCS: &'static [(&'static str, &'static str)] = &[
        (
            "worker_image",
            "Worker image [default: codalab/worker:<CODALAB_VERSION or latest>]",
        ),
        ("api_endpoint", "The Compute Engine API root"),
        (
            "token_url",
            "The OAuth token endpoint [default: the key file's token_uri]",
        ),
        (
            "metadata_url",
            "The metadata server [default: GCE_METADATA_HOST or metadata.google.internal]",
        ),
        (
            "request_timeout_seconds",
            "Seconds before one API request times out",
        ),
        (
            "operation_timeout_seconds",
            "Seconds to wait for an insert or delete operation",
        ),
        (
            "insert_wait_seconds",
            "Seconds a tick waits for one insert to finish (at most operation_timeout_seconds)",
        ),
    ];
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        ("accelerator_type", "\"nvidia-tesla-t4\""),
        ("subnetwork", "\"regions/us-central1/subnetworks/workers\""),
        ("credentials_file", "\"/etc/codalab-wm/gce-key.json\""),
        ("worker_image", "\"codalab/worker:1.7.5\""),
    ];
    const GPU_POOL: &'static [(&'static str, &'static str)] = &[
        ("machine_type", "\"n1-standard-8\""),
        ("accelerator_type", "\"nvidia-tesla-t4\""),
    ];

    fn validate(&self) -> std::result::Result<(), String> {
        GceConfig::validate(self).map_err(|e| e.to_string())
    }

    fn shape(&self) -> WorkerShape {
        self.worker_shape()
    }

    /// Spot VMs (the default) are preempted at Google's will.
    fn reclaimable(&self) -> bool {
        self.provisioning == crate::config::Provisioning::Spot
    }

    /// A pool's instances carry its name in the `codalab-wm-pool` label.
    fn placement_defaults(placement: Placement<'_>) -> Map<String, Value> {
        let mut defaults = Map::new();
        if let Some(pool) = placement.pool {
            defaults.insert("pool".into(), pool.into());
        }
        defaults
    }

    async fn build(self, context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
        let backend = GceBackend::new(self, &context.credentials)?;
        Ok(Arc::new(
            backend
                .with_origin(context.origin.clone())
                .read_only(context.read_only),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_backend::describe::BackendKind;

    #[test]
    fn pools_get_their_own_pool_label_and_identity_decides_sharing() {
        let placement = |pool| Placement {
            pool,
            password_file: None,
        };
        let defaults = KIND.placement_defaults(placement(Some("gpu")));
        assert_eq!(defaults["pool"], "gpu");
        assert!(KIND.placement_defaults(placement(None)).is_empty());
        let table = |pool: &str| {
            let mut t = Map::new();
            t.insert("project".into(), "p".into());
            t.insert("manager_id".into(), "codalab-wm".into());
            t.insert("pool".into(), pool.into());
            t
        };
        assert!(KIND.shares_jobs(&table("cpu"), &table("cpu")).is_some());
        assert!(KIND.shares_jobs(&table("cpu"), &table("gpu")).is_none());
    }

    /// Spot VMs, the default, are reclaimable: their workers start with `--preemptible`.
    #[test]
    fn spot_instances_are_reclaimable_standard_ones_are_not() {
        let mut config = codalab_wm_backend::describe::defaults::<GceConfig>();
        assert_eq!(config.provisioning, crate::Provisioning::Spot);
        assert!(BackendConfig::reclaimable(&config));
        config.provisioning = crate::Provisioning::Standard;
        assert!(!BackendConfig::reclaimable(&config));
    }

    #[test]
    fn a_table_is_read_with_the_key_named_in_errors() {
        let error = KIND
            .validate(&serde_json::json!({"project": "p", "zones": ["z"], "password_secret": "s", "pool": "Bad Pool"}))
            .unwrap_err();
        assert!(error.contains("pool `Bad Pool`"), "{error}");
        KIND.validate(
            &serde_json::json!({"project": "p", "zones": "z1,z2", "password_secret": "s"}),
        )
        .unwrap();
    }
}
