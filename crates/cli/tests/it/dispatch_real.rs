//! The manager planning as the server dispatches (`codalab_wm_core::dispatch`), against the
//! REAL CodaLab 1.7.5 server (`cargo xtask services up codalab`: its REST API and its bundle
//! manager's real dispatch) and the REAL `cl-worker` 1.7.5 running the bundles in Docker
//! (`services up docker`), through the `local` backend. Each test uses its own tag and queue
//! (tag-exclusive workers), so no other test's worker or bundle mixes in; none sleeps to
//! synchronise: each polls the server's bundle states with a deadline. Locally a missing
//! service skips the test; under `CI=true` it fails.

use crate::support;
use support::bundles::{Server, cl_worker, docker_host, docker_running};
use support::manager::{Manager, stop};
use support::{codalab_running, set_quota, stage_queued, unique};

use codalab_wm_core::testing::require_service;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// Workers start, run and upload in ~8 s each (measured); a wide margin for a loaded machine.
const READY_WITHIN: Duration = Duration::from_secs(240);

fn services_up() -> bool {
    require_service("codalab", codalab_running()) && require_service("docker", docker_running())
}

/// A target-mode manager of `local` workers with `cpus` CPUs, tag-exclusive to `tag`, that
/// may launch `max` at once.
fn args(tag: &str, cpus: u32, max: u32, dir: &Path) -> Vec<String> {
    let max = max.to_string();
    let flags = [
        "--server",
        support::SERVER,
        "--min-workers",
        "0",
        "--max-workers",
        &max,
        "--launch-mode",
        "target",
        "--max-launches-per-tick",
        &max,
        "--min-seconds-between-workers",
        "0",
        "--sleep-time",
        "2",
        "--worker-idle-seconds",
        "10",
        "--search",
        &format!("tags={tag}"),
        "--worker-tag",
        tag,
        "--worker-tag-exclusive",
        "--worker-executable",
        &cl_worker().display().to_string(),
    ];
    let mut args: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    args.extend(["--listen".to_owned(), "127.0.0.1:0".to_owned()]);
    args.extend(local_args(cpus, dir));
    args
}

/// The value of sample `name` (labels included) in a scrape.
fn sample(scrape: &str, name: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

fn local_args(cpus: u32, dir: &Path) -> Vec<String> {
    let cpus = cpus.to_string();
    let dir = dir.display().to_string();
    [
        "local",
        "--cpus",
        &cpus,
        "--memory-mb",
        "2048",
        "--state-dir",
        &dir,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The workers that ran `uuids`, as the server names them.
fn remotes(server: &Server, uuids: &[String]) -> BTreeSet<String> {
    uuids
        .iter()
        .map(|u| {
            server
                .info(u)
                .remote
                .expect("a ready bundle names its worker")
        })
        .collect()
}

/// The most jobs (active + pending) a pool decision line of the log reported.
fn most_jobs(log: &str) -> usize {
    let field = |line: &str, name: &str| -> Option<usize> {
        let rest = line.split(&format!(" {name}=")).nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    };
    log.lines()
        .filter(|l| l.contains(" bundles assigned, "))
        .filter_map(|l| Some(field(l, "active")? + field(l, "pending")?))
        .max()
        .unwrap_or(0)
}

#[test]
fn four_one_cpu_bundles_buy_two_two_cpu_workers_and_the_server_packs_them_so() {
    let _turn = support::turn(module_path!());
    if !services_up() {
        return;
    }
    let user = ("bob", "bobpw");
    let tag = unique("pack");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::login(user.0, user.1);
    // Each bundle runs a few seconds, so that two run side by side on a worker.
    let command = ("STAGE_COMMAND", "sleep 5; echo packed-{i} > out.txt");
    let bundles = stage_queued(user.0, 4, &tag, &[command]);
    let mut manager = Manager::start(
        &args(&tag, 2, 4, dir.path()),
        user,
        &[("DOCKER_HOST", docker_host())],
    );
    server.wait_ready(&bundles, READY_WITHIN, || manager.log());
    let launched = manager.count("started a worker job");
    assert_eq!(
        launched,
        2,
        "4 one-CPU bundles on two-CPU workers:\n{}",
        manager.log()
    );
    assert!(manager.count("packed") > 0, "{}", manager.log());
    // The real bundle manager put them two a worker, as the model said it would.
    assert_eq!(remotes(&server, &bundles).len(), 2, "{}", manager.log());
    // Each bundle's first estimate (a new worker's check-in) was scored when it left staged.
    let scored = r#"codalab_wm_start_estimate_error_seconds_count{kind="worker_checkin"}"#;
    manager.wait_until("the four estimates to be scored", READY_WITHIN, |m| {
        sample(&m.get("/metrics"), scored) == Some(4.0)
    });
    let scrape = manager.get("/metrics");
    let sum = r#"codalab_wm_start_estimate_error_seconds_sum{kind="worker_checkin"}"#;
    eprintln!(
        "mean estimate error: {:?} s",
        sample(&scrape, sum).map(|s| s / 4.0)
    );
    stop(manager, &local_args(2, dir.path()), user);
}

#[test]
fn bundles_past_their_owners_quota_buy_no_worker_of_the_root_user() {
    let _turn = support::turn(module_path!());
    if !services_up() {
        return;
    }
    // The manager runs as the root user: its workers are shared, and the server gives carol
    // (quota 1) one bundle at a time on them.
    let root = ("codalab", "codalab");
    set_quota("carol", 1);
    let tag = unique("quota");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::login(root.0, root.1);
    let bundles = stage_queued(
        "carol",
        3,
        &tag,
        &[("STAGE_COMMAND", "echo quota-{i} > out.txt")],
    );
    let manager = Manager::start(
        &args(&tag, 1, 3, dir.path()),
        root,
        &[("DOCKER_HOST", docker_host())],
    );
    server.wait_ready(&bundles, READY_WITHIN, || manager.log());
    assert_eq!(
        most_jobs(&manager.log()),
        1,
        "one worker at a time for an owner with quota 1:\n{}",
        manager.log()
    );
    assert!(manager.count("quota_exhausted") > 0, "{}", manager.log());
    stop(manager, &local_args(1, dir.path()), root);
    set_quota("carol", 100);
}
