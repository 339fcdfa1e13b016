//! `cargo xtask bench [--quick]`: speed, memory and backend cost of our manager, side by side
//! with the Python `cl-worker-manager` 1.7.5 on identical input.
//!
//! The measuring happens in `bench-harness` (`xtask/src/bin/bench_harness/`), which links the
//! manager core and the backends, and `bench-ours` (our manager's ticks, core only). This task
//! only builds them in release mode (feature `bench`,
//! so that plain `cargo xtask` stays light) and runs `bench-harness run`, which prints the
//! table, writes `bench/results.json` and the table in `BENCH.md` (`--quick`, for CI: small
//! sizes, seconds, results in `target/bench/results-quick.json` only; `--build-only`: the
//! release build and nothing else, as CI runs it beside the tests).

use crate::services::repo_root;
use anyhow::{Context, Result, bail};
use std::process::Command;

pub fn run(args: &[String]) -> Result<()> {
    let mut build_only = false;
    for arg in args {
        match arg.as_str() {
            "--quick" => {}
            "--build-only" => build_only = true,
            _ => bail!(
                "unknown bench option `{arg}` (usage: cargo xtask bench [--quick | --build-only])"
            ),
        }
    }
    let root = repo_root();
    let build = [
        "build",
        "--release",
        "--package",
        "xtask",
        "--features",
        "xtask/bench",
        "--bin",
        "bench-harness",
        "--bin",
        "bench-ours",
        // The staged→ready section runs our real binary (local + Slurm, the default features);
        // the anchors' section, its Kubernetes backend.
        "--package",
        "codalab-wm",
        "--features",
        "codalab-wm/k8s",
        "--bin",
        "cl-worker-manager",
    ];
    eprintln!("==> cargo {}", build.join(" "));
    let status = Command::new(env!("CARGO"))
        .args(build)
        .current_dir(&root)
        .status()
        .context("building the bench binaries")?;
    if !status.success() {
        bail!("building the bench binaries failed ({status})");
    }
    if build_only {
        return Ok(());
    }
    let harness = crate::services::target_dir().join("release/bench-harness");
    let status = Command::new(&harness)
        .arg("run")
        .args(args)
        .current_dir(&root)
        .status()
        .with_context(|| format!("running {}", harness.display()))?;
    if !status.success() {
        bail!("the bench failed ({status})");
    }
    Ok(())
}
