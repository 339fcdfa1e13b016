//! The manager loop against the in-process fake CodaLab server (`codalab_wm_fake_codalab`) and
//! the in-memory `testing::FakeBackend`: upstream's launch rules tick by tick, failure
//! counting, error handling and shutdown.

use crate::fixtures::instant;
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient, CountEvery};
use codalab_wm_core::manager::Outcome;
use codalab_wm_core::policy::PolicyConfig;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{
    Error, JobState, Manager, ManagerConfig, Pool, SingleBackendFlags, WorkerBackend, WorkerJob,
    WorkerOptions, WorkerShape,
};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::sync::Arc;
use std::time::Duration;

/// Upstream's flags: `--min-workers`, `--max-workers`, `--min-seconds-between-workers`.
fn flags(min: u32, max: u32, min_seconds: u64) -> SingleBackendFlags {
    SingleBackendFlags {
        limits: PolicyConfig {
            min_workers: min,
            max_workers: max,
            min_seconds_between_workers: min_seconds,
        },
        ..SingleBackendFlags::default()
    }
}

/// Upstream's single-backend mode: one pool of `backend` shaped by `flags`.
fn single(
    config: ManagerConfig,
    flags: SingleBackendFlags,
    client: CodaLabClient,
    backend: Arc<dyn WorkerBackend>,
) -> Manager {
    let pool = Pool::single_backend(&flags, backend, WorkerOptions::default());
    Manager::new(config, client, pool)
}

async fn setup(
    bundles: Vec<FakeBundle>,
    password: &str,
) -> (FakeCodaLab, CodaLabClient, FakeBackend) {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(bundles);
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new(password),
    };
    let client = CodaLabClient::new(&server.url(), credentials).unwrap();
    let backend = FakeBackend::new(WorkerShape::from_flags(4, 0, 8192));
    (server, client, backend)
}

/// 12 bundles that fit and one that asks 64 CPUs.
fn twelve_and_one_too_large() -> Vec<FakeBundle> {
    let mut bundles: Vec<FakeBundle> = (0..12).map(|n| FakeBundle::new("alice", n)).collect();
    bundles.push(FakeBundle {
        cpus: 64,
        ..FakeBundle::new("alice", 99)
    });
    bundles
}

#[tokio::test]
async fn launches_one_per_tick_until_max_then_stops() {
    let (_server, client, backend) = setup(twelve_and_one_too_large(), "alicepw").await;
    let mut manager = single(instant(), flags(0, 3, 0), client, Arc::new(backend.clone()));
    let mut launched = Vec::new();
    for _ in 0..5 {
        let report = manager.tick().await.unwrap();
        // `staged` counts every staged bundle; the 64-CPU one is past what the pool needs
        // (one page of 10), so it is not read and not filtered.
        assert_eq!((report.staged, report.read, report.filtered), (13, 10, 0));
        launched.push(report.launched.len());
    }
    assert_eq!(launched, [1, 1, 1, 0, 0]);
    let report = manager.tick().await.unwrap();
    assert_eq!(report.decision.reason_codes(), "want_workers,max_reached");
    assert_eq!(backend.launches().len(), 3);
}

#[tokio::test]
async fn pending_jobs_covering_the_staged_bundles_stop_launches() {
    let bundles = (0..2).map(|n| FakeBundle::new("alice", n)).collect();
    let (_server, client, backend) = setup(bundles, "alicepw").await;
    let mut manager = single(
        instant(),
        flags(0, 10, 0),
        client,
        Arc::new(backend.clone()),
    );
    let mut launched = [0usize; 4];
    for slot in launched.iter_mut() {
        *slot = manager.tick().await.unwrap().launched.len();
    }
    assert_eq!(
        launched,
        [1, 1, 0, 0],
        "2 pending jobs cover 2 staged bundles"
    );
    backend.set_state("1", JobState::Active);
    assert_eq!(
        manager.tick().await.unwrap().launched.len(),
        1,
        "1 pending < 2 staged again"
    );
}

#[tokio::test]
async fn rate_limit_holds_the_second_launch() {
    let bundles = (0..5).map(|n| FakeBundle::new("alice", n)).collect();
    let (_server, client, backend) = setup(bundles, "alicepw").await;
    let mut manager = single(instant(), flags(0, 10, 3600), client, Arc::new(backend));
    assert_eq!(manager.tick().await.unwrap().launched.len(), 1);
    let report = manager.tick().await.unwrap();
    assert!(report.launched.is_empty());
    assert_eq!(report.decision.reason_codes(), "want_workers,rate_limited");
}

#[tokio::test]
async fn below_min_launches_with_nothing_staged() {
    let (_server, client, backend) = setup(vec![], "alicepw").await;
    let mut manager = single(
        instant(),
        flags(2, 3, 3600),
        client,
        Arc::new(backend.clone()),
    );
    assert_eq!(
        manager.tick().await.unwrap().decision.reason_codes(),
        "no_staged_bundles,below_min"
    );
    assert_eq!(
        manager.tick().await.unwrap().launched.len(),
        1,
        "min beats the rate limit"
    );
    assert_eq!(manager.tick().await.unwrap().launched.len(), 0);
    assert_eq!(backend.launches().len(), 2);
}

#[tokio::test]
async fn failed_jobs_are_counted_once_and_exit_after_num_failed_stops_the_loop() {
    let bundles = (0..3).map(|n| FakeBundle::new("alice", n)).collect();
    let (_server, client, backend) = setup(bundles, "alicepw").await;
    let mut job = WorkerJob::new("old-failure", JobState::Failed);
    job.reason = Some("NonZeroExitCode".into());
    backend.insert(job);
    backend.fail_starting(Some("Invalid partition name specified"));
    let config = ManagerConfig {
        exit_after_num_failed: Some(2),
        ..instant()
    };
    let mut manager = single(config, flags(0, 10, 0), client, Arc::new(backend));
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let outcome = manager.run(false, shutdown).await.unwrap();
    // 1 failed job seen once + 2 failed submissions = 3 > 2.
    assert_eq!(
        outcome,
        Outcome::TooManyFailures {
            failed: 3,
            limit: 2
        }
    );
}

#[tokio::test]
async fn temporary_errors_skip_ticks_without_launching_and_the_loop_recovers() {
    let bundles = (0..3).map(|n| FakeBundle::new("alice", n)).collect();
    let (server, client, backend) = setup(bundles, "alicepw").await;
    let mut manager = single(
        instant(),
        flags(0, 10, 0),
        client,
        Arc::new(backend.clone()),
    );
    manager.tick().await.unwrap();
    server.inject_faults(vec![
        (503, "Service Unavailable".into()),
        (500, "boom".into()),
    ]);
    let err = manager.tick().await.unwrap_err();
    assert!(err.is_temporary());
    assert!(manager.tick().await.is_err(), "the second fault");
    backend.fail_listing(Some(
        "slurm_load_jobs error: Unable to contact slurm controller",
    ));
    let err = manager.tick().await.unwrap_err();
    assert!(matches!(
        err,
        Error::Backend {
            temporary: true,
            ..
        }
    ));
    assert_eq!(
        backend.launches().len(),
        1,
        "no launch on a tick that failed"
    );
    backend.fail_listing(None);
    assert_eq!(manager.tick().await.unwrap().launched.len(), 1);
}

/// Upstream's defaults (compat, max 10) on 1,000 staged bundles: a tick reads one page of 10
/// (what upstream reads) and counts the rest; a steady tick reuses the count; bundles taken
/// from the head of the queue are "removed since last time" (the count of a moment ago stands:
/// a moving queue is counted at most every `CountEvery::moving`).
#[tokio::test]
async fn a_long_queue_costs_one_page_per_steady_tick() {
    let bundles = (0..1000).map(|n| FakeBundle::new("alice", n)).collect();
    let (server, _, backend) = setup(bundles, "alicepw").await;
    // Counts last an hour here, so that a slow machine cannot make one expire mid-test.
    let options = ClientOptions {
        count_every: CountEvery {
            moving: Duration::from_secs(3600),
            steady: Duration::from_secs(3600),
        },
        ..ClientOptions::default()
    };
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    };
    let client = CodaLabClient::with_options(&server.url(), credentials, &options).unwrap();
    let mut manager = single(instant(), flags(0, 10, 60), client, Arc::new(backend));
    let first = manager.tick().await.unwrap();
    assert_eq!(
        (first.staged, first.read, first.search_requests),
        (1000, 10, 2)
    );
    assert_eq!(first.decision.reason_codes(), "want_workers");
    let steady = manager.tick().await.unwrap();
    assert_eq!(
        (steady.staged, steady.read, steady.search_requests),
        (1000, 10, 1)
    );
    assert_eq!(steady.removed, 0);
    server.set_bundles((3..1000).map(|n| FakeBundle::new("alice", n)).collect());
    let moved = manager.tick().await.unwrap();
    assert_eq!(
        (moved.staged, moved.removed, moved.search_requests),
        (1000, 3, 1)
    );
    assert_eq!(manager.status().staged, 1000);
    // Login and identity check once, not per tick: 4 searches in 3 ticks, and the workers'
    // check-ins once a tick.
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    let count = |path: &str| paths.iter().filter(|p| *p == path).count();
    assert_eq!(count("/rest/oauth2/token"), 1);
    assert_eq!(count("/rest/user"), 1);
    assert_eq!(count("/rest/workers/info"), 3);
    assert_eq!((count("/rest/bundles"), paths.len()), (4, 9));
}

#[tokio::test]
async fn once_returns_after_one_tick_and_surfaces_its_error() {
    let (_server, client, backend) = setup(vec![FakeBundle::new("alice", 1)], "alicepw").await;
    let mut manager = single(
        instant(),
        flags(0, 10, 0),
        client,
        Arc::new(backend.clone()),
    );
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    assert_eq!(
        manager.run(true, shutdown.clone()).await.unwrap(),
        Outcome::Once { launch_errors: 0 }
    );
    assert_eq!(backend.launches().len(), 1);

    let (_server, client, backend) = setup(vec![], "wrong").await;
    let mut manager = single(instant(), flags(0, 10, 0), client, Arc::new(backend));
    let err = manager.run(true, shutdown).await.unwrap_err();
    assert!(matches!(err, Error::Unauthenticated { .. }));
}

#[tokio::test]
async fn a_wrong_password_stops_the_loop() {
    let (_server, client, backend) = setup(vec![], "wrong").await;
    let mut manager = single(instant(), flags(0, 10, 0), client, Arc::new(backend));
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    assert!(manager.run(false, shutdown).await.unwrap_err().is_fatal());
}

/// The backend's launches once there are `n` of them, or after `polls` polls 5 ms apart
/// (a wait for the manager loop's launches, events of a task beside the test, bounded).
async fn launched(backend: &FakeBackend, n: usize, polls: usize) -> usize {
    for _ in 0..polls {
        if backend.launches().len() >= n {
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    backend.launches().len()
}

#[tokio::test]
async fn shutdown_finishes_the_current_tick_and_returns() {
    let (_server, client, backend) = setup(vec![FakeBundle::new("alice", 1)], "alicepw").await;
    let config = ManagerConfig {
        sleep_time: Duration::from_secs(3600),
        ..instant()
    };
    let mut manager = single(config, flags(0, 10, 0), client, Arc::new(backend.clone()));
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(async move { manager.run(false, shutdown).await });
    // Wait for the first tick's launch (an event), then ask to stop during the long sleep.
    assert_eq!(launched(&backend, 1, 1000).await, 1);
    stop.send(true).unwrap();
    assert_eq!(run.await.unwrap().unwrap(), Outcome::Shutdown);
}

/// A pool that races its launches is looked at again after its `race_watch`, not after
/// `sleep_time` (an hour here), while its jobs pend: a first tick races two jobs for the one
/// staged bundle (race 2); one of them ends, and the loop's first tick replaces it (two
/// pend: the race is watched); another ends, and the next tick, a second later, replaces
/// that one too. With the loop sleeping `sleep_time` regardless, the last replacement never
/// comes within the bound (a wait for an event, not a timing).
#[tokio::test]
async fn a_racing_pool_is_ticked_every_race_watch() {
    let (server, client, backend) = setup(vec![FakeBundle::new("alice", 1)], "alicepw").await;
    let pool = Pool {
        policy: codalab_wm_core::PoolPolicy {
            race: 2.0,
            race_watch: Duration::from_secs(1),
            max_launches_per_tick: 10,
            min_seconds_between_workers: 0,
            ..codalab_wm_core::PoolPolicy::new("cpu", WorkerShape::from_flags(4, 0, 8192))
        },
        backend: Arc::new(backend.clone()),
        worker: WorkerOptions {
            server: server.url(),
            ..WorkerOptions::default()
        },
    };
    let config = ManagerConfig {
        sleep_time: Duration::from_secs(3600),
        ..instant()
    };
    let mut manager = Manager::with_pools(config, client, vec![pool]).unwrap();
    manager.tick().await.unwrap();
    assert_eq!(backend.launches().len(), 2, "the first tick races two jobs");
    let end = |n: usize| backend.set_state(&backend.jobs()[n].id, JobState::Ended);
    end(0);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(async move { manager.run(false, shutdown).await });
    assert_eq!(
        launched(&backend, 3, 6000).await,
        3,
        "the loop's first tick replaces it"
    );
    end(1);
    assert_eq!(
        launched(&backend, 4, 6000).await,
        4,
        "the next tick, a race_watch later, replaces the other"
    );
    stop.send(true).unwrap();
    assert_eq!(run.await.unwrap().unwrap(), Outcome::Shutdown);
}

#[tokio::test]
async fn no_prefilter_keeps_large_bundles() {
    let (_server, client, backend) = setup(twelve_and_one_too_large(), "alicepw").await;
    let no_prefilter = SingleBackendFlags {
        no_prefilter: true,
        ..flags(0, 10, 0)
    };
    let mut manager = single(instant(), no_prefilter, client, Arc::new(backend));
    let report = manager.tick().await.unwrap();
    assert_eq!((report.staged, report.filtered), (13, 0));
}

#[tokio::test]
async fn dry_run_reaches_the_backend_as_a_dry_run() {
    let (_server, client, backend) = setup(vec![FakeBundle::new("alice", 1)], "alicepw").await;
    let config = ManagerConfig {
        dry_run: true,
        ..instant()
    };
    let backend = Arc::new(backend);
    let mut manager = single(config, flags(0, 10, 0), client, backend.clone());
    let report = manager.tick().await.unwrap();
    assert!(
        report.launched[0].id.starts_with("dry-run-"),
        "{:?}",
        report.launched
    );
    assert!(backend.get_worker_jobs().await.unwrap().is_empty());
    assert!(backend.launches().is_empty());
}
