//! Shared by the tests that run against the real services started by `cargo xtask services up`
//! (the real CodaLab 1.7.5 server on 127.0.0.1:2900 and the real Slurm cluster): where the
//! repository is, whether a service is up, and staging bundles with real `cl run`.

pub mod bundles;
pub mod flood;
pub mod forwarder;
pub mod manager;
pub mod moto;
pub mod slurm_pools;
pub mod systemd;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Condvar, Mutex, MutexGuard};

/// The real CodaLab server of `cargo xtask services up codalab`.
pub const SERVER: &str = "http://127.0.0.1:2900";

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Whether the real CodaLab server answers (`xtask/services/codalab/status.sh`).
pub fn codalab_running() -> bool {
    Command::new("bash")
        .arg(repo().join("xtask/services/codalab/status.sh"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the Slurm node is up. A node still completing another test's jobs is up: ours
/// queue meanwhile.
pub fn slurm_running() -> bool {
    Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).lines().any(|l| {
                    ["idle", "mix", "alloc", "comp"]
                        .iter()
                        .any(|state| l.starts_with(state))
                })
        })
}

/// `prefix` followed by 10 random hex digits.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}", &codalab_wm_core::backend::new_unique()[..10])
}

/// Stages `n` bundles as alice with real `cl run` and returns their uuids.
pub fn stage(n: usize, flags: &[&str]) -> Vec<String> {
    stage_as("alice", n, flags, &[])
}

/// Stages `n` bundles of one CPU and 256m as `user`, tagged `tag` (what a test's manager
/// searches) and in the queue `tag` (what its tag-exclusive workers take); `env` as
/// [`stage_as`].
pub fn stage_queued(user: &str, n: usize, tag: &str, env: &[(&str, &str)]) -> Vec<String> {
    let flags = [
        "--request-cpus",
        "1",
        "--request-memory",
        "256m",
        "--tags",
        tag,
        "--request-queue",
        tag,
    ];
    stage_as(user, n, &flags, env)
}

/// Stages `n` bundles as `user` with real `cl run` (`stage.sh`; `env` sets e.g. `STAGE_COMMAND`,
/// `STAGE_DEPS`) and returns their uuids once each has reached `staged` (or gone further).
pub fn stage_as(user: &str, n: usize, flags: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let output = Command::new("bash")
        .arg(repo().join("xtask/services/codalab/stage.sh"))
        .arg(user)
        .arg(n.to_string())
        .args(flags)
        .envs(env.iter().copied())
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "stage.sh failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let uuids: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(uuids.len(), n, "stage.sh printed {uuids:?}");
    uuids
}

/// Sets `user`'s `parallel_run_quota` as the root user, with the real `cl uedit`.
pub fn set_quota(user: &str, quota: u32) {
    let out = Command::new("bash")
        .arg(repo().join("xtask/services/codalab/cl.sh"))
        .args([
            "codalab",
            "uedit",
            user,
            "--parallel-run-quota",
            &quota.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cl uedit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whose turn it is at the shared services: a file (module path) and how many of its tests
/// hold the turn.
static TURN: Mutex<Held> = Mutex::new(Held {
    file: None,
    tests: 0,
    since: None,
});
/// The file whose turn it is, how many of its tests hold it, and since when.
struct Held {
    file: Option<&'static str>,
    tests: usize,
    since: Option<std::time::Instant>,
}
/// Signalled when a turn ends.
static TURN_ENDED: Condvar = Condvar::new();

/// A test's share of its file's turn at the shared services, until dropped.
#[must_use = "the turn ends when this is dropped"]
pub struct Turn;

/// Waits until no test of another file uses the shared services (the real CodaLab server and
/// its users, Docker, the Slurm cluster, moto), then holds the turn for `file` (the caller's
/// `module_path!()`): tests of one file share it, as they ran when each file was a binary of
/// its own. Every test of such a file takes it first; while holding it a test waits on no
/// other file's test but those that take no turn (below), which never wait for one: the turns
/// cannot deadlock. A file whose tests share nothing with the others but dockerd
/// (`partition.rs`, `checkin_real.rs`) takes no turn and runs beside them, holding only
/// [`bundles::docker_in_use`]. Each turn's length goes to stderr, past the harness's capture,
/// so CI's log shows where the step's time went.
pub fn turn(file: &'static str) -> Turn {
    let mut held = lock(&TURN);
    while held.file.is_some_and(|owner| owner != file) {
        held = TURN_ENDED.wait(held).unwrap_or_else(|p| p.into_inner());
    }
    if held.file.is_none() {
        held.since = Some(std::time::Instant::now());
    }
    held.file = Some(file);
    held.tests += 1;
    Turn
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut held = lock(&TURN);
        held.tests -= 1;
        if held.tests == 0 {
            // Straight to the process's stderr, past the test harness's capture: CI's log shows
            // where the test step's time goes.
            if let (Some(file), Some(since)) = (held.file, held.since) {
                let line = format!("turn of {file}: {} s\n", since.elapsed().as_secs());
                let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            }
            held.file = None;
            TURN_ENDED.notify_all();
        }
    }
}

/// A lock, whether or not a test panicked while holding it.
fn lock<T>(mutex: &'static Mutex<T>) -> MutexGuard<'static, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
