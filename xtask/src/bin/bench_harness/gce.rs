//! Compute Engine calls per tick: our `GceBackend` against the in-repo fake Compute Engine API
//! (`codalab_wm_fake_gce`, plain HTTP, every request checked against Google's discovery
//! document), listing through a [`count_proxy`] that counts the HTTP requests on the wire.
//! There is no upstream Compute Engine manager, so no peer row.
//!
//! - `bench-harness gce-fake --instances N`: the fake in its own process holding `N` RUNNING
//!   worker instances labelled as our backend labels its own, over two zones; prints its URL
//!   and serves until stdin closes.
//! - `bench-harness ours-gce --api URL --jobs N`: lists `ROUNDS` times through the proxy at
//!   `URL` (the API and the metadata server's token both behind it), one JSON line.
//!
//! [`count_proxy`]: crate::count_proxy

use crate::args::required;
use crate::backends::credentials;
use crate::listing::proxied_row;
use crate::run::json_lines;
use crate::serve::{ServeChild, announce_and_wait};
use anyhow::Result;
use codalab_wm_core::backend::new_unique;
use codalab_wm_fake_gce::FakeCompute;
use codalab_wm_gce::{GceBackend, GceConfig};
use serde_json::Value;
use std::process::Command;

const PROJECT: &str = "wmbench";
const ZONES: [&str; 2] = ["us-central1-a", "us-central1-b"];

fn backend(url: &str) -> Result<GceBackend> {
    let mut config = GceConfig::new(PROJECT, &ZONES, "codalab-password");
    config.api_endpoint = format!("{url}/compute/v1/");
    config.metadata_url = Some(url.to_owned());
    Ok(GceBackend::new(config, &credentials())?)
}

/// `bench-harness gce-fake --instances N`.
pub fn serve(args: &[String]) -> Result<()> {
    let instances: usize = required(args, "--instances")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let fake = FakeCompute::start(PROJECT).await?;
        let labels = [
            ("codalab-wm-manager", "codalab-wm"),
            ("codalab-wm-pool", "default"),
        ];
        for n in 0..instances {
            let name = format!("cl-worker-{}", new_unique());
            fake.insert_instance(ZONES[n % 2], &name, &labels, "RUNNING");
        }
        announce_and_wait(fake.url()).await
    })
}

/// `bench-harness ours-gce --api URL --jobs N`.
pub fn run(args: &[String]) -> Result<()> {
    let proxy: String = required(args, "--api")?;
    let jobs: usize = required(args, "--jobs")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let row = proxied_row("gce", &backend(&proxy)?, &proxy, jobs).await?;
        println!("{row}");
        Ok(())
    })
}

fn sizes(quick: bool) -> &'static [usize] {
    if quick { &[1, 10] } else { &[1, 10, 100, 1000] }
}

/// Our Compute Engine rows.
pub fn measure_all(quick: bool) -> Result<Vec<Value>> {
    eprintln!("bench: Compute Engine calls per tick (in-repo fake Compute API)");
    let mut ours = Vec::new();
    for &jobs in sizes(quick) {
        let fake = ServeChild::spawn(&["gce-fake", "--instances", &jobs.to_string()])?;
        let proxy = ServeChild::spawn(&["count-proxy", "--upstream", &fake.url])?;
        let mut command = Command::new(std::env::current_exe()?);
        command.args(["ours-gce", "--api", &proxy.url, "--jobs", &jobs.to_string()]);
        ours.extend(json_lines(command, "ours-gce.log")?);
    }
    Ok(ours)
}
