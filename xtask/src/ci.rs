//! `cargo xtask ci` (what `.ci/run` runs) and `cargo xtask e2e`.

use crate::services::{self, repo_root};
use anyhow::{Context, Result, bail};
use std::process::Command;
use std::time::Instant;

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

fn step(
    name: &str,
    timings: &mut Vec<(String, u64)>,
    f: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let start = Instant::now();
    let result = f();
    timings.push((name.to_owned(), start.elapsed().as_secs()));
    result.with_context(|| format!("ci step `{name}` failed"))
}

/// Prerequisites (Debian build packages, cargo-fuzz), then the services coming up beside fmt
/// check, clippy and the structure checks, every test (unit, transport, real services, e2e),
/// then the other proofs: bench in quick mode, a short soak, the fault scenarios and a bounded
/// fuzz run.
pub fn run(_args: &[String]) -> Result<()> {
    let mut timings = Vec::new();
    let result = (|| {
        step("prerequisites", &mut timings, crate::prereqs::ensure)?;
        // The services install and start (pip, debootstrap, MariaDB, Slurm) while the checks
        // below compile: most of their time is downloads and disk, not the compiler's CPU.
        let services = std::thread::spawn(|| services::run(&["up".into(), "all".into()]));
        step("fmt", &mut timings, || cargo(&["fmt", "--all", "--check"]))?;
        step("clippy", &mut timings, || {
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
            cargo(&[
                "clippy",
                "-p",
                "xtask",
                "--all-targets",
                "--features",
                "bench,soak",
                "--",
                "-D",
                "warnings",
            ])
        })?;
        step("each crate's tests alone", &mut timings, crate_tests_alone)?;
        step("architecture", &mut timings, || {
            crate::architecture::run(&[])
        })?;
        step(
            "libraries without servers or fakes",
            &mut timings,
            libraries_lean,
        )?;
        step(
            "services up (the part left after the checks)",
            &mut timings,
            || (services.join()).map_err(|_| anyhow::anyhow!("`services up all` panicked"))?,
        )?;
        step("test", &mut timings, || {
            cargo(&["test", "--workspace", "--features", "codalab-wm/full"])
        })?;
        step("bench --quick", &mut timings, || {
            crate::bench::run(&["--quick".into()])
        })?;
        step("soak --minutes 2", &mut timings, || {
            crate::soak::run(&["--minutes".into(), "2".into()])
        })?;
        step("chaos", &mut timings, || crate::chaos::run(&[]))?;
        // 20 s a target keeps CI inside its hour; `cargo xtask fuzz` alone runs 60 s each.
        step("fuzz --seconds 20", &mut timings, || {
            crate::fuzz::run(&["--seconds".into(), "20".into()])
        })?;
        step("a fresh CodaLab for the demo", &mut timings, fresh_codalab)?;
        // Last: the README's first command, as a newcomer runs it (its real workers stay
        // registered on the server for a minute after they exit; nothing runs after it).
        step("demo", &mut timings, || {
            xtask_self(&["demo", "--exit-when-done"])
        })?;
        Ok(())
    })();
    eprintln!("==> ci step timings (s): {timings:?}");
    result
}

/// The tests leave alice's bundles staged (a test stages what it needs and checks what the
/// manager does; nothing deletes them), and the demo's workers, alice's, would run those
/// first: the demo, as a newcomer runs it, gets an empty server. The test step's server logs
/// are kept in `.services/ci-logs/codalab-before-demo`.
fn fresh_codalab() -> Result<()> {
    let root = repo_root();
    let logs = root.join(".services/codalab/logs");
    let kept = root.join(".services/ci-logs/codalab-before-demo");
    std::fs::create_dir_all(root.join(".services/ci-logs"))?;
    if logs.is_dir() {
        let _ = std::fs::remove_dir_all(&kept);
        std::fs::rename(&logs, &kept).with_context(|| format!("moving {}", logs.display()))?;
    }
    eprintln!("==> bash xtask/services/codalab/down.sh --purge");
    let status = Command::new("bash")
        .args(["xtask/services/codalab/down.sh", "--purge"])
        .env("SERVICES_DIR", root.join(".services"))
        .current_dir(&root)
        .status()
        .context("running xtask/services/codalab/down.sh --purge")?;
    if !status.success() {
        bail!("xtask/services/codalab/down.sh --purge failed ({status})");
    }
    Ok(())
}

/// `cargo xtask ARGS…` as a child process (the demo replaces its process with a script).
fn xtask_self(args: &[&str]) -> Result<()> {
    let mut full = vec!["xtask"];
    full.extend_from_slice(args);
    cargo(&full)
}

/// The crates whose own `cargo test -p NAME` must build: the workspace test run unifies
/// features across crates and so hides a test that needs a feature only another crate enables
/// (the `testing` module of codalab-wm-core once did).
const CRATES: [&str; 14] = [
    "codalab-wm-backend",
    "codalab-wm-core",
    "codalab-wm-app",
    "codalab-wm-slurm",
    "codalab-wm-aws",
    "codalab-wm-azure",
    "codalab-wm-k8s",
    "codalab-wm-gce",
    "codalab-wm-operator",
    "codalab-wm",
    "codalab-wm-fake-codalab",
    "codalab-wm-fake-azure",
    "codalab-wm-fake-k8s",
    "codalab-wm-fake-gce",
];

/// `cargo check --tests -p NAME` for each crate on its own (type-checks every test target with
/// that crate's features only; no codegen, so far cheaper than `cargo test --no-run`).
fn crate_tests_alone() -> Result<()> {
    CRATES
        .iter()
        .try_for_each(|name| cargo(&["check", "--tests", "-p", name]))
}

/// The library crates (published, linked by users): through their normal dependencies, with
/// every feature on, none may pull in an HTTP server or a test fake (those live in
/// `crates/testkit/`). The binary crate `codalab-wm` serves `--listen` with axum.
const LIBRARIES: [&str; 9] = [
    "codalab-wm-backend",
    "codalab-wm-core",
    "codalab-wm-app",
    "codalab-wm-slurm",
    "codalab-wm-aws",
    "codalab-wm-azure",
    "codalab-wm-k8s",
    "codalab-wm-gce",
    "codalab-wm-operator",
];

/// `cargo tree -e normal --all-features -p NAME` for each library: fails naming what it found.
fn libraries_lean() -> Result<()> {
    for name in LIBRARIES {
        let args = [
            "tree",
            "-e",
            "normal",
            "--all-features",
            "--prefix",
            "none",
            "-p",
            name,
        ];
        eprintln!("==> cargo {}", args.join(" "));
        let output = Command::new(env!("CARGO"))
            .args(args)
            .current_dir(repo_root())
            .output()
            .with_context(|| format!("running cargo {}", args.join(" ")))?;
        if !output.status.success() {
            bail!("cargo {} failed ({})", args.join(" "), output.status);
        }
        let tree = String::from_utf8_lossy(&output.stdout);
        let found = not_for_libraries(&tree);
        if !found.is_empty() {
            bail!(
                "{name} depends on {} (servers and test fakes belong in crates/testkit or the binary)",
                found.join(", ")
            );
        }
    }
    Ok(())
}

/// The packages of a `cargo tree --prefix none` listing that no library may depend on: axum
/// and the `codalab-wm-fake-*` crates, each named once.
fn not_for_libraries(tree: &str) -> Vec<&str> {
    let mut found: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|package| *package == "axum" || package.starts_with("codalab-wm-fake-"))
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// The manager end to end against a real CodaLab server, real Slurm and real workers in Docker.
pub fn e2e(_args: &[String]) -> Result<()> {
    services::run(&[
        "up".into(),
        "codalab".into(),
        "docker".into(),
        "slurm".into(),
    ])?;
    cargo(&[
        "test",
        "-p",
        "codalab-wm",
        "--features",
        "full",
        "--test",
        "it",
        "--",
        "e2e::",
        "real_worker::",
    ])
}

#[cfg(test)]
mod tests {
    use super::not_for_libraries;

    #[test]
    fn finds_axum_and_the_fakes_in_a_tree_listing() {
        let clean = "codalab-wm-core v0.1.0 (/r/crates/core)\ntokio v1.54.0\naxum-core v0.5.0\n";
        assert!(not_for_libraries(clean).is_empty());
        let dirty = "codalab-wm-azure v0.1.0 (/r/crates/backend-azure)\naxum v0.8.4\n\
                     codalab-wm-fake-codalab v0.1.0 (/r/crates/testkit/codalab)\naxum v0.8.4 (*)\n";
        assert_eq!(
            not_for_libraries(dirty),
            ["axum", "codalab-wm-fake-codalab"]
        );
    }
}
