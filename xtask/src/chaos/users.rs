//! The "failing users endpoint" scenario (issue 40, review 2026-11-27 §12). A manager logged in
//! as the root user reads the `parallel_run_quota` of each staged bundle's owner (`GET
//! /rest/users/<id>`) for the dispatch model. Here four owners have bundles staged and the
//! endpoint (through the proxy) answers 502 to every read. The manager must keep ticking, plan
//! with those quotas unknown, and ask the endpoint a bounded number of times: at most
//! [`READS_PER_TICK`] in one tick, and after a failure none for [`BACKOFF`]. Before the fix it
//! asked every owner on every tick.

use super::event::Event;
use super::harness;
use super::scenarios::{Findings, Setup};
use crate::proxy::Fault;
use anyhow::{Result, ensure};
use std::time::Duration;

/// The owners whose bundles are staged (each a user `services up codalab` makes).
const OWNERS: [&str; 4] = ["alice", "bob", "carol", "bench"];
/// The root user the manager logs in as.
const ROOT: (&str, &str) = ("codalab", "codalab");
/// The manager's bound on quota reads in one tick (`QUOTA_READS_PER_TICK` in core).
const READS_PER_TICK: u64 = 4;
/// The users endpoint's first backoff after a failed read (30 s in core, doubling).
const BACKOFF: Duration = Duration::from_secs(30);
/// How long the endpoint fails.
const FAILING: Duration = Duration::from_secs(45);

/// A target-mode tick: the pool's line (`N bundles assigned, …`, with `demand`).
fn is_pool_tick(event: &Event) -> bool {
    event.number("demand").is_some()
}

pub fn users_failing(setup: &Setup) -> Result<Findings> {
    let tag = format!("{}-owners", setup.spec.job_name);
    let mut staged = Vec::new();
    for owner in OWNERS {
        let uuids = harness::stage_bundles_as(owner, 1, &tag)?;
        staged.extend(uuids);
    }
    let result = watch(setup, &tag);
    harness::remove_bundles_as(ROOT.0, &staged);
    result
}

fn watch(setup: &Setup, tag: &str) -> Result<Findings> {
    let mut findings = Findings::default();
    setup.proxy.set_scoped(
        Fault::Reply {
            status: 502,
            content_type: "text/html",
            body: "<html><body><h1>502 Bad Gateway</h1></body></html>".into(),
        },
        "/rest/users/",
    );
    let mut command = harness::manager_command(&setup.spec.dir, &setup.spec.server);
    command
        .args(["--min-workers", "0", "--max-workers", "2"])
        .args(["--launch-mode", "target", "--sleep-time", "1"])
        .args(["--min-seconds-between-workers", "0"])
        .args(["--search", &format!("tags={tag}")])
        .arg("--worker-executable")
        .arg(harness::stand_in_worker(&setup.spec.dir)?)
        .args([
            "slurm-batch",
            "--partition",
            "cpu",
            "--cpus",
            "1",
            "--gpus",
            "0",
        ])
        .args(["--memory-mb", "64", "--job-name", &setup.spec.job_name])
        .arg("--slurm-work-dir")
        .arg(setup.spec.dir.join("slurm-users"))
        .env("CODALAB_USERNAME", ROOT.0)
        .env("CODALAB_PASSWORD", ROOT.1);
    let mut manager = harness::start(command, &setup.spec.dir, "users-failing")?;
    let before = setup.proxy.faulted();
    let first = manager.wait_for_event(0, Duration::from_secs(40), "a first tick", is_pool_tick)?;
    let cursor = manager.cursor();
    // Bounded: the endpoint fails for FAILING, the manager ticking throughout.
    let mut spent = Duration::ZERO;
    while spent < FAILING {
        ensure!(manager.alive()?, "manager gone");
        std::thread::sleep(Duration::from_millis(500));
        spent += Duration::from_millis(500);
    }
    let reads = setup.proxy.faulted() - before;
    let ticks = manager
        .events_since(cursor)
        .iter()
        .filter(|e| is_pool_tick(e))
        .count();
    setup.proxy.set(crate::proxy::Fault::Pass);
    manager.stop()?;
    ensure!(
        first.number("demand") == Some(OWNERS.len() as u64),
        "the root manager planned for {:?} bundles, not the {} of {} owners",
        first.number("demand"),
        OWNERS.len(),
        OWNERS.len()
    );
    ensure!(
        reads > 0,
        "the root manager never read a quota: the scenario proved nothing"
    );
    // One tick's batch, then one per backoff (which only grows) over the window.
    let windows = 2 + FAILING.as_secs() / BACKOFF.as_secs();
    let bound = READS_PER_TICK * windows;
    ensure!(
        reads <= bound,
        "{reads} reads of a failing users endpoint in {} s ({ticks} ticks): more than {bound} \
         ({READS_PER_TICK} a tick, then none for {} s after a failure)",
        FAILING.as_secs(),
        BACKOFF.as_secs()
    );
    ensure!(ticks >= 3, "only {ticks} ticks in {} s", FAILING.as_secs());
    findings.faults += reads;
    findings.notes.push(format!(
        "{} owners, users endpoint 502 for {} s: {reads} reads (bound {bound}), {ticks} ticks",
        OWNERS.len(),
        FAILING.as_secs()
    ));
    Ok(findings)
}
