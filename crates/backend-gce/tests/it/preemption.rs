//! Preemption → relaunch with the real manager: a [`Manager`] fed by the fake CodaLab server
//! (`codalab-wm-fake-codalab`) drives a real [`GceBackend`] against the fake Compute Engine API
//! (`crates/testkit/gce`; **no Compute Engine emulator exists**, the fake checks every request
//! against Google's discovery document). A Spot VM preempted by Compute Engine
//! (`instanceTerminationAction = DELETE`: STOPPING, then deleted) is reported once as
//! preempted, is not a failure, and its bundle gets a new instance in the same tick.

use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::policy::PolicyConfig;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::status::TickEvent;
use codalab_wm_core::{
    LaunchMode, Manager, ManagerConfig, Pool, SingleBackendFlags, WorkerOptions,
};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use codalab_wm_fake_gce::FakeCompute;
use codalab_wm_gce::{GceBackend, GceConfig};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn a_preempted_spot_vm_is_reported_once_and_its_bundle_gets_a_new_instance() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![FakeBundle::new("alice", 1)]);
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    };
    let fake = FakeCompute::start("test-project").await.unwrap();
    // Operations take a few requests: the preempted VM is seen STOPPING before it is gone.
    fake.set_operation_steps(3);
    let mut config = GceConfig::new("test-project", &["us-central1-a"], "codalab-password");
    config.api_endpoint = fake.api_url();
    config.metadata_url = Some(fake.url().to_owned());
    let backend = GceBackend::new(config, &credentials).unwrap();
    let client = CodaLabClient::new(&server.url(), credentials).unwrap();
    let manager_config = ManagerConfig {
        sleep_time: Duration::ZERO,
        exit_after_num_failed: Some(0),
        ..ManagerConfig::default()
    };
    let flags = SingleBackendFlags {
        limits: PolicyConfig {
            min_workers: 0,
            max_workers: 1,
            min_seconds_between_workers: 0,
        },
        launch_mode: LaunchMode::Compat,
        ..SingleBackendFlags::default()
    };
    let pool = Pool::single_backend(&flags, Arc::new(backend), WorkerOptions::default());
    let mut manager = Manager::new(manager_config, client, pool);

    let report = manager.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1);
    let first = report.launched[0].id.clone();
    let report = manager.tick().await.unwrap();
    assert!(report.launched.is_empty(), "one worker covers one bundle");
    assert_eq!(fake.instance(&first).unwrap().status, "RUNNING");

    fake.preempt(&first);
    let report = manager.tick().await.unwrap();
    let preempted: Vec<&TickEvent> = report
        .events
        .iter()
        .filter(|e| matches!(e, TickEvent::JobPreempted { .. }))
        .collect();
    assert_eq!(preempted.len(), 1, "{:?}", report.events);
    assert!(matches!(preempted[0], TickEvent::JobPreempted { job_id, .. } if *job_id == first));
    assert!(report.newly_failed.is_empty(), "a preemption is no failure");
    assert_eq!(report.launched.len(), 1, "the bundle gets a new instance");
    let second = report.launched[0].id.clone();
    assert_ne!(second, first);
    assert_eq!(manager.num_failed(), 0);

    let report = manager.tick().await.unwrap();
    assert!(
        !report
            .events
            .iter()
            .any(|e| matches!(e, TickEvent::JobPreempted { .. })),
        "reported once"
    );
    assert!(
        fake.instance(&first).is_none(),
        "Compute Engine deleted the preempted VM"
    );
    assert!(fake.instance(&second).is_some());
    assert!(fake.requests().iter().all(|r| r.rejection.is_none()));
}
