//! `--listen` during a real run: the real `cl-worker-manager` binary against a REAL CodaLab
//! 1.7.5 server (`cargo xtask services up codalab`; bundles staged by real `cl run`) and a REAL
//! Slurm cluster (slurmctld/slurmd from Debian's packages; `cargo xtask services up slurm`).
//! `/metrics` is scraped while the manager runs and its launch counter and job gauges are
//! checked against what `squeue` shows.
//!
//! Workers are a stand-in script that waits (the real `cl-worker` needs docker). The test
//! stages its own bundles with a unique tag and searches only that tag, and gives its jobs a
//! unique name, so runs never see each other's bundles or jobs. Locally a missing service
//! skips the test; under `CI=true` it fails.

use crate::support;
use support::manager::Manager;
use support::{SERVER, codalab_running, slurm_running, stage, unique};

use codalab_wm_core::testing::require_service;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A worker stand-in that waits (bounded), so that its Slurm job stays RUNNING.
fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("cl-worker-stand-in.sh");
    std::fs::write(&path, "#!/bin/sh\nexec sleep 600\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `(job id, state)` of the jobs whose name starts with `prefix`.
fn squeue(prefix: &str) -> Vec<(String, String)> {
    let output = Command::new("squeue")
        .args(["-h", "-o", "%i|%j|%T"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split('|');
            let (id, name, state) = (parts.next()?, parts.next()?, parts.next()?);
            name.starts_with(prefix)
                .then(|| (id.to_owned(), state.to_owned()))
        })
        .collect()
}

/// Cancels the test's jobs, whatever happens.
struct Cancel(String);

impl Drop for Cancel {
    fn drop(&mut self) {
        for (id, _) in squeue(&self.0) {
            let _ = Command::new("scancel").arg(id).status();
        }
    }
}

/// The value of the sample `name` (labels included, as printed) in a scrape.
fn sample(scrape: &str, name: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_match_squeue_during_a_real_slurm_run() {
    let _turn = support::turn(module_path!());
    if !require_service("codalab", codalab_running()) || !require_service("slurm", slurm_running())
    {
        return;
    }
    let tag = unique("metrics-slurm-");
    let job_name = unique("metrics");
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    let prefix = format!("{user}-{job_name}-");
    let _cancel = Cancel(prefix.clone());
    stage(
        3,
        &[
            "--request-cpus",
            "1",
            "--request-memory",
            "256m",
            &format!("--tags={tag}"),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let scratch = dir.path().join("scratch");
    let args: Vec<String> = [
        "--server",
        SERVER,
        "--listen",
        "127.0.0.1:0",
        "--search",
        &format!("tags={tag}"),
        "--min-workers",
        "0",
        "--max-workers",
        "2",
        "--min-seconds-between-workers",
        "0",
        "--sleep-time",
        "1",
        "--worker-executable",
        worker.to_str().unwrap(),
        "slurm-batch",
        "--partition",
        "cpu",
        "--gpus",
        "0",
        "--cpus",
        "1",
        "--memory-mb",
        "256",
        "--time",
        "10",
        "--job-name",
        &job_name,
        "--user",
        &user,
        "--slurm-work-dir",
        scratch.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut manager = Manager::start(&args, ("alice", "alicepw"), &[]);
    let pool = "slurm-batch";
    let started = format!(r#"codalab_wm_launches_total{{pool="{pool}",result="started"}}"#);
    let active = format!(r#"codalab_wm_worker_jobs{{pool="{pool}",state="active"}}"#);
    let pending = format!(r#"codalab_wm_worker_jobs{{pool="{pool}",state="pending"}}"#);
    let mut last = String::new();
    let mut max_jobs = 0;
    // Bounded (180 s): until the scrape and squeue agree on two RUNNING jobs.
    for _ in 0..1800 {
        assert!(!manager.exited(), "manager exited:\n{}", manager.log());
        let jobs = squeue(&prefix);
        max_jobs = max_jobs.max(jobs.len());
        if let Some(base) = manager.listen_address()
            && let Ok(reply) = reqwest::get(format!("{base}/metrics")).await
        {
            last = reply.text().await.unwrap_or_default();
            let running = jobs.iter().filter(|(_, s)| s == "RUNNING").count() as f64;
            let queued = jobs.iter().filter(|(_, s)| s == "PENDING").count() as f64;
            let agree = sample(&last, &active) == Some(running)
                && sample(&last, &pending) == Some(queued)
                && sample(&last, &started) == Some(jobs.len() as f64);
            if agree && running == 2.0 && jobs.len() == 2 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let jobs = squeue(&prefix);
    let log = manager.log();
    assert_eq!(jobs.len(), 2, "{jobs:?}\n{last}\n{log}");
    assert!(jobs.iter().all(|(_, s)| s == "RUNNING"), "{jobs:?}\n{last}");
    assert_eq!(max_jobs, 2, "never more than --max-workers jobs:\n{log}");
    assert_eq!(sample(&last, &active), Some(2.0), "{last}\n{log}");
    assert_eq!(sample(&last, &pending), Some(0.0), "{last}");
    assert_eq!(
        sample(&last, &started),
        Some(2.0),
        "one launch per job squeue shows: {last}"
    );
    assert_eq!(
        sample(&last, "codalab_wm_staged_bundles"),
        Some(3.0),
        "{last}"
    );
    for op in ["get_worker_jobs", "start_worker_job"] {
        let count = format!(
            r#"codalab_wm_backend_request_duration_seconds_count{{pool="{pool}",op="{op}"}}"#
        );
        assert!(
            sample(&last, &count).is_some_and(|n| n >= 2.0),
            "squeue and sbatch are timed: {last}"
        );
    }
}
