//! A network partition between a busy worker and the server, for real: the real
//! `cl-worker-manager` (target mode, `--worker-checkin-timeout 20`) against the REAL CodaLab
//! 1.7.5 server (`cargo xtask services up codalab`) starts the REAL `cl-worker` 1.7.5 through the
//! `local` backend; the worker runs a real bundle in Docker (`services up docker`) and reaches
//! the server only through a loopback forwarder (`--worker-server`), which the test stops for
//! 90 s while the bundle runs: longer than the server's 60 s worker timeout (it drops the worker
//! and the bundle goes `worker_offline`) and than four check-in timeouts. The manager must stop
//! nothing; once the path is back, the worker checks in again and the bundle ends `ready` with
//! its output. Locally a missing service skips the test; under `CI=true` it fails.
//!
//! The test takes no turn at the shared services ([`support::turn`]): most of its time is the
//! bundle's sleep and the cut, and nothing of it is shared (bob's bundle and worker carry a
//! queue of their own, the forwarder is its own, and no test pauses the server). It runs
//! beside the other files, holding only [`docker_in_use`] so that dockerd is not stopped
//! under its worker.

use crate::support;
use support::bundles::{Server, cl_worker, docker_host, docker_in_use, docker_running};
use support::forwarder::Forwarder;
use support::manager::{Manager, down};
use support::{codalab_running, stage_queued, unique};

use codalab_wm_core::testing::require_service;
use std::time::{Duration, Instant};

const USER: (&str, &str) = ("bob", "bobpw");
const WITHIN: Duration = Duration::from_secs(300);
/// How long the workers' path is cut.
const PARTITION: Duration = Duration::from_secs(90);

/// Lines the manager logs when it stops a job.
const STOP_LINES: [&str; 3] = [
    "is lost and stopped",
    "stopped a stuck",
    "reason=\"worker_lost\"",
];

fn manager_args(tag: &str, worker_server: &str, state_dir: &str) -> Vec<String> {
    let args = [
        "--server",
        support::SERVER,
        "--worker-server",
        worker_server,
        "--launch-mode",
        "target",
        "--worker-checkin-timeout",
        "20",
        "--min-workers",
        "0",
        "--max-workers",
        "1",
        "--min-seconds-between-workers",
        "0",
        "--sleep-time",
        "2",
        "--worker-idle-seconds",
        "10",
        "--worker-tag",
        tag,
        "--worker-tag-exclusive",
        "--search",
        &format!("tags={tag}"),
        "--worker-executable",
        &cl_worker().display().to_string(),
        "local",
        "--cpus",
        "1",
        "--memory-mb",
        "1024",
        "--state-dir",
        state_dir,
    ];
    args.iter().map(|s| s.to_string()).collect()
}

fn no_stop(manager: &Manager) {
    let log = manager.log();
    for line in STOP_LINES {
        assert!(
            !log.contains(line),
            "the manager stopped a job ({line}):\n{log}"
        );
    }
}

/// Polls the bundle's state every 0.5 s until `done` holds (at most [`WITHIN`]), checking
/// each time that the manager stopped nothing.
fn wait_state(server: &Server, uuid: &str, manager: &Manager, done: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + WITHIN;
    loop {
        no_stop(manager);
        let state = server.info(uuid).state;
        if done(&state) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "bundle {uuid} stuck in {state}:\n{}",
            manager.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_busy_worker_cut_off_from_the_server_is_not_stopped_and_its_bundle_ends_ready() {
    let _docker = docker_in_use();
    if !(require_service("codalab", codalab_running())
        && require_service("docker", docker_running()))
    {
        return;
    }
    let upstream = support::SERVER
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let mut path = Forwarder::start(upstream);
    let tag = unique("partw");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::login(USER.0, USER.1);
    let command = [
        ("STAGE_COMMAND", "sleep 150; echo survived > out.txt"),
        ("STAGE_DEPS", ""),
    ];
    let bundle = stage_queued(USER.0, 1, &tag, &command).remove(0);
    let state_dir = dir.path().display().to_string();
    let args = manager_args(&tag, &path.url(), &state_dir);
    let env = [("DOCKER_HOST", docker_host())];
    let local = args[args.iter().position(|a| a == "local").unwrap()..].to_vec();
    // Stops the worker even when an assertion fails (dropped after the manager).
    let _down = Down(local);
    let mut manager = Manager::start(&args, USER, &env);

    wait_state(&server, &bundle, &manager, |s| s == "running");
    manager.wait_until("the worker to be busy", WITHIN, |m| {
        m.log().contains(" 1 busy")
    });
    path.stop();
    let cut = Instant::now();
    // The server drops the silent worker after 60 s; the manager notes it vanished.
    manager.wait_until("the worker to vanish", WITHIN, |m| {
        m.log().contains("vanished from the server's list")
    });
    wait_state(&server, &bundle, &manager, |s| s == "worker_offline");
    // Keep the path cut for the rest of the partition, watching that nothing is stopped.
    while cut.elapsed() < PARTITION {
        no_stop(&manager);
        std::thread::sleep(Duration::from_millis(500));
    }
    path.start_again();
    wait_state(&server, &bundle, &manager, |s| s == "ready");
    assert_eq!(server.cat(&bundle, "out.txt").trim(), "survived");
    no_stop(&manager);
    assert_eq!(
        manager.count("started a worker job"),
        1,
        "{}",
        manager.log()
    );
}

/// `down` for the test's backend arguments when dropped.
struct Down(Vec<String>);

impl Drop for Down {
    fn drop(&mut self) {
        let out = down(&self.0, USER);
        if !std::thread::panicking() {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
