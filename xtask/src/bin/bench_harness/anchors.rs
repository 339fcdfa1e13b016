//! The anchors' own figures, measured the same way here (#44): Karpenter's "1,000 pending pods
//! served in under 2 minutes on under half a core and 260 MB", Kueue's "15,000 workloads
//! admitted in ~351 s".
//!
//! Ours: `N` staged bundles of 1 CPU on the fake CodaLab server (`bench-harness serve`, its own
//! process), the real `cl-worker-manager` (release, with the Kubernetes backend: what `cargo
//! xtask bench` builds) in target mode with `max` and the launch cap at `N` (its other settings
//! upstream's defaults: a tick every 5 s), and the in-repo fake Kubernetes API server
//! (`bench-harness k8s-fake`, its own process) taking the pods. A bundle is served when a
//! worker pod for it is created: the manager's "started a worker job" line, after the API
//! server accepted the pod. Measured from the manager's start: the wall time until the `N`-th
//! pod, the manager's CPU time (utime + stime of `/proc/PID/stat`) over that time, and its
//! peak RSS (`VmHWM`). The pods are counted on the fake API server at the end.
//!
//! `bench-harness anchors [--quick | --merge]`; in the full run too.

use crate::serve::ServeChild;
use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The sizes measured: Karpenter's 1,000 pods and Kueue's 15,000 workloads.
fn sizes(quick: bool) -> &'static [usize] {
    if quick { &[100] } else { &[1_000, 15_000] }
}

/// The bound on one size's run (a manager that stops launching fails the section).
const LIMIT: Duration = Duration::from_secs(1200);

/// `bench-harness anchors [--quick | --merge]`.
pub fn only(args: &[String]) -> Result<()> {
    crate::report::print_section(args, "anchors", measure, render)
}

/// One row per size.
pub fn measure(quick: bool) -> Vec<Value> {
    (sizes(quick).iter())
        .map(|&n| serve(n).unwrap_or_else(|e| panic!("anchors, {n} bundles: {e:#}")))
        .collect()
}

/// One size: the servers, the manager, the `n`-th pod.
fn serve(n: usize) -> Result<Value> {
    eprintln!("bench: anchors, {n} staged bundles");
    let codalab = ServeChild::start(n)?;
    let cluster = ServeChild::spawn(&["k8s-fake", "--pods", "0"])?;
    let exe = crate::real_run::ours_exe()?;
    // A launch record of its own, empty: the pods of an earlier run are not this one's.
    let records = crate::run::repo_root().join(format!("target/bench/anchors/{n}"));
    let _ = std::fs::remove_dir_all(&records);
    std::fs::create_dir_all(&records)?;
    let mut child = Command::new(&exe)
        .args(["--server", &codalab.url, "--min-workers", "0"])
        .args(["--max-workers", &n.to_string(), "--launch-mode", "target"])
        .args(["--max-launches-per-tick", &n.to_string()])
        .args(["--min-seconds-between-workers", "0", "kubernetes"])
        .args(["--cluster-host", &cluster.url, "--manager-id", "wmanchor"])
        .env("CODALAB_USERNAME", crate::args::USER)
        .env("CODALAB_PASSWORD", "alicepw")
        .env("CODALAB_WM_RECORD_DIR", &records)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let started = Instant::now();
    let pid = child.id();
    let stderr = child.stderr.take().context("the manager's stderr")?;
    let (mut launched, mut at, mut usage, mut tail) = (0, None, None, Vec::new());
    for line in BufReader::new(stderr).lines() {
        let line = line?;
        if line.contains("started a worker job") {
            launched += 1;
            if launched == n {
                at = Some(started.elapsed());
                usage = Some((cpu_seconds(pid)?, peak_rss_kb(pid)?));
                break;
            }
        } else if line.contains("ERROR") || line.contains("WARN") {
            tail.push(line);
        }
        ensure!(
            started.elapsed() < LIMIT,
            "{launched} of {n} pods after {LIMIT:?}: {tail:?}"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    let (Some(wall), Some((cpu, rss_kb))) = (at, usage) else {
        anyhow::bail!("the manager stopped after {launched} of {n} pods: {tail:?}");
    };
    let pods = pod_count(&cluster.url)?;
    ensure!(pods == n, "the fake API server holds {pods} pods, not {n}");
    let wall = wall.as_secs_f64();
    Ok(json!({
        "bundles": n, "pods": pods, "wall_s": wall, "cpu_s": cpu,
        "cores": cpu / wall, "peak_rss_mb": rss_kb as f64 / 1024.0,
    }))
}

/// utime + stime of process `pid`, in seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .context("stat")?
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    Ok(ticks as f64 / clock_ticks())
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`).
fn clock_ticks() -> f64 {
    (Command::new("getconf").arg("CLK_TCK").output().ok())
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// `VmHWM` of process `pid`, in kB.
fn peak_rss_kb(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = (status.lines())
        .find(|l| l.starts_with("VmHWM:"))
        .context("VmHWM")?;
    Ok(line.split_whitespace().nth(1).context("VmHWM")?.parse()?)
}

/// The pods of namespace `default` on the fake API server at `url`.
fn pod_count(url: &str) -> Result<usize> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let list: Value = runtime.block_on(async {
        let reply = reqwest::get(format!("{url}/api/v1/namespaces/default/pods")).await?;
        reply.error_for_status()?.json().await
    })?;
    Ok(list["items"].as_array().map_or(0, Vec::len))
}

/// The section of BENCH.md.
pub fn render(out: &mut String, results: &Value) {
    let Some(rows) = results["anchors"].as_array() else {
        return;
    };
    let _ = writeln!(
        out,
        "\n### The anchors' figures, measured the same way (#44): fake CodaLab, real manager, fake Kubernetes\n\n\
         N staged 1-CPU bundles on the fake CodaLab server; the release `cl-worker-manager` in target mode \
         (`max` and the launch cap N, a tick every 5 s); the in-repo fake Kubernetes API server takes the \
         pods, each server in its own process. Served: a worker pod created for every bundle. Karpenter \
         publishes 1,000 pending pods served in under 2 minutes on under half a core and 260 MB; Kueue, \
         15,000 workloads admitted in ~351 s. Their figures include a real API server and cloud; ours, the \
         manager alone against fakes on 127.0.0.1 (2 shared cores).\n\n\
         | bundles | pods created | wall time | manager CPU | cores (CPU ÷ wall) | peak RSS | against the anchor's figure |\n\
         |---:|---:|---:|---:|---:|---:|---|"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} s | {:.1} s | {:.2} | {:.0} MB | {} |",
            row["bundles"],
            row["pods"],
            row["wall_s"].as_f64().unwrap_or(0.0),
            row["cpu_s"].as_f64().unwrap_or(0.0),
            row["cores"].as_f64().unwrap_or(0.0),
            row["peak_rss_mb"].as_f64().unwrap_or(0.0),
            against(row),
        );
    }
}

/// A row against the anchor of its size: Karpenter's (1,000: under 120 s, half a core and
/// 260 MB) or Kueue's (15,000: 351 s); none for another size.
fn against(row: &Value) -> String {
    let figure = |key: &str| row[key].as_f64().unwrap_or(f64::INFINITY);
    let (wall, cores, rss) = (figure("wall_s"), figure("cores"), figure("peak_rss_mb"));
    match row["bundles"].as_u64() {
        Some(1_000) => format!(
            "Karpenter (< 120 s, < 0.5 core, < 260 MB): {}",
            crate::report::verdict(&[
                (wall < 120.0, "time"),
                (cores < 0.5, "cores"),
                (rss < 260.0, "memory")
            ])
        ),
        Some(15_000) => format!(
            "Kueue (~351 s): {}",
            crate::report::verdict(&[(wall <= 351.0, "time")])
        ),
        _ => "—".into(),
    }
}
