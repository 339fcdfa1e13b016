//! `cl-worker-manager operator`: the kube-runtime `Controller` over the pools and the pods
//! they own, the Lease loop that says whether this replica acts, `/healthz` and `/metrics`.

use crate::command::RunArgs;
use crate::crd::CodaLabWorkerPool;
use crate::lease::{self, LeaseConfig};
use crate::metrics::OperatorMetrics;
use crate::reconcile::{Context, error_policy, reconcile};
use codalab_wm_core::error::{Error, Result};
use codalab_wm_k8s::names::MANAGED_BY_LABEL;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The controller's name in Events.
const CONTROLLER: &str = "codalab-wm-operator";

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> Result<()> {
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
    let (leader_tx, leader) = crate::lease::Leadership::channel();
    let lease = LeaseConfig {
        name: args.lease_name.clone(),
        namespace: args.lease_namespace.clone(),
        identity: identity.clone(),
        duration: Duration::from_secs(args.lease_seconds.max(3)),
    };
    tokio::spawn(lease::run(client.clone(), lease, leader_tx, || {}));
    let reporter = Reporter {
        controller: CONTROLLER.to_owned(),
        instance: Some(identity.clone()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let sync = Duration::from_secs(args.sync_seconds.max(1));
    let context = Arc::new(Context::new(client.clone(), recorder, leader, sync));
    tokio::spawn(serve_health(listener, context.metrics.clone()));
    let (pools, pods): (Api<CodaLabWorkerPool>, Api<Pod>) = match &args.watch_namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client, ns),
        ),
        None => (Api::all(client.clone()), Api::all(client)),
    };
    let managed = format!("{}={}", MANAGED_BY_LABEL.0, MANAGED_BY_LABEL.1);
    tracing::info!(%identity, sync_seconds = sync.as_secs(), "operator started");
    Controller::new(pools, watcher::Config::default())
        .owns(pods, watcher::Config::default().labels(&managed))
        .shutdown_on_signal()
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile");
            }
        })
        .await;
    tracing::info!("operator stopped");
    Ok(())
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

/// Answers `GET /healthz` with 200 `ok` (the process runs and serves), `GET /metrics` with
/// the metrics ([`crate::metrics`]), anything else 404.
async fn serve_health(listener: tokio::net::TcpListener, metrics: Arc<OperatorMetrics>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buffer = [0u8; 1024];
            let read = stream.read(&mut buffer).await.unwrap_or(0);
            let request = String::from_utf8_lossy(&buffer[..read]);
            let (status, kind, body) = answer(&request, &metrics);
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

/// The status line, content type and body for a request.
fn answer(request: &str, metrics: &OperatorMetrics) -> (&'static str, &'static str, String) {
    if request.starts_with("GET /healthz ") {
        ("200 OK", "text/plain", "ok\n".to_owned())
    } else if request.starts_with("GET /metrics ") {
        let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        ("200 OK", kind, metrics.render())
    } else {
        ("404 Not Found", "text/plain", "not found\n".to_owned())
    }
}
