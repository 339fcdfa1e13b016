//! `bench-harness`: the processes behind `cargo xtask bench`.
//!
//! Built in release mode with the `bench` feature by `cargo xtask bench`, which then runs
//! `bench-harness run [--quick]`. Every measured side runs in its own process so that its CPU
//! time and peak RSS are its own:
//! - `serve`: the fake CodaLab server (`FakeCodaLab`, `crates/testkit/codalab`) behind a small
//!   front that counts requests, applies a large default `.limit` (upstream sends none) and
//!   caches bundle pages;
//! - `bench-ours` (a separate binary, `../bench_ours.rs`, linking only core so that the
//!   backends' code this harness links does not inflate its RSS and start-up): our manager's
//!   tick loop (core `Manager` + `FakeBackend`), or one tick after process start
//!   (`--first-tick`), or the reaction count (`--reaction`);
//! - `python …/bench/peer_iteration.py`: the Python peer, same measurements;
//! - `ours-backends`: Slurm calls per tick against stub commands;
//! - `azure-fake`, `ours-azure`: Azure Batch calls per tick against the in-repo fake Batch service;
//! - `ours-aws`, `count-proxy`: AWS Batch calls per tick against moto, counted on the wire;
//! - `ours-slurm-real`: Slurm calls per tick against the real cluster (held jobs);
//! - `k8s-fake`, `ours-k8s`: Kubernetes calls per tick against the in-repo fake API server;
//! - `gce-fake`, `ours-gce`: Compute Engine calls per tick against the in-repo fake Compute API;
//! - `packing`: only the simulated comparison of planning as the server dispatches
//!   (`packing.rs`, issue #29), printed (`--merge`: kept in the results and `BENCH.md`);
//! - `spill`: only the simulated comparison of spilling by estimated wait (`spill.rs`,
//!   issues #32 and #42), printed (`--merge`: as `packing`);
//! - `fallback`: only the simulated comparison of Spot with an on-demand fallback
//!   (`fallback.rs`, issue #32), printed (`--merge`: as `packing`);
//! - `staged-ready`: only the time from staged to ready with real workers on real Slurm
//!   (`staged_ready.rs`), merged into the last results;
//! - `packing-real`: only planning as the server dispatches, measured with real workers on
//!   real Slurm (`packing_real.rs`, issue #29; not in `--quick`), merged into the last results;
//! - `slurm-forecast`: only the estimate's error with Slurm's forecast and without, and a held
//!   job, with real workers on real Slurm (`forecast_real.rs`, #42; not in `--quick`), merged
//!   into the last full results;
//! - `anchors`: only the anchors' figures measured the same way (Karpenter's 1,000 pending pods,
//!   Kueue's 15,000 workloads): the release manager against the fake CodaLab and the fake
//!   Kubernetes API server (`anchors.rs`, #44), printed (`--merge`: as `packing`);
//! - `server-cost`: only the server CPU per tick against the real CodaLab server
//!   (`server_cost.rs`, whose sides are `bench-ours --server-cost` and the peer's
//!   `--mode server-cost`), merged into the last results;
//! - `run`: spawns all of the above over the grid, prints the table, writes
//!   `bench/results.json` and the table in `BENCH.md` (quick runs: `target/bench/results-quick.json`
//!   only).

mod advise_real;
mod anchors;
mod args;
mod aws;
mod azure;
mod backends;
mod codalab_rest;
mod count_proxy;
mod fallback;
mod forecast_real;
mod gce;
mod k8s;
mod listing;
mod packing;
mod packing_real;
mod packing_real_report;
mod real_run;
mod report;
mod run;
mod serve;
mod server_cost;
#[allow(dead_code, reason = "parse_pids is for bench-ours")]
mod server_cpu;
mod slurm_real;
mod spill;
mod staged_ready;
mod stats;

use anyhow::{Result, bail};
pub use args::{flag, required};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        bail!(
            "usage: bench-harness run [--quick] | staged-ready [--quick] | packing [--quick | --merge] | spill [--quick | --merge] | fallback [--quick | --merge] | packing-real [--before PATH] | slurm-forecast | advise-real [--reuse DIR DIR] | server-cost [--quick] [--sizes N,M] | serve … | count-proxy … | ours-backends … | ours-aws … | ours-slurm-real … | k8s-fake … | ours-k8s … | azure-fake … | ours-azure … | gce-fake … | ours-gce …"
        );
    };
    match command.as_str() {
        "run" => run::run(rest),
        "serve" => serve::run(rest),
        "count-proxy" => count_proxy::run(rest),
        "ours-aws" => aws::run(rest),
        "ours-slurm-real" => slurm_real::run(rest),
        "staged-ready" => staged_ready::only(rest),
        "packing" => packing::only(rest),
        "packing-real" => packing_real::only(rest),
        "slurm-forecast" => forecast_real::only(rest),
        "advise-real" => advise_real::only(rest),
        "anchors" => anchors::only(rest),
        "spill" => spill::only(rest),
        "fallback" => fallback::only(rest),
        "server-cost" => server_cost::only(rest),
        "k8s-fake" => k8s::serve(rest),
        "ours-k8s" => k8s::run(rest),
        "azure-fake" => azure::serve(rest),
        "ours-azure" => azure::run(rest),
        "gce-fake" => gce::serve(rest),
        "ours-gce" => gce::run(rest),
        "ours-backends" => backends::run(rest, &run::backend_sizes(rest)),
        other => bail!("unknown bench-harness command `{other}`"),
    }
}
