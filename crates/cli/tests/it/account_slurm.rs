//! Workers of another CodaLab account than the manager's, for real (#28): the REAL manager
//! binary logs in to the REAL CodaLab 1.7.5 server (`cargo xtask services up codalab`) as
//! `bob`, a non-root user whose `GET /rest/workers/info` lists only bob's own workers, and
//! starts the REAL `cl-worker` 1.7.5 (running bundles in Docker: `services up docker`)
//! through the REAL Slurm cluster (`services up slurm`). The workers log in as the root
//! account `codalab` (a public server's shared workers, which run bob's bundles) from the
//! backend's own `password_file` (`CODALAB_WM_SLURM_BATCH__PASSWORD_FILE`; the global
//! `--password-file` would be the manager's login too):
//! - given by a relative path (each job reads it in its own directory, so the manager cannot
//!   vouch for it and only warns): the manager never sees the workers check in, so it must
//!   keep the running job past `checkin_timeout` (no worker of the pool was ever seen), back
//!   the pool off once (`worker_unconfirmed`), and bob's bundle must end `ready` on this
//!   test's Slurm job;
//! - given by an absolute path the manager can read: it refuses to start, naming both
//!   accounts.
//!
//! No test sleeps to synchronise: each waits for the manager's log or the server's bundle
//! states, with a deadline. Locally a missing service skips the test; under `CI=true` it fails.
#![cfg(feature = "slurm")]

use crate::support;
use support::bundles::{Server, cl_worker, docker_host, docker_running};
use support::manager::{BIN, Manager, down};
use support::{codalab_running, slurm_running, stage_queued, unique};

use codalab_wm_core::testing::require_service;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const MANAGER: (&str, &str) = ("bob", "bobpw");
/// The root account of the test server (`xtask/services/codalab/common.sh`).
const WORKERS: (&str, &str) = ("codalab", "codalab");
/// Time for a worker to start through Slurm and run a bundle (a loaded 2-core machine).
const WITHIN: Duration = Duration::from_secs(240);

fn services_up() -> bool {
    require_service("codalab", codalab_running())
        && require_service("docker", docker_running())
        && require_service("slurm", slurm_running())
}

/// A password file as `cl-worker` reads it (user, then password; mode 0600).
fn password_file(dir: &Path) -> PathBuf {
    let file = dir.join("pw");
    std::fs::write(&file, format!("{}\n{}\n", WORKERS.0, WORKERS.1)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    file
}

/// `path` relative to this process's directory (which the manager and so its jobs inherit).
fn relative(path: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let up = cwd
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let mut relative: PathBuf = std::iter::repeat_n("..", up).collect();
    relative.push(path.strip_prefix("/").unwrap());
    relative
}

/// The workers' password file: the slurm-batch table's own key, not the manager's login.
fn workers_file(file: &Path) -> (&'static str, String) {
    (
        "CODALAB_WM_SLURM_BATCH__PASSWORD_FILE",
        file.display().to_string(),
    )
}

fn slurm_args(tag: &str, dir: &Path) -> Vec<String> {
    let slurm_dir = dir.join("slurm").display().to_string();
    [
        "slurm-batch",
        "--partition",
        "cpu",
        "--gpus",
        "0",
        "--cpus",
        "1",
        "--memory-mb",
        "1024",
        "--job-name",
        tag,
        "--slurm-work-dir",
        &slurm_dir,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn manager_args(tag: &str, dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    let cl_worker = cl_worker().display().to_string();
    [
        "--server",
        support::SERVER,
        "--launch-mode",
        "target",
        "--min-workers",
        "0",
        "--max-workers",
        "1",
        "--min-seconds-between-workers",
        "0",
        "--sleep-time",
        "2",
        "--worker-checkin-timeout",
        "15",
        "--worker-idle-seconds",
        "10",
        "--worker-executable",
        &cl_worker,
        "--worker-tag",
        tag,
        "--worker-tag-exclusive",
        "--worker-work-dir-prefix",
        &prefix,
        "--search",
        &format!("tags={tag}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn a_busy_worker_of_the_root_account_is_kept_and_its_bundle_ends_ready() {
    let _turn = support::turn(module_path!());
    if !services_up() {
        return;
    }
    let tag = unique("account");
    let dir = tempfile::tempdir().unwrap();
    let file = relative(&password_file(dir.path()));
    // Runs longer than checkin_timeout (15 s): the lost rule sees the job running, unlisted.
    let command = "sleep 45; echo done > out.txt";
    let uuids = stage_queued(MANAGER.0, 1, &tag, &[("STAGE_COMMAND", command)]);
    let backend = slurm_args(&tag, dir.path());
    let mut args = manager_args(&tag, dir.path());
    args.extend(backend.iter().cloned());
    let env = [("DOCKER_HOST", docker_host()), workers_file(&file)];
    let mut manager = Manager::start(&args, MANAGER, &env);
    let server = Server::login(MANAGER.0, MANAGER.1);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        manager.wait_until("the account warning", WITHIN, |m| {
            m.log()
                .contains("cannot check that the workers log in as `bob`")
        });
        manager.wait_until("the job kept past checkin_timeout", WITHIN, |m| {
            m.log().contains("worker_lost would stop it")
        });
        server.wait_ready(&uuids, WITHIN, || manager.log());
        let info = server.info(&uuids[0]);
        assert!(
            info.remote.unwrap_or_default().contains(&tag),
            "bob's bundle ran on this test's Slurm job (a root worker)"
        );
        assert_eq!(server.cat(&uuids[0], "out.txt").trim(), "done");
        let log = manager.log();
        assert!(
            log.contains("(worker_unconfirmed: misconfiguration"),
            "{log}"
        );
        assert_eq!(log.matches("is lost and stopped").count(), 0, "{log}");
        assert_eq!(
            log.matches("stopped a stuck pending job").count(),
            0,
            "{log}"
        );
    }));
    drop(manager);
    let out = down(&backend, MANAGER);
    assert!(out.status.success(), "{out:?}");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    // `down --all-origins` with the flags alone (no --server) stops the manager's jobs: it does
    // not know the server, so it lists every origin (it once left them running).
    let squeue = Command::new("squeue").args(["-h", "-o", "%j"]).output();
    let names = String::from_utf8_lossy(&squeue.unwrap().stdout).into_owned();
    assert!(!names.contains(&tag), "left running after down: {names}");
}

#[test]
fn a_readable_password_file_of_another_account_is_refused_at_start() {
    let _turn = support::turn(module_path!());
    if !require_service("codalab", codalab_running()) {
        return;
    }
    let tag = unique("refused");
    let dir = tempfile::tempdir().unwrap();
    let file = password_file(dir.path());
    let mut args = manager_args(&tag, dir.path());
    args.push("--once".into());
    args.extend(slurm_args(&tag, dir.path()));
    let (key, value) = workers_file(&file);
    let out = Command::new(BIN)
        .env(key, value)
        .args(&args)
        .env("CODALAB_USERNAME", MANAGER.0)
        .env("CODALAB_PASSWORD", MANAGER.1)
        .env("NO_COLOR", "1")
        .env("CODALAB_WM_RECORD_DIR", dir.path().join("records"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the workers log in as CodaLab user `codalab` but the manager as `bob`"),
        "{stderr}"
    );
}
