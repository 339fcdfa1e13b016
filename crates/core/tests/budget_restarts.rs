//! Budget use across restarts (#40, review §6), through the real manager loop: the in-memory
//! `testing::FakeBackend` (its jobs outlive a manager, as a platform's do), the in-process fake
//! CodaLab, and a launch record dir shared by the manager and its successor. A "SIGKILL" is
//! the manager dropped without any exit path; a clean restart is `Manager::run` returning
//! `Restart`. Time runs on the manager clock (`Manager::advance_clock`), no sleeping.

use codalab_wm_core::budget::BudgetLimits;
use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::manager::Outcome;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{
    JobState, Manager, ManagerConfig, Pool, PoolPolicy, WorkerOptions, WorkerShape,
};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Each worker's minimum life (`--idle-seconds`), which a launch reserves of the budget.
const LIFE: u64 = 600;

fn manager(server: &FakeCodaLab, backend: &FakeBackend, dir: &Path) -> Manager {
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    };
    let client = CodaLabClient::new(&server.url(), credentials).unwrap();
    let policy = PoolPolicy {
        max: 10,
        max_launches_per_tick: 10,
        min_seconds_between_workers: 0,
        budget: BudgetLimits {
            max_worker_hours_per_day: Some(10.0),
            max_cost_per_day: None,
        },
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(1, 0, 8192))
    };
    let pool = Pool {
        policy,
        backend: Arc::new(backend.clone()),
        worker: WorkerOptions {
            server: server.url(),
            executable: "cl-worker-stand-in".into(),
            idle_seconds: LIFE,
            ..WorkerOptions::default()
        },
    };
    let config = ManagerConfig {
        sleep_time: Duration::ZERO,
        // `run` returns `Restart` before its first tick: the clean exit path.
        restart_after: Some(Duration::ZERO),
        ..ManagerConfig::default()
    };
    let mut manager = Manager::with_pools(config, client, vec![pool]).unwrap();
    manager
        .keep_records(dir, &[("cpu".into(), "fake test-pool".into())])
        .unwrap();
    manager
}

/// The pool's recorded worker-hours, as a new manager on `dir` reads them at its first tick.
async fn hours_after_restart(server: &FakeCodaLab, backend: &FakeBackend, dir: &Path) -> f64 {
    server.set_bundles(Vec::new());
    let mut next = manager(server, backend, dir);
    next.tick().await.unwrap();
    next.status().budgets[1].worker_hours
}

async fn launch_two_and_run(server: &FakeCodaLab, backend: &FakeBackend, first: &mut Manager) {
    server.set_bundles((1..=2).map(|n| FakeBundle::new("alice", n)).collect());
    first.tick().await.unwrap();
    assert_eq!(backend.launches().len(), 2);
    for job in backend.jobs() {
        backend.set_state(&job.id, JobState::Active);
    }
    first.tick().await.unwrap();
    first.advance_clock(Duration::from_secs(50));
    first.tick().await.unwrap();
}

/// Killed 50 s after two launches (less than the old once-a-minute save): the successor
/// goes on with at least the two launches' minimum life, written before each submit.
#[tokio::test]
async fn a_killed_manager_leaves_its_launches_use_in_the_record() {
    let server = FakeCodaLab::start().await.unwrap();
    let backend = FakeBackend::new(WorkerShape::from_flags(1, 0, 8192));
    backend.unique_names(true);
    let dir = tempfile::tempdir().unwrap();
    let mut first = manager(&server, &backend, dir.path());
    launch_two_and_run(&server, &backend, &mut first).await;
    let used = first.status().budgets[1].worker_hours;
    drop(first); // SIGKILL: no exit path runs
    let hours = hours_after_restart(&server, &backend, dir.path()).await;
    let reserved = 2.0 * LIFE as f64 / 3600.0;
    assert!(
        hours >= used && hours >= reserved - 1e-9,
        "after the restart {hours} worker-hours, before {used}; reserved {reserved}"
    );
}

/// A clean restart (`run` returns `Restart`) after 50 s of two active workers: nothing of the
/// day is lost either.
#[tokio::test]
async fn a_restarting_manager_saves_its_use_on_the_way_out() {
    let server = FakeCodaLab::start().await.unwrap();
    let backend = FakeBackend::new(WorkerShape::from_flags(1, 0, 8192));
    backend.unique_names(true);
    let dir = tempfile::tempdir().unwrap();
    let mut first = manager(&server, &backend, dir.path());
    launch_two_and_run(&server, &backend, &mut first).await;
    let used = first.status().budgets[1].worker_hours;
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    assert_eq!(first.run(false, shutdown).await.unwrap(), Outcome::Restart);
    drop(first);
    let hours = hours_after_restart(&server, &backend, dir.path()).await;
    assert!(
        hours >= used && hours >= 2.0 * LIFE as f64 / 3600.0 - 1e-9,
        "after the restart {hours} worker-hours, before {used}"
    );
}
