//! `bench-harness ours-backends --slurm-stub DIR`: Slurm calls per tick against stub
//! commands, as a function of the number of own jobs.
//!
//! - Slurm: the real `SlurmBackend` with the local transport, running a stub `squeue` from
//!   `DIR` (first on `PATH`, set by the parent) that prints `N` job lines in the backend's
//!   format and logs each call. Calls are read from the backend's own counter (`calls()`) and
//!   cross-checked against the stub's log.
//!
//! (Azure Batch is measured by [`crate::azure`], through a counting proxy, with a peer.)
//!
//! One JSON line per size on stdout.

use crate::listing::{ROUNDS, time_listings};
use crate::stats::summarize;
use anyhow::{Context, Result};
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_slurm::{SlurmBackend, SlurmConfig};
use serde_json::json;
use std::path::{Path, PathBuf};

pub fn run(args: &[String], sizes: &[usize]) -> Result<()> {
    let stub: PathBuf = crate::required(args, "--slurm-stub")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        for &jobs in sizes {
            slurm(&stub, jobs).await?;
        }
        Ok(())
    })
}

/// The worker settings of every backend the bench builds (the server is never contacted).
pub fn worker() -> codalab_wm_core::WorkerOptions {
    codalab_wm_core::WorkerOptions {
        server: "http://127.0.0.1:9".into(),
        ..codalab_wm_core::WorkerOptions::default()
    }
}

/// The CodaLab credentials every backend the bench builds carries.
pub fn credentials() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    }
}

/// The stub `squeue`: answers ours (`--format=%i|%j|%T|%r|%V|%S|%k`) and upstream's three listings
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
        // `%k`, the comment: `(null)` (no origin; listed) as squeue prints an empty one.
        ours.push_str(&format!(
            "{id}|{name}|{state}|None|2026-11-21T20:00:00|N/A|(null)\n"
        ));
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
    let config = SlurmConfig {
        partition: Some("x".into()),
        user: Some("alice".into()),
        ..SlurmConfig::default()
    };
    let row = slurm_row(stub, &config, jobs).await?;
    println!("{row}");
    Ok(())
}

/// Lists `jobs` own jobs [`ROUNDS`] times with our `SlurmBackend` (local transport, the
/// commands first on `PATH` log each call to `dir/calls.log`); the calls per listing from the
/// backend's own counter and from that log.
pub async fn slurm_row(dir: &Path, config: &SlurmConfig, jobs: usize) -> Result<serde_json::Value> {
    let log = dir.join("calls.log");
    let _ = std::fs::remove_file(&log);
    let backend = SlurmBackend::new(config, Some(credentials()))?;
    let (wall, cpu) = time_listings(&backend, jobs).await?;
    let logged = std::fs::read_to_string(&log)
        .with_context(|| format!("reading {}", log.display()))?
        .lines()
        .count();
    Ok(json!({"backend": "slurm", "jobs": jobs, "listed": jobs,
              "calls_per_tick": backend.calls() as f64 / ROUNDS as f64,
              "stub_calls_per_tick": logged as f64 / ROUNDS as f64,
              "list_wall": summarize(&wall).json(), "list_cpu": summarize(&cpu).json()}))
}
