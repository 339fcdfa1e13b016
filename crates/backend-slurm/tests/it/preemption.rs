//! Preemption clean-up with the real parser and the real manager: recorded `squeue` lines of a
//! PREEMPTED and a NODE_FAIL job go through [`codalab_wm_slurm::squeue::parse`], and the
//! resulting jobs are what an in-memory backend reports to a [`Manager`] fed by the fake
//! CodaLab server. The one-node test cluster of `cargo xtask services up slurm` has no
//! `PreemptType`, so a real preemption cannot be produced there; the states and reasons are
//! the controller's own.
//!
//! A preempted job is logged and counted once (`TickEvent::JobPreempted`, counter
//! `job_preemptions`), is not capacity, is no failure (not counted toward
//! `--exit-after-num-failed`, no pool backoff), and its bundle gets a new worker by the
//! normal rules.

use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::manager::{Outcome, TickReport};
use codalab_wm_core::policy::PolicyConfig;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::status::TickEvent;
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{
    JobState, LaunchMode, Manager, ManagerConfig, Pool, SingleBackendFlags, WorkerJob,
    WorkerOptions, WorkerShape,
};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use codalab_wm_slurm::squeue;
use std::sync::Arc;
use std::time::Duration;

const PREFIX: &str = "root-codalab-slurm-worker-";

/// `squeue --states=all --format=%i|%j|%T|%r|%V|%S|%k` lines as slurmctld prints a job preempted
/// (with `PreemptMode=CANCEL`) and a job whose node failed under it.
const RECORDED: &str = "\
1|root-codalab-slurm-worker-aa|PREEMPTED|None|2026-11-21T20:45:01|N/A|(null)
1|root-codalab-slurm-worker-aa|NODE_FAIL|NodeDown|2026-11-21T20:45:01|N/A|(null)
";

fn recorded(line: usize) -> WorkerJob {
    let text = RECORDED.lines().nth(line).unwrap();
    let jobs = squeue::parse(text, PREFIX).unwrap();
    assert_eq!(jobs.len(), 1);
    jobs.into_iter().next().unwrap()
}

async fn manager(mode: LaunchMode) -> (FakeCodaLab, FakeBackend, Manager) {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![FakeBundle::new("alice", 1)]);
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    };
    let client = CodaLabClient::new(&server.url(), credentials).unwrap();
    let backend = FakeBackend::new(WorkerShape::from_flags(1, 0, 2048));
    let config = ManagerConfig {
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
        launch_mode: mode,
        ..SingleBackendFlags::default()
    };
    let pool = Pool::single_backend(&flags, Arc::new(backend.clone()), WorkerOptions::default());
    let manager = Manager::new(config, client, pool);
    (server, backend, manager)
}

fn preempted_events(report: &TickReport) -> Vec<&TickEvent> {
    report
        .events
        .iter()
        .filter(|e| matches!(e, TickEvent::JobPreempted { .. }))
        .collect()
}

#[test]
fn the_parser_reports_preemptions() {
    let job = recorded(0);
    assert_eq!((job.id.as_str(), job.state), ("1", JobState::Preempted));
    let job = recorded(1);
    assert_eq!(job.state, JobState::Preempted);
    assert_eq!(job.reason.as_deref(), Some("NodeDown"));
}

#[tokio::test]
async fn a_preempted_worker_is_counted_once_and_replaced_without_counting_as_a_failure() {
    let (_server, backend, mut manager) = manager(LaunchMode::Compat).await;
    let report = manager.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1);
    let id = report.launched[0].id.clone();
    backend.set_state(&id, JobState::Active);
    let report = manager.tick().await.unwrap();
    assert!(report.launched.is_empty(), "one worker covers one bundle");

    let parsed = recorded(0);
    assert_eq!(parsed.id, id, "the recorded line is this job");
    backend.set_state_with_reason(&id, parsed.state, parsed.reason.as_deref());
    let report = manager.tick().await.unwrap();
    assert_eq!(
        preempted_events(&report),
        [&TickEvent::JobPreempted {
            pool: "fake".into(),
            job_id: id.clone(),
            reason: None,
        }]
    );
    assert_eq!(report.jobs, 0, "a preempted job is not capacity");
    assert!(report.newly_failed.is_empty(), "a preemption is no failure");
    assert_eq!(report.launched.len(), 1, "the bundle gets a new worker");
    assert_eq!(manager.num_failed(), 0);

    let report = manager.tick().await.unwrap();
    assert!(
        preempted_events(&report).is_empty(),
        "logged and counted once"
    );
    let counters = manager.status().counters;
    let preemptions: Vec<_> = counters
        .iter()
        .filter(|c| c.metric == "job_preemptions")
        .map(|c| (c.pool.as_str(), c.label.as_str(), c.value))
        .collect();
    assert_eq!(preemptions, [("fake", "preempted", 1)]);
    assert!(!counters.iter().any(|c| c.metric == "job_failures"));
    assert_eq!(manager.status().pools[0].failed, 0);

    // --exit-after-num-failed 0 is not exceeded by the preemption.
    let (_, shutdown) = tokio::sync::watch::channel(false);
    assert_eq!(
        manager.run(true, shutdown).await.unwrap(),
        Outcome::Once { launch_errors: 0 }
    );
}

#[tokio::test]
async fn a_node_failure_before_the_worker_ran_does_not_back_a_target_pool_off() {
    let (_server, backend, mut manager) = manager(LaunchMode::Target).await;
    let report = manager.tick().await.unwrap();
    let id = report.launched[0].id.clone();
    let parsed = recorded(1);
    backend.set_state_with_reason(&id, parsed.state, parsed.reason.as_deref());
    let report = manager.tick().await.unwrap();
    assert_eq!(preempted_events(&report).len(), 1);
    assert!(
        !report
            .events
            .iter()
            .any(|e| matches!(e, TickEvent::BackoffStarted { .. })),
        "{:?}",
        report.events
    );
    assert_eq!(manager.status().pools[0].health.failures, 0);
    assert_eq!(report.launched.len(), 1, "replaced at once");
    assert_eq!(backend.launches().len(), 2);

    // A real failure before the worker ran still backs off (the contrast).
    let replacement = report.launched[0].id.clone();
    backend.set_state_with_reason(&replacement, JobState::Failed, Some("NonZeroExitCode"));
    let report = manager.tick().await.unwrap();
    assert!(
        report
            .events
            .iter()
            .any(|e| matches!(e, TickEvent::BackoffStarted { .. }))
    );
    assert_eq!(manager.num_failed(), 1);
}
