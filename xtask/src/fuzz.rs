//! `cargo xtask fuzz [--seconds N] [TARGET…]`: runs every cargo-fuzz target of `fuzz/` for N
//! seconds (default 60) each, starting from the seeds kept in `fuzz/seeds/<target>` (new
//! inputs go to `fuzz/corpus/<target>`, not kept in git). Fails on the first crash; the input
//! is left in `fuzz/artifacts/<target>`. The CodaLab reply targets (`jsonapi` for search
//! pages, `token`, `user`) have seeds nested 100,000 deep and a 1,000-bundle page.
//!
//! cargo-fuzz needs nightly-only flags (`-Zsanitizer`); this project builds on stable, so the
//! task sets `RUSTC_BOOTSTRAP=1` for the fuzz build only. Needs `cargo install cargo-fuzz`.
//! `--build-only` builds the targets as a run would and runs none (CI builds them beside the
//! tests).

use crate::services::repo_root;
use anyhow::{Context, Result, bail};
use std::process::Command;

/// The targets in `fuzz/Cargo.toml`.
const TARGETS: &[&str] = &[
    "squeue", "sbatch", "jsonapi", "token", "user", "size", "config",
];

/// The largest input of a target: the CodaLab replies get 2 MiB, so that the seeds of a
/// 1,000-bundle search page (~1 MB) and of 100,000 nested arrays (200 KB) are used whole;
/// the command-output and config parsers 64 KiB.
fn max_len(target: &str) -> usize {
    match target {
        "jsonapi" | "token" | "user" => 2 << 20,
        _ => 64 << 10,
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let mut seconds = 60u64;
    let mut targets: Vec<&str> = Vec::new();
    let mut build_only = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--build-only" => build_only = true,
            "--seconds" => {
                let value = args.next().context("--seconds needs a number")?;
                seconds = value
                    .parse()
                    .with_context(|| format!("--seconds `{value}` is not a number"))?;
            }
            name if TARGETS.contains(&name) => targets.push(name),
            other => bail!(
                "usage: cargo xtask fuzz [--seconds N | --build-only] [TARGET…]; unknown `{other}` (targets: {})",
                TARGETS.join(" ")
            ),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.to_vec();
    }
    let fuzz_dir = repo_root().join("fuzz");
    let installed = Command::new(env!("CARGO"))
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        bail!("cargo-fuzz is not installed: run `cargo install cargo-fuzz`");
    }
    if build_only {
        return build(&fuzz_dir, &targets);
    }
    for target in &targets {
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        eprintln!("==> fuzz {target} for {seconds} s");
        let status = Command::new(env!("CARGO"))
            .args(["fuzz", "run", FUZZ_PROFILE, target])
            .arg(&corpus)
            .arg(fuzz_dir.join("seeds").join(target))
            .args([
                "--",
                &format!("-max_total_time={seconds}"),
                &format!("-max_len={}", max_len(target)),
            ])
            .current_dir(&fuzz_dir)
            .env("RUSTC_BOOTSTRAP", "1")
            .status()
            .with_context(|| format!("running cargo fuzz run {target}"))?;
        if !status.success() {
            bail!(
                "fuzz target `{target}` failed ({status}): see fuzz/artifacts/{target} and reproduce with \
                 `cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run {target} <artifact>`"
            );
        }
    }
    eprintln!(
        "fuzz: {} targets ran {seconds} s each with no crash",
        targets.len()
    );
    Ok(())
}

/// The profile flag of every `cargo fuzz` call here: a build and a run use the same artefacts.
const FUZZ_PROFILE: &str = "--release";

/// `cargo fuzz build` for `targets`, with the flags a run uses.
fn build(fuzz_dir: &std::path::Path, targets: &[&str]) -> Result<()> {
    for target in targets {
        eprintln!("==> cargo fuzz build {FUZZ_PROFILE} {target}");
        let status = Command::new(env!("CARGO"))
            .args(["fuzz", "build", FUZZ_PROFILE, target])
            .current_dir(fuzz_dir)
            .env("RUSTC_BOOTSTRAP", "1")
            .status()
            .with_context(|| format!("running cargo fuzz build {target}"))?;
        if !status.success() {
            bail!("cargo fuzz build {target} failed ({status})");
        }
    }
    Ok(())
}
