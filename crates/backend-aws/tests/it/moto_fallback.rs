//! A Spot pool's fallback to on-demand with the real manager on AWS Batch (issue #32): a
//! [`Manager`] fed by the fake CodaLab server (`codalab-wm-fake-codalab`) drives two real
//! [`AwsBatchBackend`] pools through the real aws-sdk-batch client against moto on 127.0.0.1
//! (`cargo xtask services up moto`): `spot` on the queue `codalab-batch-spot` and `standard`
//! on `codalab-batch-cpu`. A Spot host reclaimed (the job failed through the real
//! `TerminateJob` API with AWS Batch's reclaim reason) and a Spot job kept waiting past its
//! `pending_timeout` (moto's state manager holds it, as AWS keeps a Spot job RUNNABLE when
//! capacity never comes) switch new launches to the standard queue. No worker checks in: no
//! stop here touches a worker that has.

use crate::support::moto::*;
use codalab_wm_aws::{AwsBatchBackend, AwsBatchConfig};
use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::pools::fallback::{CapacityState, Fallback};
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::status::{LaunchResult, TickEvent};
use codalab_wm_core::testing::{capacity_switches, require_service};
use codalab_wm_core::{JobState, Manager, ManagerConfig, Pool, PoolPolicy, WorkerBackend};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::sync::Arc;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// A pool named `name` on `queue`, priced `price` an hour, with its own manager id.
async fn pool(name: &str, queue: &str, price: f64) -> (Pool, Arc<AwsBatchBackend>) {
    let base = fresh_config();
    let config = AwsBatchConfig {
        job_queue: queue.to_owned(),
        manager_id: Some(format!("{}-{name}", base.manager_id())),
        ..base
    };
    let backend = Arc::new(backend(&config).await);
    let policy = PoolPolicy {
        max: 2,
        min_seconds_between_workers: 0,
        cost_per_hour: Some(price),
        ..PoolPolicy::new(name, backend.worker_shape())
    };
    let pool = Pool {
        policy,
        backend: backend.clone(),
        worker: worker(),
    };
    (pool, backend)
}

/// The queue (its ARN) job `id` was submitted to, as AWS Batch describes it.
async fn queue_of(id: &str) -> String {
    let described = (sdk_client(&fresh_config()).await.describe_jobs())
        .jobs(id)
        .send()
        .await
        .unwrap();
    described.jobs()[0]
        .job_queue()
        .unwrap_or_default()
        .to_owned()
}

fn launches(events: &[TickEvent], pool: &str) -> Vec<String> {
    (events.iter())
        .filter_map(|e| match e {
            TickEvent::Launch {
                pool: p,
                result: LaunchResult::Started,
                detail,
            } if p == pool => Some(detail.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_reclaimed_spot_host_and_a_job_stuck_runnable_send_new_launches_to_on_demand() {
    if !require_service("moto", moto_available()) {
        return;
    }
    let moto = StateManager::alone().await;
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![FakeBundle::new("alice", 1)]);
    let (mut spot, spot_backend) = pool("spot", "codalab-batch-spot", 0.3).await;
    spot.policy.pending_timeout = Some(MIN);
    spot.policy.fallback = Some(Fallback {
        after: 2,
        window: 30 * MIN,
        ..Fallback::to("standard")
    });
    let (standard, standard_backend) = pool("standard", "codalab-batch-cpu", 1.0).await;
    let alice = Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    };
    let client = CodaLabClient::new(&server.url(), alice).unwrap();
    let config = ManagerConfig {
        sleep_time: Duration::ZERO,
        ..ManagerConfig::default()
    };
    let mut manager = Manager::with_pools(config, client, vec![spot, standard]).unwrap();

    // The cheaper Spot pool takes the bundle; AWS reclaims its host.
    let report = manager.tick().await.unwrap();
    let first = launches(&report.events, "spot");
    assert_eq!(first.len(), 1, "{:?}", report.events);
    (sdk_client(&fresh_config()).await.terminate_job())
        .job_id(&first[0])
        .reason("Host EC2 (instance i-0123456789abcdef0) terminated.")
        .send()
        .await
        .unwrap();
    assert_eq!(
        ended(&spot_backend, &first[0]).await.state,
        JobState::Preempted
    );

    // The manager sees the preemption (one capacity event) and relaunches on Spot, where
    // the job now stays SUBMITTED: no capacity comes.
    moto.hold();
    let report = manager.tick().await.unwrap();
    assert!(
        (report.events.iter())
            .any(|e| matches!(e, TickEvent::JobPreempted { job_id, .. } if *job_id == first[0])),
        "{:?}",
        report.events
    );
    assert!(
        capacity_switches(&report.events).is_empty(),
        "{:?}",
        report.events
    );
    let second = launches(&report.events, "spot");
    assert_eq!(second.len(), 1, "{:?}", report.events);

    // Past `pending_timeout` it is stopped (never checked in): the second event switches.
    manager.advance_clock(MIN + Duration::from_secs(1));
    let report = manager.tick().await.unwrap();
    assert!(
        (report.events.iter()).any(|e| matches!(e,
            TickEvent::Stop { job_id, reason: "pending_timeout", ok: true, .. } if *job_id == second[0])),
        "{:?}",
        report.events
    );
    assert_eq!(capacity_switches(&report.events), ["to_fallback"]);
    let on_demand = launches(&report.events, "standard");
    assert_eq!(on_demand.len(), 1, "{:?}", report.events);
    assert!(launches(&report.events, "spot").is_empty());
    let status = manager.status();
    let capacity = status.pools[0].fallback.as_ref().map(|f| &f.capacity);
    let Some(CapacityState::Fallback { why, .. }) = capacity else {
        panic!("spot is not on its fallback: {capacity:?}");
    };
    assert!(
        why.starts_with("2 capacity events in 30 min, the last: jobs "),
        "{why}"
    );

    // On AWS: the new job is the standard pool's, on the on-demand queue.
    let listed = standard_backend.get_worker_jobs().await.unwrap();
    assert_eq!(
        listed.iter().map(|j| &j.id).collect::<Vec<_>>(),
        [&on_demand[0]]
    );
    assert!(
        queue_of(&on_demand[0])
            .await
            .ends_with(":job-queue/codalab-batch-cpu")
    );
    assert!(
        queue_of(&second[0])
            .await
            .ends_with(":job-queue/codalab-batch-spot")
    );
    moto.release().unwrap();
    for backend in [&spot_backend, &standard_backend] {
        clean_up(backend).await;
    }
}
