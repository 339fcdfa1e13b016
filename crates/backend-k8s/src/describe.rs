//! The Kubernetes backend as the program sees it: its name, table, flags (those of
//! [`KubernetesConfig`]), what `config check` needs and how it is built.

use crate::{KubernetesBackend, KubernetesConfig};
use codalab_wm_backend::describe::{BackendConfig, BackendContext, Kind};
use codalab_wm_backend::{Result, WorkerBackend, WorkerShape};
use std::sync::Arc;

/// The description of the Kubernetes backend, for the program's list of backends.
pub static KIND: Kind<KubernetesConfig> = Kind::new();

#[codalab_wm_backend::async_trait]
impl BackendConfig for KubernetesConfig {
    const NAME: &'static str = crate::error::BACKEND;
    const TABLE: &'static str = "kubernetes";
    const ABOUT: &'static str = "Start workers as Kubernetes pods";
    const BY_ORIGIN: bool = true;
    const IDENTITY: &'static [&'static str] = &["cluster_host", "namespace", "manager_id"];
    const EXTRA_DOCS: &'static [(&'static str, &'static str)] = &[(
        "request_timeout_seconds",
        "Timeout of one API request, in seconds",
    )];
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        ("cluster_host", "\"https://127.0.0.1:6443\""),
        ("auth_token", "\"<token>\""),
        ("cert_path", "\"/etc/kubernetes/ca.crt\""),
        ("cert", "\"-----BEGIN CERTIFICATE-----\\n…\""),
        ("nfs_volume_name", "\"codalab-nfs\""),
        ("image", "\"codalab/worker:1.7.5\""),
        ("credentials_secret", "\"codalab-worker-credentials\""),
    ];

    const GPU_POOL: &'static [(&'static str, &'static str)] = &[("manager_id", "\"codalab-gpu\"")];

    fn validate(&self) -> std::result::Result<(), String> {
        KubernetesConfig::validate(self).map_err(|e| e.to_string())
    }

    fn shape(&self) -> WorkerShape {
        self.worker_shape()
    }

    async fn build(self, context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
        let backend = KubernetesBackend::new(&self, &context.credentials, &context.worker).await?;
        let backend = backend.with_origin(context.origin.clone());
        Ok(Arc::new(backend.read_only(context.read_only)))
    }
}
