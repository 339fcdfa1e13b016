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
//! - With the REAL CodaLab server: a bundle queued on the free pool behind a job with a time
//!   limit spills to the paid one as soon as Slurm forecasts its start (`squeue --start`), and
//!   the spill says it rests on that forecast.
//! - A pending job on that DOWN partition, launched for a bundle that then went away, is
//!   withdrawn (cancelled) once the pool's `withdraw_after` has passed, with no backoff.
//! - With the REAL CodaLab server (as bob, in this test's own queue): a stand-in that runs on
//!   Slurm but never checks in with the server (as a worker of another account would look) is
//!   kept past the pool's (test-set, 5 s) `checkin_timeout`, not cancelled, and each pool
//!   backs off after its failure.

use crate::support;
use support::slurm_pools::{CLUSTER, PartitionState, Scratch, fake_server, slurm_available};
use support::{codalab_running, stage, stage_queued};

use codalab_wm_core::testing::require_service;
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::time::Duration;

#[test]
fn gpu_bundles_get_gpu_workers_and_a_pool_whose_submits_fail_backs_off() {
    let _turn = support::turn(module_path!());
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
    scratch.wait_for_log("pool broken backs off for 300 s after 1 failure(s) (submit_failed: misconfiguration; 1 of 3 in a row with this error suspend it)");
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

/// A manager on the real cluster with its `pools`, serving one staged bundle of the fake
/// server, while the `gpu` partition is DOWN: a job submitted there stays PENDING (reason
/// `PartitionDown`). Dropped in field order: the manager is stopped and its jobs cancelled
/// before the partition is UP again.
struct GpuDown {
    scratch: Scratch,
    server: FakeCodaLab,
    _runtime: tokio::runtime::Runtime,
    _down: PartitionState,
}

impl GpuDown {
    fn start(pools: impl FnOnce(&Scratch) -> Vec<String>) -> Self {
        let (runtime, server) = fake_server(vec![FakeBundle::new("alice", 1)]);
        let down = PartitionState::set("gpu", "DOWN");
        let mut scratch = Scratch::new();
        let pools = pools(&scratch);
        scratch.start(&server.url(), &pools);
        Self {
            scratch,
            server,
            _runtime: runtime,
            _down: down,
        }
    }
}

#[test]
fn a_pending_job_on_a_partition_that_cannot_start_jobs_is_replaced_on_the_other_pool() {
    let _turn = support::turn(module_path!());
    if !slurm_available() {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let GpuDown { scratch, .. } = &GpuDown::start(|scratch| {
        vec![
            scratch.pool("preferred", "gpu", 0, "cost = 0\npending_timeout = 4"),
            scratch.pool("fallback", "cpu", 0, "cost = 1"),
        ]
    });
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
    scratch.wait_for_log(
        "pool preferred backs off for 300 s after 1 failure(s) (pending_timeout: capacity)",
    );
    let logs = scratch.logs();
    assert!(logs.contains("reasons=pending_timeout"), "{logs}");
    let fallback = scratch
        .jobs()
        .into_iter()
        .filter(|j| j.0 == "fallback")
        .count();
    assert_eq!(fallback, 1, "exactly one replacement:\n{logs}");
}

/// Issue 42, item 1 on the real cluster: a launch the plan no longer needs is withdrawn. The
/// pool's partition is DOWN, so its job pends (`PartitionDown`: Slurm bills nothing for it);
/// the bundle it was launched for goes away; once the surplus has lasted the pool's
/// `withdraw_after`, the manager cancels the job (`scancel`: `CANCELLED`), says so, and does
/// not back off (the pool did nothing wrong).
#[test]
fn a_pending_job_no_bundle_needs_any_more_is_withdrawn_from_the_real_cluster() {
    let _turn = support::turn(module_path!());
    if !slurm_available() {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let GpuDown {
        scratch, server, ..
    } = &GpuDown::start(|scratch| vec![scratch.pool("queued", "gpu", 0, "withdraw_after = 2")]);
    scratch.wait_for("a pending job", |jobs| {
        jobs.iter().any(|j| j.0 == "queued" && j.2 == "PENDING")
    });
    server.set_bundles(Vec::new());
    let jobs = scratch.wait_for("the pending job withdrawn", |jobs| {
        jobs.iter().all(|j| j.0 != "queued" || j.2 == "CANCELLED")
    });
    assert_eq!(jobs.len(), 1, "one launch, none after: {jobs:?}");
    scratch.wait_for_log(
        "not needed (1 jobs count as capacity, 0 needed): cancelled before it started",
    );
    let logs = scratch.logs();
    assert!(
        !logs.contains("backs off"),
        "a withdrawal is no failure:\n{logs}"
    );
}

#[test]
fn bundles_staged_on_the_real_codalab_server_get_workers_of_the_right_pool() {
    let _turn = support::turn(module_path!());
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
    let _turn = support::turn(module_path!());
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
    scratch.wait_for_log("pool broken backs off for 300 s after 1 failure(s) (worker_unconfirmed: misconfiguration; 1 of 3");
    let jobs = scratch.wait_for("a replacement on the spare pool", |jobs| {
        jobs.iter().any(|j| j.0 == "spare")
    });
    let broken: Vec<_> = jobs.iter().filter(|j| j.0 == "broken").collect();
    assert_eq!(broken.len(), 1, "{jobs:?}");
    assert_eq!(broken[0].2, "RUNNING", "kept, not cancelled: {jobs:?}");
    scratch.wait_for_log("pool spare backs off for 300 s after 1 failure(s) (worker_unconfirmed: misconfiguration; 1 of 3");
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

/// The spill test's pools (issue #32): the free Slurm partition `cpu`, accepting a wait of
/// `spill_after` seconds, and a paid pool on the local backend. One worker each at most.
fn priced_pools(scratch: &Scratch, tag: &str, spill_after: u64) -> [String; 2] {
    let rules = format!("max = 1\ntag = \"{tag}\"");
    [
        scratch.pool(
            "cpu",
            "cpu",
            0,
            &format!("{rules}\nspill_after = {spill_after}"),
        ),
        scratch.local_pool("paid", &format!("{rules}\ncost_per_hour = 1.0")),
    ]
}

/// Starts the manager on the priced pools with a bundle staged for them on the REAL CodaLab
/// server, the real cluster's one node filled by another job (with a time limit of
/// `limit` minutes, when given: Slurm then forecasts when the next job starts), and waits
/// until Slurm holds the manager's job on the free pool (`Resources`).
fn queued_on_the_free_pool(scratch: &mut Scratch, spill_after: u64, limit: Option<u32>) {
    let tag = format!("spill-{}", scratch.prefix);
    match limit {
        Some(minutes) => scratch.fill_the_node_for(minutes),
        None => scratch.fill_the_node(),
    }
    stage_queued("alice", 1, &tag, &[]);
    let pools = priced_pools(scratch, &tag, spill_after);
    scratch.start_with(
        "http://127.0.0.1:2900",
        &format!("search = [\"tags={tag}\"]"),
        &pools,
    );
    scratch.wait_for("the free pool's job pending behind the blocker", |jobs| {
        jobs.iter().any(|j| j.0 == "cpu" && j.2 == "PENDING")
    });
}

/// The log line that says the bundle spilled to the paid pool, once it is logged.
fn spill_line(scratch: &Scratch) -> String {
    scratch.wait_for_log("spilled to paid (estimated ");
    let logs = scratch.logs();
    let line = logs.lines().find(|l| l.contains("spilled to paid"));
    line.unwrap().to_owned()
}

/// The whole number after `after` in `line`.
fn figure(line: &str, after: &str) -> u64 {
    (line.split(after).nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure after {after:?} in {line}"))
}

/// Ticks the manager has logged (one decision line of the free pool each).
fn ticks(scratch: &Scratch) -> usize {
    scratch.logs().matches("pool cpu: ").count()
}

#[test]
fn past_spill_after_a_bundle_queued_on_the_free_slurm_pool_spills_to_the_paid_one() {
    let _turn = support::turn(module_path!());
    if !slurm_available() || !require_service("codalab", codalab_running()) {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let mut scratch = Scratch::new();
    queued_on_the_free_pool(&mut scratch, 10, None);
    let line = spill_line(&scratch);
    // The reason's figure is the held job's age, past the 10 s the admin accepts, and names
    // Slurm's own reason for the hold.
    assert!(line.contains(" > spill_after 10 s (job "), "{line}");
    assert!(line.contains(": Resources)"), "{line}");
    let (theirs, ours) = (
        figure(&line, "cpu estimated "),
        figure(&line, "spilled to paid (estimated "),
    );
    assert!(theirs > 10, "{line}");
    // It went to the paid pool because that pool's own estimate is sooner (both in seconds
    // here: under 2 min).
    assert!(
        line.contains(&format!("(estimated {ours} s): cpu estimated {theirs} s")),
        "{line}"
    );
    assert!(ours < theirs, "{line}");
    scratch.wait_for_log(
        "pool paid: 1 bundles assigned, 0 active, 0 pending, 0 stopping (min=0, max=1): launch 1",
    );
    // Nothing more is bought on the queued pool: its one job still pends.
    let jobs = scratch.jobs();
    let free: Vec<_> = jobs.iter().filter(|j| j.0 == "cpu").collect();
    assert_eq!(free.len(), 1, "{jobs:?}");
    assert_eq!(free[0].2, "PENDING", "{jobs:?}");
}

/// #42 item 4: the blocker has a 10-minute limit, so Slurm's backfill pass forecasts when the
/// free pool's job starts (what `squeue --start` prints): the estimate rests on that
/// forecast, says so, and the bundle spills to the paid pool as soon as the forecast is
/// read, long before its queue age alone (the estimate without a forecast) would pass
/// `spill_after`.
#[test]
fn slurms_forecast_of_the_queued_job_is_the_estimate_and_spills_the_bundle_at_once() {
    let _turn = support::turn(module_path!());
    if !slurm_available() || !require_service("codalab", codalab_running()) {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let mut scratch = Scratch::new();
    queued_on_the_free_pool(&mut scratch, 240, Some(10));
    let line = spill_line(&scratch);
    assert!(
        line.contains(": Resources; its platform forecasts its start in ~"),
        "{line}"
    );
    // The job had waited less than `spill_after` (240 s) when it spilled: the age alone
    // ("as long again as it has waited") would not have spilled it yet.
    assert!(figure(&line, " pending ") < 240, "{line}");
    // Slurm's forecast is the blocker's 10-minute limit, less the time it has run.
    let minutes = figure(&line, "forecasts its start in ~");
    assert!((5..=10).contains(&minutes), "{line}");
}

#[test]
fn within_spill_after_the_bundle_waits_on_the_free_slurm_pool() {
    let _turn = support::turn(module_path!());
    if !slurm_available() || !require_service("codalab", codalab_running()) {
        return;
    }
    let _cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let mut scratch = Scratch::new();
    queued_on_the_free_pool(&mut scratch, 600, None);
    // Twenty ticks past the hold (twice the wait that spills in the test above): the bundle
    // still waits on the free pool, and the paid one buys nothing.
    let held_at = ticks(&scratch);
    for _ in 0..600 {
        if ticks(&scratch) >= held_at + 20 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ticks(&scratch) >= held_at + 20, "{}", scratch.logs());
    let logs = scratch.logs();
    assert!(!logs.contains("spilled to"), "{logs}");
    assert!(!logs.contains("pool paid: 1 bundles assigned"), "{logs}");
    let jobs = scratch.jobs();
    assert!(jobs.iter().all(|j| j.0 != "paid"), "{jobs:?}");
}
