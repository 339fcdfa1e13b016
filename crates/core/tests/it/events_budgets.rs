//! Events, webhooks and budgets through the real manager loop, against the in-process fake
//! CodaLab server (`codalab_wm_fake_codalab`), the in-memory `testing::FakeBackend`, and a
//! loopback webhook receiver (axum on 127.0.0.1). Time-based rules run on the manager clock,
//! moved with `Manager::advance_clock` (no sleeping); webhook deliveries are awaited through
//! the receiver's own channel.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use codalab_wm_core::budget::BudgetLimits;
use codalab_wm_core::events::{Event, EventKind};
use codalab_wm_core::notify::{self, NotifyFormat, NotifySettings, Retry};
use codalab_wm_core::secret::Secret;
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{
    JobState, Manager, ManagerConfig, Pool, PoolPolicy, WorkerOptions, WorkerShape,
};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

const MIN: Duration = Duration::from_secs(60);

async fn manager(
    policy: PoolPolicy,
    budget: BudgetLimits,
    bundles: u64,
) -> (FakeCodaLab, FakeBackend, Manager) {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles((1..=bundles).map(|n| FakeBundle::new("alice", n)).collect());
    let client = crate::fixtures::alice_client(&server.url());
    let backend = FakeBackend::named("fake", policy.shape);
    // Jobs named after their launch unique, as every platform's are: the launch record (and
    // so each launch's budget reservation) holds them.
    backend.unique_names(true);
    let pool = Pool {
        policy,
        backend: Arc::new(backend.clone()),
        worker: WorkerOptions {
            server: server.url(),
            executable: "cl-worker-stand-in".into(),
            ..WorkerOptions::default()
        },
    };
    let config = ManagerConfig {
        sleep_time: Duration::ZERO,
        budget,
        ..ManagerConfig::default()
    };
    let manager = Manager::with_pools(config, client, vec![pool]).unwrap();
    (server, backend, manager)
}

/// A pool of 1-CPU workers: each of the fake's 1-CPU bundles fills one, so launches count
/// bundles (the server packs nothing).
fn cpu(max: u32) -> PoolPolicy {
    PoolPolicy {
        max,
        max_launches_per_tick: 10,
        min_seconds_between_workers: 0,
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(1, 0, 8192))
    }
}

/// Every job runs and its worker checks in (busy).
fn activate_all(server: &FakeCodaLab, backend: &FakeBackend) {
    for job in backend.jobs() {
        backend.set_state(&job.id, JobState::Active);
    }
    let worker = |job: &codalab_wm_core::WorkerJob| {
        let unique = codalab_wm_core::checkin::launch_unique(&job.name).unwrap();
        serde_json::json!({"user_id": "0", "worker_id": format!("node-{unique}"),
            "run_uuids": ["0xrun"], "is_terminating": false, "checkin_time": 1795295461})
    };
    server.set_workers(backend.jobs().iter().map(worker).collect());
}

fn codes(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.code()).collect()
}

/// A pool's budget of 1 worker-hour: 4 active workers for 20 minutes use it up; then staged
/// bundles get no launch (reason and unmet demand say `budget_reached`, a `budget_reached`
/// event is out), and when the used hours have left the rolling day, launching resumes with a
/// `budget_restored` event.
#[tokio::test]
async fn a_pool_over_its_budget_launches_nothing_until_the_window_rolls_on() {
    let policy = PoolPolicy {
        budget: BudgetLimits {
            max_worker_hours_per_day: Some(1.0),
            max_cost_per_day: None,
        },
        ..cpu(10)
    };
    let (server, backend, mut manager) = manager(policy, BudgetLimits::default(), 4).await;
    manager.tick().await.unwrap();
    assert_eq!(backend.launches().len(), 4, "one worker per staged bundle");
    activate_all(&server, &backend);
    server.set_bundles(Vec::new()); // the workers took them
    manager.tick().await.unwrap(); // metering starts
    manager.advance_clock(10 * MIN);
    manager.tick().await.unwrap();
    assert!(
        manager.status().budgets[1].reached.is_none(),
        "0.67 of 1 worker-hour"
    );
    server.set_bundles((5..=8).map(|n| FakeBundle::new("alice", n)).collect());
    manager.advance_clock(10 * MIN);
    let report = manager.tick().await.unwrap();
    assert_eq!(
        backend.launches().len(),
        4,
        "over budget: no launch for 4 new bundles"
    );
    let pool = &report.pools.pools[0];
    assert!(
        pool.reasons.iter().any(|r| r.code() == "budget_reached"),
        "{pool:?}"
    );
    let status = manager.status();
    let budget = &status.budgets[1];
    assert_eq!(budget.scope, "cpu");
    assert!(
        budget
            .reached
            .as_deref()
            .unwrap()
            .contains("max_worker_hours_per_day"),
        "{budget:?}"
    );
    assert!(budget.resumes_at_seconds.is_some(), "{budget:?}");
    assert!(
        status
            .unmet
            .iter()
            .any(|u| u.reason.code() == "pool_unavailable"
                && format!("{:?}", u.reason).contains("budget_reached")),
        "{:?}",
        status.unmet
    );
    assert_eq!(
        codes(&status.events)
            .iter()
            .filter(|c| **c == "budget_reached")
            .count(),
        1
    );

    for job in backend.jobs() {
        backend.set_state(&job.id, JobState::Ended);
    }
    manager.advance_clock(Duration::from_secs(25 * 3600));
    manager.tick().await.unwrap();
    assert!(
        backend.launches().len() > 4,
        "the window rolled on: launching resumed"
    );
    let status = manager.status();
    assert!(status.budgets[1].reached.is_none());
    let events = codes(&status.events);
    let reached = events.iter().position(|c| *c == "budget_reached").unwrap();
    let restored = events.iter().position(|c| *c == "budget_restored").unwrap();
    assert!(reached < restored, "{events:?}");
}

/// A burst tick launches no more than the budget has room for (review 4.2: it launched up
/// to `max_launches_per_tick` on an empty day): 0.5 worker-hours with 600 s of minimum life
/// per worker (cl-worker's `--idle-seconds`) is room for 3, whatever 20 staged bundles want;
/// once those 3 run, there is no room left though almost nothing is used yet.
#[tokio::test]
async fn a_burst_tick_launches_no_more_than_the_budget_has_room_for() {
    let policy = PoolPolicy {
        budget: BudgetLimits {
            max_worker_hours_per_day: Some(0.5),
            max_cost_per_day: None,
        },
        max_launches_per_tick: 20,
        ..cpu(20)
    };
    let (server, backend, mut manager) = manager(policy, BudgetLimits::default(), 20).await;
    let report = manager.tick().await.unwrap();
    assert_eq!(backend.launches().len(), 3);
    let reasons = &report.pools.pools[0].reasons;
    let room = reasons.iter().find(|r| r.code() == "budget_room").unwrap();
    assert!(
        room.to_string()
            .starts_with("launch 3, not 20: the budget of cpu"),
        "{room}"
    );
    activate_all(&server, &backend);
    manager.advance_clock(MIN);
    manager.tick().await.unwrap();
    assert_eq!(backend.launches().len(), 3, "the 3 running hold the room");
}

/// The overall budget stops every pool: with `max_cost_per_day` 2 and workers at 3 an hour,
/// 4 workers for 15 minutes cost 3.
#[tokio::test]
async fn the_overall_cost_budget_stops_launches() {
    let policy = PoolPolicy {
        cost_per_hour: Some(3.0),
        ..cpu(10)
    };
    let overall = BudgetLimits {
        max_worker_hours_per_day: None,
        max_cost_per_day: Some(2.0),
    };
    let (server, backend, mut manager) = manager(policy, overall, 4).await;
    manager.tick().await.unwrap();
    activate_all(&server, &backend);
    server.set_bundles(Vec::new()); // the workers took them
    manager.tick().await.unwrap();
    manager.advance_clock(15 * MIN);
    server.set_bundles((5..=6).map(|n| FakeBundle::new("alice", n)).collect());
    let report = manager.tick().await.unwrap();
    assert_eq!(
        backend.launches().len(),
        4,
        "no launch over the overall budget"
    );
    let reason = report.pools.pools[0]
        .reasons
        .iter()
        .find(|r| r.code() == "budget_reached");
    assert!(format!("{reason:?}").contains("all pools"), "{reason:?}");
    let overall = &manager.status().budgets[0];
    let cost = overall.cost.unwrap();
    assert!(
        (3.0..3.01).contains(&cost),
        "4 workers × 15 min × 3 an hour (plus the ticks' own time): {cost}"
    );
    assert!(
        overall
            .reached
            .as_deref()
            .unwrap()
            .contains("max_cost_per_day")
    );
}

/// What the receiver got: each call's status and body, in order.
#[derive(Clone)]
struct Receiver {
    calls: Arc<Mutex<Vec<(u16, serde_json::Value)>>>,
    fail_first: Arc<Mutex<usize>>,
    seen: mpsc::UnboundedSender<()>,
}

async fn receive(State(r): State<Receiver>, body: axum::Json<serde_json::Value>) -> StatusCode {
    let status = {
        let mut fail = r.fail_first.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        }
    };
    r.calls.lock().unwrap().push((status.as_u16(), body.0));
    let _ = r.seen.send(());
    status
}

async fn receiver(fail_first: usize) -> (String, Receiver, mpsc::UnboundedReceiver<()>) {
    let (seen, calls_seen) = mpsc::unbounded_channel();
    let state = Receiver {
        calls: Arc::default(),
        fail_first: Arc::new(Mutex::new(fail_first)),
        seen,
    };
    let app = Router::new()
        .route("/hook/{token}", post(receive))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook/t0ken", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, state, calls_seen)
}

fn launched(n: u64) -> Event {
    let kind = EventKind::WorkerLaunched {
        pool: "cpu".into(),
        job_id: n.to_string(),
    };
    Event::new(kind, n, 1_800_000_000)
}

const QUICK: Retry = Retry {
    attempts: 4,
    first_delay: Duration::from_millis(5),
    timeout: Duration::from_secs(30),
};

/// Events arrive in order; a 500 is retried (two failures, then the same event again), and
/// an entry gets only the events it lists.
#[tokio::test]
async fn webhooks_get_their_events_in_order_and_retry_after_a_500() {
    let (url, state, mut seen) = receiver(2).await;
    let (events, stream) = broadcast::channel(16);
    let settings = vec![NotifySettings {
        url: Secret::new(url),
        events: vec!["worker_launched".into()],
        format: NotifyFormat::Raw,
        digest_seconds: 0,
    }];
    notify::spawn(settings, stream, QUICK).unwrap();
    events.send(launched(1)).unwrap();
    events
        .send(Event::new(EventKind::ServerBack { after_seconds: 3 }, 9, 0))
        .unwrap();
    events.send(launched(2)).unwrap();
    events.send(launched(3)).unwrap();
    for _ in 0..5 {
        tokio::time::timeout(Duration::from_secs(60), seen.recv())
            .await
            .expect("a webhook call")
            .unwrap();
    }
    let calls = state.calls.lock().unwrap().clone();
    let got: Vec<(u16, String)> = calls
        .iter()
        .map(|(status, body)| (*status, body["job_id"].as_str().unwrap_or("-").to_owned()))
        .collect();
    let want: Vec<(u16, String)> = [(500, "1"), (500, "1"), (200, "1"), (200, "2"), (200, "3")]
        .iter()
        .map(|(s, j)| (*s, j.to_string()))
        .collect();
    assert_eq!(
        got, want,
        "retried in place, then in order; server_back not asked for"
    );
}

/// A partition goes down: ten workers lost in a burst are two calls, the first at once and
/// then the other nine folded (count, first, last); the end of the stream sends what is
/// folded (the window, an hour here, never ends during the test).
#[tokio::test]
async fn a_burst_of_one_kind_is_one_call_at_once_and_one_folded() {
    let (url, state, mut seen) = receiver(0).await;
    let (events, stream) = broadcast::channel(16);
    let settings = vec![NotifySettings {
        url: Secret::new(url),
        events: Vec::new(),
        format: NotifyFormat::Raw,
        digest_seconds: 3600,
    }];
    notify::spawn(settings, stream, QUICK).unwrap();
    for n in 0..10 {
        let kind = EventKind::WorkerLost {
            pool: "cpu".into(),
            job_id: n.to_string(),
        };
        events.send(Event::new(kind, n, 1_800_000_000)).unwrap();
    }
    drop(events);
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(60), seen.recv())
            .await
            .expect("a webhook call")
            .unwrap();
    }
    let calls = state.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].1["event"], "worker_lost");
    assert_eq!(calls[0].1["job_id"], "0");
    let folded = &calls[1].1;
    assert_eq!(folded["event"], "digest");
    assert_eq!(folded["kind"], "worker_lost");
    assert_eq!(folded["pool"], "cpu");
    assert_eq!(folded["count"], 9);
    assert_eq!(folded["first"]["job_id"], "1");
    assert_eq!(folded["last"]["job_id"], "9");
}

/// A receiver that accepts connections and never answers: ticks go on launching, and their
/// events are in the status, while the webhook's call hangs.
#[tokio::test]
async fn a_dead_webhook_never_blocks_a_tick() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (accepted, mut connections) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket); // never read, never answered
            let _ = accepted.send(());
        }
    });
    let (server, backend, mut manager) = manager(cpu(10), BudgetLimits::default(), 0).await;
    let settings = vec![NotifySettings {
        url: Secret::new(url),
        events: Vec::new(),
        format: NotifyFormat::Slack,
        digest_seconds: 0,
    }];
    let hanging = Retry {
        timeout: Duration::from_secs(3600),
        ..QUICK
    };
    notify::spawn(settings, manager.subscribe_events(), hanging).unwrap();
    for tick in 1..=5_u64 {
        server.set_bundles(
            (1..=tick * 2)
                .map(|n| FakeBundle::new("alice", n))
                .collect(),
        );
        manager.tick().await.unwrap();
        if tick == 1 {
            tokio::time::timeout(Duration::from_secs(60), connections.recv())
                .await
                .expect("the webhook is called")
                .unwrap();
        }
    }
    assert_eq!(
        backend.launches().len(),
        10,
        "every tick launched while the webhook hung"
    );
    let events = manager.status().events;
    assert_eq!(
        codes(&events)
            .iter()
            .filter(|c| **c == "worker_launched")
            .count(),
        10
    );
}

/// The events of a troubled hour, in order: launches, a launch refused (the pool backs off),
/// the pool launching again after its backoff, a worker preempted, the server unreachable
/// (announced once for two failed ticks) and back.
#[tokio::test]
async fn a_troubled_hour_tells_its_story_in_events() {
    let (server, backend, mut manager) = manager(cpu(10), BudgetLimits::default(), 1).await;
    manager.tick().await.unwrap();
    backend.fail_starting(Some("sbatch: invalid partition"));
    server.set_bundles((1..=2).map(|n| FakeBundle::new("alice", n)).collect());
    manager.tick().await.unwrap();
    backend.fail_starting(None);
    manager.advance_clock(60 * MIN);
    manager.tick().await.unwrap();
    let job = backend.jobs()[0].id.clone();
    backend.set_state_with_reason(&job, JobState::Preempted, Some("spot reclaimed"));
    manager.tick().await.unwrap();
    server.stop().await;
    assert!(manager.tick().await.is_err());
    assert!(manager.tick().await.is_err());
    server.restart().await.unwrap();
    manager.advance_clock(MIN);
    manager.tick().await.unwrap();
    let events = manager.status().events;
    let story: Vec<&str> = codes(&events)
        .into_iter()
        .filter(|c| *c != "worker_launched")
        .collect();
    assert_eq!(
        story,
        [
            "launch_failed",
            "pool_backing_off",
            "pool_recovered",
            "worker_preempted",
            "server_unreachable",
            "server_back"
        ],
        "{events:#?}"
    );
    assert!(codes(&events).starts_with(&["worker_launched"]));
    let back = events.last().unwrap();
    assert!(
        back.message.starts_with("CodaLab server back after 60 s"),
        "{back:?}"
    );
}
