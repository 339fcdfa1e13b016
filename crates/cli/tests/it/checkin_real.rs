//! Check-in awareness against the REAL CodaLab 1.7.5 server (`cargo xtask services up
//! codalab`): the manager reads the server's `GET /rest/workers/info` every tick.
//! - a REAL `cl-worker` (from that server's venv, running bundles in Docker: `services up
//!   docker`), started by the `local` backend, becomes ready-idle once it checks in and busy when
//!   the server dispatches a bundle to it;
//! - (in `pools_slurm.rs`, which has the Slurm scaffolding) on the REAL Slurm cluster, a
//!   stand-in worker that runs but never checks in is kept past the (short, test-set)
//!   `checkin_timeout` (no worker of its pool was ever seen: it may log in as another
//!   account), its bundle goes to the next pool, and each pool backs off;
//! - (in `partition.rs`) a busy real worker cut off from the server is never stopped.
//!
//! As bob, with this test's own queue and tag. No test sleeps to synchronise: each waits for
//! the manager's log lines or the server's bundle states, with a deadline. Locally a missing
//! service skips the test; under `CI=true` it fails.

use crate::support;
use support::bundles::{Server, cl_worker, docker_host, docker_in_use, docker_running};
use support::manager::Manager;
use support::{codalab_running, stage_queued, unique};

use codalab_wm_core::testing::require_service;
use std::time::Duration;

const USER: (&str, &str) = ("bob", "bobpw");
/// Time for a worker to start and check in, or a bundle to run (a loaded 2-core machine).
const WITHIN: Duration = Duration::from_secs(240);

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn stop(manager: Manager, backend_args: &[String]) {
    support::manager::stop(manager, backend_args, USER);
}

#[test]
fn a_real_worker_is_ready_idle_once_checked_in_then_busy_with_a_dispatched_bundle() {
    // No turn at the shared services: bob's worker and bundle here carry a queue of their own
    // (tag-exclusive), so the test runs beside the other files, as `partition.rs` does.
    let _docker = docker_in_use();
    if !(require_service("codalab", codalab_running())
        && require_service("docker", docker_running()))
    {
        return;
    }
    let tag = unique("checkin");
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().display().to_string();
    let worker = cl_worker().display().to_string();
    let search = format!("tags={tag}");
    // min 1: the manager starts a worker with no bundle staged; it idles up to 300 s.
    let mut args = strings(&[
        "--server",
        support::SERVER,
        "--min-workers",
        "1",
        "--max-workers",
        "1",
        "--sleep-time",
        "1",
        "--search",
        &search,
        "--worker-executable",
        &worker,
        "--worker-idle-seconds",
        "300",
        "--worker-tag",
        &tag,
        "--worker-tag-exclusive",
    ]);
    let backend = strings(&[
        "local",
        "--cpus",
        "1",
        "--memory-mb",
        "1024",
        "--state-dir",
        &state_dir,
    ]);
    args.extend(backend.iter().cloned());
    let mut manager = Manager::start(&args, USER, &[("DOCKER_HOST", docker_host())]);
    manager.wait_until("the worker to check in", WITHIN, |m| {
        m.count("workers: 0 starting, 1 ready idle, 0 busy, 0 vanished, 0 lost") > 0
    });
    let server = Server::login(USER.0, USER.1);
    let command = ("STAGE_COMMAND", "sleep 15; echo checked > out.txt");
    let uuids = stage_queued(USER.0, 1, &tag, &[command]);
    manager.wait_until("the worker to be busy", WITHIN, |m| {
        m.count("workers: 0 starting, 0 ready idle, 1 busy, 0 vanished, 0 lost") > 0
    });
    server.wait_ready(&uuids, WITHIN, || manager.log());
    assert_eq!(server.cat(&uuids[0], "out.txt").trim(), "checked");
    assert_eq!(
        manager.count("started a worker job"),
        1,
        "{}",
        manager.log()
    );
    assert_eq!(manager.count("is lost"), 0, "{}", manager.log());
    stop(manager, &backend);
}
