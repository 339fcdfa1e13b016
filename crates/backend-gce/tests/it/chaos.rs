//! Chaos against the fake Compute Engine API (**no Compute Engine emulator exists**; the fake
//! of `crates/testkit/gce` checks every request against Google's discovery document): the real
//! [`Manager`], fed by the fake CodaLab server, drives a real [`GceBackend`] while the API
//! answers 429 and 503 to listings and inserts. A failed listing skips the tick (an error, no
//! launch on a failed read); a failed insert is a launch error; the manager recovers when the
//! faults stop, and never has more than `--max-workers` instances.

use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::policy::PolicyConfig;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::{
    LaunchMode, Manager, ManagerConfig, Pool, SingleBackendFlags, WorkerOptions,
};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use codalab_wm_fake_gce::{FakeCompute, Fault};
use codalab_wm_gce::{GceBackend, GceConfig};
use std::sync::Arc;
use std::time::Duration;

const MAX_WORKERS: usize = 2;

#[tokio::test]
async fn throttled_and_failing_api_skips_ticks_and_never_exceeds_max_workers() {
    let server = FakeCodaLab::start().await.unwrap();
    let bundles = (0..4).map(|_| FakeBundle::new("alice", 1)).collect();
    server.set_bundles(bundles);
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    };
    let fake = FakeCompute::start("test-project").await.unwrap();
    let mut config = GceConfig::new("test-project", &["us-central1-a"], "codalab-password");
    config.api_endpoint = fake.api_url();
    config.metadata_url = Some(fake.url().to_owned());
    let backend = GceBackend::new(config, &credentials).unwrap();
    let client = CodaLabClient::new(&server.url(), credentials).unwrap();
    let flags = SingleBackendFlags {
        limits: PolicyConfig {
            min_workers: 0,
            max_workers: MAX_WORKERS as u32,
            min_seconds_between_workers: 0,
        },
        launch_mode: LaunchMode::Compat,
        ..SingleBackendFlags::default()
    };
    let pool = Pool::single_backend(&flags, Arc::new(backend), WorkerOptions::default());
    let config = ManagerConfig {
        sleep_time: Duration::ZERO,
        ..ManagerConfig::default()
    };
    let mut manager = Manager::new(config, client, pool);
    let list = "compute.instances.aggregatedList";

    for fault in [
        Fault::new(429, "rateLimitExceeded"),
        Fault::new(503, "backendError"),
    ] {
        fake.push_fault(fault.on(list));
        let error = manager.tick().await.unwrap_err();
        assert!(error.is_temporary(), "{error}");
        assert!(fake.instances().is_empty(), "no launch on a failed read");
    }

    fake.push_fault(Fault::new(503, "backendError").on("compute.instances.insert"));
    let report = manager.tick().await.unwrap();
    assert_eq!(report.launch_errors.len(), 1, "{:?}", report.launch_errors);
    assert!(
        report.launch_errors[0].contains("503"),
        "{:?}",
        report.launch_errors
    );
    assert!(fake.instances().len() < MAX_WORKERS);

    for round in 0..6 {
        if round % 2 == 0 {
            fake.push_fault(Fault::new(429, "rateLimitExceeded").on(list));
        }
        let _ = manager.tick().await;
        assert!(
            fake.instances().len() <= MAX_WORKERS,
            "round {round}: {:?}",
            fake.instances()
        );
    }
    assert_eq!(
        fake.instances().len(),
        MAX_WORKERS,
        "recovered to --max-workers"
    );
    let rejected: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.rejection.is_some())
        .collect();
    assert!(rejected.is_empty(), "{rejected:?}");
}
