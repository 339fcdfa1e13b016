//! Kubernetes calls per tick: our `KubernetesBackend` (kube-rs) and upstream's
//! `KubernetesWorkerManager` (the Python kubernetes client 12.0.1) against the in-repo fake
//! API server (`codalab_wm_fake_k8s`, plain HTTP, real Kubernetes JSON), each listing through
//! a [`count_proxy`] that counts the HTTP requests on the wire.
//!
//! - `bench-harness k8s-fake --pods N`: the fake in its own process (so that neither side's
//!   CPU includes it) holding `N` worker pods labelled as our backend labels its own, named
//!   `cl-worker-<32 hex>` as both managers name theirs, even index `Running`, odd `Pending`;
//!   prints its URL and serves until stdin closes.
//! - `bench-harness ours-k8s --cluster URL --jobs N`: lists `ROUNDS` times through the proxy
//!   at `URL`, one JSON line.
//!
//! Upstream lists `status.phase==Running` pods of namespace `default` whose name contains
//! `cl-worker`: it sees the Running half only (its Pending workers are not counted), which the
//! `listed` figure shows.
//!
//! [`count_proxy`]: crate::count_proxy

use crate::args::required;
use crate::backends::{credentials, worker};
use crate::listing::{peer_row, proxied_row};
use crate::run::{json_lines, peer_command};
use crate::serve::{ServeChild, announce_and_wait};
use anyhow::Result;
use codalab_wm_core::backend::new_unique;
use codalab_wm_fake_k8s::FakeApiServer;
use codalab_wm_k8s::{KubernetesBackend, KubernetesConfig};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// The manager id of the bench's backend (its pods' labels carry it).
const MANAGER_ID: &str = "wmbench";

type Rows = (Vec<Value>, Vec<Value>);

async fn backend(cluster: &str) -> Result<KubernetesBackend> {
    let config: KubernetesConfig = serde_json::from_value(json!({
        "cluster_host": cluster, "manager_id": MANAGER_ID, "request_timeout_seconds": 30,
    }))?;
    Ok(KubernetesBackend::new(&config, &credentials(), &worker()).await?)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?)
}

/// `bench-harness k8s-fake --pods N`.
pub fn serve(args: &[String]) -> Result<()> {
    let pods: usize = required(args, "--pods")?;
    runtime()?.block_on(async {
        let fake = FakeApiServer::start().await;
        let labels = backend(fake.url()).await?.template().labels();
        for n in 0..pods {
            let phase = if n % 2 == 0 { "Running" } else { "Pending" };
            let name = format!("cl-worker-{}", new_unique());
            fake.add_pod("default", &name, labels.clone(), phase);
        }
        announce_and_wait(fake.url()).await
    })
}

/// `bench-harness ours-k8s --cluster URL --jobs N`.
pub fn run(args: &[String]) -> Result<()> {
    let proxy: String = required(args, "--cluster")?;
    let jobs: usize = required(args, "--jobs")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let row = proxied_row("kubernetes", &backend(&proxy).await?, &proxy, jobs).await?;
        println!("{row}");
        Ok(())
    })
}

fn sizes(quick: bool) -> &'static [usize] {
    if quick { &[1, 10] } else { &[1, 10, 100, 1000] }
}

/// Ours and upstream's Kubernetes rows.
pub fn measure_all(quick: bool, python: Option<&Path>) -> Result<Rows> {
    eprintln!("bench: Kubernetes calls per tick (in-repo fake API server)");
    // Upstream's manager logs in to CodaLab when it is built.
    let server = ServeChild::start(1)?;
    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    for &jobs in sizes(quick) {
        let fake = ServeChild::spawn(&["k8s-fake", "--pods", &jobs.to_string()])?;
        let proxy = ServeChild::spawn(&["count-proxy", "--upstream", &fake.url])?;
        let mut command = Command::new(std::env::current_exe()?);
        command.args([
            "ours-k8s",
            "--cluster",
            &proxy.url,
            "--jobs",
            &jobs.to_string(),
        ]);
        ours.extend(json_lines(command, "ours-k8s.log")?);
        let Some(python) = python else { continue };
        let mut command = peer_command(python, &server.url, 1, jobs)?;
        command.args([
            "--mode",
            "k8s-calls",
            "--rounds",
            "5",
            "--endpoint",
            &proxy.url,
        ]);
        peer.push(peer_row("kubernetes", jobs, command, "peer-k8s.log")?);
    }
    Ok((ours, peer))
}
