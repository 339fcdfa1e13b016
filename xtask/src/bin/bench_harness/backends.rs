//! `bench-harness ours-backends --slurm-stub DIR`: backend calls per tick against each
//! backend's stand-in, as a function of the number of own jobs.
//!
//! - Slurm: the real `SlurmBackend` with the local transport, running a stub `squeue` from
//!   `DIR` (first on `PATH`, set by the parent) that prints `N` job lines in the backend's
//!   format and logs each call. Calls are read from the backend's own counter (`calls()`) and
//!   cross-checked against the stub's log.
//! - Azure Batch: the real `AzureBatchBackend` against the crate's stateful fake Batch service
//!   (`codalab_wm_azure::fake`, page size 1000 like the service), requests counted by the fake.
//!
//! One JSON line per backend and size on stdout.

use crate::stats::{ms, process_cpu, summarize};
use anyhow::{Context, Result, ensure};
use codalab_wm_azure::fake::FakeBatch;
use codalab_wm_azure::models::TaskState;
use codalab_wm_azure::{AzureBatchBackend, AzureBatchConfig};
use codalab_wm_core::WorkerBackend;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_slurm::{SlurmBackend, SlurmConfig};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Listings per size, for the time per listing.
const ROUNDS: usize = 20;

pub fn run(args: &[String], sizes: &[usize]) -> Result<()> {
    let stub: PathBuf = crate::required(args, "--slurm-stub")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        for &jobs in sizes {
            slurm(&stub, jobs).await?;
        }
        for &jobs in sizes {
            azure(jobs).await?;
        }
        Ok(())
    })
}

fn credentials() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    }
}

/// The stub `squeue`: answers ours (`--format=%i|%j|%T|%r|%V`) and upstream's three listings
/// (`%A,%j`; `%A`; `-t RUNNING %A`) from files in its directory; logs every call.
const SQUEUE_STUB: &str = r#"#!/bin/sh
d=$(dirname "$0")
echo "squeue $*" >> "$d/calls.log"
case "$*" in
  *%A,%j*) f=idname ;;
  *RUNNING*) f=running ;;
  *%A*) f=ids ;;
  *) f=ours ;;
esac
cat "$d/squeue-$f.out"
"#;

/// The stub `scontrol show jobid -d ID --oneliner` (upstream calls it once per known job).
const SCONTROL_STUB: &str = r#"#!/bin/sh
d=$(dirname "$0")
echo "scontrol $*" >> "$d/calls.log"
state=$(grep "^$4|" "$d/squeue-ours.out" | cut -d'|' -f3)
echo "JobId=$4 JobName=x UserId=alice JobState=${state:-PENDING} Reason=None Dependency=(null)"
"#;

/// Writes the stubs `squeue` and `scontrol` into `dir`.
pub fn write_slurm_stub(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    for (name, script) in [("squeue", SQUEUE_STUB), ("scontrol", SCONTROL_STUB)] {
        let path = dir.join(name);
        std::fs::write(&path, script)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Fills the stubs' answers with `jobs` own jobs (even index pending, odd running).
pub fn write_slurm_jobs(dir: &Path, jobs: usize) -> Result<()> {
    let (mut ours, mut idname, mut ids, mut running) =
        (String::new(), String::new(), String::new(), String::new());
    for n in 0..jobs {
        let (id, name) = (1000 + n, format!("alice-codalab-slurm-worker-{n:032x}"));
        let state = if n % 2 == 0 { "PENDING" } else { "RUNNING" };
        ours.push_str(&format!("{id}|{name}|{state}|None|2026-11-21T20:00:00\n"));
        idname.push_str(&format!("{id},{name}\n"));
        ids.push_str(&format!("{id}\n"));
        if n % 2 == 1 {
            running.push_str(&format!("{id}\n"));
        }
    }
    for (file, text) in [
        ("ours", ours),
        ("idname", idname),
        ("ids", ids),
        ("running", running),
    ] {
        std::fs::write(dir.join(format!("squeue-{file}.out")), text)?;
    }
    let _ = std::fs::remove_file(dir.join("calls.log"));
    Ok(())
}

async fn slurm(stub: &Path, jobs: usize) -> Result<()> {
    write_slurm_jobs(stub, jobs)?;
    let log = stub.join("calls.log");
    let config = SlurmConfig {
        partition: Some("x".into()),
        user: Some("alice".into()),
        ..SlurmConfig::default()
    };
    let backend = SlurmBackend::new(&config, Some(credentials()))?;
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (c0, w0) = (process_cpu(), Instant::now());
        let listed = backend.get_worker_jobs().await?;
        cpu.push(ms(process_cpu() - c0));
        wall.push(ms(w0.elapsed()));
        ensure!(
            listed.len() == jobs,
            "slurm listed {} of {jobs}",
            listed.len()
        );
    }
    let logged = std::fs::read_to_string(&log)
        .with_context(|| format!("reading {}", log.display()))?
        .lines()
        .count();
    println!(
        "{}",
        json!({"backend": "slurm", "jobs": jobs,
               "calls_per_tick": backend.calls() as f64 / ROUNDS as f64,
               "stub_calls_per_tick": logged as f64 / ROUNDS as f64,
               "list_wall": summarize(&wall).json(), "list_cpu": summarize(&cpu).json()})
    );
    Ok(())
}

const ACCOUNT: &str = "benchaccount";
/// base64 of 64 bytes, like a real account key.
const KEY: &str =
    "rPjzB9UC4AJ8NyYVjvLq6Um1DBTaIZTV2flP+5/RwL2wlNV4iWOA1rZbVIpVC184qWAusQzEYw9JwBCu68/htw==";
const JOB: &str = "codalab-workers";

async fn azure(jobs: usize) -> Result<()> {
    let fake = FakeBatch::start(ACCOUNT, &Secret::new(KEY), JOB).await?;
    for n in 0..jobs {
        let state = if n % 2 == 0 {
            TaskState::Active
        } else {
            TaskState::Running
        };
        fake.insert(&format!("cl_worker_{n:032x}"), state);
    }
    let mut config = AzureBatchConfig::new(
        ACCOUNT,
        fake.url(),
        JOB,
        Secret::new("https://s.blob.core.windows.net/logs?sig=x"),
    );
    config.account_key = Some(Secret::new(KEY));
    let backend = AzureBatchBackend::new(config, credentials())?;
    backend.get_worker_jobs().await?;
    let before = fake.requests().len();
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (c0, w0) = (process_cpu(), Instant::now());
        let listed = backend.get_worker_jobs().await?;
        cpu.push(ms(process_cpu() - c0));
        wall.push(ms(w0.elapsed()));
        ensure!(
            listed.len() == jobs,
            "azure listed {} of {jobs}",
            listed.len()
        );
    }
    let requests = fake.requests().len() - before;
    println!(
        "{}",
        json!({"backend": "azure", "jobs": jobs,
               "calls_per_tick": requests as f64 / ROUNDS as f64,
               "list_wall": summarize(&wall).json(), "list_cpu": summarize(&cpu).json(),
               "note": "wall and CPU include the in-process fake service"})
    );
    Ok(())
}
