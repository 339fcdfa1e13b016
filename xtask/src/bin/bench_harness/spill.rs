//! Capacity that knows its price (issue #32), in the simulator (`core::simulate`, which runs
//! the real policy and the manager's own estimate memory): a free Slurm partition that others
//! fill half the time beside a paid cloud pool. Side by side: the free pool only, the paid
//! pool only, both in config order (the free pool first, the paid one when it is at its max:
//! the rule before #32), a clairvoyant router (the floor the targets are measured against),
//! both with the free pool's `spill_after` (with and without Slurm's start forecast), and
//! hedged on the paid pool (#42). Simulated, not measured on real platforms: the section
//! says so.

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
/// every two (`forecast`: and Slurm forecasts a queued job's start at that hour's end); the
/// cloud starts one in 60–120 s and bills it from its launch (boot included).
fn config(forecast: bool) -> SimConfig {
    let slurm = Platform {
        start_latency: Some((S(30), S(60))),
        busy: Some((S(7200), S(3600))),
        forecast,
        ..Platform::default()
    };
    let cloud = Platform {
        bills_start: true,
        ..Platform::default()
    };
    SimConfig {
        start_latency: (S(60), S(120)),
        platforms: [("slurm".to_owned(), slurm), ("cloud".to_owned(), cloud)].into(),
        ..SimConfig::default()
    }
}

/// One simulated run: its row's name, its pools, and how the trace and platform differ from
/// the section's.
struct Variant {
    name: String,
    pools: Vec<PoolPolicy>,
    /// Slurm forecasts a queued job's start ([`Platform::forecast`]).
    forecast: bool,
    /// The clairvoyant router: each bundle sent to one pool by when it arrives ([`routed`]).
    routed: bool,
}

impl Variant {
    fn new(name: impl Into<String>, pools: Vec<PoolPolicy>) -> Self {
        Self {
            name: name.into(),
            pools,
            forecast: false,
            routed: false,
        }
    }
}

/// One row per policy.
pub fn measure(quick: bool) -> Vec<Value> {
    let workload = workload(if quick { 8 } else { 32 });
    let spill = |after: u64| {
        let name = format!("spill by estimate (spill_after {after} s)");
        Variant::new(name, vec![slurm(Some(after)), cloud()])
    };
    let mut variants = vec![
        Variant::new("free only", vec![slurm(None)]),
        Variant::new("paid only", vec![cloud()]),
        Variant::new("config order (before #32)", vec![slurm(None), cloud()]),
        Variant {
            routed: true,
            ..Variant::new("clairvoyant router", vec![slurm(None), cloud()])
        },
        spill(SPILL_AFTER),
    ];
    // The admin's knob, swept: what other waits accepted on the free pool give.
    variants.extend(OTHER_SPILL_AFTERS.iter().map(|&after| spill(after)));
    // #42 item 4: Slurm's own forecast of a queued job's start, read by the estimate.
    variants.push(Variant {
        forecast: true,
        ..Variant::new(
            format!("spill by estimate (spill_after {SPILL_AFTER} s), Slurm forecasts"),
            vec![slurm(Some(SPILL_AFTER)), cloud()],
        )
    });
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
        Variant::new(name, vec![free, paid])
    };
    variants.extend(
        HEDGES
            .iter()
            .map(|&(spill, after, per_day)| hedge(spill, after, per_day)),
    );
    variants.push(Variant {
        forecast: true,
        name: "hedge after 60 s, 100 a day, Slurm forecasts".into(),
        ..hedge(None, 60, 100)
    });
    let busy = busy_arrivals(&workload, &config(false));
    variants
        .iter()
        .map(|variant| {
            let mut config = config(variant.forecast);
            let pools = match variant.routed {
                true => routed(&mut config, &workload, &variant.pools),
                false => variant.pools.clone(),
            };
            let report = simulate(&workload, &pools, &config).expect("valid settings");
            let mut row = row(&variant.name, &workload, &report);
            row["busy_arrivals"] = busy.into();
            row["spill_after_s"] = pools[0].spill_after.map(|d| d.as_secs()).into();
            row["kind"] = kind(variant).into();
            row
        })
        .collect()
}

/// What a row is, for the text below the table: `spill`, `hedge`, `router` or `other`.
fn kind(variant: &Variant) -> &'static str {
    match variant.pools.first() {
        _ if variant.routed => "router",
        Some(free) if free.hedge_after.is_some() => "hedge",
        Some(free) if free.spill_after.is_some() => "spill",
        _ => "other",
    }
}

/// The clairvoyant router (targets-2026-11-27, B2): it knows when others fill `slurm`, and
/// plans the bundles that arrive then on `cloud`, the rest on `slurm` ([`SimConfig::route`]:
/// the manager sees each with the `request_queue` of its pool's tag). The server's dispatch is
/// CodaLab's, by the bundles' own (empty) queue: neither pool's workers are exclusive to their
/// tag, so a bundle may still start on an idle worker of the other pool, as under any policy.
fn routed(config: &mut SimConfig, workload: &Workload, pools: &[PoolPolicy]) -> Vec<PoolPolicy> {
    let to = |at_ms: u64| {
        if in_busy_spell(config, at_ms) {
            "cloud"
        } else {
            "slurm"
        }
    };
    config.route = (workload.arrivals.iter())
        .map(|arrival| to(arrival.at_ms).to_owned())
        .collect();
    (pools.iter())
        .map(|pool| PoolPolicy {
            tag: Some(pool.name.clone()),
            ..pool.clone()
        })
        .collect()
}

/// Whether others fill `slurm` at `at_ms`.
fn in_busy_spell(config: &SimConfig, at_ms: u64) -> bool {
    let slurm = config.platforms.get("slurm");
    slurm.and_then(|p| p.busy_until(at_ms)).is_some()
}

/// Bundles that arrive while others fill `slurm`: what no free worker starts at once.
fn busy_arrivals(workload: &Workload, config: &SimConfig) -> usize {
    (workload.arrivals.iter())
        .filter(|a| in_busy_spell(config, a.at_ms))
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
         worker-hour from its launch (a VM is billed while it boots) and starts one in 60–120 s; max 10 each. Config order: `slurm` first, \
         `cloud` when `slurm` is at its max (the rule before #32). The clairvoyant router \
         knows when others fill `slurm`: it plans the bundles that arrive then on `cloud` and \
         the rest on `slurm`, and the server dispatches as CodaLab does. \"Slurm forecasts\": \
         Slurm's `squeue --start` forecast of a queued job's start (the hour's end, as the \
         backfill pass computes it when the others' time limits end with it) is listed, and the \
         estimates read it.\n\n\
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
    let of_kind =
        |kind: &str| -> Vec<&Value> { rows.iter().filter(|row| row["kind"] == kind).collect() };
    let (Some(paid), Some(router)) = (rows.get(1), of_kind("router").first().copied()) else {
        return;
    };
    let spills = of_kind("spill");
    target(out, [paid, router], &spills, bundles);
    if let Some(spill) = spills.first() {
        hedges(out, [paid, router, spill], &of_kind("hedge"));
    }
}

/// `row[key]` ÷ `to[key]`.
fn ratio(row: &Value, to: &Value, key: &str) -> f64 {
    let (a, b) = (row[key].as_f64(), to[key].as_f64());
    a.zip(b)
        .map_or(f64::NAN, |(a, b)| a / b.max(f64::MIN_POSITIVE))
}

/// What hedging buys (#42 item 2), against paid only, the router and spill_after 300 s: the
/// tail (target: p99 ≤ 1.25× paid only's at a cost ≤ 1.10× the router's), with the paid
/// launches no bundle used.
fn hedges(out: &mut String, [paid, router, spill]: [&Value; 3], hedges: &[&Value]) {
    if hedges.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nHedging (#42: past the free pool's `hedge_after`, a queued bundle is launched for on \
         `cloud` too, within `cloud`'s `hedges_per_day`; the loser is withdrawn if it has not \
         started, unless it is the free pool's probe of its queue). Target: p99 ≤ 1.25× paid \
         only's at a cost ≤ 1.10× the router's. Spill_after 300 s: p99 {:.2}×, cost {:.3}× \
         the router's.\n",
        ratio(spill, paid, "wait_p99_s"),
        ratio(spill, router, "cost"),
    );
    for row in hedges {
        let (p99, cost) = (ratio(row, paid, "wait_p99_s"), ratio(row, router, "cost"));
        let _ = writeln!(
            out,
            "- {}: p90 {:.2}×, p99 {p99:.2}× paid only's; cost {cost:.3}× the router's: {}; {} \
             of {} paid launches unused",
            row["policy"].as_str().unwrap_or("?"),
            ratio(row, paid, "wait_p90_s"),
            crate::report::verdict(&[(p99 <= 1.25, "p99"), (cost <= 1.10, "cost")]),
            row["paid_unused"],
            row["paid_launches"],
        );
    }
}

/// The restated targets of #32 (targets-2026-11-27, C) for each spill row: cost ≤ 1.02× the
/// clairvoyant router's, p90 ≤ 1.2× paid only's, p99 ≤ `spill_after` + paid only's p99; then
/// the share of bundles that arrive while the free pool is full, and where they ran.
fn target(out: &mut String, [paid, router]: [&Value; 2], spills: &[&Value], bundles: u64) {
    let _ = writeln!(
        out,
        "\nThe clairvoyant router knows when others fill `slurm` and sends the bundles that \
         arrive then to `cloud`, the rest to `slurm`: it costs {:.1} ({:.3}× paid only's), the \
         least any policy that starts those bundles promptly pays under CodaLab's dispatch. \
         Spill by estimate against #32's targets (cost ≤ 1.02× the router's, p90 ≤ 1.2× paid \
         only's, p99 ≤ spill_after + paid only's p99):\n",
        router["cost"].as_f64().unwrap_or(0.0),
        ratio(router, paid, "cost"),
    );
    let paid_p99 = paid["wait_p99_s"].as_f64().unwrap_or(0.0);
    for spill in spills {
        let (cost, p90) = (
            ratio(spill, router, "cost"),
            ratio(spill, paid, "wait_p90_s"),
        );
        let limit = spill["spill_after_s"].as_f64().unwrap_or(0.0) + paid_p99;
        let p99 = spill["wait_p99_s"].as_f64().unwrap_or(f64::INFINITY);
        let met = [
            (cost <= 1.02, "cost"),
            (p90 <= 1.2, "p90"),
            (p99 <= limit, "p99"),
        ];
        let _ = writeln!(
            out,
            "- {}: cost {cost:.3}× the router's, p90 {p90:.2}× paid only's, p99 {p99:.0} s \
             (limit {limit:.0} s): {}",
            spill["policy"].as_str().unwrap_or("?"),
            crate::report::verdict(&met),
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
        "\n{busy} of the {bundles} bundles ({share:.2}) arrive while others fill `slurm`. \
         At spill_after {} s, spill ran {} bundles on `cloud` ({}) and bought {} of its {} \
         workers that no bundle used (paid only: {} of {}).",
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
