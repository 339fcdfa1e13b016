//! Flags and construction of the `azure_batch` backend (workers as Azure Batch tasks).

use super::BackendContext;
use anyhow::Result;
use codalab_wm_azure::{AzureBatchBackend, AzureBatchConfig};
use codalab_wm_core::WorkerBackend;
use figment::Figment;
use std::fmt;
use std::sync::Arc;

/// The config-file table (and `CODALAB_WM_AZURE_BATCH__*` env prefix) of this backend.
pub const TABLE: &str = "azure_batch";

/// Flags of `cl-worker-manager azure-batch`, upstream's names. Every field is optional so it
/// layers over the config file; the required ones are checked when the backend is built.
#[derive(Default, clap::Args, serde::Serialize)]
pub struct Args {
    /// Azure Batch account name (required)
    #[arg(long = "account-name")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_name: Option<String>,
    /// Azure Batch account key (required unless `[azure_batch.entra]` is configured); prefer
    /// the environment variable or the config file, which keep it out of the process list
    #[arg(
        long = "account-key",
        env = "AZURE_BATCH_ACCOUNT_KEY",
        hide_env_values = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_key: Option<String>,
    /// Azure Batch service URL, https://<account>.<region>.batch.azure.com (required)
    #[arg(long = "service-url")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_url: Option<String>,
    /// URL (with a SAS token) of the Azure Storage container that receives the worker logs (required)
    #[arg(long = "log-container-url")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_container_url: Option<String>,
    /// ID of the Azure Batch job to add tasks to (required)
    #[arg(long = "job-id")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Number of CPUs for each worker [default: 1]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Number of GPUs for each worker [default: 0]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Memory (in MiB) for each worker [default: 2048]
    #[arg(long = "memory-mb")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// User to run the worker containers as [default: root]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The manager's process flags, accepted after the backend name too.
    #[command(flatten)]
    #[serde(skip)]
    pub process: crate::args::ProcessArgs,
}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |value: &Option<String>| value.as_ref().map(|_| "***");
        f.debug_struct("Args")
            .field("account_name", &self.account_name)
            .field("account_key", &hidden(&self.account_key))
            .field("service_url", &self.service_url)
            .field("log_container_url", &hidden(&self.log_container_url))
            .field("job_id", &self.job_id)
            .field("cpus", &self.cpus)
            .field("gpus", &self.gpus)
            .field("memory_mb", &self.memory_mb)
            .field("user", &self.user)
            .finish()
    }
}

/// Builds the Azure Batch backend from the `[azure_batch]` table.
pub async fn build(config: &Figment, context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
    let azure: AzureBatchConfig = config
        .focus(TABLE)
        .extract()
        .map_err(|e| crate::diagnose::settings_error(e, Some(TABLE)))?;
    let backend = AzureBatchBackend::new(azure, context.credentials.clone())?;
    Ok(Arc::new(backend))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use figment::providers::Serialized;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn flags_layer_into_the_table_and_the_key_never_prints() {
        let cli = Cli::try_parse_from([
            "x",
            "--account-name",
            "acct",
            "--account-key",
            "S2VZLVNFQ1JFVA==",
            "--service-url",
            "https://acct.westeurope.batch.azure.com",
            "--log-container-url",
            "https://s.blob.core.windows.net/logs?sig=SAS-SECRET",
            "--job-id",
            "job-1",
            "--memory-mb",
            "4096",
        ])
        .unwrap();
        let shown = format!("{:?}", cli.args);
        assert!(
            !shown.contains("S2VZ") && !shown.contains("SAS-SECRET"),
            "{shown}"
        );
        let figment = Figment::from(Serialized::default(TABLE, &cli.args));
        let config: AzureBatchConfig = figment.focus(TABLE).extract().unwrap();
        assert_eq!(
            (config.cpus, config.memory_mb, config.user.as_str()),
            (1, 4096, "root")
        );
        assert_eq!(config.account_key.unwrap().expose(), "S2VZLVNFQ1JFVA==");
        assert!(!format!("{:?}", config.log_container_url).contains("SAS-SECRET"));
    }
}
