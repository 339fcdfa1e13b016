//! `cl-worker-manager operator`: its flags (the binary flattens [`OperatorArgs`] into its
//! command line) and what each form does.

use codalab_wm_core::error::Result;
use std::net::SocketAddr;

/// Run the Kubernetes operator: reconcile the CodaLabWorkerPool objects of the cluster
/// (`operator crd` prints the CustomResourceDefinition to install first)
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct OperatorArgs {
    /// `crd`, or nothing to run the controller.
    #[command(subcommand)]
    pub command: Option<OperatorCommand>,
    /// The controller's settings.
    #[command(flatten)]
    pub run: RunArgs,
}

/// What `operator` can do besides running the controller.
#[derive(Debug, clap::Subcommand)]
pub enum OperatorCommand {
    /// Print the CodaLabWorkerPool CustomResourceDefinition (YAML), for `kubectl apply -f -`
    Crd,
}

/// The controller's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// URL of the Kubernetes API server [default: the in-cluster service account, else the
    /// kubeconfig]
    #[arg(long)]
    pub cluster_host: Option<String>,
    /// Watch only this namespace [default: every namespace]
    #[arg(long)]
    pub watch_namespace: Option<String>,
    /// Seconds between two reconciles of a pool (its next look at the staged bundles)
    #[arg(long, default_value_t = 5)]
    pub sync_seconds: u64,
    /// Serve /healthz (the Deployment's probes) and /metrics (Prometheus) on this address
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub health_listen: SocketAddr,
    /// Name of the coordination.k8s.io/v1 Lease the replicas elect their leader with
    #[arg(long, default_value = "codalab-wm-operator")]
    pub lease_name: String,
    /// Namespace of the Lease
    #[arg(
        long,
        env = "POD_NAMESPACE",
        hide_env_values = true,
        default_value = "codalab-wm"
    )]
    pub lease_namespace: String,
    /// This replica's name in the Lease [default: the host name]
    #[arg(long, env = "POD_NAME", hide_env_values = true)]
    pub identity: Option<String>,
    /// Seconds a leader holds the Lease without renewing it; a standby takes over after it
    #[arg(long, default_value_t = 15)]
    pub lease_seconds: u64,
    /// CodaLab servers pools may use (`https://host[:port]`, repeated or comma-separated); a
    /// pool naming another is refused (condition Degraded, Event ServerNotAllowed) before its
    /// Secret is read [default: any server]
    #[arg(long, value_name = "URL")]
    pub allowed_servers: Vec<String>,
}

/// Runs `operator …`.
pub async fn run(args: OperatorArgs) -> Result<()> {
    match args.command {
        Some(OperatorCommand::Crd) => {
            print!("{}", crate::crd::crd_yaml());
            Ok(())
        }
        None => crate::controller::run(args.run).await,
    }
}
