//! `cl-worker-manager down` against the real Slurm cluster (`cargo xtask services up slurm`:
//! real `slurmctld`/`slurmd` on 127.0.0.1). Jobs are submitted through the Slurm backend: one
//! worker that fails at once (its scratch directory stays behind), two that run or wait until
//! stopped. `down --dry-run` lists them and changes nothing; `down` stops every owned job and
//! removes the scratch directories of the finished workers, and leaves other directories
//! alone. No CodaLab credentials are given to `down`: it needs none.
//!
//! Skipped locally when the cluster is not running; under `CI=true` a missing cluster fails.
#![cfg(feature = "slurm")]

use codalab_wm_core::backend::new_unique;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::{Polling, require_service, wait_for_job};
use codalab_wm_core::{JobState, LaunchRequest, WorkerBackend, WorkerJob, WorkerOptions};
use codalab_wm_slurm::{SlurmBackend, SlurmConfig};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

/// Runs until the file `stop` appears next to it (at most 5 minutes).
const STAND_IN: &str = "#!/bin/sh\ndir=$(dirname \"$0\")\ni=0\nwhile [ ! -e \"$dir/stop\" ] && [ $i -lt 1500 ]; do i=$((i + 1)); sleep 0.2; done\n";
const FAILING: &str = "#!/bin/sh\nexit 3\n";

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

/// The test's directory; on drop stops the stand-ins and cancels whatever jobs are left.
struct Scratch {
    dir: tempfile::TempDir,
    config: SlurmConfig,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("codalab-wm-down-")
            .tempdir()
            .unwrap();
        for (name, text) in [("stand-in", STAND_IN), ("failing", FAILING)] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let config = SlurmConfig {
            job_name: format!("wmdown{}", &new_unique()[..8]),
            partition: Some("cpu".into()),
            cpus: 1,
            gpus: 0,
            memory_mb: 128,
            time: "10".into(),
            slurm_work_dir: dir.path().join("slurm"),
            ..SlurmConfig::default()
        };
        Self { dir, config }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn backend(&self) -> SlurmBackend {
        self.backend_in("cpu")
    }

    /// The backend with the same identity but for `partition`.
    fn backend_in(&self, partition: &str) -> SlurmBackend {
        let credentials = Credentials {
            username: "codalab-test".into(),
            password: Secret::new("not-a-real-password"),
        };
        let config = SlurmConfig {
            partition: Some(partition.into()),
            ..self.config.clone()
        };
        SlurmBackend::new(&config, Some(credentials)).unwrap()
    }

    async fn launch(&self, backend: &SlurmBackend, executable: &str) -> WorkerJob {
        let worker = WorkerOptions {
            server: "http://127.0.0.1:9".into(),
            executable: self.path(executable).display().to_string(),
            ..WorkerOptions::default()
        };
        backend
            .start_worker_job(&LaunchRequest {
                unique: &new_unique(),
                worker: &worker,
                dry_run: false,
            })
            .await
            .unwrap()
    }

    /// The backend's flags on the command line.
    fn flags(&self) -> Vec<String> {
        let work_dir = self.config.slurm_work_dir.display().to_string();
        [
            "slurm-batch",
            "--partition",
            "cpu",
            "--job-name",
            &self.config.job_name,
            "--cpus",
            "1",
            "--gpus",
            "0",
            "--memory-mb",
            "128",
            "--slurm-work-dir",
            &work_dir,
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// The same settings as a config file.
    fn config_file(&self) -> PathBuf {
        let path = self.path("wm.toml");
        let text = format!(
            "backend = \"slurm-batch\"\n[slurm_batch]\npartition = \"cpu\"\njob_name = \"{}\"\ncpus = 1\ngpus = 0\nmemory_mb = 128\nslurm_work_dir = \"{}\"\n",
            self.config.job_name,
            self.config.slurm_work_dir.display()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The owned scratch directories left.
    fn owned_dirs(&self, backend: &SlurmBackend) -> Vec<String> {
        let prefix = backend.settings().job_name_prefix();
        let mut dirs: Vec<String> = std::fs::read_dir(&self.config.slurm_work_dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with(&prefix))
            .collect();
        dirs.sort();
        dirs
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path("stop"), "");
        let prefix = format!(
            "{}-{}-",
            self.backend().settings().user,
            self.config.job_name
        );
        let Ok(out) = Command::new("squeue").args(["-h", "-o", "%i %j"]).output() else {
            return;
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((id, name)) = line.split_once(' ')
                && name.starts_with(&prefix)
            {
                let _ = Command::new("scancel").arg(id).status();
            }
        }
    }
}

/// `cl-worker-manager down --all-origins ARGS` with no CodaLab credentials in the environment
/// (every test's jobs have names of their own).
fn down(args: &[String], cwd: &Path) -> Output {
    Command::new(BIN)
        .args(["down", "--all-origins"])
        .args(args)
        .current_dir(cwd)
        .env_remove("CODALAB_USERNAME")
        .env_remove("CODALAB_PASSWORD")
        .env_remove("CODALAB_WM_LOG")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn polling() -> Polling {
    Polling {
        interval: Duration::from_millis(200),
        attempts: 150,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn down_stops_every_owned_job_and_removes_finished_scratch_dirs() {
    let _turn = crate::support::turn(module_path!());
    if !slurm_available() {
        return;
    }
    let scratch = Scratch::new();
    let backend = scratch.backend();
    let failed = scratch.launch(&backend, "failing").await;
    wait_for_job(&backend, &failed.id, polling(), "failed", |j| {
        j.is_some_and(|j| j.state == JobState::Failed)
    })
    .await
    .unwrap();
    let live = [
        scratch.launch(&backend, "stand-in").await,
        scratch.launch(&backend, "stand-in").await,
    ];
    let decoy = scratch.config.slurm_work_dir.join("someone-elses-dir");
    std::fs::create_dir_all(&decoy).unwrap();
    let before = scratch.owned_dirs(&backend);
    assert_eq!(before.len(), 3, "{before:?}");

    // --dry-run: the list, and nothing changes.
    let out = down(
        &[["--dry-run".to_owned()].as_slice(), &scratch.flags()].concat(),
        scratch.dir.path(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    println!("{stdout}");
    assert!(stdout.starts_with("POOL"), "{stdout}");
    for job in &live {
        assert!(
            stdout.contains(&format!("{} ({})", job.id, job.name)) && stdout.contains("would stop"),
            "{stdout}"
        );
    }
    let failed_dir = format!(
        "{}/{}",
        scratch.config.slurm_work_dir.display(),
        failed.name
    );
    assert!(
        stdout.lines().any(|l| l.contains(&failed_dir)
            && l.contains("scratch dir")
            && l.contains("would remove")),
        "{stdout}"
    );
    assert!(!stdout.contains("someone-elses-dir"), "{stdout}");
    // The running jobs' directories too: `down` removes them once it has stopped the jobs.
    assert!(
        stdout.contains("dry run: would stop 2 job(s) and remove 3 resource(s)"),
        "{stdout}"
    );
    let listed = scratch_dirs_in(&stdout, "would remove");
    let jobs = backend.get_worker_jobs().await.unwrap();
    for job in &live {
        let now = jobs.iter().find(|j| j.id == job.id).unwrap();
        assert!(now.state.is_capacity(), "{now:?} after --dry-run");
    }
    assert_eq!(
        scratch.owned_dirs(&backend),
        before,
        "--dry-run removed nothing"
    );

    // down with the config file: every owned job stopped, finished workers' dirs removed.
    let config = scratch.config_file();
    let out = down(
        &["--config".to_owned(), config.display().to_string()],
        scratch.dir.path(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    println!("{stdout}");
    assert!(
        stdout.contains("stopped 2 job(s), removed 3 resource(s)"),
        "{stdout}"
    );
    assert_eq!(
        scratch_dirs_in(&stdout, "removed"),
        listed,
        "--dry-run listed exactly what down removed"
    );
    let jobs = backend.get_worker_jobs().await.unwrap();
    let left: Vec<_> = jobs.iter().filter(|j| j.state.is_capacity()).collect();
    assert!(left.is_empty(), "owned jobs left: {left:?}");
    assert_eq!(
        scratch.owned_dirs(&backend),
        Vec::<String>::new(),
        "{stdout}"
    );
    assert!(decoy.is_dir(), "another directory was removed");

    // Again: nothing left to do.
    let out = down(
        &["--config".to_owned(), config.display().to_string()],
        scratch.dir.path(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("stopped 0 job(s), removed 0 resource(s)"),
        "{stdout}"
    );
}

/// The state squeue shows for job `id` (empty once it is gone).
fn squeue_state(id: &str) -> String {
    let out = Command::new("squeue")
        .args(["-h", "--states=all", "-o", "%T", "-j", id])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `down slurm-batch --partition cpu` stops this identity's jobs in partition cpu only: the
/// same user and job name in partition gpu is another pool's (#28 item 6), and its scratch
/// directory stays while it runs. Real Slurm: partitions cpu and gpu of the test cluster.
#[tokio::test(flavor = "multi_thread")]
async fn down_with_a_partition_stops_only_that_partitions_jobs() {
    let _turn = crate::support::turn(module_path!());
    if !slurm_available() {
        return;
    }
    let scratch = Scratch::new();
    let (cpu, gpu) = (scratch.backend_in("cpu"), scratch.backend_in("gpu"));
    let mine = scratch.launch(&cpu, "stand-in").await;
    let other = scratch.launch(&gpu, "stand-in").await;
    for (backend, job) in [(&cpu, &mine), (&gpu, &other)] {
        wait_for_job(backend, &job.id, polling(), "submitted", |j| {
            j.is_some_and(|j| j.state.is_capacity())
        })
        .await
        .unwrap();
    }
    let out = down(&scratch.flags(), scratch.dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{} ({})", mine.id, mine.name)),
        "{stdout}"
    );
    assert!(!stdout.contains(&other.name), "{stdout}");
    assert!(stdout.contains("stopped 1 job(s)"), "{stdout}");
    let state = squeue_state(&other.id);
    assert!(
        state == "RUNNING" || state == "PENDING",
        "the gpu partition's job is {state:?} after down --partition cpu\n{stdout}"
    );
    let other_dir = scratch.config.slurm_work_dir.join(&other.name);
    assert!(
        other_dir.is_dir(),
        "the running job's scratch dir was removed"
    );
}

/// The scratch directories of a `down` report whose action is `action`, sorted.
fn scratch_dirs_in(report: &str, action: &str) -> Vec<String> {
    let mut dirs: Vec<String> = report
        .lines()
        .filter(|l| l.contains("scratch dir") && l.trim_end().ends_with(action))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')))
        .map(str::to_owned)
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 3, "{report}");
    dirs
}

#[test]
fn down_without_a_backend_says_what_to_give() {
    let _turn = crate::support::turn(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let out = down(&[], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no backend given"), "{stderr}");
}

/// `down` with a config that names the default server explicitly knows the server (review
/// 2026-11-27 §2: it took the default's value for "not given"). Without the server, a Slurm
/// pool would list every deployment's jobs under its names (the origin tells them apart, docs
/// audit L17e): `down` refuses, names what to give and `--all-origins`, stops nothing; a dry
/// run lists them with a warning, and `--all-origins` stops them. Real Slurm.
#[test]
fn down_without_the_managers_server_refuses_unless_all_origins() {
    let _turn = crate::support::turn(module_path!());
    if !slurm_available() {
        return;
    }
    let scratch = Scratch::new();
    let dir = scratch.dir.path();
    let run = |server_line: &str, before: &[&str]| {
        let path = dir.join("wm.toml");
        std::fs::write(&path, server_line).unwrap();
        let out = Command::new(BIN)
            .arg("down")
            .args(before)
            .arg("--config")
            .arg(&path)
            .args(scratch.flags())
            .current_dir(dir)
            .env("CODALAB_USERNAME", "codalab-test")
            .env_remove("CODALAB_PASSWORD")
            .env_remove("CODALAB_WM_SERVER")
            .env_remove("CODALAB_WM_LOG")
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stderr)
    };
    let unknown = "down does not know the manager's server";
    let (code, named) = run("server = \"https://worksheets.codalab.org\"\n", &[]);
    assert_eq!(code, Some(0), "{named}");
    assert!(!named.contains(unknown), "{named}");
    let (code, refused) = run("", &[]);
    assert_eq!(code, Some(2), "{refused}");
    assert!(
        refused.contains(unknown)
            && refused.contains("--all-origins")
            && refused.contains("pool(s) slurm-batch would stop"),
        "{refused}"
    );
    let (code, listed) = run("", &["--dry-run"]);
    assert_eq!(code, Some(0), "{listed}");
    assert!(listed.contains(unknown), "{listed}");
    let (code, all) = run("", &["--all-origins"]);
    assert_eq!(code, Some(0), "{all}");
}

/// Before it stops a running worker, `down` says that a run its worker has is lost (CodaLab
/// 1.7.5: `worker_offline`) and how to drain instead; without a terminal it goes on (scripts
/// keep working), so the job is stopped all the same.
#[tokio::test(flavor = "multi_thread")]
async fn down_warns_before_it_stops_a_running_worker() {
    let _turn = crate::support::turn(module_path!());
    use codalab_wm_core::local::{LocalBackend, LocalConfig};
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let executable = dir.path().join("busy-worker.sh");
    std::fs::write(&executable, "#!/bin/sh\nexec sleep 300\n").unwrap();
    std::fs::set_permissions(&executable, std::fs::Permissions::from_mode(0o755)).unwrap();
    let worker = WorkerOptions {
        executable: executable.display().to_string(),
        server: "http://127.0.0.1:9".into(),
        ..WorkerOptions::default()
    };
    {
        let backend = LocalBackend::new(
            LocalConfig {
                state_dir: state.clone(),
                ..LocalConfig::default()
            },
            Credentials {
                username: "codalab-test".into(),
                password: Secret::new("unused"),
            },
        )
        .unwrap();
        let job = backend
            .start_worker_job(&LaunchRequest {
                unique: &new_unique(),
                worker: &worker,
                dry_run: false,
            })
            .await
            .unwrap();
        assert_eq!(job.state, JobState::Active);
    }
    let config = dir.path().join("wm.toml");
    let text = format!(
        "backend = \"local\"\n[local]\nstate_dir = \"{}\"\n",
        state.display()
    );
    std::fs::write(&config, text).unwrap();
    let out = down(
        &["--config".into(), config.display().to_string()],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("1 running worker job(s) will be stopped")
            && stderr.contains("is LOST")
            && stderr.contains("drain first"),
        "{stderr}"
    );
    assert!(stdout.contains("stopped (was active)"), "{stdout}");
}
