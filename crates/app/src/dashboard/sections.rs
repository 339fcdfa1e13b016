//! The page's sections, each a heading and a table (or a sentence when there is nothing to
//! show). Rows and counts carry stable `id` / `data-*` attributes for tests and scrapers.

use super::Page;
use super::history::{DecisionRecord, History};
use super::utc;
use crate::chart::escape;
use crate::view::{duration, memory, reason_text};
use codalab_wm_core::budget::BudgetStatus;
use codalab_wm_core::checkin::WorkerState;
use codalab_wm_core::events::Severity;
use codalab_wm_core::pools::UnmetReason;
use codalab_wm_core::pools::fallback::CapacityState;
use codalab_wm_core::status::{PoolStatus, Status};
use std::fmt::Write as _;

/// Unserved bundles listed at most (the rest are counted).
const MAX_UNSERVED_ROWS: usize = 50;

/// The title, uptime, ticks, last success, last error, and whether the snapshot is stale.
pub(super) fn health(out: &mut String, status: &Status, page: &Page) {
    let last = match status.last_success_seconds {
        Some(at) => format!(
            "last successful tick {} ago (took {:.2} s)",
            duration(status.uptime_seconds.saturating_sub(at)),
            status.last_tick_duration_seconds
        ),
        None => "no successful tick yet".to_owned(),
    };
    let started = match status.started_unix_seconds {
        0 => String::new(),
        unix => format!(" since {}", utc(unix)),
    };
    let _ = write!(
        out,
        "<h1>cl-worker-manager</h1><p id=\"health\" data-ticks=\"{}\">Up {}{started} · {} ticks · \
         {last} · <b data-field=\"staged\">{}</b> staged bundles seen</p><p class=\"muted\">What \
         the worker manager saw and decided at its last tick. Hover a column's title for what it \
         counts.</p>",
        status.ticks,
        duration(status.uptime_seconds),
        status.ticks,
        status.staged
    );
    if let Some(error) = &status.last_error {
        let _ = write!(
            out,
            "<div class=\"error\" id=\"last-error\">The last tick failed: {}</div>",
            escape(error)
        );
    }
    let snapshot_unix = status.started_unix_seconds + status.uptime_seconds;
    let age = page.now_unix_seconds.saturating_sub(snapshot_unix);
    if status.started_unix_seconds > 0 && age > 3 * page.refresh.as_secs().max(10) {
        let _ = write!(
            out,
            "<div class=\"error\" id=\"stale\">This snapshot is {} old: the manager's loop has \
             not reported since.</div>",
            duration(age)
        );
    }
}

/// Column headers of the pool table, with a tooltip each.
const POOL_COLUMNS: &[(&str, &str)] = &[
    ("Pool", "the pool's name and backend"),
    ("Min / max", "workers kept at least / at most"),
    (
        "Target",
        "workers wanted now (target mode; compat pools have none)",
    ),
    (
        "Starting",
        "jobs pending, or running and not checked in with the server yet",
    ),
    ("Ready", "workers checked in and idle"),
    ("Busy", "workers checked in and running bundles"),
    (
        "Vanished",
        "workers that checked in, then left the server's list (a partition, a worker's nap): presumed busy, never stopped",
    ),
    (
        "Lost",
        "jobs running and never checked in for longer than checkin_timeout: stopped if this manager launched them",
    ),
    ("Pending", "jobs pending on the platform (queued)"),
    ("Active", "jobs running on the platform"),
    (
        "Staged for it",
        "staged bundles assigned to this pool at the last tick",
    ),
    ("Backoff", "launches paused after failures"),
    (
        "Budget (24 h)",
        "worker-hours used in the last 24 hours / the limit",
    ),
];

/// One row per pool.
pub(super) fn pools(out: &mut String, status: &Status) {
    out.push_str(
        "<h2 id=\"pools-heading\">Pools</h2><table id=\"pools\"><tr><th colspan=\"3\"></th>\
         <th colspan=\"5\" class=\"group\">Workers, as the server sees them</th>\
         <th colspan=\"2\" class=\"group\">Jobs on the platform</th><th colspan=\"3\"></th></tr><tr>",
    );
    for (name, tip) in POOL_COLUMNS {
        let _ = write!(out, "<th title=\"{tip}\">{name}</th>");
    }
    out.push_str("</tr>");
    for pool in &status.pools {
        pool_row(out, pool, status);
    }
    out.push_str("</table>");
    if status.pools.is_empty() {
        out.push_str("<p class=\"muted\">No pool yet (no tick has run).</p>");
    }
}

fn pool_row(out: &mut String, pool: &PoolStatus, status: &Status) {
    let name = escape(&pool.name);
    let target = pool.last_decision.as_ref().and_then(|d| d.target);
    let _ = write!(
        out,
        "<tr data-pool=\"{name}\"><td data-field=\"name\"><b>{name}</b><br><span class=\"muted\" \
         data-field=\"backend\">{} · {} · {} cpus, {} gpus, {}{}</span></td>\
         <td class=\"n\"><span data-field=\"min\">{}</span> / <span data-field=\"max\">{}</span></td>\
         <td class=\"n\" data-field=\"target\">{}</td>",
        escape(&pool.backend),
        pool.launch_mode,
        pool.shape.cpus,
        pool.shape.gpus,
        memory(pool.shape.memory_bytes),
        price(pool),
        pool.min,
        pool.max,
        target.map_or("–".to_owned(), |t| t.to_string())
    );
    for (state, field) in WorkerState::ALL
        .iter()
        .zip(["starting", "ready", "busy", "vanished", "lost"])
    {
        // No check-in view of jobs that exist (the server's worker list unknown): a dash.
        let unknown = pool.workers.is_empty() && pool.active + pool.pending > 0;
        let count = match unknown {
            true => "–".to_owned(),
            false => pool.workers.get(state).copied().unwrap_or(0).to_string(),
        };
        let class = if *state == WorkerState::Lost && count != "0" && count != "–" {
            "n bad"
        } else {
            "n"
        };
        let _ = write!(
            out,
            "<td class=\"{class}\" data-field=\"{field}\">{count}</td>"
        );
    }
    let _ = write!(
        out,
        "<td class=\"n\" data-field=\"pending\">{}</td><td class=\"n\" data-field=\"active\">{}</td>\
         <td class=\"n\" data-field=\"assigned\">{}</td>",
        pool.pending,
        pool.active,
        pool.assigned.len()
    );
    backoff_cell(out, pool, status.uptime_seconds);
    let budget = status.budgets.iter().find(|b| b.scope == pool.name);
    budget_cell(out, budget);
    out.push_str("</tr>");
}

/// " · 0.4 an hour · spills after 10 min · launches go to gpu-standard": the pool's price,
/// `spill_after` and where its launches go when it has a `fallback`, when set.
fn price(pool: &PoolStatus) -> String {
    let mut out = String::new();
    if let Some(price) = pool.cost_per_hour {
        let _ = write!(out, " · <span data-field=\"price\">{price} an hour</span>");
    }
    if let Some(spill) = pool.spill_after_seconds {
        let after = codalab_wm_core::estimate::minutes(spill);
        let _ = write!(
            out,
            " · <span data-field=\"spill\">spills after {after}</span>"
        );
    }
    if let Some(fallback) = &pool.fallback {
        let to = escape(&fallback.pool);
        let (text, why) = match &fallback.capacity {
            CapacityState::Own => (format!("fallback {to}"), String::new()),
            CapacityState::Fallback { why, .. } => (format!("launches go to {to}"), escape(why)),
            CapacityState::Retrying { .. } => (
                format!("retrying; the rest go to {to}"),
                String::from("one launch tries this pool again"),
            ),
        };
        let _ = write!(
            out,
            " · <span data-field=\"capacity\" title=\"{why}\">{text}</span>"
        );
    }
    out
}

fn backoff_cell(out: &mut String, pool: &PoolStatus, now: u64) {
    let failures = pool.health.failures;
    let (class, text) = match pool.backing_off_until {
        Some(until) => (
            "bad",
            format!(
                "backing off, {} left ({failures} failures)",
                duration(until.saturating_sub(now))
            ),
        ),
        None if failures > 0 => ("warning", format!("no ({failures} recent failures)")),
        None => ("ok", "no".to_owned()),
    };
    let _ = write!(
        out,
        "<td class=\"{class}\" data-field=\"backoff\">{text}</td>"
    );
}

fn budget_cell(out: &mut String, budget: Option<&BudgetStatus>) {
    let (class, text) = match budget {
        None => ("muted", "no limit".to_owned()),
        Some(b) => {
            let limit = b
                .limits
                .max_worker_hours_per_day
                .map_or(String::new(), |max| format!(" / {max}"));
            let text = format!("{:.2}{limit} worker-h", b.worker_hours);
            match b.reached {
                Some(_) => ("bad", format!("{text}: reached")),
                None if !b.limits.is_set() => ("muted", format!("{text}, no limit")),
                None => ("ok", text),
            }
        }
    };
    let _ = write!(
        out,
        "<td class=\"{class}\" data-field=\"budget\">{text}</td>"
    );
}

/// The staged bundles with no worker coming, by pool, class and reason; then the unserved.
pub(super) fn waiting(out: &mut String, status: &Status) {
    out.push_str("<h2 id=\"waiting\">Waiting: staged bundles with no worker coming</h2>");
    if status.unmet.is_empty() {
        out.push_str(
            "<p class=\"ok\" id=\"no-unmet\">Every staged bundle has a worker coming (or none \
             is staged).</p>",
        );
    } else {
        out.push_str(
            "<table id=\"unmet\"><tr><th>Pool</th><th>Bundles</th><th>Asking for</th>\
             <th>Why no worker is coming</th></tr>",
        );
        for unmet in &status.unmet {
            let class = &unmet.class;
            let mut asks = format!(
                "{} cpus, {} gpus, {}",
                class.cpus,
                class.gpus,
                memory(class.memory_bytes)
            );
            if !class.queue.is_empty() {
                let _ = write!(asks, ", queue {}", class.queue);
            }
            let pool = unmet.pool.as_deref().unwrap_or("(none fits)");
            let _ = write!(
                out,
                "<tr data-reason=\"{}\"><td>{}</td><td class=\"n\" data-field=\"bundles\">{}</td>\
                 <td>{}</td><td>{}</td></tr>",
                unmet.reason.code(),
                escape(pool),
                unmet.bundles,
                escape(&asks),
                escape(&unmet_words(&unmet.reason))
            );
        }
        out.push_str("</table>");
    }
    unserved(out, status);
}

/// Why bundles wait, in words (the code is the row's `data-reason`).
pub(super) fn unmet_words(reason: &UnmetReason) -> String {
    match reason {
        UnmetReason::NoFittingPool { detail } => format!("no pool fits them ({detail})"),
        UnmetReason::MaxReached { jobs, max } if *jobs >= *max as usize => {
            format!("the pool is at its max ({jobs} jobs, max {max})")
        }
        UnmetReason::MaxReached { jobs, max } => format!(
            "beyond the pool's max: its room for {} more (jobs: {jobs}, max {max}) goes to bundles ahead",
            *max as usize - jobs
        ),
        UnmetReason::BackingOff { failures, .. } => {
            format!("the pool backs off after {failures} failed launches")
        }
        UnmetReason::Paced { by } => format!("launches are paced ({by})"),
        UnmetReason::WaitingForStarting { starting } => {
            format!("a worker is on its way: {starting} starting in the pool")
        }
        UnmetReason::QuotaExhausted { owner } => {
            format!("their owner (user {owner}) has no parallel_run_quota left for shared workers")
        }
        UnmetReason::OwnWorker { owner } => {
            format!("their owner (user {owner}) is out of quota; their own worker will take them")
        }
        UnmetReason::NotOurs { owner } => {
            format!("owned by user {owner}: the manager's workers are private to its own user")
        }
        UnmetReason::PoolUnavailable { detail, .. } => detail.clone(),
        #[allow(unreachable_patterns)]
        other => reason_text(other),
    }
}

fn unserved(out: &mut String, status: &Status) {
    if status.unserved.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<details id=\"unserved-details\"><summary>{} no pool takes this tick, one by one, \
         with each pool's verdict</summary><table id=\"unserved\"><tr><th>Bundle</th>\
         <th>Why</th><th>Each pool's verdict</th></tr>",
        match status.unserved.len() {
            1 => "The bundle".to_owned(),
            n => format!("The {n} bundles"),
        }
    );
    for bundle in status.unserved.iter().take(MAX_UNSERVED_ROWS) {
        let verdicts: Vec<String> = bundle
            .pools
            .iter()
            .map(|v| format!("{}: {}", v.pool, v.reason))
            .collect();
        let _ = write!(
            out,
            "<tr data-bundle=\"{0}\" data-reason=\"{1}\"><td><code>{0}</code></td><td>{2}</td>\
             <td>{3}</td></tr>",
            escape(&bundle.uuid),
            bundle.reason.code(),
            escape(&bundle.reason.to_string()),
            escape(&verdicts.join("; "))
        );
    }
    out.push_str("</table>");
    if let Some(more) = status.unserved.len().checked_sub(MAX_UNSERVED_ROWS)
        && more > 0
    {
        let _ = write!(out, "<p class=\"muted\">… and {more} more.</p>");
    }
    out.push_str("</details>");
}

/// Each budget's use against its limits.
pub(super) fn budgets(out: &mut String, status: &Status) {
    out.push_str("<h2 id=\"budgets\">Budgets (rolling 24 hours)</h2>");
    if status.budgets.is_empty() {
        out.push_str(
            "<p class=\"muted\">No budget set (<code>max_worker_hours_per_day</code>, \
             <code>max_cost_per_day</code>).</p>",
        );
        return;
    }
    out.push_str(
        "<table id=\"budget-table\"><tr><th>Scope</th><th>Worker-hours</th><th>Cost</th>\
         <th>State</th></tr>",
    );
    for budget in &status.budgets {
        let of = |used: String, max: Option<f64>| match max {
            Some(max) => format!("{used} of {max}"),
            None => used,
        };
        let hours = of(
            format!("{:.2}", budget.worker_hours),
            budget.limits.max_worker_hours_per_day,
        );
        let cost = match budget.cost {
            Some(cost) => of(format!("{cost:.2}"), budget.limits.max_cost_per_day),
            None => "–".to_owned(),
        };
        let state = match (&budget.reached, budget.resumes_at_seconds) {
            (Some(why), Some(at)) => format!(
                "reached: {why}; launches resume in {}",
                duration(at.saturating_sub(status.uptime_seconds))
            ),
            (Some(why), None) => format!("reached: {why}"),
            (None, _) if !budget.limits.is_set() => "no limit".to_owned(),
            (None, _) => "room left".to_owned(),
        };
        let class = if budget.reached.is_some() {
            "bad"
        } else {
            "ok"
        };
        let _ = write!(
            out,
            "<tr data-scope=\"{}\"><td>{}</td><td class=\"n\">{hours}</td><td class=\"n\">{cost}\
             </td><td class=\"{class}\">{}</td></tr>",
            escape(&budget.scope),
            escape(&budget.scope),
            escape(&state)
        );
    }
    out.push_str("</table>");
}

/// The last decisions, newest first.
pub(super) fn decisions(out: &mut String, history: &History, status: &Status) {
    out.push_str("<h2 id=\"decisions-heading\">Last decisions (newest first)</h2>");
    if history.decisions().len() == 0 {
        out.push_str("<p class=\"muted\">None yet.</p>");
        return;
    }
    out.push_str(
        "<table id=\"decisions\"><tr><th>When</th><th>Pool</th><th>Launch</th><th>Stop</th>\
         <th>Why</th></tr>",
    );
    for record in history.decisions().rev() {
        let when = when(record, status);
        let reasons: Vec<String> = record
            .reasons
            .iter()
            .map(|(code, text)| format!("<code>{code}</code> {}", escape(text)))
            .collect();
        let _ = write!(
            out,
            "<tr data-pool=\"{}\"><td>{when}</td><td>{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td data-field=\"reasons\">{}</td></tr>",
            escape(&record.pool),
            escape(&record.pool),
            record.launches,
            record.stops,
            reasons.join("<br>")
        );
    }
    out.push_str("</table>");
}

/// `since 3m 02s ago (current)` for a decision the last tick still made, `7m 31s ago, for
/// 21s` for one held over several ticks, `9m 07s ago` for one tick's.
fn when(record: &DecisionRecord, status: &Status) -> String {
    let ago = duration(status.uptime_seconds.saturating_sub(record.since_seconds));
    let current = status
        .last_success_seconds
        .is_some_and(|at| record.last_seconds >= at);
    match record.last_seconds.saturating_sub(record.since_seconds) {
        _ if current && record.last_seconds > record.since_seconds => {
            format!("since {ago} ago (current)")
        }
        0 => format!("{ago} ago"),
        held => format!("{ago} ago, for {}", duration(held)),
    }
}

/// The recent events, newest first, warnings highlighted.
pub(super) fn events(out: &mut String, status: &Status) {
    out.push_str("<h2 id=\"events-heading\">Recent events (newest first)</h2>");
    if status.events.is_empty() {
        out.push_str("<p class=\"muted\">No events yet.</p>");
        return;
    }
    out.push_str("<table id=\"events\"><tr><th>When</th><th>Event</th><th>What</th></tr>");
    for event in status.events.iter().rev() {
        let class = match event.severity {
            Severity::Warning => "warning",
            Severity::Info => "info",
        };
        let ago = duration(status.uptime_seconds.saturating_sub(event.at_seconds));
        let _ = write!(
            out,
            "<tr class=\"{class}\" data-event=\"{}\"><td>{} ({ago} ago)</td><td><code>{}</code>\
             </td><td>{}</td></tr>",
            event.kind.code(),
            utc(event.unix_seconds),
            event.kind.code(),
            escape(&event.message)
        );
    }
    out.push_str("</table>");
}

/// The recent failures, newest first.
pub(super) fn failures(out: &mut String, status: &Status) {
    if status.recent_failures.is_empty() {
        return;
    }
    out.push_str(
        "<h2 id=\"failures-heading\">Recent failures (newest first)</h2><table id=\"failures\">\
         <tr><th>When</th><th>Pool</th><th>Kind</th><th>Detail</th></tr>",
    );
    for failure in status.recent_failures.iter().rev() {
        let _ = write!(
            out,
            "<tr class=\"warning\"><td>{} ago</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            duration(status.uptime_seconds.saturating_sub(failure.at_seconds)),
            escape(&failure.pool),
            failure.kind,
            escape(&failure.detail)
        );
    }
    out.push_str("</table>");
}
