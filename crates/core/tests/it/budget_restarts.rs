//! Budget use across restarts (#40, review §6), through the real manager loop: the in-memory
//! `testing::FakeBackend` (its jobs outlive a manager, as a platform's do), the in-process fake
//! CodaLab, and a launch record dir shared by the manager and its successor. A "SIGKILL" is
//! the manager dropped without any exit path; a clean restart is `Manager::run` returning
//! `Restart`. Time runs on the manager clock (`Manager::advance_clock`), no sleeping.

use codalab_wm_core::budget::BudgetLimits;
use codalab_wm_core::manager::Outcome;
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{
    JobState, Manager, ManagerConfig, Pool, PoolPolicy, RecordKey, WorkerOptions, WorkerShape,
};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Each worker's minimum life (`--idle-seconds`), which a launch reserves of the budget.
const LIFE: u64 = 600;

fn manager(server: &FakeCodaLab, backend: &FakeBackend, dir: &Path) -> Manager {
    manager_on(server, Arc::new(backend.clone()), dir)
}

/// The manager of [`manager`] on any backend.
fn manager_on(
    server: &FakeCodaLab,
    backend: Arc<dyn codalab_wm_core::WorkerBackend>,
    dir: &Path,
) -> Manager {
    let client = crate::fixtures::alice_client(&server.url());
    let policy = PoolPolicy {
        max: 10,
        max_launches_per_tick: 10,
        min_seconds_between_workers: 0,
        // The stand-in workers never check in: past the check-in timeout the pool would back
        // off (`worker_unconfirmed`) and launch nothing for the property's next bundle.
        checkin_timeout: Duration::from_secs(86_400),
        budget: BudgetLimits {
            max_worker_hours_per_day: Some(10.0),
            max_cost_per_day: None,
        },
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(1, 0, 8192))
    };
    let pool = Pool {
        policy,
        backend,
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
        .keep_records(dir, &[RecordKey::new("cpu", "fake test-pool")])
        .unwrap();
    manager
}

/// The pool's recorded worker-hours, as a new manager on `dir` reads them at its first tick.
async fn hours_after_restart(server: &FakeCodaLab, backend: &FakeBackend, dir: &Path) -> f64 {
    hours_after(&mut manager(server, backend, dir), server).await
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

/// A [`FakeBackend`] whose next submit can crash the manager (a panic, no exit path runs):
/// after the launch's use was written ahead, before the platform has the job.
#[derive(Debug, Clone)]
struct Crashing {
    inner: FakeBackend,
    crash_next_submit: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait::async_trait]
impl codalab_wm_core::WorkerBackend for Crashing {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn worker_shape(&self) -> WorkerShape {
        self.inner.worker_shape()
    }

    async fn get_worker_jobs(&self) -> codalab_wm_core::Result<Vec<codalab_wm_core::WorkerJob>> {
        self.inner.get_worker_jobs().await
    }

    async fn start_worker_job(
        &self,
        request: &codalab_wm_core::backend::LaunchRequest<'_>,
    ) -> codalab_wm_core::Result<codalab_wm_core::WorkerJob> {
        let crash = std::sync::atomic::Ordering::SeqCst;
        if self.crash_next_submit.swap(false, crash) {
            panic!("crash just before the submit (test)");
        }
        self.inner.start_worker_job(request).await
    }
}

/// What happens next to the manager of the property below.
#[derive(Debug, Clone)]
enum Step {
    /// `n` new bundles are staged and the manager ticks (it launches for them).
    Stage(u64),
    /// The manager ticks after this many seconds (its active workers use the budget).
    Run(u64),
    /// `run` returns `Restart` (the clean way out); a new manager starts on the records.
    Clean,
    /// SIGKILL: the manager is dropped; a new one starts on the records.
    Kill,
    /// A bundle is staged and the manager crashes in its launch, before the submit.
    CrashBeforeSubmit,
    /// A bundle is staged, the launch is submitted, and the manager is killed right after.
    CrashAfterSubmit,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        (1..3_u64).prop_map(Step::Stage),
        (1..300_u64).prop_map(Step::Run),
        Just(Step::Clean),
        Just(Step::Kill),
        Just(Step::CrashBeforeSubmit),
        Just(Step::CrashAfterSubmit),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 12,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Issue 40 item 3: over random sequences of launches, running time and restarts (clean,
    /// SIGKILL, a crash just before or just after a submit), the use the next manager reads
    /// from the record never falls below the use made: the previous manager's metered use, and
    /// each submitted launch's minimum life.
    #[test]
    fn the_recorded_use_never_falls_below_the_use_made(
        steps in proptest::collection::vec(step(), 1..10)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(restarts(steps));
    }
}

async fn restarts(steps: Vec<Step>) {
    let server = FakeCodaLab::start().await.unwrap();
    let fake = FakeBackend::new(WorkerShape::from_flags(1, 0, 8192));
    fake.unique_names(true);
    fake.start_active(true);
    let backend = Crashing {
        inner: fake.clone(),
        crash_next_submit: Default::default(),
    };
    let dir = tempfile::tempdir().unwrap();
    let start = |clock: Duration| {
        let mut next = manager_on(&server, Arc::new(backend.clone()), dir.path());
        next.advance_clock(clock);
        next
    };
    let mut current = start(Duration::ZERO);
    let mut bundles = 0_u64;
    let mut stage = |n: u64| {
        let staged = (bundles + 1..=bundles + n).map(|k| FakeBundle::new("alice", k));
        server.set_bundles(staged.collect());
        bundles += n;
    };
    // Bundles that need one worker more than the pool has (its workers stay idle: none
    // checks in), or `None` at `max`.
    let one_more = |fake: &FakeBackend| {
        let jobs = fake.jobs().len() as u64;
        (jobs < 9).then_some(jobs + 1)
    };
    // The pool's metered use (no budget line before a manager's first tick).
    let hours = |m: &Manager| m.status().budgets.get(1).map_or(0.0, |b| b.worker_hours);
    let life = LIFE as f64 / 3600.0;
    for step in steps {
        // What the next manager must find at least, when this step restarts.
        let (clock, used) = (current.clock(), hours(&current));
        let floor = match step {
            Step::Stage(n) => {
                stage(n);
                current.tick().await.unwrap();
                continue;
            }
            Step::Run(seconds) => {
                current.advance_clock(Duration::from_secs(seconds));
                current.tick().await.unwrap();
                continue;
            }
            Step::Clean => {
                let (_stop, shutdown) = tokio::sync::watch::channel(false);
                let outcome = current.run(false, shutdown).await.unwrap();
                assert_eq!(outcome, Outcome::Restart);
                hours(&current).max(used)
            }
            Step::Kill => used,
            Step::CrashBeforeSubmit => {
                let Some(n) = one_more(&fake) else { continue };
                stage(n);
                let launches = fake.launches().len();
                backend
                    .crash_next_submit
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                let ticked = tokio::spawn(async move { current.tick().await.map(drop) }).await;
                assert!(ticked.is_err(), "the manager did not crash in its submit");
                assert_eq!(fake.launches().len(), launches, "no job was submitted");
                current = start(clock);
                let after = hours_after(&mut current, &server).await;
                assert!(
                    after >= used - 1e-9,
                    "{after} < {used} after a crash before a submit"
                );
                continue;
            }
            Step::CrashAfterSubmit => {
                let Some(n) = one_more(&fake) else { continue };
                stage(n);
                let launches = fake.launches().len();
                current.tick().await.unwrap();
                let made = (fake.launches().len() - launches) as f64;
                used + made * life
            }
        };
        drop(current);
        current = start(clock);
        let after = hours_after(&mut current, &server).await;
        assert!(
            after >= floor - 1e-9,
            "{after} worker-hours recorded < {floor} used ({step:?})"
        );
    }
}

/// The pool's worker-hours as a manager started on the records reads them at its first tick
/// (with no bundle staged, so that it launches nothing).
async fn hours_after(manager: &mut Manager, server: &FakeCodaLab) -> f64 {
    server.set_bundles(Vec::new());
    manager.tick().await.unwrap();
    manager.status().budgets[1].worker_hours
}
