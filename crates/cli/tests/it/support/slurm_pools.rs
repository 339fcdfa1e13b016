//! The `[[pools]]` tests' scratch on the real Slurm cluster (`pools_slurm.rs`): the
//! stand-in worker, the manager started on a config of pools, this test's jobs as `squeue`
//! lists them, and a partition state put back when dropped.

use codalab_wm_core::testing::require_service;
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

/// The tests change partitions of the one cluster: one at a time.
pub static CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn slurm_available() -> bool {
    require_service(
        "slurm",
        succeeds("scontrol", &["ping"]) && succeeds("sinfo", &["-h"]),
    )
}

pub fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Stand-in for cl-worker: runs until the file `stop` appears next to it (at most 5 minutes).
pub const STAND_IN: &str = "#!/bin/sh\ndir=$(dirname \"$0\")\ni=0\nwhile [ ! -e \"$dir/stop\" ] && [ $i -lt 1500 ]; do i=$((i + 1)); sleep 0.2; done\n";

/// A scratch directory with the stand-in, the manager's logs and the jobs' files; on drop
/// stops the stand-ins, cancels this test's jobs and kills the manager if still running.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    pub prefix: String,
    pub manager: Option<Child>,
    /// The CodaLab user the manager logs in as.
    pub user: (&'static str, &'static str),
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("codalab-wm-pools-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("cl-worker-stand-in.sh");
        std::fs::write(&path, STAND_IN).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let unique = codalab_wm_core::backend::new_unique();
        Self {
            dir,
            prefix: format!("wmpools{}", &unique[..8]),
            manager: None,
            user: ("alice", "alicepw"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// One `[[pools]]` entry on the real cluster; its jobs are named `<user>-<prefix>_<pool>-…`.
    pub fn pool(&self, name: &str, partition: &str, gpus: u32, extra: &str) -> String {
        format!(
            "[[pools]]\nname = \"{name}\"\nbackend = \"slurm-batch\"\nmin_seconds_between_workers = 0\nstartup_grace = 5\n{extra}\n\
             [pools.slurm_batch]\njob_name = \"{prefix}_{name}\"\npartition = \"{partition}\"\ncpus = 1\n\
             gpus = {gpus}\nmemory_mb = 1024\ntime = \"10\"\nslurm_work_dir = \"{work}\"\n",
            prefix = self.prefix,
            work = self.path("slurm").display(),
        )
    }

    /// One `[[pools]]` entry on the local backend (the stand-in as a local process).
    pub fn local_pool(&self, name: &str, extra: &str) -> String {
        format!(
            "[[pools]]\nname = \"{name}\"\nbackend = \"local\"\nmin_seconds_between_workers = 0\nstartup_grace = 5\n{extra}\n\
             [pools.local]\ncpus = 1\nmemory_mb = 1024\nstate_dir = \"{}\"\n",
            self.path("local").display(),
        )
    }

    /// Submits a job that fills the cluster's one node until the test ends (named with this
    /// test's prefix, so cancelled on drop), and waits until it runs: this test's jobs then
    /// pend with Slurm's reason `Resources`.
    pub fn fill_the_node(&self) {
        self.fill_the_node_with(&[]);
    }

    /// [`Scratch::fill_the_node`] with a blocker whose time limit is `minutes`: Slurm's
    /// backfill pass then forecasts when a job queued behind it starts (that limit's end).
    pub fn fill_the_node_for(&self, minutes: u32) {
        self.fill_the_node_with(&[&format!("--time={minutes}")]);
    }

    fn fill_the_node_with(&self, limit: &[&str]) {
        let name = format!("{}_blocker", self.prefix);
        let mut args = vec!["--parsable", "-p", "cpu", "--exclusive", "-o", "/dev/null"];
        args.extend_from_slice(limit);
        args.extend(["-J", &name, "--wrap", "sleep 300"]);
        run("sbatch", &args);
        self.wait_for("the blocker running", |jobs| {
            jobs.iter().any(|j| j.0 == "blocker" && j.2 == "RUNNING")
        });
    }

    /// Starts the manager on `pools` against `server`, one tick per second, logs in a file.
    pub fn start(&mut self, server: &str, pools: &[String]) {
        self.start_with(server, "", pools);
    }

    /// Starts the manager with extra top-level settings (`top`, TOML lines).
    pub fn start_with(&mut self, server: &str, top: &str, pools: &[String]) {
        let config = self.path("wm.toml");
        std::fs::write(
            &config,
            format!(
                "server = \"{server}\"\nsleep_time = 1\n{top}\n[worker]\nexecutable = \"{}\"\n{}",
                self.path("cl-worker-stand-in.sh").display(),
                pools.join("\n")
            ),
        )
        .unwrap();
        let log = std::fs::File::create(self.path("manager.log")).unwrap();
        let child = Command::new(BIN)
            .args(["--config", config.to_str().unwrap()])
            .env("CODALAB_USERNAME", self.user.0)
            .env("CODALAB_PASSWORD", self.user.1)
            .env("NO_COLOR", "1")
            .env_remove("CODALAB_WM_LOG")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.manager = Some(child);
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.path("manager.log")).unwrap_or_default()
    }

    /// This test's jobs as `(pool, partition, state, gres)`, from one squeue call.
    pub fn jobs(&self) -> Vec<(String, String, String, String)> {
        let out = run("squeue", &["-h", "--states=all", "-o", "%j|%P|%T|%b"]);
        out.lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split('|').collect();
                let pool = fields[0]
                    .split(&format!("{}_", self.prefix))
                    .nth(1)?
                    .split('-')
                    .next()?
                    .to_owned();
                Some((
                    pool,
                    fields[1].to_owned(),
                    fields[2].to_owned(),
                    fields[3].to_owned(),
                ))
            })
            .collect()
    }

    /// A busy worker for each running job of this test, as the real server lists the workers
    /// that checked in (`GET /rest/workers/info`; the stand-in itself never checks in).
    pub fn running_workers(&self) -> Vec<serde_json::Value> {
        let out = run("squeue", &["-h", "-t", "RUNNING", "-o", "%j"]);
        out.lines()
            .filter(|name| name.contains(&self.prefix))
            .map(|name| {
                serde_json::json!({"worker_id": format!("vm-{name}"),
                    "run_uuids": ["0x0123"], "is_terminating": false})
            })
            .collect()
    }

    /// Polls the cluster (at most 90 s) until `accept` holds for this test's jobs.
    pub fn wait_for(
        &self,
        what: &str,
        accept: impl Fn(&[(String, String, String, String)]) -> bool,
    ) -> Vec<(String, String, String, String)> {
        let mut jobs = Vec::new();
        for _ in 0..450 {
            jobs = self.jobs();
            if accept(&jobs) {
                return jobs;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "{what} never happened; jobs {jobs:?}\nlogs:\n{}",
            self.logs()
        );
    }

    /// Polls the manager's logs (at most 60 s) until they contain `text`.
    pub fn wait_for_log(&self, text: &str) {
        for _ in 0..300 {
            if self.logs().contains(text) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("the logs never said `{text}`:\n{}", self.logs());
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(mut child) = self.manager.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            for _ in 0..100 {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::write(self.path("stop"), "");
        let ids = Command::new("squeue")
            .args(["-h", "-o", "%i %j"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for line in ids.lines().filter(|l| l.contains(&self.prefix)) {
            if let Some(id) = line.split_whitespace().next() {
                let _ = Command::new("scancel").arg(id).status();
            }
        }
    }
}

/// Sets a partition's state and puts it back `UP` when dropped.
pub struct PartitionState(&'static str);

impl PartitionState {
    pub fn set(partition: &'static str, state: &str) -> Self {
        run(
            "scontrol",
            &[
                "update",
                &format!("PartitionName={partition}"),
                &format!("State={state}"),
            ],
        );
        Self(partition)
    }
}

impl Drop for PartitionState {
    fn drop(&mut self) {
        let _ = Command::new("scontrol")
            .args(["update", &format!("PartitionName={}", self.0), "State=UP"])
            .status();
    }
}

pub fn fake_server(bundles: Vec<FakeBundle>) -> (tokio::runtime::Runtime, FakeCodaLab) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(FakeCodaLab::start()).unwrap();
    server.set_bundles(bundles);
    (runtime, server)
}
