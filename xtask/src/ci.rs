//! `cargo xtask ci` and `cargo xtask e2e`.

use crate::services::{self, repo_root};
use anyhow::{Context, Result, bail};
use std::process::Command;

fn cargo(args: &[&str]) -> Result<()> {
    eprintln!("==> cargo {}", args.join(" "));
    let status = Command::new(env!("CARGO"))
        .args(args)
        .current_dir(repo_root())
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

pub fn run(_args: &[String]) -> Result<()> {
    cargo(&["fmt", "--all", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        "codalab-wm/full",
        "--",
        "-D",
        "warnings",
    ])?;
    services::run(&["up".into(), "all".into()])?;
    let tests = cargo(&["test", "--workspace", "--features", "codalab-wm/full"]);
    let e2e = tests.as_ref().ok().map(|_| e2e(&[]));
    tests?;
    e2e.unwrap_or(Ok(()))
}

pub fn e2e(_args: &[String]) -> Result<()> {
    cargo(&[
        "test",
        "-p",
        "codalab-wm",
        "--features",
        "full",
        "--test",
        "e2e",
        "--",
        "--nocapture",
        "--test-threads=1",
    ])
}
