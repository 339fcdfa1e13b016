//! What the sections on the real services share (`staged_ready.rs`, `packing_real.rs`): the
//! services' checks, staging bundles with `stage.sh`, both managers' executables and their
//! environment, stopping a manager, and the run's Slurm jobs (listed and cancelled by job name).

use crate::run::{peer_python, repo_root};
use crate::slurm_real::{output, slurm_up};
use anyhow::{Context, Result, ensure};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `.services`, resolved (a worktree's is a symlink; the docker scripts compare the real path
/// with dockerd's command line).
pub fn services_dir() -> PathBuf {
    let dir = repo_root().join(".services");
    std::fs::canonicalize(&dir).unwrap_or(dir)
}

/// `DOCKER_HOST` of the bench's dockerd (`services up docker`).
pub fn docker_host() -> String {
    format!(
        "unix://{}",
        services_dir().join("docker/docker.sock").display()
    )
}

/// The real `cl-worker` 1.7.5 of the codalab venv.
pub fn cl_worker() -> PathBuf {
    services_dir().join("codalab/venv/bin/cl-worker")
}

/// The first service that is not running, as a sentence, or `None`.
pub fn missing_service() -> Option<String> {
    missing_service_of(&["codalab", "docker"])
        .or_else(|| (!slurm_up()).then(|| "slurm: `cargo xtask services up slurm`".to_owned()))
}

/// The first of `services` (`xtask/services/<name>/status.sh`) that is not running, as a
/// sentence, or `None`.
pub fn missing_service_of(services: &[&str]) -> Option<String> {
    let script = |s: &str| repo_root().join(format!("xtask/services/{s}/status.sh"));
    let ok = |name: &str| {
        Command::new("bash")
            .arg(script(name))
            .env("SERVICES_DIR", services_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    (services.iter())
        .find(|name| !ok(name))
        .map(|name| format!("{name}: `cargo xtask services up {name}`"))
}

/// Stages `n` bundles as `user` with `stage.sh`: `cpus` CPUs and 256m each, tagged and queued
/// `tag` (the run's), running `command` (`{i}` is the bundle's index); returns their uuids
/// once all are staged.
pub fn stage(user: &str, n: usize, cpus: &str, tag: &str, command: &str) -> Result<Vec<String>> {
    let out = Command::new("bash")
        .arg(repo_root().join("xtask/services/codalab/stage.sh"))
        .args([user, &n.to_string()])
        .args(["--request-cpus", cpus, "--request-memory", "256m"])
        .args(["--tags", tag, "--request-queue", tag])
        .env("STAGE_COMMAND", command)
        .env("STAGE_TIMEOUT", "300")
        .current_dir(repo_root())
        .output()
        .context("running stage.sh")?;
    ensure!(
        out.status.success(),
        "stage.sh failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let uuids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    ensure!(uuids.len() == n, "stage.sh printed {} uuids", uuids.len());
    Ok(uuids)
}

/// Sets `user`'s `parallel_run_quota` as the root user, with the venv's `cl uedit`.
pub fn set_quota(user: &str, quota: u32) -> Result<()> {
    let cl = repo_root().join("xtask/services/codalab/cl.sh");
    let cl = cl.to_string_lossy();
    let quota = quota.to_string();
    output(
        "bash",
        &[
            &cl,
            "codalab",
            "uedit",
            user,
            "--parallel-run-quota",
            &quota,
        ],
    )?;
    Ok(())
}

/// Our manager, built next to this harness (`cargo xtask bench` builds it).
pub fn ours_exe() -> Result<PathBuf> {
    let exe = std::env::current_exe()?.with_file_name("cl-worker-manager");
    ensure!(
        exe.exists(),
        "{} is missing: build it with `cargo build --release -p codalab-wm`",
        exe.display()
    );
    Ok(exe)
}

/// Upstream's `cl-worker-manager` 1.7.5, from the codalab venv.
pub fn peer_exe() -> Result<PathBuf> {
    let python = peer_python()
        .context("the codalab venv is missing: start it with `cargo xtask services up codalab`")?;
    Ok(python.with_file_name("cl-worker-manager"))
}

/// Starts `exe args` as `user` in `dir` (its output in `dir/manager.log`, its command line
/// in `dir/command.txt`), with the bench's `DOCKER_HOST` (sbatch hands it to the workers).
pub fn start_manager(
    exe: &std::path::Path,
    args: &[String],
    user: (&str, &str),
    dir: &std::path::Path,
) -> Result<Child> {
    std::fs::write(
        dir.join("command.txt"),
        format!("{} {}\n", exe.display(), args.join(" ")),
    )?;
    let log = std::fs::File::create(dir.join("manager.log"))?;
    Command::new(exe)
        .args(args)
        .env("CODALAB_USERNAME", user.0)
        .env("CODALAB_PASSWORD", user.1)
        .env("CODALAB_HOME", dir.join("codalab-home"))
        .env("DOCKER_HOST", docker_host())
        .env("NO_COLOR", "1")
        .current_dir(dir)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))
}

/// A blocking reader of a manager's `/status` on a loopback port (`--listen`).
pub struct StatusReader {
    runtime: tokio::runtime::Runtime,
    http: reqwest::Client,
    url: String,
}

impl StatusReader {
    /// The reader of the manager listening on `127.0.0.1:port`.
    pub fn new(port: u16) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        let url = format!("http://127.0.0.1:{port}/status");
        Ok(Self { runtime, http, url })
    }

    /// The status document, or the error of the request (the manager not listening yet).
    pub fn read(&self) -> Result<serde_json::Value, reqwest::Error> {
        let request = async { self.http.get(&self.url).send().await?.json().await };
        self.runtime.block_on(request)
    }
}

/// Seconds since `t0`, in tenths.
pub fn secs(t0: Instant) -> f64 {
    (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0
}

/// SIGTERM, then SIGKILL after 20 s.
pub fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// (id, state) of the queued or running jobs whose name carries the run's job name (both
/// managers name their jobs `<user>-<job name>-<unique>`).
pub fn run_job_states(tag: &str) -> Result<Vec<(String, String)>> {
    let listing = output("squeue", &["--noheader", "--format=%i %T %j"])?;
    let needle = format!("-{tag}-");
    Ok(listing
        .lines()
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let (id, state, name) = (fields.next()?, fields.next()?, fields.next()?);
            name.contains(&needle)
                .then(|| (id.to_owned(), state.to_owned()))
        })
        .collect())
}

/// Ids of the run's queued or running jobs.
pub fn run_jobs(tag: &str) -> Result<Vec<String>> {
    Ok(run_job_states(tag)?.into_iter().map(|(id, _)| id).collect())
}

pub fn cancel_jobs(tag: &str) -> Result<()> {
    let ids = run_jobs(tag)?;
    if !ids.is_empty() {
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        output("scancel", &ids)?;
    }
    Ok(())
}
