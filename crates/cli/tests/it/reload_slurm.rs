//! Live resize on a REAL Slurm cluster with a REAL CodaLab server (`cargo xtask services up
//! codalab slurm`): the manager starts from a config file with `max_workers = 1` and three
//! staged bundles, the file is edited to `max_workers = 3` and the manager gets SIGHUP; it
//! reaches three worker jobs without restarting (the first job is still the same job) and never
//! runs more than three. Workers are the stand-in script of `e2e.rs` (no docker here). The
//! bundles carry a unique tag and the manager searches only that tag; the jobs have a unique
//! name and are cancelled by a drop guard. No sleeps as synchronisation: bounded polling of
//! squeue and of the manager's log.

use crate::support;
use support::manager::{BIN, Manager, command};
use support::{SERVER, codalab_running, slurm_running, stage, unique};

use codalab_wm_core::testing::require_service;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The line the manager logs at every tick of its pools.
const TICK_LINE: &str = "bundles assigned, ";
/// How long a wait for the manager may take (bounded polls, not a sleep).
const WITHIN: Duration = Duration::from_secs(180);

/// `(job id, state)` of the jobs whose name starts with `prefix`, in submission order.
fn squeue(prefix: &str) -> Vec<(String, String)> {
    let output = Command::new("squeue")
        .args(["-h", "-o", "%i|%j|%T"])
        .output()
        .unwrap();
    let mut jobs: Vec<(String, String)> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split('|');
            let (id, name, state) = (parts.next()?, parts.next()?, parts.next()?);
            name.starts_with(prefix)
                .then(|| (id.to_owned(), state.to_owned()))
        })
        .collect();
    jobs.sort_by_key(|(id, _)| id.parse::<u64>().unwrap_or(u64::MAX));
    jobs
}

/// Cancels the test's jobs however the test ends.
struct Cancel(String);

impl Drop for Cancel {
    fn drop(&mut self) {
        for (id, _) in squeue(&self.0) {
            let _ = Command::new("scancel").arg(id).status();
        }
    }
}

fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("cl-worker-stand-in.sh");
    std::fs::write(&path, "#!/bin/sh\nexec sleep 600\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The config file, with `max_workers` as given.
fn config(max_workers: u32, tag: &str, job_name: &str, user: &str, dir: &Path) -> String {
    format!(
        "server = \"{SERVER}\"\n\
         search = [\"tags={tag}\"]\n\
         min_workers = 0\n\
         max_workers = {max_workers}\n\
         min_seconds_between_workers = 0\n\
         sleep_time = 1\n\
         launch_mode = \"target\"\n\
         max_launches_per_tick = 3\n\
         backend = \"slurm-batch\"\n\n\
         [worker]\n\
         executable = \"{worker}\"\n\n\
         [slurm_batch]\n\
         partition = \"cpu\"\n\
         gpus = 0\n\
         cpus = 1\n\
         memory_mb = 256\n\
         time = \"10\"\n\
         job_name = \"{job_name}\"\n\
         user = \"{user}\"\n\
         slurm_work_dir = \"{scratch}\"\n",
        worker = stand_in(dir).display(),
        scratch = dir.join("scratch").display(),
    )
}

#[test]
fn sighup_raises_max_from_1_to_3_without_restarting_the_first_worker() {
    let _turn = support::turn(module_path!());
    if !require_service("codalab", codalab_running()) || !require_service("slurm", slurm_running())
    {
        return;
    }
    let tag = unique("reload-slurm-");
    let job_name = unique("reload");
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
    let file = dir.path().join("wm.toml");
    std::fs::write(&file, config(1, &tag, &job_name, &user, dir.path())).unwrap();
    let check = Command::new(BIN)
        .args(["config", "check"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(check.status.success(), "config check: {check:?}");

    let mut manager = Manager::spawn(command(&["--config", file.to_str().unwrap()]));
    let max_seen = Arc::new(Mutex::new(0usize));
    let note = |seen: &Arc<Mutex<usize>>, jobs: &[(String, String)]| {
        let mut max = seen.lock().unwrap();
        *max = (*max).max(jobs.len());
    };
    manager.wait_until("one worker job", WITHIN, |_| {
        let jobs = squeue(&prefix);
        note(&max_seen, &jobs);
        jobs.len() == 1
    });
    let first = squeue(&prefix)[0].0.clone();
    let ticks = manager.count(TICK_LINE);
    manager.wait_until("three more ticks at max_workers = 1", WITHIN, |m| {
        note(&max_seen, &squeue(&prefix));
        m.count(TICK_LINE) >= ticks + 3
    });
    assert_eq!(*max_seen.lock().unwrap(), 1, "{}", manager.log());

    std::fs::write(&file, config(3, &tag, &job_name, &user, dir.path())).unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &manager.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    manager.wait_until("three worker jobs after SIGHUP", WITHIN, |_| {
        let jobs = squeue(&prefix);
        note(&max_seen, &jobs);
        jobs.len() == 3
    });
    let ticks = manager.count(TICK_LINE);
    manager.wait_until("three more ticks at max_workers = 3", WITHIN, |m| {
        note(&max_seen, &squeue(&prefix));
        m.count(TICK_LINE) >= ticks + 3
    });
    let log = manager.log();
    let jobs = squeue(&prefix);
    assert_eq!(jobs.len(), 3, "{jobs:?}\n{log}");
    assert_eq!(*max_seen.lock().unwrap(), 3, "never more than 3:\n{log}");
    assert_eq!(jobs[0].0, first, "the first job is the same job:\n{log}");
    assert!(log.contains("max_workers 1 → 3"), "{log}");
    assert!(log.contains("SIGHUP received"), "{log}");
    assert_eq!(
        log.matches("started worker manager").count(),
        1,
        "not restarted:\n{log}"
    );
}
