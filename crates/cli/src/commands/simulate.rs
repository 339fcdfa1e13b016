//! `cl-worker-manager simulate`: replays a workload through the real pool policy with a
//! simulated backend (`codalab_wm_core::simulate`). This file only turns the configuration
//! into pool policies (shapes read from the backend tables, no backend built), applies the
//! what-if edits (`codalab_wm_core::simulate::what_if`) and prints.

use crate::args::GlobalArgs;
use crate::backends::catalogue;
use anyhow::{Context, Result, anyhow, bail};
use clap::ValueHint;
use codalab_wm_core::PoolPolicy;
use codalab_wm_core::layout::{Layout, Reading, single_placement};
use codalab_wm_core::settings::{Edit, Layers, Settings};
use codalab_wm_core::simulate::{
    BundleTemplate, PoissonRate, SimConfig, Workload, simulate, what_if,
};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const ABOUT: &str = "\
Answers \"what would these min/max/burst/timeout settings have done to last week's workload?\":
the pools come from the usual configuration ([[pools]] in --config, or the single-backend
settings such as --min-workers/--max-workers before `simulate`), bundles from a trace or a
Poisson generator, and the backend is simulated: jobs pend for --start-latency, some fail
(--failure-rate) or never start (--stuck-rate), workers exit after --worker-idle-seconds without
a bundle. The output gives per pool the queue-wait percentiles, worker-hours (cost), launches,
failures and peak workers; --svg plots staged bundles and workers over time. The same input and
--seed give byte-identical output.

A trace is CSV with a header (time,cpus,gpus,memory,queue,owner,duration; only time and duration
are required), a JSON array of such objects, or JSON lines. time is in seconds (relative or since
the epoch), memory in bytes or like 4g, duration in seconds. The server is simulated as CodaLab's
dispatches: a worker runs several bundles while its CPUs, GPUs and memory allow, owners within
their --quota; the manager plans on that model and estimates each bundle's start.";

const SHORT: &str = "Answers \"what would these min/max/burst/timeout settings have done to last week's workload?\" (--help: the model and examples)";

const EXAMPLES: &str = "\
Examples:
  # Last week's bundles against the pools of the production config, with max raised to 40:
  cl-worker-manager --config wm.toml simulate --trace last-week.csv --set cpu.max=40 --svg week.svg

  # Upstream's rules versus bursts, on 2 bundles per minute of 20-minute runs:
  cl-worker-manager --max-workers 20 simulate --arrivals poisson:2 --bundles 5000 \\
      --mix cpus=1,memory=2g,duration=1200
  cl-worker-manager --max-workers 20 --launch-mode target --max-launches-per-tick 5 \\
      simulate --arrivals poisson:2 --bundles 5000 --mix cpus=1,memory=2g,duration=1200

  # Stuck jobs, and a pending timeout that moves their demand to the next pool:
  cl-worker-manager --config wm.toml simulate --trace t.json --stuck-rate 0.2 \\
      --set gpu.pending_timeout=600";

fn long_help() -> String {
    format!("{ABOUT}\n\n{EXAMPLES}")
}

/// Flags of `cl-worker-manager simulate`.
#[derive(Debug, clap::Args)]
// The subcommand's doc line (in args.rs) is its about; the explanation and the examples go
// after the flags.
// The workload comes from exactly one of --trace and --arrivals; a bare `simulate` names both.
#[command(after_help = SHORT, after_long_help = long_help())]
#[command(group(clap::ArgGroup::new("workload").args(["trace", "arrivals"]).required(true)))]
pub struct Args {
    /// Bundle trace: CSV with a header, a JSON array or JSON lines
    #[arg(long, value_hint = ValueHint::FilePath)]
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

    /// Write the plot (staged bundles and workers per pool over time) to this SVG file
    #[arg(long, value_hint = ValueHint::FilePath)]
    pub svg: Option<PathBuf>,

    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,

    /// TOML config file with the pools to simulate (as `--config` before `simulate`)
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
    let (policies, preemptible) = policies(&settings, &layers, args.backend.as_deref(), &edits)?;
    for policy in &policies {
        policy.validate().map_err(|e| anyhow!(e))?;
    }
    let workload = workload(&args)?;
    let config = SimConfig {
        sleep_time: Duration::from_secs(settings.sleep_time),
        start_latency: what_if::start_latency(&args.start_latency)?,
        failure_rate: args.failure_rate,
        stuck_rate: args.stuck_rate,
        worker_idle: Duration::from_secs(
            args.worker_idle_seconds
                .unwrap_or(settings.worker.idle_seconds),
        ),
        worker_max_runs: settings
            .worker
            .exit_after_num_runs
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0),
        seed: args.seed,
        drain: Duration::from_secs(args.drain_seconds),
        quotas: what_if::quotas(&args.quota)?,
        platforms: what_if::platforms(&args.platform, &policies)?,
        preemptible,
        budget: codalab_wm_core::layout::manager_config(&settings).budget,
        ..SimConfig::default()
    };
    let started = Instant::now();
    let report = simulate(&workload, &policies, &config)?;
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), "simulated");
    if let Some(path) = &args.svg {
        std::fs::write(path, codalab_wm_app::simulate::svg(&report))
            .with_context(|| format!("cannot write the plot to {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", codalab_wm_app::simulate::text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn workload(args: &Args) -> Result<Workload> {
    if let Some(path) = &args.trace {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the trace {}", path.display()))?;
        return Workload::parse(&text).with_context(|| format!("in {}", path.display()));
    }
    let rate = args
        .arrivals
        .ok_or_else(|| anyhow!("give --trace FILE or --arrivals poisson:RATE"))?;
    Ok(Workload::poisson(rate, args.bundles, &args.mix, args.seed))
}

/// The pool policies the manager would build, without building any backend.
/// The pools' policies, and the pools whose workers start preemptible (their reclaimed runs
/// are staged again), as the manager would lay them out.
fn policies(
    settings: &Settings,
    layers: &Layers,
    backend: Option<&str>,
    edits: &[Edit],
) -> Result<(Vec<PoolPolicy>, BTreeSet<String>)> {
    let catalogue = catalogue();
    let preemptible = |layout: &Layout| {
        (layout.pools.iter())
            .filter(|p| p.worker.preemptible)
            .map(|p| p.policy.name.clone())
            .collect()
    };
    if !settings.pools.is_empty() {
        if backend.is_some() {
            bail!("--backend is for the single-backend mode; the config file declares [[pools]]");
        }
        let layout = Layout::pools(settings, &catalogue, Reading::Shapes)?;
        let preemptible = preemptible(&layout);
        return Ok((
            layout.pools.into_iter().map(|p| p.policy).collect(),
            preemptible,
        ));
    }
    let name = backend.or(settings.backend.as_deref()).unwrap_or("local");
    let kind = catalogue.get(name)?;
    let defaults = kind.placement_defaults(single_placement(settings));
    let tables = layers.tables_with(kind, defaults, edits, &catalogue)?;
    let layout = Layout::single(settings, kind, &tables, Reading::Shapes)?;
    let preemptible = preemptible(&layout);
    let mut policy = layout.pools.into_iter().next().context("no pool")?.policy;
    // The server's search does the queue filtering in this mode; the simulated server still
    // runs a bundle only on a worker with its tag.
    policy.tag = settings.worker.tag.clone();
    policy.tag_exclusive = settings.worker.tag_exclusive;
    Ok((vec![policy], preemptible))
}
