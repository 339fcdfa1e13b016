//! Azure Batch calls per tick: our `AzureBatchBackend` and upstream's `AzureBatchWorkerManager`
//! (azure-batch 9.0.0) against the crate's stateful fake Batch service
//! (`codalab_wm_fake_azure`, plain HTTP, Shared Key checked on every request, 1000 tasks per
//! page like the service), each through a [`count_proxy`] that counts the HTTP requests on the
//! wire.
//!
//! - `bench-harness azure-fake --tasks N`: the fake in its own process (so that neither side's
//!   CPU includes it) holding `N` tasks named as our backend names its workers,
//!   `cl_worker_<32 hex>`, even index `active`, odd `running`; prints its URL and serves until
//!   stdin closes.
//! - `bench-harness ours-azure --service URL --jobs N`: lists `ROUNDS` times through the proxy
//!   at `URL`, one JSON line.
//!
//! Shared Key signs the verb, the standard headers, the `ocp-*` headers, the account, the path
//! and the query, not the host; the proxy forwards all of them unchanged, so both clients'
//! signatures hold through it. The fake's `odata.nextLink` points at the origin the request was
//! sent to (its `Host`, which the proxy forwards), so our further pages go through the proxy too.
//!
//! Ours lists the job's `cl_worker_` tasks (`Task_List`, one request per 1000 tasks); upstream
//! asks for the job's task counts (`Job_GetTaskCounts`, one request) and makes `active +
//! running` workers of them.
//!
//! [`count_proxy`]: crate::count_proxy

use crate::args::required;
use crate::backends::credentials;
use crate::listing::{peer_row, proxied_row};
use crate::run::{json_lines, peer_command};
use crate::serve::{ServeChild, announce_and_wait};
use anyhow::Result;
use codalab_wm_azure::models::TaskState;
use codalab_wm_azure::{AzureBatchBackend, AzureBatchConfig};
use codalab_wm_core::secret::Secret;
use codalab_wm_fake_azure::FakeBatch;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The Batch account of the fake.
const ACCOUNT: &str = "benchaccount";
/// Its key: base64 of 64 bytes, like a real account key (a test key, not a secret).
const KEY: &str =
    "rPjzB9UC4AJ8NyYVjvLq6Um1DBTaIZTV2flP+5/RwL2wlNV4iWOA1rZbVIpVC184qWAusQzEYw9JwBCu68/htw==";
/// The job the fake serves, whose tasks are the workers.
const JOB: &str = "codalab-workers";
/// The worker log container both managers are given (never contacted: no task is added).
const LOG_CONTAINER: &str = "https://s.blob.core.windows.net/logs?sig=x";

type Rows = (Vec<Value>, Vec<Value>);

fn backend(service: &str) -> Result<AzureBatchBackend> {
    let mut config = AzureBatchConfig::new(ACCOUNT, service, JOB, Secret::new(LOG_CONTAINER));
    config.account_key = Some(Secret::new(KEY));
    Ok(AzureBatchBackend::new(config, credentials())?)
}

/// `bench-harness azure-fake --tasks N`.
pub fn serve(args: &[String]) -> Result<()> {
    let tasks: usize = required(args, "--tasks")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let fake = FakeBatch::start(ACCOUNT, &Secret::new(KEY), JOB).await?;
        for n in 0..tasks {
            let state = if n % 2 == 0 {
                TaskState::Active
            } else {
                TaskState::Running
            };
            fake.insert(&format!("cl_worker_{n:032x}"), state);
        }
        announce_and_wait(fake.url()).await
    })
}

/// `bench-harness ours-azure --service URL --jobs N`.
pub fn run(args: &[String]) -> Result<()> {
    let proxy: String = required(args, "--service")?;
    let jobs: usize = required(args, "--jobs")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let row = proxied_row("azure", &backend(&proxy)?, &proxy, jobs).await?;
        println!("{row}");
        Ok(())
    })
}

fn sizes(quick: bool) -> &'static [usize] {
    if quick {
        &[1, 100]
    } else {
        &[1, 10, 100, 1000, 3000]
    }
}

/// Ours and upstream's Azure Batch rows.
pub fn measure_all(quick: bool, python: Option<&Path>) -> Result<Rows> {
    eprintln!("bench: Azure Batch calls per tick (in-repo fake Batch service)");
    // Upstream's manager logs in to CodaLab when it is built.
    let server = ServeChild::start(1)?;
    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    for &jobs in sizes(quick) {
        let fake = ServeChild::spawn(&["azure-fake", "--tasks", &jobs.to_string()])?;
        let proxy = ServeChild::spawn(&["count-proxy", "--upstream", &fake.url])?;
        let mut command = Command::new(std::env::current_exe()?);
        command.args([
            "ours-azure",
            "--service",
            &proxy.url,
            "--jobs",
            &jobs.to_string(),
        ]);
        ours.extend(json_lines(command, "ours-azure.log")?);
        let Some(python) = python else { continue };
        let mut command = peer_command(python, &server.url, 1, jobs)?;
        command
            .args([
                "--mode",
                "azure-calls",
                "--rounds",
                "5",
                "--endpoint",
                &proxy.url,
            ])
            .args(["--azure-account", ACCOUNT, "--azure-job", JOB])
            .args(["--azure-log-container", LOG_CONTAINER])
            .env("BENCH_AZURE_ACCOUNT_KEY", KEY);
        peer.push(peer_row("azure", jobs, command, "peer-azure.log")?);
    }
    Ok((ours, peer))
}
