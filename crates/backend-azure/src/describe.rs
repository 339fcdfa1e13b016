//! The Azure Batch backend as the program sees it: its name, table, flags (those of
//! [`AzureBatchConfig`]), what `config check` needs and how it is built.

use crate::{AzureBatchBackend, AzureBatchConfig, EntraConfig};
use codalab_wm_backend::describe::{BackendConfig, BackendContext, Kind, fields_of};
use codalab_wm_backend::{Result, WorkerBackend, WorkerShape};
use std::sync::Arc;

/// The description of the Azure Batch backend, for the program's list of backends.
pub static KIND: Kind<AzureBatchConfig> = Kind::new();

const PLACEHOLDER: &str = "\"XXX-CUSTOMIZE-THIS-XXX\"";

#[codalab_wm_backend::async_trait]
impl BackendConfig for AzureBatchConfig {
    const NAME: &'static str = crate::error::BACKEND;
    const TABLE: &'static str = "azure_batch";
    const ABOUT: &'static str = "Submit workers as Azure Batch tasks";
    const REQUIRED: &'static [(&'static str, &'static str)] = &[
        ("account_name", PLACEHOLDER),
        ("account_key", PLACEHOLDER),
        (
            "service_url",
            "\"https://XXX-CUSTOMIZE-THIS-XXX.westeurope.batch.azure.com\"",
        ),
        (
            "log_container_url",
            "\"https://XXX-CUSTOMIZE-THIS-XXX.blob.core.windows.net/logs?sv=XXX-CUSTOMIZE-THIS-XXX\"",
        ),
        ("job_id", PLACEHOLDER),
    ];
    const IDENTITY: &'static [&'static str] = &["account_name", "service_url", "job_id"];
    const EXTRA_DOCS: &'static [(&'static str, &'static str)] = &[
        (
            "worker_image",
            "Worker image [default: codalab/worker:<CODALAB_VERSION or latest>]",
        ),
        (
            "request_timeout_seconds",
            "Seconds before a Batch request times out",
        ),
        (
            "entra",
            "Microsoft Entra ID client-credentials auth instead of the account key",
        ),
    ];
    const EXAMPLES: &'static [(&'static str, &'static str)] =
        &[("worker_image", "\"codalab/worker:1.7.5\"")];

    const GPU_POOL: &'static [(&'static str, &'static str)] =
        &[("job_id", "\"XXX-CUSTOMIZE-THIS-XXX-gpu\"")];

    fn subtables() -> Vec<(&'static str, &'static [&'static str])> {
        vec![("entra", fields_of::<EntraConfig>())]
    }

    fn validate(&self) -> std::result::Result<(), String> {
        AzureBatchConfig::validate(self).map_err(|e| e.to_string())
    }

    fn shape(&self) -> WorkerShape {
        self.worker_shape()
    }

    async fn build(self, context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
        let backend = AzureBatchBackend::new(self, context.credentials.clone())?;
        Ok(Arc::new(backend.read_only(context.read_only)))
    }
}
