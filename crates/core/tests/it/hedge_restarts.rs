//! Hedges across restarts (#42 item 2): the launches a pool made for hedges are in its launch
//! record, so a restart does not hand out the day's `hedges_per_day` again; a day later it
//! hedges again.
//!
//! What is real: the whole manager loop against the in-process fake CodaLab server
//! (`codalab_wm_fake_codalab`) and two in-memory `testing::FakeBackend`s: a free pool whose
//! jobs stay pending (`Resources`, as Slurm holds them) and a paid pool. The launch records
//! are files in a temporary directory, as a restart finds them. Time runs on the manager
//! clock (`Manager::advance_clock`), no sleeping.

use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{JobState, Manager, Pool, PoolPolicy, RecordKey, WorkerOptions, WorkerShape};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const SHAPE: (u32, u32, u64) = (4, 0, 8192);

fn pool(name: &str, backend: &FakeBackend, server: &FakeCodaLab, policy: PoolPolicy) -> Pool {
    Pool {
        policy: PoolPolicy {
            name: name.into(),
            max: 5,
            max_launches_per_tick: 5,
            min_seconds_between_workers: 0,
            ..policy
        },
        backend: Arc::new(backend.clone()),
        worker: WorkerOptions {
            server: server.url(),
            executable: "cl-worker-stand-in".into(),
            ..WorkerOptions::default()
        },
    }
}

fn backend() -> FakeBackend {
    let (cpus, gpus, memory) = SHAPE;
    let backend = FakeBackend::named("fake", WorkerShape::from_flags(cpus, gpus, memory));
    backend.unique_names(true);
    backend
}

/// The free pool (hedged after a minute's expected wait) and the paid one (one hedge a day).
async fn start(
    server: &FakeCodaLab,
    free: &FakeBackend,
    paid: &FakeBackend,
    records: &Path,
) -> Manager {
    let (cpus, gpus, memory) = SHAPE;
    let shape = WorkerShape::from_flags(cpus, gpus, memory);
    let pools = vec![
        pool(
            "free",
            free,
            server,
            PoolPolicy {
                hedge_after: Some(Duration::from_secs(60)),
                startup_grace: Duration::from_secs(30),
                ..PoolPolicy::new("free", shape)
            },
        ),
        pool(
            "paid",
            paid,
            server,
            PoolPolicy {
                cost_per_hour: Some(1.0),
                hedges_per_day: 1,
                ..PoolPolicy::new("paid", shape)
            },
        ),
    ];
    let client = crate::fixtures::alice_client(&server.url());
    let mut manager = Manager::with_pools(crate::fixtures::instant(), client, pools).unwrap();
    let keys = [
        RecordKey::new("free", "fake free"),
        RecordKey::new("paid", "fake paid"),
    ];
    manager.keep_records(records, &keys).unwrap();
    manager
}

/// A bundle that fills a worker.
fn bundle(n: u64) -> FakeBundle {
    FakeBundle {
        cpus: 4,
        ..FakeBundle::new("alice", n)
    }
}

/// Ticks every `gap` until `ticks` have run, the free pool's jobs held pending by their
/// platform (`Resources`); returns the paid pool's launches.
async fn run(
    manager: &mut Manager,
    free: &FakeBackend,
    paid: &FakeBackend,
    ticks: usize,
    gap: u64,
) -> usize {
    for _ in 0..ticks {
        for job in free.jobs() {
            if job.state == JobState::Pending {
                free.set_state_with_reason(&job.id, JobState::Pending, Some("Resources"));
            }
        }
        manager.tick().await.unwrap();
        manager.advance_clock(Duration::from_secs(gap));
    }
    paid.launches().len()
}

#[tokio::test]
async fn the_days_hedges_are_not_handed_out_again_by_a_restart() {
    let server = FakeCodaLab::start().await.unwrap();
    let (free, paid, records) = (backend(), backend(), tempfile::tempdir().unwrap());
    server.set_bundles(vec![bundle(1)]);
    let mut manager = start(&server, &free, &paid, records.path()).await;
    // The bundle pends on the free pool; past the minute accepted, the paid pool launches
    // for it too: its one hedge of the day.
    assert_eq!(run(&mut manager, &free, &paid, 10, 30).await, 1);
    let report = manager.tick().await.unwrap();
    let hedged = (report.pools.assignments.iter()).any(|a| a.pool == "paid");
    assert!(hedged, "{:?}", report.pools.assignments);

    // A second bundle an hour later, after a restart: the paid pool has no hedge left
    // today, and the bundle says why.
    drop(manager);
    let mut manager = start(&server, &free, &paid, records.path()).await;
    server.set_bundles(vec![bundle(1), bundle(2)]);
    manager.advance_clock(Duration::from_secs(3600));
    assert_eq!(
        run(&mut manager, &free, &paid, 10, 30).await,
        1,
        "no second hedge today"
    );
    let status = manager.status();
    let said = (status.estimates.iter()).any(|e| {
        e.text.contains(
            "not hedged: no fitting pool that would start it sooner has a hedge left today",
        )
    });
    assert!(said, "{:?}", status.estimates);

    // A day after the first hedge, the paid pool hedges again.
    manager.advance_clock(Duration::from_secs(24 * 3600));
    assert_eq!(run(&mut manager, &free, &paid, 4, 30).await, 2);
}
