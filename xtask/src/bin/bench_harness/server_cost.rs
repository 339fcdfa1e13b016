//! Server CPU per tick, for real (issue #15): what one steady tick of each manager costs the
//! REAL CodaLab 1.7.5 server of `cargo xtask services up codalab` (its REST server and MariaDB,
//! CPU time read from `/proc`; `server_cpu.rs`) with 100, 1,000 and 10,000 staged bundles
//! (`--quick`: 100 and 1,000).
//!
//! The bundles are staged by `xtask/services/codalab/stage.sh` as the user `bench` (its own, so
//! that no test sees them, nor the bench theirs), 1 CPU and 256m each, in a request queue no
//! worker serves (they stay staged); sizes grow by staging the difference; every bundle of
//! `bench` is removed before and after. Sides, each ticking back to back in a process of its
//! own for `seconds` (at least `min_ticks` ticks, after 2 warm-up ticks):
//! - upstream: its own `run_one_iteration` (`bench/peer_iteration.py --mode server-cost`), with
//!   its defaults (min 1, max 10) and 10 jobs (5 pending, 5 active: none launches); its request
//!   is `state=staged .mine` with `include=owner` and no `.limit` (the server answers 10);
//! - ours (`bench-ours --server-cost`): core's manager with the real client, upstream's defaults
//!   and 10 jobs, or `--max-workers 100` and 100 jobs; "steady" reuses its count (a queue that
//!   does not move), "counted" counts at every tick (`CountEvery::ALWAYS`; by default a moving
//!   queue is counted every 15 s, a steady one every 60 s: the table adds those shares);
//! - the reference of the target for larger pools: `.limit=(Σmax − busy)` (50) and
//!   `.count`, replayed.
//!
//! The server does other work meanwhile (its bundle manager polls every second, and with
//! thousands of staged bundles that is most of it; other tests use it too): each round first
//! measures an idle window of the same length, and a side's figure is its window's server CPU
//! minus the idle rate, per tick. Sides run in turn, `rounds` times; the table shows medians.

use crate::args::flag;
use crate::codalab_rest::{Rest, SERVER};
use crate::run::{peer_python, publish, repo_root, results_path};
use crate::server_cpu::{cpu_ms, pids_arg, server_pids};
use crate::stats::summarize;
use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The bench's own CodaLab user (`xtask/services/codalab/common.sh`).
const USER: (&str, &str) = ("bench", "benchpw");
/// The request queue of the bench's bundles: no worker has this tag, so they stay staged.
const QUEUE: &str = "bench-server-cost";

/// Who ticks.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Upstream's own iteration.
    Peer,
    /// Our manager.
    Ours { max_workers: u32, every_tick: bool },
    /// These requests per tick.
    Replay(&'static [&'static str]),
}

/// One measured side.
#[derive(Debug, Clone, Copy)]
struct Side {
    name: &'static str,
    kind: Kind,
}

const SIDES: [Side; 6] = [
    Side {
        name: "upstream (defaults, max 10)",
        kind: Kind::Peer,
    },
    Side {
        name: "ours, defaults (max 10), steady",
        kind: Kind::Ours {
            max_workers: 10,
            every_tick: false,
        },
    },
    Side {
        name: "ours, defaults (max 10), counted",
        kind: Kind::Ours {
            max_workers: 10,
            every_tick: true,
        },
    },
    Side {
        name: "ours, --max-workers 100, steady",
        kind: Kind::Ours {
            max_workers: 100,
            every_tick: false,
        },
    },
    Side {
        name: "ours, --max-workers 100, counted",
        kind: Kind::Ours {
            max_workers: 100,
            every_tick: true,
        },
    },
    Side {
        name: "reference: .limit=50 + .count",
        kind: Kind::Replay(&[
            "include=owner&worksheet=None&keywords=state%3Dstaged&keywords=.mine&keywords=.limit%3D50",
            "keywords=state%3Dstaged&keywords=.mine&keywords=.count",
        ]),
    },
];

/// What one run measures.
#[derive(Debug, Clone)]
struct Plan {
    sizes: Vec<usize>,
    rounds: usize,
    seconds: f64,
    min_ticks: usize,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            // CI's check that the section runs and its figures are sane: one round a side (the
            // published figures are a full run's medians of 4).
            Self {
                sizes: vec![100, 1000],
                rounds: 1,
                seconds: 3.0,
                min_ticks: 10,
            }
        } else {
            Self {
                sizes: vec![100, 1000, 10_000],
                rounds: 4,
                seconds: 6.0,
                min_ticks: 10,
            }
        }
    }
}

/// `bench-harness server-cost [--quick] [--sizes 100,1000]`: only this section, merged into the
/// results of the last run (the other sections keep their figures).
pub fn only(args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let mut plan = Plan::new(quick);
    if let Some(sizes) = flag::<String>(args, "--sizes")? {
        plan.sizes = sizes
            .split(',')
            .map(|s| s.parse().with_context(|| format!("--sizes: `{s}`")))
            .collect::<Result<_>>()?;
    }
    let path = results_path(quick)?;
    let mut results: Value = match std::fs::read_to_string(&path) {
        Ok(text) => {
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?
        }
        Err(_) => json!({ "quick": quick }),
    };
    results["server_cost"] = measure(&plan)?;
    publish(quick, &results)
}

/// The section's results, or none when the server is missing and the run may go without it
/// (quick, not CI).
pub fn measure_all(quick: bool) -> Result<Value> {
    if !codalab_up() {
        let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
        if quick && !in_ci {
            eprintln!(
                "bench: server-cost rows skipped (codalab: `cargo xtask services up codalab`)"
            );
            return Ok(Value::Null);
        }
        bail!("the server-cost section needs codalab: `cargo xtask services up codalab`");
    }
    measure(&Plan::new(quick))
}

fn codalab_up() -> bool {
    Command::new("bash")
        .arg(repo_root().join("xtask/services/codalab/status.sh"))
        .env("SERVICES_DIR", repo_root().join(".services"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn measure(plan: &Plan) -> Result<Value> {
    let rest = Rest::login_as(USER)?;
    let removed = rest.remove_all_mine()?;
    if removed > 0 {
        eprintln!("bench: removed {removed} bundles left by an earlier run");
    }
    let result = measure_sizes(plan, &rest);
    let cleanup = rest.remove_all_mine();
    let rows = result?;
    cleanup.context("removing the bench's bundles")?;
    Ok(json!({
        "rounds": plan.rounds, "seconds": plan.seconds, "user": USER.0, "rows": rows,
    }))
}

fn measure_sizes(plan: &Plan, rest: &Rest) -> Result<Vec<Value>> {
    let python = peer_python().context("the codalab venv (the peer) is missing")?;
    let mut rows = Vec::new();
    for &size in &plan.sizes {
        stage_up_to(rest, size)?;
        let pids = server_pids(&repo_root().join(".services"))?;
        let mut idle = Vec::new();
        let mut runs: Vec<Vec<Value>> = vec![Vec::new(); SIDES.len()];
        for round in 0..plan.rounds {
            eprintln!("bench: server cost, {size} staged, round {}", round + 1);
            idle.push(idle_rate(&pids, plan.seconds)?);
            for (side, runs) in SIDES.iter().zip(&mut runs) {
                runs.push(run_side(side, plan, &pids, &python)?);
            }
        }
        let idle_rate = median(&idle);
        for (side, runs) in SIDES.iter().zip(&runs) {
            let row = summarize_side(side, size, runs, idle_rate);
            eprintln!("bench:   {row}");
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Stages bundles as bench until `size` are staged.
fn stage_up_to(rest: &Rest, size: usize) -> Result<()> {
    let staged = rest.count(&["state=staged", ".mine"])?;
    ensure!(
        staged <= size,
        "bench has {staged} staged bundles, more than {size}"
    );
    if staged < size {
        let started = Instant::now();
        let output = Command::new("bash")
            .arg(repo_root().join("xtask/services/codalab/stage.sh"))
            .args([
                USER.0,
                &(size - staged).to_string(),
                "--request-queue",
                QUEUE,
            ])
            .args(["--request-cpus", "1", "--request-memory", "256m"])
            .env("SERVICES_DIR", repo_root().join(".services"))
            .env("STAGE_TIMEOUT", "900")
            .stdout(Stdio::null())
            .output()
            .context("running stage.sh")?;
        ensure!(
            output.status.success(),
            "stage.sh failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!(
            "bench: staged {} bundles in {:.0} s",
            size - staged,
            started.elapsed().as_secs_f64()
        );
    }
    let staged = rest.count(&["state=staged", ".mine"])?;
    ensure!(
        staged == size,
        "bench has {staged} staged bundles, not {size}"
    );
    Ok(())
}

/// The server's CPU per second while no side runs (ms/s).
fn idle_rate(pids: &[u32], seconds: f64) -> Result<f64> {
    let before = cpu_ms(pids)?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    Ok((cpu_ms(pids)? - before) / started.elapsed().as_secs_f64())
}

/// One side's ticks, in a process of its own; its JSON line.
fn run_side(side: &Side, plan: &Plan, pids: &[u32], python: &std::path::Path) -> Result<Value> {
    let common = [
        "--server".to_owned(),
        SERVER.to_owned(),
        "--server-pids".to_owned(),
        pids_arg(pids),
        "--seconds".to_owned(),
        plan.seconds.to_string(),
        "--min-ticks".to_owned(),
        plan.min_ticks.to_string(),
        "--warmup".to_owned(),
        "2".to_owned(),
    ];
    let mut command = match side.kind {
        Kind::Peer => {
            let mut command = crate::run::peer_command(python, SERVER, 0, 10)?;
            command.args(["--mode", "server-cost"]);
            command.env("CODALAB_USERNAME", USER.0);
            command.env("CODALAB_PASSWORD", USER.1);
            command
        }
        Kind::Ours {
            max_workers,
            every_tick,
        } => {
            let mut command = Command::new(crate::run::ours_exe()?);
            command.args(["--server-cost", "--user", USER.0, "--password", USER.1]);
            command.args(["--max-workers", &max_workers.to_string()]);
            command.args(["--jobs", &max_workers.to_string()]);
            if every_tick {
                command.arg("--count-every-tick");
            }
            command
        }
        Kind::Replay(queries) => {
            let mut command = Command::new(crate::run::ours_exe()?);
            command.args(["--server-cost", "--user", USER.0, "--password", USER.1]);
            for query in queries {
                command.args(["--replay", query]);
            }
            command
        }
    };
    command.args(&common);
    let lines = crate::run::json_lines(command, "server-cost.log")?;
    lines
        .into_iter()
        .next()
        .with_context(|| format!("{} printed no result", side.name))
}

fn median(values: &[f64]) -> f64 {
    summarize(values).median
}

/// A side's row at `size`: medians over its rounds of the server's CPU per tick (less the idle
/// rate) and of its own CPU per tick.
fn summarize_side(side: &Side, size: usize, runs: &[Value], idle_rate: f64) -> Value {
    let per_tick = |run: &Value| {
        let ticks = run["ticks"].as_f64().unwrap_or(f64::NAN);
        let wall = run["wall_s"].as_f64().unwrap_or(f64::NAN);
        let server = run["server_cpu_ms"].as_f64().unwrap_or(f64::NAN);
        (server - idle_rate * wall) / ticks
    };
    let own = |run: &Value| match run["cpu_samples"].as_array() {
        Some(samples) => median(&samples.iter().filter_map(Value::as_f64).collect::<Vec<_>>()),
        None => run["own_cpu"]["median_ms"].as_f64().unwrap_or(f64::NAN),
    };
    let field = |name: &str| {
        median(
            &runs
                .iter()
                .filter_map(|r| r[name].as_f64())
                .collect::<Vec<_>>(),
        )
    };
    let server: Vec<f64> = runs.iter().map(per_tick).collect();
    let own: Vec<f64> = runs.iter().map(own).collect();
    json!({
        "staged": size, "side": side.name,
        "server_ms": median(&server), "server_rounds": server,
        "own_ms": median(&own),
        "requests_per_tick": field("requests_per_tick"), "read_per_tick": field("read_per_tick"),
        "ticks": field("ticks"), "idle_ms_per_s": idle_rate,
    })
}

/// Ticks per count at the default `--sleep-time` of 5 s: a steady queue is counted every 60 s,
/// a moving one every 15 s (`codalab::CountEvery`).
const TICKS_PER_COUNT: [(&str, f64); 2] = [("steady queue", 12.0), ("moving queue", 3.0)];

fn row<'a>(rows: &'a [Value], staged: u64, side: &str) -> Option<&'a Value> {
    rows.iter()
        .find(|r| r["staged"].as_u64() == Some(staged) && r["side"] == side)
}

fn ms(value: &Value) -> String {
    value
        .as_f64()
        .filter(|v| v.is_finite())
        .map_or_else(|| "—".into(), |v| format!("{v:.1}"))
}

/// The section's tables in the bench report.
pub fn render(out: &mut String, results: &Value) {
    use std::fmt::Write as _;
    let section = &results["server_cost"];
    let Some(rows) = section["rows"].as_array() else {
        return;
    };
    let _ = writeln!(
        out,
        "\n### Server CPU per tick, real CodaLab 1.7.5 server (ms: REST server + MariaDB from /proc, \
         idle rate subtracted; medians of {} rounds)\n\n\
         | staged | side | server | ÷ upstream | requests | bundles read | own CPU | server + own |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|",
        section["rounds"]
    );
    let mut sizes: Vec<u64> = rows.iter().filter_map(|r| r["staged"].as_u64()).collect();
    sizes.dedup();
    for &staged in &sizes {
        let upstream = row(rows, staged, SIDES[0].name).and_then(|r| r["server_ms"].as_f64());
        for r in rows.iter().filter(|r| r["staged"].as_u64() == Some(staged)) {
            let server = r["server_ms"].as_f64();
            let total = server.zip(r["own_ms"].as_f64()).map(|(s, o)| s + o);
            let _ = writeln!(
                out,
                "| {staged} | {} | {} | {} | {} | {} | {} | {} |",
                r["side"].as_str().unwrap_or("?"),
                ms(&r["server_ms"]),
                ratio_text(server, upstream),
                ms(&r["requests_per_tick"]),
                ms(&r["read_per_tick"]),
                ms(&r["own_ms"]),
                ms(&json!(total)),
            );
        }
        for (queue, ticks) in TICKS_PER_COUNT {
            if let Some(amortized) = amortized(rows, staged, 10, ticks) {
                let _ = writeln!(
                    out,
                    "| {staged} | ours, defaults, at 5 s ticks, a {queue} (a count every {ticks} ticks) | {amortized:.1} | {} | | | | |",
                    ratio_text(Some(amortized), upstream),
                );
            }
        }
    }
    targets(out, rows, &sizes);
}

fn ratio_text(value: Option<f64>, base: Option<f64>) -> String {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => format!("{:.2}×", v / b),
        _ => "—".into(),
    }
}

/// Our steady tick plus the count's share when one tick in `ticks` counts.
fn amortized(rows: &[Value], staged: u64, max_workers: u32, ticks: f64) -> Option<f64> {
    let side = |counted: bool| {
        let name = SIDES.iter().find_map(|s| match s.kind {
            Kind::Ours {
                max_workers: m,
                every_tick,
            } if m == max_workers && every_tick == counted => Some(s.name),
            _ => None,
        })?;
        row(rows, staged, name)?["server_ms"].as_f64()
    };
    let (steady, counted) = (side(false)?, side(true)?);
    Some(steady + (counted - steady).max(0.0) / ticks)
}

fn targets(out: &mut String, rows: &[Value], sizes: &[u64]) {
    use std::fmt::Write as _;
    let server = |staged, side: &str| row(rows, staged, side).and_then(|r| r["server_ms"].as_f64());
    let _ = writeln!(
        out,
        "\n#### Targets of issue #15 (reported, not asserted)\n\n| target | staged | measured | |\n|---|---:|---:|---|"
    );
    let mut line = |name: &str, staged: u64, value: Option<f64>, ok: fn(f64) -> bool| {
        let verdict = match value {
            Some(v) if ok(v) => "met",
            Some(_) => "**missed**",
            None => "not measured",
        };
        let shown = value.map_or_else(|| "—".into(), |v| format!("{v:.2}×"));
        let _ = writeln!(out, "| {name} | {staged} | {shown} | {verdict} |");
    };
    for &staged in sizes.iter().filter(|&&s| s >= 1000) {
        let upstream = server(staged, SIDES[0].name);
        line(
            "server CPU per steady tick, defaults ≤ 1.5× upstream's",
            staged,
            server(staged, SIDES[1].name)
                .zip(upstream)
                .map(|(o, u)| o / u),
            |r| r <= 1.5,
        );
        line(
            "the same with its count (a steady queue at 5 s ticks) ≤ 1.5× upstream's",
            staged,
            amortized(rows, staged, 10, TICKS_PER_COUNT[0].1)
                .zip(upstream)
                .map(|(o, u)| o / u),
            |r| r <= 1.5,
        );
        line(
            "server CPU per steady tick, --max-workers 100 ≤ `.limit=50` + `.count`",
            staged,
            server(staged, SIDES[3].name)
                .zip(server(staged, SIDES[5].name))
                .map(|(o, r)| o / r),
            |r| r <= 1.0,
        );
    }
}
