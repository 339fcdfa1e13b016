//! Flags and construction of the `kubernetes` backend (workers as pods).

use super::BackendContext;
use anyhow::{Context, Result};
use codalab_wm_core::WorkerBackend;
use codalab_wm_k8s::{KubernetesBackend, KubernetesConfig};
use figment::Figment;
use std::fmt;
use std::sync::Arc;

/// The config-file table (and `CODALAB_WM_KUBERNETES__*` env prefix) of this backend.
pub const TABLE: &str = "kubernetes";

/// Flags of `cl-worker-manager kubernetes`: upstream's, plus the namespace, the manager id and
/// the history limit. Every field is optional so it layers over the config file; the
/// defaults and checks live in `KubernetesConfig`.
#[derive(Default, clap::Args, serde::Serialize)]
pub struct Args {
    /// The runtime through which workers run bundles [default: docker]
    #[arg(long = "bundle-runtime", value_parser = ["docker", "kubernetes"])]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle_runtime: Option<String>,
    /// URL of the Kubernetes API server; without it the kubeconfig (KUBECONFIG, ~/.kube/config)
    /// or the in-cluster service account is used
    #[arg(long = "cluster-host")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_host: Option<String>,
    /// Bearer token for the API server (and, with --bundle-runtime kubernetes, for the workers);
    /// prefer CODALAB_WM_KUBERNETES__AUTH_TOKEN or the config file, which keep it out of the
    /// process list
    #[arg(long = "auth-token")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_token: Option<String>,
    /// Path of the cluster's CA certificate (PEM); /dev/null means "use --cert"
    #[arg(long = "cert-path")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_path: Option<String>,
    /// Contents of the cluster's CA certificate (PEM; a literal \n counts as a newline)
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<String>,
    /// Name of the NFS persistent volume: workers mount the claim <name>-claim as work dir
    #[arg(long = "nfs-volume-name")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nfs_volume_name: Option<String>,
    /// Number of CPUs for each worker [default: 1]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Number of GPUs (nvidia.com/gpu) for each worker [default: 0]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Memory (in MiB) for each worker [default: 2048]
    #[arg(long = "memory-mb")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Namespace of the worker pods and the credentials Secret [default: default]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Finished worker pods kept for inspection; older ones are deleted [default: 10]
    #[arg(long = "keep-finished-pods")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_finished_pods: Option<usize>,
    /// Marks this manager's pods (label codalab-wm/manager-id); keep it across restarts
    /// [default: default]
    #[arg(long = "manager-id")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manager_id: Option<String>,
    /// Worker image [default: codalab/worker:$CODALAB_VERSION, else codalab/worker:latest]
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Existing Secret with the worker credentials (keys codalab-username, codalab-password,
    /// kubernetes-auth-token, kubernetes-cert); by default the manager creates its own
    #[arg(long = "credentials-secret")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// The manager's process flags, accepted after the backend name too.
    #[command(flatten)]
    #[serde(skip)]
    pub process: crate::args::ProcessArgs,
}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Args")
            .field("bundle_runtime", &self.bundle_runtime)
            .field("cluster_host", &self.cluster_host)
            .field("auth_token", &self.auth_token.as_ref().map(|_| "***"))
            .field("cert_path", &self.cert_path)
            .field(
                "cert",
                &self.cert.as_ref().map(|c| format!("{} bytes", c.len())),
            )
            .field("nfs_volume_name", &self.nfs_volume_name)
            .field("cpus", &self.cpus)
            .field("gpus", &self.gpus)
            .field("memory_mb", &self.memory_mb)
            .field("namespace", &self.namespace)
            .field("keep_finished_pods", &self.keep_finished_pods)
            .field("manager_id", &self.manager_id)
            .field("image", &self.image)
            .field("credentials_secret", &self.credentials_secret)
            .finish()
    }
}

/// Builds the Kubernetes backend from the `[kubernetes]` table.
pub async fn build(config: &Figment, context: &BackendContext) -> Result<Arc<dyn WorkerBackend>> {
    let kubernetes: KubernetesConfig = config
        .focus(TABLE)
        .extract()
        .map_err(|e| crate::diagnose::settings_error(e, Some(TABLE)))?;
    let backend = KubernetesBackend::new(&kubernetes, &context.credentials, &context.worker)
        .await
        .context("setting up the kubernetes backend")?;
    Ok(Arc::new(backend))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use codalab_wm_k8s::BundleRuntime;
    use figment::providers::{Format, Serialized, Toml};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn flags_layer_over_the_file_and_the_token_never_prints() {
        let cli = Cli::try_parse_from([
            "x",
            "--bundle-runtime",
            "kubernetes",
            "--cluster-host",
            "https://k8s.example:6443",
            "--auth-token",
            "TOKEN-SECRET",
            "--gpus",
            "1",
            "--keep-finished-pods",
            "3",
        ])
        .unwrap();
        let shown = format!("{:?}", cli.args);
        assert!(!shown.contains("TOKEN-SECRET"), "{shown}");
        let file = Toml::string("[kubernetes]\nnamespace = \"cl\"\ngpus = 2\nmemory_mb = 4096\n");
        let figment = Figment::from(file).merge(Serialized::default(TABLE, &cli.args));
        let config: KubernetesConfig = figment.focus(TABLE).extract().unwrap();
        assert_eq!(config.bundle_runtime, BundleRuntime::Kubernetes);
        assert_eq!((config.cpus, config.gpus, config.memory_mb), (1, 1, 4096));
        assert_eq!(
            (config.namespace.as_str(), config.keep_finished_pods),
            ("cl", 3)
        );
        assert_eq!(config.auth_token.unwrap().expose(), "TOKEN-SECRET");
    }

    #[test]
    fn unset_flags_leave_the_defaults() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        let figment = Figment::from(Serialized::default(TABLE, &cli.args));
        let config: KubernetesConfig = figment.focus(TABLE).extract().unwrap();
        assert_eq!((config.cpus, config.gpus, config.memory_mb), (1, 0, 2048));
        assert_eq!(config.namespace, "default");
        assert!(Cli::try_parse_from(["x", "--bundle-runtime", "podman"]).is_err());
    }
}
