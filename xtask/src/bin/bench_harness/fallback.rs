//! Spot with an on-demand fallback (issue #32), in the simulator (`core::simulate`, which
//! runs the real policy and the manager's own capacity memory): a Spot pool whose platform
//! has no capacity for 40 minutes of every two hours, preempts a fifth of its launches
//! while they boot and reclaims an active VM after 4 hours on average (its runs are lost),
//! beside its on-demand twin. Side by side: Spot only, on-demand only, and
//! Spot with `fallback`. The trace is the spill section's. Simulated, not measured on a real
//! cloud: the section says so.

use codalab_wm_core::layout::preemptible;
use codalab_wm_core::pools::fallback::Fallback;
use codalab_wm_core::simulate::{Platform, SimConfig, SimReport, Workload, simulate};
use codalab_wm_core::{PoolPolicy, WorkerShape};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::time::Duration;

const S: fn(u64) -> Duration = Duration::from_secs;

/// Prices per worker-hour: Spot, on-demand.
const PRICES: (f64, f64) = (0.3, 1.0);

fn pool(name: &str, price: f64) -> PoolPolicy {
    PoolPolicy {
        max: 10,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 10,
        cost_per_hour: Some(price),
        ..PoolPolicy::new(name, WorkerShape::from_flags(4, 0, 16 * 1024))
    }
}

fn spot(fallback: bool) -> PoolPolicy {
    PoolPolicy {
        fallback: fallback.then(|| Fallback {
            after: 2,
            window: S(600),
            cooldown: S(900),
            ..Fallback::to("on-demand")
        }),
        ..pool("spot", PRICES.0)
    }
}

/// Both clouds start a VM in 60–120 s; Spot has no capacity for the first 40 minutes of
/// every two hours, preempts a fifth of its launches before their worker is active and
/// reclaims an active VM after 4 hours on average.
fn config() -> SimConfig {
    let spot = Platform {
        stockout: Some((S(7200), S(2400))),
        preempt: 0.2,
        reclaim: Some(S(4 * 3600)),
        ..Platform::default()
    };
    SimConfig {
        start_latency: (S(60), S(120)),
        platforms: [("spot".to_owned(), spot)].into(),
        ..SimConfig::default()
    }
}

/// One row per policy.
pub fn measure(quick: bool) -> Vec<Value> {
    let workload = crate::spill::workload(if quick { 8 } else { 32 });
    let on_demand = || pool("on-demand", PRICES.1);
    let variants: [(&str, Vec<PoolPolicy>); 3] = [
        ("Spot only", vec![spot(false)]),
        ("on-demand only", vec![on_demand()]),
        (
            "Spot with fallback (after 2 in 10 min, cool-down 15 min)",
            vec![spot(true), on_demand()],
        ),
    ];
    (variants.iter())
        .map(|(name, pools)| {
            let mut config = config();
            // As the manager starts them: `cl-worker --preemptible` for a pool whose platform
            // reclaims its VMs, so CodaLab stages a reclaimed worker's runs again.
            config.preemptible = (pools.iter())
                .filter(|p| preemptible(false, p.name == "spot", p.fallback.is_some()))
                .map(|p| p.name.clone())
                .collect();
            let report = simulate(&workload, pools, &config).expect("valid settings");
            row(name, &workload, &report)
        })
        .collect()
}

fn row(name: &str, workload: &Workload, report: &SimReport) -> Value {
    let cost = report.cost().unwrap_or(0.0);
    let pool = |name: &str| report.pools.iter().find(|p| p.name == name);
    json!({
        "policy": name,
        "bundles": workload.arrivals.len(),
        "finished": report.finished,
        "lost": report.lost,
        "restaged": report.pools.iter().map(|p| p.restaged_runs).sum::<usize>(),
        "rerun_hours": report.pools.iter().map(|p| p.rerun_hours).sum::<f64>(),
        "wait_p50_s": report.total_wait.p50_seconds,
        "wait_p90_s": report.total_wait.p90_seconds,
        "spot_failures": pool("spot").map_or(0, |p| p.failures),
        "spot_worker_hours": pool("spot").map_or(0.0, |p| p.worker_hours),
        "on_demand_worker_hours": pool("on-demand").map_or(0.0, |p| p.worker_hours),
        "cost": cost,
    })
}

/// `bench-harness fallback [--quick]`: only this section, printed.
pub fn only(args: &[String]) -> anyhow::Result<()> {
    crate::report::print_section(args, "fallback_model", measure, render)
}

/// The section of BENCH.md.
pub fn render(out: &mut String, results: &Value) {
    let Some((rows, bundles)) = crate::report::section_rows(results, "fallback_model") else {
        return;
    };
    let _ = writeln!(
        out,
        "\n### Spot with an on-demand fallback (#32), simulated\n\n\
         `core::simulate` (the real policy and capacity memory; simulated clouds): the {bundles} \
         bundles of the section above. `spot` costs {} a worker-hour, `on-demand` {}; both start \
         a VM in 60–120 s, max 10. Spot has no capacity for the first 40 minutes of every two \
         hours (a launch fails: the pool backs off), preempts a fifth of its launches before \
         their worker is active, and reclaims an active VM after 4 hours on average. Its workers start as `cl-worker \
         --preemptible`, as the manager starts those of a pool whose platform reclaims VMs or that \
         has a fallback: CodaLab 1.7.5 stages a reclaimed worker's runs again and they start over \
         (without it they would be lost: `worker_offline`, never staged again).\n\n\
         | policy | finished | runs lost | runs staged again (hours run again) | wait p50 | wait p90 | Spot launch failures | Spot worker-hours | on-demand worker-hours | cost |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        PRICES.0, PRICES.1
    );
    let seconds = crate::report::seconds;
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} ({:.1}) | {} | {} | {} | {:.1} | {:.1} | {:.1} |",
            row["policy"].as_str().unwrap_or("?"),
            row["finished"],
            row["lost"],
            row["restaged"].as_u64().unwrap_or(0),
            row["rerun_hours"].as_f64().unwrap_or(0.0),
            seconds(&row["wait_p50_s"]),
            seconds(&row["wait_p90_s"]),
            row["spot_failures"],
            row["spot_worker_hours"].as_f64().unwrap_or(0.0),
            row["on_demand_worker_hours"].as_f64().unwrap_or(0.0),
            row["cost"].as_f64().unwrap_or(0.0),
        );
    }
    let _ = writeln!(
        out,
        "\nThe fallback moves new launches, not running workers: runs on Spot VMs stay exposed \
         to reclaims while the pool is on its own capacity (`min_on_demand` keeps some of them \
         on on-demand VMs)."
    );
}
