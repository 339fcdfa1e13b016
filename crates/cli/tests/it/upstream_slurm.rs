//! The drop-in check for `slurm-batch`: command lines as upstream documents them give the job
//! script upstream's own code writes for them: the same `#SBATCH` options, the same `srun`
//! worker command, the credentials check exactly when there is no password file. The expected
//! facts (those lines, not the scripts) are captures of the real Python peer (codalab-worksheets v1.7.5, its `main()` and
//! `SlurmBatchWorkerManager`, unmodified) made by `tests/data/upstream-slurm/make_captures.py`.
//!
//! Ours is the real binary's `--dry-run --once` script (the block it prints on stdout),
//! against the in-process fake CodaLab server (`codalab_wm_fake_codalab`) and a stand-in
//! `squeue` that lists no job (nothing is submitted). The captured `--server` is the URL the
//! workers are given, so it is passed as `--worker-server` and the manager talks to the fake.
#![cfg(feature = "slurm")]

use codalab_wm_fake_codalab::FakeCodaLab;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");
const CAPTURES: &str = include_str!("../data/upstream-slurm/captures.json");

/// A directory with a `squeue` that lists nothing and the password file `pw` (alice's, as
/// the fake server knows her), the working directory of the run.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let squeue = dir.path().join("squeue");
    std::fs::write(&squeue, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&squeue, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "alice\nalicepw\n").unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    dir
}

/// Our dry-run job script for upstream's `argv` (whose first two words are `--server URL`),
/// its launch unique replaced by `unique`.
fn our_script(server: &str, dir: &Path, argv: &[String], unique: &str) -> String {
    assert_eq!(argv[0], "--server");
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
    let mut command = Command::new(BIN);
    command
        .args(["--server", server, "--worker-server", &argv[1]])
        .args(["--once", "--dry-run", "--min-workers", "1"])
        .args(&argv[2..])
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "alicepw")
        .env_remove("CODALAB_WM_LOG");
    let out = command.output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{argv:?}\n{log}");
    assert!(
        log.contains("dry run: would submit a batch script"),
        "{log}"
    );
    assert!(
        !log.contains("#SBATCH"),
        "the script is a block on stdout:\n{log}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let script = script_block(&stdout)
        .unwrap_or_else(|| panic!("no script block on stdout:\n{stdout}\n{log}"));
    let ours = script
        .lines()
        .find_map(|l| l.strip_prefix("#SBATCH --job-name="))
        .expect("a job name");
    let ours = &ours[ours.len() - unique.len()..];
    script.replace(ours, unique)
}

/// The script of the dry run's block on stdout (`--- dry run: the batch script of … ---`, the
/// script's lines, `--- end ---`).
fn script_block(stdout: &str) -> Option<String> {
    let (_, rest) = stdout.split_once("--- dry run: the batch script of ")?;
    let (_, rest) = rest.split_once(" ---\n")?;
    let (script, _) = rest.split_once("--- end ---\n")?;
    Some(script.to_owned())
}

/// The `#SBATCH` lines but ours' `--export` (upstream has none: sbatch then exports the
/// manager's whole environment to the job; review 2026-11-27 §3).
fn sbatch_lines(script: &str) -> Vec<&str> {
    script
        .lines()
        .filter(|l| l.starts_with("#SBATCH") && !l.starts_with("#SBATCH --export="))
        .collect()
}

/// The `srun` line; ours `exec`s it (the book's Slurm page: so that `scancel` reaches the worker).
fn srun_line(script: &str) -> &str {
    let line = script.lines().rfind(|l| l.contains("srun")).unwrap_or("");
    line.strip_prefix("exec ").unwrap_or(line)
}

fn same_script(name: &str, ours: &str, theirs: &Value) {
    let strings = |v: &Value| -> Vec<String> { serde_json::from_value(v.clone()).unwrap() };
    assert_eq!(
        sbatch_lines(ours),
        strings(&theirs["sbatch"]),
        "{name}:\n{ours}"
    );
    let srun = theirs["srun"].as_str().unwrap();
    assert_eq!(srun_line(ours), srun_line(srun), "{name}:\n{ours}");
    assert_eq!(
        ours.contains("CODALAB_PASSWORD"),
        theirs["checks_credentials"].as_bool().unwrap(),
        "{name}: the credentials check is there exactly without a password file:\n{ours}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_command_lines_give_upstreams_job_script() {
    let server = FakeCodaLab::start().await.unwrap();
    let captures: Value = serde_json::from_str(CAPTURES).unwrap();
    let unique = captures["unique"].as_str().unwrap().to_owned();
    let sets = captures["captures"].as_array().unwrap().clone();
    assert_eq!(sets.len(), 3);
    let url = server.url();
    tokio::task::spawn_blocking(move || {
        for set in &sets {
            let name = set["name"].as_str().unwrap();
            let argv: Vec<String> = serde_json::from_value(set["argv"].clone()).unwrap();
            let theirs = set;
            let dir = workspace();
            same_script(name, &our_script(&url, dir.path(), &argv, &unique), theirs);
            if name == "password-file" {
                // Before the backend name (our global flag) it is the same file.
                let at = argv.iter().position(|a| a == "--password-file").unwrap();
                let mut before = argv.clone();
                let flag: Vec<String> = before.drain(at..at + 2).collect();
                before.splice(2..2, flag);
                let ours = our_script(&url, dir.path(), &before, &unique);
                same_script("password-file before the backend", &ours, theirs);
            }
        }
    })
    .await
    .unwrap();
}
