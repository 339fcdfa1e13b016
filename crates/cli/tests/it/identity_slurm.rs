//! Another deployment's jobs under this manager's Slurm identity, on the real Slurm cluster
//! (`cargo xtask services up slurm`: real `slurmctld`/`slurmd`, partition `cpu`) with the
//! in-process fake CodaLab server (`codalab_wm_fake_codalab`). A job named as this manager
//! names its workers (`<user>-<job_name>-<32 hex>`), submitted with plain `sbatch` as a staging
//! manager beside a production one would, is said once to be not this manager's: it counts
//! toward max, and it is left running.
//!
//! Skipped locally when the cluster is not running; under `CI=true` a missing cluster fails.
#![cfg(feature = "slurm")]

use codalab_wm_core::backend::new_unique;
use codalab_wm_core::testing::require_service;
use codalab_wm_fake_codalab::FakeCodaLab;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn slurm_available() -> bool {
    require_service(
        "slurm",
        succeeds("scontrol", &["ping"]) && succeeds("sinfo", &["-h"]),
    )
}

/// Cancels the job on drop, whatever the test did.
struct Cancel(String);

impl Drop for Cancel {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).status();
    }
}

/// The state squeue shows for job `id` (empty once it is gone).
fn squeue_state(id: &str) -> String {
    let out = Command::new("squeue")
        .args(["-h", "--states=all", "-o", "%T", "-j", id])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The Slurm user the manager tracks by default: this process's.
fn user() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn another_deployments_job_is_said_once_counted_and_left_running() {
    let _turn = crate::support::turn(module_path!());
    if !slurm_available() {
        return;
    }
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let job_name = format!("wmident{}", &new_unique()[..8]);
    let name = format!("{}-{job_name}-{}", user(), new_unique());
    let submitted = Command::new("sbatch")
        .args(["--parsable", "--partition=cpu", "--mem=64", "--time=5"])
        .arg(format!("--job-name={name}"))
        .args(["--output=/dev/null", "--wrap", "sleep 300"])
        .output()
        .unwrap();
    assert!(submitted.status.success(), "{submitted:?}");
    let id = String::from_utf8_lossy(&submitted.stdout).trim().to_owned();
    let _cancel = Cancel(id.clone());

    let args: Vec<String> = [
        "--server",
        &server.url(),
        "--once",
        "--min-workers",
        "0",
        "--max-workers",
        "2",
        "--record-dir",
        &dir.path().join("records").display().to_string(),
        "slurm-batch",
        "--partition",
        "cpu",
        "--gpus",
        "0",
        "--memory-mb",
        "64",
        "--job-name",
        &job_name,
        "--slurm-work-dir",
        &dir.path().join("slurm").display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let out: Output = tokio::task::spawn_blocking(move || {
        let mut command = Command::new(BIN);
        command
            .args(&args)
            .env("CODALAB_USERNAME", "alice")
            .env("CODALAB_PASSWORD", "alicepw")
            .env("NO_COLOR", "1")
            .env_remove("CODALAB_WM_LOG");
        for (key, _) in std::env::vars() {
            if key.starts_with("CODALAB_WM_") {
                command.env_remove(key);
            }
        }
        command.output().unwrap()
    })
    .await
    .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let said = format!(
        "job {id} ({name}) is listed under this pool's identity but this manager did not launch it"
    );
    assert_eq!(log.matches(&said).count(), 1, "{log}");
    assert!(
        log.contains("give each its own (Slurm: --job-name"),
        "{log}"
    );
    let state = squeue_state(&id);
    assert!(
        state == "RUNNING" || state == "PENDING",
        "the other deployment's job is {state:?}\n{log}"
    );
}
