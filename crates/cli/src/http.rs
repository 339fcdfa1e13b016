//! `--listen ADDR`: a small HTTP server beside the manager loop, in the same runtime.
//!
//! - `/metrics`: Prometheus metrics (OpenMetrics text), fed from the status snapshot the
//!   manager publishes after every tick (its running totals of [`TickEvent::counter`]s, the
//!   job counts per pool, the tick's duration and error kind) and from [`MeteredBackend`],
//!   which times every backend call.
//! - `/healthz`: 200 when the last tick succeeded within 3 × `sleep_time`, 503 otherwise; the
//!   body says why.
//! - `/status`: the status snapshot ([`Status`]) as JSON; `cl-worker-manager status` reads it.
//!
//! [`TickEvent::counter`]: codalab_wm_core::manager::status::TickEvent::counter

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use codalab_wm_core::backend::{CleanupItem, LaunchRequest, WorkerBackend, WorkerJob};
use codalab_wm_core::manager::status::Status;
use codalab_wm_core::{WorkerShape, async_trait};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// `{pool, state}` of `codalab_wm_worker_jobs`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolState {
    pool: String,
    state: &'static str,
}

/// `{pool, result}` of `codalab_wm_launches_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolResult {
    pool: String,
    result: String,
}

/// `{pool, reason}` of `codalab_wm_stops_total` and `codalab_wm_decisions_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolReason {
    pool: String,
    reason: String,
}

/// `{kind}` of `codalab_wm_server_errors_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorKind {
    kind: String,
}

/// `{pool, op}` of `codalab_wm_backend_request_duration_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolOp {
    pool: String,
    op: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// 5 ms to about 80 s, doubling.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Every metric of the manager, in one registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    staged: Gauge,
    worker_jobs: Family<PoolState, Gauge>,
    launches: Family<PoolResult, Counter>,
    stops: Family<PoolReason, Counter>,
    decisions: Family<PoolReason, Counter>,
    job_endings: Family<PoolReason, Counter>,
    server_errors: Family<ErrorKind, Counter>,
    tick_duration: Histogram,
    backend_requests: HistogramFamily<PoolOp>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let metrics = Self {
            registry: Registry::default(),
            staged: Gauge::default(),
            worker_jobs: Family::default(),
            launches: Family::default(),
            stops: Family::default(),
            decisions: Family::default(),
            job_endings: Family::default(),
            server_errors: Family::default(),
            tick_duration: duration_histogram(),
            backend_requests: Family::new_with_constructor(duration_histogram),
        };
        registry.register(
            "codalab_wm_staged_bundles",
            "Staged bundles seen at the last successful tick",
            metrics.staged.clone(),
        );
        registry.register(
            "codalab_wm_worker_jobs",
            "Worker jobs per pool at the last successful tick, by state (active, pending, failed, stopping)",
            metrics.worker_jobs.clone(),
        );
        registry.register(
            "codalab_wm_launches",
            "Launches tried, by pool and result (started, dry_run, failed, temporary_error)",
            metrics.launches.clone(),
        );
        registry.register(
            "codalab_wm_stops",
            "Jobs stopped by the manager, by pool and reason",
            metrics.stops.clone(),
        );
        registry.register(
            "codalab_wm_decisions",
            "Rules that fired in a pool's decision, by pool and reason code",
            metrics.decisions.clone(),
        );
        registry.register(
            "codalab_wm_job_endings",
            "Worker jobs that ended without finishing normally, by pool and reason (preempted, failed_before_active, failed_after_active)",
            metrics.job_endings.clone(),
        );
        registry.register(
            "codalab_wm_server_errors",
            "Failed ticks, by kind of error (unreachable, server_error, rate_limited, backend ...)",
            metrics.server_errors.clone(),
        );
        registry.register_with_unit(
            "codalab_wm_tick_duration",
            "Duration of one tick (search, list, plan, act)",
            Unit::Seconds,
            metrics.tick_duration.clone(),
        );
        registry.register_with_unit(
            "codalab_wm_backend_request_duration",
            "Duration of backend calls, by pool and operation (get_worker_jobs, start_worker_job, stop_worker_job)",
            Unit::Seconds,
            metrics.backend_requests.clone(),
        );
        Self {
            registry,
            ..metrics
        }
    }
}

/// The process's metrics, once `--listen` turned them on. Process-wide, like the default
/// registry of other Prometheus clients, because backends are built deep inside `run.rs`
/// (and rebuilt on a reload): threading a registry through every builder would touch them all.
static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Turns the metrics on (idempotent) and returns them.
pub fn enable_metrics() -> &'static Metrics {
    METRICS.get_or_init(Metrics::default)
}

/// `backend`, timed per call into `codalab_wm_backend_request_duration_seconds{pool}` when
/// the metrics are on; `backend` itself otherwise.
pub fn metered(backend: Arc<dyn WorkerBackend>, pool: &str) -> Arc<dyn WorkerBackend> {
    match METRICS.get() {
        Some(metrics) => Arc::new(MeteredBackend {
            inner: backend,
            pool: pool.to_owned(),
            metrics,
        }),
        None => backend,
    }
}

/// A backend that times every call of the one it wraps.
#[derive(Debug)]
pub struct MeteredBackend {
    inner: Arc<dyn WorkerBackend>,
    pool: String,
    metrics: &'static Metrics,
}

impl MeteredBackend {
    fn observe(&self, op: &'static str, started: Instant) {
        let labels = PoolOp {
            pool: self.pool.clone(),
            op,
        };
        self.metrics
            .backend_requests
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
    }
}

#[async_trait]
impl WorkerBackend for MeteredBackend {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn worker_shape(&self) -> WorkerShape {
        self.inner.worker_shape()
    }

    async fn get_worker_jobs(&self) -> codalab_wm_core::Result<Vec<WorkerJob>> {
        let started = Instant::now();
        let result = self.inner.get_worker_jobs().await;
        self.observe("get_worker_jobs", started);
        result
    }

    async fn start_worker_job(
        &self,
        request: &LaunchRequest<'_>,
    ) -> codalab_wm_core::Result<WorkerJob> {
        let started = Instant::now();
        let result = self.inner.start_worker_job(request).await;
        self.observe("start_worker_job", started);
        result
    }

    fn job_output(&self, job: &WorkerJob) -> Option<String> {
        self.inner.job_output(job)
    }

    async fn stop_worker_job(&self, job: &WorkerJob) -> codalab_wm_core::Result<()> {
        let started = Instant::now();
        let result = self.inner.stop_worker_job(job).await;
        self.observe("stop_worker_job", started);
        result
    }

    async fn cleanup(&self, dry_run: bool) -> codalab_wm_core::Result<Vec<CleanupItem>> {
        self.inner.cleanup(dry_run).await
    }
}

/// What the server knows: the last snapshot, when a tick last succeeded, and the totals
/// already exported (the snapshot holds running totals; the counters get the difference).
#[derive(Debug)]
struct View {
    status: Status,
    last_success: Option<Instant>,
    exported: HashMap<(&'static str, String, String), u64>,
}

/// State shared by the handlers and the task that follows the manager.
#[derive(Debug)]
struct Shared {
    metrics: &'static Metrics,
    /// 3 × `sleep_time`.
    health_limit: Duration,
    started: Instant,
    view: Mutex<View>,
}

impl Shared {
    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in a new snapshot: health, gauges, counters, the tick duration.
    fn observe(&self, status: Status, now: Instant) {
        let mut view = self.view();
        if status.ticks == 0 || status.ticks == view.status.ticks {
            view.status = status;
            return;
        }
        let metrics = self.metrics;
        metrics
            .tick_duration
            .observe(status.last_tick_duration_seconds);
        if status.last_error.is_none() {
            view.last_success = Some(now);
            metrics.staged.set(status.staged as i64);
            metrics.worker_jobs.clear();
            for pool in &status.pools {
                let counts = [
                    ("active", pool.active),
                    ("pending", pool.pending),
                    ("failed", pool.failed),
                    ("stopping", pool.stopping),
                ];
                for (state, count) in counts {
                    let labels = PoolState {
                        pool: pool.name.clone(),
                        state,
                    };
                    metrics.worker_jobs.get_or_create(&labels).set(count as i64);
                }
            }
        }
        for counter in &status.counters {
            let key = (counter.metric, counter.pool.clone(), counter.label.clone());
            let before = view.exported.insert(key, counter.value).unwrap_or(0);
            // A smaller total means a new manager (reload): its whole total is new.
            let delta = counter.value.checked_sub(before).unwrap_or(counter.value);
            if delta > 0 {
                metrics.count(counter.metric, &counter.pool, &counter.label, delta);
            }
        }
        view.status = status;
    }

    /// The `/healthz` answer.
    fn health(&self, now: Instant) -> (StatusCode, String) {
        let view = self.view();
        let limit = self.health_limit.as_secs();
        let error = view
            .status
            .last_error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        match view.last_success {
            Some(at) if now.duration_since(at) <= self.health_limit => (
                StatusCode::OK,
                format!(
                    "ok: last successful tick {} s ago (limit {limit} s)\n",
                    now.duration_since(at).as_secs()
                ),
            ),
            Some(at) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "last successful tick {} s ago (limit {limit} s){error}\n",
                    now.duration_since(at).as_secs()
                ),
            ),
            None => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "no successful tick yet (started {} s ago, limit {limit} s){error}\n",
                    now.duration_since(self.started).as_secs()
                ),
            ),
        }
    }
}

impl Metrics {
    /// Adds `delta` to the exported counter of a [`Status`] counter, if it is exported.
    fn count(&self, metric: &str, pool: &str, label: &str, delta: u64) {
        let (pool, label) = (pool.to_owned(), label.to_owned());
        match metric {
            "launches" => self.launches.get_or_create(&PoolResult {
                pool,
                result: label,
            }),
            "stops" => self.stops.get_or_create(&PoolReason {
                pool,
                reason: label,
            }),
            "decisions" => self.decisions.get_or_create(&PoolReason {
                pool,
                reason: label,
            }),
            "job_failures" => self.job_endings.get_or_create(&PoolReason {
                pool,
                reason: format!("failed_{label}"),
            }),
            "job_preemptions" => self.job_endings.get_or_create(&PoolReason {
                pool,
                reason: label,
            }),
            "server_errors" => self.server_errors.get_or_create(&ErrorKind { kind: label }),
            _ => return,
        }
        .inc_by(delta);
    }

    /// The registry in the OpenMetrics text format.
    pub fn render(&self) -> Result<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .context("cannot encode the metrics")?;
        Ok(text)
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

/// Serves `/metrics`, `/healthz` and `/status` on `listener` and follows the manager's
/// snapshots, until the runtime ends.
pub fn spawn(listener: TcpListener, mut snapshots: watch::Receiver<Status>, sleep_time: Duration) {
    let shared = Arc::new(Shared {
        metrics: enable_metrics(),
        health_limit: sleep_time * 3,
        started: Instant::now(),
        view: Mutex::new(View {
            status: Status::default(),
            last_success: None,
            exported: HashMap::new(),
        }),
    });
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
        tracing::info!(%addr, "serving /metrics, /healthz and /status");
    }
    let app = Router::new()
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
    match shared.metrics.render() {
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

async fn status(State(shared): State<Arc<Shared>>) -> Response {
    let status = shared.view().status.clone();
    axum::Json(status).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_core::manager::status::Counter as StatusCounter;

    fn shared(metrics: &'static Metrics) -> Shared {
        Shared {
            metrics,
            health_limit: Duration::from_secs(15),
            started: Instant::now(),
            view: Mutex::new(View {
                status: Status::default(),
                last_success: None,
                exported: HashMap::new(),
            }),
        }
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
}
