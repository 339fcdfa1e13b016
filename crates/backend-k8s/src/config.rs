//! The options of the Kubernetes backend (the `[kubernetes]` table of the config file and the
//! flags of `cl-worker-manager kubernetes`), and their validation.

use crate::names;
use codalab_wm_backend::bundle::WorkerShape;
use codalab_wm_backend::error::{Error, Result};
use codalab_wm_backend::secret::Secret;
use serde::{Deserialize, Serialize};

/// How workers run bundles (`cl-worker --bundle-runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BundleRuntime {
    /// Bundles run as Docker containers next to the worker (upstream's default).
    #[default]
    Docker,
    /// Bundles run as pods on the cluster; workers get the `--kubernetes-*` flags.
    Kubernetes,
}

/// The values of `--bundle-runtime`, as [`BundleRuntime::as_str`] spells them.
impl clap::ValueEnum for BundleRuntime {
    fn value_variants<'a>() -> &'a [Self] {
        &[BundleRuntime::Docker, BundleRuntime::Kubernetes]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

impl BundleRuntime {
    /// The value of `--bundle-runtime`.
    pub fn as_str(self) -> &'static str {
        match self {
            BundleRuntime::Docker => "docker",
            BundleRuntime::Kubernetes => "kubernetes",
        }
    }
}

/// The settings of the `kubernetes` backend: the flags of `cl-worker-manager kubernetes` and
/// the `[kubernetes]` table (defaults written once, in the flags).
///
/// Upstream's flags (`--bundle-runtime`, `--cluster-host`, `--auth-token`, `--cert-path`,
/// `--cert`, `--nfs-volume-name`, `--cpus`, `--gpus`, `--memory-mb`) plus the namespace, the
/// manager id that marks this manager's pods, and the history limit of finished pods. The
/// token is serialized only to layer the flags over the file; `Debug` hides it.
#[derive(Debug, Clone, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// The runtime through which workers run bundles
    #[arg(long, value_enum, default_value = "docker")]
    pub bundle_runtime: BundleRuntime,
    /// URL of the Kubernetes API server; without it the kubeconfig (KUBECONFIG, ~/.kube/config)
    /// or the in-cluster service account is used
    #[arg(long)]
    pub cluster_host: Option<String>,
    /// Bearer token for the API server (and, with --bundle-runtime kubernetes, for the workers);
    /// prefer CODALAB_WM_KUBERNETES__AUTH_TOKEN or the config file, which keep it out of the
    /// process list
    #[arg(long, value_parser = secret)]
    #[serde(serialize_with = "expose_option")]
    pub auth_token: Option<Secret>,
    /// Path of the cluster's CA certificate (PEM); /dev/null means "use --cert"
    #[arg(long)]
    pub cert_path: Option<String>,
    /// Contents of the cluster's CA certificate (PEM; a literal \n counts as a newline)
    #[arg(long)]
    pub cert: Option<String>,
    /// Name of the NFS persistent volume: workers mount the claim <name>-claim as work dir
    #[arg(long)]
    pub nfs_volume_name: Option<String>,
    /// Number of CPUs for each worker
    #[arg(long, default_value_t = 1)]
    pub cpus: u32,
    /// Number of GPUs (nvidia.com/gpu) for each worker
    #[arg(long, default_value_t = 0)]
    pub gpus: u32,
    /// Memory (in MiB) for each worker
    #[arg(long, default_value_t = 2048)]
    pub memory_mb: u64,
    /// Namespace of the worker pods and the credentials Secret
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Finished worker pods kept for inspection; older ones are deleted
    #[arg(long, default_value_t = 10)]
    pub keep_finished_pods: usize,
    /// Marks this manager's pods (label codalab-wm/manager-id), its credentials Secret and
    /// scratch dir; keep it across restarts. Give each deployment in a namespace its own: a
    /// manager whose Secret already holds another CodaLab user refuses to start
    #[arg(long, default_value = "default")]
    pub manager_id: String,
    /// Worker image [default: codalab/worker:$CODALAB_VERSION, else codalab/worker:latest]
    #[arg(long)]
    pub image: Option<String>,
    /// Existing Secret with the worker credentials (keys codalab-username, codalab-password,
    /// kubernetes-auth-token, kubernetes-cert); by default the manager creates its own
    #[arg(long)]
    pub credentials_secret: Option<String>,
    /// Timeout of one API request, in seconds.
    #[arg(skip = 60u64)]
    pub request_timeout_seconds: u64,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        codalab_wm_backend::describe::defaults()
    }
}

fn secret(value: &str) -> std::result::Result<Secret, String> {
    Ok(Secret::new(value))
}

/// Serializes the token itself: only for layering the flags over the config file.
fn expose_option<S: serde::Serializer>(
    secret: &Option<Secret>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    match secret {
        Some(secret) => serializer.serialize_str(secret.expose()),
        None => serializer.serialize_none(),
    }
}

/// Where the cluster's CA certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// No certificate configured.
    None,
    /// A PEM file at this path.
    Path(String),
    /// PEM contents (already with real newlines).
    Contents(String),
}

impl KubernetesConfig {
    /// The resources of one worker.
    pub fn worker_shape(&self) -> WorkerShape {
        WorkerShape::from_flags(self.cpus, self.gpus, self.memory_mb)
    }

    /// Where the CA certificate comes from, resolved as upstream: the contents are used when
    /// the path is absent or `/dev/null` and the contents are not `/dev/null`.
    pub fn cert_source(&self) -> CertSource {
        let path = self
            .cert_path
            .as_deref()
            .filter(|p| !p.is_empty() && *p != "/dev/null");
        let contents = self
            .cert
            .as_deref()
            .filter(|c| !c.trim().is_empty() && *c != "/dev/null");
        match (path, contents) {
            (Some(path), _) => CertSource::Path(path.to_owned()),
            (None, Some(contents)) => CertSource::Contents(contents.replace(r"\n", "\n")),
            (None, None) => CertSource::None,
        }
    }

    /// The worker image.
    pub fn image(&self) -> String {
        match self.image.as_deref().filter(|i| !i.is_empty()) {
            Some(image) => image.to_owned(),
            None => {
                let version = std::env::var("CODALAB_VERSION")
                    .ok()
                    .filter(|v| !v.is_empty());
                format!("codalab/worker:{}", version.as_deref().unwrap_or("latest"))
            }
        }
    }

    /// The name of the Secret the workers' credentials are read from.
    pub fn secret_name(&self) -> String {
        match &self.credentials_secret {
            Some(name) => name.clone(),
            None => format!(
                "codalab-wm-{}-credentials",
                names::dns_label(&self.manager_id)
            ),
        }
    }

    /// Checks every setting; the error names the first unusable one.
    pub fn validate(&self) -> Result<()> {
        let invalid = |message: String| Err(Error::InvalidConfig(format!("kubernetes: {message}")));
        if self.cpus == 0 {
            return invalid("cpus must be at least 1".into());
        }
        if self.memory_mb == 0 {
            return invalid("memory_mb must be at least 1".into());
        }
        if self.request_timeout_seconds == 0 {
            return invalid("request_timeout_seconds must be at least 1".into());
        }
        if !names::is_dns_label(&self.namespace) {
            return invalid(format!(
                "namespace `{}` is not a valid DNS label",
                self.namespace
            ));
        }
        if !names::is_label_value(&self.manager_id) || self.manager_id.is_empty() {
            return invalid(format!(
                "manager_id `{}` is not a valid label value (1-63 letters, digits, `-`, `_`, `.`, \
                 starting and ending with a letter or digit)",
                self.manager_id
            ));
        }
        if let Some(name) = &self.nfs_volume_name
            && !(names::is_dns_label(name) && name.len() + "-claim".len() <= 253)
        {
            return invalid(format!("nfs_volume_name `{name}` is not a valid DNS label"));
        }
        if let Some(name) = &self.credentials_secret
            && !names::is_dns_subdomain(name)
        {
            return invalid(format!(
                "credentials_secret `{name}` is not a valid DNS subdomain"
            ));
        }
        if let Some(host) = &self.cluster_host
            && !(host.starts_with("https://") || host.starts_with("http://"))
        {
            return invalid(format!(
                "cluster_host `{host}` must be an http:// or https:// URL"
            ));
        }
        if self
            .image
            .as_deref()
            .is_some_and(|i| i.trim().is_empty() || i.contains(char::is_whitespace))
        {
            return invalid("image must be a non-empty image reference without spaces".into());
        }
        self.validate_kubernetes_runtime()
    }

    /// Workers with the kubernetes runtime need the cluster address, a token and a CA cert.
    fn validate_kubernetes_runtime(&self) -> Result<()> {
        if self.bundle_runtime != BundleRuntime::Kubernetes {
            return Ok(());
        }
        let missing = |what: &str| {
            Err(Error::InvalidConfig(format!(
                "kubernetes: bundle_runtime `kubernetes` needs {what}: workers get it as their \
                 --kubernetes-* flags"
            )))
        };
        if self.cluster_host.is_none() {
            return missing("cluster_host");
        }
        let given_secret = self.credentials_secret.is_some();
        if !given_secret && self.auth_token.as_ref().is_none_or(Secret::is_empty) {
            return missing("auth_token (or a credentials_secret holding `kubernetes-auth-token`)");
        }
        if !given_secret && self.cert_source() == CertSource::None {
            return missing(
                "cert_path or cert (or a credentials_secret holding `kubernetes-cert`)",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_like: serde_json::Value) -> Result<KubernetesConfig, serde_json::Error> {
        serde_json::from_value(toml_like)
    }

    #[test]
    fn defaults_are_upstreams() {
        let config = KubernetesConfig::default();
        assert_eq!((config.cpus, config.gpus, config.memory_mb), (1, 0, 2048));
        assert_eq!(config.namespace, "default");
        assert_eq!(config.keep_finished_pods, 10);
        assert_eq!(config.bundle_runtime, BundleRuntime::Docker);
        config.validate().unwrap();
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = config(serde_json::json!({"cpu": 2}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `cpu`"), "{err}");
    }

    #[test]
    fn the_token_never_prints() {
        let config = config(serde_json::json!({"auth_token": "tok-123"})).unwrap();
        assert!(!format!("{config:?}").contains("tok-123"));
        assert_eq!(config.auth_token.unwrap().expose(), "tok-123");
    }

    #[test]
    fn cert_source_follows_upstream() {
        let mut config = KubernetesConfig::default();
        assert_eq!(config.cert_source(), CertSource::None);
        config.cert = Some(r"-----BEGIN\nX".into());
        assert_eq!(
            config.cert_source(),
            CertSource::Contents("-----BEGIN\nX".into())
        );
        config.cert_path = Some("/dev/null".into());
        assert_eq!(
            config.cert_source(),
            CertSource::Contents("-----BEGIN\nX".into())
        );
        config.cert_path = Some("/etc/ca.pem".into());
        assert_eq!(config.cert_source(), CertSource::Path("/etc/ca.pem".into()));
        config.cert_path = None;
        config.cert = Some("/dev/null".into());
        assert_eq!(config.cert_source(), CertSource::None);
    }

    #[test]
    fn validation_names_the_bad_setting() {
        let cases = [
            (serde_json::json!({"cpus": 0}), "cpus must be at least 1"),
            (
                serde_json::json!({"namespace": "Bad_NS"}),
                "namespace `Bad_NS`",
            ),
            (serde_json::json!({"manager_id": "-x"}), "manager_id `-x`"),
            (serde_json::json!({"manager_id": ""}), "manager_id ``"),
            (
                serde_json::json!({"nfs_volume_name": "nfs/x"}),
                "nfs_volume_name `nfs/x`",
            ),
            (
                serde_json::json!({"credentials_secret": "A"}),
                "credentials_secret `A`",
            ),
            (
                serde_json::json!({"cluster_host": "host:6443"}),
                "cluster_host `host:6443`",
            ),
            (
                serde_json::json!({"bundle_runtime": "kubernetes"}),
                "needs cluster_host",
            ),
            (
                serde_json::json!({"bundle_runtime": "kubernetes", "cluster_host": "https://h"}),
                "needs auth_token",
            ),
            (
                serde_json::json!({"bundle_runtime": "kubernetes", "cluster_host": "https://h",
                                   "auth_token": "t"}),
                "needs cert_path or cert",
            ),
        ];
        for (value, expected) in cases {
            let err = config(value.clone()).unwrap().validate().unwrap_err();
            assert!(err.is_fatal());
            assert!(err.to_string().contains(expected), "{value}: {err}");
        }
    }

    #[test]
    fn a_given_secret_stands_in_for_token_and_cert() {
        let config = config(serde_json::json!({
            "bundle_runtime": "kubernetes", "cluster_host": "https://h",
            "credentials_secret": "my-creds"
        }))
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.secret_name(), "my-creds");
    }

    #[test]
    fn the_created_secret_is_named_after_the_manager() {
        let config = config(serde_json::json!({"manager_id": "Team_A.1"})).unwrap();
        config.validate().unwrap();
        assert_eq!(config.secret_name(), "codalab-wm-team-a-1-credentials");
    }

    #[test]
    fn image_defaults_to_upstreams() {
        let mut config = KubernetesConfig::default();
        assert!(config.image().starts_with("codalab/worker:"));
        config.image = Some("registry.local/worker:1".into());
        assert_eq!(config.image(), "registry.local/worker:1");
    }
}
