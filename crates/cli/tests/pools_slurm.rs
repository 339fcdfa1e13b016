//! `cl-worker-manager` with two or three `[[pools]]` on the real Slurm cluster: real
//! `slurmctld`/`slurmd` (Debian's slurm-wlm 22.05, one node, partitions `cpu` and `gpu` with 2
//! fake GPUs) started by `cargo xtask services up slurm`, and the in-process fake CodaLab server
//! (`codalab_wm_fake_codalab`) serving the staged bundles. Workers are a stand-in script that
//! runs until the test ends. Skipped locally when the cluster is not running; under `CI=true` a
//! missing cluster fails the tests.
//!
//! - GPU bundles get GPU workers (partition `gpu`, `gres/gpu`), CPU bundles CPU workers, and a
//!   pool whose submits fail (a partition that does not exist) backs off and says so.
//! - With the REAL CodaLab 1.7.5 server (`cargo xtask services up codalab`) and bundles staged
//!   by real `cl run`: a GPU bundle gets a worker of the GPU pool and a CPU bundle one of the
//!   cheaper CPU pool.
//! - A pool whose partition cannot start jobs (`scontrol update PartitionName=gpu State=DOWN`,
//!   restored by a drop guard) has its pending job stopped after `pending_timeout` and replaced
//!   on the other pool.
//! - With the REAL CodaLab server (as bob, in this test's own queue): a stand-in that runs on
//!   Slurm but never checks in with the server (as a worker of another account would look) is
//!   kept past the pool's (test-set, 5 s) `checkin_timeout`, not cancelled, and each pool
//!   backs off after its failure.

mod support;
use support::{codalab_running, stage, stage_queued};

use codalab_wm_core::testing::require_service;
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

/// The tests change partitions of the one cluster: one at a time.
static CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

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

fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Stand-in for cl-worker: runs until the file `stop` appears next to it (at most 5 minutes).
const STAND_IN: &str = "#!/bin/sh\ndir=$(dirname \"$0\")\ni=0\nwhile [ ! -e \"$dir/stop\" ] && [ $i -lt 1500 ]; do i=$((i + 1)); sleep 0.2; done\n";

/// A scratch directory with the stand-in, the manager's logs and the jobs' files; on drop
/// stops the stand-ins, cancels this test's jobs and kills the manager if still running.
struct Scratch {
    dir: tempfile::TempDir,
    prefix: String,
    manager: Option<Child>,
    /// The CodaLab user the manager logs in as.
    user: (&'static str, &'static str),
}

impl Scratch {
    fn new() -> Self {
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

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// One `[[pools]]` entry on the real cluster; its jobs are named `<user>-<prefix>_<pool>-…`.
    fn pool(&self, name: &str, partition: &str, gpus: u32, extra: &str) -> String {
        format!(
            "[[pools]]\nname = \"{name}\"\nbackend = \"slurm-batch\"\nmin_seconds_between_workers = 0\nstartup_grace = 5\n{extra}\n\
             [pools.slurm_batch]\njob_name = \"{prefix}_{name}\"\npartition = \"{partition}\"\ncpus = 1\n\
             gpus = {gpus}\nmemory_mb = 1024\ntime = \"10\"\nslurm_work_dir = \"{work}\"\n",
            prefix = self.prefix,
            work = self.path("slurm").display(),
        )
    }

    /// Starts the manager on `pools` against `server`, one tick per second, logs in a file.
    fn start(&mut self, server: &str, pools: &[String]) {
        self.start_with(server, "", pools);
    }

    /// Starts the manager with extra top-level settings (`top`, TOML lines).
    fn start_with(&mut self, server: &str, top: &str, pools: &[String]) {
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

    fn logs(&self) -> String {
        std::fs::read_to_string(self.path("manager.log")).unwrap_or_default()
    }

    /// This test's jobs as `(pool, partition, state, gres)`, from one squeue call.
    fn jobs(&self) -> Vec<(String, String, String, String)> {
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
    fn running_workers(&self) -> Vec<serde_json::Value> {
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
    fn wait_for(
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
    fn wait_for_log(&self, text: &str) {
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
struct PartitionState(&'static str);

impl PartitionState {
    fn set(partition: &'static str, state: &str) -> Self {
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

fn fake_server(bundles: Vec<FakeBundle>) -> (tokio::runtime::Runtime, FakeCodaLab) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(FakeCodaLab::start()).unwrap();
    server.set_bundles(bundles);
    (runtime, server)
}

#[test]
fn gpu_bundles_get_gpu_workers_and_a_pool_whose_submits_fail_backs_off() {
    if !slurm_available() {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let (_runtime, server) = fake_server(Vec::new());
    let mut scratch = Scratch::new();
    let pools = [
        // Cheapest and fits the cpu bundle, but its partition does not exist.
        scratch.pool("broken", "nosuch", 0, "cost = 0"),
        scratch.pool("cpu", "cpu", 0, "cost = 1"),
        scratch.pool("gpu", "gpu", 1, "cost = 2"),
    ];
    scratch.start(&server.url(), &pools);
    // As the real server does once a worker checks in, a bundle leaves `staged` when the
    // worker of its pool runs, and the server lists that worker, busy.
    let cpu_bundle = FakeBundle::new("alice", 1);
    let gpu_bundle = FakeBundle {
        gpus: 1,
        ..FakeBundle::new("alice", 2)
    };
    let jobs = scratch.wait_for("a running cpu worker and a running gpu worker", |jobs| {
        let running = |pool: &str| jobs.iter().any(|j| j.0 == pool && j.2 == "RUNNING");
        let mut staged = Vec::new();
        if !running("cpu") {
            staged.push(cpu_bundle.clone());
        }
        if !running("gpu") {
            staged.push(gpu_bundle.clone());
        }
        let done = staged.is_empty();
        // Bundles first: a tick between the two calls never sees a busy worker with its bundle
        // still staged.
        server.set_bundles(staged);
        server.set_workers(scratch.running_workers());
        done
    });
    let cpu: Vec<_> = jobs.iter().filter(|j| j.0 == "cpu").collect();
    let gpu: Vec<_> = jobs.iter().filter(|j| j.0 == "gpu").collect();
    assert_eq!(cpu.len(), 1, "{jobs:?}");
    assert_eq!(gpu.len(), 1, "{jobs:?}");
    assert_eq!(
        cpu[0].1, "cpu",
        "the cpu worker runs in partition cpu: {jobs:?}"
    );
    assert!(
        !cpu[0].3.contains("gpu"),
        "no GPU for the cpu worker: {jobs:?}"
    );
    assert_eq!(
        gpu[0].1, "gpu",
        "the gpu worker runs in partition gpu: {jobs:?}"
    );
    assert!(
        gpu[0].3.contains("gpu:1"),
        "one GPU for the gpu worker: {jobs:?}"
    );
    assert!(!jobs.iter().any(|j| j.0 == "broken"), "{jobs:?}");
    scratch.wait_for_log("pool broken backs off for 300 s after 1 failure(s) (submit_failed)");
    scratch.wait_for_log("reasons=backing_off");
    let logs = scratch.logs();
    assert!(
        logs.contains("Invalid partition name specified"),
        "sbatch's message is logged:\n{logs}"
    );
    // Nothing staged any more: the next ticks launch nothing.
    let ticks = scratch.logs().matches("pool gpu:").count();
    for _ in 0..150 {
        if scratch.logs().matches("pool gpu:").count() >= ticks + 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(scratch.jobs().len(), 2, "{}", scratch.logs());
}

#[test]
fn a_pending_job_on_a_partition_that_cannot_start_jobs_is_replaced_on_the_other_pool() {
    if !slurm_available() {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let (_runtime, server) = fake_server(vec![FakeBundle::new("alice", 1)]);
    // Jobs submitted to a DOWN partition stay PENDING (reason PartitionDown). Declared first,
    // dropped last: the manager is stopped and the jobs cancelled before the partition is UP.
    let _down = PartitionState::set("gpu", "DOWN");
    let mut scratch = Scratch::new();
    let pools = [
        scratch.pool("preferred", "gpu", 0, "cost = 0\npending_timeout = 4"),
        scratch.pool("fallback", "cpu", 0, "cost = 1"),
    ];
    scratch.start(&server.url(), &pools);
    scratch.wait_for("a pending job on the preferred pool", |jobs| {
        jobs.iter().any(|j| j.0 == "preferred" && j.2 == "PENDING")
    });
    let jobs = scratch.wait_for("the replacement on the fallback pool", |jobs| {
        jobs.iter().any(|j| j.0 == "fallback")
    });
    assert!(
        jobs.iter().all(|j| j.0 != "preferred" || j.2 != "RUNNING"),
        "{jobs:?}"
    );
    scratch.wait_for("the stuck job cancelled", |jobs| {
        jobs.iter()
            .filter(|j| j.0 == "preferred")
            .all(|j| j.2 == "CANCELLED")
    });
    scratch.wait_for_log("stopped a stuck pending job; its demand goes to the next fitting pool");
    scratch.wait_for_log("pool preferred backs off for 300 s after 1 failure(s) (pending_timeout)");
    let logs = scratch.logs();
    assert!(logs.contains("reasons=pending_timeout"), "{logs}");
    let fallback = scratch
        .jobs()
        .into_iter()
        .filter(|j| j.0 == "fallback")
        .count();
    assert_eq!(fallback, 1, "exactly one replacement:\n{logs}");
}

#[test]
fn bundles_staged_on_the_real_codalab_server_get_workers_of_the_right_pool() {
    if !slurm_available() || !require_service("codalab", codalab_running()) {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let mut scratch = Scratch::new();
    let tag = format!("pools-{}", scratch.prefix);
    let tags = format!("--tags={tag}");
    stage(
        1,
        &["--request-cpus", "1", "--request-memory", "256m", &tags],
    );
    stage(
        1,
        &[
            "--request-cpus",
            "1",
            "--request-gpus",
            "1",
            "--request-memory",
            "256m",
            &tags,
        ],
    );
    // The stand-in never checks in, so the real server keeps both bundles staged: max = 1 per
    // pool keeps each pool at one worker.
    let pools = [
        scratch.pool("cpu", "cpu", 0, "cost = 1\nmax = 1"),
        scratch.pool("gpu", "gpu", 1, "cost = 2\nmax = 1"),
    ];
    scratch.start_with(
        "http://127.0.0.1:2900",
        &format!("search = [\"tags={tag}\"]"),
        &pools,
    );
    let jobs = scratch.wait_for("a running worker in each pool", |jobs| {
        ["cpu", "gpu"]
            .iter()
            .all(|pool| jobs.iter().any(|j| j.0 == *pool && j.2 == "RUNNING"))
    });
    let logs = scratch.logs();
    assert!(logs.contains("pool cpu: 1 bundles assigned"), "{logs}");
    assert!(logs.contains("pool gpu: 1 bundles assigned"), "{logs}");
    let cpu: Vec<_> = jobs.iter().filter(|j| j.0 == "cpu").collect();
    let gpu: Vec<_> = jobs.iter().filter(|j| j.0 == "gpu").collect();
    assert_eq!((cpu.len(), gpu.len()), (1, 1), "{jobs:?}");
    assert_eq!(cpu[0].1, "cpu", "{jobs:?}");
    assert!(!cpu[0].3.contains("gpu"), "{jobs:?}");
    assert_eq!(gpu[0].1, "gpu", "{jobs:?}");
    assert!(gpu[0].3.contains("gpu:1"), "{jobs:?}");
}

#[test]
fn workers_nobody_sees_check_in_are_kept_and_each_pool_backs_off() {
    if !slurm_available() || !require_service("codalab", codalab_running()) {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let mut scratch = Scratch::new();
    scratch.user = ("bob", "bobpw");
    let tag = format!("lost-{}", scratch.prefix);
    stage_queued("bob", 1, &tag, &[]);
    let rules = |cost: u32| format!("cost = {cost}\nmax = 1\ntag = \"{tag}\"\ncheckin_timeout = 5");
    let pools = [
        scratch.pool("broken", "cpu", 0, &rules(1)),
        scratch.pool("spare", "cpu", 0, &rules(2)),
    ];
    scratch.start_with(
        "http://127.0.0.1:2900",
        &format!("search = [\"tags={tag}\"]"),
        &pools,
    );
    scratch
        .wait_for_log("pool broken workers: 1 starting, 0 ready idle, 0 busy, 0 vanished, 0 lost");
    // The stand-in runs but never checks in, as a worker logged in as another account would
    // look to this manager: it is kept, and the pool backs off instead of relaunching.
    scratch.wait_for_log("no worker of this pool has been seen checking in yet");
    scratch.wait_for_log("pool broken backs off for 300 s after 1 failure(s) (worker_unconfirmed)");
    let jobs = scratch.wait_for("a replacement on the spare pool", |jobs| {
        jobs.iter().any(|j| j.0 == "spare")
    });
    let broken: Vec<_> = jobs.iter().filter(|j| j.0 == "broken").collect();
    assert_eq!(broken.len(), 1, "{jobs:?}");
    assert_eq!(broken[0].2, "RUNNING", "kept, not cancelled: {jobs:?}");
    scratch.wait_for_log("pool spare backs off for 300 s after 1 failure(s) (worker_unconfirmed)");
    let logs = scratch.logs();
    assert!(
        logs.contains("give them the manager's account; else check the worker image"),
        "{logs}"
    );
    assert_eq!(logs.matches("is lost and stopped").count(), 0, "{logs}");
    assert_eq!(
        logs.matches("worker_lost would stop it").count(),
        2,
        "each kept job logged once:\n{logs}"
    );
}
