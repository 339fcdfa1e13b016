//! The tracker's rules, step by step with hand-made times (pure), and the lines as `simulate
//! --trace` reads them.

use super::*;
use crate::backend::{JobState, WorkerJob};
use crate::bundle::StagedBundle;
use crate::checkin::CheckedInWorker;
use crate::simulate::Workload;

const UNIQUE: &str = "0123456789abcdef0123456789abcdef";

fn bundle(uuid: &str, created: i64) -> StagedBundle {
    StagedBundle {
        request_cpus: 2,
        request_memory: 1 << 30,
        request_queue: "gpu".into(),
        owner: Some("alice".into()),
        created: Some(created),
        ..StagedBundle::new(uuid)
    }
}

fn worker(runs: &[&str]) -> CheckedInWorker {
    serde_json::from_value(serde_json::json!({
        "worker_id": format!("codalab-worker-{UNIQUE}"),
        "run_uuids": runs,
    }))
    .unwrap()
}

fn job(state: JobState) -> WorkerJob {
    WorkerJob::new(format!("cpu-{UNIQUE}"), state)
}

fn run(uuid: &str, created: i64, state: &str, started: f64, ended: f64) -> RunInfo {
    RunInfo {
        bundle: bundle(uuid, created),
        state: state.into(),
        started: Some(started),
        last_updated: Some(ended),
    }
}

/// A bundle staged at 1005, seen staged at tick 1010, on a pool's worker at 1020, gone at
/// 1030: its line has the server's times and the pool; its worker's line its life.
#[test]
fn a_run_is_written_with_the_servers_times_once_it_left_the_workers() {
    let mut t = Tracker::default();
    t.staged(&[], true, 1000.0);
    t.listed("cpu", &[job(JobState::Pending)], 1000.0);
    t.staged(&[bundle("0xa", 1005)], true, 1010.0);
    t.listed("cpu", &[job(JobState::Active)], 1015.0);
    t.workers(&[worker(&["0xa"])], 1020.0);
    t.staged(&[], true, 1020.0);
    assert!(
        t.to_look_up(1020.0).is_empty(),
        "on a worker: not looked up"
    );
    t.workers(&[worker(&[])], 1030.0);
    t.staged(&[], true, 1030.0);
    let asked = t.to_look_up(1030.0);
    assert_eq!(asked, ["0xa"]);
    t.looked_up(
        &asked,
        Ok(vec![run("0xa", 1005, "ready", 1012.0, 1027.0)]),
        1030.0,
    );
    let lines = t.take_lines();
    let Some(Line::Bundle(line)) = lines.first() else {
        panic!("{lines:?}")
    };
    assert_eq!((line.time, line.wait, line.duration), (1005.0, 7.0, 15.0));
    assert_eq!((line.pool.as_str(), line.owner.as_str()), ("cpu", "alice"));
    assert_eq!(
        (line.cpus, line.memory, line.queue.as_str()),
        (2, 1 << 30, "gpu")
    );
    assert_eq!(t.followed(), 0);
    t.listed("cpu", &[], 1300.0);
    let lines = t.take_lines();
    let [Line::Worker(w)] = lines.as_slice() else {
        panic!("{lines:?}")
    };
    assert_eq!(
        (w.time, w.placed, w.checked_in),
        (1000.0, Some(15.0), Some(20.0))
    );
    assert_eq!((w.active, w.runs, w.end.as_str()), (285.0, 1, "gone"));
}

/// `created` is clamped to what the ticks saw: after the last complete read without it, and
/// no later than the tick that first saw it (a bundle made long before it was staged, as one
/// waiting for its dependencies).
#[test]
fn the_staged_time_is_within_what_the_ticks_saw() {
    let mut t = Tracker::default();
    t.staged(&[], true, 1000.0);
    t.staged(&[bundle("0xa", 100)], false, 1010.0);
    t.workers(&[], 1020.0);
    t.staged(&[], false, 1020.0);
    let asked = t.to_look_up(1020.0);
    t.looked_up(
        &asked,
        Ok(vec![run("0xa", 100, "failed", 1015.0, 1016.0)]),
        1020.0,
    );
    let lines = t.take_lines();
    let [Line::Bundle(line)] = lines.as_slice() else {
        panic!("{lines:?}")
    };
    assert_eq!(
        (line.time, line.wait, line.state.as_str()),
        (1000.0, 15.0, "failed")
    );
    assert_eq!(line.pool, "", "no pool's worker was seen running it");
}

/// Still in flight: looked up again after a backoff, given up after twelve tries; deleted or
/// killed before a worker took it: given up at once, with why.
#[test]
fn what_cannot_be_followed_is_said_not_guessed() {
    let mut t = Tracker::default();
    t.staged(
        &[bundle("0xa", 1), bundle("0xb", 1), bundle("0xc", 1)],
        true,
        10.0,
    );
    t.workers(&[], 20.0);
    t.staged(&[], true, 20.0);
    let asked = t.to_look_up(20.0);
    assert_eq!(asked.len(), 3);
    let killed = RunInfo {
        started: None,
        ..run("0xb", 1, "killed", 0.0, 15.0)
    };
    let running = run("0xa", 1, "running", 12.0, 19.0);
    t.looked_up(&asked, Ok(vec![running, killed]), 20.0);
    let whys: Vec<String> = (t.take_lines().into_iter())
        .map(|l| match l {
            Line::Unmodelled(u) => format!("{} {}", u.uuid, u.why),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        whys,
        [
            "0xb it ended before a worker took it",
            "0xc the server no longer lists it (deleted)"
        ]
    );
    // Looked up again 10 s later (a run the server still finalizes is `ready` by then), the
    // wait doubling to an hour, given up at the twelfth try.
    let mut at = 20.0;
    let mut waits = Vec::new();
    for _ in 0..11 {
        let wait = (1..=3600)
            .map(f64::from)
            .find(|w| !t.to_look_up(at + w).is_empty())
            .unwrap();
        waits.push(wait);
        at += wait;
        t.looked_up(&["0xa".into()], Err(()), at);
    }
    assert_eq!(
        waits,
        [
            10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0, 1280.0, 2560.0, 3600.0, 3600.0
        ]
    );
    let lines = t.take_lines();
    assert!(
        matches!(lines.as_slice(), [Line::Unmodelled(u)] if u.why.contains("could not be read")),
        "{lines:?}"
    );
    assert_eq!(t.followed(), 0);
}

/// A failed job is written once though its platform keeps listing it; a decision only when it
/// changed.
#[test]
fn a_failed_job_and_an_unchanged_decision_are_written_once() {
    let mut t = Tracker::default();
    t.listed("cpu", &[job(JobState::Pending)], 0.0);
    t.listed("cpu", &[job(JobState::Failed)], 10.0);
    t.listed("cpu", &[job(JobState::Failed)], 20.0);
    t.listed("cpu", &[], 30.0);
    let ended = WorkerJob::new(format!("gpu-{UNIQUE}"), JobState::Ended);
    t.listed(
        "gpu",
        &[WorkerJob::new(format!("gpu-{UNIQUE}"), JobState::Active)],
        30.0,
    );
    t.listed("gpu", std::slice::from_ref(&ended), 40.0);
    t.listed("gpu", &[ended], 50.0);
    let lines = t.take_lines();
    assert!(
        matches!(lines.as_slice(), [Line::Worker(w), Line::Worker(e)]
            if w.end == "failed" && w.placed.is_none() && e.end == "gone" && e.active == 10.0),
        "{lines:?}"
    );
    let decision = |launches| crate::pools::PoolsDecision {
        pools: vec![crate::pools::PoolDecision {
            pool: "cpu".into(),
            launches,
            ..Default::default()
        }],
        ..Default::default()
    };
    t.decided(&decision(1), 0.0);
    t.decided(&decision(1), 5.0);
    t.decided(&decision(0), 10.0);
    assert_eq!(t.take_lines().len(), 2);
}

/// The history reads as a `simulate --trace`: its bundle lines are the trace, every other
/// line is skipped.
#[test]
fn the_history_is_a_trace() {
    let mut t = Tracker::default();
    t.settings(0.0, 5.0, &[]);
    t.event(1.0, "cpu", "worker_launched", "launched");
    t.staged(&[bundle("0xa", 1005), bundle("0xb", 1009)], true, 1010.0);
    t.workers(&[], 1030.0);
    t.staged(&[], true, 1030.0);
    let asked = t.to_look_up(1030.0);
    let runs = vec![
        run("0xa", 1005, "ready", 1012.0, 1027.0),
        run("0xb", 1009, "ready", 1012.0, 1014.5),
    ];
    t.looked_up(&asked, Ok(runs), 1030.0);
    let text: String = (t.take_lines().iter())
        .map(|l| serde_json::to_string(l).unwrap() + "\n")
        .collect();
    let workload = Workload::parse(&text).unwrap();
    assert_eq!(workload.arrivals.len(), 2, "{text}");
    let (a, b) = (workload.arrivals[0], workload.arrivals[1]);
    assert_eq!((a.at_ms, a.duration_ms, a.cpus), (0, 15_000, 2));
    assert_eq!((b.at_ms, b.duration_ms), (4_000, 2_500));
    assert_eq!(workload.queue_of(&a), "gpu");
    assert_eq!(workload.owner_of(&b), "alice");
}
