//! The `gce` configuration: where and what each worker instance is.
//!
//! ```toml
//! [gce]
//! project = "my-project"
//! zones = ["us-central1-a", "us-central1-b"]   # tried in order when one has no capacity
//! machine_type = "n1-standard-8"
//! accelerator_type = "nvidia-tesla-t4"
//! gpus = 1
//! provisioning = "spot"
//! password_secret = "codalab-password"          # Secret Manager, read by the instance
//! ```

use codalab_wm_backend::Error;
use codalab_wm_backend::bundle::WorkerShape;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The Compute Engine API root.
pub const DEFAULT_API_ENDPOINT: &str = "https://compute.googleapis.com/compute/v1/";
/// The metadata server (overridden by `GCE_METADATA_HOST`, as Google's libraries do).
pub const DEFAULT_METADATA_URL: &str = "http://metadata.google.internal";
/// Container-Optimized OS: docker included.
pub const DEFAULT_IMAGE: &str = "projects/cos-cloud/global/images/family/cos-stable";

/// How a worker instance is provisioned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Provisioning {
    /// Spot VM (`provisioningModel = SPOT`, `instanceTerminationAction = DELETE`): cheap, and
    /// a preempted worker is deleted rather than stopped.
    Spot,
    /// Standard VM.
    Standard,
}

/// Settings of the `gce` backend: the flags of `cl-worker-manager gce` and the `[gce]` table
/// (defaults written once, in the flags).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct GceConfig {
    /// Google Cloud project of the worker instances (required)
    #[arg(long, default_value = "", hide_default_value = true)]
    pub project: String,
    /// Zones to create workers in, tried in order when one has no capacity (required)
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    #[serde(deserialize_with = "zone_list")]
    pub zones: Vec<String>,
    /// Machine type of each worker instance
    #[arg(long, default_value = "e2-standard-4")]
    pub machine_type: String,
    /// vCPUs of the machine type (what the manager matches bundles against)
    #[arg(long, default_value_t = 4)]
    pub cpus: u32,
    /// Memory (in MiB) of the machine type (what the manager matches bundles against)
    #[arg(long, default_value_t = 16384)]
    pub memory_mb: u64,
    /// Accelerator type of each worker (`nvidia-tesla-t4` …)
    #[arg(long)]
    pub accelerator_type: Option<String>,
    /// Number of GPUs (accelerators of `--accelerator-type`) of each worker
    #[arg(long, default_value_t = 0)]
    pub gpus: u32,
    /// Boot disk size in GB
    #[arg(long, default_value_t = 50)]
    pub boot_disk_size_gb: u64,
    /// Boot image (a Container-Optimized OS image or family, or an image with docker)
    #[arg(long, default_value = DEFAULT_IMAGE)]
    pub image: String,
    /// VPC network [default: the project's `default` network]
    #[arg(long)]
    pub network: Option<String>,
    /// Subnetwork (`regions/<region>/subnetworks/<name>`)
    #[arg(long)]
    pub subnetwork: Option<String>,
    /// No external IP (the subnetwork then needs Cloud NAT to reach CodaLab and the registry)
    #[arg(long)]
    pub no_external_ip: bool,
    /// Service account of the instances: it reads the password secret. Give a dedicated one
    /// with only `roles/secretmanager.secretAccessor` on that secret: `default` (the project's
    /// default compute account, often Editor) is accepted with a warning. Bundles cannot use
    /// it either way: the startup script closes the metadata server to containers
    #[arg(long, default_value = "default")]
    pub service_account: String,
    /// Spot or standard VMs
    #[arg(long, value_enum, default_value_t = Provisioning::Spot)]
    pub provisioning: Provisioning,
    /// Secret Manager secret holding the CodaLab password, read by each instance with its
    /// service account (`name`, `projects/<p>/secrets/<name>` or a version) (required)
    #[arg(long, default_value = "", hide_default_value = true)]
    pub password_secret: String,
    /// What labels this manager's instances (`codalab-wm-manager=<id>`). Instances of another
    /// deployment (worker server and CodaLab user: the `codalab-wm-origin` label) under the
    /// same id and pool are neither counted, stopped nor reaped; give each deployment in a
    /// project its own id all the same
    #[arg(long, default_value = "codalab-wm")]
    pub manager_id: String,
    /// The pool label of the instances (`codalab-wm-pool=<pool>`); a pool's name by default
    #[arg(long, default_value = "default")]
    pub pool: String,
    /// User to run the worker container as
    #[arg(long, default_value = "root")]
    pub user: String,
    /// Service account key file (JSON); else the metadata server's account
    #[arg(long, env = "GOOGLE_APPLICATION_CREDENTIALS")]
    pub credentials_file: Option<String>,
    /// The worker image. Default `codalab/worker:<CODALAB_VERSION or latest>`.
    #[arg(skip)]
    pub worker_image: Option<String>,
    /// The Compute Engine API root.
    #[arg(skip = DEFAULT_API_ENDPOINT.to_owned())]
    pub api_endpoint: String,
    /// The OAuth token endpoint [default: the key file's `token_uri`].
    #[arg(skip)]
    pub token_url: Option<String>,
    /// The metadata server [default: `GCE_METADATA_HOST` or metadata.google.internal].
    #[arg(skip)]
    pub metadata_url: Option<String>,
    /// Seconds before one API request times out.
    #[arg(skip = 30u64)]
    pub request_timeout_seconds: u64,
    /// Seconds to wait for an insert or delete operation.
    #[arg(skip = 300u64)]
    pub operation_timeout_seconds: u64,
    /// Seconds a tick waits for one insert to finish (at most `operation_timeout_seconds`):
    /// long enough to see a stockout, short enough that a burst does not stall the loop.
    #[arg(skip = 60u64)]
    pub insert_wait_seconds: u64,
}

impl Default for GceConfig {
    fn default() -> Self {
        codalab_wm_backend::describe::defaults()
    }
}

impl GceConfig {
    /// A configuration with the defaults and the required settings.
    pub fn new(project: &str, zones: &[&str], password_secret: &str) -> Self {
        Self {
            project: project.to_owned(),
            zones: zones.iter().map(|z| (*z).to_owned()).collect(),
            password_secret: password_secret.to_owned(),
            ..Self::default()
        }
    }

    /// The resources of one worker.
    pub fn worker_shape(&self) -> WorkerShape {
        WorkerShape::from_flags(self.cpus, self.gpus, self.memory_mb)
    }

    /// The worker image: `worker_image`, else `codalab/worker:<CODALAB_VERSION or latest>`.
    pub fn worker_image(&self) -> String {
        match self.worker_image.as_deref().filter(|i| !i.is_empty()) {
            Some(image) => image.to_owned(),
            None => {
                let version = std::env::var("CODALAB_VERSION").ok();
                let version = version.filter(|v| !v.is_empty());
                format!("codalab/worker:{}", version.as_deref().unwrap_or("latest"))
            }
        }
    }

    /// The Secret Manager version the instances read: `projects/<p>/secrets/<s>/versions/<v>`.
    pub fn password_secret_version(&self) -> String {
        let secret = self.password_secret.trim();
        let full = if secret.starts_with("projects/") {
            secret.to_owned()
        } else {
            format!("projects/{}/secrets/{secret}", self.project)
        };
        if full.contains("/versions/") {
            full
        } else {
            format!("{full}/versions/latest")
        }
    }

    /// The request timeout.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_seconds.max(1))
    }

    /// How long to wait for an operation.
    pub fn operation_timeout(&self) -> Duration {
        Duration::from_secs(self.operation_timeout_seconds.max(1))
    }

    /// How long a tick waits for one insert.
    pub fn insert_wait(&self) -> Duration {
        Duration::from_secs(self.insert_wait_seconds.max(1)).min(self.operation_timeout())
    }

    /// Checks everything that can be checked without the network; the error names the key.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |message: String| Err(Error::InvalidConfig(format!("gce: {message}")));
        let required = [
            ("project (--project)", self.project.as_str()),
            ("password_secret (--password-secret)", &self.password_secret),
            ("machine_type (--machine-type)", &self.machine_type),
            ("image (--image)", &self.image),
            ("user (--user)", &self.user),
        ];
        if let Some((name, _)) = required.iter().find(|(_, v)| v.trim().is_empty()) {
            return invalid(format!("{name} is required"));
        }
        if self.zones.is_empty() || self.zones.iter().any(|z| z.trim().is_empty()) {
            return invalid("zones (--zones) needs at least one zone, none empty".into());
        }
        for (key, value) in [("manager_id", &self.manager_id), ("pool", &self.pool)] {
            if !is_label_value(value) {
                return invalid(format!(
                    "{key} `{value}` must be 1-63 lowercase letters, digits, `-` or `_` (a label value)"
                ));
            }
        }
        if self.gpus > 0 && self.accelerator_type.as_deref().is_none_or(str::is_empty) {
            return invalid("gpus needs accelerator_type".into());
        }
        if self.boot_disk_size_gb < 10 {
            return invalid(format!(
                "boot_disk_size_gb {} is below Compute Engine's minimum of 10",
                self.boot_disk_size_gb
            ));
        }
        if self.cpus == 0 || self.memory_mb == 0 {
            return invalid("cpus and memory_mb must be positive".into());
        }
        for (key, url) in [
            ("api_endpoint", Some(&self.api_endpoint)),
            ("token_url", self.token_url.as_ref()),
        ] {
            if let Some(url) = url
                && !url.starts_with("https://")
                && !url.starts_with("http://")
            {
                return invalid(format!("{key} `{url}` is not an http(s) URL"));
            }
        }
        Ok(())
    }
}

/// A list of zones, or one string of comma-separated zones (`CODALAB_WM_GCE__ZONES=a,b`).
fn zone_list<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Zones {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Zones::deserialize(deserializer)? {
        Zones::One(text) => text
            .split(',')
            .map(str::trim)
            .filter(|z| !z.is_empty())
            .map(str::to_owned)
            .collect(),
        Zones::Many(zones) => zones,
    })
}

/// A Compute Engine label value: lowercase letters, digits, `-`, `_`, at most 63.
pub fn is_label_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_required_settings() {
        let parsed: GceConfig = serde_json::from_str(
            r#"{"project":"p","zones":["us-central1-a"],"password_secret":"pw"}"#,
        )
        .unwrap();
        parsed.validate().unwrap();
        assert_eq!(parsed.provisioning, Provisioning::Spot);
        assert_eq!(parsed.image, DEFAULT_IMAGE);
        assert_eq!(parsed.api_endpoint, DEFAULT_API_ENDPOINT);
        assert_eq!(parsed.worker_shape(), WorkerShape::from_flags(4, 0, 16384));
        assert_eq!(
            parsed.password_secret_version(),
            "projects/p/secrets/pw/versions/latest"
        );
        let one: GceConfig =
            serde_json::from_str(r#"{"zones":"us-central1-a, us-central1-b"}"#).unwrap();
        assert_eq!(one.zones, ["us-central1-a", "us-central1-b"]);
        let err = serde_json::from_str::<GceConfig>(r#"{"zone":"a"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `zone`"), "{err}");
    }

    #[test]
    fn validation_names_the_setting() {
        let ok = GceConfig::new("p", &["z"], "pw");
        type Change = fn(&mut GceConfig);
        let cases: Vec<(Change, &str)> = vec![
            (|c| c.project.clear(), "project (--project) is required"),
            (|c| c.zones.clear(), "zones (--zones)"),
            (|c| c.password_secret.clear(), "password_secret"),
            (|c| c.pool = "GPU Pool".into(), "pool `GPU Pool`"),
            (|c| c.gpus = 1, "gpus needs accelerator_type"),
            (|c| c.boot_disk_size_gb = 5, "boot_disk_size_gb 5"),
            (
                |c| c.token_url = Some("ftp://x".into()),
                "token_url `ftp://x`",
            ),
        ];
        for (change, expected) in cases {
            let mut config = ok.clone();
            change(&mut config);
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(expected), "`{err}` lacks `{expected}`");
        }
    }

    #[test]
    fn secret_versions() {
        let mut c = GceConfig::new("p", &["z"], "projects/q/secrets/s");
        assert_eq!(
            c.password_secret_version(),
            "projects/q/secrets/s/versions/latest"
        );
        c.password_secret = "projects/q/secrets/s/versions/3".into();
        assert_eq!(
            c.password_secret_version(),
            "projects/q/secrets/s/versions/3"
        );
    }
}
