//! Check-in awareness through the whole manager, against the in-process fake CodaLab server
//! (`codalab_wm_fake_codalab`, whose `GET /rest/workers/info` lists what the test sets, shaped
//! like a real 1.7.5 server's reply) and the in-memory `testing::FakeBackend` (jobs named
//! `fake-worker-<unique>`, as Slurm names them). Time runs on the manager clock, moved with
//! `Manager::advance_clock` (no sleeping). The real server and Slurm: `crates/cli/tests/it/checkin_real.rs` and `pools_slurm.rs`.

use codalab_wm_core::checkin::{WorkerState, launch_unique};
use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::status::TickEvent;
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{Manager, Pool, PoolPolicy, RecordKey, WorkerOptions, WorkerShape};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab, user_id};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

struct Setup {
    server: FakeCodaLab,
    backend: FakeBackend,
    manager: Manager,
}

async fn setup(bundles: u64) -> Setup {
    // 1-CPU workers, each filled by one of the fake's 1-CPU bundles: launches count bundles.
    setup_shaped(bundles, WorkerShape::from_flags(1, 0, 8192)).await
}

/// The setup with workers of `shape`.
async fn setup_shaped(bundles: u64, shape: WorkerShape) -> Setup {
    setup_with(bundles, shape, WorkerOptions::default().idle_seconds).await
}

/// The setup with workers of `shape` that exit after `idle_seconds` without a run.
async fn setup_with(bundles: u64, shape: WorkerShape, idle_seconds: u64) -> Setup {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles((1..=bundles).map(|n| FakeBundle::new("alice", n)).collect());
    let client = crate::fixtures::alice_client(&server.url());
    let backend = FakeBackend::named("fake", shape);
    backend.start_active(true);
    backend.unique_names(true);
    let policy = PoolPolicy {
        max: 3,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 3,
        ..PoolPolicy::new("cpu", shape)
    };
    let pool = Pool {
        policy,
        backend: Arc::new(backend.clone()),
        worker: WorkerOptions {
            server: server.url(),
            idle_seconds,
            ..WorkerOptions::default()
        },
    };
    let config = crate::fixtures::instant();
    let manager = Manager::with_pools(config, client, vec![pool]).unwrap();
    Setup {
        server,
        backend,
        manager,
    }
}

/// The server-side record of a worker started for `job_name`, as `cl-worker --id
/// <host>-<unique>` checks in.
fn checked_in(job_name: &str, runs: &[&str]) -> serde_json::Value {
    let unique = launch_unique(job_name).unwrap();
    json!({"user_id": user_id("alice"), "worker_id": format!("node-3.cluster-{unique}"), "tag": null,
        "cpus": 1, "gpus": 0, "memory_bytes": 8589934592u64, "checkin_time": 1795295461,
        "run_uuids": runs, "is_terminating": false, "cpus_in_use": runs.len(),
        "gpus_in_use": 0})
}

fn workers(manager: &Manager, state: WorkerState) -> usize {
    manager.status().pools[0]
        .workers
        .get(&state)
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_worker_becomes_ready_idle_then_busy_and_idle_ones_are_capacity() {
    let mut s = setup(1).await;
    s.manager.tick().await.unwrap();
    assert_eq!(s.backend.launches().len(), 1);
    let name = s.backend.jobs()[0].name.clone();
    s.manager.tick().await.unwrap();
    assert_eq!(workers(&s.manager, WorkerState::Starting), 1);

    s.server.set_workers(vec![checked_in(&name, &[])]);
    // Two staged bundles, one idle checked-in worker: one launch, not two.
    s.server
        .set_bundles((1..=2).map(|n| FakeBundle::new("alice", n)).collect());
    s.manager.advance_clock(Duration::from_secs(3600));
    s.manager.tick().await.unwrap();
    assert_eq!(workers(&s.manager, WorkerState::ReadyIdle), 1);
    assert_eq!(
        s.backend.launches().len(),
        2,
        "the idle worker takes one bundle"
    );

    s.server.set_workers(vec![checked_in(&name, &["0x1"])]);
    s.manager.tick().await.unwrap();
    assert_eq!(workers(&s.manager, WorkerState::Busy), 1);
    let requests = s.server.requests();
    assert!(requests.iter().any(|r| r.path == "/rest/workers/info"));
}

fn stops(report: &codalab_wm_core::manager::TickReport) -> usize {
    report
        .events
        .iter()
        .filter(|e| matches!(e, TickEvent::Stop { .. }))
        .count()
}

#[tokio::test]
async fn a_worker_that_never_checks_in_is_lost_over_fresh_views_only_then_stopped() {
    let mut s = setup(2).await;
    s.manager.tick().await.unwrap();
    assert_eq!(s.backend.launches().len(), 2);
    // Job 1's worker checks in (the pool's check-ins are visible); job 2's never does.
    let first = s.backend.jobs()[0].name.clone();
    s.server.set_workers(vec![checked_in(&first, &["0x1"])]);
    s.server.set_bundles(vec![FakeBundle::new("alice", 2)]);
    s.manager.tick().await.unwrap();
    assert_eq!(
        s.backend.launches().len(),
        2,
        "job 2 is starting for bundle 2"
    );
    s.manager.advance_clock(Duration::from_secs(299));
    let report = s.manager.tick().await.unwrap();
    assert_eq!(stops(&report), 0, "within the timeout: still starting");

    // The workers-info call fails for 600 s: the last view is kept and nothing is judged.
    s.server
        .inject_workers_faults(vec![(503, "Service Unavailable".into())]);
    s.manager.advance_clock(Duration::from_secs(600));
    s.manager.tick().await.unwrap();
    assert!(
        s.backend.stops().is_empty(),
        "no verdict from a failed call"
    );
    // The first good view after the outage: every clock starts again.
    let report = s.manager.tick().await.unwrap();
    assert_eq!(
        stops(&report),
        0,
        "time without a view is not time without a check-in"
    );
    s.manager.advance_clock(Duration::from_secs(301));
    let report = s.manager.tick().await.unwrap();
    // Job 3 was launched for bundle 2 while the view was stale (job 2 then counted as busy);
    // it never checked in either. Job 1, busy, is never a candidate.
    assert_eq!(
        s.backend.stops(),
        ["2", "3"],
        "only those that never checked in"
    );
    assert!(report.events.iter().any(|e| matches!(
        e,
        TickEvent::Stop {
            reason: "worker_lost",
            ok: true,
            ..
        }
    )));
    assert!(
        report
            .events
            .iter()
            .any(|e| matches!(e, TickEvent::BackoffStarted { failures: 1, .. }))
    );
    let status = s.manager.status();
    let failure = &status.recent_failures[0];
    assert_eq!(failure.kind, "worker_lost");
    let want = format!(
        "s: check the worker image, credentials, and that nodes reach {}",
        s.server.url()
    );
    assert!(
        failure.detail.contains("never checked in after 301"),
        "{}",
        failure.detail
    );
    assert!(failure.detail.ends_with(&want), "{}", failure.detail);
    assert!(status.pools[0].backing_off_until.is_some());
}

#[tokio::test]
async fn a_worker_that_checked_in_and_vanished_is_noted_and_never_stopped() {
    let mut s = setup(1).await;
    s.manager.tick().await.unwrap();
    let name = s.backend.jobs()[0].name.clone();
    // The server dispatched the bundle to the worker: no longer staged.
    s.server.set_workers(vec![checked_in(&name, &["0x1"])]);
    s.server.set_bundles(Vec::new());
    s.manager.tick().await.unwrap();
    // A partition: the server drops the worker; its bundle waits as worker_offline.
    s.server.set_workers(Vec::new());
    let report = s.manager.tick().await.unwrap();
    assert!(
        report
            .events
            .iter()
            .any(|e| matches!(e, TickEvent::WorkerVanished { job_id, .. } if job_id == "1"))
    );
    let report = s.manager.tick().await.unwrap();
    assert!(
        !report
            .events
            .iter()
            .any(|e| matches!(e, TickEvent::WorkerVanished { .. })),
        "noted once"
    );
    for _ in 0..24 {
        s.manager.advance_clock(Duration::from_secs(3600));
        assert_eq!(stops(&s.manager.tick().await.unwrap()), 0);
    }
    assert!(
        s.backend.stops().is_empty(),
        "a day later, still not stopped"
    );
    assert_eq!(workers(&s.manager, WorkerState::Vanished), 1);
    // It counts toward max: three bundles, max 3, one vanished worker: two launches.
    s.server
        .set_bundles((1..=3).map(|n| FakeBundle::new("alice", n)).collect());
    s.manager.tick().await.unwrap();
    assert_eq!(s.backend.launches().len(), 3);
}

#[tokio::test]
async fn workers_nobody_sees_check_in_are_kept_and_back_the_pool_off_once_each() {
    // The workers log in as another account (or never reach the server): the manager's list
    // never shows one. They are not stopped, and the pool backs off instead of relaunching.
    let mut s = setup(1).await;
    s.manager.tick().await.unwrap();
    s.manager.tick().await.unwrap();
    s.manager.advance_clock(Duration::from_secs(4000));
    let report = s.manager.tick().await.unwrap();
    assert_eq!(stops(&report), 0);
    assert!(s.backend.stops().is_empty());
    let status = s.manager.status();
    assert_eq!(status.recent_failures[0].kind, "worker_unconfirmed");
    assert!(
        status.recent_failures[0]
            .detail
            .contains("no worker of this pool has been seen checking in"),
        "{}",
        status.recent_failures[0].detail
    );
    assert!(status.pools[0].backing_off_until.is_some());
    s.manager.advance_clock(Duration::from_secs(10));
    s.manager.tick().await.unwrap();
    assert_eq!(s.manager.status().recent_failures.len(), 1, "once per job");
}

#[tokio::test]
async fn one_call_a_tick_jobs_or_not() {
    // The dispatch model plans a burst of bundles after a quiet spell on a fresh list too.
    let mut s = setup(0).await;
    s.manager.tick().await.unwrap();
    s.manager.tick().await.unwrap();
    let calls = (s.server.requests().iter())
        .filter(|r| r.path == "/rest/workers/info")
        .count();
    assert_eq!(calls, 2);
}

#[tokio::test]
async fn memory_held_by_runs_it_read_keeps_a_worker_from_looking_free() {
    // A 4-CPU 16 GiB worker runs two bundles of 8g the manager read while staged: its CPUs
    // have room, its memory none. The worker list does not say what memory runs hold; the
    // manager sums their requests, so a third 8g bundle gets a worker of its own rather than
    // the estimate "now: worker … has room" on one the server will not give it.
    let mut s = setup_shaped(0, WorkerShape::from_flags(4, 0, 16 * 1024)).await;
    let big = |n| FakeBundle {
        memory: "8g".into(),
        ..FakeBundle::new("alice", n)
    };
    s.server.set_bundles(vec![big(1), big(2)]);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "both fit one worker");
    let job = s.backend.jobs()[0].name.clone();
    let (b1, b2) = (big(1).uuid, big(2).uuid);
    let mut worker = checked_in(&job, &[&b1, &b2]);
    worker["cpus"] = 4.into();
    worker["memory_bytes"] = (16u64 << 30).into();
    s.server.set_workers(vec![worker]);
    s.server.set_bundles(vec![big(3)]);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{:?}", report.events);
    let status = s.manager.status();
    let estimate = (status.estimates.iter())
        .find(|e| e.uuid == big(3).uuid)
        .unwrap();
    assert!(!estimate.text.starts_with("now"), "{}", estimate.text);
}

#[tokio::test]
async fn a_bundle_the_server_never_starts_costs_one_launch_beyond_the_first_not_max() {
    // Review 2026-11-27 §4: the server never starts the one staged bundle (a `request_disk`,
    // a stopped bundle-manager: nothing the dispatch model sees). Every worker launched
    // checks in and stays idle. Once the bundle is overdue the pools launch for it once;
    // the idle workers of its shape are not bought again and again up to `max` (3).
    let mut s = setup(1).await;
    let uuid = FakeBundle::new("alice", 1).uuid;
    let mut last = None;
    for _ in 0..40 {
        let report = s.manager.tick().await.unwrap();
        last = (report.estimates.iter()).find(|e| e.uuid == uuid).cloned();
        let idle: Vec<_> = (s.backend.jobs().iter())
            .map(|job| checked_in(&job.name, &[]))
            .collect();
        s.server.set_workers(idle);
        s.manager.advance_clock(Duration::from_secs(20));
    }
    assert_eq!(
        s.backend.launches().len(),
        2,
        "the first worker, then one for the overdue bundle"
    );
    let last = last.unwrap();
    assert!(
        last.text
            .contains("the server does not start it on an idle worker that fits"),
        "{}",
        last.text
    );
}

#[tokio::test]
async fn a_failed_launch_for_an_overdue_bundle_does_not_use_up_its_one_launch() {
    // The one launch an overdue bundle gets is counted once a worker starts for it: a
    // submit that fails (the pool backs off) launched nothing, so it is tried again.
    let mut s = setup(1).await;
    let mut attempts = 0;
    for tick in 0..40 {
        s.backend
            .fail_starting((3..6).contains(&tick).then_some("sbatch: error"));
        let report = s.manager.tick().await.unwrap();
        attempts += report.launch_errors.len();
        let idle: Vec<_> = (s.backend.jobs().iter())
            .map(|job| checked_in(&job.name, &[]))
            .collect();
        s.server.set_workers(idle);
        s.manager.advance_clock(Duration::from_secs(20));
    }
    assert!(attempts > 0, "a launch for the overdue bundle failed");
    assert_eq!(
        s.backend.launches().len(),
        2,
        "the first worker, then the one for the overdue bundle once a submit succeeds"
    );
}

#[tokio::test]
async fn a_restart_launches_no_second_worker_for_an_overdue_bundle() {
    // The one launch an overdue bundle gets is in the pool's launch record: a manager started
    // again on the same records (a restart, the same backend and server) waits for the
    // server instead of launching for it again (review §4, issue 40 item 3).
    let dir = tempfile::tempdir().unwrap();
    let identities = [RecordKey::new("cpu", "fake cpu")];
    let mut s = setup(1).await;
    s.manager.keep_records(dir.path(), &identities).unwrap();
    let run = |s: &mut Setup| {
        let idle: Vec<_> = (s.backend.jobs().iter())
            .map(|job| checked_in(&job.name, &[]))
            .collect();
        s.server.set_workers(idle);
        s.manager.advance_clock(Duration::from_secs(20));
    };
    while s.backend.launches().len() < 2 {
        s.manager.tick().await.unwrap();
        run(&mut s);
        assert!(
            s.manager.clock() < Duration::from_secs(800),
            "no launch for the overdue bundle"
        );
    }
    let client = CodaLabClient::new(
        &s.server.url(),
        Credentials {
            username: "alice".into(),
            password: Secret::new("alicepw"),
        },
    )
    .unwrap();
    let pool = Pool {
        policy: PoolPolicy {
            max: 3,
            min_seconds_between_workers: 0,
            max_launches_per_tick: 3,
            ..PoolPolicy::new("cpu", WorkerShape::from_flags(1, 0, 8192))
        },
        backend: Arc::new(s.backend.clone()),
        worker: WorkerOptions {
            server: s.server.url(),
            ..WorkerOptions::default()
        },
    };
    let config = crate::fixtures::instant();
    drop(std::mem::replace(
        &mut s.manager,
        Manager::with_pools(config, client, vec![pool]).unwrap(),
    ));
    s.manager.keep_records(dir.path(), &identities).unwrap();
    for _ in 0..20 {
        s.manager.tick().await.unwrap();
        run(&mut s);
    }
    assert_eq!(
        s.backend.launches().len(),
        2,
        "the restarted manager launched again for the overdue bundle"
    );
}

/// #42 item 4, as on the real cluster (`bench-harness slurm-forecast`): while the platform
/// forecasts a queued job's start, the bundle's estimate is that and a worker's start-up; once
/// the forecast's time has passed and the job still pends (Slurm lists the job ahead as
/// completing for a while), it starts any moment: the estimate is the start-up, still resting
/// on the forecast, not the job's age in the queue.
#[tokio::test]
async fn a_forecast_whose_time_has_passed_means_any_moment_not_the_jobs_age() {
    let mut s = setup(1).await;
    s.backend.start_active(false);
    s.manager.tick().await.unwrap();
    let job = s.backend.jobs()[0].id.clone();
    s.backend.set_state_with_reason(
        &job,
        codalab_wm_core::backend::JobState::Pending,
        Some("Resources"),
    );
    let uuid = FakeBundle::new("alice", 1).uuid;
    let estimate = |s: &Setup| {
        let status = s.manager.status();
        let found = status.estimates.iter().find(|e| e.uuid == uuid).cloned();
        found.expect("the bundle has an estimate")
    };
    let now = std::time::SystemTime::now();
    s.backend
        .set_expected_start(&job, Some(now + Duration::from_secs(3600)));
    s.manager.advance_clock(Duration::from_secs(600));
    s.manager.tick().await.unwrap();
    let ahead = estimate(&s);
    assert!(ahead.text.contains("platform's forecast"), "{}", ahead.text);
    assert!(ahead.seconds.unwrap() > 3000, "{}", ahead.text);
    s.backend
        .set_expected_start(&job, Some(now - Duration::from_secs(60)));
    s.manager.tick().await.unwrap();
    let due = estimate(&s);
    assert!(due.text.contains("platform's forecast"), "{}", due.text);
    let startup = PoolPolicy::new("cpu", WorkerShape::from_flags(1, 0, 8192)).startup_grace;
    assert_eq!(due.seconds, Some(startup.as_secs()), "{}", due.text);
}

#[tokio::test]
async fn a_listed_worker_whose_job_ended_gives_no_room_and_a_bundle_gets_a_launch() {
    // CodaLab 1.7.5's `cl-worker` never checks out: one that idled out stays in the server's
    // list, idle, until the server forgets it a minute later, and the server offers it bundles
    // it never takes (the `advise` bench, BENCH.md #43). Workers that wait 600 s for a run
    // (the default) outlive that minute: a bundle staged in it gets a launch at once, not
    // when the list forgets the worker; a worker whose job is live keeps its room.
    let mut s = setup(1).await;
    s.manager.tick().await.unwrap();
    let first = s.backend.jobs()[0].clone();
    s.server.set_bundles(Vec::new());
    s.server
        .set_workers(vec![checked_in(&first.name, &["0x1"])]);
    s.manager.tick().await.unwrap();
    s.server.set_workers(vec![checked_in(&first.name, &[])]);
    s.manager.tick().await.unwrap();
    assert_eq!(s.backend.launches().len(), 1);

    // Its job ends (an idle exit); the server still lists it, idle, when a bundle is staged.
    s.backend
        .set_state(&first.id, codalab_wm_core::backend::JobState::Ended);
    s.server.set_bundles(vec![FakeBundle::new("alice", 2)]);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "{:?}", report.estimates);

    // The new worker checks in, idle, beside the ghost: the next bundle fits it, no launch.
    let second = (s.backend.jobs().into_iter())
        .find(|job| job.id != first.id)
        .unwrap();
    s.server.set_workers(vec![
        checked_in(&first.name, &[]),
        checked_in(&second.name, &[]),
    ]);
    let report = s.manager.tick().await.unwrap();
    assert!(report.launched.is_empty(), "{:?}", report.estimates);
}

#[tokio::test]
async fn a_listed_worker_whose_job_ended_keeps_its_room_where_a_new_one_would_idle_out_first() {
    // Workers that wait 30 s for a run would exit unused while the server still offers the
    // listed one every bundle (the `advise` bench of 2026-11-30: 5 of 12 ran nothing), so the
    // pool counts its room, as the server does, until the list forgets it.
    let mut s = setup_with(1, WorkerShape::from_flags(1, 0, 8192), 30).await;
    s.manager.tick().await.unwrap();
    let first = s.backend.jobs()[0].clone();
    s.server.set_bundles(Vec::new());
    s.server.set_workers(vec![checked_in(&first.name, &[])]);
    s.manager.tick().await.unwrap();
    s.backend
        .set_state(&first.id, codalab_wm_core::backend::JobState::Ended);
    s.server.set_bundles(vec![FakeBundle::new("alice", 2)]);
    let report = s.manager.tick().await.unwrap();
    assert!(report.launched.is_empty(), "{:?}", report.estimates);
    s.server.set_workers(Vec::new());
    let report = s.manager.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1, "once the server forgets it");
}
