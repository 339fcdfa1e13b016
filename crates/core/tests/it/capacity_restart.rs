//! A Spot pool's capacity state survives a restart (#40, review §8): a pool that switched its
//! launches to its fallback is still on the fallback after the manager restarts on the same
//! launch record dir (it does not launch Spot again to be preempted `fallback_after` more
//! times), and its cool-down ends when it would have. The real manager, the in-process fake
//! CodaLab and two in-memory `testing::FakeBackend`s (their jobs outlive a manager); time on
//! the manager clock, no sleeping.

use codalab_wm_core::pools::fallback::{CapacityState, Fallback};
use codalab_wm_core::status::{LaunchResult, TickEvent};
use codalab_wm_core::testing::{FakeBackend, capacity_switches};
use codalab_wm_core::{JobState, Manager, Pool, PoolPolicy, RecordKey, WorkerOptions, WorkerShape};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

fn policy(name: &str, price: f64) -> PoolPolicy {
    PoolPolicy {
        max: 4,
        max_launches_per_tick: 4,
        min_seconds_between_workers: 0,
        cost_per_hour: Some(price),
        ..PoolPolicy::new(name, WorkerShape::from_flags(4, 0, 8192))
    }
}

fn manager(
    server: &FakeCodaLab,
    spot: &FakeBackend,
    standard: &FakeBackend,
    dir: &Path,
) -> Manager {
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
    let mut manager = Manager::with_pools(config, client, pools).unwrap();
    let identities = [
        RecordKey::new("spot", "fake-spot test"),
        RecordKey::new("standard", "fake-standard test"),
    ];
    manager.keep_records(dir, &identities).unwrap();
    manager
}

fn started(events: &[TickEvent], pool: &str) -> usize {
    (events.iter())
        .filter(|e| matches!(e, TickEvent::Launch { pool: p, result: LaunchResult::Started, .. } if p == pool))
        .count()
}

fn bundle(n: u64) -> FakeBundle {
    FakeBundle {
        cpus: 4,
        ..FakeBundle::new("alice", n)
    }
}

#[tokio::test]
async fn a_pool_on_its_fallback_stays_there_after_a_restart() {
    let server = FakeCodaLab::start().await.unwrap();
    let spot = FakeBackend::named("fake-spot", WorkerShape::from_flags(4, 0, 8192));
    let standard = FakeBackend::named("fake-standard", WorkerShape::from_flags(4, 0, 8192));
    spot.unique_names(true);
    standard.unique_names(true);
    let dir = tempfile::tempdir().unwrap();
    let mut first = manager(&server, &spot, &standard, dir.path());
    server.set_bundles(vec![bundle(1)]);
    let report = first.tick().await.unwrap();
    assert_eq!(started(&report.events, "spot"), 1);
    // A preemption and a stockout: the Spot pool's launches go to the fallback.
    spot.set_state(&report.launched[0].id, JobState::Preempted);
    spot.fail_starting(Some("no capacity: ZONE_RESOURCE_POOL_EXHAUSTED"));
    let report = first.tick().await.unwrap();
    assert_eq!(capacity_switches(&report.events), ["to_fallback"]);
    spot.fail_starting(None);
    drop(first); // SIGKILL

    let mut next = manager(&server, &spot, &standard, dir.path());
    server.set_bundles(vec![bundle(2)]);
    let report = next.tick().await.unwrap();
    let status = next.status();
    let capacity = &status.pools[0].fallback.as_ref().unwrap().capacity;
    assert!(
        matches!(capacity, CapacityState::Fallback { .. }),
        "after the restart: {capacity:?}"
    );
    assert_eq!(started(&report.events, "spot"), 0, "no Spot launch");
    // The cool-down runs on: after 30 minutes one launch tries the Spot pool again.
    next.advance_clock(31 * MIN);
    server.set_bundles(vec![bundle(2), bundle(3)]);
    let report = next.tick().await.unwrap();
    assert_eq!(capacity_switches(&report.events), ["retry"]);
}
