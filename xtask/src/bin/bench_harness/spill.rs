//! Capacity that knows its price (issue #32), in the simulator (`core::simulate`, which runs
//! the real policy and the manager's own estimate memory): a free Slurm partition that others
//! fill half the time beside a paid cloud pool. Side by side: the free pool only, the paid
//! pool only, both in config order (the free pool first, the paid one when it is at its max:
//! the rule before #32) and both with the free pool's `spill_after`. Simulated, not measured
//! on real platforms: the section says so.

use codalab_wm_core::simulate::{
    Arrival, BundleTemplate, Platform, PoissonRate, SimConfig, SimReport, Workload, simulate,
};
use codalab_wm_core::{PoolPolicy, WorkerShape};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::Duration;

const S: fn(u64) -> Duration = Duration::from_secs;

/// The paid pool's price per worker-hour.
const PRICE: f64 = 1.0;

/// The free pool's `spill_after`, seconds.
const SPILL_AFTER: u64 = 300;

/// Other `spill_after` values the section shows (seconds).
const OTHER_SPILL_AFTERS: [u64; 3] = [60, 1200, 2400];

/// Hedge variants: (`spill_after`, `hedge_after`, the cloud's `hedges_per_day`).
const HEDGES: [(Option<u64>, u64, u32); 6] = [
    (None, 0, 100),
    (None, 30, 100),
    (None, 60, 100),
    (None, 120, 100),
    (Some(SPILL_AFTER), 60, 100),
    (None, 60, 20),
];

/// The trace: a burst of 12 bundles (1 or 2 CPUs, one every 5 s, runs of 10 min on
/// average) every 45 minutes, so each burst finds the last one's workers gone.
pub fn workload(bursts: u64) -> Workload {
    let mix: Vec<BundleTemplate> = [
        "cpus=1,memory=2g,duration=600,weight=2",
        "cpus=2,memory=4g,duration=600,weight=1",
    ]
    .iter()
    .map(|s| s.parse().expect("a valid template"))
    .collect();
    let rate = PoissonRate { per_second: 0.2 };
    let mut workload = Workload::default();
    for burst in 0..bursts {
        let one = Workload::poisson(rate, 12, &mix, 32 + burst);
        let shift = burst * 45 * 60_000;
        (workload.arrivals).extend(one.arrivals.iter().map(|a| Arrival {
            at_ms: a.at_ms + shift,
            ..*a
        }));
    }
    workload
}

fn slurm(spill_after: Option<u64>) -> PoolPolicy {
    PoolPolicy {
        max: 10,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 10,
        spill_after: spill_after.map(S),
        ..PoolPolicy::new("slurm", WorkerShape::from_flags(4, 0, 16 * 1024))
    }
}

fn cloud() -> PoolPolicy {
    PoolPolicy {
        name: "cloud".into(),
        cost_per_hour: Some(PRICE),
        ..slurm(None)
    }
}

/// The free partition starts a job in 30–60 s, but others fill it for the first hour of
/// every two; the cloud starts one in 60–120 s.
fn config() -> SimConfig {
    let slurm = Platform {
        start_latency: Some((S(30), S(60))),
        busy: Some((S(7200), S(3600))),
        ..Platform::default()
    };
    SimConfig {
        start_latency: (S(60), S(120)),
        platforms: [("slurm".to_owned(), slurm)].into(),
        ..SimConfig::default()
    }
}

/// One row per policy.
pub fn measure(quick: bool) -> Vec<Value> {
    let workload = workload(if quick { 8 } else { 32 });
    let spill = |after: u64| {
        let name = format!("spill by estimate (spill_after {after} s)");
        (name, vec![slurm(Some(after)), cloud()])
    };
    let mut variants: Vec<(String, Vec<PoolPolicy>)> = vec![
        ("free only".into(), vec![slurm(None)]),
        ("paid only".into(), vec![cloud()]),
        (
            "config order (before #32)".into(),
            vec![slurm(None), cloud()],
        ),
        spill(SPILL_AFTER),
    ];
    // The admin's knob, swept: what other waits accepted on the free pool give.
    variants.extend(OTHER_SPILL_AFTERS.iter().map(|&after| spill(after)));
    // Hedging (#42 item 2): past `hedge_after`, a bundle queued on the free pool is launched
    // for on the cloud too, within the cloud's hedges a day.
    let hedge = |spill_after: Option<u64>, after: u64, per_day: u32| {
        let name = match spill_after {
            Some(spill) => {
                format!("hedge after {after} s, {per_day} a day (spill_after {spill} s)")
            }
            None => format!("hedge after {after} s, {per_day} a day"),
        };
        let free = PoolPolicy {
            hedge_after: Some(S(after)),
            ..slurm(spill_after)
        };
        let paid = PoolPolicy {
            hedges_per_day: per_day,
            ..cloud()
        };
        (name, vec![free, paid])
    };
    variants.extend(
        HEDGES
            .iter()
            .map(|&(spill, after, per_day)| hedge(spill, after, per_day)),
    );
    let config = config();
    let busy = busy_arrivals(&workload, &config);
    variants
        .iter()
        .map(|(name, pools)| {
            let report = simulate(&workload, pools, &config).expect("valid settings");
            let mut row = row(name, &workload, &report);
            row["busy_arrivals"] = busy.into();
            row["spill_after_s"] = pools[0].spill_after.map(|d| d.as_secs()).into();
            row
        })
        .collect()
}

/// Bundles that arrive while others fill `slurm`: what no free worker starts at once.
fn busy_arrivals(workload: &Workload, config: &SimConfig) -> usize {
    let Some((every, spell)) = config.platforms.get("slurm").and_then(|p| p.busy) else {
        return 0;
    };
    let (every, spell) = (every.as_millis() as u64, spell.as_millis() as u64);
    (workload.arrivals.iter())
        .filter(|a| a.at_ms % every < spell)
        .count()
}

fn row(name: &str, workload: &Workload, report: &SimReport) -> Value {
    let cost = report.cost().unwrap_or(0.0);
    let cloud = report.pools.iter().find(|p| p.name == "cloud");
    let hours = |pool: &str| {
        (report.pools.iter())
            .find(|p| p.name == pool)
            .map_or(0.0, |p| p.worker_hours)
    };
    json!({
        "policy": name,
        "bundles": workload.arrivals.len(),
        "finished": report.finished,
        "wait_p50_s": report.total_wait.p50_seconds,
        "wait_p90_s": report.total_wait.p90_seconds,
        "wait_p99_s": report.total_wait.p99_seconds,
        "free_worker_hours": hours("slurm"),
        "paid_worker_hours": hours("cloud"),
        "cost": cost,
        "paid_bundles": cloud.map_or(0, |p| p.bundles_run),
        "paid_launches": cloud.map_or(0, |p| p.launches),
        "paid_unused": cloud.map_or(0, |p| p.unused_launches),
    })
}

/// `bench-harness spill [--quick]`: only this section, printed.
pub fn only(args: &[String]) -> anyhow::Result<()> {
    crate::report::print_section(args, "spill_model", measure, render)
}

/// The section of BENCH.md.
pub fn render(out: &mut String, results: &Value) {
    let Some((rows, bundles)) = crate::report::section_rows(results, "spill_model") else {
        return;
    };
    let _ = writeln!(
        out,
        "\n### Capacity that knows its price (#32), simulated\n\n\
         `core::simulate` (the real policy and estimate memory; simulated platforms): {bundles} \
         bundles in bursts of 12 (one every 5 s, 1 or 2 CPUs, runs of 10 min on average) every \
         45 minutes, on 4-CPU workers (idle exit 600 s). `slurm` is free and starts a job in 30–60 s, but others fill it for the first \
         hour of every two (its jobs pend, reason `Resources`); `cloud` costs {PRICE} a \
         worker-hour and starts one in 60–120 s; max 10 each. Config order: `slurm` first, \
         `cloud` when `slurm` is at its max (the rule before #32).\n\n\
         | policy | finished | wait p50 | wait p90 | wait p99 | free worker-hours | paid worker-hours | cost |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|"
    );
    let seconds = crate::report::seconds;
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} |",
            row["policy"].as_str().unwrap_or("?"),
            row["finished"],
            seconds(&row["wait_p50_s"]),
            seconds(&row["wait_p90_s"]),
            seconds(&row["wait_p99_s"]),
            row["free_worker_hours"].as_f64().unwrap_or(0.0),
            row["paid_worker_hours"].as_f64().unwrap_or(0.0),
            row["cost"].as_f64().unwrap_or(0.0),
        );
    }
    let kind = |prefix: &str| -> Vec<Value> {
        let of = |row: &&Value| {
            row["policy"]
                .as_str()
                .is_some_and(|p| p.starts_with(prefix))
        };
        rows.iter().filter(of).cloned().collect()
    };
    if let [_, paid, ..] = rows {
        target(out, paid, &kind("spill by estimate"), bundles);
        hedges(
            out,
            paid,
            &kind("spill by estimate (spill_after 300"),
            &kind("hedge"),
        );
    }
}

/// What hedging buys (#42 item 2), against paid only and spill_after 300 s: the tail
/// (target: p99 ≤ 1.25× paid only's) and the cost, with the paid launches no bundle used.
fn hedges(out: &mut String, paid: &Value, spill: &[Value], hedges: &[Value]) {
    let (Some(spill), false) = (spill.first(), hedges.is_empty()) else {
        return;
    };
    let ratio = |row: &Value, to: &Value, key: &str| {
        let (a, b) = (row[key].as_f64(), to[key].as_f64());
        a.zip(b)
            .map_or(f64::NAN, |(a, b)| a / b.max(f64::MIN_POSITIVE))
    };
    let _ = writeln!(
        out,
        "\nHedging (#42: past the free pool's `hedge_after`, a queued bundle is launched for on \
         `cloud` too, within `cloud`'s `hedges_per_day`; the loser is withdrawn if it has not \
         started). Target: p99 ≤ 1.25× paid only's. Spill_after 300 s: p99 {:.2}×, cost {:.3}× \
         paid only's.\n",
        ratio(spill, paid, "wait_p99_s"),
        ratio(spill, paid, "cost"),
    );
    for row in hedges {
        let p99 = ratio(row, paid, "wait_p99_s");
        let met = if p99 <= 1.25 { "met" } else { "not met" };
        let _ = writeln!(
            out,
            "- {}: p90 {:.2}×, p99 {p99:.2}× paid only's ({met}); cost {:.3}× paid only's, {:.3}× \
             spill_after 300 s's; {} of {} paid launches unused",
            row["policy"].as_str().unwrap_or("?"),
            ratio(row, paid, "wait_p90_s"),
            ratio(row, paid, "cost"),
            ratio(row, spill, "cost"),
            row["paid_unused"],
            row["paid_launches"],
        );
    }
}

/// The target, for each `spill_after`: spill by estimate within 1.2× the p90 of "paid only"
/// at ≤ 0.5× its cost; then, for the first, the share of bundles that arrive while the free
/// pool is full (the cost's floor for starting them without waiting) and where the rest went.
fn target(out: &mut String, paid: &Value, spills: &[Value], bundles: u64) {
    let ratio = |spill: &Value, key: &str| {
        let (a, b) = (spill[key].as_f64(), paid[key].as_f64());
        a.zip(b).map(|(a, b)| a / b.max(f64::MIN_POSITIVE))
    };
    let _ = writeln!(
        out,
        "\nSpill by estimate against paid only (target: p90 wait ≤ 1.2×, cost ≤ 0.5×):\n"
    );
    let mut by_limit: Vec<&Value> = spills.iter().collect();
    by_limit.sort_by_key(|spill| spill["spill_after_s"].as_u64());
    for spill in by_limit {
        let (Some(wait), Some(cost)) = (ratio(spill, "wait_p90_s"), ratio(spill, "cost")) else {
            continue;
        };
        let met = match (wait <= 1.2, cost <= 0.5) {
            (true, true) => "met",
            (true, false) => "not met (cost)",
            (false, true) => "not met (p90)",
            (false, false) => "not met",
        };
        let _ = writeln!(
            out,
            "- spill_after {} s: p90 {wait:.2}×, cost {cost:.3}×: {met}",
            spill["spill_after_s"]
        );
    }
    let Some(spill) = spills.first() else {
        return;
    };
    let busy = spill["busy_arrivals"].as_u64().unwrap_or(0);
    let share = busy as f64 / bundles.max(1) as f64;
    let count = |row: &Value, key: &str| row[key].as_u64().unwrap_or(0);
    let _ = writeln!(
        out,
        "\n{busy} of the {bundles} bundles ({share:.2}) arrive while others fill `slurm`: starting \
         them within the p90 takes paid capacity for them, about {share:.2}× paid only's cost. \
         At spill_after {} s, spill ran {} bundles on `cloud` ({}) and bought {} of its {} \
         workers that no bundle used (paid only: {} of {}). \
         Below that share, bundles would wait for the free pool, and the p90 with them.",
        spill["spill_after_s"],
        count(spill, "paid_bundles"),
        beside_busy(count(spill, "paid_bundles"), busy),
        count(spill, "paid_unused"),
        count(spill, "paid_launches"),
        count(paid, "paid_unused"),
        count(paid, "paid_launches"),
    );
}

/// How the bundles run on `cloud` compare with those that arrived in busy spells, in words.
fn beside_busy(on_cloud: u64, busy: u64) -> String {
    match on_cloud.cmp(&busy) {
        std::cmp::Ordering::Greater => format!(
            "{} more than arrived in busy spells: a bundle that arrives after a spell can take a \
             `cloud` worker still idle from it",
            on_cloud - busy
        ),
        std::cmp::Ordering::Less => format!(
            "{} fewer than arrived in busy spells: some of those waited for `slurm`",
            busy - on_cloud
        ),
        std::cmp::Ordering::Equal => "as many as arrived in busy spells".into(),
    }
}
