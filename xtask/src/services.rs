//! `cargo xtask services up|down|status <name>…`.
//!
//! Each service is a pair of the project's own scripts, `xtask/services/<name>/up.sh` and
//! `down.sh`, run with bash from the repository root. State (venvs, data, logs, pid files)
//! lives under `.services/<name>/`, which git ignores. `up` is idempotent: it installs what is
//! missing, starts what is not running and waits until the service answers.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Services in the order `all` starts them.
pub const SERVICES: &[&str] = &[
    "slurm",
    "sshd",
    "codalab",
    "docker",
    "moto",
    "azure-mock",
    "k8s-validate",
    "grafana-schema",
];

/// Where cargo puts build artefacts: `CARGO_TARGET_DIR` (relative to the repository root when
/// relative), else `<repo>/target`. CI keeps it outside the clone.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => repo_root().join(dir),
        None => repo_root().join("target"),
    }
}

/// The arguments that build `target/debug/cl-worker-manager` with every backend, as the
/// test step builds it (`cargo test --workspace --features codalab-wm/full`): the same
/// features, so after that step the build is fresh and the binary is the one the tests ran
/// (with `-p codalab-wm` alone the features differ, and the two builds replace each other's
/// binary).
pub const BUILD_MANAGER: [&str; 6] = [
    "build",
    "--workspace",
    "--features",
    "codalab-wm/full",
    "--bin",
    "cl-worker-manager",
];

/// Builds `target/debug/cl-worker-manager` ([`BUILD_MANAGER`]); `who` prefixes the line said.
pub fn build_manager(who: &str) -> Result<()> {
    cargo(who, &BUILD_MANAGER)
}

/// `cargo ARGS…` in the repository, said first (prefixed by `who`); fails when cargo does.
pub fn cargo(who: &str, args: &[&str]) -> Result<()> {
    cargo_with(&format!("{who}:"), args, &[])
}

/// `cargo ARGS…` in the repository with `env` set, said first after `said`; fails when cargo
/// does.
pub fn cargo_with(said: &str, args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let shown: String = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("{said} {shown}cargo {}", args.join(" "));
    let status = Command::new(env!("CARGO"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(repo_root())
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

pub fn run(args: &[String]) -> Result<()> {
    let Some((action, names)) = args.split_first() else {
        bail!(
            "usage: cargo xtask services up|down|status <name>... (names: {} all)",
            SERVICES.join(" ")
        );
    };
    let names: Vec<&str> = if names.is_empty() || names.iter().any(|n| n == "all") {
        SERVICES.to_vec()
    } else {
        names.iter().map(String::as_str).collect()
    };
    for name in &names {
        if !SERVICES.contains(name) {
            bail!("unknown service `{name}` (known: {})", SERVICES.join(" "));
        }
    }
    match action.as_str() {
        "up" => names.iter().try_for_each(|n| script(n, "up")),
        "down" => names.iter().rev().try_for_each(|n| script(n, "down")),
        "status" => names.iter().try_for_each(|n| script(n, "status")),
        other => bail!("unknown action `{other}`: use up, down or status"),
    }
}

/// Runs `xtask/services/<name>/<action>.sh`.
pub fn script(name: &str, action: &str) -> Result<()> {
    let root = repo_root();
    let path = root
        .join("xtask/services")
        .join(name)
        .join(format!("{action}.sh"));
    if !path.exists() {
        bail!(
            "service `{name}` has no {action} script yet ({})",
            path.display()
        );
    }
    eprintln!("==> services {action} {name}");
    let status = Command::new("bash")
        .arg(&path)
        .current_dir(&root)
        .env("SERVICES_DIR", root.join(".services"))
        .status()
        .with_context(|| format!("running {}", path.display()))?;
    if !status.success() {
        bail!("services {action} {name} failed ({status})");
    }
    Ok(())
}
