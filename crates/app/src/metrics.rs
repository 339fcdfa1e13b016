//! The manager's Prometheus metrics, in one registry ([`Metrics`], OpenMetrics text from
//! [`Metrics::render`]):
//!
//! - from the status snapshots the manager publishes after every tick ([`StatusExporter`]):
//!   staged bundles, worker jobs per pool and state, pools backing off, the last successful
//!   tick's time, the tick's duration, and the running totals
//!   of the [`TickEvent::counter`]s (launches, stops, decisions, job endings, server errors);
//! - from [`MeteredBackend`], which times every backend call per pool and operation.
//!
//! The metrics are process-wide and off until [`enable_metrics`] turns them on (the CLI does
//! with `--listen`, whose HTTP server serves [`Metrics::render`]); [`metered`] wraps a backend
//! only when they are on.
//!
//! [`health`] holds the `/healthz` rule.
//!
//! [`TickEvent::counter`]: codalab_wm_core::status::TickEvent::counter

pub mod health;
mod metered;

pub use metered::{MeteredBackend, metered};

use codalab_wm_core::checkin::WorkerState;
use codalab_wm_core::manager::TICK_ERROR_KINDS;
use codalab_wm_core::pools::FailureClass;
use codalab_wm_core::status::{LaunchResult, Status};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashMap;
use std::sync::OnceLock;

/// `{pool, state}` of `codalab_wm_worker_jobs`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolState {
    pool: String,
    state: &'static str,
}

/// `{pool}` of `codalab_wm_pool_backing_off`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Pool {
    pool: String,
}

/// `{pool, class}` of `codalab_wm_pool_failures_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolClass {
    pool: String,
    class: String,
}

/// `{reason}` of `codalab_wm_unmet_bundles`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnmetReason {
    reason: &'static str,
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

/// The `reason`s of `codalab_wm_job_endings_total` ([`Metrics::count`] makes them).
const JOB_ENDINGS: [&str; 3] = ["failed_before_active", "failed_after_active", "preempted"];

/// `{kind}` of `codalab_wm_server_errors_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorKind {
    kind: String,
}

/// `{scope}` of the budget gauges: a pool, or `all pools`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Scope {
    scope: String,
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// `{pool, op}` of `codalab_wm_backend_request_duration_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolOp {
    pool: String,
    op: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// `{kind}` of the start-time estimate metrics (`now`, `worker_checkin`, `after_runs` …).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EstimateKind {
    kind: &'static str,
}

/// 5 s to about 2.8 h, doubling: a start-time estimate's error.
fn estimate_error_histogram() -> Histogram {
    Histogram::new(exponential_buckets(5.0, 2.0, 12))
}

/// 5 ms to about 80 s, doubling.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Every metric of the manager, in one registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    staged: Gauge,
    last_success: Gauge,
    pool_backing_off: Family<Pool, Gauge>,
    pool_suspended: Family<Pool, Gauge>,
    pool_failures: Family<PoolClass, Counter>,
    worker_jobs: Family<PoolState, Gauge>,
    workers: Family<PoolState, Gauge>,
    unmet_bundles: Family<UnmetReason, Gauge>,
    launches: Family<PoolResult, Counter>,
    stops: Family<PoolReason, Counter>,
    decisions: Family<PoolReason, Counter>,
    job_endings: Family<PoolReason, Counter>,
    server_errors: Family<ErrorKind, Counter>,
    tick_duration: Histogram,
    backend_requests: HistogramFamily<PoolOp>,
    budget_worker_seconds: Family<Scope, FloatGauge>,
    budget_cost: Family<Scope, FloatGauge>,
    budget_reached: Family<Scope, Gauge>,
    start_estimates: Family<EstimateKind, Gauge>,
    estimate_errors: HistogramFamily<EstimateKind>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let metrics = Self {
            registry: Registry::default(),
            staged: Gauge::default(),
            last_success: Gauge::default(),
            pool_backing_off: Family::default(),
            pool_suspended: Family::default(),
            pool_failures: Family::default(),
            worker_jobs: Family::default(),
            workers: Family::default(),
            unmet_bundles: Family::default(),
            launches: Family::default(),
            stops: Family::default(),
            decisions: Family::default(),
            job_endings: Family::default(),
            server_errors: Family::default(),
            tick_duration: duration_histogram(),
            backend_requests: Family::new_with_constructor(duration_histogram),
            budget_worker_seconds: Family::default(),
            budget_cost: Family::default(),
            budget_reached: Family::default(),
            start_estimates: Family::default(),
            estimate_errors: Family::new_with_constructor(estimate_error_histogram),
        };
        metrics.register(&mut registry);
        for kind in TICK_ERROR_KINDS {
            let kind = kind.to_owned();
            (metrics.server_errors.get_or_create(&ErrorKind { kind })).inc_by(0);
        }
        Self {
            registry,
            ..metrics
        }
    }
}

impl Metrics {
    /// Registers every metric (handles share their values with the copies in `self`).
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "codalab_wm_staged_bundles",
            "Staged bundles seen at the last successful tick",
            self.staged.clone(),
        );
        registry.register_with_unit(
            "codalab_wm_last_successful_tick_timestamp",
            "When the last successful tick ended, in seconds since the Unix epoch (what /healthz judges)",
            Unit::Seconds,
            self.last_success.clone(),
        );
        self.register_pools(registry);
        registry.register(
            "codalab_wm_unmet_bundles",
            "Staged bundles with no worker coming at the last successful tick, by reason (no_fitting_pool, max_reached, backing_off, paced, waiting_for_starting ...)",
            self.unmet_bundles.clone(),
        );
        registry.register(
            "codalab_wm_launches",
            "Launches tried, by pool and result (started, dry_run, failed, temporary_error)",
            self.launches.clone(),
        );
        registry.register(
            "codalab_wm_stops",
            "Jobs stopped by the manager, by pool and reason (pending_timeout, blocked: its platform says it will not start, worker_lost, withdrawn: pending and no longer needed; reaped; each with _failed)",
            self.stops.clone(),
        );
        registry.register(
            "codalab_wm_decisions",
            "Rules that fired in a pool's decision, by pool and reason code",
            self.decisions.clone(),
        );
        registry.register(
            "codalab_wm_job_endings",
            "Worker jobs that ended without finishing normally, by pool and reason (preempted, failed_before_active, failed_after_active)",
            self.job_endings.clone(),
        );
        registry.register(
            "codalab_wm_server_errors",
            "Failed ticks, by kind of error (unreachable, server_error, rate_limited, backend ...)",
            self.server_errors.clone(),
        );
        // In the base unit (promtool asks for seconds); the page and `status` say worker-hours.
        registry.register_with_unit(
            "codalab_wm_budget_worker",
            "Worker time used in the last 24 hours, by scope (a pool, or all pools)",
            Unit::Seconds,
            self.budget_worker_seconds.clone(),
        );
        registry.register(
            "codalab_wm_budget_cost",
            "Cost (worker-hours x cost_per_hour) in the last 24 hours, by scope, where a cost per hour is set",
            self.budget_cost.clone(),
        );
        registry.register(
            "codalab_wm_budget_reached",
            "1 while a scope's budget is used up (no launches), else 0",
            self.budget_reached.clone(),
        );
        self.register_estimates(registry);
        registry.register_with_unit(
            "codalab_wm_tick_duration",
            "Duration of one tick (search, list, plan, act)",
            Unit::Seconds,
            self.tick_duration.clone(),
        );
        registry.register_with_unit(
            "codalab_wm_backend_request_duration",
            "Duration of backend calls, by pool and operation (get_worker_jobs, start_worker_job, stop_worker_job)",
            Unit::Seconds,
            self.backend_requests.clone(),
        );
    }

    /// Each pool's state: backoff, suspension, failures by class, its jobs and workers.
    fn register_pools(&self, registry: &mut Registry) {
        registry.register(
            "codalab_wm_pool_backing_off",
            "1 while a pool's launches are paused after failures (backoff), else 0",
            self.pool_backing_off.clone(),
        );
        registry.register(
            "codalab_wm_pool_suspended",
            "1 while a pool is suspended for misconfiguration (the same error again and again: no launches until its settings are fixed and reloaded), else 0",
            self.pool_suspended.clone(),
        );
        registry.register(
            "codalab_wm_pool_failures",
            "Failures of a pool, by class: misconfiguration (its settings: suspends after 3 in a row), capacity (goes to its fallback), transient",
            self.pool_failures.clone(),
        );
        registry.register(
            "codalab_wm_worker_jobs",
            "Worker jobs per pool at the last successful tick, by state (active, pending, failed, stopping)",
            self.worker_jobs.clone(),
        );
        registry.register(
            "codalab_wm_workers",
            "Worker jobs per pool at the last successful tick, by state seen from the platform and the server (starting, ready_idle, busy, vanished, lost)",
            self.workers.clone(),
        );
    }

    /// The start-time estimates' metrics.
    fn register_estimates(&self, registry: &mut Registry) {
        registry.register(
            "codalab_wm_start_estimates",
            "Staged bundles read at the last successful tick, by the kind of their start-time estimate (now, worker_checkin, after_runs, after_backoff, worker_overdue, overdue, not_while)",
            self.start_estimates.clone(),
        );
        registry.register_with_unit(
            "codalab_wm_start_estimate_error",
            "How far each start-time estimate was from the tick its bundle left staged, by kind (each bundle's first estimate with a time)",
            Unit::Seconds,
            self.estimate_errors.clone(),
        );
    }

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
            "reaped" => self.stops.get_or_create(&PoolReason {
                pool,
                reason: "reaped".to_owned(),
            }),
            "failures" => self
                .pool_failures
                .get_or_create(&PoolClass { pool, class: label }),
            "server_errors" => self.server_errors.get_or_create(&ErrorKind { kind: label }),
            _ => return,
        }
        .inc_by(delta);
    }

    /// Creates at 0 the counters of the pools whose labels are known (launch results, job
    /// endings), so that a rate or an alert over them has a series before the first event.
    /// Pools come and go with reloads; the kinds of failed tick are created once, in
    /// [`Metrics::default`].
    fn start_counters(&self, status: &Status) {
        for pool in &status.pools {
            for result in LaunchResult::ALL {
                let pool = pool.name.clone();
                let result = result.code().to_owned();
                self.launches
                    .get_or_create(&PoolResult { pool, result })
                    .inc_by(0);
            }
            for reason in JOB_ENDINGS {
                let pool = pool.name.clone();
                let reason = reason.to_owned();
                (self.job_endings.get_or_create(&PoolReason { pool, reason })).inc_by(0);
            }
            for class in FailureClass::ALL {
                let (pool, class) = (pool.name.clone(), class.code().to_owned());
                (self.pool_failures.get_or_create(&PoolClass { pool, class })).inc_by(0);
            }
        }
    }

    /// Sets the gauges of a successful tick: staged bundles, worker jobs per pool and state.
    fn set_gauges(&self, status: &Status) {
        self.staged.set(status.staged as i64);
        self.start_counters(status);
        self.worker_jobs.clear();
        self.workers.clear();
        self.pool_backing_off.clear();
        self.pool_suspended.clear();
        for pool in &status.pools {
            let backing_off = pool
                .backing_off_until
                .is_some_and(|until| until > status.uptime_seconds);
            let labels = Pool {
                pool: pool.name.clone(),
            };
            (self.pool_backing_off.get_or_create(&labels)).set(i64::from(backing_off));
            let suspended = i64::from(pool.suspended.is_some());
            (self.pool_suspended.get_or_create(&labels)).set(suspended);
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
                self.worker_jobs.get_or_create(&labels).set(count as i64);
            }
            for state in WorkerState::ALL {
                let count = pool.workers.get(&state).copied().unwrap_or(0);
                let labels = PoolState {
                    pool: pool.name.clone(),
                    state: state.code(),
                };
                self.workers.get_or_create(&labels).set(count as i64);
            }
        }
        self.set_budgets(status);
        self.start_estimates.clear();
        for estimate in &status.estimates {
            let kind = EstimateKind {
                kind: estimate.estimate.kind(),
            };
            self.start_estimates.get_or_create(&kind).inc();
        }
        self.unmet_bundles.clear();
        for unmet in &status.unmet {
            let labels = UnmetReason {
                reason: unmet.reason.code(),
            };
            self.unmet_bundles
                .get_or_create(&labels)
                .inc_by(unmet.bundles as i64);
        }
    }

    fn set_budgets(&self, status: &Status) {
        self.budget_cost.clear();
        for budget in &status.budgets {
            let scope = Scope {
                scope: budget.scope.clone(),
            };
            let seconds = self.budget_worker_seconds.get_or_create(&scope);
            seconds.set(budget.worker_hours * 3600.0);
            if let Some(cost) = budget.cost {
                self.budget_cost.get_or_create(&scope).set(cost);
            }
            let reached = i64::from(budget.reached.is_some());
            self.budget_reached.get_or_create(&scope).set(reached);
        }
    }

    /// The registry in the OpenMetrics text format.
    pub fn render(&self) -> std::result::Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// Follows the manager's status snapshots ([`codalab_wm_core::Manager::subscribe_status`]) into
/// [`Metrics`]: the tick's duration, the gauges of a successful tick, and the counters, which
/// get the growth of the snapshot's running totals.
#[derive(Debug)]
pub struct StatusExporter {
    metrics: &'static Metrics,
    /// The tick of the last snapshot taken in.
    ticks: u64,
    /// The totals already exported.
    exported: HashMap<(&'static str, String, String), u64>,
}

impl StatusExporter {
    /// An exporter into `metrics`.
    pub fn new(metrics: &'static Metrics) -> Self {
        Self {
            metrics,
            ticks: 0,
            exported: HashMap::new(),
        }
    }

    /// Takes in a snapshot. Returns whether it is a new tick's (a snapshot before the first
    /// tick, or of the same tick again, changes nothing).
    pub fn observe(&mut self, status: &Status) -> bool {
        let last = std::mem::replace(&mut self.ticks, status.ticks);
        if status.ticks == 0 || status.ticks == last {
            return false;
        }
        let metrics = self.metrics;
        metrics
            .tick_duration
            .observe(status.last_tick_duration_seconds);
        if status.last_error.is_none() {
            metrics.set_gauges(status);
        }
        if let Some(seconds) = status.last_success_seconds {
            let at = status.started_unix_seconds + seconds;
            metrics.last_success.set(at as i64);
        }
        for scored in &status.scored {
            let kind = EstimateKind { kind: scored.kind };
            (metrics.estimate_errors.get_or_create(&kind)).observe(scored.error_seconds as f64);
        }
        for counter in &status.counters {
            let key = (counter.metric, counter.pool.clone(), counter.label.clone());
            let before = self.exported.insert(key, counter.value).unwrap_or(0);
            // A smaller total means a new manager (reload): its whole total is new.
            let delta = counter.value.checked_sub(before).unwrap_or(counter.value);
            if delta > 0 {
                metrics.count(counter.metric, &counter.pool, &counter.label, delta);
            }
        }
        true
    }
}

/// The process's metrics, once turned on. Process-wide, like the default registry of other
/// Prometheus clients, because backends are built deep inside the CLI (and rebuilt on a
/// reload): threading a registry through every builder would touch them all.
static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Turns the metrics on (idempotent) and returns them.
pub fn enable_metrics() -> &'static Metrics {
    METRICS.get_or_init(Metrics::default)
}

#[cfg(test)]
mod tests;
