//! `/metrics` as Prometheus's own linter reads it: Debian's `promtool check metrics`
//! (prometheus 2.42, installed by `cargo xtask ci`'s prerequisites) on the registry the manager
//! serves, with every family filled from a status snapshot (what promtool 2.42 says of every
//! OpenMetrics counter, "no help text", is left out: see `promtool_problems`). Locally a
//! missing `promtool` skips the test; under `CI=true` it fails.

use codalab_wm_app::metrics::{Metrics, StatusExporter};
use codalab_wm_core::budget::BudgetStatus;
use codalab_wm_core::checkin::WorkerState;
use codalab_wm_core::manager::status::{Counter, PoolStatus, ShapeStatus, Status};
use codalab_wm_core::pools::{LaunchMode, PoolHealth};
use codalab_wm_core::testing::promtool_problems;

/// A snapshot that fills every family: a pool with jobs, counters of each kind, a budget.
fn snapshot() -> Status {
    let counter = |metric: &'static str, label: &str| Counter {
        metric,
        pool: "cpu".into(),
        label: label.into(),
        value: 2,
    };
    Status {
        ticks: 1,
        staged: 4,
        pools: vec![PoolStatus {
            name: "cpu".into(),
            backend: "local".into(),
            launch_mode: LaunchMode::Target,
            shape: ShapeStatus {
                cpus: 1,
                gpus: 0,
                memory_bytes: 1 << 30,
            },
            min: 0,
            max: 3,
            tag: None,
            tag_exclusive: false,
            cost: 1.0,
            active: 2,
            pending: 1,
            failed: 0,
            stopping: 0,
            workers: [(WorkerState::Busy, 1), (WorkerState::Vanished, 1)].into(),
            health: PoolHealth::default(),
            backing_off_until: None,
            last_decision: None,
            assigned: Vec::new(),
        }],
        counters: vec![
            counter("launches", "started"),
            counter("stops", "pending_timeout"),
            counter("decisions", "want_workers"),
            counter("job_failures", "before_active"),
            counter("server_errors", "unreachable"),
        ],
        budgets: vec![BudgetStatus {
            scope: "all pools".into(),
            worker_hours: 1.5,
            cost: Some(0.75),
            limits: Default::default(),
            reached: None,
            resumes_at_seconds: None,
        }],
        ..Status::default()
    }
}

#[test]
fn promtool_finds_nothing_to_lint_in_the_managers_metrics() {
    let metrics: &'static Metrics = Box::leak(Box::default());
    StatusExporter::new(metrics).observe(&snapshot());
    let text = metrics.render().unwrap();
    let Some(problems) = promtool_problems(&text) else {
        return;
    };
    assert!(problems.is_empty(), "promtool: {problems:?}\n{text}");
}
