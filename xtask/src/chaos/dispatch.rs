//! The "bundle manager dispatches nothing" scenario (issue 40, review 2026-11-27 §4). One bundle
//! is staged, then CodaLab's bundle manager is paused (SIGSTOP), so the server starts nothing.
//! The manager runs in target mode with the REAL `cl-worker` 1.7.5 as its Slurm jobs' worker
//! (Docker from `services up docker`), so its workers really check in, idle. The bundle goes
//! overdue on the first idle worker; the manager may buy it one more worker, never more: before
//! the fix the pool climbed to `max` idle workers for that one bundle. Then the bundle manager is
//! resumed (always, whatever happened) and the bundle goes to a worker.

use super::harness;
use super::scenarios::{Findings, Setup};
use crate::services::repo_root;
use anyhow::{Context, Result, bail, ensure};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// The pool's `max`: room for the loop to show.
const MAX: usize = 4;
/// Workers the one overdue bundle may have: the first, and one launched for it once overdue.
const ALLOWED: usize = 2;
/// The scenario's own CodaLab user (it runs beside scenarios that revoke [`harness::USER`]'s tokens).
const USER: (&str, &str) = ("frank", "frankpw");
/// How long the scenario watches: the review's probe reached `max` within 110 s of the first
/// launch; past the 60 s grace, with the workers' start on a loaded machine.
const WATCH: Duration = Duration::from_secs(180);

/// The bundle manager paused while this lives.
struct Paused(u32);

impl Paused {
    fn new() -> Result<Self> {
        let pid = bundle_manager()?;
        signal("STOP", pid)?;
        Ok(Self(pid))
    }
}

fn bundle_manager() -> Result<u32> {
    let file = repo_root().join(".services/codalab/run/bundle-manager.pid");
    std::fs::read_to_string(&file)
        .with_context(|| format!("reading {}", file.display()))?
        .trim()
        .parse()
        .with_context(|| format!("a pid in {}", file.display()))
}

/// Resumes a bundle manager left paused by a run of this scenario that was killed before it
/// could resume it itself (its `Drop` does not run on a signal).
pub fn resume_left_paused() -> Result<()> {
    let pid = bundle_manager()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    if status
        .lines()
        .any(|l| l.starts_with("State:") && l.contains("(stopped)"))
    {
        eprintln!("chaos: the bundle manager (pid {pid}) was left paused; resuming it");
        signal("CONT", pid)?;
    }
    Ok(())
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Err(error) = signal("CONT", self.0) {
            eprintln!("chaos: could not resume the bundle manager: {error:#}");
        }
    }
}

fn signal(name: &str, pid: u32) -> Result<()> {
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill -{name} {pid} failed");
    Ok(())
}

/// Workers that checked in with the server, by the manager's own count (its last pool line).
fn checked_in(manager: &harness::ManagerProcess, cursor: u64) -> u64 {
    manager
        .events_since(cursor)
        .iter()
        .rev()
        .find(|e| e.number("ready_idle").is_some())
        .map_or(0, |e| {
            e.number("ready_idle").unwrap_or(0) + e.number("busy").unwrap_or(0)
        })
}

pub fn dispatch_stopped(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    let tag = format!("{}-undispatched", setup.spec.job_name);
    let uuids = harness::stage_bundles_as(USER.0, 1, &tag)?;
    let paused = Paused::new();
    let result = match paused {
        Ok(_) => {
            findings.faults += 1;
            watch_pool(setup, &tag, &mut findings)
        }
        Err(_) => Ok(()),
    };
    // Removed while the bundle manager is paused: it cannot hand the bundle to a worker the
    // server still lists after its job was cancelled.
    harness::remove_bundles_as(USER.0, &uuids);
    drop(paused?);
    result.map(|()| findings)
}

fn watch_pool(setup: &Setup, tag: &str, findings: &mut Findings) -> Result<()> {
    let root = repo_root();
    let mut command = harness::manager_command(&setup.spec.dir, &setup.spec.server);
    command
        .args(["--min-workers", "0", "--max-workers", &MAX.to_string()])
        .args(["--launch-mode", "target", "--sleep-time", "1"])
        .args([
            "--min-seconds-between-workers",
            "0",
            "--worker-idle-seconds",
            "600",
        ])
        .args(["--search", &format!("tags={tag}")])
        .arg("--worker-executable")
        .arg(root.join(".services/codalab/venv/bin/cl-worker"))
        .args([
            "slurm-batch",
            "--partition",
            "cpu",
            "--cpus",
            "1",
            "--gpus",
            "0",
        ])
        .args(["--memory-mb", "1024", "--job-name", &setup.spec.job_name])
        .arg("--slurm-work-dir")
        .arg(setup.spec.dir.join("slurm-dispatch"))
        .env(
            "DOCKER_HOST",
            format!(
                "unix://{}",
                root.join(".services/docker/docker.sock").display()
            ),
        )
        .env("CODALAB_USERNAME", USER.0)
        .env("CODALAB_PASSWORD", USER.1);
    let mut manager = harness::start(command, &setup.spec.dir, "dispatch-stopped")?;
    let start = Instant::now();
    let mut most = 0;
    while start.elapsed() < WATCH {
        ensure!(manager.alive()?, "manager gone");
        let jobs = harness::slurm_jobs(&setup.spec.job_name).map_or(0, |j| j.len());
        most = most.max(jobs);
        if jobs > ALLOWED {
            bail!(
                "{jobs} worker jobs for one bundle the server does not start ({} checked in); \
                 at most {ALLOWED} allowed; log tail:\n{}",
                checked_in(&manager, 0),
                harness::tail(&manager.log)
            );
        }
        thread::sleep(Duration::from_millis(500));
    }
    let seen = checked_in(&manager, 0);
    ensure!(
        seen >= 1,
        "no worker checked in within {} s: the scenario proved nothing; log tail:\n{}",
        WATCH.as_secs(),
        harness::tail(&manager.log)
    );
    manager.stop()?;
    harness::cancel_jobs(&setup.spec.job_name)?;
    findings.notes.push(format!(
        "bundle manager paused {} s: at most {most} worker jobs for the one bundle ({seen} checked in at the end; max {MAX})",
        WATCH.as_secs()
    ));
    Ok(())
}
