//! `--listen ADDR`: a small HTTP server beside the manager loop, in the same runtime.
//!
//! - `/metrics`: the Prometheus metrics of [`codalab_wm_app::metrics`] (OpenMetrics text), fed
//!   from the status snapshot the manager publishes after every tick ([`StatusExporter`]) and
//!   from the backends' timed calls ([`codalab_wm_app::metrics::MeteredBackend`]).
//! - `/healthz`: 200 when the last tick succeeded within 3 × `sleep_time`, 503 otherwise; the
//!   body says why. `/livez`: 200 while ticks end, failed ones too ([`Health::live`]).
//! - `/status`: the status snapshot ([`Status`]) as JSON; `cl-worker-manager status` reads it.
//! - `/`: the dashboard, an HTML page for people ([`codalab_wm_app::dashboard`]), from the
//!   last snapshot and the history of the snapshots followed.

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use codalab_wm_app::dashboard::{self, History, Page};
use codalab_wm_app::listen::{HostRule, Limits};
use codalab_wm_app::metrics::health::{Health, status_sleep_time};
use codalab_wm_app::metrics::{Metrics, StatusExporter, enable_metrics};
use codalab_wm_app::simulate::SavedAdvice;
use codalab_wm_core::settings::Settings;
use codalab_wm_core::status::Status;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpListener;
use tokio::sync::watch;

mod serve;

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
    /// The `sleep_time` the manager started with: the page's until a snapshot reports one.
    sleep_time: Duration,
    view: Mutex<View>,
    /// The history's directory, where `advise` leaves its last answer for the page.
    history: Option<std::path::PathBuf>,
}

impl Shared {
    fn new(metrics: &'static Metrics, sleep_time: Duration) -> Self {
        Self {
            metrics,
            sleep_time,
            history: None,
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
        let sleep_time = status_sleep_time(&view.status).unwrap_or(self.sleep_time);
        let page = Page::new(sleep_time, now_unix_seconds);
        let advice = self.history.as_deref().and_then(SavedAdvice::read);
        dashboard::render_with_advice(&view.status, &view.history, &page, advice.as_ref())
    }

    /// The `/healthz` answer ([`Health::check`]), or with `live` the `/livez` one.
    fn health(&self, now: Instant, live: bool) -> (StatusCode, String) {
        let view = self.view();
        let answer = match live {
            true => view.health.live(now),
            false => view.health.check(view.status.last_error.as_deref(), now),
        };
        match answer {
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

/// Serves `/`, `/metrics`, `/healthz` and `/status` on `listener` to requests that name a
/// host `--listen-hosts` allows, within [`Limits::DEFAULT`], and follows the manager's
/// snapshots, until the runtime ends.
pub fn spawn(listener: TcpListener, settings: &Settings, mut snapshots: watch::Receiver<Status>) {
    let sleep_time = Duration::from_secs(settings.sleep_time);
    let mut shared = Shared::new(enable_metrics(), sleep_time);
    shared.history = settings.history().map(|(dir, _)| dir);
    let (shared, listen_hosts) = (Arc::new(shared), &settings.listen_hosts);
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
    let bound = listener.local_addr().map(|addr| addr.ip());
    let rule = HostRule::new(bound.unwrap_or([127, 0, 0, 1].into()), listen_hosts);
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics, /healthz, /livez, /status and the dashboard at /");
    }
    let app = router(shared, rule);
    tokio::spawn(serve::serve(listener, app, Limits::DEFAULT));
}

/// The endpoints, behind the `Host` check.
fn router(shared: Arc<Shared>, rule: HostRule) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/livez", get(livez))
        .route("/status", get(status))
        .with_state(shared)
        .layer(axum::middleware::from_fn_with_state(Arc::new(rule), hosts))
}

/// Answers 421 and one line to a request whose `Host` the rule refuses.
async fn hosts(State(rule): State<Arc<HostRule>>, request: Request, next: Next) -> Response {
    let host = (request.headers().get(header::HOST)).map(|v| v.to_str().unwrap_or("(not text)"));
    if rule.allows(host) {
        return next.run(request).await;
    }
    let shown: String = host.unwrap_or_default().chars().take(100).collect();
    let text = format!(
        "Host {shown:?} is not served here: name this server by an IP address, localhost or a name of --listen-hosts\n"
    );
    (StatusCode::MISDIRECTED_REQUEST, text).into_response()
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
    shared.health(Instant::now(), false).into_response()
}

async fn livez(State(shared): State<Arc<Shared>>) -> Response {
    shared.health(Instant::now(), true).into_response()
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
mod tests;
