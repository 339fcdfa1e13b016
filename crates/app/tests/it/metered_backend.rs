//! The metering wrapper ([`codalab_wm_app::metrics::metered`]) around a backend in the real
//! manager loop, against the in-process fake CodaLab server (`codalab_wm_fake_codalab`) and
//! core's in-memory `testing::FakeBackend`: what the wrapped backend tells the manager still
//! reaches it.

use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::events::Event;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{Manager, ManagerConfig, Pool, PoolPolicy, WorkerOptions, WorkerShape};
use codalab_wm_fake_codalab::FakeCodaLab;
use std::sync::{Arc, Mutex};

fn cpu(max: u32) -> PoolPolicy {
    PoolPolicy {
        max,
        max_launches_per_tick: 10,
        min_seconds_between_workers: 0,
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(4, 0, 8192))
    }
}

/// A backend that reaps (deletes jobs the platform had stopped) tells the manager, which
/// says `worker_reaped` and counts it.
#[tokio::test]
async fn jobs_a_backend_reaped_are_events() {
    #[derive(Debug)]
    struct Reaping(FakeBackend, Mutex<Vec<String>>);
    #[codalab_wm_core::async_trait]
    impl codalab_wm_core::WorkerBackend for Reaping {
        fn name(&self) -> &str {
            "reaping"
        }
        fn worker_shape(&self) -> WorkerShape {
            self.0.worker_shape()
        }
        async fn get_worker_jobs(
            &self,
        ) -> codalab_wm_core::Result<Vec<codalab_wm_core::WorkerJob>> {
            self.0.get_worker_jobs().await
        }
        async fn start_worker_job(
            &self,
            request: &codalab_wm_core::LaunchRequest<'_>,
        ) -> codalab_wm_core::Result<codalab_wm_core::WorkerJob> {
            self.0.start_worker_job(request).await
        }
        fn take_reaped(&self) -> Vec<String> {
            std::mem::take(&mut self.1.lock().unwrap())
        }
    }
    let server = FakeCodaLab::start().await.unwrap();
    let backend = FakeBackend::named("fake", cpu(10).shape);
    let reaping = Arc::new(Reaping(backend, Mutex::new(vec!["vm-1".into()])));
    let pool = Pool {
        policy: cpu(10),
        backend: codalab_wm_app::metrics::metered(reaping.clone(), "cpu"),
        worker: WorkerOptions::default(),
    };
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    };
    let client = CodaLabClient::new(&server.url(), credentials).unwrap();
    let mut manager = Manager::with_pools(ManagerConfig::default(), client, vec![pool]).unwrap();
    manager.tick().await.unwrap();
    manager.tick().await.unwrap();
    let status = manager.status();
    let reaped: Vec<&Event> = status
        .events
        .iter()
        .filter(|e| e.kind.code() == "worker_reaped")
        .collect();
    assert_eq!(
        reaped.len(),
        1,
        "once, through the metrics wrapper: {:?}",
        status.events
    );
    assert_eq!(reaped[0].message, "pool cpu: stopped job vm-1 deleted");
    assert!(
        status
            .counters
            .iter()
            .any(|c| c.metric == "reaped" && c.pool == "cpu" && c.value == 1)
    );
}
