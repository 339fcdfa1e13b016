//! A pool suspended for misconfiguration (`pools::PoolHealth`, `engine/suspension.rs`): the
//! same error three times in a row stops its launches, whatever its backoff; a reload, a
//! restart with other settings, or a check-in of its workers resumes it; a restart with the same
//! settings does not. And the bound it buys, as a property: what a misconfigured pool can spend.
//!
//! What is real: the whole manager loop against the in-process fake CodaLab server
//! (`codalab_wm_fake_codalab`) and the in-memory `testing::FakeBackend`, whose submits fail
//! as a platform refuses a setting, or whose jobs fail before their workers check in. The
//! launch records are files in a temporary directory, as a restart finds them. Time runs on
//! the manager clock (`Manager::advance_clock`), no sleeping.

use codalab_wm_core::events::EventKind;
use codalab_wm_core::pools::MISCONFIGURED_AFTER;
use codalab_wm_core::pools::backoff::RESET_AFTER;
use codalab_wm_core::status::{LaunchResult, TickEvent};
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{JobState, Manager, Pool, PoolPolicy, RecordKey, WorkerOptions, WorkerShape};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use proptest::prelude::*;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What the platform answers each submit with: a partition it does not have.
const REFUSED: &str =
    "sbatch: error: Batch job submission failed: Invalid partition name specified";
/// Why each job of a pool with a broken worker image fails, before its worker checks in.
const EXITED: &str = "exit code 127: cl-worker: not found";
const MAX: u32 = 3;

fn pool(backend: &FakeBackend, server: &FakeCodaLab) -> Pool {
    Pool {
        policy: PoolPolicy {
            max: MAX,
            max_launches_per_tick: MAX,
            min_seconds_between_workers: 0,
            ..PoolPolicy::new("gpu", WorkerShape::from_flags(4, 0, 8192))
        },
        backend: Arc::new(backend.clone()),
        worker: WorkerOptions {
            server: server.url(),
            executable: "cl-worker-stand-in".into(),
            ..WorkerOptions::default()
        },
    }
}

/// A bundle that fills a worker (the server runs one a worker, so launches count bundles).
fn bundle(n: u64) -> FakeBundle {
    FakeBundle {
        cpus: 4,
        ..FakeBundle::new("alice", n)
    }
}

fn backend() -> FakeBackend {
    let backend = FakeBackend::named("fake", WorkerShape::from_flags(4, 0, 8192));
    backend.unique_names(true);
    backend
}

async fn start(
    server: &FakeCodaLab,
    backend: &FakeBackend,
    records: &Path,
    settings: u64,
) -> Manager {
    let client = crate::fixtures::alice_client(&server.url());
    let pools = vec![pool(backend, server)];
    let mut manager = Manager::with_pools(crate::fixtures::instant(), client, pools).unwrap();
    let key = RecordKey {
        settings: Some(settings),
        ..RecordKey::new("gpu", "fake gpu")
    };
    manager.keep_records(records, &[key]).unwrap();
    manager
}

fn failed_submits(events: &[TickEvent]) -> usize {
    (events.iter())
        .filter(|e| {
            matches!(
                e,
                TickEvent::Launch {
                    result: LaunchResult::Failed,
                    ..
                }
            )
        })
        .count()
}

fn suspended(events: &[TickEvent]) -> Option<u32> {
    events.iter().find_map(|e| match e {
        TickEvent::PoolSuspended { failures, .. } => Some(*failures),
        _ => None,
    })
}

/// Ticks `ticks` times, `gap` apart, and returns the submits that failed.
async fn tick_for(manager: &mut Manager, ticks: usize, gap: Duration) -> usize {
    let mut failed = 0;
    for _ in 0..ticks {
        manager.advance_clock(gap);
        failed += failed_submits(&manager.tick().await.unwrap().events);
    }
    failed
}

#[tokio::test]
async fn the_same_refusal_three_times_suspends_the_pool_until_a_reload_or_new_settings() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![bundle(1)]);
    let (backend, records) = (backend(), tempfile::tempdir().unwrap());
    backend.fail_starting(Some(REFUSED));
    let mut manager = start(&server, &backend, records.path(), 1).await;

    // Three refusals, each after the backoff of the one before (5, then 10 minutes).
    let mut events = Vec::new();
    for gap in [0, 5, 10] {
        manager.advance_clock(Duration::from_secs(gap * 60));
        events.extend(manager.tick().await.unwrap().events);
    }
    assert_eq!(failed_submits(&events), 3);
    assert_eq!(suspended(&events), Some(MISCONFIGURED_AFTER));
    let status = manager.status();
    let suspension = status.pools[0]
        .suspended
        .as_ref()
        .expect("the status says so");
    assert!(
        suspension.error.contains("Invalid partition name"),
        "{suspension:?}"
    );
    assert_eq!(status.recent_failures[2].class.code(), "misconfiguration");
    let report = manager.tick().await.unwrap();
    assert_eq!(report.pools.pools[0].reason_codes(), "suspended");
    assert!(
        (report.pools.pools[0].reasons.iter()).any(|r| r.to_string().contains("reload (SIGHUP)")),
        "the reason says what to do: {:?}",
        report.pools.pools[0].reasons
    );
    // A day of ticks past every backoff: not one more submit.
    assert_eq!(
        tick_for(&mut manager, 48, Duration::from_secs(1800)).await,
        0
    );
    let journal: Vec<&str> = status.events.iter().map(|e| e.kind.code()).collect();
    assert!(journal.contains(&"pool_suspended"), "{journal:?}");

    // A restart with the same settings: still suspended (its record says so).
    drop(manager);
    let mut manager = start(&server, &backend, records.path(), 1).await;
    assert_eq!(
        tick_for(&mut manager, 4, Duration::from_secs(3600)).await,
        0
    );
    assert!(manager.status().pools[0].suspended.is_some());

    // A reload resumes it: it tries again at once.
    let pools = vec![pool(&backend, &server)];
    let config = crate::fixtures::instant();
    manager.reconfigure(config, pools).unwrap();
    assert_eq!(tick_for(&mut manager, 1, Duration::ZERO).await, 1);
    let status = manager.status();
    let resumed = (status.events.iter()).find(|e| e.kind.code() == "pool_resumed");
    assert!(
        matches!(&resumed.map(|e| &e.kind), Some(EventKind::PoolResumed { why, .. }) if why.contains("reloaded")),
        "{:?}",
        status.events
    );
    assert!(status.pools[0].suspended.is_none());

    // Suspended again (still refused), then a restart with other settings resumes it.
    tick_for(&mut manager, 2, Duration::from_secs(1800)).await;
    assert!(
        manager.status().pools[0].suspended.is_some(),
        "suspended again"
    );
    drop(manager);
    let mut manager = start(&server, &backend, records.path(), 3).await;
    assert_eq!(
        tick_for(&mut manager, 1, Duration::ZERO).await,
        1,
        "it tries at once"
    );
    assert!(manager.status().pools[0].suspended.is_none());
}

#[tokio::test]
async fn different_errors_back_off_without_suspending_and_a_check_in_resumes_a_suspended_pool() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![bundle(1)]);
    let (backend, records) = (backend(), tempfile::tempdir().unwrap());
    let mut manager = start(&server, &backend, records.path(), 1).await;
    for error in [
        "Invalid partition name specified",
        "Invalid account",
        REFUSED,
    ] {
        backend.fail_starting(Some(error));
        tick_for(&mut manager, 1, Duration::from_secs(1800)).await;
    }
    let health = manager.status().pools[0].health;
    assert_eq!(
        (health.failures, health.suspended),
        (3, false),
        "{health:?}"
    );

    // Two bundles, two jobs: one never starts; the other and its replacements exit before
    // their workers check in, with the same error, until the pool is suspended.
    backend.fail_starting(None);
    server.set_bundles((1..=2).map(bundle).collect());
    let mut events = Vec::new();
    for _ in 0..12 {
        manager.advance_clock(Duration::from_secs(1800));
        events.extend(manager.tick().await.unwrap().events);
        let jobs = backend.jobs();
        for job in jobs.iter().skip(1).filter(|j| j.state == JobState::Pending) {
            backend.set_state_with_reason(&job.id, JobState::Failed, Some(EXITED));
        }
        if suspended(&events).is_some() {
            break;
        }
    }
    assert_eq!(suspended(&events), Some(MISCONFIGURED_AFTER), "{events:?}");
    assert_eq!(
        backend.jobs()[0].state,
        JobState::Pending,
        "the first job is kept"
    );
    // The first job starts after all, and its worker checks in: the settings work.
    let first = backend.jobs()[0].clone();
    backend.set_state(&first.id, JobState::Active);
    let unique = codalab_wm_core::checkin::launch_unique(&first.name)
        .unwrap()
        .to_owned();
    server.set_workers(vec![serde_json::json!({
        "worker_id": format!("node-{unique}"), "run_uuids": [], "is_terminating": false
    })]);
    let report = manager.tick().await.unwrap();
    let resumed = (report.events.iter()).find_map(|e| match e {
        TickEvent::PoolResumed { why, .. } => Some(*why),
        _ => None,
    });
    assert_eq!(resumed, Some("a worker of the pool checked in"));
    assert!(manager.status().pools[0].suspended.is_none());
}

/// One tick of a misconfigured pool's history.
#[derive(Debug, Clone)]
struct Step {
    /// Seconds the manager clock moves before the tick.
    advance: u64,
    /// Staged bundles.
    bundles: u64,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![Just(0u64), 1u64..60, 250u64..1900, 3000u64..90_000],
        1u64..6,
    )
        .prop_map(|(advance, bundles)| Step { advance, bundles })
}

/// What one tick of a history did: when (manager clock), jobs submitted, submits refused.
type Tick = (Duration, usize, usize);

/// Runs `history` on a pool whose jobs all fail before their workers check in (`broken_jobs`)
/// or whose submits are all refused; returns its ticks, its failures and whether it ends
/// suspended.
async fn run(history: Vec<Step>, broken_jobs: bool) -> (Vec<Tick>, usize, bool) {
    let server = FakeCodaLab::start().await.unwrap();
    let (backend, records) = (backend(), tempfile::tempdir().unwrap());
    if !broken_jobs {
        backend.fail_starting(Some(REFUSED));
    }
    let mut manager = start(&server, &backend, records.path(), 1).await;
    let (mut ticks, mut failures, mut clock) = (Vec::new(), 0, Duration::ZERO);
    for step in history {
        server.set_bundles((1..=step.bundles).map(bundle).collect());
        manager.advance_clock(Duration::from_secs(step.advance));
        clock += Duration::from_secs(step.advance);
        let events = manager.tick().await.unwrap().events;
        let started = (events.iter())
            .filter(|e| {
                matches!(
                    e,
                    TickEvent::Launch {
                        result: LaunchResult::Started,
                        ..
                    }
                )
            })
            .count();
        ticks.push((clock, started, failed_submits(&events)));
        failures += (events.iter())
            .filter(|e| matches!(e, TickEvent::Failure { .. }))
            .count();
        for job in backend.jobs() {
            if job.state == JobState::Pending {
                backend.set_state_with_reason(&job.id, JobState::Failed, Some(EXITED));
            }
        }
    }
    let suspended = manager.status().pools[0].suspended.is_some();
    (ticks, failures, suspended)
}

/// The most launches (submitted, or refused) in any window of `RESET_AFTER`.
fn most_in_a_window(ticks: &[Tick], count: impl Fn(&Tick) -> usize) -> usize {
    (ticks.iter())
        .map(|(end, ..)| {
            (ticks.iter())
                .filter(|(at, ..)| at <= end && *end - *at < RESET_AFTER)
                .map(&count)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Without the suspension, such a pool spends a worker's boot at every backoff's end (30
    /// minutes at most), forever. With it, in any window of 3 hours (a streak is forgotten
    /// after 3 hours without a failure): a pool whose submits are refused tries at most
    /// `MISCONFIGURED_AFTER` times; one whose jobs all fail before their workers check in
    /// submits at most `MISCONFIGURED_AFTER - 1` jobs and then `max` at once (a burst in
    /// flight when the deciding failure lands).
    #[test]
    fn a_misconfigured_pool_spends_a_bounded_number_of_launches_per_window(
        history in prop::collection::vec(step(), 1..40),
        broken_jobs in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (ticks, failures, suspended) = runtime.block_on(run(history, broken_jobs));
        let submitted = most_in_a_window(&ticks, |t| t.1);
        let refused = most_in_a_window(&ticks, |t| t.2);
        let bound = (MISCONFIGURED_AFTER - 1 + MAX) as usize;
        match broken_jobs {
            true => prop_assert!(submitted <= bound, "{submitted} jobs in 3 h (bound {bound})"),
            false => prop_assert!(refused <= MISCONFIGURED_AFTER as usize, "{refused} submits in 3 h"),
        }
        prop_assert!(!suspended || failures >= MISCONFIGURED_AFTER as usize);
    }
}

/// Why AWS Batch leaves a job RUNNABLE when no compute environment of its queue can ever run
/// it (a blocked job queue: the job asks for more than the largest instance type allowed).
const BLOCKED: &str = "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT - The job resource requirement (vCPU/memory/GPU) is higher than that can be met by the CE(s) attached to the job queue.";

#[tokio::test]
async fn jobs_the_platform_says_will_never_start_are_withdrawn_and_suspend_the_pool() {
    // #42 item 4: a platform's own word that a pending job will not start as submitted
    // (`PendingKind::Misconfigured`) is acted on at once, not after `pending_timeout`: the job
    // is cancelled (it is this manager's and never checked in), it counts as a
    // misconfiguration failure, and three in a row suspend the pool.
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![bundle(1)]);
    let (backend, records) = (backend(), tempfile::tempdir().unwrap());
    backend.pending_kind_of(BLOCKED, codalab_wm_core::PendingKind::Misconfigured);
    let mut manager = start(&server, &backend, records.path(), 1).await;
    let mut events = Vec::new();
    for _ in 0..24 {
        for job in backend.jobs() {
            if job.state == JobState::Pending {
                backend.set_state_with_reason(&job.id, JobState::Pending, Some(BLOCKED));
            }
        }
        events.extend(manager.tick().await.unwrap().events);
        manager.advance_clock(Duration::from_secs(300));
    }
    let launched = backend.launches().len();
    assert_eq!(launched, MISCONFIGURED_AFTER as usize, "{events:?}");
    assert_eq!(backend.stops().len(), launched, "each launch withdrawn");
    let stops: Vec<&str> = (events.iter())
        .filter_map(|e| match e {
            TickEvent::Stop {
                reason, ok: true, ..
            } => Some(*reason),
            _ => None,
        })
        .collect();
    assert_eq!(stops, ["blocked"; 3]);
    assert_eq!(suspended(&events), Some(MISCONFIGURED_AFTER));
    let status = manager.status();
    let failure = &status.recent_failures[0];
    assert_eq!(
        (failure.kind, failure.class.code()),
        ("blocked", "misconfiguration")
    );
    assert!(
        failure.detail.contains("JOB_RESOURCE_REQUIREMENT"),
        "{failure:?}"
    );
}
