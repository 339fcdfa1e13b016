//! The "held Slurm job" scenario (issue 40, review 2026-11-27 §7): one of the manager's running
//! worker jobs is put back in the queue, held (`scontrol requeuehold`, as a node failure's
//! `launch failed requeued held` or an admin's hold leaves it). A held job is the manager's own
//! and still counts toward `--max-workers`: the manager keeps ticking, launches nothing beyond
//! `max`, stops nothing, and the job runs again once released.

use super::harness::{self, MAX_WORKERS, hold_jobs, is_tick, wait_for_jobs};
use super::scenarios::{Findings, Setup};
use anyhow::{Context, Result, bail, ensure};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

const RECOVER: Duration = Duration::from_secs(40);

/// How long the job stays held.
const HELD: Duration = Duration::from_secs(15);

fn scontrol(args: &[&str]) -> Result<()> {
    let status = Command::new("scontrol")
        .args(args)
        .status()
        .with_context(|| format!("running scontrol {}", args.join(" ")))?;
    ensure!(status.success(), "scontrol {} failed", args.join(" "));
    Ok(())
}

/// The state and reason Slurm gives job `id` (`PENDING|JobHeldAdmin`).
fn state_and_reason(id: &str) -> Option<String> {
    let output = Command::new("squeue")
        .args(["--noheader", "--jobs", id, "--format=%T|%r"])
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// One of the scenario's jobs that Slurm runs (a pending one cannot be requeued), bounded wait.
fn running_job(job_name: &str) -> Result<String> {
    let start = Instant::now();
    while start.elapsed() < RECOVER {
        let jobs = harness::slurm_jobs(job_name).context("squeue failed")?;
        if let Some((id, _)) = jobs
            .iter()
            .find(|(id, _)| state_and_reason(id).is_some_and(|s| s.starts_with("RUNNING")))
        {
            return Ok(id.clone());
        }
        thread::sleep(Duration::from_millis(200));
    }
    bail!(
        "no job of `{job_name}` running within {} s",
        RECOVER.as_secs()
    )
}

pub fn held_job(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    let mut manager = setup.spec.spawn("held-job")?;
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    let id = running_job(&setup.spec.job_name)?;
    // The manager submits with --no-requeue; an admin may requeue it all the same.
    scontrol(&["update", &format!("JobId={id}"), "Requeue=1"])?;
    scontrol(&["requeuehold", &id])?;
    findings.faults += 1;
    let start = Instant::now();
    let state = loop {
        let state = state_and_reason(&id).unwrap_or_default();
        if state.starts_with("PENDING") {
            break state;
        }
        if start.elapsed() > Duration::from_secs(20) {
            bail!("job {id} not pending 20 s after requeuehold (now `{state}`)");
        }
        thread::sleep(Duration::from_millis(200));
    };
    let cursor = manager.cursor();
    hold_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, HELD)?;
    let ticks = manager
        .events_since(cursor)
        .iter()
        .filter(|e| is_tick(e))
        .count();
    ensure!(ticks >= 3, "only {ticks} ticks while job {id} was held");
    ensure!(
        harness::slurm_jobs(&setup.spec.job_name)
            .is_some_and(|jobs| jobs.iter().any(|(j, _)| *j == id)),
        "the held job {id} is gone: the manager must not stop a job for being held"
    );
    scontrol(&["release", &id])?;
    findings.notes.push(format!(
        "job {id} `{state}` for {} s: {ticks} ticks, {MAX_WORKERS} jobs throughout, none stopped",
        HELD.as_secs()
    ));
    manager.stop()?;
    Ok(findings)
}
