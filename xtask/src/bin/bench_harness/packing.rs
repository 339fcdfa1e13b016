//! Planning as the server dispatches (issue #29), in the simulator (`core::simulate`, whose
//! server dispatches as `core::dispatch` models the real one): bursts of 1-, 2- and 4-CPU
//! bundles on 4-CPU workers, two users of which one (carol) has `parallel_run_quota` 1
//! while the manager runs as the root user. Side by side: upstream's manager (compat limits
//! and pacing, one bundle a worker), our policy before #29 (target mode, one bundle a worker)
//! and the policy on the server's model. Simulated, not measured on real workers: the section
//! says so.

use codalab_wm_core::simulate::{
    Arrival, BundleTemplate, PoissonRate, SimConfig, SimReport, Workload, simulate,
};
use codalab_wm_core::{LaunchMode, PoolPolicy, WorkerShape};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::Duration;

/// The trace: `bursts` bursts of 40 bundles (1 a second), an hour apart; every twentieth
/// bundle is carol's.
fn workload(bursts: u64) -> Workload {
    let mix: Vec<BundleTemplate> = [
        "cpus=1,memory=2g,duration=600,weight=6",
        "cpus=2,memory=4g,duration=900,weight=3",
        "cpus=4,memory=8g,duration=1200,weight=1",
    ]
    .iter()
    .map(|s| s.parse().expect("a valid template"))
    .collect();
    let rate = PoissonRate { per_second: 1.0 };
    let mut workload = Workload::default();
    for burst in 0..bursts {
        let one = Workload::poisson(rate, 40, &mix, 7 + burst);
        let shift = burst * 3_600_000;
        (workload.arrivals).extend(one.arrivals.iter().map(|a| Arrival {
            at_ms: a.at_ms + shift,
            ..*a
        }));
    }
    workload.owners = vec![String::new(), "alice".into(), "carol".into()];
    for (i, arrival) in workload.arrivals.iter_mut().enumerate() {
        arrival.owner = if i % 20 == 0 { 2 } else { 1 };
    }
    workload
}

fn pool(launch_mode: LaunchMode) -> PoolPolicy {
    let compat = launch_mode == LaunchMode::Compat;
    PoolPolicy {
        max: 40,
        launch_mode,
        // Upstream's pacing (its --min-seconds-between-workers default) in compat mode.
        min_seconds_between_workers: if compat { 60 } else { 0 },
        max_launches_per_tick: if compat { 1 } else { 10 },
        ..PoolPolicy::new("cpu4", WorkerShape::from_flags(4, 0, 16 * 1024))
    }
}

/// One row per policy; then before #29 and ours again with runs ten times shorter (where
/// packing pays, and where launches the server leaves unused show).
pub fn measure(quick: bool) -> Vec<Value> {
    let workload = workload(if quick { 3 } else { 12 });
    let mut shorter = workload.clone();
    for arrival in &mut shorter.arrivals {
        arrival.duration_ms /= 10;
    }
    let variants = [
        (UPSTREAM, LaunchMode::Compat, false, &workload),
        (BEFORE, LaunchMode::Target, false, &workload),
        (OURS, LaunchMode::Target, true, &workload),
        (BEFORE, LaunchMode::Target, false, &shorter),
        (OURS, LaunchMode::Target, true, &shorter),
    ];
    let mut rows = Vec::new();
    for (name, launch_mode, server_model, workload) in variants {
        let config = SimConfig {
            start_latency: (Duration::from_secs(60), Duration::from_secs(120)),
            quotas: [("carol".to_owned(), 1)].into(),
            server_model,
            ..SimConfig::default()
        };
        let report = simulate(workload, &[pool(launch_mode)], &config).expect("valid settings");
        let name = match std::ptr::eq(workload, &shorter) {
            true => format!("{name}{SHORTER}"),
            false => name.to_owned(),
        };
        rows.push(row(&name, workload, &report));
    }
    rows
}

const UPSTREAM: &str = "upstream (compat, one bundle a worker)";
const BEFORE: &str = "ours before #29 (one bundle a worker)";
const OURS: &str = "ours, server's dispatch model (#29)";
/// The suffix of the rows whose runs are ten times shorter.
const SHORTER: &str = ", runs ×0.1";

fn row(name: &str, workload: &Workload, report: &SimReport) -> Value {
    let pool = &report.pools[0];
    let estimate = |kind: &str| {
        (report.estimates.iter())
            .find(|e| e.kind == kind)
            .map(|e| json!({"scored": e.scored, "p50_s": e.error.p50_seconds, "p90_s": e.error.p90_seconds}))
    };
    json!({
        "policy": name,
        "bundles": workload.arrivals.len(),
        "finished": report.finished,
        "launches": pool.launches,
        "unused_launches": pool.unused_launches,
        "withdrawn": pool.withdrawn,
        "worker_seconds": (pool.worker_hours * 3600.0).round() as u64,
        "busy_seconds": (pool.busy_hours * 3600.0).round() as u64,
        "wait_p50_s": report.total_wait.p50_seconds,
        "wait_p90_s": report.total_wait.p90_seconds,
        "estimate_worker_checkin": estimate("worker_checkin"),
        "estimate_all": estimate("all"),
    })
}

/// `bench-harness packing [--quick]`: only this section, printed.
pub fn only(args: &[String]) -> anyhow::Result<()> {
    crate::report::print_section(args, "packing_model", measure, render)
}

/// The section of BENCH.md.
pub fn render(out: &mut String, results: &Value) {
    let Some((rows, bundles)) = crate::report::section_rows(results, "packing_model") else {
        return;
    };
    let _ = writeln!(
        out,
        "\n### Planning as the server dispatches (#29), simulated\n\n\
         `core::simulate` (its server dispatches as `core::dispatch` models CodaLab 1.7.5; the \
         model is checked against the real bundle manager by `dispatch_differential.rs`): {bundles} \
         bundles in bursts of 40 (1 a second) an hour apart, 1/2/4 CPUs (6:3:1, runs of 10, 15 and \
         20 min on average), on 4-CPU 16 GiB workers (max 40: a worker a bundle fits, check-in \
         60–120 s, idle exit 600 s as `--worker-idle-seconds`' default); every twentieth bundle is carol's, `parallel_run_quota` 1, the \
         manager runs as `codalab`. Unused: workers that ended without running a bundle. \
         Measured with real `cl-worker`s, scaled down to this machine, in the next section.\n\n\
         | policy | finished | launches | unused | withdrawn | worker-seconds | of which running a bundle | wait p50 | wait p90 | estimate error p90, new worker (n) | all estimates p90 (n) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let seconds = crate::report::seconds;
    let estimate = |v: &Value| {
        v["p90_s"]
            .as_f64()
            .map_or_else(|| "—".into(), |s| format!("{s:.0} s ({})", v["scored"]))
    };
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row["policy"].as_str().unwrap_or("?"),
            row["finished"],
            row["launches"],
            row["unused_launches"],
            row["withdrawn"]
                .as_u64()
                .map_or("—".into(), |n| n.to_string()),
            row["worker_seconds"],
            row["busy_seconds"],
            seconds(&row["wait_p50_s"]),
            seconds(&row["wait_p90_s"]),
            estimate(&row["estimate_worker_checkin"]),
            estimate(&row["estimate_all"]),
        );
    }
    let named = |name: &str| rows.iter().find(|row| row["policy"] == name);
    if let (Some(before), Some(ours)) = (named(BEFORE), named(OURS)) {
        floor(out, before, ours);
    }
    let traces = [("the trace", "", 0.01), ("runs ×0.1", SHORTER, 0.02)];
    let pairs: Vec<Pair> = (traces.into_iter())
        .filter_map(|(trace, suffix, limit)| {
            Some(Pair {
                trace,
                limit,
                before: named(&format!("{BEFORE}{suffix}"))?,
                ours: named(&format!("{OURS}{suffix}"))?,
            })
        })
        .collect();
    withdraw_targets(out, &pairs);
}

/// Before #29 and ours on one trace, with the share of launches unused the target allows.
struct Pair<'a> {
    trace: &'static str,
    limit: f64,
    before: &'a Value,
    ours: &'a Value,
}

/// #42's targets for withdrawing launches (targets-2026-11-27, C): on the trace and on the
/// same with runs ten times shorter, launches never used ≤ 1 % and ≤ 2 % of launches;
/// worker-seconds ≤ 1.02× the no-waste floor (before #29's, less its unused workers' idle
/// exits); wait p90 ≤ before #29's.
fn withdraw_targets(out: &mut String, pairs: &[Pair]) {
    let idle = SimConfig::default().worker_idle.as_secs();
    let _ = writeln!(
        out,
        "\nWithdrawing launches no bundle needs any more (#42; targets: unused ≤ 1 % of \
         launches, ≤ 2 % with runs ×0.1; worker-seconds ≤ 1.02× the no-waste floor; wait p90 ≤ \
         before #29's):\n"
    );
    for pair in pairs {
        let (before, ours) = (pair.before, pair.ours);
        let count = |row: &Value, key: &str| row[key].as_u64().unwrap_or(0);
        let launches = count(ours, "launches").max(1);
        let unused = count(ours, "unused_launches") as f64 / launches as f64;
        let floor = count(before, "worker_seconds")
            .saturating_sub(count(before, "unused_launches") * idle)
            .max(1);
        let cost = count(ours, "worker_seconds") as f64 / floor as f64;
        let p90 = |row: &Value| row["wait_p90_s"].as_f64().unwrap_or(f64::NAN);
        let verdict = crate::report::verdict(&[
            (unused <= pair.limit, "unused"),
            (cost <= 1.02, "worker-seconds"),
            (p90(ours) <= p90(before), "p90"),
        ]);
        let _ = writeln!(
            out,
            "- {}: {} of {launches} launches unused ({:.1} %), {} withdrawn; \
             worker-seconds {:.3}× the floor ({floor}); p90 {:.0} s against before #29's {:.0} s: \
             {verdict}",
            pair.trace,
            count(ours, "unused_launches"),
            unused * 100.0,
            count(ours, "withdrawn"),
            cost,
            p90(ours),
            p90(before),
        );
    }
}

/// Why the target (worker-seconds ≤ 0.6× before #29's) is out of reach on this trace: what
/// before #29 would have cost had it bought not one worker the server left unused.
fn floor(out: &mut String, before: &Value, ours: &Value) {
    let idle = SimConfig::default().worker_idle.as_secs();
    let (Some(total), Some(unused), Some(now)) = (
        before["worker_seconds"].as_u64(),
        before["unused_launches"].as_u64(),
        ours["worker_seconds"].as_u64(),
    ) else {
        return;
    };
    let wasted = unused * idle;
    let floor = total.saturating_sub(wasted);
    let ratio = |x: u64| x as f64 / total.max(1) as f64;
    let _ = writeln!(
        out,
        "\nOurs costs {now} worker-seconds, {:.2}× before #29's {total} (target ≤ 0.6×, {:.0}). \
         Before #29 bought {unused} workers the server never gave a bundle; each cost its idle \
         exit ({idle} s), {wasted} worker-seconds in all. Without a single one of them it would \
         have cost {floor} ({:.2}×): the rest is time workers spend running bundles where the \
         server places them, and one idle exit per worker used. Going below that takes fewer \
         workers at once (bundles wait: p90 worse) or shorter idle exits \
         (`--worker-idle-seconds`, the admin's setting), so 0.6× is out of reach on this trace.",
        ratio(now),
        total as f64 * 0.6,
        ratio(floor),
    );
    let p90 = |row: &Value| row["wait_p90_s"].as_f64().unwrap_or(f64::NAN);
    if p90(ours) > p90(before) {
        let _ = writeln!(
            out,
            "\nWait p90 is {:.0} s against before #29's {:.0} s: a bundle waits for the worker \
             bought for it to check in, where before #29's extra workers let it take whichever \
             checked in first. That speed is what those unused workers bought.",
            p90(ours),
            p90(before),
        );
    }
}
