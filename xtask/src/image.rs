//! `cargo xtask image [--binary PATH] [--tag TAG]`: the container image of `cl-worker-manager`
//! (every backend), built with no registry: `xtask/image/build.sh` imports a Debian base made
//! by debootstrap into the project's dockerd (`cargo xtask services up docker`) and builds the
//! Dockerfile's `prebuilt` target around a binary already built. Without `--binary` it builds
//! the release binary with `--features full` first; CI's test gives the binary it built.

use crate::services::{repo_root, target_dir};
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::Command;

const USAGE: &str = "usage: cargo xtask image [--binary PATH] [--tag TAG (codalab-wm:latest)]";

pub fn run(args: &[String]) -> Result<()> {
    let (mut binary, mut tag) = (None, "codalab-wm:latest".to_owned());
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .cloned()
                .with_context(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--binary" => binary = Some(PathBuf::from(value()?)),
            "--tag" => tag = value()?,
            other => bail!("unknown image option `{other}`\n{USAGE}"),
        }
    }
    let binary = match binary {
        Some(binary) => binary,
        None => release_binary()?,
    };
    let status = Command::new("bash")
        .arg(repo_root().join("xtask/image/build.sh"))
        .arg(&binary)
        .arg(&tag)
        .current_dir(repo_root())
        .status()
        .context("running xtask/image/build.sh")?;
    if !status.success() {
        bail!("building the image failed ({status})");
    }
    println!(
        "image {tag}: docker run --rm {tag} --help   (DOCKER_HOST=unix://{}/docker/docker.sock)",
        repo_root().join(".services").display()
    );
    Ok(())
}

/// Builds `cl-worker-manager` in release mode with every backend; returns its path.
fn release_binary() -> Result<PathBuf> {
    let build = [
        "build",
        "--release",
        "--locked",
        "-p",
        "codalab-wm",
        "--features",
        "full",
    ];
    eprintln!("==> cargo {}", build.join(" "));
    let status = Command::new(env!("CARGO"))
        .args(build)
        .current_dir(repo_root())
        .status()
        .context("building cl-worker-manager")?;
    if !status.success() {
        bail!("building cl-worker-manager failed ({status})");
    }
    Ok(target_dir().join("release/cl-worker-manager"))
}
