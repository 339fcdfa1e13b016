//! `cargo xtask ci` (what `.ci/run` runs) and `cargo xtask e2e`.

use crate::services::{self, repo_root};
use anyhow::{Context, Result, bail};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

fn cargo(args: &[&str]) -> Result<()> {
    services::cargo_with("==>", args, &[])
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
/// check, clippy, the structure checks and the test build; every test (unit, transport, real
/// services, e2e) while the release and fuzz builds, each crate's own test check, the book and a bounded
/// fuzz run go on beside them; bench in quick mode; the fault scenarios with the soak beside
/// them; the README's demo.
///
/// What runs beside what is chosen by what each needs: the tests, chaos and the demo share the
/// real services and take them in turn; the builds, the soak (its own fake server) and fuzzing
/// need only CPU, which the service steps mostly leave idle while they wait on the server; the
/// bench measures alone.
pub fn run(args: &[String]) -> Result<()> {
    match args {
        [] => {}
        [step] if step == EACH_CRATE => return crate_tests_alone(),
        _ => bail!("usage: cargo xtask ci [{EACH_CRATE}]"),
    }
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
        step("architecture", &mut timings, || {
            crate::architecture::run(&[])
        })?;
        step(
            "libraries without servers or fakes",
            &mut timings,
            libraries_lean,
        )?;
        step("build the tests", &mut timings, || cargo(&test_args(true)))?;
        step(
            "services up (the part left after the checks)",
            &mut timings,
            || (services.join()).map_err(|_| anyhow::anyhow!("`services up all` panicked"))?,
        )?;
        // Each crate's own test check after the release builds: the test step builds nothing
        // by then. 20 s a fuzz target keeps CI inside its limit (`cargo xtask fuzz` alone runs
        // 60 s each).
        let beside_tests = Lane::start(
            "release and fuzz builds, each crate's tests alone, the book, fuzz --seconds 20",
            &[
                &["bench", "--build-only"],
                &["fuzz", "--build-only"],
                &["ci", EACH_CRATE],
                &["docs"],
                &["fuzz", "--seconds", "20"],
            ],
        )?;
        // Six tests at a time on two cores: the tests that take long wait on the real server,
        // Slurm or a worker, not on the CPU (the CLI's binary took 917 s with the default two
        // threads, 777 s with six).
        step("test", &mut timings, || {
            services::cargo_with("==>", &test_args(false), &[("RUST_TEST_THREADS", "6")])
        })?;
        beside_tests.join(&mut timings)?;
        step("bench --quick", &mut timings, || {
            crate::bench::run(&["--quick".into()])
        })?;
        let soak = Lane::start("soak --minutes 2", &[&["soak", "--minutes", "2"]])?;
        step("chaos", &mut timings, || crate::chaos::run(&[]))?;
        soak.join(&mut timings)?;
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

/// The README's test command's test run: `cargo test --workspace --features codalab-wm/full`
/// (with `--no-run`: only its build).
fn test_args(build_only: bool) -> Vec<&'static str> {
    let mut args = vec!["test", "--workspace", "--features", "codalab-wm/full"];
    if build_only {
        args.push("--no-run");
    }
    args
}

/// A CI step that runs beside others: `cargo xtask` tasks, one after another, as child
/// processes of this one, their output kept in `target/ci/NAME.log` and printed when the lane is
/// joined (so that two steps' output never interleave in the CI log).
struct Lane {
    name: &'static str,
    log: PathBuf,
    started: Instant,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
    /// The process group of the task running now (0: none), stopped if the lane is dropped
    /// unjoined (a step before it failed).
    running: Arc<AtomicU32>,
}

impl Lane {
    fn start(name: &'static str, tasks: &[&[&str]]) -> Result<Self> {
        let dir = services::target_dir().join("ci");
        std::fs::create_dir_all(&dir)?;
        let slug: String = (name.chars())
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let log = dir.join(format!("{slug}.log"));
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let tasks: Vec<Vec<String>> = tasks
            .iter()
            .map(|task| task.iter().map(|arg| (*arg).to_owned()).collect())
            .collect();
        eprintln!("==> beside the next steps: {name} (log: {})", log.display());
        let running = Arc::new(AtomicU32::new(0));
        let shared = Arc::clone(&running);
        let thread = std::thread::spawn(move || {
            let xtask = std::env::current_exe().context("finding the xtask binary")?;
            for task in &tasks {
                let mut child = Command::new(&xtask)
                    .args(task)
                    .current_dir(repo_root())
                    .stdin(Stdio::null())
                    .stdout(file.try_clone()?)
                    .stderr(file.try_clone()?)
                    .process_group(0)
                    .spawn()
                    .with_context(|| format!("running cargo xtask {}", task.join(" ")))?;
                shared.store(child.id(), Ordering::SeqCst);
                let status = child.wait()?;
                shared.store(0, Ordering::SeqCst);
                if !status.success() {
                    bail!("cargo xtask {} failed ({status})", task.join(" "));
                }
            }
            Ok(())
        });
        Ok(Self {
            name,
            log,
            started: Instant::now(),
            thread: Some(thread),
            running,
        })
    }

    /// Waits for the lane, prints its log and records its time as a step of its own.
    fn join(mut self, timings: &mut Vec<(String, u64)>) -> Result<()> {
        let result = self.thread.take().map_or(Ok(()), |thread| {
            thread
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the lane's thread panicked")))
        });
        let seconds = self.started.elapsed().as_secs();
        timings.push((format!("{} (beside)", self.name), seconds));
        eprintln!(
            "==> {} ({seconds} s, beside the steps above); its log:",
            self.name
        );
        match std::fs::read_to_string(&self.log) {
            Ok(text) => eprint!("{text}"),
            Err(error) => eprintln!("(could not read {}: {error})", self.log.display()),
        }
        result.with_context(|| format!("ci step `{}` failed", self.name))
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let group = self.running.load(Ordering::SeqCst);
        if self.thread.is_some() && group != 0 {
            eprintln!("==> stopping {} (a step it ran beside failed)", self.name);
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{group}")])
                .status();
        }
    }
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

/// `cargo xtask ci each-crate`: the step [`crate_tests_alone`] alone (CI runs it in a lane).
const EACH_CRATE: &str = "each-crate";

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
