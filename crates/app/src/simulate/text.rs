//! A simulation's report as an aligned text table: the run, then one row per pool and a total.

use codalab_wm_core::simulate::{PoolReport, SimReport};
use std::fmt::Write as _;

/// The report as an aligned text table (`simulate`'s output).
pub fn text(report: &SimReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "simulated {} ({} ticks of {}s), seed {}",
        human(report.simulated_seconds),
        report.ticks,
        report.sleep_seconds,
        report.seed
    );
    out.push_str(&bundles_line(report));
    out.push('\n');
    let mut rows: Vec<Vec<String>> = vec![COLUMNS.iter().map(|c| c.header.to_owned()).collect()];
    for pool in &report.pools {
        rows.push(COLUMNS.iter().map(|c| c.cell(pool)).collect());
    }
    rows.push(COLUMNS.iter().map(|c| c.total(report)).collect());
    out.push_str(&table(&rows));
    for pool in &report.pools {
        let _ = writeln!(out, "  {}: {}", pool.name, pool.shape);
    }
    out.push_str(&lost_runs(report));
    out.push_str(&restaged_runs(report));
    out.push_str(&costs(report));
    out.push_str(&estimates(report));
    out
}

/// A column of the pools table: its header, a pool's cell and the total row's.
struct Column {
    header: &'static str,
    cell: Cell,
    total: Total,
}

/// A pool's cell.
enum Cell {
    /// A count, summed by [`Total::Sum`].
    Count(fn(&PoolReport) -> u64),
    Text(fn(&PoolReport) -> String),
}

/// The total row's cell.
enum Total {
    Blank,
    /// The pools' counts added up.
    Sum,
    /// A figure of the whole run.
    Run(fn(&SimReport) -> String),
}

impl Column {
    fn cell(&self, pool: &PoolReport) -> String {
        match self.cell {
            Cell::Count(count) => count(pool).to_string(),
            Cell::Text(text) => text(pool),
        }
    }

    fn total(&self, report: &SimReport) -> String {
        match (&self.total, &self.cell) {
            (Total::Sum, Cell::Count(count)) => {
                report.pools.iter().map(count).sum::<u64>().to_string()
            }
            (Total::Run(figure), _) => figure(report),
            _ => String::new(),
        }
    }
}

const fn count(header: &'static str, count: fn(&PoolReport) -> u64) -> Column {
    Column {
        header,
        cell: Cell::Count(count),
        total: Total::Sum,
    }
}

const fn shown(header: &'static str, text: fn(&PoolReport) -> String, total: Total) -> Column {
    Column {
        header,
        cell: Cell::Text(text),
        total,
    }
}

/// Worker-hours and busy hours of every pool.
fn hours(report: &SimReport) -> (f64, f64) {
    let sum = |f: fn(&PoolReport) -> f64| report.pools.iter().map(f).sum::<f64>();
    (sum(|p| p.worker_hours), sum(|p| p.busy_hours))
}

/// The pools table, left to right.
const COLUMNS: &[Column] = &[
    shown("pool", |p| p.name.clone(), Total::Run(|_| "total".into())),
    shown("mode", |p| p.launch_mode.to_string(), Total::Blank),
    shown("min", |p| p.min.to_string(), Total::Blank),
    shown("max", |p| p.max.to_string(), Total::Blank),
    count("launches", |p| p.launches),
    count("unused", |p| p.unused_launches),
    count("withdrawn", |p| p.withdrawn),
    count("failed", |p| p.failures),
    count("stuck", |p| p.stuck_stops),
    shown("peak", |p| p.peak_workers.to_string(), Total::Blank),
    shown(
        "worker-h",
        |p| format!("{:.1}", p.worker_hours),
        Total::Run(|r| format!("{:.1}", hours(r).0)),
    ),
    shown(
        "busy",
        |p| percent(p.busy_hours, p.worker_hours),
        Total::Run(|r| {
            let (worker, busy) = hours(r);
            percent(busy, worker)
        }),
    ),
    shown(
        "ran",
        |p| p.bundles_run.to_string(),
        Total::Run(|r| r.started.to_string()),
    ),
    shown(
        "wait p50",
        |p| wait(p.wait.p50_seconds),
        Total::Run(|r| wait(r.total_wait.p50_seconds)),
    ),
    shown(
        "p90",
        |p| wait(p.wait.p90_seconds),
        Total::Run(|r| wait(r.total_wait.p90_seconds)),
    ),
    shown(
        "p99",
        |p| wait(p.wait.p99_seconds),
        Total::Run(|r| wait(r.total_wait.p99_seconds)),
    ),
    shown(
        "max",
        |p| wait(p.wait.max_seconds),
        Total::Run(|r| wait(r.total_wait.max_seconds)),
    ),
];

/// "bundles: N arrived, …": what became of the workload's bundles.
fn bundles_line(report: &SimReport) -> String {
    let lost = match report.lost {
        0 => String::new(),
        n => format!(", {n} lost with a reclaimed worker"),
    };
    let drained = match report.drained {
        true => " (stopped at the drain limit)",
        false => "",
    };
    format!(
        "bundles: {} arrived, {} started, {} finished, {} unfinished{lost}, {} no pool can \
         run{drained}\n",
        report.bundles, report.started, report.finished, report.unfinished, report.unrunnable,
    )
}

/// Where runs were lost with reclaimed workers, if any were.
fn lost_runs(report: &SimReport) -> String {
    let pools: Vec<String> = (report.pools.iter())
        .filter(|p| p.lost_runs > 0)
        .map(|p| format!("{} {}", p.name, p.lost_runs))
        .collect();
    match pools.is_empty() {
        true => String::new(),
        false => format!(
            "runs lost with reclaimed workers (worker_offline on the server, not staged again): \
             {}\n",
            pools.join(", ")
        ),
    }
}

/// Where reclaimed preemptible workers' runs were staged again, and the time they had run.
fn restaged_runs(report: &SimReport) -> String {
    let pools: Vec<String> = (report.pools.iter())
        .filter(|p| p.restaged_runs > 0)
        .map(|p| {
            format!(
                "{} {} ({:.2} h run again)",
                p.name, p.restaged_runs, p.rerun_hours
            )
        })
        .collect();
    match pools.is_empty() {
        true => String::new(),
        false => format!(
            "runs of reclaimed preemptible workers staged again and run elsewhere: {}\n",
            pools.join(", ")
        ),
    }
}

/// What the pools with a `cost_per_hour` cost (worker-hours × the price), and in all.
fn costs(report: &SimReport) -> String {
    let priced: Vec<(&str, f64)> = (report.pools.iter())
        .filter_map(|p| Some((p.name.as_str(), p.cost?)))
        .collect();
    if priced.is_empty() {
        return String::new();
    }
    let each: Vec<String> = priced.iter().map(|(n, c)| format!("{n} {c:.2}")).collect();
    let total = report.cost().unwrap_or_default();
    format!(
        "cost (worker-hours × cost_per_hour): {}; total {total:.2}\n",
        each.join(", ")
    )
}

/// The start-time estimates' errors: each bundle's first estimate with a time, scored when
/// it left staged (unused: workers that ended without running a bundle).
fn estimates(report: &SimReport) -> String {
    let mut out = String::new();
    if report.estimates.is_empty() {
        return out;
    }
    out.push_str("\nstart-time estimates (each bundle's first, scored when it left staged):\n");
    let mut rows = vec![
        ["kind", "scored", "error p50", "p90", "max"]
            .iter()
            .map(|h| h.to_string())
            .collect::<Vec<_>>(),
    ];
    for kind in &report.estimates {
        rows.push(vec![
            kind.kind.clone(),
            kind.scored.to_string(),
            wait(kind.error.p50_seconds),
            wait(kind.error.p90_seconds),
            wait(kind.error.max_seconds),
        ]);
    }
    out.push_str(&table(&rows));
    out
}

fn percent(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.0}%", part / whole * 100.0)
    } else {
        "-".into()
    }
}

fn wait(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "-".into(), human)
}

/// `45s`, `12m05s`, `3h07m`, `2d04h`.
pub(crate) fn human(seconds: f64) -> String {
    let s = seconds.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Columns separated by two spaces; the first left-aligned, the others right-aligned.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c == 0 {
                let _ = write!(line, "{cell:<w$}", w = widths[c]);
            } else {
                let _ = write!(line, "  {cell:>w$}", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human(0.4), "0s");
        assert_eq!(human(725.0), "12m05s");
        assert_eq!(human(3.0 * 3600.0 + 420.0), "3h07m");
        assert_eq!(human(2.0 * 86400.0 + 4.0 * 3600.0), "2d04h");
    }
}
