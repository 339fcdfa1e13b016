//! What `cargo xtask ci` needs beyond a Rust toolchain, installed when missing, so that the
//! README's test command works by itself on a fresh machine: the Debian packages the build
//! links against (ssh2 builds libssh2 against the system OpenSSL), the headless browser the
//! dashboard's test loads the page in (Debian's `chromium`), Debian's `prometheus` for
//! `promtool`, Debian's `docker-compose` (the compose drop-in's test), Debian's `systemd` for
//! `systemd-analyze` (the unit's test), and cargo-fuzz. The
//! services' own packages (MariaDB, Slurm, docker.io, …) are installed by their `up.sh` scripts.

use anyhow::{Context, Result, bail};
use std::process::Command;

/// Debian packages of the build.
const PACKAGES: &[&str] = &[
    "build-essential",
    "pkg-config",
    "libssl-dev",
    "curl",
    "ca-certificates",
    // crates/cli/tests/it/dashboard_slurm.rs loads the dashboard in headless Chromium.
    "chromium",
    // `promtool check metrics` lints /metrics (crates/app, crates/operator); `promtool test
    // rules` and the `prometheus` server check deploy/prometheus (crates/cli/tests/it/prometheus.rs).
    "prometheus",
    // crates/cli/tests/it/compose.rs renders CodaLab's compose file with our override.
    "docker-compose",
    // `systemd-analyze verify` checks deploy/systemd's unit (crates/cli/tests/it/systemd.rs).
    "systemd",
];

pub fn ensure() -> Result<()> {
    debian_packages()?;
    cargo_fuzz()
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ok installed"))
}

fn debian_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages: {} (install them as root: apt-get install {})",
            missing.join(" "),
            missing.join(" ")
        );
    }
    eprintln!("==> apt-get install {}", missing.join(" "));
    run(Command::new("apt-get").args(["-o", "DPkg::Lock::Timeout=600", "update", "-q"]))?;
    run(Command::new("apt-get")
        .args(["-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q"])
        .arg("--no-install-recommends")
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn cargo_fuzz() -> Result<()> {
    let present = Command::new(env!("CARGO"))
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        return Ok(());
    }
    eprintln!("==> cargo install --locked cargo-fuzz");
    run(Command::new(env!("CARGO")).args(["install", "--locked", "cargo-fuzz"]))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}
