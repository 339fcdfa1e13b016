//! `cl-worker-manager advise`: the manager's history replayed under the settings in force and
//! swept (`codalab_wm_core::simulate::advise`); this file reads the flags, the history and the
//! pools, and prints (`codalab_wm_app::simulate::advice_text`).

use crate::args::GlobalArgs;
use crate::backends::catalogue;
use anyhow::{Context, Result, anyhow};
use clap::ValueHint;
use codalab_wm_app::simulate::{Names, SavedAdvice, advice_text, help};
use codalab_wm_core::simulate::advise::{Ask, Recorded, advise, parse_wait};
use codalab_wm_core::simulate::{SimConfig, SimPools};
use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `cl-worker-manager advise`.
#[derive(Debug, clap::Args)]
#[command(after_help = help::ADVISE_SHORT, after_long_help = help::advise_long())]
pub struct Args {
    /// The history: the manager's history directory, or a trace [default: history in the record dir]
    #[arg(long, value_hint = ValueHint::AnyPath)]
    pub history: Option<PathBuf>,

    /// The wait to meet: 9 in 10 bundles staged → running within it, in seconds or like 15m, 2h
    #[arg(long, value_name = "WAIT", value_parser = parse_wait)]
    pub p90: Option<std::time::Duration>,

    /// The cost a day not to exceed (cost_per_hour × worker-hours; worker-hours when no pool has a price)
    #[arg(long, value_name = "COST")]
    pub max_cost_per_day: Option<f64>,

    #[command(flatten)]
    pub report: super::simulate::Report,
}

/// Runs `cl-worker-manager advise`.
pub async fn run(args: Args, global: GlobalArgs) -> Result<ExitCode> {
    let layers = crate::setup::layers(&global, None);
    let settings = crate::setup::settings(&layers)?;
    let pools = SimPools::of(&settings, &layers, None, &[], &catalogue())?;
    let path = match &args.history {
        Some(path) => path.clone(),
        None => settings.history().map(|(dir, _)| dir).ok_or_else(|| {
            anyhow!("history_days is 0: this manager keeps no history; give --history DIR")
        })?,
    };
    let text = codalab_wm_core::history::read(&path)?;
    let recorded = Recorded::parse(&text).with_context(|| format!("in {}", path.display()))?;
    let config = SimConfig {
        preemptible: pools.preemptible,
        ..SimConfig::from_settings(&settings)
    };
    let ask = Ask {
        p90: args.p90,
        max_cost_per_day: args.max_cost_per_day,
    };
    let advice = advise(&recorded, &pools.policies, &config, ask)?;
    let names = Names {
        pools: pools.policies.iter().map(|p| p.name.clone()).collect(),
        single: pools.single,
        budget: config.budget,
    };
    if let Some(svg) = &args.report.svg {
        std::fs::write(svg, codalab_wm_app::simulate::advice_svg(&advice, &names))
            .with_context(|| format!("cannot write the plot to {}", svg.display()))?;
    }
    let text = advice_text(&advice, &names, &path.display().to_string());
    match args.report.json {
        true => println!("{}", serde_json::to_string_pretty(&advice)?),
        false => print!("{text}"),
    }
    if path.is_dir() {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        match SavedAdvice::new(&advice, &names, now.as_secs()).save(&path) {
            Ok(file) => eprintln!("(saved for the manager's page: {})", file.display()),
            Err(error) => eprintln!("(not saved for the page: {error})"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
