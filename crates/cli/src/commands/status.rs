//! `cl-worker-manager status`: what a running manager is doing, like `ray status`.
//!
//! By default it reads `/status` of a manager started with `--listen` (`--url`, or the `listen`
//! address of the config). With `--dry-tick` it builds the manager from the config and flags
//! exactly as a run would, runs one tick with `--dry-run` forced (nothing is submitted), and
//! shows that tick. Both print the same compact view, or with `--json` the `/status` document.
//!
//! The view is [`codalab_wm_app::view`]: the document read back into the snapshot, presented.

use crate::args::GlobalArgs;
use crate::backends::{BackendCommand, catalogue};
use anyhow::{Context, Result, anyhow, bail};
use codalab_wm_app::view::{read, render};
use codalab_wm_core::layout::Layout;
use codalab_wm_core::settings::Settings;
use serde_json::Value;
use std::process::ExitCode;

impl Args {
    /// `--config` and the backend's process flags, to join those before `status`.
    pub fn take_process(&mut self) -> crate::args::ProcessArgs {
        let mut process = self
            .backend
            .as_mut()
            .map(|b| std::mem::take(&mut b.process))
            .unwrap_or_default();
        process.config = self.config.take().or(process.config);
        process
    }
}

/// Flags of `cl-worker-manager status`.
#[derive(Debug, Default, clap::Args)]
pub struct Args {
    /// Address of a running manager's --listen server [default: http://<listen> from the config]
    #[arg(long, value_name = "URL", conflicts_with = "dry_tick")]
    pub url: Option<String>,

    /// Ask no running manager: build one from the config and flags and run one tick here with --dry-run (nothing is submitted)
    #[arg(long = "dry-tick")]
    pub dry_tick: bool,

    /// Print the status document (as /status serves it) instead of the view
    #[arg(long)]
    pub json: bool,

    /// With --dry-tick: the backend (as when running the manager), unless the config names one
    #[command(subcommand)]
    pub backend: Option<BackendCommand>,

    /// TOML config file of the manager (its `listen` address; with --dry-tick, everything)
    #[arg(long, value_hint = clap::ValueHint::FilePath)]
    pub config: Option<std::path::PathBuf>,
}

/// Runs `cl-worker-manager status`.
pub async fn run(args: Args, global: GlobalArgs) -> Result<ExitCode> {
    if args.backend.is_some() && !args.dry_tick {
        bail!("a backend after `status` needs --dry-tick");
    }
    let document = if args.dry_tick {
        dry_tick(args.backend, &global).await?
    } else {
        let settings = crate::setup::settings(&crate::setup::layers(&global, None))?;
        fetch(&base_url(args.url, &settings)?).await?
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&document)?);
    } else {
        let status =
            read(document).context("the status document is not understood (see --json)")?;
        print!("{}", render(&status));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--url`, or `http://<listen>` (a wildcard `listen` address is asked on loopback).
fn base_url(url: Option<String>, settings: &Settings) -> Result<String> {
    if let Some(url) = url {
        return Ok(url);
    }
    let mut addr = settings.listen.ok_or_else(|| {
        anyhow!(
            "no manager to ask: pass --url http://127.0.0.1:9464 (a manager started with --listen), set `listen` in the config, or use --dry-tick"
        )
    })?;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    Ok(format!("http://{addr}"))
}

/// `GET <base>/status`.
async fn fetch(base: &str) -> Result<Value> {
    let base = base.trim_end_matches('/');
    let url = if base.ends_with("/status") {
        base.to_owned()
    } else {
        format!("{base}/status")
    };
    let reply = reqwest::get(&url)
        .await
        .with_context(|| format!("cannot reach the manager at {url}"))?;
    let code = reply.status();
    if !code.is_success() {
        bail!("the manager at {url} answered {code}");
    }
    reply
        .json()
        .await
        .with_context(|| format!("invalid status document from {url}"))
}

/// Builds the manager as `run` does, with `dry_run` forced, and runs one tick.
async fn dry_tick(backend: Option<BackendCommand>, global: &GlobalArgs) -> Result<Value> {
    let layers = crate::setup::layers(global, backend.as_ref());
    let mut settings = crate::setup::settings(&layers)?;
    settings.dry_run = true;
    if settings.verbose {
        codalab_wm_app::logging::init(true, settings.log_format);
    }
    let layout = Layout::new(&settings, &layers, &catalogue())?;
    let credentials = crate::setup::credentials(settings.password_file.as_deref())?;
    let mut manager = crate::setup::build_manager(layout, &settings, credentials).await?;
    manager
        .tick()
        .await
        .context("the dry tick failed (nothing was submitted)")?;
    Ok(serde_json::to_value(manager.status())?)
}
