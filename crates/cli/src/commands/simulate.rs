//! `cl-worker-manager simulate`: replays a workload through the real pool policy with a
//! simulated backend (`codalab_wm_core::simulate`). This file only turns the configuration
//! into pool policies (shapes read from the backend tables, no backend built), applies the
//! what-if edits (`codalab_wm_core::simulate::what_if`) and prints.

use crate::args::GlobalArgs;
use crate::backends::catalogue;
use anyhow::{Context, Result, anyhow};
use clap::ValueHint;
use codalab_wm_app::simulate::help;
use codalab_wm_core::settings::Edit;
use codalab_wm_core::simulate::{
    BundleTemplate, PoissonRate, SimConfig, SimPools, Workload, simulate, what_if,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Flags of `cl-worker-manager simulate`.
#[derive(Debug, clap::Args)]
// The subcommand's doc line (in args.rs) is its about; the explanation and the examples go
// after the flags.
// The workload comes from exactly one of --trace and --arrivals; a bare `simulate` names both.
#[command(after_help = help::SIMULATE_SHORT, after_long_help = help::simulate_long())]
#[command(group(clap::ArgGroup::new("workload").args(["trace", "arrivals"]).required(true)))]
pub struct Args {
    /// Bundle trace: CSV with a header, a JSON array or JSON lines; or the manager's history directory (record_dir/history)
    #[arg(long, value_hint = ValueHint::AnyPath)]
    pub trace: Option<PathBuf>,

    /// Generate arrivals instead: poisson:RATE, RATE in bundles per minute (or poisson:2/s, poisson:90/h)
    #[arg(long)]
    pub arrivals: Option<PoissonRate>,

    /// Bundles to generate with --arrivals
    #[arg(long, default_value_t = 1000)]
    pub bundles: usize,

    /// A kind of generated bundle, repeatable: cpus=N,gpus=N,memory=SIZE,queue=Q,duration=MEAN_SECONDS,weight=N [default: cpus=1,memory=1g,duration=600]
    #[arg(long = "mix", value_name = "SPEC")]
    pub mix: Vec<BundleTemplate>,

    /// Seed of the generator and of the simulated backend
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Seconds a launched job is pending before its worker is active: N, or MIN-MAX (uniform)
    #[arg(long, value_name = "SECONDS", default_value = "60")]
    pub start_latency: String,

    /// Fraction of launched jobs that fail before their worker is active
    #[arg(long, default_value_t = 0.0)]
    pub failure_rate: f64,

    /// Fraction of launched jobs that stay pending until stopped (pending_timeout)
    #[arg(long, default_value_t = 0.0)]
    pub stuck_rate: f64,

    /// A worker with no bundle for this long exits; 0: never [default: the [worker] idle_seconds setting, 600]
    #[arg(long = "worker-idle-seconds", value_name = "SECONDS")]
    pub worker_idle_seconds: Option<u64>,

    /// Stop this long after the last arrival even if bundles still wait
    #[arg(long, value_name = "SECONDS", default_value_t = 86_400)]
    pub drain_seconds: u64,

    /// What-if: change the config as if the file said so, [POOL.]KEY=VALUE, repeatable: with [[pools]], any key of the pool named POOL (no POOL: of every pool), its backend's as TABLE.KEY (cpu.slurm_batch.cpus=8); without, any top-level key (max_workers=40) or TABLE.KEY of the backend. VALUE as in TOML (a bare word is a string); empty removes the key (cpu.spill_after=: no spill). Read and checked as the file is
    #[arg(long = "set", value_name = "[POOL.]KEY=VALUE")]
    pub set: Vec<String>,

    /// How a pool's platform starts its jobs, POOL:latency=MIN-MAX,slots=N,busy=EVERY/FOR,stockout=EVERY/FOR,preempt=SHARE,reclaim=MEAN,forecast=true,bills_start=true (seconds; any of the keys), repeatable: its own start latency; at most N of its jobs placed at once; others fill it for the first FOR of every EVERY (a job with no place pends, reason Resources, as on a full Slurm partition); no capacity for the first FOR of every EVERY (a launch fails as a Spot stockout); SHARE of its launches preempted before their worker is active; an active worker reclaimed after MEAN on average, its runs staged again when the pool's workers start preemptible, lost (worker_offline on the server) otherwise; a job pending in a busy spell listed with the spell's end as its expected start, as Slurm's backfill forecasts it (squeue --start); its workers billed from their place, while they start (a VM booting, a Slurm allocation), not from their check-in
    #[arg(long = "platform", value_name = "POOL:SPEC")]
    pub platform: Vec<String>,

    /// An owner's parallel_run_quota, OWNER=N (the trace's owner column), repeatable: the simulated manager runs as the root user, so its workers are shared and the owner runs at most N at once
    #[arg(long = "quota", value_name = "OWNER=N")]
    pub quota: Vec<String>,

    /// Without [[pools]]: the backend whose worker shape the single pool has [default: `backend` in the config, else local]
    #[arg(long)]
    pub backend: Option<String>,

    #[command(flatten)]
    pub report: Report,
}

/// The flags of the report of `simulate` and `advise`.
#[derive(Debug, clap::Args)]
pub struct Report {
    /// Write the plot to this SVG file (simulate: staged bundles and workers per pool over time; advise: wait p90 against cost a day)
    #[arg(long, value_hint = ValueHint::FilePath)]
    pub svg: Option<PathBuf>,

    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,

    /// TOML config file with the pools (as `--config` before the command)
    #[arg(long, value_hint = ValueHint::FilePath)]
    pub config: Option<PathBuf>,
}

/// Runs `cl-worker-manager simulate`.
pub async fn run(args: Args, global: GlobalArgs) -> Result<ExitCode> {
    let layers = crate::setup::layers(&global, None);
    let edits: Vec<Edit> = (args.set.iter().map(|s| s.parse()))
        .collect::<Result<_, String>>()
        .map_err(|e| anyhow!(e))?;
    let settings = crate::setup::settings_with(&layers, &edits)?;
    let pools = SimPools::of(
        &settings,
        &layers,
        args.backend.as_deref(),
        &edits,
        &catalogue(),
    )?;
    for policy in &pools.policies {
        policy.validate().map_err(|e| anyhow!(e))?;
    }
    let workload = workload(&args)?;
    let base = SimConfig::from_settings(&settings);
    let config = SimConfig {
        start_latency: what_if::start_latency(&args.start_latency)?,
        failure_rate: args.failure_rate,
        stuck_rate: args.stuck_rate,
        worker_idle: (args.worker_idle_seconds.map(Duration::from_secs))
            .unwrap_or(base.worker_idle),
        seed: args.seed,
        drain: Duration::from_secs(args.drain_seconds),
        quotas: what_if::quotas(&args.quota)?,
        platforms: what_if::platforms(&args.platform, &pools.policies)?,
        preemptible: pools.preemptible,
        ..base
    };
    let started = Instant::now();
    let report = simulate(&workload, &pools.policies, &config)?;
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), "simulated");
    if let Some(path) = &args.report.svg {
        std::fs::write(path, codalab_wm_app::simulate::svg(&report))
            .with_context(|| format!("cannot write the plot to {}", path.display()))?;
    }
    if args.report.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", codalab_wm_app::simulate::text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// The trace (a file, or the manager's history directory), or the generated arrivals.
fn workload(args: &Args) -> Result<Workload> {
    if let Some(path) = &args.trace {
        let text = codalab_wm_core::history::read(path)?;
        return Workload::parse(&text).with_context(|| format!("in {}", path.display()));
    }
    let rate = args
        .arrivals
        .ok_or_else(|| anyhow!("give --trace FILE or --arrivals poisson:RATE"))?;
    Ok(Workload::poisson(rate, args.bundles, &args.mix, args.seed))
}
