//! A Spot pool's fallback to on-demand with the real manager (issue #32): a [`Manager`] fed
//! by the fake CodaLab server (`codalab-wm-fake-codalab`) drives two real [`GceBackend`]
//! pools, `gpu-spot` (Spot VMs, zone a) and `gpu-standard` (standard VMs, zone b), against
//! the fake Compute Engine API (`crates/testkit/gce`; **no Compute Engine emulator exists**,
//! the fake checks every request against Google's discovery document). A preempted Spot VM
//! and a stockout (`ZONE_RESOURCE_POOL_EXHAUSTED`) within the window send new launches to
//! the standard pool; no request is refused by the document.

use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::pools::fallback::Fallback;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::status::{LaunchResult, TickEvent};
use codalab_wm_core::{Manager, ManagerConfig, Pool, PoolPolicy, WorkerBackend, WorkerOptions};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use codalab_wm_fake_gce::FakeCompute;
use codalab_wm_gce::{GceBackend, GceConfig, Provisioning};
use std::sync::Arc;
use std::time::Duration;

const ZONE_A: &str = "us-central1-a";
const ZONE_B: &str = "us-central1-b";

fn credentials() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    }
}

/// A pool of `provisioning` VMs in `zone`, its policy priced `price` an hour.
fn pool(
    fake: &FakeCompute,
    name: &str,
    zone: &str,
    provisioning: Provisioning,
    price: f64,
) -> Pool {
    let mut config = GceConfig::new("test-project", &[zone], "codalab-password");
    config.api_endpoint = fake.api_url();
    config.metadata_url = Some(fake.url().to_owned());
    config.pool = name.to_owned();
    config.provisioning = provisioning;
    let backend = GceBackend::new(config, &credentials()).unwrap();
    let policy = PoolPolicy {
        max: 2,
        min_seconds_between_workers: 0,
        cost_per_hour: Some(price),
        ..PoolPolicy::new(name, backend.worker_shape())
    };
    Pool {
        policy,
        backend: Arc::new(backend),
        worker: WorkerOptions::default(),
    }
}

fn launches(events: &[TickEvent], pool: &str, result: LaunchResult) -> usize {
    (events.iter())
        .filter(|e| matches!(e, TickEvent::Launch { pool: p, result: r, .. } if p == pool && *r == result))
        .count()
}

#[tokio::test]
async fn a_preempted_spot_vm_and_a_stockout_send_new_launches_to_standard_vms() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![FakeBundle::new("alice", 1)]);
    let fake = FakeCompute::start("test-project").await.unwrap();
    // Operations take a few requests: the preempted VM is seen STOPPING before it is gone.
    fake.set_operation_steps(3);
    let mut spot = pool(&fake, "gpu-spot", ZONE_A, Provisioning::Spot, 0.9);
    spot.policy.fallback = Some(Fallback {
        after: 2,
        ..Fallback::to("gpu-standard")
    });
    let standard = pool(&fake, "gpu-standard", ZONE_B, Provisioning::Standard, 2.9);
    let client = CodaLabClient::new(&server.url(), credentials()).unwrap();
    let config = ManagerConfig {
        sleep_time: Duration::ZERO,
        ..ManagerConfig::default()
    };
    let mut manager = Manager::with_pools(config, client, vec![spot, standard]).unwrap();

    // The cheaper Spot pool takes the bundle.
    let report = manager.tick().await.unwrap();
    assert_eq!(
        launches(&report.events, "gpu-spot", LaunchResult::Started),
        1
    );
    let first = report.launched[0].id.clone();
    manager.tick().await.unwrap();
    // Compute Engine preempts it, and zone a has no capacity left for the relaunch.
    fake.preempt(&first);
    fake.exhaust_zone(ZONE_A);
    let report = manager.tick().await.unwrap();
    assert!(
        (report.events.iter())
            .any(|e| matches!(e, TickEvent::JobPreempted { job_id, .. } if *job_id == first)),
        "{:?}",
        report.events
    );
    assert_eq!(
        launches(&report.events, "gpu-spot", LaunchResult::Failed),
        1
    );
    let switched = (report.events.iter()).find_map(|e| match e {
        TickEvent::CapacitySwitched(switch) => Some((switch.switch, switch.why.clone())),
        _ => None,
    });
    let (switch, why) = switched.expect("a switch");
    assert_eq!(switch, "to_fallback");
    let why = why.unwrap();
    assert!(
        why.starts_with("2 capacity events in 30 min, the last: gce has no capacity for a worker now: ZONE_RESOURCE_POOL_EXHAUSTED in every zone (us-central1-a)"),
        "{why}"
    );
    // Past the launch failure's backoff the bundle gets a standard VM in zone b, and the Spot
    // pool launches nothing.
    manager.advance_clock(Duration::from_secs(301));
    let report = manager.tick().await.unwrap();
    assert_eq!(
        launches(&report.events, "gpu-standard", LaunchResult::Started),
        1
    );
    assert_eq!(
        launches(&report.events, "gpu-spot", LaunchResult::Started),
        0
    );
    assert_eq!(report.pools.pools[0].reason_codes(), "on_fallback");
    let vm = fake.instance(&report.launched[0].id).unwrap();
    assert_eq!(vm.zone, ZONE_B);
    assert!(fake.requests().iter().all(|r| r.rejection.is_none()));
}
