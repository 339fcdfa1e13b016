//! End to end: the real `cl-worker-manager` binary against a REAL CodaLab 1.7.5 server
//! (REST server, bundle manager, MariaDB; `cargo xtask services up codalab`) with bundles
//! staged by real `cl run`, on the `local` backend and on a REAL Slurm cluster
//! (slurmctld/slurmd from Debian's packages; `cargo xtask services up slurm`).
//!
//! Workers are a stand-in script (`cl-worker-stand-in.sh`) that records the argv and the
//! credentials it was given, then waits; the real `cl-worker` needs docker, which this machine
//! does not have. Each test stages its own bundles with a unique tag and searches only that
//! tag, so runs never see each other's bundles. Locally a missing service skips the test;
//! under `CI=true` it fails.

use crate::support;
use support::manager::{BIN, Manager, command};
use support::{SERVER, codalab_running, slurm_running, stage, unique};

use codalab_wm_core::testing::require_service;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The line the manager logs at every tick.
const STATUS_LINE: &str = " worker jobs (min=";
/// How long a wait for the manager may take (bounded polls, not a sleep).
const WITHIN: Duration = Duration::from_secs(180);

/// A worker stand-in that records its argv and credentials in `dir`, then waits (bounded).
fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("cl-worker-stand-in.sh");
    let script = format!(
        "#!/bin/sh\n\
         id=$(echo \"$*\" | sed 's/.*--id host-\\([^ ]*\\).*/\\1/')\n\
         printf '%s\\n' \"$*\" > '{dir}/argv-'$id.tmp && mv '{dir}/argv-'$id.tmp '{dir}/argv-'$id\n\
         printf '%s:%s\\n' \"$CODALAB_USERNAME\" \"$CODALAB_PASSWORD\" > '{dir}/env-'$id\n\
         exec sleep 600\n",
        dir = dir.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn recorded(dir: &Path, prefix: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id = name.strip_prefix(prefix)?.to_owned();
            (!id.ends_with(".tmp"))
                .then(|| (id, std::fs::read_to_string(e.path()).unwrap_or_default()))
        })
        .collect();
    files.sort();
    files
}

/// Stops the stand-in workers recorded in a local state dir.
fn stop_local_workers(state: &Path) {
    for entry in std::fs::read_dir(state).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        if let Some(pid) = text
            .split("\"pid\":")
            .nth(1)
            .and_then(|r| r.trim().split(',').next())
        {
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", pid.trim())])
                .status();
        }
    }
}

#[test]
fn local_backend_against_a_real_codalab_server() {
    let _turn = support::turn(module_path!());
    if !require_service("codalab", codalab_running()) {
        return;
    }
    let tag = unique("e2e-local-");
    let tags_flag = format!("--tags={tag}");
    // The bundle no worker fits is staged first (oldest): the manager reads the queue oldest
    // first and only as far as its pools can take bundles, so a misfit behind the first page
    // is counted, not read.
    let too_large = stage(
        1,
        &[
            "--request-cpus",
            "64",
            "--request-memory",
            "512g",
            &tags_flag,
        ],
    )
    .remove(0);
    let fitting = stage(
        12,
        &[
            "--request-cpus",
            "1",
            "--request-memory",
            "512m",
            &tags_flag,
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let state = dir.path().join("state");
    let args: Vec<String> = [
        "--server",
        SERVER,
        "--search",
        &format!("tags={tag}"),
        "--min-workers",
        "0",
        "--max-workers",
        "3",
        "--min-seconds-between-workers",
        "0",
        "--sleep-time",
        "1",
        "--worker-idle-seconds",
        "77",
        "--worker-executable",
        worker.to_str().unwrap(),
        "local",
        "--cpus",
        "2",
        "--memory-mb",
        "4096",
        "--state-dir",
        state.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    let mut first = Manager::start(&args, ("alice", "alicepw"), &[]);
    first.wait_until("three workers", WITHIN, |_| {
        recorded(dir.path(), "argv-").len() == 3
    });
    let ticks = first.count(STATUS_LINE);
    first.wait_until("three more ticks", WITHIN, |m| {
        m.count(STATUS_LINE) >= ticks + 3
    });
    let log = first.log();
    assert_eq!(
        recorded(dir.path(), "argv-").len(),
        3,
        "never more than --max-workers:\n{log}"
    );
    assert!(
        log.contains("13 staged bundles"),
        "counts all 13 staged bundles, the one no worker fits included (more than the server's default 10 a page holds):\n{log}"
    );
    assert!(
        log.contains(&format!("filtered out bundle {too_large} based on unfulfillable resource requested: request_cpus=64 > worker cpus=2")),
        "{log}"
    );
    assert!(
        log.contains("don't launch") || log.contains("max_reached"),
        "{log}"
    );
    assert!(!fitting.contains(&too_large));
    for (id, argv) in recorded(dir.path(), "argv-") {
        assert_eq!(
            argv.trim(),
            format!(
                "--server {SERVER} --verbose --exit-when-idle --idle-seconds 77 \
                 --work-dir alice-codalab-LocalWorkerManager-scratch/workdir --id host-{id} \
                 --network-prefix cl_worker_{id}_network --download-dependencies-max-retries 3"
            )
        );
    }
    for (_, env) in recorded(dir.path(), "env-") {
        assert_eq!(env.trim(), "alice:alicepw");
    }
    assert!(
        !log.contains("alicepw"),
        "the password must not reach the logs"
    );

    // Kill the manager outright; a new one finds the three running workers and adds none.
    first.kill();
    let mut once: Vec<&str> = args.iter().map(String::as_str).collect();
    once.insert(0, "--once");
    let second = command(&once).output().unwrap();
    let log = String::from_utf8_lossy(&second.stderr);
    stop_local_workers(&state);
    assert!(second.status.success(), "{log}");
    assert!(
        log.contains("3 worker jobs (min=0, max=3) (3 active, 0 pending)"),
        "{log}"
    );
    assert_eq!(recorded(dir.path(), "argv-").len(), 3, "{log}");
}

#[test]
fn a_wrong_password_on_a_real_server_exits_1() {
    let _turn = support::turn(module_path!());
    if !require_service("codalab", codalab_running()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(BIN)
        .args([
            "--server",
            SERVER,
            "local",
            "--state-dir",
            dir.path().to_str().unwrap(),
        ])
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "definitely-wrong")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "refused the credentials of user `alice`: Invalid credentials given. (invalid_grant)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("definitely-wrong"));
}

fn squeue_names(prefix: &str) -> Vec<(String, String)> {
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

#[test]
fn slurm_backend_against_real_codalab_and_real_slurm() {
    let _turn = support::turn(module_path!());
    if !require_service("codalab", codalab_running()) || !require_service("slurm", slurm_running())
    {
        return;
    }
    let tag = unique("e2e-slurm-");
    let job_name = unique("e2e");
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    let prefix = format!("{user}-{job_name}-");
    stage(
        4,
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
    struct Cancel(String);
    impl Drop for Cancel {
        fn drop(&mut self) {
            for (id, _) in squeue_names(&self.0) {
                let _ = Command::new("scancel").arg(id).status();
            }
        }
    }
    let _cancel = Cancel(prefix.clone());
    let max_seen = Arc::new(Mutex::new(0usize));
    let mut manager = Manager::start(&args, ("alice", "alicepw"), &[]);
    let seen = max_seen.clone();
    let prefix_ = prefix.clone();
    let records = dir.path().to_path_buf();
    manager.wait_until(
        "two workers running the stand-in on the cluster",
        WITHIN,
        move |_| {
            let jobs = squeue_names(&prefix_);
            let mut max = seen.lock().unwrap();
            *max = (*max).max(jobs.len());
            recorded(&records, "argv-").len() == 2
        },
    );
    let ticks = manager.count(STATUS_LINE);
    let seen = max_seen.clone();
    let prefix_ = prefix.clone();
    manager.wait_until("three more ticks", WITHIN, move |m| {
        let mut max = seen.lock().unwrap();
        *max = (*max).max(squeue_names(&prefix_).len());
        m.count(STATUS_LINE) >= ticks + 3
    });
    let log = manager.log();
    assert_eq!(
        *max_seen.lock().unwrap(),
        2,
        "at most --max-workers jobs at any time:\n{log}"
    );
    let jobs = squeue_names(&prefix);
    assert_eq!(jobs.len(), 2, "{jobs:?}\n{log}");
    assert!(jobs.iter().all(|(_, state)| state == "RUNNING"), "{jobs:?}");
    assert!(log.contains("4 staged bundles"), "{log}");
    let argvs = recorded(dir.path(), "argv-");
    let envs = recorded(dir.path(), "env-");
    for ((id, argv), (_, env)) in argvs.iter().zip(&envs) {
        assert!(
            id.starts_with(&prefix),
            "worker id is <user>-<job-name>-<hex>: {id}"
        );
        assert_eq!(
            argv.trim(),
            format!(
                "--server {SERVER} --verbose --exit-when-idle --idle-seconds 600 \
                 --work-dir {user}-codalab-SlurmBatchWorkerManager-scratch/workdir --id host-{id} \
                 --network-prefix cl_worker_{id}_network --download-dependencies-max-retries 3 \
                 --pass-down-termination --gpuset NONE"
            )
        );
        assert_eq!(env.trim(), "alice:alicepw");
    }
    assert!(!log.contains("alicepw"));
}
