//! `cl-worker-manager operator`: the kube-runtime `Controller` over the pools and the pods
//! they own ([`crate::pools`]), the Lease loop that says whether this replica acts,
//! `/healthz` and `/metrics` ([`crate::health_server`]).

use crate::access::AllowedServers;
use crate::health::{Health, Limits};
use crate::health_server::{self, Vitals};
use crate::lease::{self, Leadership, LeaseConfig};
use crate::reconcile::{Context, ReconcileError, error_policy, reconcile};
use codalab_wm_core::error::{Error, Result};
use codalab_wm_k8s::names::MANAGED_BY_LABEL;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::{Controller, Error as ControllerError};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The controller's settings (the flags `operator` runs it with, [`crate::command::OperatorArgs`]).
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

/// The controller's name in Events.
const CONTROLLER: &str = "codalab-wm-operator";

/// How long the pool watcher may go without a complete list (from start) or a success (from
/// a failure) before `/healthz` says 503.
const WATCH_LIMIT: Duration = Duration::from_secs(120);

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> Result<()> {
    let allowed_servers = AllowedServers::parse(&args.allowed_servers)
        .map_err(|e| Error::InvalidConfig(format!("operator: {e}")))?;
    let client = client(&args).await?;
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let listener = tokio::net::TcpListener::bind(args.health_listen)
        .await
        .map_err(|e| {
            Error::InvalidConfig(format!(
                "operator: cannot listen on --health-listen {}: {e}",
                args.health_listen
            ))
        })?;
    let (leader, health) = start_lease(&client, &args, &identity);
    let reporter = Reporter {
        controller: CONTROLLER.to_owned(),
        instance: Some(identity.clone()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let sync = Duration::from_secs(args.sync_seconds.max(1));
    let mut context = Context::new(client.clone(), recorder, leader, sync);
    context.allowed_servers = allowed_servers;
    let context = Arc::new(context);
    let vitals = Vitals {
        health: health.clone(),
        metrics: context.metrics.clone(),
    };
    tokio::spawn(health_server::serve(
        listener,
        vitals,
        health_server::LIMITS,
    ));
    let namespace = args.watch_namespace.as_deref();
    let (store, pools) = crate::pools::watch(client.clone(), namespace, health);
    let pods: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let managed = format!("{}={}", MANAGED_BY_LABEL.0, MANAGED_BY_LABEL.1);
    tracing::info!(%identity, sync_seconds = sync.as_secs(), "operator started");
    Controller::for_stream(pools, store)
        .owns(pods, watcher::Config::default().labels(&managed))
        .shutdown_on_signal()
        .run(reconcile, error_policy, context)
        .for_each(|result| async move { log(result) })
        .await;
    tracing::info!("operator stopped");
    Ok(())
}

/// Starts the Lease loop; returns the leadership it moves and the health record it beats.
fn start_lease(client: &kube::Client, args: &RunArgs, identity: &str) -> (Leadership, Arc<Health>) {
    let lease = LeaseConfig {
        name: args.lease_name.clone(),
        namespace: args.lease_namespace.clone(),
        identity: identity.to_owned(),
        duration: Duration::from_secs(args.lease_seconds.max(3)),
    };
    let limits = Limits {
        watch: WATCH_LIMIT,
        lease: lease.duration * 2,
    };
    let health = Arc::new(Health::new(limits, tokio::time::Instant::now()));
    let (leader_tx, leader) = Leadership::channel();
    let beat = health.clone();
    let alive = move || beat.lease_round(tokio::time::Instant::now());
    tokio::spawn(lease::run(client.clone(), lease, leader_tx, alive));
    (leader, health)
}

/// Logs what the controller's stream reports beyond the reconciles themselves.
fn log<T>(result: std::result::Result<T, ControllerError<ReconcileError, watcher::Error>>) {
    match result {
        // The pods' watcher (the pools' logs its own errors, `pools.rs`).
        Err(ControllerError::QueueError(error)) => {
            tracing::warn!(%error, "cannot list or watch the worker pods")
        }
        // Failed reconciles are logged by `error_policy`.
        Err(error) => tracing::debug!(%error, "reconcile"),
        Ok(_) => {}
    }
}

async fn client(args: &RunArgs) -> Result<kube::Client> {
    let config = match &args.cluster_host {
        Some(host) => kube::Config::new(host.parse().map_err(|e| {
            Error::InvalidConfig(format!(
                "operator: --cluster-host `{host}` is not a URL: {e}"
            ))
        })?),
        None => kube::Config::infer().await.map_err(|e| {
            Error::InvalidConfig(format!(
                "operator: no in-cluster configuration or kubeconfig found: {e}"
            ))
        })?,
    };
    let mut config = config;
    // kube leaves the read timeout unset (no timeout): a half-open connection would hang a
    // call for good. Watches end on the server's side within 290 s (kube's watcher asks for
    // that), so a read that waits longer is dead; counted from the request, not from when its
    // pooled connection went idle. Lease calls have their own, shorter bound (`lease.rs`).
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(295));
    config.reset_reader_on_write = true;
    config.write_timeout = Some(Duration::from_secs(30));
    kube::Client::try_from(config).map_err(|e| {
        Error::InvalidConfig(format!("operator: cannot build the Kubernetes client: {e}"))
    })
}

fn default_identity() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("operator-{}", std::process::id()))
}
