//! The tables printed by `bench-harness run`, the target check, and the `BENCH.md` update.

use crate::stats::Summary;
use anyhow::{Context, Result};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

const BEGIN: &str = "<!-- bench:begin (written by `cargo xtask bench`) -->";
const END: &str = "<!-- bench:end -->";

/// `bench-harness <section> [--quick | --merge]` for a simulated section: measures it and
/// prints it alone, under the results key `key` its `render` reads; `--merge` (a full run)
/// also keeps it in `bench/results.json` beside the other sections and rewrites `BENCH.md`'s
/// table from them, so one section can be brought up to date without the hour-long run.
pub fn print_section(
    args: &[String],
    key: &str,
    measure: fn(bool) -> Vec<Value>,
    render: fn(&mut String, &Value),
) -> anyhow::Result<()> {
    let (quick, merge) = (has(args, "--quick"), has(args, "--merge"));
    anyhow::ensure!(
        !(quick && merge),
        "--merge keeps full runs only: drop --quick"
    );
    let rows = measure(quick);
    if merge {
        return merge_section(key, rows);
    }
    let mut out = String::new();
    render(&mut out, &serde_json::json!({ key: rows }));
    print!("{out}");
    Ok(())
}

/// Keeps one section's `rows`, measured in full, under `key` in the last full run's
/// `bench/results.json` beside the other sections, and rewrites `BENCH.md`'s table from them.
pub fn merge_section(key: &str, rows: Vec<Value>) -> anyhow::Result<()> {
    let path = crate::run::results_path(false)?;
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {} (run `cargo xtask bench` once)", path.display()))?;
    let mut results: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    results[key] = Value::Array(rows);
    crate::run::publish(false, &results)
}

fn has(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| a == flag)
}

/// A target's verdict from its checks (`(held, what)`): `met`, or `not met (p90, cost)`
/// naming those that failed.
pub fn verdict(checks: &[(bool, &str)]) -> String {
    let missed: Vec<&str> = (checks.iter())
        .filter(|(held, _)| !held)
        .map(|(_, what)| *what)
        .collect();
    match missed.as_slice() {
        [] => "met".into(),
        _ => format!("not met ({})", missed.join(", ")),
    }
}

/// A simulated section's rows under `key`, and the bundles its trace has (from the first).
pub fn section_rows<'a>(results: &'a Value, key: &str) -> Option<(&'a [Value], u64)> {
    let rows = results[key].as_array()?;
    let bundles = (rows.first()).map_or(0, |r| r["bundles"].as_u64().unwrap_or(0));
    Some((rows, bundles))
}

/// Seconds as a table shows them ("90 s"), or "—".
pub fn seconds(value: &Value) -> String {
    (value.as_f64()).map_or_else(|| "—".into(), |s| format!("{s:.0} s"))
}

fn summary(value: &Value) -> Option<Summary> {
    value.is_object().then(|| Summary::from_json(value))
}

fn med_p99(value: &Value) -> String {
    match summary(value) {
        Some(s) if s.median.is_finite() => format!("{} ({})", num(s.median), num(s.p99)),
        _ => "—".into(),
    }
}

/// A number with about three significant digits.
fn num(x: f64) -> String {
    if !x.is_finite() {
        "—".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if d > 0.0 && n.is_finite() => Some(n / d),
        _ => None,
    }
}

fn times(x: Option<f64>) -> String {
    x.map(|x| format!("{}×", num(x)))
        .unwrap_or_else(|| "—".into())
}

/// `median (p99) [best third]`.
fn med_p99_best(value: &Value) -> String {
    match summary(value) {
        Some(s) if s.median.is_finite() => {
            format!("{} ({}) [{}]", num(s.median), num(s.p99), num(s.best_third))
        }
        _ => "—".into(),
    }
}

/// The best third's median (see `stats::Summary`).
fn best(value: &Value) -> Option<f64> {
    summary(value)
        .map(|s| s.best_third)
        .filter(|m| m.is_finite())
}

fn median(value: &Value) -> Option<f64> {
    summary(value).map(|s| s.median).filter(|m| m.is_finite())
}

fn mb(kb: &Value) -> Option<f64> {
    kb.as_u64().map(|kb| kb as f64 / 1024.0)
}

fn opt(x: Option<f64>) -> String {
    x.map(num).unwrap_or_else(|| "—".into())
}

/// All tables and the targets, in Markdown.
pub fn render(results: &Value) -> String {
    let mut out = String::new();
    let empty = Vec::new();
    let grid = results["grid"].as_array().unwrap_or(&empty);
    let _ = writeln!(
        out,
        "### Per tick (ms, median (p99) [best third]; CPU = process CPU time, all threads)\n\n\
         Best third = the lowest median of the samples' three consecutive thirds (the cores are \
         shared; see `stats.rs`); the CPU ratios compare best thirds.\n\n\
         | bundles | jobs | CPU ours | parse floor | ours÷floor | CPU peer | peer÷ours | wall ours | wall peer | HTTP/tick ours / peer |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for row in grid {
        let (ours, peer) = (&row["ours"], &row["peer"]);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} |",
            row["bundles"],
            row["jobs"],
            med_p99_best(&ours["cpu"]),
            med_p99_best(&ours["parse_value_cpu"]),
            times(ratio(best(&ours["cpu"]), best(&ours["parse_value_cpu"]))),
            med_p99_best(&peer["cpu"]),
            times(ratio(best(&peer["cpu"]), best(&ours["cpu"]))),
            med_p99(&ours["wall"]),
            med_p99(&peer["wall"]),
            opt(ours["http_per_tick"].as_f64()),
            opt(peer["http_per_tick"].as_f64()),
        );
    }
    let _ = writeln!(
        out,
        "\n### Memory (peak RSS = VmHWM after the measured ticks, MB) and payload\n\n\
         | bundles | jobs | payload MB (pages) | typed-parse floor ms | peak RSS ours | peak RSS peer | peer÷ours |\n\
         |---:|---:|---:|---:|---:|---:|---:|"
    );
    for row in grid {
        let (ours, peer) = (&row["ours"], &row["peer"]);
        let _ = writeln!(
            out,
            "| {} | {} | {} ({}) | {} | {} | {} | {} |",
            row["bundles"],
            row["jobs"],
            opt(ours["payload_bytes"].as_f64().map(|b| b / 1e6)),
            ours["pages"],
            med_p99(&ours["parse_typed_cpu"]),
            opt(mb(&ours["vm_hwm_kb"])),
            opt(mb(&peer["vm_hwm_kb"])),
            times(ratio(mb(&peer["vm_hwm_kb"]), mb(&ours["vm_hwm_kb"]))),
        );
    }
    growth(&mut out, grid);
    first_tick(&mut out, results);
    backends(&mut out, results);
    reaction(&mut out, results);
    crate::anchors::render(&mut out, results);
    crate::packing::render(&mut out, results);
    crate::packing_real::render(&mut out, results);
    crate::spill::render(&mut out, results);
    crate::forecast_real::render(&mut out, results);
    crate::advise_real::render(&mut out, results);
    crate::fallback::render(&mut out, results);
    crate::staged_ready::render(&mut out, results);
    crate::server_cost::render(&mut out, results);
    targets(&mut out, results);
    out
}

fn cpu_at(grid: &[Value], side: &str, bundles: u64, jobs: u64) -> Option<f64> {
    grid.iter()
        .find(|r| r["bundles"].as_u64() == Some(bundles) && r["jobs"].as_u64() == Some(jobs))
        .and_then(|r| best(&r[side]["cpu"]))
}

fn growth(out: &mut String, grid: &[Value]) {
    let mut jobs: Vec<u64> = grid.iter().filter_map(|r| r["jobs"].as_u64()).collect();
    jobs.dedup();
    jobs.sort_unstable();
    jobs.dedup();
    let _ = writeln!(
        out,
        "\n### Growth of CPU per tick (best thirds), 1,000 → 10,000 bundles\n\n| jobs | ours | peer |\n|---:|---:|---:|"
    );
    for j in jobs {
        let ours = ratio(
            cpu_at(grid, "ours", 10_000, j),
            cpu_at(grid, "ours", 1000, j),
        );
        let peer = ratio(
            cpu_at(grid, "peer", 10_000, j),
            cpu_at(grid, "peer", 1000, j),
        );
        let _ = writeln!(out, "| {j} | {} | {} |", times(ours), times(peer));
    }
}

fn first_tick(out: &mut String, results: &Value) {
    let _ = writeln!(
        out,
        "\n### Process start → first completed tick (ms, median (p99); spawn to the line printed after the tick, login included)\n\n\
         | bundles | jobs | ours | peer | peer÷ours |\n|---:|---:|---:|---:|---:|"
    );
    for row in results["first_tick"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            row["bundles"],
            row["jobs"],
            med_p99(&row["ours"]),
            med_p99(&row["peer"]),
            times(ratio(median(&row["peer"]), median(&row["ours"]))),
        );
    }
}

fn backends(out: &mut String, results: &Value) {
    let _ = writeln!(
        out,
        "\n### Backend calls per tick (`get_worker_jobs`) vs own jobs\n\n\
         | backend | own jobs | calls per tick ours | peer | workers seen ours | peer | listing wall ms ours | peer | listing CPU ms ours | how counted |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    for row in results["backends"].as_array().into_iter().flatten() {
        let peer = results["peer_backends"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["backend"] == row["backend"] && p["jobs"] == row["jobs"]);
        let how = match row["backend"].as_str() {
            Some("slurm") => format!(
                "stub commands; subprocesses: `calls()` counter; stub log agrees: {}/tick",
                opt(row["stub_calls_per_tick"].as_f64())
            ),
            Some("slurm-real") => format!(
                "real slurmctld 22.05, held jobs; subprocesses logged by shims that exec the real commands: {}/tick, `calls()` counter: {}/tick",
                opt(row["stub_calls_per_tick"].as_f64()),
                opt(row["calls_per_tick"].as_f64())
            ),
            Some("azure") => "HTTP requests reaching the in-repo fake Batch service (Shared Key checked), counted by a proxy in front of it (ours: Task_List, 1000 tasks/page; upstream: one Job_GetTaskCounts)".into(),
            Some("kubernetes") => "HTTP requests reaching the in-repo fake API server, counted by a proxy in front of it (half the pods Running, half Pending; upstream counts Running pods only)".into(),
            Some("gce") => "HTTP requests reaching the in-repo fake Compute Engine API (requests checked against the discovery document), counted by a proxy in front of it (instances.aggregatedList, 500 instances/page, label filter; no upstream manager)".into(),
            Some("aws") => "HTTP requests reaching moto, counted by a proxy in front of it (moto answers `ListJobs` in one page)".into(),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {how} |",
            row["backend"].as_str().unwrap_or("?"),
            row["jobs"],
            opt(row["calls_per_tick"].as_f64()),
            opt(peer.and_then(|p| p["calls_per_tick"].as_f64())),
            count(&row["listed"]),
            peer.map(|p| count(&p["listed"]))
                .unwrap_or_else(|| "—".into()),
            med_p99(&row["list_wall"]),
            peer.map(|p| med_p99(&p["list_wall"]))
                .unwrap_or_else(|| "—".into()),
            med_p99(&row["list_cpu"]),
        );
    }
}

/// A whole number from the results, or `—`.
fn count(value: &Value) -> String {
    value.as_u64().map_or_else(|| "—".into(), |n| n.to_string())
}

fn reaction(out: &mut String, results: &Value) {
    let _ = writeln!(
        out,
        "\n### Reaction: ticks (seconds) from N bundles staged to N worker submissions, jobs staying pending\n\n\
         Measured = the real manager loop / upstream's `run_one_iteration` against the fake server \
         (`--min-seconds-between-workers 0`). Policy = core's `testing::reaction_ticks` (#7), \
         `--sleep-time 5`; burst = target mode with `--max-launches-per-tick 10` (upstream has no burst mode).\n\n\
         | N | mode | measured ticks ours | measured ticks peer | policy, min-seconds 0 | policy, min-seconds 60 (upstream default) |\n\
         |---:|---|---:|---:|---:|---:|"
    );
    let model = |bundles: &Value, mode: &str, min_seconds: u64| -> String {
        results["reaction_model"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| {
                &r["bundles"] == bundles
                    && r["mode"] == mode
                    && r["min_seconds_between_workers"].as_u64() == Some(min_seconds)
            })
            .and_then(|r| {
                Some(format!(
                    "{} ({} s)",
                    r["ticks"].as_u64()?,
                    r["seconds"].as_u64()?
                ))
            })
            .unwrap_or_else(|| "—".into())
    };
    let ticks = |value: &Value| {
        value["ticks"]
            .as_u64()
            .map(|t| t.to_string())
            .unwrap_or_else(|| "—".into())
    };
    for row in results["reaction"].as_array().into_iter().flatten() {
        let bundles = &row["bundles"];
        for mode in ["compat", "burst"] {
            let (ours, peer) = if mode == "compat" {
                (ticks(&row["ours"]), ticks(&row["peer"]))
            } else {
                (ticks(&row["ours_burst"]), "n/a".to_owned())
            };
            let _ = writeln!(
                out,
                "| {bundles} | {mode} | {ours} | {peer} | {} | {} |",
                model(bundles, mode, 0),
                model(bundles, mode, 60),
            );
        }
    }
}

fn targets(out: &mut String, results: &Value) {
    let empty = Vec::new();
    let grid = results["grid"].as_array().unwrap_or(&empty);
    let _ = writeln!(
        out,
        "\n### Targets (reported, not asserted)\n\n| target | measured | |\n|---|---|---|"
    );
    let mut line = |name: &str, value: Option<f64>, ok: Option<bool>, unit: &str| {
        let verdict = match ok {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "not measured",
        };
        let _ = writeln!(out, "| {name} | {}{unit} | {verdict} |", opt(value));
    };
    let big = grid
        .iter()
        .filter(|r| r["bundles"].as_u64() == Some(10_000));
    let (mut vs_floor, mut vs_peer) = (None::<f64>, None::<f64>);
    for row in big {
        let f = ratio(
            best(&row["ours"]["cpu"]),
            best(&row["ours"]["parse_value_cpu"]),
        );
        let p = ratio(best(&row["peer"]["cpu"]), best(&row["ours"]["cpu"]));
        vs_floor = f.map(|f| vs_floor.map_or(f, |v| v.max(f)));
        vs_peer = p.map(|p| vs_peer.map_or(p, |v| v.min(p)));
    }
    line(
        "CPU/tick at 10k bundles ≤ 1.5× bare parse (worst job count, best thirds)",
        vs_floor,
        vs_floor.map(|v| v <= 1.5),
        "×",
    );
    line(
        "CPU/tick at 10k bundles ≥ 50× below the peer (worst job count, best thirds)",
        vs_peer,
        vs_peer.map(|v| v >= 50.0),
        "×",
    );
    let growth = grid
        .iter()
        .filter_map(|r| r["jobs"].as_u64())
        .filter_map(|j| {
            ratio(
                cpu_at(grid, "ours", 10_000, j),
                cpu_at(grid, "ours", 1000, j),
            )
        })
        .reduce(f64::max);
    line(
        "growth 1k → 10k bundles ≤ 12× (worst job count, best thirds)",
        growth,
        growth.map(|g| g <= 12.0),
        "×",
    );
    let rss = grid
        .iter()
        .filter_map(|r| mb(&r["ours"]["vm_hwm_kb"]))
        .reduce(f64::max);
    line(
        "max RSS ≤ 20 MB (largest size)",
        rss,
        rss.map(|r| r <= 20.0),
        " MB",
    );
    let start = results["first_tick"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| median(&r["ours"]))
        .reduce(f64::max);
    line(
        "start → first tick ≤ 50 ms (largest size, median)",
        start,
        start.map(|s| s <= 50.0),
        " ms",
    );
    let slurm = results["backends"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| {
            r["backend"]
                .as_str()
                .is_some_and(|b| b.starts_with("slurm"))
        })
        .filter_map(|r| r["calls_per_tick"].as_f64())
        .reduce(f64::max);
    line(
        "Slurm subprocesses per tick = 1 (any job count)",
        slurm,
        slurm.map(|s| s == 1.0),
        "",
    );
}

/// Replaces the table between the markers of `BENCH.md` (appends it when they are missing).
pub fn update_bench_md(path: &Path, table: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let block = format!("{BEGIN}\n{table}\n{END}");
    let updated = match (text.find(BEGIN), text.find(END)) {
        (Some(begin), Some(end)) if begin < end => {
            format!("{}{block}{}", &text[..begin], &text[end + END.len()..])
        }
        _ => format!("{text}\n{block}\n"),
    };
    std::fs::write(path, updated).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: updated {}", path.display());
    Ok(())
}
