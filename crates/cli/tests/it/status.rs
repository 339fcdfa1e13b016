//! `cl-worker-manager status`: the view (text and `--json`) of a known status snapshot served
//! as `/status` by an in-process server, as a running manager serves it; and `--dry-tick`,
//! which runs one tick here against the in-process fake CodaLab server and submits nothing.

use axum::Router;
use axum::routing::get;
use codalab_wm_core::LaunchMode;
use codalab_wm_core::budget::{BudgetLimits, BudgetStatus};
use codalab_wm_core::estimate::{BundleEstimate, StartEstimate};
use codalab_wm_core::events::{Event, EventKind};
use codalab_wm_core::policy::Reason;
use codalab_wm_core::pools::{PoolDecision, PoolHealth, PoolVerdict, UnservedBundle};
use codalab_wm_core::status::{Counter, FailureRecord, PoolStatus, ShapeStatus, Status};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

fn pool(name: &str, shape: ShapeStatus) -> PoolStatus {
    PoolStatus {
        name: name.into(),
        backend: "slurm-batch".into(),
        launch_mode: LaunchMode::Target,
        shape,
        min: 0,
        max: 4,
        tag: None,
        tag_exclusive: false,
        cost: 1.0,
        cost_per_hour: None,
        spill_after_seconds: None,
        fallback: None,
        active: 0,
        pending: 0,
        failed: 0,
        stopping: 0,
        workers: Default::default(),
        health: PoolHealth::default(),
        backing_off_until: None,
        suspended: None,
        last_decision: None,
        assigned: Vec::new(),
    }
}

/// A manager 200 s up with a busy CPU pool and a GPU pool that backs off.
fn known_status() -> Status {
    let cpu = PoolStatus {
        spill_after_seconds: Some(600),
        active: 3,
        pending: 1,
        failed: 1,
        assigned: vec!["0x01".into(), "0x02".into()],
        last_decision: Some(PoolDecision {
            pool: "cpu".into(),
            launch_mode: LaunchMode::Target,
            launches: 0,
            hedges: 0,
            stops: Vec::new(),
            target: Some(4),
            demand: 2,
            workers_needed: 2,
            active: 3,
            pending: 1,
            stopping: 0,
            surplus: 0,
            watch: None,
            reasons: vec![
                Reason::WantWorkers { staged: 2 },
                Reason::Target {
                    target: 4,
                    capacity: 4,
                },
                Reason::MaxReached { jobs: 4, max: 4 },
            ],
        }),
        ..pool(
            "cpu",
            ShapeStatus {
                cpus: 4,
                gpus: 0,
                memory_bytes: 8 << 30,
            },
        )
    };
    let gpu = PoolStatus {
        tag: Some("gpu".into()),
        tag_exclusive: true,
        cost: 10.0,
        cost_per_hour: Some(2.5),
        fallback: Some(codalab_wm_core::status::FallbackStatus {
            pool: "gpu-standard".into(),
            capacity: codalab_wm_core::pools::fallback::CapacityState::Fallback {
                since_seconds: 100,
                retry_at_seconds: 1900,
                why: "2 capacity events in 30 min, the last: job 9 preempted".into(),
            },
        }),
        health: PoolHealth {
            failures: 2,
            last_failure: Some(Duration::from_secs(150)),
            backoff_until: Some(Duration::from_secs(270)),
            ..PoolHealth::default()
        },
        backing_off_until: Some(270),
        suspended: None,
        last_decision: Some(PoolDecision {
            pool: "gpu".into(),
            launch_mode: LaunchMode::Target,
            launches: 0,
            hedges: 0,
            stops: Vec::new(),
            target: None,
            demand: 0,
            workers_needed: 0,
            active: 0,
            pending: 0,
            stopping: 0,
            surplus: 0,
            watch: None,
            reasons: vec![Reason::BackingOff {
                until_seconds: 270,
                remaining_seconds: 70,
                failures: 2,
            }],
        }),
        ..pool(
            "gpu",
            ShapeStatus {
                cpus: 8,
                gpus: 1,
                memory_bytes: 1536 << 20,
            },
        )
    };
    Status {
        uptime_seconds: 200,
        ticks: 41,
        last_error: None,
        last_success_seconds: Some(198),
        last_tick_duration_seconds: 0.25,
        sleep_time_seconds: 5.0,
        staged: 4,
        pools: vec![cpu, gpu],
        unserved: vec![
            UnservedBundle {
                uuid: "0x03".into(),
                reason: Reason::NoFittingPool,
                pools: vec![
                    PoolVerdict {
                        pool: "cpu".into(),
                        reason: Reason::Misfit {
                            detail: "request_cpus=64 > worker cpus=4".into(),
                        },
                    },
                    PoolVerdict {
                        pool: "gpu".into(),
                        reason: Reason::Misfit {
                            detail: "no request_queue, and the pool is exclusive to tag gpu".into(),
                        },
                    },
                ],
            },
            UnservedBundle {
                uuid: "0x04".into(),
                reason: Reason::BackingOff {
                    until_seconds: 270,
                    remaining_seconds: 70,
                    failures: 2,
                },
                pools: Vec::new(),
            },
        ],
        unmet: Vec::new(),
        recent_failures: vec![FailureRecord {
            pool: "gpu".into(),
            at_seconds: 150,
            kind: "submit_failed",
            class: codalab_wm_core::pools::FailureClass::Misconfiguration,
            detail: "sbatch: error: invalid partition specified: gpu".into(),
        }],
        counters: vec![Counter {
            metric: "launches",
            pool: "cpu".into(),
            label: "started".into(),
            value: 4,
        }],
        events: vec![Event::new(
            EventKind::PoolBackingOff {
                pool: "gpu".into(),
                failures: 2,
                until_seconds: 270,
                for_seconds: 120,
            },
            150,
            1_800_000_000,
        )],
        budgets: vec![BudgetStatus {
            scope: "all pools".into(),
            worker_hours: 1.5,
            cost: None,
            limits: BudgetLimits::default(),
            reached: None,
            resumes_at_seconds: None,
        }],
        started_unix_seconds: 1_800_000_000,
        estimates: vec![
            BundleEstimate::new(
                "0x01",
                StartEstimate::WorkerCheckin {
                    pool: "cpu".into(),
                    job: Some("4107".into()),
                    seconds: 12,
                    forecast: false,
                },
            ),
            BundleEstimate::new(
                "0x04",
                StartEstimate::AfterBackoff {
                    pool: "gpu".into(),
                    seconds: 100,
                },
            ),
        ],
        scored: Vec::new(),
    }
}

const KNOWN_VIEW: &str = "\
cl-worker-manager: Up 3m 20s since 2027-01-15 08:00:00 UTC · 41 ticks · last successful tick 2s ago (took 0.25 s) · 4 staged bundles seen (2 assigned and 2 unserved among those read)

Pools
  cpu  slurm-batch · target · 4 cpus, 0 gpus, 8 GiB · spills after 10 min · cost weight 1
    Min / max: 0 / 4 · Target: 4
    Workers, as the server sees them: Starting –, Ready –, Busy –, Vanished –, Lost –
    Jobs on the platform: Pending 1, Active 3, Withdrawn 0
    Staged for it: 2 · Backoff: no · Budget (24 h): no limit
  gpu  slurm-batch · target · 8 cpus, 1 gpus, 1.5 GiB · 2.5 an hour · cost weight 10 · tag gpu (exclusive) · launches go to gpu-standard (2 capacity events in 30 min, the last: job 9 preempted; for 1m 40s, one launch tries this pool again in 28m 20s)
    Min / max: 0 / 4 · Target: –
    Workers, as the server sees them: Starting 0, Ready 0, Busy 0, Vanished 0, Lost 0
    Jobs on the platform: Pending 0, Active 0, Withdrawn 0
    Staged for it: 0 · Backoff: backing off, 1m 10s left (2 failures) · Budget (24 h): no limit

Waiting: staged bundles with no worker coming
  Every staged bundle has a worker coming (or none is staged).

The 2 bundles no pool takes this tick, one by one, with each pool's verdict
  Bundle  Why                                                        Each pool's verdict
  0x03    no pool can run this bundle                                cpu: request_cpus=64 > worker cpus=4; gpu: no request_queue, and the pool is exclusive to tag gpu
  0x04    skipped: backing off for 70 more seconds after 2 failures

When they start (1 after_backoff, 1 worker_checkin)
  Bundle  Expected
  0x01    in ~12 s, when job 4107 of cpu checks in
  0x04    in ~100 s, when gpu stops backing off and a worker checks in

Budgets (rolling 24 hours)
  Scope      Worker-hours  Cost  State
  all pools          1.50     –  no limit

Recent events (newest first)
  When                               Event             What
! 2027-01-15 08:02:30 UTC (50s ago)  pool_backing_off  pool gpu: no launches for 120 s after 2 failures in a row

Last decisions (newest first)
  When    Pool  Launch  Stop  Why
  2s ago  gpu        0     0  backing_off skipped: backing off for 70 more seconds after 2 failures
  2s ago  cpu        0     0  want_workers want to launch a worker because we have 2 > 0 staged bundles
                              target target 4 workers, 4 count as capacity
                              max_reached don't launch because too many workers already (4 >= 4)

Recent failures (newest first)
  When     Pool  Kind           Class             Detail
! 50s ago  gpu   submit_failed  misconfiguration  sbatch: error: invalid partition specified: gpu
";

/// Serves `status` as `/status` on 127.0.0.1, like `--listen`; returns the base URL.
async fn serve(status: Status) -> String {
    let document = serde_json::to_value(status).unwrap();
    let app = Router::new().route(
        "/status",
        get(move || {
            let document = document.clone();
            async move { axum::Json(document) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// Runs the binary (bounded: killed after 60 s) without the caller's `CODALAB_WM_*`.
async fn run(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let (out, err) = (dir.path().join("out"), dir.path().join("err"));
        let mut command = Command::new(BIN);
        command
            .args(&args)
            .env("CODALAB_USERNAME", "alice")
            .env("CODALAB_PASSWORD", "alicepw")
            .env("NO_COLOR", "1")
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        for (key, _) in std::env::vars() {
            if key.starts_with("CODALAB_WM_") {
                command.env_remove(key);
            }
        }
        let mut child = command.spawn().unwrap();
        for _ in 0..6_000 {
            if let Some(status) = child.try_wait().unwrap() {
                return Output {
                    status,
                    stdout: std::fs::read(&out).unwrap(),
                    stderr: std::fs::read(&err).unwrap(),
                };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        child.kill().unwrap();
        panic!(
            "cl-worker-manager did not exit within 60 s: {}",
            std::fs::read_to_string(&err).unwrap()
        );
    })
    .await
    .unwrap()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_of_a_known_status() {
    let url = serve(known_status()).await;
    let output = run(strings(&["status", "--url", &url])).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout, KNOWN_VIEW, "\n{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_is_the_status_document() {
    let url = serve(known_status()).await;
    let output = run(strings(&[
        "status",
        "--url",
        &format!("{url}/status"),
        "--json",
    ]))
    .await;
    assert!(output.status.success());
    let printed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(printed, serde_json::to_value(known_status()).unwrap());
    assert_eq!(printed["pools"][1]["backing_off_until"], 270);
    assert_eq!(printed["unserved"][0]["reason"], "no_fitting_pool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_defaults_to_listen_of_the_config_and_an_absent_manager_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wm.toml");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(&config, format!("listen = \"0.0.0.0:{port}\"\n")).unwrap();
    let output = run(strings(&["--config", config.to_str().unwrap(), "status"])).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot reach the manager at http://127.0.0.1:{port}/status"
        )),
        "{stderr}"
    );
    let output = run(strings(&["status"])).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no manager to ask: pass --url"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_tick_shows_what_one_tick_would_do_and_submits_nothing() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![
        FakeBundle::new("alice", 1),
        FakeBundle {
            cpus: 64,
            ..FakeBundle::new("alice", 2)
        },
    ]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let base = [
        "--server",
        &server.url(),
        "--min-workers",
        "0",
        "--worker-executable",
        "/bin/false",
        "status",
        "--dry-tick",
    ];
    let local = [
        "local",
        "--cpus",
        "2",
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let output = run(strings(&[&base[..], &local[..]].concat())).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("1 ticks · last successful tick 0s ago"),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 staged bundles seen (1 assigned and 1 unserved among those read)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  0x00000000000000000000000000000002  no pool can run this bundle  local: request_cpus=64 > worker cpus=2"),
        "the bundle asking 64 cpus is unserved, with why: {stdout}"
    );
    assert!(
        stdout
            .contains("  local  local · compat · 2 cpus, 0 gpus, 2 GiB\n    Min / max: 0 / 10 · "),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "  local       1     0  want_workers want to launch a worker because we have 1 > 0 staged bundles"
        ),
        "{stdout}"
    );
    // Nothing but the state dir's lock file: no worker record, no log.
    assert!(
        !state.exists()
            || std::fs::read_dir(&state)
                .unwrap()
                .all(|e| e.unwrap().file_name() == "lock"),
        "a dry tick starts no worker"
    );

    let json = [&base[..], &["--json"], &local[..]].concat();
    let output = run(strings(&json)).await;
    assert!(output.status.success());
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let launches = status["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metric"] == "launches")
        .unwrap();
    assert_eq!(launches["label"], "dry_run", "{status}");
}

/// A manager whose pools decided, by core's own policy, for three bundles that wait: one asks
/// 64 GPUs (no pool has them), two fit a CPU pool at its max, one fits a GPU pool that backs off.
fn waiting_status() -> Status {
    use codalab_wm_core::checkin::WorkerState;
    use codalab_wm_core::pools::{ObservedJob, PoolObservation, PoolsObservation, plan_pools};
    use codalab_wm_core::{JobState, PoolPolicy, StagedBundle, WorkerShape};
    let cpu = PoolPolicy {
        max: 2,
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(4, 0, 8192))
    };
    let gpu = PoolPolicy {
        tag: Some("gpuq".into()),
        tag_exclusive: true,
        ..PoolPolicy::new("gpu", WorkerShape::from_flags(8, 2, 16384))
    };
    let bundle = |n: u32, gpus: u32, queue: &str| StagedBundle {
        request_cpus: 1,
        request_gpus: gpus,
        request_memory: 1 << 30,
        request_queue: queue.into(),
        ..StagedBundle::new(format!("0x{n}"))
    };
    let busy = |id: &str| {
        ObservedJob::new(
            id,
            JobState::Active,
            Duration::ZERO,
            Duration::from_secs(3600),
        )
    };
    let health = PoolHealth {
        failures: 3,
        last_failure: Some(Duration::from_secs(100)),
        backoff_until: Some(Duration::from_secs(1300)),
        ..PoolHealth::default()
    };
    let observed = PoolsObservation {
        server: None,
        times: Vec::new(),
        bundles: vec![
            bundle(1, 64, "gpuq"),
            bundle(2, 0, ""),
            bundle(3, 0, ""),
            bundle(4, 1, "gpuq"),
        ],
        pools: vec![
            PoolObservation {
                jobs: vec![busy("7"), busy("8")],
                ..PoolObservation::default()
            },
            PoolObservation {
                health,
                ..PoolObservation::default()
            },
        ],
    };
    let decision = plan_pools(&observed, &[cpu, gpu], Duration::from_secs(200));
    let shape = |cpus, gpus, gib: u64| ShapeStatus {
        cpus,
        gpus,
        memory_bytes: gib << 30,
    };
    let mut cpu = pool("cpu", shape(4, 0, 8));
    cpu.max = 2;
    cpu.active = 2;
    cpu.workers = [(WorkerState::Busy, 2)].into();
    let mut gpu = pool("gpu", shape(8, 2, 16));
    gpu.health = health;
    gpu.backing_off_until = Some(1300);
    Status {
        uptime_seconds: 200,
        ticks: 3,
        last_success_seconds: Some(200),
        staged: 4,
        pools: vec![cpu, gpu],
        unmet: decision.unmet,
        ..Status::default()
    }
}

const WAITING_VIEW: &str = "\
cl-worker-manager: Up 3m 20s · 3 ticks · last successful tick 0s ago (took 0.00 s) · 4 staged bundles seen (0 assigned and 0 unserved among those read)

Pools
  cpu  slurm-batch · target · 4 cpus, 0 gpus, 8 GiB · cost weight 1
    Min / max: 0 / 2 · Target: –
    Workers, as the server sees them: Starting 0, Ready 0, Busy 2, Vanished 0, Lost 0
    Jobs on the platform: Pending 0, Active 2, Withdrawn 0
    Staged for it: 0 · Backoff: no · Budget (24 h): no limit
  gpu  slurm-batch · target · 8 cpus, 2 gpus, 16 GiB · cost weight 1
    Min / max: 0 / 4 · Target: –
    Workers, as the server sees them: Starting 0, Ready 0, Busy 0, Vanished 0, Lost 0
    Jobs on the platform: Pending 0, Active 0, Withdrawn 0
    Staged for it: 0 · Backoff: backing off, 18m 20s left (3 failures) · Budget (24 h): no limit

Waiting: staged bundles with no worker coming
  Pool         Bundles  Asking for                          Why no worker is coming
  (none fits)        1  1 cpus, 64 gpus, 1 GiB, queue gpuq  no pool fits them (cpu: request_queue=gpuq does not match pool tag (none); gpu: request_gpus=64 > worker gpus=2)
  cpu                2  1 cpus, 0 gpus, 1 GiB               the pool is at its max (2 jobs, max 2)
  gpu                1  1 cpus, 1 gpus, 1 GiB, queue gpuq   the pool backs off after 3 failed launches

Budgets (rolling 24 hours)
  No budget set (max_worker_hours_per_day, max_cost_per_day).

Recent events (newest first)
  No events yet.

Last decisions (newest first)
  None yet.
";

/// `status` says why each bundle waits: a bundle asking 64 GPUs, a pool at max, a pool that
/// backs off (the reasons come from core's policy, not written by hand).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_table_says_why_bundles_wait() {
    let status = waiting_status();
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["unmet"][0]["reason"], "no_fitting_pool");
    assert_eq!(json["pools"][0]["workers"]["busy"], 2);
    let url = serve(status).await;
    let output = run(strings(&["status", "--url", &url])).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout, WAITING_VIEW, "\n{stdout}");
}
