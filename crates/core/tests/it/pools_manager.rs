//! The manager with two pools against the in-process fake CodaLab server
//! (`codalab_wm_fake_codalab`) and two in-memory `testing::FakeBackend`s: assignment by shape and
//! queue, burst launches, fallback after a pending timeout, counting jobs being stopped,
//! per-pool backoff and its reset, the status snapshot and the tick events. Time-based rules
//! run on the manager clock, moved with `Manager::advance_clock` (no sleeping).

use codalab_wm_core::checkin::launch_unique;
use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::status::{LaunchResult, TickEvent};
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{
    JobState, LaunchMode, Manager, ManagerConfig, Pool, PoolPolicy, SingleBackendFlags,
    WorkerOptions, WorkerShape,
};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::sync::Arc;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

struct Setup {
    server: FakeCodaLab,
    cpu: FakeBackend,
    gpu: FakeBackend,
    manager: Manager,
}

fn cpu_policy() -> PoolPolicy {
    PoolPolicy {
        max: 3,
        max_launches_per_tick: 5,
        min_seconds_between_workers: 0,
        pending_timeout: Some(Duration::from_secs(600)),
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(4, 0, 8192))
    }
}

fn gpu_policy() -> PoolPolicy {
    PoolPolicy {
        name: "gpu".into(),
        shape: WorkerShape::from_flags(8, 2, 16384),
        cost: 10.0,
        tag: Some("gpuq".into()),
        ..cpu_policy()
    }
}

async fn setup(bundles: Vec<FakeBundle>, cpu: PoolPolicy, gpu: PoolPolicy) -> Setup {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(bundles);
    let client = crate::fixtures::alice_client(&server.url());
    let cpu_backend = FakeBackend::named("fake-cpu", cpu.shape);
    let gpu_backend = FakeBackend::named("fake-gpu", gpu.shape);
    // Job names carry the launch unique, as on every platform: the manager's launch record
    // holds them, so its rules may stop them.
    cpu_backend.unique_names(true);
    gpu_backend.unique_names(true);
    let worker = WorkerOptions {
        server: server.url(),
        executable: "cl-worker-stand-in".into(),
        ..WorkerOptions::default()
    };
    let gpu_worker = WorkerOptions {
        tag: gpu.tag.clone(),
        ..worker.clone()
    };
    let pools = vec![
        Pool {
            policy: cpu,
            backend: Arc::new(cpu_backend.clone()),
            worker: worker.clone(),
        },
        Pool {
            policy: gpu,
            backend: Arc::new(gpu_backend.clone()),
            worker: gpu_worker,
        },
    ];
    let config = crate::fixtures::instant();
    let manager = Manager::with_pools(config, client, pools).unwrap();
    Setup {
        server,
        cpu: cpu_backend,
        gpu: gpu_backend,
        manager,
    }
}

/// A bundle that fills a worker of the cpu pool (and of the single-backend pool): the
/// server runs one such bundle a worker, so launches count bundles.
fn cpu_bundle(n: u64) -> FakeBundle {
    FakeBundle {
        cpus: 4,
        ..FakeBundle::new("alice", n)
    }
}

/// A bundle that takes both GPUs of a gpu worker.
fn gpu_bundle(n: u64) -> FakeBundle {
    FakeBundle {
        gpus: 2,
        ..FakeBundle::new("alice", n)
    }
}

fn launches(events: &[TickEvent], pool: &str, result: LaunchResult) -> usize {
    events
        .iter()
        .filter(
            |e| matches!(e, TickEvent::Launch { pool: p, result: r, .. } if p == pool && *r == result),
        )
        .count()
}

#[tokio::test]
async fn bundles_go_to_the_pool_that_fits_and_misfits_are_reported_with_the_reason() {
    let bundles = vec![
        cpu_bundle(1),
        cpu_bundle(2),
        gpu_bundle(3),
        FakeBundle {
            queue: "gpuq".into(),
            ..cpu_bundle(4)
        },
        FakeBundle {
            gpus: 4,
            ..cpu_bundle(5)
        },
    ];
    let mut s = setup(bundles, cpu_policy(), gpu_policy()).await;
    let report = s.manager.tick().await.unwrap();
    assert_eq!(
        s.cpu.launches().len(),
        2,
        "both cpu bundles in one tick (burst)"
    );
    assert_eq!(
        s.gpu.launches().len(),
        1,
        "the gpu bundle (1 CPU, 2 GPUs) and the gpuq bundle (4 CPUs) share an 8-CPU 2-GPU worker"
    );
    assert!(
        s.gpu
            .launches()
            .iter()
            .all(|argv| argv.join(" ").contains("--tag gpuq"))
    );
    assert!(
        s.cpu
            .launches()
            .iter()
            .all(|argv| !argv.join(" ").contains("--tag"))
    );
    // `staged` counts every staged bundle, the one no pool fits included.
    assert_eq!((report.staged, report.filtered), (5, 1));
    assert_eq!(launches(&report.events, "cpu", LaunchResult::Started), 2);
    assert_eq!(report.pools.unserved.len(), 1);
    assert_eq!(report.pools.unserved[0].reason.code(), "no_fitting_pool");
    // The staged search is not narrowed by any pool's tag.
    let search = s
        .server
        .requests()
        .into_iter()
        .rfind(|r| r.path == "/rest/bundles")
        .unwrap();
    assert!(!search.query.contains("request_queue"), "{}", search.query);

    // Pending workers cover the bundles on the next tick: nothing more is launched.
    let report = s.manager.tick().await.unwrap();
    assert!(report.launched.is_empty());
    assert_eq!(
        report.pools.pools[0].reason_codes(),
        "want_workers,target,pending_covers_demand"
    );

    let status = s.manager.status();
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["pools"][0]["name"], "cpu");
    assert_eq!(json["pools"][0]["backend"], "fake-cpu");
    assert_eq!(json["pools"][0]["pending"], 2);
    assert_eq!(
        json["pools"][1]["shape"],
        serde_json::json!({"cpus": 8, "gpus": 2, "memory_bytes": 16u64 << 30})
    );
    assert_eq!(json["pools"][1]["assigned"].as_array().unwrap().len(), 2);
    assert_eq!(json["unserved"][0]["reason"], "no_fitting_pool");
    assert_eq!(
        json["unserved"][0]["pools"][0]["detail"],
        "request_gpus=4 > worker gpus=0"
    );
    let started = status
        .counters
        .iter()
        .find(|c| c.metric == "launches" && c.pool == "cpu" && c.label == "started")
        .unwrap();
    assert_eq!(started.value, 2);
}

#[tokio::test]
async fn a_stuck_pending_job_is_stopped_and_replaced_on_the_other_pool() {
    // Both pools fit the cpu bundle; cpu is cheaper. Its job never starts.
    let gpu = PoolPolicy {
        tag: None,
        ..gpu_policy()
    };
    let mut s = setup(vec![cpu_bundle(1)], cpu_policy(), gpu).await;
    s.cpu.slow_stop(true);
    s.manager.tick().await.unwrap();
    assert_eq!((s.cpu.launches().len(), s.gpu.launches().len()), (1, 0));
    s.manager.advance_clock(Duration::from_secs(599));
    let report = s.manager.tick().await.unwrap();
    assert!(report.launched.is_empty(), "not stuck yet");
    s.manager.advance_clock(Duration::from_secs(1));
    let report = s.manager.tick().await.unwrap();
    assert_eq!(s.cpu.stops(), ["1"], "the stuck job is stopped");
    assert_eq!(s.gpu.launches().len(), 1, "and replaced on the gpu pool");
    assert_eq!(report.pools.pools[0].reason_codes(), "pending_timeout");
    assert!(report.events.contains(&TickEvent::Stop {
        pool: "cpu".into(),
        job_id: "1".into(),
        reason: "pending_timeout",
        ok: true
    }));
    // The stopped job is still listed (a slow cancel): it counts toward max as `stopping`,
    // and the cpu pool backs off.
    let status = s.manager.status();
    assert_eq!(status.pools[0].stopping, 1);
    assert_eq!(status.pools[0].backing_off_until, Some(600 + 300));
    assert_eq!(status.recent_failures[0].kind, "pending_timeout");
    let report = s.manager.tick().await.unwrap();
    assert!(report.launched.is_empty(), "the gpu job covers the bundle");
    assert_eq!(report.pools.pools[0].stopping, 1);
    assert_eq!(report.pools.pools[0].reason_codes(), "backing_off");
    s.cpu.set_state("1", JobState::Ended);
    s.manager.tick().await.unwrap();
    assert_eq!(
        s.manager.status().pools[0].stopping,
        0,
        "gone: no longer counted"
    );
}

/// A pending job whose bundle went away is withdrawn once the pool has had it to spare for its
/// `withdraw_after` (a minute here; at once by default): stopped on the platform, with a
/// `withdrawn` stop, a `launch_withdrawn` event and counter, and no backoff (the pool
/// launches again at once for a new bundle).
#[tokio::test]
async fn a_pending_job_no_bundle_needs_is_withdrawn_after_withdraw_after_with_no_backoff() {
    let cpu = PoolPolicy {
        withdraw_after: Duration::from_secs(60),
        ..cpu_policy()
    };
    let mut s = setup(vec![cpu_bundle(1), cpu_bundle(2)], cpu, gpu_policy()).await;
    s.manager.tick().await.unwrap();
    assert_eq!(s.cpu.launches().len(), 2);
    s.server.set_bundles(vec![cpu_bundle(1)]);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(report.pools.pools[0].surplus, 1, "one job to spare");
    assert!(s.cpu.stops().is_empty(), "not for a minute yet");
    s.manager.advance_clock(Duration::from_secs(59));
    s.manager.tick().await.unwrap();
    assert!(s.cpu.stops().is_empty(), "59 s: not yet");
    s.manager.advance_clock(Duration::from_secs(1));
    let report = s.manager.tick().await.unwrap();
    assert_eq!(s.cpu.stops(), ["2"], "the newest job is withdrawn");
    assert!(report.events.contains(&TickEvent::Stop {
        pool: "cpu".into(),
        job_id: "2".into(),
        reason: "withdrawn",
        ok: true
    }));
    let status = s.manager.status();
    assert!(
        status.recent_failures.is_empty(),
        "{:?}",
        status.recent_failures
    );
    assert_eq!(status.pools[0].backing_off_until, None);
    let withdrawn = (status.counters.iter())
        .find(|c| c.metric == "stops" && c.pool == "cpu" && c.label == "withdrawn")
        .map(|c| c.value);
    assert_eq!(withdrawn, Some(1));
    assert!(
        (status.events.iter()).any(|e| e.kind.code() == "launch_withdrawn"),
        "{:?}",
        status.events
    );
    s.cpu.set_state("2", JobState::Ended);
    s.server.set_bundles(vec![cpu_bundle(1), cpu_bundle(3)]);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(
        report.launched.len(),
        1,
        "no backoff: a new bundle gets a job"
    );
}

#[tokio::test]
async fn jobs_being_stopped_count_toward_max() {
    let cpu = PoolPolicy {
        max: 1,
        ..cpu_policy()
    };
    let gpu = PoolPolicy {
        tag_exclusive: true,
        ..gpu_policy()
    };
    let mut s = setup(vec![cpu_bundle(1)], cpu, gpu).await;
    s.cpu.slow_stop(true);
    s.manager.tick().await.unwrap();
    s.manager.advance_clock(Duration::from_secs(600));
    s.manager.tick().await.unwrap();
    assert_eq!(s.cpu.stops(), ["1"]);
    // After the backoff the pool still has its stopping job: max 1 is reached.
    s.manager.advance_clock(Duration::from_secs(301));
    let report = s.manager.tick().await.unwrap();
    assert_eq!(s.cpu.launches().len(), 1);
    assert_eq!(report.pools.unserved[0].reason.code(), "max_reached");
    s.cpu.set_state("1", JobState::Ended);
    s.manager.tick().await.unwrap();
    assert_eq!(s.cpu.launches().len(), 2, "room again once the job is gone");
}

#[tokio::test]
async fn a_pool_whose_submits_fail_backs_off_doubling_and_resets_after_a_success() {
    let mut s = setup(vec![gpu_bundle(1)], cpu_policy(), gpu_policy()).await;
    s.gpu
        .fail_starting(Some("Invalid partition name specified"));
    let report = s.manager.tick().await.unwrap();
    assert_eq!(launches(&report.events, "gpu", LaunchResult::Failed), 1);
    assert!(report.events.iter().any(|e| matches!(e, TickEvent::BackoffStarted { pool, failures: 1, until_seconds: 300 } if pool == "gpu")));
    let report = s.manager.tick().await.unwrap();
    assert!(report.launch_errors.is_empty(), "skipped while backing off");
    assert_eq!(report.pools.pools[1].reason_codes(), "backing_off");
    assert_eq!(report.pools.unserved[0].reason.code(), "backing_off");
    let status = s.manager.status();
    assert_eq!(status.pools[1].backing_off_until, Some(300));
    assert_eq!(status.recent_failures[0].kind, "submit_failed");
    assert!(
        status.recent_failures[0]
            .detail
            .contains("Invalid partition name specified")
    );

    s.manager.advance_clock(5 * MIN);
    s.manager.tick().await.unwrap();
    let health = s.manager.status().pools[1].health;
    assert_eq!(health.failures, 2);
    let until = health.backoff_until.map(|d| d.as_secs());
    assert_eq!(until, Some((5 * MIN + 10 * MIN).as_secs()), "doubled");

    s.gpu.fail_starting(None);
    s.manager.advance_clock(10 * MIN);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1);
    assert_eq!(
        s.manager.status().pools[1].health.failures,
        2,
        "a submit is not yet a success"
    );
    s.gpu.set_state(&report.launched[0].id, JobState::Active);
    s.manager.tick().await.unwrap();
    assert_eq!(
        s.manager.status().pools[1].health.failures,
        2,
        "the manager reads the server's workers: running is not yet a success"
    );
    let name = s.gpu.jobs()[0].name.clone();
    let unique = launch_unique(&name).unwrap();
    s.server.set_workers(vec![serde_json::json!({
        "user_id": "0", "worker_id": format!("node-{unique}"), "cpus": 8, "gpus": 2,
        "memory_bytes": 16u64 << 30, "run_uuids": [], "is_terminating": false,
        "cpus_in_use": 0, "gpus_in_use": 0})]);
    s.manager.tick().await.unwrap();
    assert_eq!(
        s.manager.status().pools[1].health.failures,
        0,
        "its worker's first check-in resets the streak"
    );
    assert_eq!(s.manager.num_failed(), 2);
}

#[tokio::test]
async fn a_job_that_fails_before_its_worker_checks_in_backs_the_pool_off_and_demand_falls_back() {
    let gpu = PoolPolicy {
        tag: None,
        ..gpu_policy()
    };
    let mut s = setup(vec![cpu_bundle(1)], cpu_policy(), gpu).await;
    let report = s.manager.tick().await.unwrap();
    let job = report.launched[0].id.clone();
    s.cpu.set_state(&job, JobState::Active);
    s.manager.tick().await.unwrap();
    // Active, then failed before its worker ever checked in: a failed start.
    s.cpu.set_state(&job, JobState::Failed);
    let report = s.manager.tick().await.unwrap();
    assert!(report.events.contains(&TickEvent::JobFailed {
        pool: "cpu".into(),
        job_id: job,
        before_active: true
    }));
    assert_eq!(report.pools.pools[0].reason_codes(), "backing_off");
    assert_eq!(
        s.gpu.launches().len(),
        1,
        "the bundle falls back to the gpu pool"
    );
    // A job whose worker checked in before failing does not back the pool off.
    let report = s.manager.tick().await.unwrap();
    let gpu_job = s.gpu.jobs()[0].id.clone();
    s.gpu.set_state(&gpu_job, JobState::Active);
    let unique = launch_unique(&s.gpu.jobs()[0].name).unwrap().to_owned();
    s.server.set_workers(vec![serde_json::json!({
        "worker_id": format!("node-{unique}"), "run_uuids": [], "is_terminating": false
    })]);
    s.manager.tick().await.unwrap();
    s.gpu.set_state(&gpu_job, JobState::Failed);
    let report2 = s.manager.tick().await.unwrap();
    assert!(report2.events.contains(&TickEvent::JobFailed {
        pool: "gpu".into(),
        job_id: gpu_job,
        before_active: false
    }));
    assert_eq!(s.manager.status().pools[1].health.failures, 0);
    drop(report);
}

#[tokio::test]
async fn one_unlistable_pool_is_skipped_and_its_demand_falls_back() {
    let gpu = PoolPolicy {
        tag: None,
        ..gpu_policy()
    };
    let mut s = setup(vec![cpu_bundle(1)], cpu_policy(), gpu).await;
    s.cpu
        .fail_listing(Some("slurm_load_jobs error: Socket timed out"));
    let report = s.manager.tick().await.unwrap();
    assert_eq!(report.pools.pools[0].reason_codes(), "unobserved");
    assert_eq!(s.gpu.launches().len(), 1);
    // Both unlistable: the tick fails, as in the single-backend mode.
    s.gpu.fail_listing(Some("boom"));
    assert!(s.manager.tick().await.is_err());
    assert!(s.manager.status().last_error.is_some());
}

#[tokio::test]
async fn pool_configuration_is_checked() {
    let s = setup(vec![], cpu_policy(), gpu_policy()).await;
    let client = || {
        CodaLabClient::new(
            &s.server.url(),
            Credentials {
                username: "alice".into(),
                password: Secret::new("alicepw"),
            },
        )
        .unwrap()
    };
    let pool = |policy: PoolPolicy| Pool {
        policy,
        backend: Arc::new(FakeBackend::new(WorkerShape::default())),
        worker: WorkerOptions::default(),
    };
    let err = Manager::with_pools(
        ManagerConfig::default(),
        client(),
        vec![pool(cpu_policy()), pool(cpu_policy())],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration: two pools are named cpu"
    );
    let compat = PoolPolicy {
        launch_mode: LaunchMode::Compat,
        ..cpu_policy()
    };
    let err =
        Manager::with_pools(ManagerConfig::default(), client(), vec![pool(compat)]).unwrap_err();
    assert!(
        err.to_string()
            .contains("pool cpu: pending_timeout needs launch_mode"),
        "{err}"
    );
}

#[tokio::test]
async fn the_single_backend_mode_in_target_mode_bursts() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles((0..7).map(cpu_bundle).collect());
    let client = CodaLabClient::new(
        &server.url(),
        Credentials {
            username: "alice".into(),
            password: Secret::new("alicepw"),
        },
    )
    .unwrap();
    let backend = FakeBackend::new(WorkerShape::from_flags(4, 0, 8192));
    let flags = SingleBackendFlags {
        launch_mode: LaunchMode::Target,
        max_launches_per_tick: 5,
        limits: codalab_wm_core::policy::PolicyConfig {
            min_workers: 0,
            max_workers: 10,
            min_seconds_between_workers: 60,
        },
        ..SingleBackendFlags::default()
    };
    let pool = Pool::single_backend(&flags, Arc::new(backend.clone()), WorkerOptions::default());
    let mut manager = Manager::new(ManagerConfig::default(), client, pool);
    assert_eq!(manager.tick().await.unwrap().launched.len(), 5);
    let report = manager.tick().await.unwrap();
    assert_eq!(
        report.decision.reason_codes(),
        "want_workers,target,rate_limited"
    );
    manager.advance_clock(MIN);
    assert_eq!(manager.tick().await.unwrap().launched.len(), 2);
    assert_eq!(manager.status().pools[0].name, "fake");
}
