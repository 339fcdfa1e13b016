//! AWS Batch calls per tick: our `AwsBatchBackend` (the real aws-sdk-batch client) and
//! upstream's `AWSBatchWorkerManager` (boto3) against the moto server of
//! `cargo xtask services up moto`, each listing through a [`count_proxy`] that counts the
//! HTTP requests reaching moto.
//!
//! `bench-harness ours-aws --moto URL --proxy URL --manager-id M --jobs N`: holds moto's new
//! jobs in SUBMITTED (its state manager; keeps each job's thread from polling the docker stub),
//! tops the manager's own jobs up to `N` (submitted straight to moto, not counted), then lists
//! them `ROUNDS` times through the proxy and prints one JSON line.
//! `bench-harness ours-aws --moto URL --manager-id M --cleanup`: terminates the manager's jobs,
//! releases the hold and deregisters its job definitions.
//!
//! moto answers `ListJobs` in one page whatever the job count (its pagination is not
//! implemented), so the figures here are requests per tick with every job on one page; the
//! real service pages at 100 jobs (ours follows `nextToken`, upstream reads the first page of
//! each of its 5 statuses only).
//!
//! [`count_proxy`]: crate::count_proxy

use crate::args::required;
use crate::backends::{credentials, worker};
use crate::listing::{peer_row, proxied_row};
use crate::run::{json_lines, peer_command};
use crate::serve::ServeChild;
use anyhow::{Context, Result, ensure};
use codalab_wm_aws::client::sdk_loader;
use codalab_wm_aws::{AwsBatchBackend, AwsBatchConfig, BatchClient, HostEnvironment};
use codalab_wm_core::backend::new_unique;
use codalab_wm_core::{LaunchRequest, WorkerBackend};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// The job definition and manager id of one bench run (fresh per run, so that jobs of earlier
/// runs, now FAILED in moto, are not ours).
pub fn manager_id() -> String {
    format!("wmbench-{}", &new_unique()[..12])
}

/// The regex upstream's `--job-filter` gets to select the same jobs as ours.
pub fn job_filter(manager_id: &str) -> String {
    format!("{manager_id}-[0-9a-f]{{32}}")
}

pub fn run(args: &[String]) -> Result<()> {
    let moto: String = required(args, "--moto")?;
    let manager_id: String = required(args, "--manager-id")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let direct = backend(&moto, &manager_id).await?;
        if args.iter().any(|a| a == "--cleanup") {
            return cleanup(&moto, &direct).await;
        }
        let proxy: String = required(args, "--proxy")?;
        let jobs: usize = required(args, "--jobs")?;
        hold(&moto).await?;
        top_up(&direct, jobs).await?;
        measure(&proxy, &backend(&proxy, &manager_id).await?, jobs).await
    })
}

/// Our backend talking to `endpoint` (moto or the counting proxy). The parent sets the test
/// credentials (`AWS_ACCESS_KEY_ID=test` …) in our environment.
async fn backend(endpoint: &str, manager_id: &str) -> Result<AwsBatchBackend> {
    let config = AwsBatchConfig {
        job_definition_name: manager_id.to_owned(),
        manager_id: Some(manager_id.to_owned()),
        ..AwsBatchConfig::default()
    };
    let sdk = sdk_loader(&config).endpoint_url(endpoint).load().await;
    Ok(AwsBatchBackend::with_client(
        config,
        &worker(),
        &credentials(),
        HostEnvironment::default(),
        BatchClient::new(&sdk),
    )?)
}

async fn moto_api(moto: &str, path: &str, body: &str) -> Result<()> {
    let reply = reqwest::Client::new()
        .post(format!("{moto}{path}"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .with_context(|| format!("moto {path}"))?;
    ensure!(
        reply.status().is_success(),
        "moto answered {} to {path}",
        reply.status()
    );
    Ok(())
}

async fn hold(moto: &str) -> Result<()> {
    moto_api(
        moto,
        "/moto-api/state-manager/set-transition",
        r#"{"model_name":"batch::job","transition":{"progression":"manual","times":1000000}}"#,
    )
    .await
}

async fn top_up(backend: &AwsBatchBackend, jobs: usize) -> Result<()> {
    let have = backend.get_worker_jobs().await?.len();
    let worker = worker();
    for _ in have..jobs {
        let unique = new_unique();
        backend
            .start_worker_job(&LaunchRequest {
                unique: &unique,
                worker: &worker,
                dry_run: false,
            })
            .await?;
    }
    Ok(())
}

async fn measure(proxy: &str, backend: &AwsBatchBackend, jobs: usize) -> Result<()> {
    let row = proxied_row("aws", backend, proxy, jobs).await?;
    println!("{row}");
    Ok(())
}

/// Terminates the manager's jobs while they are still held (a released job would go on to
/// RUNNING and stay there), then releases the hold and deregisters the job definition.
async fn cleanup(moto: &str, backend: &AwsBatchBackend) -> Result<()> {
    let jobs = backend.get_worker_jobs().await;
    let mut stopped = 0;
    for job in jobs.as_deref().unwrap_or_default() {
        if job.state.is_capacity() && backend.stop_worker_job(job).await.is_ok() {
            stopped += 1;
        }
    }
    let released = moto_api(
        moto,
        "/moto-api/state-manager/unset-transition",
        r#"{"model_name":"batch::job"}"#,
    )
    .await;
    let removed = backend.cleanup(false).await?;
    eprintln!(
        "bench: aws cleanup: {stopped} job(s) terminated, {} job definition(s) deregistered",
        removed.len()
    );
    jobs?;
    released
}

/// Own-job counts of the AWS rows. Not 1,000: moto runs a thread per job that polls twice a
/// second, and a thousand of them saturate this machine; moto answers in one page anyway.
fn sizes(quick: bool) -> &'static [usize] {
    if quick { &[1, 10] } else { &[1, 10, 100] }
}

/// moto's URL (`AWS_ENDPOINT_URL`, else the port of `cargo xtask services up moto`), if it
/// answers.
fn moto_url() -> (String, bool) {
    let url = std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| "http://127.0.0.1:5055".into());
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let up = address
        .parse()
        .ok()
        .and_then(|a| {
            std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(1)).ok()
        })
        .is_some();
    (url, up)
}

/// The test credentials both sides use against moto.
fn aws_env(command: &mut Command) {
    command
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL");
}

type Rows = (Vec<Value>, Vec<Value>);

/// Ours and upstream's AWS rows (`backends`, `peer_backends`), or none when moto is not
/// running and the run may go without it (quick mode outside CI).
pub fn measure_all(quick: bool, python: Option<&Path>) -> Result<Rows> {
    let (moto, up) = moto_url();
    if !up {
        let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
        ensure!(
            quick && !in_ci,
            "moto is not answering on {moto}: start it with `cargo xtask services up moto`"
        );
        eprintln!("bench: AWS rows skipped (moto not running; `cargo xtask services up moto`)");
        return Ok((Vec::new(), Vec::new()));
    }
    eprintln!("bench: AWS Batch calls per tick (moto at {moto})");
    let proxy = ServeChild::spawn(&["count-proxy", "--upstream", &moto])?;
    let id = manager_id();
    let rows = measure_sizes(quick, python, &moto, &proxy.url, &id);
    let cleaned = json_lines(
        ours_command(&moto, &id, &["--cleanup"])?,
        "ours-aws-cleanup.log",
    );
    let rows = rows?;
    cleaned?;
    Ok(rows)
}

/// `bench-harness ours-aws` for manager `id`.
fn ours_command(moto: &str, id: &str, extra: &[&str]) -> Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["ours-aws", "--moto", moto, "--manager-id", id])
        .args(extra);
    aws_env(&mut command);
    Ok(command)
}

fn measure_sizes(
    quick: bool,
    python: Option<&Path>,
    moto: &str,
    proxy: &str,
    id: &str,
) -> Result<Rows> {
    // Upstream's manager logs in to CodaLab when it is built.
    let server = ServeChild::start(1)?;
    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    for &jobs in sizes(quick) {
        let jobs_arg = jobs.to_string();
        let command = ours_command(moto, id, &["--proxy", proxy, "--jobs", &jobs_arg])?;
        ours.extend(json_lines(command, "ours-aws.log")?);
        let Some(python) = python else { continue };
        let mut command = peer_command(python, &server.url, 1, jobs)?;
        command
            .args(["--mode", "aws-calls", "--rounds", "5", "--endpoint", proxy])
            .args(["--job-filter", &job_filter(id)]);
        aws_env(&mut command);
        peer.push(peer_row("aws", jobs, command, "peer-aws.log")?);
    }
    Ok((ours, peer))
}
