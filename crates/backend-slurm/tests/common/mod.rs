//! Shared by the real-service tests: a one-node cluster of real `slurmctld`/`slurmd` (Debian's
//! slurm-wlm 22.05) and a real `sshd`, both on 127.0.0.1, started by `cargo xtask services up
//! slurm sshd`. Workers are a stand-in script that records its argv and runs until told to stop.
#![allow(dead_code)]

use async_trait::async_trait;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::{Harness, Polling, require_service, wait_for_job};
use codalab_wm_core::{JobState, WorkerBackend, WorkerJob, WorkerOptions};
use codalab_wm_slurm::{SlurmBackend, SlurmConfig};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Tests of one binary share the node (one of them fills it): they run one at a time.
pub static NODE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub const PASSWORD: &str = "not-a-real-password";

pub use codalab_wm_core::testing::services_dir;

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether the slurm service answers (skips locally, fails under CI=true).
pub fn slurm_available() -> bool {
    require_service(
        "slurm",
        succeeds("scontrol", &["ping"]) && succeeds("sinfo", &["-h"]),
    )
}

/// Whether the sshd service answers (and slurm, which the login node runs).
pub fn sshd_available() -> bool {
    let dir = services_dir().join("sshd");
    let up = dir.join("known_hosts").exists()
        && std::net::TcpStream::connect_timeout(
            &"127.0.0.1:2222".parse().unwrap(),
            Duration::from_secs(2),
        )
        .is_ok();
    require_service("sshd", up) && slurm_available()
}

pub fn credentials() -> Credentials {
    Credentials {
        username: "codalab-test".into(),
        password: Secret::new(PASSWORD),
    }
}

/// Runs a local command and returns its stdout; panics with its stderr when it fails.
pub fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

const STAND_IN: &str = r#"#!/bin/sh
# Stand-in for cl-worker: records its argv (and whether credentials reached it), then runs until
# the file finish-<id> appears next to it (bounded: 10 minutes).
dir=$(dirname "$0")
id=unknown
prev=
for arg in "$@"; do [ "$prev" = --id ] && id=$arg; prev=$arg; done
{
  printf '%s\n' "$@"
  [ -n "${CODALAB_USERNAME:-}" ] && [ -n "${CODALAB_PASSWORD:-}" ] && echo "credentials=env"
} > "$dir/argv-$id"
i=0
while [ ! -e "$dir/finish-$id" ]; do
  i=$((i + 1)); [ $i -lt 3000 ] || exit 4
  sleep 0.2
done
"#;

const FAILING: &str = "#!/bin/sh\necho failing on purpose >&2\nexit 3\n";

/// A scratch directory with the stand-in workers, the markers and the slurm work dir.
#[derive(Debug)]
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("codalab-wm-slurm-")
            .tempdir()
            .unwrap();
        for (name, text) in [("stand-in", STAND_IN), ("failing", FAILING)] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            run("chmod", &["755", path.to_str().unwrap()]);
        }
        Self { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }

    /// The config of a test backend: its own job name (so runs never see each other's jobs),
    /// small jobs without GPUs, the work dir in the scratch directory.
    pub fn config(&self) -> SlurmConfig {
        let unique = codalab_wm_core::backend::new_unique();
        SlurmConfig {
            job_name: format!("wmtest-{}", &unique[..8]),
            partition: Some("cpu".into()),
            cpus: 1,
            gpus: 0,
            memory_mb: 128,
            time: "10".into(),
            slurm_work_dir: self.dir.path().join("slurm"),
            ..SlurmConfig::default()
        }
    }

    pub fn worker(&self, executable: &str) -> WorkerOptions {
        WorkerOptions {
            server: "http://127.0.0.1:9".into(),
            executable: self.path(executable),
            ..WorkerOptions::default()
        }
    }

    /// What the stand-in of `job` recorded, once it has.
    pub async fn argv_of(&self, job: &WorkerJob) -> Vec<String> {
        let path = self.dir.path().join(format!("argv-host-{}", job.name));
        for _ in 0..150 {
            if let Ok(text) = std::fs::read_to_string(&path)
                && !text.is_empty()
            {
                return text.lines().map(str::to_owned).collect();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "the worker of {} never started ({} missing)",
            job.id,
            path.display()
        );
    }

    pub fn finish(&self, job: &WorkerJob) {
        std::fs::write(
            self.dir.path().join(format!("finish-host-{}", job.name)),
            "",
        )
        .unwrap();
    }
}

pub fn polling() -> Polling {
    Polling {
        interval: Duration::from_millis(200),
        attempts: 150,
    }
}

/// The conformance harness on the real cluster. `hold_new_jobs` fills the node with an
/// exclusive filler job; `release_jobs` cancels it.
#[derive(Debug)]
pub struct SlurmHarness {
    pub scratch: Scratch,
    pub config: SlurmConfig,
    filler: Mutex<Option<String>>,
}

impl SlurmHarness {
    pub fn new(scratch: Scratch, config: SlurmConfig) -> Self {
        Self {
            scratch,
            config,
            filler: Mutex::new(None),
        }
    }

    /// The backend, with an origin: its jobs carry a `--comment`.
    pub fn build(&self) -> SlurmBackend {
        let origin = codalab_wm_core::backend::origin("http://127.0.0.1:9", "codalab-test");
        SlurmBackend::new(&self.config, Some(credentials()))
            .unwrap()
            .with_origin(Some(origin))
    }

    fn cancel_filler(&self) {
        if let Some(id) = self.filler.lock().unwrap().take() {
            run("scancel", &[&id]);
        }
    }
}

impl Drop for SlurmHarness {
    fn drop(&mut self) {
        self.cancel_filler();
        // Whatever a failed test left behind.
        let prefix = format!("{}-{}-", self.build().settings().user, self.config.job_name);
        let jobs = run("squeue", &["-h", "-o", "%i %j"]);
        for line in jobs.lines() {
            if let Some((id, name)) = line.split_once(' ')
                && name.starts_with(&prefix)
            {
                let _ = Command::new("scancel").arg(id).status();
            }
        }
    }
}

/// The state of job `id` as squeue sees it (empty when unknown).
fn squeue_state(id: &str) -> String {
    Command::new("squeue")
        .args(["-h", "-t", "all", "-j", id, "-o", "%T"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

#[async_trait]
impl Harness for SlurmHarness {
    async fn backend(&self) -> Arc<dyn WorkerBackend> {
        Arc::new(self.build())
    }

    async fn hold_new_jobs(&self) -> bool {
        let output = self.scratch.path("filler.out");
        let id = run(
            "sbatch",
            &[
                "--parsable",
                "--exclusive",
                "-p",
                "cpu",
                "--mem=128",
                "-J",
                "wmtest-filler",
                "-o",
                &output,
                "--wrap",
                "sleep 300",
            ],
        );
        *self.filler.lock().unwrap() = Some(id.clone());
        for _ in 0..150 {
            if squeue_state(&id) == "RUNNING" {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("filler job {id} never ran (state {:?})", squeue_state(&id));
    }

    async fn release_jobs(&self) {
        self.cancel_filler();
    }

    async fn finish_job(&self, job: &WorkerJob) {
        self.scratch.finish(job);
    }

    fn polling(&self) -> Polling {
        polling()
    }

    fn worker_options(&self) -> WorkerOptions {
        self.scratch.worker("stand-in")
    }
}

/// Waits until the job with `id` is in `state`.
pub async fn wait_for_state(backend: &dyn WorkerBackend, id: &str, state: JobState) -> WorkerJob {
    let what = format!("{state:?}");
    wait_for_job(backend, id, polling(), &what, |j| {
        j.is_some_and(|j| j.state == state)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
    .expect("accepted jobs exist")
}
