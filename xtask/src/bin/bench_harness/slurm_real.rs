//! Slurm calls per tick against the real cluster of `cargo xtask services up slurm`
//! (slurmctld/slurmd 22.05 from Debian on this machine), ours and upstream's, with `N` own jobs
//! held in the queue.
//!
//! The parent submits `N` held jobs (`sbatch --hold`, named as both managers name their
//! workers: `<user>-<job name>-<32 hex>`) with the real `sbatch`, then runs each side with a
//! shim directory first on `PATH`: `squeue`, `scontrol`, `sbatch` and `scancel` there log the
//! call to `calls.log` and `exec` the real command. So both sides are counted the same way, by
//! the subprocesses they actually start; ours is cross-checked with the backend's own counter.
//! The jobs are cancelled at the end (one `scancel`).
//!
//! `bench-harness ours-slurm-real --shim DIR --user U --job-name J --jobs N`: one row, ours.

use crate::backends::slurm_row;
use crate::listing::peer_row;
use crate::required;
use crate::run::{json_lines, peer_command};
use crate::serve::ServeChild;
use anyhow::{Context, Result, bail, ensure};
use codalab_wm_core::backend::new_unique;
use codalab_wm_slurm::SlurmConfig;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The partition both sides use (the default one of the test cluster).
const PARTITION: &str = "cpu";

/// The commands the shim wraps.
const COMMANDS: [&str; 4] = ["squeue", "scontrol", "sbatch", "scancel"];

type Rows = (Vec<Value>, Vec<Value>);

pub fn run(args: &[String]) -> Result<()> {
    let shim: PathBuf = required(args, "--shim")?;
    let jobs: usize = required(args, "--jobs")?;
    let config = SlurmConfig {
        partition: Some(PARTITION.into()),
        user: Some(required(args, "--user")?),
        job_name: required(args, "--job-name")?,
        ..SlurmConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut row = runtime.block_on(slurm_row(&shim, &config, jobs))?;
    row["backend"] = json!("slurm-real");
    println!("{row}");
    Ok(())
}

fn sizes(quick: bool) -> &'static [usize] {
    if quick { &[1, 10] } else { &[1, 10, 100, 1000] }
}

pub fn output(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    ensure!(
        out.status.success(),
        "{program} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Whether slurmctld answers `scontrol ping`.
pub fn slurm_up() -> bool {
    output("scontrol", &["ping"]).is_ok_and(|o| o.contains("is UP"))
}

/// Writes the logging shims into `dir`, each `exec`ing the real command found on `PATH` now.
fn write_shims(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    for name in COMMANDS {
        let real = output("sh", &["-c", &format!("command -v {name}")])?;
        ensure!(real.starts_with('/'), "{name} is not on PATH ({real:?})");
        let script = format!(
            "#!/bin/sh\necho \"{name} $*\" >> \"$(dirname \"$0\")/calls.log\"\nexec {real} \"$@\"\n"
        );
        let path = dir.join(name);
        std::fs::write(&path, script)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Ours and upstream's rows against the real cluster, or none when slurmctld is not running
/// and the run may go without it (quick mode outside CI).
pub fn measure_all(quick: bool, python: Option<&Path>, work: &Path) -> Result<Rows> {
    if !slurm_up() {
        let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
        if quick && !in_ci {
            eprintln!("bench: real-Slurm rows skipped (`cargo xtask services up slurm`)");
            return Ok((Vec::new(), Vec::new()));
        }
        bail!(
            "slurmctld is not answering `scontrol ping`: start it with `cargo xtask services up slurm`"
        );
    }
    eprintln!("bench: Slurm calls per tick against the real cluster");
    let shim = work.join("slurm-shim");
    write_shims(&shim)?;
    let user = output("id", &["-un"])?;
    let job_name = format!("wmbench-{}", &new_unique()[..12]);
    let mut submitted = Vec::new();
    let rows = measure_sizes(quick, python, &shim, &user, &job_name, &mut submitted);
    let cancelled = if submitted.is_empty() {
        Ok(String::new())
    } else {
        let ids: Vec<&str> = submitted.iter().map(String::as_str).collect();
        output("scancel", &ids)
    };
    let rows = rows?;
    cancelled.context("cancelling the bench's held jobs")?;
    Ok(rows)
}

fn measure_sizes(
    quick: bool,
    python: Option<&Path>,
    shim: &Path,
    user: &str,
    job_name: &str,
    submitted: &mut Vec<String>,
) -> Result<Rows> {
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Upstream's manager logs in to CodaLab when it is built.
    let server = ServeChild::start(1)?;
    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    for &jobs in sizes(quick) {
        while submitted.len() < jobs {
            let name = format!("--job-name={user}-{job_name}-{}", new_unique());
            let partition = format!("--partition={PARTITION}");
            let id = output(
                "sbatch",
                &[
                    "--parsable",
                    "--hold",
                    &partition,
                    &name,
                    "--output=/dev/null",
                ]
                .into_iter()
                .chain(["--wrap=sleep 600"])
                .collect::<Vec<_>>(),
            )?;
            submitted.push(id);
        }
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args(["ours-slurm-real", "--shim"])
            .arg(shim)
            .args([
                "--user",
                user,
                "--job-name",
                job_name,
                "--jobs",
                &jobs.to_string(),
            ])
            .env("PATH", &path);
        ours.extend(json_lines(command, "ours-slurm-real.log")?);
        let Some(python) = python else { continue };
        let mut command = peer_command(python, &server.url, 1, jobs)?;
        command
            .args(["--mode", "slurm-calls", "--rounds", "3", "--stub"])
            .arg(shim)
            .args([
                "--slurm-user",
                user,
                "--job-name",
                job_name,
                "--partition",
                PARTITION,
            ])
            .env("PATH", &path);
        peer.push(peer_row(
            "slurm-real",
            jobs,
            command,
            "peer-slurm-real.log",
        )?);
    }
    Ok((ours, peer))
}
