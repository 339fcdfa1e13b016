//! The operator's Prometheus metrics, served at `/metrics` beside `/healthz` (OpenMetrics
//! text, the `prometheus-client` registry core uses too):
//!
//! | metric | labels | meaning |
//! | --- | --- | --- |
//! | `codalab_wm_operator_leader` | | 1 while this replica holds the Lease |
//! | `codalab_wm_operator_reconciles_total` | `result` | reconciles: `ok`, `error`, `standby` (not the leader) |
//! | `codalab_wm_operator_events_total` | `reason` | Events published on pools (`WorkersLaunched` …) |
//! | `codalab_wm_operator_pool_workers` | `namespace`, `pool`, `field` | a pool's `min`, `max`, `desired`, `starting`, `ready`, `busy`, `staged` as its status says |
//!
//! A standby replica serves its own view: `leader` 0 and the pools' gauges as it last wrote
//! them (none after a restart until it leads).

use crate::crd::CodaLabWorkerPoolStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolField {
    namespace: String,
    pool: String,
    field: &'static str,
}

/// The `field`s of `codalab_wm_operator_pool_workers`, in the order [`OperatorMetrics::pool`]
/// gives their values.
const POOL_FIELDS: [&str; 7] = [
    "min", "max", "desired", "starting", "ready", "busy", "staged",
];

fn pool_field(namespace: &str, pool: &str, field: &'static str) -> PoolField {
    PoolField {
        namespace: namespace.to_owned(),
        pool: pool.to_owned(),
        field,
    }
}

/// Every metric of the operator, in one registry.
#[derive(Debug)]
pub struct OperatorMetrics {
    registry: Registry,
    leader: Gauge,
    reconciles: Family<ResultLabel, Counter>,
    events: Family<ReasonLabel, Counter>,
    pools: Family<PoolField, Gauge>,
}

impl Default for OperatorMetrics {
    fn default() -> Self {
        let (leader, reconciles, events, pools) = Default::default();
        let mut registry = Registry::default();
        let metrics = Self {
            registry: Registry::default(),
            leader,
            reconciles,
            events,
            pools,
        };
        metrics.register(&mut registry);
        Self {
            registry,
            ..metrics
        }
    }
}

impl OperatorMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "codalab_wm_operator_leader",
            "1 while this replica holds the Lease and acts, else 0",
            self.leader.clone(),
        );
        registry.register(
            "codalab_wm_operator_reconciles",
            "Reconciles of pools, by result (ok, error, standby)",
            self.reconciles.clone(),
        );
        registry.register(
            "codalab_wm_operator_events",
            "Events published on pools, by reason (WorkersLaunched, LaunchFailed, BackoffStarted, PendingTimeout, PodBlocked, WorkerReaped)",
            self.events.clone(),
        );
        registry.register(
            "codalab_wm_operator_pool_workers",
            "A pool's min, max, desired, starting, ready, busy and staged, as its status says",
            self.pools.clone(),
        );
    }

    /// Whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// One reconcile ended with `result` (`ok`, `error`, `standby`).
    pub fn reconciled(&self, result: &'static str) {
        self.reconciles.get_or_create(&ResultLabel { result }).inc();
    }

    /// An Event with `reason` was published.
    pub fn event(&self, reason: &str) {
        let reason = reason.to_owned();
        self.events.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// The pool's gauges from the status just computed (`min`, `max` from its spec).
    pub fn pool(
        &self,
        namespace: &str,
        pool: &str,
        spec: (u32, u32),
        status: &CodaLabWorkerPoolStatus,
    ) {
        let values = [
            spec.0,
            spec.1,
            status.desired,
            status.starting,
            status.ready,
            status.busy,
            status.staged,
        ];
        for (field, value) in POOL_FIELDS.into_iter().zip(values) {
            let gauge = self
                .pools
                .get_or_create(&pool_field(namespace, pool, field));
            gauge.set(i64::from(value));
        }
    }

    /// Drops a deleted pool's gauges.
    pub fn forget_pool(&self, namespace: &str, pool: &str) {
        for field in POOL_FIELDS {
            self.pools.remove(&pool_field(namespace, pool, field));
        }
    }

    /// The registry in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauges_follow_the_status_and_a_deleted_pool_leaves() {
        let metrics = OperatorMetrics::default();
        metrics.set_leader(true);
        metrics.reconciled("ok");
        metrics.reconciled("ok");
        metrics.event("WorkersLaunched");
        let status = CodaLabWorkerPoolStatus {
            desired: 3,
            ready: 1,
            busy: 1,
            staged: 4,
            ..CodaLabWorkerPoolStatus::default()
        };
        metrics.pool("codalab", "cpu", (0, 5), &status);
        let text = metrics.render();
        for line in [
            "codalab_wm_operator_leader 1",
            r#"codalab_wm_operator_reconciles_total{result="ok"} 2"#,
            r#"codalab_wm_operator_events_total{reason="WorkersLaunched"} 1"#,
            r#"codalab_wm_operator_pool_workers{namespace="codalab",pool="cpu",field="desired"} 3"#,
            r#"codalab_wm_operator_pool_workers{namespace="codalab",pool="cpu",field="max"} 5"#,
            r#"codalab_wm_operator_pool_workers{namespace="codalab",pool="cpu",field="staged"} 4"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        metrics.forget_pool("codalab", "cpu");
        assert!(!metrics.render().contains(r#"pool="cpu""#));
    }

    /// Debian's `promtool check metrics` on the operator's `/metrics`, every family filled.
    #[test]
    fn promtool_finds_nothing_to_lint_in_the_operators_metrics() {
        let metrics = OperatorMetrics::default();
        metrics.set_leader(true);
        metrics.reconciled("ok");
        metrics.event("WorkersLaunched");
        let status = CodaLabWorkerPoolStatus::default();
        metrics.pool("codalab", "cpu", (0, 5), &status);
        let text = metrics.render();
        let Some(problems) = codalab_wm_core::testing::promtool_problems(&text) else {
            return;
        };
        assert!(problems.is_empty(), "promtool: {problems:?}\n{text}");
    }
}
