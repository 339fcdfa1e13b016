//! The server's state and endpoints: the metrics and health from snapshots, the dashboard,
//! and the whole server on 127.0.0.1.

use super::*;
use codalab_wm_core::status::Counter as StatusCounter;

fn shared(metrics: &'static Metrics) -> Shared {
    Shared::new(metrics, Duration::from_secs(5))
}

fn launches(value: u64) -> StatusCounter {
    StatusCounter {
        metric: "launches",
        pool: "cpu".into(),
        label: "started".into(),
        value,
    }
}

/// The page refreshes every `sleep_time`: the start's until a snapshot reports one, then the
/// snapshot's (a reload changed it).
#[test]
fn the_pages_refresh_follows_a_reloaded_sleep_time() {
    let metrics: &'static Metrics = Box::leak(Box::default());
    let shared = shared(metrics);
    let refresh = |s: &Shared| s.dashboard(1_800_000_000);
    assert!(refresh(&shared).contains("<meta http-equiv=\"refresh\" content=\"5\">"));
    let reloaded = Status {
        ticks: 1,
        sleep_time_seconds: 30.0,
        ..Status::default()
    };
    shared.observe(reloaded, Instant::now());
    let page = refresh(&shared);
    assert!(
        page.contains("<meta http-equiv=\"refresh\" content=\"30\">"),
        "{page}"
    );
}

#[test]
fn counters_follow_the_running_totals_and_health_the_last_success() {
    let metrics: &'static Metrics = Box::leak(Box::default());
    let shared = shared(metrics);
    let t0 = Instant::now();
    assert_eq!(shared.health(t0, false).0, StatusCode::SERVICE_UNAVAILABLE);
    let first = Status {
        ticks: 1,
        staged: 4,
        counters: vec![launches(2)],
        ..Status::default()
    };
    shared.observe(first.clone(), t0);
    shared.observe(first, t0); // the same tick again: nothing counted twice
    shared.observe(
        Status {
            ticks: 2,
            staged: 3,
            counters: vec![launches(3)],
            ..Status::default()
        },
        t0,
    );
    let text = metrics.render().unwrap();
    assert!(
        text.contains(r#"codalab_wm_launches_total{pool="cpu",result="started"} 3"#),
        "{text}"
    );
    assert!(text.contains("codalab_wm_staged_bundles 3"), "{text}");
    assert!(
        text.contains("codalab_wm_tick_duration_seconds_count 2"),
        "{text}"
    );
    assert_eq!(shared.health(t0, false).0, StatusCode::OK);
    shared.observe(
        Status {
            ticks: 3,
            last_error: Some("codalab server unreachable".into()),
            counters: vec![launches(3)],
            ..Status::default()
        },
        t0,
    );
    let (code, body) = shared.health(t0 + Duration::from_secs(47), false);
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        body,
        "last successful tick 47 s ago (limit 15 s): codalab server unreachable\n"
    );
    // A server outage fails readiness, never liveness: the failed tick ended 47 s ago.
    let (code, body) = shared.health(t0 + Duration::from_secs(47), true);
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body, "alive: last tick ended 47 s ago (limit 900 s)\n");
    let (code, _) = shared.health(t0 + Duration::from_secs(901), true);
    assert_eq!(
        code,
        StatusCode::SERVICE_UNAVAILABLE,
        "no tick for 15 minutes"
    );
}

/// The whole server (router, `Host` check, [`serve::serve`]) on 127.0.0.1, asked with
/// raw HTTP/1.1 requests as a browser would send them after a DNS rebinding.
#[tokio::test]
async fn a_rebound_name_gets_421_and_loopback_names_the_endpoints() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let metrics: &'static Metrics = Box::leak(Box::default());
    let app = router(
        Arc::new(shared(metrics)),
        HostRule::new([127, 0, 0, 1].into(), &[]),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve::serve(listener, app, Limits::DEFAULT));
    let ask = |host: String| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET /status HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        let read = stream.read_to_string(&mut answer);
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .unwrap()
            .unwrap();
        answer
    };
    let refused = ask(format!("rebind.attacker.example:{}", addr.port())).await;
    assert!(refused.starts_with("HTTP/1.1 421 "), "{refused}");
    assert!(
        refused.contains("\r\n\r\nHost \"rebind.attacker.example:"),
        "{refused}"
    );
    for host in [addr.to_string(), format!("localhost:{}", addr.port())] {
        let answer = ask(host).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains(r#""ticks":0"#), "{answer}");
    }
}

#[tokio::test]
async fn the_dashboard_is_html_of_the_last_snapshot_and_its_history() {
    let metrics: &'static Metrics = Box::leak(Box::default());
    let shared = Arc::new(shared(metrics));
    for ticks in 1..=2 {
        let status = Status {
            ticks,
            uptime_seconds: 60 * ticks,
            staged: 7,
            counters: vec![launches(ticks)],
            ..Status::default()
        };
        shared.observe(status, Instant::now());
    }
    let reply = page(State(shared.clone())).await;
    assert_eq!(reply.headers()[header::CONTENT_TYPE], HTML);
    let html = shared.dashboard(0);
    assert!(html.contains(r#"<b data-field="staged">7</b>"#), "{html}");
    assert_eq!(shared.view().history.buckets().len(), 2, "{html}");
}
