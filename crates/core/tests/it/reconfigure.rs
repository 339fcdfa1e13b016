//! `Manager::reconfigure`: new limits, shapes and rates applied to a running manager without
//! forgetting its workers (jobs, pending times), all-or-nothing refusal of what would orphan
//! jobs, the list of changes for the log, and the reload channel `Manager::run` drains before
//! a tick. Against the in-process fake CodaLab server and in-memory `FakeBackend`s; time moves
//! with `Manager::advance_clock`.

use crate::fixtures::{alice_client, instant};
use codalab_wm_core::manager::{DRAIN_THEN_RESTART, Reconfiguration};
use codalab_wm_core::policy::PolicyConfig;
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{
    JobState, LaunchMode, Manager, ManagerConfig, Pool, PoolPolicy, SingleBackendFlags,
    WorkerBackend, WorkerOptions, WorkerShape,
};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::sync::Arc;
use std::time::Duration;

fn shape() -> WorkerShape {
    WorkerShape::from_flags(1, 0, 2048)
}

async fn server(bundles: usize) -> FakeCodaLab {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(
        (1..=bundles as u64)
            .map(|n| FakeBundle::new("alice", n))
            .collect(),
    );
    server
}

/// Upstream's flags: up to `max` workers, in target mode (3 launches per tick).
fn single_flags(max: u32) -> SingleBackendFlags {
    SingleBackendFlags {
        limits: PolicyConfig {
            min_workers: 0,
            max_workers: max,
            min_seconds_between_workers: 0,
        },
        launch_mode: LaunchMode::Target,
        max_launches_per_tick: 3,
        ..SingleBackendFlags::default()
    }
}

/// The single-backend mode's pool of `backend`, its workers pointed at `server`.
fn single_pool(
    server: &FakeCodaLab,
    flags: &SingleBackendFlags,
    backend: Arc<dyn WorkerBackend>,
) -> Pool {
    let worker = WorkerOptions {
        server: server.url(),
        ..WorkerOptions::default()
    };
    Pool::single_backend(flags, backend, worker)
}

fn pool(name: &str, backend: &FakeBackend, shape: WorkerShape, max: u32) -> Pool {
    Pool {
        policy: PoolPolicy {
            max,
            max_launches_per_tick: 5,
            min_seconds_between_workers: 0,
            pending_timeout: Some(Duration::from_secs(600)),
            ..PoolPolicy::new(name, shape)
        },
        backend: Arc::new(backend.clone()),
        worker: WorkerOptions::default(),
    }
}

#[tokio::test]
async fn raising_max_launches_more_and_keeps_the_first_job() {
    let server = server(3).await;
    let backend = FakeBackend::named("fake", shape());
    let flags = single_flags(1);
    let pool = single_pool(&server, &flags, Arc::new(backend.clone()));
    let mut manager = Manager::new(instant(), alice_client(&server.url()), pool);
    manager.tick().await.unwrap();
    let first = backend.jobs();
    assert_eq!(first.len(), 1);

    let raised = single_flags(3);
    let pool = single_pool(&server, &raised, manager.backend().clone());
    let changes = manager.reconfigure(instant(), vec![pool]).unwrap();
    let shown: Vec<String> = changes.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["pool fake: max_workers 1 → 3"]);

    manager.tick().await.unwrap();
    let jobs = backend.jobs();
    assert_eq!(jobs.len(), 3, "two more for the two bundles left");
    assert_eq!(
        jobs[0].id, first[0].id,
        "the first job is kept, not restarted"
    );
    manager.tick().await.unwrap();
    assert_eq!(backend.jobs().len(), 3, "never more than the new max");
}

#[tokio::test]
async fn lowering_max_launches_nothing_and_stops_nothing() {
    let server = server(3).await;
    let backend = FakeBackend::named("fake", shape());
    let pool = single_pool(&server, &single_flags(3), Arc::new(backend.clone()));
    let mut manager = Manager::new(instant(), alice_client(&server.url()), pool);
    manager.tick().await.unwrap();
    assert_eq!(backend.jobs().len(), 3);
    let lowered = single_flags(1);
    let pool = single_pool(&server, &lowered, manager.backend().clone());
    manager.reconfigure(instant(), vec![pool]).unwrap();
    server.set_bundles((4..=6).map(|n| FakeBundle::new("alice", n)).collect());
    manager.tick().await.unwrap();
    assert_eq!(backend.jobs().len(), 3, "over the new max: no launch");
    assert!(
        backend.stops().is_empty(),
        "running workers are not stopped"
    );
}

#[tokio::test]
async fn an_invalid_configuration_is_refused_and_the_old_one_keeps_running() {
    let server = server(1).await;
    let backend = FakeBackend::named("fake", shape());
    let flags = single_flags(2);
    let pool = single_pool(&server, &flags, Arc::new(backend.clone()));
    let mut manager = Manager::new(instant(), alice_client(&server.url()), pool);
    let before = manager.policies();

    let inverted = SingleBackendFlags {
        limits: PolicyConfig {
            min_workers: 5,
            max_workers: 2,
            min_seconds_between_workers: 0,
        },
        ..flags
    };
    let pool = single_pool(&server, &inverted, manager.backend().clone());
    let err = manager.reconfigure(instant(), vec![pool]).unwrap_err();
    assert!(err.to_string().contains("less than"), "{err}");

    let burst_in_compat = SingleBackendFlags {
        launch_mode: LaunchMode::Compat,
        max_launches_per_tick: 4,
        ..flags
    };
    let pool = single_pool(&server, &burst_in_compat, manager.backend().clone());
    let err = manager.reconfigure(instant(), vec![pool]).unwrap_err();
    assert!(
        err.to_string().contains("needs launch mode target"),
        "{err}"
    );

    let other = Arc::new(FakeBackend::named("other", shape()));
    let pool = single_pool(&server, &flags, other);
    let err = manager.reconfigure(instant(), vec![pool]).unwrap_err();
    assert!(err.to_string().contains("pool other is new"), "{err}");
    assert_eq!(manager.policies(), before, "nothing was applied");
}

#[tokio::test]
async fn pools_cannot_be_added_removed_or_change_backend() {
    let server = server(0).await;
    let (a, b) = (
        FakeBackend::named("fake-a", shape()),
        FakeBackend::named("fake-b", shape()),
    );
    let config = instant();
    let pools = vec![pool("cpu", &a, shape(), 2), pool("big", &b, shape(), 2)];
    let mut manager =
        Manager::with_pools(config.clone(), alice_client(&server.url()), pools).unwrap();
    let before = manager.policies();

    let err = manager
        .reconfigure(config.clone(), vec![pool("cpu", &a, shape(), 2)])
        .unwrap_err();
    // The advice loses no run: drain, not `down` alone (docs audit 2026-11-27, H1).
    assert!(err.to_string().contains("pool big is gone"), "{err}");
    assert!(err.to_string().contains(DRAIN_THEN_RESTART), "{err}");
    let err = manager
        .reconfigure(
            config.clone(),
            vec![
                pool("cpu", &a, shape(), 2),
                pool("big", &b, shape(), 2),
                pool("new", &b, shape(), 2),
            ],
        )
        .unwrap_err();
    assert!(err.to_string().contains("pool new is new"), "{err}");
    let err = manager
        .reconfigure(
            config.clone(),
            vec![pool("cpu", &a, shape(), 2), pool("big", &a, shape(), 2)],
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("backend cannot change from fake-b to fake-a"),
        "{err}"
    );
    assert!(err.to_string().contains(DRAIN_THEN_RESTART), "{err}");
    assert_eq!(manager.policies(), before);
}

#[tokio::test]
async fn a_bigger_shape_serves_bundles_that_fit_no_pool_before() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![FakeBundle {
        cpus: 4,
        ..FakeBundle::new("alice", 1)
    }]);
    let small = FakeBackend::named("fake", shape());
    let config = instant();
    let pools = vec![pool("cpu", &small, shape(), 2)];
    let mut manager =
        Manager::with_pools(config.clone(), alice_client(&server.url()), pools).unwrap();
    let report = manager.tick().await.unwrap();
    assert_eq!(report.launched.len(), 0, "4 CPUs do not fit 1");

    let big_shape = WorkerShape::from_flags(8, 0, 16384);
    let big = FakeBackend::named("fake", big_shape);
    let changes = manager
        .reconfigure(config, vec![pool("cpu", &big, big_shape, 2)])
        .unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].key, "shape");
    assert_eq!(changes[0].new, big_shape.to_string());
    let report = manager.tick().await.unwrap();
    assert_eq!(report.launched.len(), 1);
    assert_eq!(
        big.launches().len(),
        1,
        "new launches go to the new backend"
    );
}

#[tokio::test]
async fn pending_times_survive_a_reconfiguration() {
    let server = server(1).await;
    let backend = FakeBackend::named("fake-a", shape());
    backend.unique_names(true); // launched here: the pending rule may stop it
    let config = instant();
    let pools = vec![pool("cpu", &backend, shape(), 2)];
    let mut manager =
        Manager::with_pools(config.clone(), alice_client(&server.url()), pools).unwrap();
    manager.tick().await.unwrap();
    assert_eq!(backend.jobs().len(), 1);
    assert_eq!(backend.jobs()[0].state, JobState::Pending);
    manager.advance_clock(Duration::from_secs(500));
    manager.tick().await.unwrap();

    let changes = manager
        .reconfigure(config, vec![pool("cpu", &backend, shape(), 4)])
        .unwrap();
    assert_eq!(changes[0].to_string(), "pool cpu: max 2 → 4");
    manager.advance_clock(Duration::from_secs(200));
    let report = manager.tick().await.unwrap();
    assert_eq!(
        report.pools.pools[0].stops.len(),
        1,
        "pending for 700 s in all, over the 600 s timeout: the pending time was kept"
    );
}

#[tokio::test]
async fn run_applies_what_the_reload_channel_holds_before_its_tick() {
    let server = server(3).await;
    let backend = FakeBackend::named("fake", shape());
    let pool = single_pool(&server, &single_flags(1), Arc::new(backend.clone()));
    let mut manager = Manager::new(instant(), alice_client(&server.url()), pool);
    manager.tick().await.unwrap();
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    manager.reload_from(receiver);
    let pool = single_pool(&server, &single_flags(3), manager.backend().clone());
    sender
        .send(Reconfiguration {
            config: instant(),
            pools: vec![pool],
            settings: Vec::new(),
        })
        .unwrap();
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    manager.run(true, shutdown).await.unwrap();
    assert_eq!(backend.jobs().len(), 3);
    assert_eq!(manager.policies()[0].max, 3);
    let reloaded = manager
        .status()
        .events
        .into_iter()
        .find_map(|e| match e.kind {
            codalab_wm_core::events::EventKind::ConfigReloaded { changes } => Some(changes),
            _ => None,
        });
    let changes = reloaded.expect("a config_reloaded event");
    assert!(
        changes.iter().any(|c| c.contains("max_workers")),
        "{changes:?}"
    );
}

/// A new `search` that would make the staged search longer than the request line the real
/// server accepts (gunicorn's 4,094 bytes) is refused, naming the setting, and the old search
/// keeps running: the next tick searches as before instead of stopping the manager. Against
/// the in-process fake server.
#[tokio::test]
async fn a_search_longer_than_the_server_accepts_is_refused_and_the_old_one_keeps_running() {
    let server = server(1).await;
    let backend = FakeBackend::named("fake", shape());
    let flags = single_flags(2);
    let pool = single_pool(&server, &flags, Arc::new(backend.clone()));
    let mut manager = Manager::new(instant(), alice_client(&server.url()), pool);
    manager.tick().await.unwrap();

    let long = ManagerConfig {
        search: vec![format!("name={}", "x".repeat(4000))],
        ..instant()
    };
    let pool = single_pool(&server, &flags, manager.backend().clone());
    let err = manager.reconfigure(long, vec![pool]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("`search`") && text.contains("4094"), "{text}");
    manager.tick().await.expect("the old search keeps running");

    let fine = ManagerConfig {
        search: vec![format!("name={}", "x".repeat(100))],
        ..instant()
    };
    let pool = single_pool(&server, &flags, manager.backend().clone());
    manager.reconfigure(fine, vec![pool]).unwrap();
}

/// Each key of a pool's rules a reload changes alone is named in the changes the log shows:
/// before, a reload that changed only `checkin_timeout` (or `runs_per_worker`) was applied
/// and logged "nothing changed".
#[tokio::test]
async fn every_pool_key_a_reload_changes_is_named() {
    type Edit = fn(&mut PoolPolicy);
    let edits: [(&str, Edit); 17] = [
        ("min", |p| p.min = 1),
        ("max", |p| p.max = 4),
        ("tag", |p| p.tag = Some("gpu".into())),
        ("tag_exclusive", |p| {
            p.tag = Some("gpu".into());
            p.tag_exclusive = true;
        }),
        ("match_request_queue", |p| p.match_request_queue = false),
        ("check_shape", |p| p.check_shape = false),
        ("cost", |p| p.cost = 2.0),
        ("spill_after", |p| {
            p.spill_after = Some(Duration::from_secs(60))
        }),
        ("pending_timeout", |p| p.pending_timeout = None),
        ("startup_grace", |p| {
            p.startup_grace = Duration::from_secs(99)
        }),
        ("checkin_timeout", |p| {
            p.checkin_timeout = Duration::from_secs(99)
        }),
        ("launch_mode", |p| {
            p.launch_mode = LaunchMode::Compat;
            p.pending_timeout = None; // target mode's alone
            p.max_launches_per_tick = 1;
        }),
        ("max_launches_per_tick", |p| p.max_launches_per_tick = 2),
        ("min_seconds_between_workers", |p| {
            p.min_seconds_between_workers = 5
        }),
        ("cost_per_hour", |p| p.cost_per_hour = Some(0.5)),
        ("max_worker_hours_per_day", |p| {
            p.budget.max_worker_hours_per_day = Some(3.0)
        }),
        ("runs_per_worker", |p| p.runs_per_worker = Some(2)),
    ];
    let server = server(0).await;
    let backend = FakeBackend::named("fake", shape());
    for (key, edit) in edits {
        let mut manager = Manager::with_pools(
            instant(),
            alice_client(&server.url()),
            vec![pool("cpu", &backend, shape(), 3)],
        )
        .unwrap();
        let mut changed = pool("cpu", &backend, shape(), 3);
        edit(&mut changed.policy);
        let changes = manager.reconfigure(instant(), vec![changed]).unwrap();
        let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
        assert!(
            keys.contains(&key),
            "a reload that changes `{key}` names it; it named {keys:?}"
        );
        assert!(
            changes
                .iter()
                .all(|c| !c.old.contains("secs") && !c.new.contains("nanos")),
            "durations are shown in seconds, as the file gives them: {changes:?}"
        );
    }
}
