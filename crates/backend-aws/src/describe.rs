//! The AWS Batch backend as the program sees it: its name, table, flags (those of
//! [`AwsBatchConfig`]), what `config check` needs and how it is built.

use crate::{AwsBatchBackend, AwsBatchConfig};
use codalab_wm_backend::describe::{BackendConfig, BackendContext, Kind};
use codalab_wm_backend::{Result, WorkerBackend, WorkerShape};
use std::sync::Arc;

/// The description of the AWS Batch backend, for the program's list of backends.
pub static KIND: Kind<AwsBatchConfig> = Kind::new();

#[codalab_wm_backend::async_trait]
impl BackendConfig for AwsBatchConfig {
    const NAME: &'static str = crate::error::BACKEND;
    const TABLE: &'static str = "aws_batch";
    const ABOUT: &'static str = "Submit workers as AWS Batch jobs";
    const IDENTITY: &'static [&'static str] = &[
        "region",
        "job_queue",
        "job_definition_name",
        "manager_id",
        "job_filter",
    ];
    const EXAMPLES: &'static [(&'static str, &'static str)] = &[
        ("job_filter", "\"codalab-worker(-[0-9a-f]{32})?\""),
        ("manager_id", "\"codalab-worker\""),
        (
            "codalab_credentials_secret_arn",
            "\"arn:aws:secretsmanager:us-east-1:123456789012:secret:codalab\"",
        ),
        (
            "execution_role_arn",
            "\"arn:aws:iam::123456789012:role/ecsTaskExecutionRole\"",
        ),
    ];

    const GPU_POOL: &'static [(&'static str, &'static str)] = &[
        ("job_queue", "\"codalab-batch-gpu\""),
        ("manager_id", "\"codalab-worker-gpu\""),
    ];

    fn validate(&self) -> std::result::Result<(), String> {
        AwsBatchConfig::validate(self).map_err(|e| e.to_string())
    }

    fn shape(&self) -> WorkerShape {
        AwsBatchConfig::shape(self)
    }

    async fn build(self, context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
        let backend = AwsBatchBackend::new(self, &context.worker, &context.credentials).await?;
        Ok(Arc::new(backend))
    }
}
