//! The manager's first invariant, as a property over random histories: whatever sequence of
//! views of the server's workers (fresh, stale after a failed call, partial, empty) and
//! platform states (pending, running, ended, pending and blocked for good; jobs another
//! manager started under the same identity), the manager never stops a job it did not launch, nor one whose worker ever
//! checked in.
//!
//! What is real: the whole manager loop (observe → plan → act, its check-in memory and launch
//! records) against the in-process fake CodaLab server (`codalab_wm_fake_codalab`: REST API,
//! `GET /rest/workers/info` shaped like a 1.7.5 server's reply, injectable 503s) and the
//! in-memory `testing::FakeBackend` (jobs named `fake-worker-<unique>`, as Slurm names them).
//! Time runs on the manager clock (`Manager::advance_clock`), no sleeping.

use codalab_wm_core::checkin::launch_unique;
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{
    JobState, Manager, PendingKind, Pool, PoolPolicy, WorkerJob, WorkerOptions, WorkerShape,
};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use proptest::prelude::*;
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The reason of a pending job the platform says will never start as submitted.
const BLOCKED: &str = "CannotPullImage";

/// One step of a history.
#[derive(Debug, Clone)]
struct Step {
    /// Seconds the manager clock moves before the tick.
    advance: u64,
    /// The workers-info call fails this tick (the view goes stale).
    view_fails: bool,
    /// Which jobs' workers the server lists (by index into the jobs, modulo their count).
    listed: Vec<usize>,
    /// Platform state changes: (job index, 0 pending / 1 running / 2 ended / 3 pending, and
    /// the platform says it will never start: blocked).
    states: Vec<(usize, u8)>,
    /// Staged bundles this tick.
    bundles: u64,
    /// Another manager's job appears under the same identity, running.
    foreign: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![Just(0u64), 1u64..60, 250u64..700, 3000u64..90_000],
        prop::bool::weighted(0.25),
        prop::collection::vec(0usize..12, 0..6),
        prop::collection::vec((0usize..12, 0u8..4), 0..4),
        0u64..5,
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(advance, view_fails, listed, states, bundles, foreign)| Step {
                advance,
                view_fails,
                listed,
                states,
                bundles,
                foreign,
            },
        )
}

fn worker(job: &WorkerJob, busy: bool) -> serde_json::Value {
    let unique = launch_unique(&job.name).expect("fake jobs carry a unique");
    let runs: Vec<&str> = if busy { vec!["0xrun"] } else { vec![] };
    json!({"user_id": "0", "worker_id": format!("node-{unique}"), "run_uuids": runs,
        "is_terminating": false, "checkin_time": 1795295461})
}

/// The manager under test; `race`: its pool's (more pending jobs to withdraw).
async fn manager(server: &FakeCodaLab, backend: &FakeBackend, race: f64) -> Manager {
    let client = crate::fixtures::alice_client(&server.url());
    let policy = PoolPolicy {
        max: 6,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 3,
        pending_timeout: Some(Duration::from_secs(600)),
        race,
        // 1-CPU workers: each of the fake's 1-CPU bundles fills one.
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(1, 0, 8192))
    };
    let pool = Pool {
        policy,
        backend: Arc::new(backend.clone()),
        worker: WorkerOptions {
            server: server.url(),
            ..WorkerOptions::default()
        },
    };
    let config = crate::fixtures::instant();
    Manager::with_pools(config, client, vec![pool]).unwrap()
}

/// Runs `history`; fails naming the first stop that breaks the invariant.
async fn run(history: Vec<Step>, race: f64) -> Result<(), TestCaseError> {
    let server = FakeCodaLab::start().await.unwrap();
    let backend = FakeBackend::named("fake", WorkerShape::from_flags(1, 0, 8192));
    backend.unique_names(true);
    backend.pending_kind_of(BLOCKED, PendingKind::Misconfigured);
    let mut manager = manager(&server, &backend, race).await;
    let mut checked_in: HashSet<String> = HashSet::new();
    let mut foreign: HashSet<String> = HashSet::new();
    for (n, step) in history.into_iter().enumerate() {
        let jobs = backend.jobs();
        for (index, state) in &step.states {
            // An ended job stays ended.
            let job = jobs.get(index % jobs.len().max(1));
            if let Some(job) = job.filter(|j| j.state != JobState::Ended) {
                let (state, reason) = match state {
                    0 => (JobState::Pending, None),
                    1 => (JobState::Active, None),
                    2 => (JobState::Ended, None),
                    // Pending, and the platform says it will never start (#42 item 4).
                    _ => (JobState::Pending, Some(BLOCKED)),
                };
                backend.set_state_with_reason(&job.id, state, reason);
            }
        }
        if step.foreign {
            let id = format!("other-{n}");
            let name = format!("fake-worker-{:032x}", 0xf00d_0000_u64 + n as u64);
            backend.insert(WorkerJob {
                name,
                ..WorkerJob::new(id.clone(), JobState::Active)
            });
            foreign.insert(id);
        }
        let jobs = backend.jobs();
        let listed: Vec<&WorkerJob> = step
            .listed
            .iter()
            .filter_map(|i| jobs.get(i % jobs.len().max(1)))
            .collect();
        server.set_workers(listed.iter().map(|j| worker(j, true)).collect());
        // The manager reads the worker list only while it has jobs that are capacity.
        let called = jobs.iter().any(|j| j.state.is_capacity());
        if step.view_fails && called {
            server.inject_workers_faults(vec![(503, "Service Unavailable".into())]);
        } else if called {
            // Listed in a view the manager reads: that worker has checked in.
            let capacity = listed.iter().filter(|j| j.state.is_capacity());
            checked_in.extend(capacity.map(|j| j.id.clone()));
        }
        server.set_bundles(
            (1..=step.bundles)
                .map(|b| FakeBundle::new("alice", b))
                .collect(),
        );
        manager.advance_clock(Duration::from_secs(step.advance));
        let before = backend.stops().len();
        let _ = manager.tick().await;
        for stopped in backend.stops().into_iter().skip(before) {
            prop_assert!(
                !foreign.contains(&stopped),
                "step {n}: stopped {stopped}, which another manager started"
            );
            prop_assert!(
                !checked_in.contains(&stopped),
                "step {n}: stopped {stopped}, whose worker had checked in"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn no_job_that_checked_in_or_is_not_ours_is_ever_stopped(
        history in prop::collection::vec(step(), 1..30),
        race in prop::sample::select(vec![1.0, 2.0]),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(run(history, race))?;
    }
}

/// The property can fail: a history in which the manager does stop its own job that never
/// checked in (so the assertions above are not vacuous).
#[tokio::test]
async fn the_manager_does_stop_its_own_job_that_never_checked_in() {
    let server = FakeCodaLab::start().await.unwrap();
    let backend = FakeBackend::named("fake", WorkerShape::from_flags(1, 0, 8192));
    backend.unique_names(true);
    backend.start_active(true);
    let mut manager = manager(&server, &backend, 1.0).await;
    server.set_bundles(vec![
        FakeBundle::new("alice", 1),
        FakeBundle::new("alice", 2),
    ]);
    manager.tick().await.unwrap();
    let jobs = backend.jobs();
    server.set_workers(vec![worker(&jobs[0], true)]);
    manager.tick().await.unwrap();
    manager.advance_clock(Duration::from_secs(400));
    manager.tick().await.unwrap();
    assert_eq!(backend.stops(), [jobs[1].id.clone()]);
}
