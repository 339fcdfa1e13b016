//! What every backend's calls-per-tick measurement shares: timing the listings of our backend,
//! counting its requests at the counting proxy, and reading the peer's result line.

use crate::args::request_counts;
use crate::count_proxy::total;
use crate::run::json_lines;
use crate::stats::{ms, process_cpu, summarize};
use anyhow::{Context, Result, ensure};
use codalab_wm_core::WorkerBackend;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Instant;

/// Listings of our backend per size.
pub const ROUNDS: usize = 20;

/// Wall and CPU time (ms) of [`ROUNDS`] listings by `backend`, each of which must see `jobs`
/// workers.
pub async fn time_listings(
    backend: &dyn WorkerBackend,
    jobs: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (c0, w0) = (process_cpu(), Instant::now());
        let listed = backend.get_worker_jobs().await?;
        cpu.push(ms(process_cpu() - c0));
        wall.push(ms(w0.elapsed()));
        ensure!(
            listed.len() == jobs,
            "{} listed {} of {jobs}",
            backend.name(),
            listed.len()
        );
    }
    Ok((wall, cpu))
}

/// Our row for `label`: one warm-up listing, then [`ROUNDS`] timed ones through the counting
/// proxy at `proxy`, which counts the HTTP requests they send.
pub async fn proxied_row(
    label: &str,
    backend: &dyn WorkerBackend,
    proxy: &str,
    jobs: usize,
) -> Result<Value> {
    let http = reqwest::Client::new();
    backend.get_worker_jobs().await?;
    let before = request_counts(&http, proxy).await?;
    let (wall, cpu) = time_listings(backend, jobs).await?;
    let after = request_counts(&http, proxy).await?;
    let requests = total(&after, "") - total(&before, "");
    Ok(json!({"backend": label, "jobs": jobs,
              "calls_per_tick": requests as f64 / ROUNDS as f64, "listed": jobs,
              "list_wall": summarize(&wall).json(), "list_cpu": summarize(&cpu).json()}))
}

/// Runs the peer's `command` (a `--mode …-calls` of `bench/peer_iteration.py`) and makes its
/// result line a row for `label`.
pub fn peer_row(label: &str, jobs: usize, command: Command, log: &str) -> Result<Value> {
    let raw = json_lines(command, log)?
        .into_iter()
        .next()
        .with_context(|| format!("the peer printed no {label} result (see target/bench/{log})"))?;
    let wall: Vec<f64> = raw["wall_samples"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    Ok(
        json!({"backend": label, "jobs": jobs, "calls_per_tick": raw["calls_per_tick"],
              "listed": raw["listed"], "list_wall": summarize(&wall).json()}),
    )
}
