//! `bench-ours --server URL --bundles N --jobs J …`: our manager, measured from inside
//! its own process.
//!
//! The manager is core's [`Manager`] with the real [`CodaLabClient`] and a [`FakeBackend`] that
//! lists `J` jobs (half pending, half active), on a current-thread runtime with an INFO
//! subscriber writing to a sink, as the `cl-worker-manager` binary runs it. `--max-workers J`
//! so that no tick launches: every tick is the steady-state observe → plan.
//!
//! Modes (one JSON line on stdout each):
//! - default: `--warmup W --ticks T` ticks back to back; CPU and wall per tick, peak RSS, CodaLab
//!   requests per tick, then the floor: the bundles a tick reads (what the pools can absorb,
//!   `codalab::staged`) fetched once as the client asks them and parsed with
//!   `serde_json::from_slice::<Value>` (and, for comparison, into a typed struct), `T` times
//!   (`--skip-floor`: the ticks alone, for profiling);
//! - `--first-tick`: prints `first-tick` as soon as the first tick completed (the parent times
//!   from spawn to that line);
//! - `--reaction [--burst]`: jobs start pending and stay so; ticks until `N` workers were
//!   submitted, in compat mode or in burst mode (#7).

use crate::args::{BURST_LAUNCHES_PER_TICK, PASSWORD, USER, flag, request_counts, required};
use crate::stats::{ms, process_cpu, summarize};
use anyhow::{Context, Result, ensure};
use codalab_wm_core::codalab::{CodaLabClient, SEARCH_PAGE_SIZE};
use codalab_wm_core::policy::PolicyConfig;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{
    JobState, LaunchMode, Manager, ManagerConfig, Pool, SingleBackendFlags, WorkerJob,
    WorkerOptions, WorkerShape,
};
use serde_json::json;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

/// The worker shape of both sides: 4 CPUs, 1 GPU, 8 GiB (no bench bundle is filtered out).
pub fn shape() -> WorkerShape {
    WorkerShape::from_flags(4, 1, 8192)
}

/// A `/proc/self/status` field in kB (`VmHWM` = peak RSS, `VmRSS` = current RSS).
pub fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                let rest = line.strip_prefix(field)?.strip_prefix(':')?;
                rest.trim().trim_end_matches("kB").trim().parse().ok()
            })
        })
        .unwrap_or(0)
}

struct Setup {
    server: String,
    bundles: usize,
    jobs: usize,
    /// `--skip-floor`: only the ticks (to profile them alone, e.g. under `perf record`).
    skip_floor: bool,
}

pub fn run(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--server-cost") {
        return crate::server_ticks::run(args);
    }
    let setup = Setup {
        server: required(args, "--server")?,
        bundles: required(args, "--bundles")?,
        jobs: required(args, "--jobs")?,
        skip_floor: args.iter().any(|a| a == "--skip-floor"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if args.iter().any(|a| a == "--first-tick") {
        return runtime.block_on(first_tick(&setup));
    }
    if args.iter().any(|a| a == "--reaction") {
        let burst = args.iter().any(|a| a == "--burst");
        return runtime.block_on(reaction(&setup, burst));
    }
    let warmup = flag(args, "--warmup")?.unwrap_or(3);
    let ticks = required(args, "--ticks")?;
    runtime.block_on(ticks_loop(&setup, warmup, ticks))
}

fn install_subscriber() {
    // As the binary: an INFO subscriber (formatting every event), here into a sink.
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_writer(std::io::sink)
        .try_init();
}

fn manager(setup: &Setup, backend: &FakeBackend, max_workers: usize) -> Result<Manager> {
    manager_with(setup, single_backend_flags(max_workers), backend)
}

/// The single-backend mode with `flags`, its workers pointed at the setup's server.
fn manager_with(
    setup: &Setup,
    flags: SingleBackendFlags,
    backend: &FakeBackend,
) -> Result<Manager> {
    let credentials = Credentials {
        username: USER.into(),
        password: Secret::new(PASSWORD),
    };
    let client = CodaLabClient::new(&setup.server, credentials)?;
    let worker = WorkerOptions {
        server: setup.server.clone(),
        ..WorkerOptions::default()
    };
    let pool = Pool::single_backend(&flags, Arc::new(backend.clone()), worker);
    Ok(Manager::new(ManagerConfig::default(), client, pool))
}

fn single_backend_flags(max_workers: usize) -> SingleBackendFlags {
    SingleBackendFlags {
        limits: PolicyConfig {
            min_workers: 0,
            max_workers: max_workers as u32,
            min_seconds_between_workers: 0,
        },
        ..SingleBackendFlags::default()
    }
}

/// A backend listing `jobs` jobs: even ones pending, odd ones active.
pub fn backend_with_jobs(jobs: usize) -> FakeBackend {
    let backend = FakeBackend::new(shape());
    for n in 0..jobs {
        let state = if n % 2 == 0 {
            JobState::Pending
        } else {
            JobState::Active
        };
        backend.insert(WorkerJob::new(format!("job-{n}"), state));
    }
    backend
}

async fn first_tick(setup: &Setup) -> Result<()> {
    install_subscriber();
    let backend = backend_with_jobs(setup.jobs);
    let mut manager = manager(setup, &backend, setup.jobs)?;
    let report = manager.tick().await?;
    println!("first-tick");
    std::io::stdout().flush()?;
    ensure!(
        report.staged == setup.bundles,
        "saw {} bundles",
        report.staged
    );
    println!("{}", json!({"vm_hwm_kb": status_kb("VmHWM")}));
    Ok(())
}

/// Ticks of the manager loop until `bundles` workers were submitted, jobs staying pending:
/// compat (upstream's one launch per tick), or `burst` (#7: target mode, at most
/// [`BURST_LAUNCHES_PER_TICK`] launches per tick).
async fn reaction(setup: &Setup, burst: bool) -> Result<()> {
    install_subscriber();
    // Workers of one CPU: each of the stub's bundles fills one, so N bundles need N
    // submissions (on 4-CPU workers the manager packs four a worker and submits fewer).
    let backend = FakeBackend::new(WorkerShape::from_flags(1, 1, 8192));
    let mut flags = single_backend_flags(setup.bundles);
    if burst {
        flags.launch_mode = LaunchMode::Target;
        flags.max_launches_per_tick = BURST_LAUNCHES_PER_TICK;
    }
    let mut manager = manager_with(setup, flags, &backend)?;
    let mut ticks = 0;
    let cap = 10 * setup.bundles + 10;
    while backend.launches().len() < setup.bundles && ticks < cap {
        manager.tick().await?;
        ticks += 1;
    }
    println!(
        "{}",
        json!({"mode": if burst { "burst" } else { "compat" }, "bundles": setup.bundles, "ticks": ticks,
               "submitted": backend.launches().len()})
    );
    Ok(())
}

async fn ticks_loop(setup: &Setup, warmup: usize, ticks: usize) -> Result<()> {
    install_subscriber();
    let backend = backend_with_jobs(setup.jobs);
    let mut manager = manager(setup, &backend, setup.jobs)?;
    for _ in 0..warmup {
        manager.tick().await?;
    }
    let http = reqwest::Client::new();
    let before = request_counts(&http, &setup.server).await?;
    let (mut cpu, mut wall, mut read) = (Vec::new(), Vec::new(), 0);
    for _ in 0..ticks {
        let (c0, w0) = (process_cpu(), Instant::now());
        let report = manager.tick().await?;
        let (c1, w1) = (process_cpu(), Instant::now());
        cpu.push(ms(c1 - c0));
        wall.push(ms(w1 - w0));
        ensure!(
            report.staged == setup.bundles,
            "saw {} bundles",
            report.staged
        );
        ensure!(report.launched.is_empty(), "a steady-state tick launched");
        read = report.read;
    }
    let hwm = status_kb("VmHWM");
    let rss = status_kb("VmRSS");
    let after = request_counts(&http, &setup.server).await?;
    let searches = after.get("/rest/bundles").copied().unwrap_or(0)
        - before.get("/rest/bundles").copied().unwrap_or(0);
    let all: u64 = after.values().sum::<u64>() - before.values().sum::<u64>();
    if setup.skip_floor {
        println!(
            "{}",
            json!({"cpu": summarize(&cpu).json(), "vm_hwm_kb": hwm})
        );
        return Ok(());
    }
    let pages = fetch_pages(&http, &setup.server, read).await?;
    let payload: usize = pages.iter().map(Vec::len).sum();
    let floor = parse_floor(&pages, ticks.max(10), |page| {
        serde_json::from_slice::<serde_json::Value>(page).map(drop)
    })?;
    let typed = parse_floor(&pages, ticks.max(10), |page| {
        serde_json::from_slice::<typed::Document>(page).map(drop)
    })?;
    let out = json!({
        "bundles": setup.bundles, "jobs": setup.jobs,
        "cpu": summarize(&cpu).json(), "wall": summarize(&wall).json(),
        "vm_hwm_kb": hwm, "vm_rss_kb": rss,
        "http_per_tick": all as f64 / ticks as f64,
        "searches_per_tick": searches as f64 / ticks as f64,
        "payload_bytes": payload, "pages": pages.len(),
        "parse_value_cpu": summarize(&floor).json(),
        "parse_typed_cpu": summarize(&typed).json(),
    });
    println!("{out}");
    Ok(())
}

/// CPU per round of parsing every page, `rounds` times.
fn parse_floor(
    pages: &[Vec<u8>],
    rounds: usize,
    parse: impl Fn(&[u8]) -> serde_json::Result<()>,
) -> Result<Vec<f64>> {
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = process_cpu();
        for page in pages {
            parse(page)?;
        }
        samples.push(ms(process_cpu() - start));
    }
    Ok(samples)
}

/// The `read` bundles a tick reads, as the client requests them (same query, sorted oldest
/// first, pages of at most [`SEARCH_PAGE_SIZE`]).
async fn fetch_pages(http: &reqwest::Client, server: &str, read: usize) -> Result<Vec<Vec<u8>>> {
    let token: serde_json::Value = http
        .post(format!("{server}/rest/oauth2/token"))
        .header("Authorization", "Basic Y29kYWxhYl9jbGlfY2xpZW50Og==")
        .form(&[
            ("grant_type", "password"),
            ("username", USER),
            ("password", PASSWORD),
        ])
        .send()
        .await?
        .json()
        .await?;
    let access = token["access_token"].as_str().context("no access token")?;
    let mut pages = Vec::new();
    for offset in (0..read.max(1)).step_by(SEARCH_PAGE_SIZE) {
        let limit = (read - offset).min(SEARCH_PAGE_SIZE);
        let mut query: Vec<(&str, String)> = vec![
            ("worksheet", "None".into()),
            ("keywords", "id=.sort".into()),
            ("keywords", "state=staged".into()),
            ("keywords", ".mine".into()),
            ("keywords", format!(".limit={limit}")),
        ];
        if offset > 0 {
            query.push(("keywords", format!(".offset={offset}")));
        }
        let body = http
            .get(format!("{server}/rest/bundles"))
            .header("X-Requested-With", "XMLHttpRequest")
            .bearer_auth(access)
            .query(&query)
            .send()
            .await?
            .bytes()
            .await?;
        ensure!(typed_count(&body)? == limit, "the server sent a short page");
        pages.push(body.to_vec());
    }
    Ok(pages)
}

fn typed_count(body: &[u8]) -> Result<usize> {
    Ok(serde_json::from_slice::<typed::Document>(body)?.data.len())
}

/// The fields the manager uses, as a typed serde model (what a typed client would parse into).
mod typed {
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub struct Document {
        pub data: Vec<Resource>,
        #[serde(default)]
        #[allow(dead_code)]
        pub included: Vec<serde::de::IgnoredAny>,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    pub struct Resource {
        pub id: String,
        pub attributes: Attributes,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    pub struct Attributes {
        pub uuid: String,
        pub metadata: Metadata,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    pub struct Metadata {
        #[serde(default)]
        pub request_cpus: serde_json::Value,
        #[serde(default)]
        pub request_gpus: serde_json::Value,
        #[serde(default)]
        pub request_memory: serde_json::Value,
        #[serde(default)]
        pub request_queue: serde_json::Value,
        #[serde(default)]
        pub tags: serde_json::Value,
    }
}

#[cfg(test)]
mod tests {
    use super::status_kb;

    #[test]
    fn reads_own_peak_rss() {
        assert!(status_kb("VmHWM") > 0);
        assert_eq!(status_kb("NoSuchField"), 0);
    }
}
