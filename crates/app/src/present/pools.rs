//! The pools: one row each, what a worker is and costs, its workers by state, its jobs on the
//! platform, the bundles staged for it, its backoff and its budget.

use super::words::{duration, shape};
use super::{Cell, Column, Look, Row, Section, Span, Table, Tone};
use codalab_wm_core::budget::BudgetStatus;
use codalab_wm_core::checkin::WorkerState;
use codalab_wm_core::estimate::minutes;
use codalab_wm_core::pools::fallback::CapacityState;
use codalab_wm_core::status::{FallbackStatus, PoolStatus, Status};

/// The columns, with what each counts.
const COLUMNS: &[Column] = &[
    column("Pool", "the pool's name and backend"),
    column("Min / max", "workers kept at least / at most"),
    column(
        "Target",
        "workers wanted now (target mode; compat pools have none)",
    ),
    column(
        "Starting",
        "jobs pending, or running and not checked in with the server yet",
    ),
    column("Ready", "workers checked in and idle"),
    column("Busy", "workers checked in and running bundles"),
    column(
        "Vanished",
        "workers that checked in, then left the server's list (a partition, a worker's nap): presumed busy, never stopped",
    ),
    column(
        "Lost",
        "jobs running and never checked in for longer than checkin_timeout: stopped if this manager launched them",
    ),
    column("Pending", "jobs pending on the platform (queued)"),
    column("Active", "jobs running on the platform"),
    column(
        "Withdrawn",
        "pending jobs cancelled before they started because no bundle needed them any more, since the manager started",
    ),
    column(
        "Staged for it",
        "staged bundles assigned to this pool at the last tick",
    ),
    column(
        "Backoff",
        "launches paused after failures; suspended: the same error again and again (its settings), no launches until they are fixed and reloaded",
    ),
    column(
        "Budget (24 h)",
        "worker-hours of the last 24 hours / the limit: a worker counts the larger of its minimum life (idle_seconds, charged when it is launched) and the time its job is active",
    ),
];

const fn column(title: &'static str, tip: &'static str) -> Column {
    Column { title, tip }
}

/// The worker states counted, with their fields.
const STATES: [(WorkerState, &str); 5] = [
    (WorkerState::Starting, "starting"),
    (WorkerState::ReadyIdle, "ready"),
    (WorkerState::Busy, "busy"),
    (WorkerState::Vanished, "vanished"),
    (WorkerState::Lost, "lost"),
];

/// No figure: no decision with a target, or no check-in view of jobs that exist.
const NONE: &str = "–";

/// One row per pool.
pub(super) fn pools(status: &Status) -> Section {
    let rows = status.pools.iter().map(|p| row(p, status)).collect();
    let table = Table {
        groups: vec![
            ("", 3),
            ("Workers, as the server sees them", 5),
            ("Jobs on the platform", 3),
            ("", 3),
        ],
        cards: true,
        ..Table::new("pools", COLUMNS, rows)
    };
    let section = Section::new("pools-heading", "Pools").with_table(table, 0);
    match status.pools.is_empty() {
        true => section.saying(Tone::Muted, "No pool yet (no tick has run)."),
        false => section,
    }
}

fn row(pool: &PoolStatus, status: &Status) -> Row {
    let target = pool.last_decision.as_ref().and_then(|d| d.target);
    let min_max = vec![
        Span::plain(pool.min.to_string()).field("min"),
        Span::plain(" / "),
        Span::plain(pool.max.to_string()).field("max"),
    ];
    let mut cells = vec![
        Cell::spans(about(pool, status.uptime_seconds)).field("name"),
        Cell {
            numeric: true,
            ..Cell::spans(min_max)
        },
        Cell::number(target.map_or(NONE.to_owned(), |t| t.to_string())).field("target"),
    ];
    cells.extend(workers(pool));
    cells.extend([
        Cell::number(pool.pending).field("pending"),
        Cell::number(pool.active).field("active"),
        Cell::number(withdrawn(status, &pool.name)).field("withdrawn"),
        Cell::number(pool.assigned.len()).field("assigned"),
        backoff(pool, status.uptime_seconds),
        budget(status.budgets.iter().find(|b| b.scope == pool.name)),
    ]);
    Row::new(vec![("pool", pool.name.clone())], cells)
}

/// The pool's jobs withdrawn since the manager started (its `stops` counter, `withdrawn`).
fn withdrawn(status: &Status, pool: &str) -> u64 {
    (status.counters.iter())
        .find(|c| c.metric == "stops" && c.pool == pool && c.label == "withdrawn")
        .map_or(0, |c| c.value)
}

/// The name, then "slurm-batch · target · 4 cpus, 0 gpus, 8 GiB", and the pool's price,
/// `spill_after`, cost weight, tag and fallback when set.
fn about(pool: &PoolStatus, now: u64) -> Vec<Span> {
    let (s, backend) = (&pool.shape, &pool.backend);
    let what = format!(
        "{backend} · {} · {}",
        pool.launch_mode,
        shape(s.cpus, s.gpus, s.memory_bytes)
    );
    let mut spans = vec![
        Span::with(Look::Strong, &pool.name),
        Span::line_break(),
        Span::with(Look::Muted, what).field("backend"),
    ];
    let mut extras = Vec::new();
    if let Some(price) = pool.cost_per_hour {
        extras.push(Span::with(Look::Muted, format!("{price} an hour")).field("price"));
    }
    if let Some(spill) = pool.spill_after_seconds {
        let after = format!("spills after {}", minutes(spill));
        extras.push(Span::with(Look::Muted, after).field("spill"));
    }
    if pool.cost != 0.0 {
        let weight = format!("cost weight {}", pool.cost);
        extras.push(Span::with(Look::Muted, weight).field("cost"));
    }
    if let Some(tag) = &pool.tag {
        let only = if pool.tag_exclusive {
            " (exclusive)"
        } else {
            ""
        };
        extras.push(Span::with(Look::Muted, format!("tag {tag}{only}")).field("tag"));
    }
    extras.extend(pool.fallback.as_ref().map(|f| capacity(f, now)));
    for extra in extras {
        spans.push(Span::with(Look::Muted, " · "));
        spans.push(extra);
    }
    spans
}

/// Where the new launches of a pool with a `fallback` go, and why (the tip).
fn capacity(fallback: &FallbackStatus, now: u64) -> Span {
    let to = &fallback.pool;
    let (text, tip) = match &fallback.capacity {
        CapacityState::Own => (format!("fallback {to}"), None),
        CapacityState::Fallback {
            since_seconds,
            retry_at_seconds,
            why,
        } => (
            format!("launches go to {to}"),
            Some(format!(
                "{why}; for {}, one launch tries this pool again in {}",
                duration(now.saturating_sub(*since_seconds)),
                duration(retry_at_seconds.saturating_sub(now))
            )),
        ),
        CapacityState::Retrying { since_seconds } => (
            format!("retrying; the rest go to {to}"),
            Some(format!(
                "one launch tries this pool again (for {}) until its worker checks in",
                duration(now.saturating_sub(*since_seconds))
            )),
        ),
    };
    let span = Span::with(Look::Muted, text).field("capacity");
    match tip {
        Some(tip) => span.tip(tip),
        None => span,
    }
}

/// The workers by state; a dash each when the server's workers are unknown and jobs exist.
fn workers(pool: &PoolStatus) -> impl Iterator<Item = Cell> + '_ {
    let unknown = pool.workers.is_empty() && pool.active + pool.pending > 0;
    STATES.iter().map(move |(state, field)| {
        let count = pool.workers.get(state).copied().unwrap_or(0);
        let cell = match unknown {
            true => Cell::number(NONE),
            false => Cell::number(count),
        };
        let lost = *state == WorkerState::Lost && count > 0 && !unknown;
        cell.field(field)
            .tone(if lost { Tone::Bad } else { Tone::Plain })
    })
}

fn backoff(pool: &PoolStatus, now: u64) -> Cell {
    let failures = pool.health.failures;
    let (tone, text) = match (&pool.suspended, pool.backing_off_until) {
        (Some(suspended), _) => (
            Tone::Bad,
            format!(
                "suspended after {} failures in a row ({}); fix the settings and reload",
                suspended.failures, suspended.error
            ),
        ),
        (None, Some(until)) => (
            Tone::Bad,
            format!(
                "backing off, {} left ({failures} failures)",
                duration(until.saturating_sub(now))
            ),
        ),
        (None, None) if failures > 0 => (Tone::Warning, format!("no ({failures} recent failures)")),
        (None, None) => (Tone::Ok, "no".to_owned()),
    };
    Cell::text(text).field("backoff").tone(tone)
}

fn budget(budget: Option<&BudgetStatus>) -> Cell {
    let (tone, text) = match budget {
        None => (Tone::Muted, "no limit".to_owned()),
        Some(b) => {
            let limit = b
                .limits
                .max_worker_hours_per_day
                .map_or(String::new(), |max| format!(" / {max}"));
            let text = format!("{:.2}{limit} worker-h", b.worker_hours);
            match b.reached {
                Some(_) => (Tone::Bad, format!("{text}: reached")),
                None if !b.limits.is_set() => (Tone::Muted, format!("{text}, no limit")),
                None => (Tone::Ok, text),
            }
        }
    };
    Cell::text(text).field("budget").tone(tone)
}
