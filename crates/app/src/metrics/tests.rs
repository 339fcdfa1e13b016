//! Tests of the exporter and of the metrics promtool lints.

use super::*;
use codalab_wm_core::estimate::{BundleEstimate, StartEstimate};
use codalab_wm_core::pools::{BundleClass, UnmetDemand, UnmetReason as Unmet};
use codalab_wm_core::pools::{LaunchMode, PoolHealth};
use codalab_wm_core::status::ScoredEstimate;
use codalab_wm_core::status::{Counter as StatusCounter, PoolStatus, ShapeStatus};

/// Two estimates (one now, one at a check-in) and one scored 12 s off.
fn estimates(status: &mut Status) {
    let now = StartEstimate::Now {
        worker_id: "w1".into(),
    };
    let checkin = StartEstimate::WorkerCheckin {
        pool: "cpu".into(),
        job: None,
        seconds: 40,
        forecast: false,
    };
    status.estimates = vec![
        BundleEstimate::new("0x1", now),
        BundleEstimate::new("0x2", checkin),
    ];
    status.scored = vec![ScoredEstimate {
        uuid: "0x0".into(),
        kind: "worker_checkin",
        error_seconds: 12,
    }];
}

fn counter(metric: &'static str, label: &str, value: u64) -> StatusCounter {
    StatusCounter {
        metric,
        pool: "cpu".into(),
        label: label.into(),
        value,
    }
}

fn pool(active: usize) -> PoolStatus {
    PoolStatus {
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
        cost: 0.0,
        cost_per_hour: None,
        spill_after_seconds: None,
        fallback: None,
        active,
        pending: 1,
        failed: 0,
        stopping: 0,
        workers: Default::default(),
        health: PoolHealth::default(),
        backing_off_until: None,
        suspended: None,
        last_decision: None,
        assigned: Vec::new(),
    }
}

#[test]
fn the_exporter_counts_growth_once_and_sets_gauges_of_successful_ticks() {
    let metrics: &'static Metrics = Box::leak(Box::default());
    let mut exporter = StatusExporter::new(metrics);
    assert!(!exporter.observe(&Status::default()), "no tick yet");
    let mut backing_off = pool(2);
    backing_off.backing_off_until = Some(400);
    backing_off.suspended = Some(Default::default());
    let mut first = Status {
        ticks: 1,
        uptime_seconds: 100,
        started_unix_seconds: 1_800_000_000,
        last_success_seconds: Some(95),
        staged: 4,
        pools: vec![backing_off],
        counters: vec![
            counter("launches", "started", 2),
            counter("job_failures", "before_active", 1),
            counter("failures", "misconfiguration", 3),
        ],
        budgets: vec![codalab_wm_core::budget::BudgetStatus {
            scope: "all pools".into(),
            worker_hours: 12.5,
            cost: Some(6.25),
            limits: Default::default(),
            reached: Some("12.5 of 12 worker-hours".into()),
            resumes_at_seconds: Some(7200),
        }],
        ..Status::default()
    };
    estimates(&mut first);
    assert!(exporter.observe(&first));
    assert!(!exporter.observe(&first), "the same tick again");
    let failed = Status {
        ticks: 2,
        staged: 9,
        pools: vec![pool(5)],
        last_error: Some("codalab server unreachable".into()),
        counters: vec![
            counter("launches", "started", 3),
            counter("job_failures", "before_active", 1),
        ],
        ..Status::default()
    };
    assert!(exporter.observe(&failed));
    let text = metrics.render().unwrap();
    for line in [
        r#"codalab_wm_launches_total{pool="cpu",result="started"} 3"#,
        r#"codalab_wm_job_endings_total{pool="cpu",reason="failed_before_active"} 1"#,
        r#"codalab_wm_worker_jobs{pool="cpu",state="active"} 2"#,
        r#"codalab_wm_pool_backing_off{pool="cpu"} 1"#,
        r#"codalab_wm_pool_suspended{pool="cpu"} 1"#,
        r#"codalab_wm_pool_failures_total{pool="cpu",class="misconfiguration"} 3"#,
        r#"codalab_wm_pool_failures_total{pool="cpu",class="capacity"} 0"#,
        r#"codalab_wm_launches_total{pool="cpu",result="failed"} 0"#,
        r#"codalab_wm_server_errors_total{kind="unauthenticated"} 0"#,
        "codalab_wm_last_successful_tick_timestamp_seconds 1800000095",
        "codalab_wm_staged_bundles 4",
        "codalab_wm_tick_duration_seconds_count 2",
        r#"codalab_wm_budget_worker_seconds{scope="all pools"} 45000.0"#,
        r#"codalab_wm_budget_cost{scope="all pools"} 6.25"#,
        r#"codalab_wm_budget_reached{scope="all pools"} 1"#,
        r#"codalab_wm_start_estimates{kind="worker_checkin"} 1"#,
        r#"codalab_wm_start_estimate_error_seconds_count{kind="worker_checkin"} 1"#,
        r#"codalab_wm_start_estimate_error_seconds_bucket{le="20.0",kind="worker_checkin"} 1"#,
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    // A new manager (reload) starts its totals again: its whole total is new.
    exporter.observe(&Status {
        ticks: 3,
        counters: vec![counter("launches", "started", 1)],
        ..Status::default()
    });
    let text = metrics.render().unwrap();
    assert!(
        text.contains(r#"codalab_wm_launches_total{pool="cpu",result="started"} 4"#),
        "{text}"
    );
}

/// A registry with every family filled from a snapshot (and one timed backend call).
fn every_family() -> &'static Metrics {
    let metrics: &'static Metrics = Box::leak(Box::default());
    let mut cpu = pool(2);
    cpu.workers = [(WorkerState::Busy, 1), (WorkerState::Vanished, 1)].into();
    let counters = [
        ("launches", "started"),
        ("stops", "pending_timeout"),
        ("decisions", "want_workers"),
        ("job_failures", "before_active"),
        ("server_errors", "unreachable"),
    ];
    let mut status = Status {
        ticks: 1,
        started_unix_seconds: 1_800_000_000,
        last_success_seconds: Some(5),
        staged: 4,
        pools: vec![cpu],
        counters: counters.map(|(m, l)| counter(m, l, 2)).into(),
        budgets: vec![codalab_wm_core::budget::BudgetStatus {
            scope: "all pools".into(),
            worker_hours: 1.5,
            cost: Some(0.75),
            limits: Default::default(),
            reached: None,
            resumes_at_seconds: None,
        }],
        ..Status::default()
    };
    estimates(&mut status);
    status.unmet = vec![UnmetDemand {
        pool: Some("cpu".into()),
        class: BundleClass {
            cpus: 1,
            gpus: 0,
            memory_bytes: 1 << 30,
            queue: String::new(),
        },
        bundles: 3,
        reason: Unmet::MaxReached { jobs: 3, max: 3 },
    }];
    StatusExporter::new(metrics).observe(&status);
    let call = PoolOp {
        pool: "cpu".into(),
        op: "get_worker_jobs",
    };
    metrics.backend_requests.get_or_create(&call).observe(0.01);
    metrics
}

/// Debian's `promtool check metrics` (prometheus 2.42, among `cargo xtask ci`'s
/// prerequisites) on the registry the manager serves, every family filled. Locally a missing
/// `promtool` skips it; under `CI=true` it fails.
#[test]
fn promtool_finds_nothing_to_lint_in_the_managers_metrics() {
    let text = every_family().render().unwrap();
    let Some(problems) = codalab_wm_core::testing::promtool_problems(&text) else {
        return;
    };
    assert!(problems.is_empty(), "promtool: {problems:?}\n{text}");
}

/// The book's metrics reference (`docs/src/reference/metrics.md`) is generated from the
/// registry the manager serves, every family filled: each metric by the name a query uses
/// (counters with `_total`), its type, labels and help.
#[test]
fn the_metrics_reference_is_the_registry() {
    let text = every_family().render().unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/src/reference/metrics.md"
    );
    codalab_wm_core::testing::check_generated(
        std::path::Path::new(path),
        &metrics_reference(&text),
        "cargo test -p codalab-wm-app --lib metrics",
    );
}

/// The reference page of the metrics in `text` (the OpenMetrics text `/metrics` serves).
fn metrics_reference(text: &str) -> String {
    struct Family {
        name: String,
        kind: String,
        help: String,
        labels: std::collections::BTreeSet<String>,
    }
    let mut families: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            families.push(Family {
                name: name.to_owned(),
                kind: String::new(),
                help: help.trim_end_matches('.').to_owned(),
                labels: Default::default(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            families.last_mut().unwrap().kind = rest.split_once(' ').unwrap().1.to_owned();
        } else if let Some((_, labels)) = line.split_once('{') {
            let labels = labels.split_once('}').unwrap().0;
            let family = families.last_mut().unwrap();
            for pair in labels.split(',').filter(|p| !p.is_empty()) {
                let name = pair.split_once('=').unwrap().0;
                if name != "le" {
                    family.labels.insert(format!("`{name}`"));
                }
            }
        }
    }
    families.sort_by(|a, b| a.name.cmp(&b.name));
    let mut page = String::from(
        "# Metrics\n\n\
         <!-- Generated from the registry by `cargo test -p codalab-wm-app --lib metrics` \
         (UPDATE_GOLDEN=1 rewrites it): do not edit. -->\n\n\
         What `/metrics` serves (OpenMetrics text, on the `--listen` address), every metric of \
         the manager. Gauges describe the last successful tick; counters count since the \
         manager started. The operator's own metrics are on the \
         [Kubernetes](../platforms/kubernetes.md) page. The reason and kind codes of the \
         labels are explained in [Reasons](reasons.md).\n\n\
         | metric | type | labels | meaning |\n|---|---|---|---|\n",
    );
    for family in &families {
        let name = match family.kind.as_str() {
            "counter" => format!("{}_total", family.name),
            _ => family.name.clone(),
        };
        let labels: Vec<&str> = family.labels.iter().map(String::as_str).collect();
        page += &format!(
            "| `{name}` | {} | {} | {} |\n",
            family.kind,
            labels.join(", "),
            family.help.replace('|', "\\|")
        );
    }
    page
}
