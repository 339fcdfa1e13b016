//! Check-in awareness through the whole manager, against the in-process fake CodaLab server
//! (`codalab_wm_fake_codalab`, whose `GET /rest/workers/info` lists what the test sets, shaped
//! like a real 1.7.5 server's reply) and the in-memory `testing::FakeBackend` (jobs named
//! `fake-worker-<unique>`, as Slurm names them). Time runs on the manager clock, moved with
//! `Manager::advance_clock` (no sleeping). The real server and Slurm: `crates/cli/tests/checkin_real.rs` and `pools_slurm.rs`.

use codalab_wm_core::checkin::{WorkerState, launch_unique};
use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::manager::status::TickEvent;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{Manager, ManagerConfig, Pool, PoolPolicy, WorkerOptions, WorkerShape};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

struct Setup {
    server: FakeCodaLab,
    backend: FakeBackend,
    manager: Manager,
}

async fn setup(bundles: u64) -> Setup {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles((1..=bundles).map(|n| FakeBundle::new("alice", n)).collect());
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    };
    let client = CodaLabClient::new(&server.url(), credentials).unwrap();
    let backend = FakeBackend::named("fake", WorkerShape::from_flags(4, 0, 8192));
    backend.start_active(true);
    backend.unique_names(true);
    let policy = PoolPolicy {
        max: 3,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 3,
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(4, 0, 8192))
    };
    let pool = Pool {
        policy,
        backend: Arc::new(backend.clone()),
        worker: WorkerOptions {
            server: server.url(),
            ..WorkerOptions::default()
        },
    };
    let config = ManagerConfig {
        sleep_time: Duration::ZERO,
        ..ManagerConfig::default()
    };
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
    json!({"user_id": "0", "worker_id": format!("node-3.cluster-{unique}"), "tag": null,
        "cpus": 4, "gpus": 0, "memory_bytes": 8589934592u64, "checkin_time": 1795295461,
        "run_uuids": runs, "is_terminating": false, "cpus_in_use": runs.len()})
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

#[tokio::test]
async fn a_worker_that_never_checks_in_is_lost_stopped_and_the_pool_backs_off() {
    let mut s = setup(1).await;
    s.manager.tick().await.unwrap();
    s.manager.tick().await.unwrap();
    s.manager.advance_clock(Duration::from_secs(299));
    let report = s.manager.tick().await.unwrap();
    assert!(
        s.backend.stops().is_empty(),
        "within the timeout: still starting"
    );
    assert!(
        !report
            .events
            .iter()
            .any(|e| matches!(e, TickEvent::Stop { .. }))
    );

    // The workers-info call fails: the last view is kept and nothing is judged lost.
    s.server
        .inject_workers_faults(vec![(503, "Service Unavailable".into())]);
    s.manager.advance_clock(Duration::from_secs(600));
    s.manager.tick().await.unwrap();
    assert!(
        s.backend.stops().is_empty(),
        "no lost verdict from a failed call"
    );

    let report = s.manager.tick().await.unwrap();
    assert_eq!(s.backend.stops(), ["1"]);
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
        failure.detail.contains("never checked in after 89"),
        "{}",
        failure.detail
    );
    assert!(failure.detail.ends_with(&want), "{}", failure.detail);
    assert!(status.pools[0].backing_off_until.is_some());
    assert_eq!(
        status.unmet[0].reason.code(),
        "pool_unavailable",
        "this tick: worker_lost"
    );
    s.manager.tick().await.unwrap();
    let status = s.manager.status();
    assert_eq!(status.unmet[0].reason.code(), "backing_off");
    assert_eq!(
        s.backend.launches().len(),
        1,
        "not replaced while backing off"
    );
    s.manager.advance_clock(Duration::from_secs(301));
    s.backend.set_state("1", codalab_wm_core::JobState::Ended);
    s.manager.tick().await.unwrap();
    assert_eq!(s.backend.launches().len(), 2, "replaced after the backoff");
}

#[tokio::test]
async fn a_worker_that_checked_in_and_vanished_is_noted_then_lost() {
    let mut s = setup(1).await;
    s.manager.tick().await.unwrap();
    let name = s.backend.jobs()[0].name.clone();
    // The server dispatched the bundle to the worker: no longer staged.
    s.server.set_workers(vec![checked_in(&name, &["0x1"])]);
    s.server.set_bundles(Vec::new());
    s.manager.tick().await.unwrap();
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
    s.manager.advance_clock(Duration::from_secs(301));
    s.manager.tick().await.unwrap();
    assert_eq!(s.backend.stops(), ["1"]);
    let detail = &s.manager.status().recent_failures[0].detail;
    assert!(
        detail.contains("checked in, then stopped checking in for 30"),
        "{detail}"
    );
}

#[tokio::test]
async fn no_call_without_jobs() {
    let mut s = setup(0).await;
    s.manager.tick().await.unwrap();
    s.manager.tick().await.unwrap();
    assert!(
        !s.server
            .requests()
            .iter()
            .any(|r| r.path == "/rest/workers/info")
    );
}
