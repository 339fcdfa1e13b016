//! `bench-harness run [--quick]`: the whole bench, one process per measured side and size.

use crate::args::{BURST_LAUNCHES_PER_TICK, PASSWORD, USER};
use crate::backends::{write_slurm_jobs, write_slurm_stub};
use crate::report;
use crate::serve::ServeChild;
use crate::stats::{ms, summarize};
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// What one run measures.
#[derive(Debug)]
struct Plan {
    quick: bool,
    bundles: Vec<usize>,
    jobs: Vec<usize>,
    first_tick_runs: (usize, usize),
    reaction: Vec<usize>,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                quick,
                bundles: vec![100, 1000],
                jobs: vec![10],
                first_tick_runs: (3, 1),
                reaction: vec![1, 10],
            }
        } else {
            Self {
                quick,
                bundles: vec![100, 1000, 10_000],
                jobs: vec![10, 100, 1000],
                first_tick_runs: (15, 3),
                reaction: vec![1, 10, 100],
            }
        }
    }

    /// (warm-up, measured) ticks of our manager at `bundles`.
    fn our_ticks(&self, bundles: usize) -> (usize, usize) {
        let measured = (300_000 / bundles).clamp(30, 300);
        if self.quick { (2, 20) } else { (3, measured) }
    }

    /// (warm-up, measured) iterations of the peer at `bundles`.
    fn peer_ticks(&self, bundles: usize) -> (usize, usize) {
        if self.quick {
            return (1, 3);
        }
        (1, if bundles >= 10_000 { 9 } else { 15 })
    }
}

/// Own-job counts of the backend-calls table.
pub fn backend_sizes(args: &[String]) -> Vec<usize> {
    if args.iter().any(|a| a == "--quick") {
        vec![1, 100]
    } else {
        vec![1, 10, 100, 1000, 3000]
    }
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn work_dir() -> Result<PathBuf> {
    let dir = repo_root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

pub fn peer_python() -> Option<PathBuf> {
    let python = repo_root().join(".services/codalab/venv/bin/python");
    python.exists().then_some(python)
}

pub fn run(args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let plan = Plan::new(quick);
    let python = peer_python();
    if python.is_none() {
        if !quick {
            bail!(
                "the Python peer's venv is missing ({}): start it with `cargo xtask services up codalab`",
                repo_root().join(".services/codalab/venv").display()
            );
        }
        eprintln!("bench: Python peer skipped (no venv; `cargo xtask services up codalab`)");
    }
    let python = python.as_deref();
    let load_before = load_average();
    let started = Instant::now();
    let mut grid = Vec::new();
    let mut first_ticks = Vec::new();
    for &bundles in &plan.bundles {
        let server = ServeChild::start(bundles)?;
        for &jobs in &plan.jobs {
            eprintln!("bench: {bundles} bundles × {jobs} jobs");
            let ours = ours_ticks(&plan, &server.url, bundles, jobs)?;
            let peer = match python {
                Some(python) => Some(peer_ticks(&plan, python, &server.url, bundles, jobs)?),
                None => None,
            };
            grid.push(json!({"bundles": bundles, "jobs": jobs, "ours": ours, "peer": peer}));
        }
        let jobs = plan.jobs[plan.jobs.len() / 2];
        first_ticks.push(first_tick(&plan, python, &server.url, bundles, jobs)?);
    }
    let mut backends = backend_calls(quick)?;
    let mut peer_backends = match python {
        Some(python) => peer_slurm_calls(quick, python)?,
        None => Vec::new(),
    };
    let (real, peer_real) = crate::slurm_real::measure_all(quick, python, &work_dir()?)?;
    backends.extend(real);
    peer_backends.extend(peer_real);
    let (aws, peer_aws) = crate::aws::measure_all(quick, python)?;
    backends.extend(aws);
    peer_backends.extend(peer_aws);
    let (k8s, peer_k8s) = crate::k8s::measure_all(quick, python)?;
    backends.extend(k8s);
    peer_backends.extend(peer_k8s);
    let (azure, peer_azure) = crate::azure::measure_all(quick, python)?;
    backends.extend(azure);
    peer_backends.extend(peer_azure);
    backends.extend(crate::gce::measure_all(quick)?);
    let reaction = reaction(&plan, python)?;
    let reaction_model = reaction_model(&plan);
    let packing_model = crate::packing::measure(quick);
    let spill_model = crate::spill::measure(quick);
    let fallback_model = crate::fallback::measure(quick);
    let anchors = crate::anchors::measure(quick);
    let staged_ready = crate::staged_ready::measure_all(quick)?;
    let packing_real = crate::packing_real::measure_full(quick, args)?;
    let slurm_forecast = crate::forecast_real::measure_all(quick)?;
    let advise_real = crate::advise_real::measure_all(quick)?;
    let server_cost = crate::server_cost::measure_all(quick)?;
    let results = json!({
        "quick": quick,
        "machine": machine(python, load_before),
        "duration_s": started.elapsed().as_secs_f64(),
        "load_average_after": load_average(),
        "grid": grid,
        "first_tick": first_ticks,
        "backends": backends,
        "peer_backends": peer_backends,
        "reaction": reaction,
        "reaction_model": reaction_model,
        "packing_model": packing_model,
        "spill_model": spill_model,
        "fallback_model": fallback_model,
        "anchors": anchors,
        "staged_ready": staged_ready,
        "packing_real": packing_real,
        "slurm_forecast": slurm_forecast,
        "advise_real": advise_real,
        "server_cost": server_cost,
    });
    publish(quick, &results)
}

/// Where a run's results go: quick runs (CI) must not overwrite the figures BENCH.md shows.
pub fn results_path(quick: bool) -> Result<PathBuf> {
    Ok(if quick {
        work_dir()?.join("results-quick.json")
    } else {
        repo_root().join("bench/results.json")
    })
}

/// Prints the tables, writes the results and (full runs) the table in `BENCH.md`.
pub fn publish(quick: bool, results: &Value) -> Result<()> {
    let table = report::render(results);
    println!("{table}");
    let out = results_path(quick)?;
    std::fs::write(&out, serde_json::to_string_pretty(results)? + "\n")?;
    eprintln!("bench: wrote {}", out.display());
    if !quick {
        report::update_bench_md(&repo_root().join("BENCH.md"), &table)?;
    }
    Ok(())
}

/// Runs `command`, stderr to `log`, and returns the JSON lines it printed.
pub fn json_lines(mut command: Command, log: &str) -> Result<Vec<Value>> {
    let log_path = work_dir()?.join(log);
    command.stderr(std::fs::File::create(&log_path)?);
    let output = command.output().context("spawning a bench child")?;
    if !output.status.success() {
        bail!(
            "bench child failed ({}); see {}",
            output.status,
            log_path.display()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// `bench-ours`, built next to this harness.
pub fn ours_exe() -> Result<PathBuf> {
    let exe = std::env::current_exe()?.with_file_name("bench-ours");
    ensure!(
        exe.exists(),
        "{} is missing: build it with `cargo build --release -p xtask --features bench --bin bench-ours`",
        exe.display()
    );
    Ok(exe)
}

fn ours_command(server: &str, bundles: usize, jobs: usize) -> Result<Command> {
    let mut command = Command::new(ours_exe()?);
    command.args(["--server", server]).args([
        "--bundles",
        &bundles.to_string(),
        "--jobs",
        &jobs.to_string(),
    ]);
    Ok(command)
}

pub fn peer_command(python: &Path, server: &str, bundles: usize, jobs: usize) -> Result<Command> {
    let home = work_dir()?.join("codalab-home");
    std::fs::create_dir_all(&home)?;
    let mut command = Command::new(python);
    command
        .arg(repo_root().join("bench/peer_iteration.py"))
        .args(["--server", server])
        .args([
            "--bundles",
            &bundles.to_string(),
            "--jobs",
            &jobs.to_string(),
        ])
        .env("CODALAB_USERNAME", USER)
        .env("CODALAB_PASSWORD", PASSWORD)
        .env("CODALAB_HOME", home)
        .env("PYTHONWARNINGS", "ignore");
    Ok(command)
}

fn ours_ticks(plan: &Plan, server: &str, bundles: usize, jobs: usize) -> Result<Value> {
    let (warmup, ticks) = plan.our_ticks(bundles);
    let mut command = ours_command(server, bundles, jobs)?;
    command.args([
        "--warmup",
        &warmup.to_string(),
        "--ticks",
        &ticks.to_string(),
    ]);
    let lines = json_lines(command, &format!("ours-{bundles}-{jobs}.log"))?;
    lines.into_iter().next().context("ours printed no result")
}

fn peer_ticks(
    plan: &Plan,
    python: &Path,
    server: &str,
    bundles: usize,
    jobs: usize,
) -> Result<Value> {
    let (warmup, ticks) = plan.peer_ticks(bundles);
    let mut command = peer_command(python, server, bundles, jobs)?;
    command.args(["--mode", "ticks", "--warmup", &warmup.to_string()]);
    command.args(["--ticks", &ticks.to_string()]);
    let lines = json_lines(command, &format!("peer-{bundles}-{jobs}.log"))?;
    let raw = lines.into_iter().next().context("peer printed no result")?;
    let samples = |key: &str| -> Vec<f64> {
        raw[key]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    Ok(json!({
        "bundles": bundles, "jobs": jobs,
        "cpu": summarize(&samples("cpu_samples")).json(),
        "wall": summarize(&samples("wall_samples")).json(),
        "vm_hwm_kb": raw["vm_hwm_kb"], "vm_rss_kb": raw["vm_rss_kb"],
        "http_per_tick": raw["http_per_tick"], "searches_per_tick": raw["searches_per_tick"],
    }))
}

/// Spawns `command` and times spawn → its `first-tick` line; returns (ms, peak RSS kB).
fn time_to_first_tick(mut command: Command, log: &str) -> Result<(f64, u64)> {
    let log_path = work_dir()?.join(log);
    command
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path)?);
    let start = Instant::now();
    let mut child = command.spawn()?;
    let mut reader = BufReader::new(child.stdout.take().context("child stdout")?);
    let mut line = String::new();
    let mut elapsed = None;
    let mut hwm = 0;
    while reader.read_line(&mut line)? > 0 {
        if line.trim() == "first-tick" && elapsed.is_none() {
            elapsed = Some(ms(start.elapsed()));
        } else if let Ok(value) = serde_json::from_str::<Value>(&line) {
            hwm = value["vm_hwm_kb"].as_u64().unwrap_or(0);
        }
        line.clear();
    }
    let status = child.wait()?;
    ensure!(
        status.success(),
        "first-tick child failed ({status}); see {}",
        log_path.display()
    );
    Ok((elapsed.context("no first-tick line")?, hwm))
}

fn first_tick(
    plan: &Plan,
    python: Option<&Path>,
    server: &str,
    bundles: usize,
    jobs: usize,
) -> Result<Value> {
    let (our_runs, peer_runs) = plan.first_tick_runs;
    let mut ours = Vec::new();
    for _ in 0..our_runs {
        let mut command = ours_command(server, bundles, jobs)?;
        command.arg("--first-tick");
        ours.push(time_to_first_tick(command, "ours-first-tick.log")?.0);
    }
    let mut peer = Vec::new();
    if let Some(python) = python {
        for _ in 0..peer_runs {
            let mut command = peer_command(python, server, bundles, jobs)?;
            command.args(["--mode", "first-tick"]);
            peer.push(time_to_first_tick(command, "peer-first-tick.log")?.0);
        }
    }
    Ok(
        json!({"bundles": bundles, "jobs": jobs, "ours": summarize(&ours).json(),
              "peer": (!peer.is_empty()).then(|| summarize(&peer).json())}),
    )
}

/// The stub directory for Slurm, and `PATH` with it first.
fn slurm_stub() -> Result<(PathBuf, String)> {
    let stub = work_dir()?.join("slurm-stub");
    write_slurm_stub(&stub)?;
    let path = format!(
        "{}:{}",
        stub.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Ok((stub, path))
}

fn backend_calls(quick: bool) -> Result<Vec<Value>> {
    eprintln!("bench: backend calls per tick");
    let (stub, path) = slurm_stub()?;
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["ours-backends", "--slurm-stub"])
        .arg(&stub)
        .env("PATH", path);
    if quick {
        command.arg("--quick");
    }
    json_lines(command, "ours-backends.log")
}

/// Upstream's `SlurmBatchWorkerManager.get_worker_jobs` against the same stubs.
fn peer_slurm_calls(quick: bool, python: &Path) -> Result<Vec<Value>> {
    eprintln!("bench: peer Slurm calls per tick");
    let (stub, path) = slurm_stub()?;
    let server = ServeChild::start(1)?;
    let sizes: &[usize] = if quick {
        &[1, 100]
    } else {
        &[1, 10, 100, 1000]
    };
    let mut rows = Vec::new();
    for &jobs in sizes {
        write_slurm_jobs(&stub, jobs)?;
        let mut command = peer_command(python, &server.url, 1, jobs)?;
        command
            .args(["--mode", "slurm-calls", "--rounds", "3", "--stub"])
            .arg(&stub)
            .env("PATH", &path);
        rows.push(crate::listing::peer_row(
            "slurm",
            jobs,
            command,
            "peer-slurm.log",
        )?);
    }
    Ok(rows)
}

fn reaction(plan: &Plan, python: Option<&Path>) -> Result<Vec<Value>> {
    eprintln!("bench: reaction");
    let mut rows = Vec::new();
    for &bundles in &plan.reaction {
        let server = ServeChild::start(bundles)?;
        let mut command = ours_command(&server.url, bundles, 0)?;
        command.arg("--reaction");
        let ours = json_lines(command, "ours-reaction.log")?.into_iter().next();
        let mut command = ours_command(&server.url, bundles, 0)?;
        command.args(["--reaction", "--burst"]);
        let burst = json_lines(command, "ours-reaction-burst.log")?
            .into_iter()
            .next();
        let peer = match python {
            Some(python) => {
                let mut command = peer_command(python, &server.url, bundles, 0)?;
                command.args(["--mode", "reaction"]);
                json_lines(command, "peer-reaction.log")?.into_iter().next()
            }
            None => None,
        };
        rows.push(
            json!({"bundles": bundles, "mode": "compat", "ours": ours, "peer": peer,
                         "ours_burst": burst}),
        );
    }
    Ok(rows)
}

/// Compat vs burst through core's pure policy (`testing::reaction_ticks`, issue #7): ticks
/// until N bundles got N submissions, with submitted jobs staying pending.
fn reaction_model(plan: &Plan) -> Vec<Value> {
    use codalab_wm_core::LaunchMode;
    use codalab_wm_core::testing::{ReactionScenario, reaction_ticks};
    let mut rows = Vec::new();
    for &bundles in &plan.reaction {
        for (mode, launch_mode) in [
            ("compat", LaunchMode::Compat),
            ("burst", LaunchMode::Target),
        ] {
            for min_seconds in [0, 60] {
                let scenario = ReactionScenario {
                    bundles,
                    launch_mode,
                    max_launches_per_tick: BURST_LAUNCHES_PER_TICK,
                    max_workers: bundles as u32,
                    min_seconds_between_workers: min_seconds,
                    ..ReactionScenario::default()
                };
                let ticks = reaction_ticks(&scenario);
                let seconds = ticks.map(|t| (t - 1) * scenario.sleep_time.as_secs());
                rows.push(json!({"bundles": bundles, "mode": mode, "min_seconds_between_workers": min_seconds,
                                 "max_launches_per_tick": BURST_LAUNCHES_PER_TICK, "sleep_time_s": scenario.sleep_time.as_secs(),
                                 "ticks": ticks, "seconds": seconds}));
            }
        }
    }
    rows
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn machine(python: Option<&Path>, load_before: String) -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let output = |program: &Path, args: &[&str]| {
        Command::new(program)
            .args(args)
            .current_dir(repo_root())
            .output()
            .ok()
            .map(|o| {
                let text = if o.stdout.is_empty() {
                    o.stderr
                } else {
                    o.stdout
                };
                String::from_utf8_lossy(&text).trim().to_owned()
            })
            .unwrap_or_default()
    };
    json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model,
        "mem_total_mb": mem_kb / 1024,
        "load_average_before": load_before,
        "date": output(Path::new("date"), &["-u", "+%Y-%m-%d %H:%M UTC"]),
        "commit": output(Path::new("git"), &["describe", "--always", "--dirty"]),
        "python": python.map(|p| output(p, &["--version"])),
    })
}
