//! `--listen ADDR`: a small HTTP server beside the manager loop, in the same runtime.
//!
//! - `/metrics`: the Prometheus metrics of [`codalab_wm_app::metrics`] (OpenMetrics text), fed
//!   from the status snapshot the manager publishes after every tick ([`StatusExporter`]) and
//!   from the backends' timed calls ([`codalab_wm_app::metrics::MeteredBackend`]).
//! - `/healthz`: 200 when the last tick succeeded within 3 × `sleep_time`, 503 otherwise; the
//!   body says why ([`codalab_wm_app::metrics::health`]).
//! - `/status`: the status snapshot ([`Status`]) as JSON; `cl-worker-manager status` reads it.
//! - `/`: the dashboard, an HTML page for people ([`codalab_wm_app::dashboard`]), from the
//!   last snapshot and the history of the snapshots followed.

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use codalab_wm_app::dashboard::{self, History, Page};
use codalab_wm_app::metrics::health::Health;
use codalab_wm_app::metrics::{Metrics, StatusExporter, enable_metrics};
use codalab_wm_core::manager::status::Status;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// What the server knows: the last snapshot, the health rule, what of the snapshots the
/// metrics already have, and the dashboard's history of them.
#[derive(Debug)]
struct View {
    status: Status,
    health: Health,
    exporter: StatusExporter,
    history: History,
}

/// State shared by the handlers and the task that follows the manager.
#[derive(Debug)]
struct Shared {
    metrics: &'static Metrics,
    sleep_time: Duration,
    view: Mutex<View>,
}

impl Shared {
    fn new(metrics: &'static Metrics, sleep_time: Duration) -> Self {
        Self {
            metrics,
            sleep_time,
            view: Mutex::new(View {
                status: Status::default(),
                health: Health::new(sleep_time, Instant::now()),
                exporter: StatusExporter::new(metrics),
                history: History::new(),
            }),
        }
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in a new snapshot: health, the metrics ([`StatusExporter::observe`]) and the
    /// dashboard's history.
    fn observe(&self, status: Status, now: Instant) {
        let mut view = self.view();
        let new_tick = view.exporter.observe(&status);
        view.health.observe(new_tick, &status, now);
        view.history.observe(&status);
        view.status = status;
    }

    /// The dashboard page at `now_unix_seconds`.
    fn dashboard(&self, now_unix_seconds: u64) -> String {
        let view = self.view();
        let page = Page::new(self.sleep_time, now_unix_seconds);
        dashboard::render(&view.status, &view.history, &page)
    }

    /// The `/healthz` answer ([`Health::check`]).
    fn health(&self, now: Instant) -> (StatusCode, String) {
        let view = self.view();
        match view.health.check(view.status.last_error.as_deref(), now) {
            Ok(text) => (StatusCode::OK, text),
            Err(text) => (StatusCode::SERVICE_UNAVAILABLE, text),
        }
    }
}

/// Binds `addr` (before anything else starts, so that a taken port fails the start) and
/// turns the metrics on.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on --listen {addr}"))?;
    enable_metrics();
    Ok(listener)
}

/// Serves `/`, `/metrics`, `/healthz` and `/status` on `listener` and follows the manager's
/// snapshots, until the runtime ends.
pub fn spawn(listener: TcpListener, mut snapshots: watch::Receiver<Status>, sleep_time: Duration) {
    let shared = Arc::new(Shared::new(enable_metrics(), sleep_time));
    let follower = shared.clone();
    tokio::spawn(async move {
        loop {
            let status = snapshots.borrow_and_update().clone();
            follower.observe(status, Instant::now());
            if snapshots.changed().await.is_err() {
                break;
            }
        }
    });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics, /healthz, /status and the dashboard at /");
    }
    let app = Router::new()
        .route("/", get(page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/status", get(status))
        .with_state(shared);
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "the --listen server stopped");
        }
    });
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    match shared.metrics.render().context("cannot encode the metrics") {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error:#}\n")).into_response(),
    }
}

async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    shared.health(Instant::now()).into_response()
}

/// The dashboard's content type.
const HTML: &str = "text/html; charset=utf-8";

async fn page(State(shared): State<Arc<Shared>>) -> Response {
    let now = SystemTime::UNIX_EPOCH.elapsed().map_or(0, |d| d.as_secs());
    ([(header::CONTENT_TYPE, HTML)], shared.dashboard(now)).into_response()
}

async fn status(State(shared): State<Arc<Shared>>) -> Response {
    let status = shared.view().status.clone();
    axum::Json(status).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_core::manager::status::Counter as StatusCounter;

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

    #[test]
    fn counters_follow_the_running_totals_and_health_the_last_success() {
        let metrics: &'static Metrics = Box::leak(Box::default());
        let shared = shared(metrics);
        let t0 = Instant::now();
        assert_eq!(shared.health(t0).0, StatusCode::SERVICE_UNAVAILABLE);
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
        assert_eq!(shared.health(t0).0, StatusCode::OK);
        shared.observe(
            Status {
                ticks: 3,
                last_error: Some("codalab server unreachable".into()),
                counters: vec![launches(3)],
                ..Status::default()
            },
            t0,
        );
        let (code, body) = shared.health(t0 + Duration::from_secs(47));
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            "last successful tick 47 s ago (limit 15 s): codalab server unreachable\n"
        );
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
}
