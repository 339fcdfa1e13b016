//! The compact text view of a status snapshot, as `cl-worker-manager status` prints it (like
//! `ray status`).
//!
//! The view is rendered from the JSON document `/status` serves (not from [`Status`]), so
//! that it shows what any manager version serves, and a snapshot read from a running manager
//! and one from a tick run here cannot drift apart.

#[cfg(doc)]
use codalab_wm_core::status::Status;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::fmt::Write as _;

/// The parts of the `/status` document the view shows.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StatusView {
    uptime_seconds: u64,
    ticks: u64,
    last_error: Option<String>,
    last_success_seconds: Option<u64>,
    staged: usize,
    pools: Vec<PoolView>,
    unserved: Vec<UnservedView>,
    unmet: Vec<UnmetView>,
    recent_failures: Vec<FailureView>,
    budgets: Vec<BudgetView>,
    events: Vec<EventView>,
    estimates: Vec<EstimateView>,
}

/// Events the view shows, the newest last.
const EVENTS_SHOWN: usize = 10;

/// Start-time estimates the view shows (`/status` has every one).
const ESTIMATES_SHOWN: usize = 10;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EstimateView {
    uuid: String,
    kind: String,
    text: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FallbackView {
    pool: String,
    capacity: CapacityView,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CapacityView {
    state: String,
    since_seconds: u64,
    retry_at_seconds: Option<u64>,
    why: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct BudgetView {
    scope: String,
    worker_hours: f64,
    cost: Option<f64>,
    max_worker_hours_per_day: Option<f64>,
    max_cost_per_day: Option<f64>,
    reached: Option<String>,
    resumes_at_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EventView {
    at_seconds: u64,
    severity: String,
    message: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PoolView {
    name: String,
    backend: String,
    launch_mode: String,
    shape: ShapeView,
    min: u32,
    max: u32,
    tag: Option<String>,
    tag_exclusive: bool,
    cost: f64,
    cost_per_hour: Option<f64>,
    spill_after_seconds: Option<u64>,
    fallback: Option<FallbackView>,
    active: usize,
    pending: usize,
    failed: usize,
    stopping: usize,
    health: HealthView,
    backing_off_until: Option<u64>,
    last_decision: Option<DecisionView>,
    assigned: Vec<String>,
    /// Jobs by check-in state (`starting`, `ready_idle`, `busy`, `vanished`, `lost`).
    workers: std::collections::BTreeMap<String, usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ShapeView {
    cpus: u32,
    gpus: u32,
    memory_bytes: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct HealthView {
    failures: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DecisionView {
    launches: u32,
    stops: Vec<String>,
    target: Option<u32>,
    demand: usize,
    reasons: Vec<Map<String, Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UnservedView {
    uuid: String,
    pools: Vec<Map<String, Value>>,
    /// `reason` and its fields.
    #[serde(flatten)]
    reason: Map<String, Value>,
}

/// Bundles of one class with no worker coming, and why.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UnmetView {
    pool: Option<String>,
    class: ClassView,
    bundles: usize,
    /// `reason` and its fields.
    #[serde(flatten)]
    reason: Map<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ClassView {
    cpus: u32,
    gpus: u32,
    memory_bytes: u64,
    queue: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FailureView {
    pool: String,
    at_seconds: u64,
    kind: String,
    detail: String,
}

/// The compact text view.
pub fn render(status: &StatusView) -> String {
    let mut out = String::new();
    let last = match status.last_success_seconds {
        Some(at) => format!(
            "last successful tick {} s ago",
            status.uptime_seconds.saturating_sub(at)
        ),
        None => "no successful tick yet".to_owned(),
    };
    let _ = writeln!(
        out,
        "cl-worker-manager: up {}, {} ticks, {last}",
        duration(status.uptime_seconds),
        status.ticks
    );
    if let Some(error) = &status.last_error {
        let _ = writeln!(out, "last tick failed: {error}");
    }
    let assigned: usize = status.pools.iter().map(|p| p.assigned.len()).sum();
    let _ = writeln!(
        out,
        "staged bundles: {} ({assigned} assigned and {} unserved among those read)",
        status.staged,
        status.unserved.len()
    );
    for pool in &status.pools {
        render_pool(&mut out, pool, status.uptime_seconds);
    }
    if !status.unserved.is_empty() {
        let _ = writeln!(out, "\nunserved bundles:");
        for bundle in &status.unserved {
            let verdicts: Vec<String> = bundle
                .pools
                .iter()
                .map(|v| {
                    let pool = v.get("pool").and_then(Value::as_str).unwrap_or("?");
                    format!("{pool}: {}", reason(v))
                })
                .collect();
            let _ = write!(out, "  {}  {}", bundle.uuid, reason(&bundle.reason));
            if !verdicts.is_empty() {
                let _ = write!(out, " ({})", verdicts.join("; "));
            }
            out.push('\n');
        }
    }
    render_waiting(&mut out, &status.unmet);
    render_estimates(&mut out, &status.estimates);
    render_budgets(&mut out, &status.budgets, status.uptime_seconds);
    render_events(&mut out, &status.events);
    if !status.recent_failures.is_empty() {
        let _ = writeln!(out, "\nrecent failures:");
        for failure in &status.recent_failures {
            let _ = writeln!(
                out,
                "  at {:>6}  {}  {}: {}",
                duration(failure.at_seconds),
                failure.pool,
                failure.kind,
                failure.detail
            );
        }
    }
    out
}

fn render_pool(out: &mut String, pool: &PoolView, now: u64) {
    let shape = &pool.shape;
    let mut limits = format!("min {}, max {}, cost {}", pool.min, pool.max, pool.cost);
    if let Some(price) = pool.cost_per_hour {
        let _ = write!(limits, ", cost_per_hour {price}");
    }
    if let Some(spill) = pool.spill_after_seconds {
        let _ = write!(limits, ", spill_after {spill} s");
    }
    if let Some(tag) = &pool.tag {
        let exclusive = if pool.tag_exclusive {
            " (exclusive)"
        } else {
            ""
        };
        let _ = write!(limits, ", tag {tag}{exclusive}");
    }
    let _ = writeln!(
        out,
        "\npool {} ({}, {}): {} cpus, {} gpus, {} per worker; {limits}",
        pool.name,
        pool.backend,
        pool.launch_mode,
        shape.cpus,
        shape.gpus,
        memory(shape.memory_bytes)
    );
    let _ = writeln!(
        out,
        "  workers   {} active, {} pending, {} failed, {} stopping",
        pool.active, pool.pending, pool.failed, pool.stopping
    );
    let backoff = match pool.backing_off_until {
        Some(until) => format!(
            "backing off for {} more s after {} failures",
            until.saturating_sub(now),
            pool.health.failures
        ),
        None if pool.health.failures > 0 => {
            format!("none ({} recent failures)", pool.health.failures)
        }
        None => "none".to_owned(),
    };
    if !pool.workers.is_empty() {
        let count = |state: &str| pool.workers.get(state).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "  check-in  {} starting, {} ready idle, {} busy, {} vanished, {} lost",
            count("starting"),
            count("ready_idle"),
            count("busy"),
            count("vanished"),
            count("lost")
        );
    }
    let _ = writeln!(out, "  backoff   {backoff}");
    if let Some(fallback) = &pool.fallback {
        let _ = writeln!(out, "  capacity  {}", capacity(fallback, now));
    }
    let decision = match &pool.last_decision {
        Some(d) => {
            let mut head = format!("launch {}", d.launches);
            if !d.stops.is_empty() {
                let _ = write!(head, ", stop {}", d.stops.join(" "));
            }
            if let Some(target) = d.target {
                let _ = write!(head, " (target {target}, demand {})", d.demand);
            } else {
                let _ = write!(head, " (demand {})", d.demand);
            }
            let reasons: Vec<String> = d.reasons.iter().map(reason).collect();
            format!("{head}: {}", reasons.join("; "))
        }
        None => "none yet".to_owned(),
    };
    let _ = writeln!(out, "  decision  {decision}");
    let _ = writeln!(out, "  bundles   {} assigned", pool.assigned.len());
}

/// Where a pool with a `fallback` takes its new launches, in words.
fn capacity(fallback: &FallbackView, now: u64) -> String {
    let (to, state) = (&fallback.pool, &fallback.capacity);
    match state.state.as_str() {
        "fallback" => format!(
            "new launches go to {to} (for {} s; one tries this pool again in {} s): {}",
            now.saturating_sub(state.since_seconds),
            state.retry_at_seconds.unwrap_or(now).saturating_sub(now),
            state.why.as_deref().unwrap_or("its capacity failed")
        ),
        "retrying" => format!(
            "one launch tries this pool again (for {} s); the rest go to {to} until it checks in",
            now.saturating_sub(state.since_seconds)
        ),
        _ => format!("its own (fallback: {to})"),
    }
}

/// Worker-hours (and cost) of the last 24 hours; each budget set, and whether it is used up.
fn render_budgets(out: &mut String, budgets: &[BudgetView], now: u64) {
    let Some(all) = budgets.first() else {
        return;
    };
    let limited =
        |b: &&BudgetView| b.max_worker_hours_per_day.is_some() || b.max_cost_per_day.is_some();
    if !budgets.iter().any(|b| limited(&b)) {
        let _ = writeln!(
            out,
            "
worker-hours in the last 24 h: {:.1} (no budget set)",
            all.worker_hours
        );
        return;
    }
    let _ = writeln!(
        out,
        "
budgets (last 24 h):"
    );
    for budget in budgets.iter().filter(limited) {
        let mut line = format!(
            "  {}: {:.1} worker-hours",
            budget.scope, budget.worker_hours
        );
        if let Some(max) = budget.max_worker_hours_per_day {
            let _ = write!(line, " of {max}");
        }
        match (budget.cost, budget.max_cost_per_day) {
            (Some(cost), Some(max)) => {
                let _ = write!(line, ", cost {cost:.2} of {max}");
            }
            (Some(cost), None) => {
                let _ = write!(line, ", cost {cost:.2}");
            }
            _ => {}
        }
        if budget.reached.is_some() {
            let resumes = budget.resumes_at_seconds.map_or_else(String::new, |at| {
                format!("; resumes in {}", duration(at.saturating_sub(now)))
            });
            let _ = write!(line, "  REACHED: no launches{resumes}");
        }
        let _ = writeln!(out, "{line}");
    }
}

/// The last [`EVENTS_SHOWN`] events.
fn render_events(out: &mut String, events: &[EventView]) {
    if events.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "
recent events:"
    );
    for event in &events[events.len().saturating_sub(EVENTS_SHOWN)..] {
        let mark = if event.severity == "warning" {
            "!"
        } else {
            " "
        };
        let _ = writeln!(
            out,
            "  at {:>6} {mark} {}",
            duration(event.at_seconds),
            event.message
        );
    }
}

/// When the staged bundles read are expected to start: a count per kind, then the first few.
fn render_estimates(out: &mut String, estimates: &[EstimateView]) {
    if estimates.is_empty() {
        return;
    }
    let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
    for estimate in estimates {
        *kinds.entry(estimate.kind.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let _ = writeln!(
        out,
        "
expected to start ({}):",
        counts.join(", ")
    );
    for estimate in estimates.iter().take(ESTIMATES_SHOWN) {
        let _ = writeln!(out, "  {}  {}", estimate.uuid, estimate.text);
    }
    if estimates.len() > ESTIMATES_SHOWN {
        let more = estimates.len() - ESTIMATES_SHOWN;
        let _ = writeln!(out, "  … and {more} more (GET /status lists every one)");
    }
}

/// The "waiting" table: staged bundles with no worker coming, per pool and bundle class.
fn render_waiting(out: &mut String, unmet: &[UnmetView]) {
    if unmet.is_empty() {
        return;
    }
    let rows: Vec<[String; 4]> = unmet
        .iter()
        .map(|u| {
            let class = &u.class;
            let mut asks = format!(
                "{} cpus, {} gpus, {}",
                class.cpus,
                class.gpus,
                memory(class.memory_bytes)
            );
            if !class.queue.is_empty() {
                let _ = write!(asks, ", queue {}", class.queue);
            }
            let pool = u.pool.clone().unwrap_or_else(|| "-".to_owned());
            [pool, u.bundles.to_string(), asks, reason(&u.reason)]
        })
        .collect();
    let header = ["pool", "bundles", "asking", "why no worker is coming"].map(str::to_owned);
    let widths: Vec<usize> = (0..3)
        .map(|i| {
            rows.iter()
                .chain([&header])
                .map(|r| r[i].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let _ = writeln!(out, "\nwaiting:");
    for row in [&header].into_iter().chain(&rows) {
        let _ = writeln!(
            out,
            "  {:<w0$}  {:>w1$}  {:<w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
    }
}

/// A serialisable reason (tagged `reason`) as [`reason`] words it (the dashboard's).
pub(crate) fn reason_text<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::Object(object)) => reason(&object),
        _ => "?".to_owned(),
    }
}

/// A reason object (`{"reason": "max_reached", "jobs": 3, "max": 3}`) as
/// `max_reached (jobs=3, max=3)`; a `detail` or `error` field follows a colon.
fn reason(object: &Map<String, Value>) -> String {
    let code = object.get("reason").and_then(Value::as_str).unwrap_or("?");
    let mut fields = Vec::new();
    let mut text = None;
    for (key, value) in object {
        match (key.as_str(), value) {
            ("reason" | "pool", _) => {}
            ("detail" | "error", Value::String(s)) => text = Some(s.clone()),
            (_, Value::String(s)) => fields.push(format!("{key}={s}")),
            _ => fields.push(format!("{key}={value}")),
        }
    }
    let mut out = code.to_owned();
    if !fields.is_empty() {
        let _ = write!(out, " ({})", fields.join(", "));
    }
    if let Some(text) = text {
        let _ = write!(out, ": {text}");
    }
    out
}

/// `3h 02m`, `5m 07s`, `42s`.
pub(crate) fn duration(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m {s:02}s"),
        _ => format!("{h}h {m:02}m"),
    }
}

/// `8 GiB`, `512 MiB`, `1.5 GiB`.
pub(crate) fn memory(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes >= GIB {
        let gib = bytes as f64 / GIB as f64;
        if bytes.is_multiple_of(GIB) {
            format!("{} GiB", bytes / GIB)
        } else {
            format!("{gib:.1} GiB")
        }
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_memory_and_reasons_read_compactly() {
        let durations = [(42, "42s"), (307, "5m 07s"), (10_920, "3h 02m")];
        for (seconds, text) in durations {
            assert_eq!(duration(seconds), text);
        }
        let sizes = [
            (8 << 30, "8 GiB"),
            (512 << 20, "512 MiB"),
            (3 << 29, "1.5 GiB"),
        ];
        for (bytes, text) in sizes {
            assert_eq!(memory(bytes), text);
        }
        let object = |value: Value| value.as_object().cloned().unwrap();
        let reasons = [
            (
                object(serde_json::json!({"reason": "max_reached", "jobs": 3, "max": 3})),
                "max_reached (jobs=3, max=3)",
            ),
            (
                object(
                    serde_json::json!({"reason": "launch_failed", "pool": "cpu", "error": "no quota", "tag": "gpu"}),
                ),
                "launch_failed (tag=gpu): no quota",
            ),
            (object(serde_json::json!({})), "?"),
        ];
        for (object, text) in reasons {
            assert_eq!(reason(&object), text);
        }
    }

    #[test]
    fn budgets_and_events_are_shown_with_what_is_used_up() {
        let view: StatusView = serde_json::from_value(serde_json::json!({
            "uptime_seconds": 3600,
            "budgets": [
                {"scope": "all pools", "worker_hours": 30.25, "max_worker_hours_per_day": null},
                {"scope": "gpu", "worker_hours": 24.0, "cost": 48.0, "max_worker_hours_per_day": 24.0,
                 "max_cost_per_day": 50.0, "reached": "24.0 of 24 worker-hours", "resumes_at_seconds": 7260},
                {"scope": "cpu", "worker_hours": 6.25}
            ],
            "events": [
                {"at_seconds": 61, "severity": "info", "message": "pool cpu: worker launched (job 7)"},
                {"at_seconds": 3599, "severity": "warning", "message": "budget of gpu reached"}
            ]
        }))
        .unwrap();
        let text = render(&view);
        for line in [
            "budgets (last 24 h):\n  gpu: 24.0 worker-hours of 24, cost 48.00 of 50  REACHED: no launches; resumes in 1h 01m\n",
            "recent events:\n  at 1m 01s   pool cpu: worker launched (job 7)\n  at 59m 59s ! budget of gpu reached\n",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
        assert!(!text.contains("  cpu: "), "no budget set for cpu: {text}");
        let unlimited: StatusView = serde_json::from_value(serde_json::json!({
            "budgets": [{"scope": "all pools", "worker_hours": 2.5}]
        }))
        .unwrap();
        assert!(render(&unlimited).contains("worker-hours in the last 24 h: 2.5 (no budget set)"));
    }

    #[test]
    fn an_empty_document_renders_a_manager_without_ticks() {
        let view: StatusView =
            serde_json::from_value(serde_json::json!({"uptime_seconds": 5})).unwrap();
        assert_eq!(
            render(&view),
            "cl-worker-manager: up 5s, 0 ticks, no successful tick yet\n\
             staged bundles: 0 (0 assigned and 0 unserved among those read)\n"
        );
    }
}
