//! A Spot pool with an on-demand fallback (issue #32), in the manager against the in-process
//! fake CodaLab server (`codalab_wm_fake_codalab`) and two in-memory `testing::FakeBackend`s:
//! a preemption and a stockout within the window switch new launches to the fallback; after
//! the cool-down one launch tries the Spot pool again and its worker's check-in takes it back.
//! Time runs on the manager clock (`Manager::advance_clock`), no sleeping.

use codalab_wm_core::checkin::launch_unique;
use codalab_wm_core::pools::fallback::Fallback;
use codalab_wm_core::status::{LaunchResult, TickEvent};
use codalab_wm_core::testing::{FakeBackend, capacity_switches};
use codalab_wm_core::{JobState, Manager, Pool, PoolPolicy, WorkerOptions, WorkerShape};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::sync::Arc;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

struct Setup {
    server: FakeCodaLab,
    spot: FakeBackend,
    standard: FakeBackend,
    manager: Manager,
}

fn policy(name: &str, price: f64) -> PoolPolicy {
    PoolPolicy {
        max: 4,
        max_launches_per_tick: 4,
        min_seconds_between_workers: 0,
        cost_per_hour: Some(price),
        ..PoolPolicy::new(name, WorkerShape::from_flags(4, 0, 8192))
    }
}

async fn setup() -> Setup {
    setup_with(|policy| policy).await
}

/// The setup with the Spot pool's policy changed by `spot`.
async fn setup_with(spot: impl FnOnce(PoolPolicy) -> PoolPolicy) -> Setup {
    let server = FakeCodaLab::start().await.unwrap();
    let client = crate::fixtures::alice_client(&server.url());
    let spot_policy = PoolPolicy {
        fallback: Some(Fallback {
            after: 2,
            window: 10 * MIN,
            cooldown: 30 * MIN,
            ..Fallback::to("standard")
        }),
        ..policy("spot", 0.3)
    };
    let spot_policy = spot(spot_policy);
    let spot = FakeBackend::named("fake-spot", spot_policy.shape);
    let standard = FakeBackend::named("fake-standard", spot_policy.shape);
    spot.unique_names(true);
    standard.unique_names(true);
    let worker = WorkerOptions {
        server: server.url(),
        executable: "cl-worker-stand-in".into(),
        ..WorkerOptions::default()
    };
    let pools = vec![
        Pool {
            policy: spot_policy,
            backend: Arc::new(spot.clone()),
            worker: worker.clone(),
        },
        Pool {
            policy: policy("standard", 1.0),
            backend: Arc::new(standard.clone()),
            worker,
        },
    ];
    let config = crate::fixtures::instant();
    let manager = Manager::with_pools(config, client, pools).unwrap();
    Setup {
        server,
        spot,
        standard,
        manager,
    }
}

/// A bundle that fills a worker: launches count bundles.
fn bundle(n: u64) -> FakeBundle {
    FakeBundle {
        cpus: 4,
        ..FakeBundle::new("alice", n)
    }
}

fn launches(events: &[TickEvent], pool: &str, result: LaunchResult) -> usize {
    (events.iter())
        .filter(|e| matches!(e, TickEvent::Launch { pool: p, result: r, .. } if p == pool && *r == result))
        .count()
}

/// The server lists the worker of `backend`'s job `index`: it checked in.
fn check_in(s: &Setup, backend: &FakeBackend, index: usize) {
    let name = backend.jobs()[index].name.clone();
    let unique = launch_unique(&name).unwrap();
    s.server.set_workers(vec![serde_json::json!({
        "user_id": "0", "worker_id": format!("node-{unique}"), "cpus": 4, "gpus": 0,
        "memory_bytes": 8u64 << 30, "run_uuids": [], "is_terminating": false,
        "cpus_in_use": 0, "gpus_in_use": 0})]);
}

#[tokio::test]
async fn a_preemption_and_a_stockout_send_launches_to_the_fallback_until_a_retry_checks_in() {
    let mut s = setup().await;
    // The cheaper Spot pool takes the bundle.
    s.server.set_bundles(vec![bundle(1)]);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(launches(&report.events, "spot", LaunchResult::Started), 1);
    // Its worker is preempted, and the relaunch meets a stockout: two capacity events
    // within 10 minutes switch new launches to the fallback.
    s.spot
        .set_state(&report.launched[0].id, JobState::Preempted);
    s.spot.fail_starting(Some(
        "no capacity: ZONE_RESOURCE_POOL_EXHAUSTED in every zone",
    ));
    let report = s.manager.tick().await.unwrap();
    assert_eq!(launches(&report.events, "spot", LaunchResult::Failed), 1);
    assert_eq!(capacity_switches(&report.events), ["to_fallback"]);
    let status = s.manager.status();
    let event = (status.events.iter())
        .find(|e| e.kind.code() == "capacity_switched")
        .unwrap();
    assert_eq!(
        event.message,
        "pool spot: new launches go to standard: 2 capacity events in 10 min, the last: \
         fake has no capacity for a worker now: ZONE_RESOURCE_POOL_EXHAUSTED in every zone"
    );
    // Once the submit failure's backoff is over, new launches go to the fallback, and the
    // Spot pool says why, with the figures.
    s.spot.fail_starting(None);
    s.manager.advance_clock(6 * MIN);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(
        launches(&report.events, "standard", LaunchResult::Started),
        1
    );
    assert_eq!(launches(&report.events, "spot", LaunchResult::Started), 0);
    assert_eq!(report.pools.pools[0].reason_codes(), "on_fallback");
    let reason = report.pools.pools[0].reasons[0].to_string();
    assert!(
        reason.starts_with("new launches go to standard (one tries this pool again in 1440 s): "),
        "{reason}"
    );
    // After the cool-down one launch tries the Spot pool; the other new bundle still goes to
    // the fallback.
    s.server.set_bundles(vec![bundle(1), bundle(2), bundle(3)]);
    s.manager.advance_clock(24 * MIN);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(capacity_switches(&report.events), ["retry"]);
    assert_eq!(launches(&report.events, "spot", LaunchResult::Started), 1);
    assert_eq!(
        launches(&report.events, "standard", LaunchResult::Started),
        1
    );
    // Its worker checks in: the Spot pool takes its launches again.
    let probe = s.spot.jobs().len() - 1;
    s.spot.set_state(&s.spot.jobs()[probe].id, JobState::Active);
    check_in(&s, &s.spot, probe);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(capacity_switches(&report.events), ["restored"]);
    assert!(!report.pools.pools[0].reason_codes().contains("on_fallback"));
    assert_eq!(
        s.standard.jobs().len(),
        2,
        "the fallback got two launches in all"
    );
}

#[tokio::test]
async fn a_spot_job_pending_past_its_timeout_is_a_capacity_event() {
    // Spot capacity that never comes: AWS Batch keeps the job RUNNABLE. One event switches.
    let mut s = setup_with(|policy| PoolPolicy {
        pending_timeout: Some(MIN),
        fallback: policy.fallback.map(|f| Fallback { after: 1, ..f }),
        ..policy
    })
    .await;
    s.server.set_bundles(vec![bundle(1)]);
    let report = s.manager.tick().await.unwrap();
    let job = report.launched[0].id.clone();
    s.manager.advance_clock(MIN + Duration::from_secs(1));
    let report = s.manager.tick().await.unwrap();
    assert!((report.events.iter()).any(
        |e| matches!(e, TickEvent::Stop { job_id, reason: "pending_timeout", .. } if *job_id == job)
    ));
    assert_eq!(capacity_switches(&report.events), ["to_fallback"]);
    // The stuck job's pool takes nothing this tick: the bundle goes to the fallback at once.
    assert_eq!(
        launches(&report.events, "standard", LaunchResult::Started),
        1
    );
    let event = (s.manager.status().events.into_iter())
        .find(|e| e.kind.code() == "capacity_switched")
        .unwrap();
    assert!(
        event
            .message
            .ends_with(&format!("the last: jobs {job} pending too long")),
        "{}",
        event.message
    );
    // Past the timeout's backoff the Spot pool still launches nothing: it is on the fallback.
    s.manager.advance_clock(5 * MIN);
    s.server.set_bundles(vec![bundle(1), bundle(2)]);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(report.pools.pools[0].reason_codes(), "on_fallback");
    assert_eq!(launches(&report.events, "spot", LaunchResult::Started), 0);
    assert_eq!(
        launches(&report.events, "standard", LaunchResult::Started),
        1
    );
}

#[tokio::test]
async fn a_retry_that_stays_queued_goes_back_to_the_fallback_and_its_bundle_with_it() {
    // Review 2026-11-27 §14: the retry launch stays pending (a stockout on AWS Batch is no
    // error), no pending_timeout. Past the pool's bounds (pending: checkin_timeout 300 s,
    // then 300 s to check in) the retry has failed: new launches go to the fallback again
    // and the bundle that waited on the retry job is given to it.
    let mut s = setup_with(|policy| PoolPolicy {
        fallback: policy.fallback.map(|f| Fallback { after: 1, ..f }),
        ..policy
    })
    .await;
    s.server.set_bundles(vec![bundle(1)]);
    let report = s.manager.tick().await.unwrap();
    s.spot
        .set_state(&report.launched[0].id, JobState::Preempted);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(capacity_switches(&report.events), ["to_fallback"]);
    s.manager.advance_clock(30 * MIN);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(capacity_switches(&report.events), ["retry"]);
    let retry = s.spot.jobs().len();
    s.manager.advance_clock(9 * MIN);
    let report = s.manager.tick().await.unwrap();
    assert!(capacity_switches(&report.events).is_empty());
    s.manager.advance_clock(MIN);
    let report = s.manager.tick().await.unwrap();
    assert_eq!(capacity_switches(&report.events), ["to_fallback"]);
    let reason = report.pools.pools[0].reasons[0].to_string();
    assert!(
        reason.contains("the retry failed: its worker did not check in within 10 min"),
        "{reason}"
    );
    assert_eq!(s.spot.jobs().len(), retry, "no other Spot launch");
    let taken = (report.pools.assignments.iter()).find(|a| a.uuid == bundle(1).uuid);
    assert_eq!(taken.map(|a| a.pool.as_str()), Some("standard"));
}
