//! The health line and the sections after the pools: the bundles waiting with no worker
//! coming, the ones no pool takes, when each is expected to start, the budgets, the recent
//! events and failures.

use super::words::{asks, duration, unmet, utc};
use super::{Cell, Column, Health, Look, Row, Section, Sentence, Span, Table, Tone, titled};
use codalab_wm_core::events::Severity;
use codalab_wm_core::status::Status;
use std::collections::BTreeMap;

/// Unserved bundles listed at most (the rest are counted).
const UNSERVED_ROWS: usize = 50;
/// Start-time estimates listed at most (`/status` has every one).
const ESTIMATE_ROWS: usize = 20;
/// Events listed at most, the newest.
const EVENT_ROWS: usize = 20;

/// Uptime, ticks, the last success, the staged bundles, and the last tick's error.
pub(super) fn health(status: &Status) -> Health {
    let since = match status.started_unix_seconds {
        0 => String::new(),
        unix => format!(" since {}", utc(unix)),
    };
    let last = match status.last_success_seconds {
        Some(at) => format!(
            "last successful tick {} ago (took {:.2} s)",
            duration(status.uptime_seconds.saturating_sub(at)),
            status.last_tick_duration_seconds
        ),
        None => "no successful tick yet".to_owned(),
    };
    let assigned: usize = status.pools.iter().map(|p| p.assigned.len()).sum();
    let staged = vec![
        Span::with(Look::Strong, status.staged.to_string()).field("staged"),
        Span::plain(format!(
            " staged bundles seen ({assigned} assigned and {} unserved among those read)",
            status.unserved.len()
        )),
    ];
    let facts = vec![
        vec![Span::plain(format!(
            "Up {}{since}",
            duration(status.uptime_seconds)
        ))],
        vec![Span::plain(format!("{} ticks", status.ticks))],
        vec![Span::plain(last)],
        staged,
    ];
    Health {
        ticks: status.ticks,
        facts,
        error: (status.last_error.as_ref()).map(|e| format!("The last tick failed: {e}")),
    }
}

/// "This snapshot is 10m 00s old …" when the snapshot is older than 3 refreshes (at least
/// 30 s) at `now_unix_seconds`; nothing for a snapshot that does not say when it was taken.
pub fn stale(status: &Status, now_unix_seconds: u64, refresh_seconds: u64) -> Option<String> {
    let snapshot_unix = status.started_unix_seconds + status.uptime_seconds;
    let age = now_unix_seconds.saturating_sub(snapshot_unix);
    (status.started_unix_seconds > 0 && age > 3 * refresh_seconds.max(10)).then(|| {
        format!(
            "This snapshot is {} old: the manager's loop has not reported since.",
            duration(age)
        )
    })
}

const UNMET_COLUMNS: &[Column] =
    &titled(["Pool", "Bundles", "Asking for", "Why no worker is coming"]);

/// The staged bundles with no worker coming, by pool, class and reason.
pub(super) fn waiting(status: &Status) -> Section {
    let section = Section::new("waiting", "Waiting: staged bundles with no worker coming");
    if status.unmet.is_empty() {
        let mut section = section.saying(
            Tone::Ok,
            "Every staged bundle has a worker coming (or none is staged).",
        );
        section.sentences[0].id = Some("no-unmet");
        return section;
    }
    let rows = status.unmet.iter().map(|demand| {
        let cells = vec![
            Cell::text(demand.pool.as_deref().unwrap_or("(none fits)")),
            Cell::number(demand.bundles).field("bundles"),
            Cell::text(asks(&demand.class)),
            Cell::text(unmet(&demand.reason)),
        ];
        Row::new(vec![("reason", demand.reason.code().to_owned())], cells)
    });
    section.with_table(Table::new("unmet", UNMET_COLUMNS, rows.collect()), 0)
}

const UNSERVED_COLUMNS: &[Column] = &titled(["Bundle", "Why", "Each pool's verdict"]);

/// The bundles no pool takes, one by one, with each pool's verdict (folded on the page).
pub(super) fn unserved(status: &Status) -> Option<Section> {
    let heading = match status.unserved.len() {
        0 => return None,
        1 => "The bundle".to_owned(),
        n => format!("The {n} bundles"),
    };
    let rows = status.unserved.iter().take(UNSERVED_ROWS).map(|bundle| {
        let verdicts: Vec<String> = (bundle.pools.iter())
            .map(|v| format!("{}: {}", v.pool, v.reason))
            .collect();
        let keys = vec![
            ("bundle", bundle.uuid.clone()),
            ("reason", bundle.reason.code().to_owned()),
        ];
        let cells = vec![
            Cell::code(&bundle.uuid),
            Cell::text(bundle.reason.to_string()),
            Cell::text(verdicts.join("; ")),
        ];
        Row::new(keys, cells)
    });
    let table = Table::new("unserved", UNSERVED_COLUMNS, rows.collect());
    let heading =
        format!("{heading} no pool takes this tick, one by one, with each pool's verdict");
    let section = Section {
        folded: true,
        ..Section::new("unserved-details", heading)
    };
    let left_out = status.unserved.len().saturating_sub(UNSERVED_ROWS);
    Some(section.with_table(table, left_out))
}

const ESTIMATE_COLUMNS: &[Column] = &titled(["Bundle", "Expected"]);

/// When the staged bundles read are expected to start, and why: the counts per kind first.
pub(super) fn estimates(status: &Status) -> Option<Section> {
    if status.estimates.is_empty() {
        return None;
    }
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for estimate in &status.estimates {
        *kinds.entry(estimate.estimate.kind()).or_default() += 1;
    }
    let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let rows = status.estimates.iter().take(ESTIMATE_ROWS).map(|estimate| {
        let keys = vec![
            ("bundle", estimate.uuid.clone()),
            ("kind", estimate.estimate.kind().to_owned()),
        ];
        Row::new(
            keys,
            vec![Cell::code(&estimate.uuid), Cell::text(&estimate.text)],
        )
    });
    let table = Table::new("estimate-rows", ESTIMATE_COLUMNS, rows.collect());
    let section = Section {
        note: Some(counts.join(", ")),
        ..Section::new("estimates", "When they start")
    };
    let left_out = status.estimates.len().saturating_sub(ESTIMATE_ROWS);
    Some(section.with_table(table, left_out))
}

const BUDGET_COLUMNS: &[Column] = &titled(["Scope", "Worker-hours", "Cost", "State"]);

/// Each budget's use against its limits.
pub(super) fn budgets(status: &Status) -> Section {
    let section = Section::new("budgets", "Budgets (rolling 24 hours)");
    if status.budgets.is_empty() {
        let spans = vec![
            Span::plain("No budget set ("),
            Span::with(Look::Code, "max_worker_hours_per_day"),
            Span::plain(", "),
            Span::with(Look::Code, "max_cost_per_day"),
            Span::plain(")."),
        ];
        let mut section = section;
        section.sentences.push(Sentence::new(Tone::Muted, spans));
        return section;
    }
    let of = |used: String, max: Option<f64>| match max {
        Some(max) => format!("{used} of {max}"),
        None => used,
    };
    let rows = status.budgets.iter().map(|budget| {
        let limits = &budget.limits;
        let hours = of(
            format!("{:.2}", budget.worker_hours),
            limits.max_worker_hours_per_day,
        );
        let cost = budget.cost.map_or("–".to_owned(), |cost| {
            of(format!("{cost:.2}"), limits.max_cost_per_day)
        });
        let (tone, state) = match (&budget.reached, budget.resumes_at_seconds) {
            (Some(why), Some(at)) => (
                Tone::Bad,
                format!(
                    "reached: {why}; launches resume in {}",
                    duration(at.saturating_sub(status.uptime_seconds))
                ),
            ),
            (Some(why), None) => (Tone::Bad, format!("reached: {why}")),
            (None, _) if !limits.is_set() => (Tone::Ok, "no limit".to_owned()),
            (None, _) => (Tone::Ok, "room left".to_owned()),
        };
        let cells = vec![
            Cell::text(&budget.scope),
            Cell::number(hours),
            Cell::number(cost),
            Cell::text(state).tone(tone),
        ];
        Row::new(vec![("scope", budget.scope.clone())], cells)
    });
    section.with_table(
        Table::new("budget-table", BUDGET_COLUMNS, rows.collect()),
        0,
    )
}

const EVENT_COLUMNS: &[Column] = &titled(["When", "Event", "What"]);

/// The recent events, newest first, warnings marked.
pub(super) fn events(status: &Status) -> Section {
    let section = Section::new(super::CHARTS_BEFORE, "Recent events (newest first)");
    if status.events.is_empty() {
        return section.saying(Tone::Muted, "No events yet.");
    }
    let rows = status.events.iter().rev().take(EVENT_ROWS).map(|event| {
        let ago = duration(status.uptime_seconds.saturating_sub(event.at_seconds));
        let cells = vec![
            Cell::text(format!("{} ({ago} ago)", utc(event.unix_seconds))),
            Cell::code(event.kind.code()),
            Cell::text(&event.message),
        ];
        Row {
            tone: match event.severity {
                Severity::Warning => Tone::Warning,
                Severity::Info => Tone::Info,
            },
            ..Row::new(vec![("event", event.kind.code().to_owned())], cells)
        }
    });
    let table = Table::new("events", EVENT_COLUMNS, rows.collect());
    section.with_table(table, status.events.len().saturating_sub(EVENT_ROWS))
}

const FAILURE_COLUMNS: &[Column] = &titled(["When", "Pool", "Kind", "Class", "Detail"]);

/// The recent failures, newest first.
pub(super) fn failures(status: &Status) -> Option<Section> {
    if status.recent_failures.is_empty() {
        return None;
    }
    let rows = status.recent_failures.iter().rev().map(|failure| {
        let ago = duration(status.uptime_seconds.saturating_sub(failure.at_seconds));
        let cells = vec![
            Cell::text(format!("{ago} ago")),
            Cell::text(&failure.pool),
            Cell::code(failure.kind),
            Cell::code(failure.class.code()),
            Cell::text(&failure.detail),
        ];
        Row {
            tone: Tone::Warning,
            ..Row::new(Vec::new(), cells)
        }
    });
    let table = Table::new("failures", FAILURE_COLUMNS, rows.collect());
    Some(Section::new("failures-heading", "Recent failures (newest first)").with_table(table, 0))
}
