//! The `azure_batch` configuration: upstream's flags, plus optional Microsoft Entra ID
//! client-credentials auth in place of the account key.
//!
//! ```toml
//! [azure_batch]
//! account_name = "mybatch"
//! account_key = "…"                 # or CODALAB_WM_AZURE_BATCH__ACCOUNT_KEY, or [azure_batch.entra]
//! service_url = "https://mybatch.westeurope.batch.azure.com"
//! log_container_url = "https://mystore.blob.core.windows.net/logs?sv=…&sig=…"
//! job_id = "codalab-workers"
//! cpus = 4
//! memory_mb = 16384
//! ```

use codalab_wm_backend::Error;
use codalab_wm_backend::bundle::WorkerShape;
use codalab_wm_backend::secret::Secret;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The Entra ID scope of the Batch data plane.
pub const BATCH_SCOPE: &str = "https://batch.core.windows.net/.default";

/// Settings of the Azure Batch backend: the flags of `cl-worker-manager azure-batch` and the
/// `[azure_batch]` table (defaults written once, in the flags). The required settings default
/// to empty and [`AzureBatchConfig::validate`] names the one missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct AzureBatchConfig {
    /// Azure Batch account name (required)
    #[arg(long, default_value = "", hide_default_value = true)]
    pub account_name: String,
    /// Azure Batch account key (required unless `[azure_batch.entra]` is configured); prefer
    /// the environment variable or the config file, which keep it out of the process list
    #[arg(long, env = "AZURE_BATCH_ACCOUNT_KEY", hide_env_values = true, value_parser = secret)]
    #[serde(serialize_with = "expose_option")]
    pub account_key: Option<Secret>,
    /// Azure Batch service URL, https://<account>.<region>.batch.azure.com (required)
    #[arg(long, default_value = "", hide_default_value = true)]
    pub service_url: String,
    /// URL (with a SAS token) of the Azure Storage container that receives the worker logs (required)
    #[arg(long, default_value = "", hide_default_value = true, value_parser = secret)]
    #[serde(serialize_with = "expose")]
    pub log_container_url: Secret,
    /// ID of the Azure Batch job to add tasks to (required)
    #[arg(long, default_value = "", hide_default_value = true)]
    pub job_id: String,
    /// Number of CPUs for each worker
    #[arg(long, default_value_t = 1)]
    pub cpus: u32,
    /// Number of GPUs for each worker
    #[arg(long, default_value_t = 0)]
    pub gpus: u32,
    /// Memory (in MiB) for each worker
    #[arg(long, default_value_t = 2048)]
    pub memory_mb: u64,
    /// User to run the worker containers as
    #[arg(long, default_value = "root")]
    pub user: String,
    /// The worker image. Default `codalab/worker:<CODALAB_VERSION or latest>`, as upstream.
    #[arg(skip)]
    pub worker_image: Option<String>,
    /// Seconds before a Batch request times out.
    #[arg(skip = 30u64)]
    pub request_timeout_seconds: u64,
    /// Microsoft Entra ID client-credentials auth instead of the account key.
    #[arg(skip)]
    pub entra: Option<EntraConfig>,
}

impl Default for AzureBatchConfig {
    fn default() -> Self {
        codalab_wm_backend::describe::defaults()
    }
}

fn secret(value: &str) -> Result<Secret, String> {
    Ok(Secret::new(value))
}

/// Serializes the value itself: only for layering the flags over the config file.
fn expose<S: serde::Serializer>(secret: &Secret, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(secret.expose())
}

fn expose_option<S: serde::Serializer>(
    secret: &Option<Secret>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match secret {
        Some(secret) => expose(secret, serializer),
        None => serializer.serialize_none(),
    }
}

/// A Microsoft Entra ID application (service principal) allowed on the Batch account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntraConfig {
    /// The directory (tenant) id.
    pub tenant_id: String,
    /// The application (client) id.
    pub client_id: String,
    /// The client secret.
    #[serde(serialize_with = "expose")]
    pub client_secret: Secret,
    /// The token endpoint. Default
    /// `https://login.microsoftonline.com/<tenant_id>/oauth2/v2.0/token`.
    #[serde(default)]
    pub token_url: Option<String>,
    /// The scope asked for. Default [`BATCH_SCOPE`].
    #[serde(default)]
    pub scope: Option<String>,
}

impl AzureBatchConfig {
    /// A configuration with upstream's defaults for everything but the required settings.
    pub fn new(
        account_name: impl Into<String>,
        service_url: impl Into<String>,
        job_id: impl Into<String>,
        log_container_url: Secret,
    ) -> Self {
        Self {
            account_name: account_name.into(),
            service_url: service_url.into(),
            log_container_url,
            job_id: job_id.into(),
            ..Self::default()
        }
    }

    /// The resources of one worker.
    pub fn worker_shape(&self) -> WorkerShape {
        WorkerShape::from_flags(self.cpus, self.gpus, self.memory_mb)
    }

    /// The worker image: `worker_image`, else `codalab/worker:<CODALAB_VERSION or latest>`.
    pub fn image(&self) -> String {
        match self.worker_image.as_deref().filter(|i| !i.is_empty()) {
            Some(image) => image.to_owned(),
            None => {
                let version = std::env::var("CODALAB_VERSION")
                    .ok()
                    .filter(|v| !v.is_empty());
                format!("codalab/worker:{}", version.as_deref().unwrap_or("latest"))
            }
        }
    }

    /// The request timeout.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_seconds.max(1))
    }

    /// Checks everything that can be checked without the network.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid =
            |message: String| Err(Error::InvalidConfig(format!("azure_batch: {message}")));
        let required = [
            ("account_name (--account-name)", self.account_name.as_str()),
            ("service_url (--service-url)", self.service_url.as_str()),
            ("job_id (--job-id)", self.job_id.as_str()),
            (
                "log_container_url (--log-container-url)",
                self.log_container_url.expose(),
            ),
            ("user (--user)", self.user.as_str()),
        ];
        if let Some((name, _)) = required.iter().find(|(_, value)| value.trim().is_empty()) {
            return invalid(format!("{name} is required"));
        }
        match (&self.account_key, &self.entra) {
            (None, None) => {
                return invalid(
                    "give the account key (account_key in [azure_batch], \
                     CODALAB_WM_AZURE_BATCH__ACCOUNT_KEY, the secrets directory's file \
                     azure_batch.account_key, or on the azure-batch command line --account-key or \
                     AZURE_BATCH_ACCOUNT_KEY) or [azure_batch.entra]"
                        .into(),
                );
            }
            (Some(_), Some(_)) => {
                return invalid(
                    "give either the account key or [azure_batch.entra], not both".into(),
                );
            }
            _ => {}
        }
        if self.job_id.len() > 64
            || !self
                .job_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return invalid(format!(
                "job_id `{}` must be 1-64 letters, digits, `-` or `_`",
                self.job_id
            ));
        }
        if self.cpus == 0 || self.memory_mb == 0 {
            return invalid(format!(
                "cpus ({}) and memory_mb ({}) must be positive",
                self.cpus, self.memory_mb
            ));
        }
        check_url("service_url", &self.service_url, true)?;
        check_url("log_container_url", self.log_container_url.expose(), false)?;
        if let Some(token_url) = self.entra.as_ref().and_then(|e| e.token_url.as_deref()) {
            check_url("entra.token_url", token_url, true)?;
        }
        Ok(())
    }
}

/// Checks that `value` is an http(s) URL with a host; names it without its query (a SAS token).
fn check_url(name: &str, value: &str, show: bool) -> Result<(), Error> {
    let shown = if show {
        value
    } else {
        value.split('?').next().unwrap_or("")
    };
    match reqwest::Url::parse(value) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => Ok(()),
        _ => Err(Error::InvalidConfig(format!(
            "azure_batch: {name} `{shown}` is not an http(s) URL"
        ))),
    }
}

impl EntraConfig {
    /// The token endpoint.
    pub fn token_url(&self) -> String {
        match self.token_url.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => url.to_owned(),
            None => format!(
                "https://login.microsoftonline.com/{}/oauth2/v2.0/token",
                self.tenant_id
            ),
        }
    }

    /// The scope.
    pub fn scope(&self) -> &str {
        self.scope
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or(BATCH_SCOPE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AzureBatchConfig {
        let mut config = AzureBatchConfig::new(
            "acct",
            "https://acct.westeurope.batch.azure.com",
            "job-1",
            Secret::new("https://s.blob.core.windows.net/logs?sig=SECRET"),
        );
        config.account_key = Some(Secret::new("a2V5"));
        config
    }

    #[test]
    fn upstream_defaults() {
        let parsed: AzureBatchConfig = serde_json::from_str(
            r#"{"account_name":"a","service_url":"https://a.b.batch.azure.com","job_id":"j",
                "log_container_url":"https://s/c?sig=x","account_key":"a2V5"}"#,
        )
        .unwrap();
        assert_eq!(
            (
                parsed.cpus,
                parsed.gpus,
                parsed.memory_mb,
                parsed.user.as_str()
            ),
            (1, 0, 2048, "root")
        );
        assert_eq!(parsed.worker_shape(), WorkerShape::from_flags(1, 0, 2048));
        parsed.validate().unwrap();
        assert!(!format!("{parsed:?}").contains("a2V5"));
        assert!(!format!("{parsed:?}").contains("sig=x"));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<AzureBatchConfig>(
            r#"{"account_name":"a","service_url":"u","job_id":"j","log_container_url":"l","pool":"p"}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `pool`"), "{err}");
    }

    #[test]
    fn validation_names_the_setting_and_hides_secrets() {
        let mut c = config();
        c.job_id.clear();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("job_id (--job-id) is required")
        );
        let mut c = config();
        c.account_key = None;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("AZURE_BATCH_ACCOUNT_KEY")
        );
        let mut c = config();
        c.job_id = "has space".into();
        assert!(c.validate().is_err());
        let mut c = config();
        c.log_container_url = Secret::new("not a url?sig=SECRET");
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("log_container_url") && !err.contains("SECRET"),
            "{err}"
        );
        let mut c = config();
        c.entra = Some(EntraConfig {
            tenant_id: "t".into(),
            client_id: "c".into(),
            client_secret: Secret::new("s"),
            token_url: None,
            scope: None,
        });
        assert!(c.validate().unwrap_err().to_string().contains("not both"));
        c.account_key = None;
        c.validate().unwrap();
        let entra = c.entra.unwrap();
        assert_eq!(
            entra.token_url(),
            "https://login.microsoftonline.com/t/oauth2/v2.0/token"
        );
        assert_eq!(entra.scope(), BATCH_SCOPE);
    }

    #[test]
    fn image_defaults_to_latest_or_the_explicit_one() {
        let mut c = config();
        c.worker_image = Some("registry/worker:1.2".into());
        assert_eq!(c.image(), "registry/worker:1.2");
        if std::env::var_os("CODALAB_VERSION").is_none() {
            c.worker_image = None;
            assert_eq!(c.image(), "codalab/worker:latest");
        }
    }
}
