//! What `cl-worker-manager advise` prints: the short answer first (what to change, what it
//! waits and costs against the settings in force), then how far to trust it (the replay
//! against what happened), the frontier, and what the history could not model.

use super::text::{human, table};
use codalab_wm_core::budget::BudgetLimits;
use codalab_wm_core::simulate::advise::{Advice, Figures, Goal, Knob, Point, scaled};
use std::fmt::Write as _;

/// How the settings are named in the config file.
#[derive(Debug, Clone, PartialEq)]
pub struct Names {
    /// The pools' names, in declaration order.
    pub pools: Vec<String>,
    /// The one pool of the single-backend mode (`min_workers`, `max_workers`).
    pub single: bool,
    /// The overall budget in force (what [`Knob::Budget`] scales).
    pub budget: BudgetLimits,
}

impl Names {
    /// The config keys a change sets, each with its value (`None`: the key removed).
    fn settings(&self, knob: &Knob) -> Vec<(String, Option<String>)> {
        let pool = |index: usize, key: &str, single: &str| match self.single {
            true => single.to_owned(),
            false => format!(
                "{}.{key}",
                self.pools.get(index).map_or("?", String::as_str)
            ),
        };
        let one = |key: String, value: String| vec![(key, Some(value))];
        match *knob {
            Knob::IdleSeconds { seconds } => one("worker.idle_seconds".into(), seconds.to_string()),
            Knob::Max { pool: p, workers } => {
                one(pool(p, "max", "max_workers"), workers.to_string())
            }
            Knob::Min { pool: p, workers } => {
                one(pool(p, "min", "min_workers"), workers.to_string())
            }
            Knob::SpillAfter { pool: p, seconds } => {
                one(pool(p, "spill_after", "spill_after"), seconds.to_string())
            }
            Knob::Burst { pool: p, launches } => one(
                pool(p, "max_launches_per_tick", "max_launches_per_tick"),
                launches.to_string(),
            ),
            Knob::NoFallback { pool: p } => vec![(pool(p, "fallback", "fallback"), None)],
            Knob::Budget { factor } => {
                let scaled = scaled(self.budget, factor);
                let limits = [
                    (
                        "max_worker_hours_per_day",
                        self.budget.max_worker_hours_per_day,
                        scaled.max_worker_hours_per_day,
                    ),
                    (
                        "max_cost_per_day",
                        self.budget.max_cost_per_day,
                        scaled.max_cost_per_day,
                    ),
                ];
                (limits.into_iter())
                    .filter(|(_, before, _)| before.is_some())
                    .map(|(key, _, after)| (key.to_owned(), after.map(|v| v.to_string())))
                    .collect()
            }
        }
    }

    /// `cpu.max = 20`, `max_workers = 20`, `worker.idle_seconds = 300`, `no cpu.fallback`.
    pub fn knob(&self, knob: &Knob) -> String {
        (self.settings(knob).into_iter())
            .map(|(key, value)| match value {
                Some(value) => format!("{key} = {value}"),
                None => format!("no {key}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A point's changes, or `the settings in force`.
    pub fn changes(&self, point: &Point) -> String {
        match point.changes.is_empty() {
            true => "the settings in force".to_owned(),
            false => (point.changes.iter().map(|k| self.knob(k)))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// The `simulate` flags that replay a point's changes, when `--set` can say them all (it
    /// sets a top-level key only without `[[pools]]`; an empty value removes a key).
    fn simulate_flags(&self, point: &Point) -> Option<String> {
        let flags = |knob: &Knob| match knob {
            Knob::IdleSeconds { seconds } => Some(format!("--worker-idle-seconds {seconds}")),
            Knob::Budget { .. } if !self.single => None,
            other => Some(
                (self.settings(other).into_iter())
                    .map(|(key, value)| format!("--set {key}={}", value.unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        };
        let flags: Option<Vec<String>> = point.changes.iter().map(flags).collect();
        flags.map(|f| f.join(" "))
    }
}

/// The advice as text (`advise`'s output). `source`: the history's path, for the replay line.
pub fn advice_text(advice: &Advice, names: &Names, source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Advice from {} of history: {} runs; pools {}.\n",
        human(advice.days * 86_400.0),
        advice.bundles,
        names.pools.join(", ")
    );
    out.push_str(&answer(advice, names));
    out.push_str(&trust(advice));
    out.push_str(&frontier(advice, names));
    out.push_str(&gaps(advice));
    let best = advice.recommended.map(|i| &advice.points[i]);
    if let Some(flags) = best
        .filter(|b| !b.changes.is_empty())
        .and_then(|b| names.simulate_flags(b))
    {
        let _ = writeln!(
            out,
            "\nReplay it: cl-worker-manager simulate --trace {source} {flags}"
        );
    }
    out
}

/// `p90 14m02s for 22.00 a day (44.0 worker-hours)`.
fn spend(figures: &Figures, priced: bool) -> String {
    let wait = figures.wait_p90_seconds.map_or("—".to_owned(), human);
    match (priced, figures.cost_per_day) {
        (true, Some(cost)) => format!(
            "p90 {wait} for {cost:.2} a day ({:.1} worker-hours)",
            figures.worker_hours_per_day
        ),
        _ => format!(
            "p90 {wait} for {:.1} worker-hours a day",
            figures.worker_hours_per_day
        ),
    }
}

/// What was asked, in words.
fn asked(goal: Goal) -> &'static str {
    match goal {
        Goal::Both => "the wait target within the cost cap",
        Goal::P90 => "the wait target",
        Goal::Cost => "the cost cap",
        Goal::NoWorse => "no longer a wait than today's",
    }
}

/// The short answer.
pub(super) fn answer(advice: &Advice, names: &Names) -> String {
    let in_force = &advice.replayed().figures;
    let Some(best) = advice.recommended.map(|i| &advice.points[i]) else {
        let nearest = nearest(advice);
        return format!(
            "No setting swept meets {}. The nearest: {}, which gives {}; the settings in force give {}.\n",
            asked(advice.goal),
            names.changes(nearest),
            spend(&nearest.figures, advice.priced),
            spend(in_force, advice.priced)
        );
    };
    if best.changes.is_empty() {
        let better = match advice.goal {
            Goal::Both | Goal::P90 => "meets the wait target for less",
            Goal::Cost => "waits less within the cost cap",
            Goal::NoWorse => "waits as little for less",
        };
        return format!(
            "Keep the settings in force: no setting swept {better}. They give {}.\n",
            spend(in_force, advice.priced)
        );
    }
    format!(
        "Recommended for {}: set {}.\n  It gives {}, against {} with the settings in force.\n",
        asked(advice.goal),
        names.changes(best),
        spend(&best.figures, advice.priced),
        spend(in_force, advice.priced)
    )
}

/// The frontier's point nearest what was asked when none meets it: the shortest wait for a
/// wait target, the least cost for a cost cap.
fn nearest(advice: &Advice) -> &Point {
    let on = advice.points.iter().filter(|p| p.on_frontier);
    let by_wait = |p: &&Point| p.figures.wait_p90_seconds.unwrap_or(f64::INFINITY);
    let found = match advice.goal {
        Goal::Cost => on.min_by(|a, b| a.figures.spend().total_cmp(&b.figures.spend())),
        _ => on.min_by(|a, b| by_wait(a).total_cmp(&by_wait(b))),
    };
    found.unwrap_or(advice.replayed())
}

/// The replay against what happened, and how far the replay moves with its random draws.
fn trust(advice: &Advice) -> String {
    let (happened, replayed) = (&advice.recorded, &advice.replayed().figures);
    let spread = &advice.spread;
    // Each figure: its name, how it is read and shown, and whether it is shown only when both
    // what happened and the replay have it (cost: only where a pool has a price).
    type Row = (
        &'static str,
        fn(&Figures) -> Option<f64>,
        fn(f64) -> String,
        bool,
    );
    let tenths: fn(f64) -> String = |v| format!("{v:.1}");
    let figures: [Row; 5] = [
        ("wait p50", |f| f.wait_p50_seconds, human, false),
        ("wait p90", |f| f.wait_p90_seconds, human, false),
        (
            "worker-hours a day",
            |f| Some(f.worker_hours_per_day),
            tenths,
            false,
        ),
        (
            "cost a day",
            |f| f.cost_per_day,
            |v| format!("{v:.2}"),
            true,
        ),
        (
            "launches a day",
            |f| Some(f.launches_per_day),
            tenths,
            false,
        ),
    ];
    let mut rows = vec![vec![
        String::new(),
        "happened".into(),
        "replayed".into(),
        format!("{} replays", spread.draws),
    ]];
    for (name, of, show, only_when_both) in figures {
        if only_when_both && (of(happened).is_none() || of(replayed).is_none()) {
            continue;
        }
        let shown = |f: &Figures| of(f).map_or("—".to_owned(), show);
        let (least, most) = (shown(&spread.least), shown(&spread.most));
        let span = match least == most {
            true => least,
            false => format!("{least}–{most}"),
        };
        rows.push(vec![name.into(), shown(happened), shown(replayed), span]);
    }
    let mut out = format!(
        "\nHow far to trust it: the settings in force replayed, against what happened\n  (the \
         last column: the least and most of {} replays, each drawing its own start times)\n",
        spread.draws
    );
    for line in table(&rows).lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// The frontier, cheapest first, with the settings in force wherever they fall.
fn frontier(advice: &Advice, names: &Names) -> String {
    let mut shown: Vec<(usize, &Point)> = (advice.points.iter().enumerate())
        .filter(|(i, p)| p.on_frontier || *i == 0)
        .collect();
    shown.sort_by(|a, b| a.1.figures.spend().total_cmp(&b.1.figures.spend()));
    let cost = if advice.priced {
        "cost a day"
    } else {
        "worker-hours a day"
    };
    let mut rows = vec![vec![
        "  change".to_owned(),
        "wait p50".into(),
        "wait p90".into(),
        cost.into(),
    ]];
    let wait = |s: Option<f64>| s.map_or("—".to_owned(), human);
    for (index, point) in shown {
        let mark = match (Some(index) == advice.recommended, index == 0) {
            (true, _) => "* ",
            (_, true) => "= ",
            _ => "  ",
        };
        rows.push(vec![
            format!("{mark}{}", names.changes(point)),
            wait(point.figures.wait_p50_seconds),
            wait(point.figures.wait_p90_seconds),
            format!("{:.2}", point.figures.spend()),
        ]);
    }
    let mut out = format!(
        "\nThe frontier: of {} settings simulated, those no other waits less for less (* recommended, = in force)\n",
        advice.points.len()
    );
    for line in table(&rows).lines() {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// What the replay could not model.
fn gaps(advice: &Advice) -> String {
    let gaps = &advice.gaps;
    let mut lines = Vec::new();
    for (why, count) in &gaps.unmodelled {
        let bundles = if *count == 1 { "bundle" } else { "bundles" };
        lines.push(format!(
            "{count} {bundles} not followed to their end: {why}"
        ));
    }
    if gaps.on_other_workers > 0 {
        lines.push(format!(
            "runs that went to workers of no pool of this manager's: {}; the replay runs them on the pools",
            gaps.on_other_workers
        ));
    }
    if gaps.settings_changes > 0 {
        lines.push(format!(
            "the settings were reloaded {} times during the history; it is replayed under today's throughout",
            gaps.settings_changes
        ));
    }
    if !gaps.latency_unmeasured.is_empty() {
        lines.push(format!(
            "no worker of {} checked in during the history, so their start could not be measured; the simulator's default start latency is used",
            gaps.latency_unmeasured.join(", ")
        ));
    }
    for shape in &gaps.shapes_from_history {
        lines.push(format!(
            "pool {}: replayed with the workers the history ran ({}), not the {} the settings given describe",
            shape.pool, shape.ran, shape.given
        ));
    }
    if !gaps.settings_differ.is_empty() {
        lines.push(format!(
            "the settings given differ from those the history ran with, so the replay is not of what ran: {}",
            gaps.settings_differ.join("; ")
        ));
    }
    if gaps.unrunnable > 0 {
        lines.push(format!(
            "runs of the history that fit no pool's workers in the replay (their queue or their size), left out of its waits: {}; give the pools' tags and sizes the manager ran with",
            gaps.unrunnable
        ));
    }
    if !gaps.pools_gone.is_empty() {
        lines.push(format!(
            "the history has pools the settings no longer have ({}): their workers count in what happened only",
            gaps.pools_gone.join(", ")
        ));
    }
    lines.push(
        "the pools' own budgets, hedges and races are replayed as set, not swept; workers still running at the history's end are not in what happened"
            .into(),
    );
    let mut out = String::from("\nWhat the replay could not model:\n");
    for line in lines {
        let _ = writeln!(out, "  - {line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_core::simulate::advise::{Gaps, Spread};

    /// The replay's table: each figure happened, replayed, and its least–most over the
    /// draws (one value where they agree); the cost row only where both have a cost.
    #[test]
    fn the_replay_is_shown_beside_what_happened_and_its_spread() {
        let figures = |p90: f64, hours: f64, cost: Option<f64>| Figures {
            wait_p50_seconds: Some(30.0),
            wait_p90_seconds: Some(p90),
            worker_hours_per_day: hours,
            cost_per_day: cost,
            launches_per_day: 10.0,
        };
        let advice = |cost: Option<f64>| Advice {
            days: 1.0,
            bundles: 10,
            priced: cost.is_some(),
            recorded: figures(144.0, 7.4, cost),
            points: vec![Point {
                figures: figures(128.0, 6.7, cost),
                ..point(Vec::new())
            }],
            spread: Spread {
                draws: 8,
                least: figures(88.0, 6.2, cost.map(|c| c - 1.0)),
                most: figures(128.0, 6.7, cost),
            },
            goal: Goal::NoWorse,
            recommended: None,
            gaps: Gaps::default(),
        };
        let text = trust(&advice(Some(3.0)));
        let line = |name: &str| {
            let line = text.lines().find(|l| l.trim_start().starts_with(name));
            line.unwrap_or_else(|| panic!("no {name}: {text}"))
                .split_whitespace()
                .collect::<Vec<_>>()
        };
        assert!(text.contains("8 replays"), "{text}");
        assert_eq!(line("wait p50")[2..], ["30s", "30s", "30s"]);
        assert_eq!(line("wait p90")[2..], ["2m24s", "2m08s", "1m28s–2m08s"]);
        assert_eq!(line("worker-hours")[3..], ["7.4", "6.7", "6.2–6.7"]);
        assert_eq!(line("cost a day")[3..], ["3.00", "3.00", "2.00–3.00"]);
        assert_eq!(line("launches a day")[3..], ["10.0", "10.0", "10.0"]);
        assert!(!trust(&advice(None)).contains("cost a day"));
    }

    fn point(changes: Vec<Knob>) -> Point {
        Point {
            changes,
            figures: Figures::default(),
            unfinished: 0,
            on_frontier: true,
        }
    }

    /// Each change is named as the config key it sets, and replayed by one `--set` per key: a
    /// budget of two limits is two, a removed key an empty value; a top-level key cannot be set
    /// beside `[[pools]]`, so no replay line is offered then.
    #[test]
    fn changes_are_config_keys_and_replay_as_one_set_per_key() {
        let budget = BudgetLimits {
            max_worker_hours_per_day: Some(100.0),
            max_cost_per_day: Some(10.0),
        };
        let single = Names {
            pools: vec!["local".into()],
            single: true,
            budget,
        };
        let halved = point(vec![
            Knob::Budget { factor: 0.5 },
            Knob::Max {
                pool: 0,
                workers: 4,
            },
        ]);
        assert_eq!(
            single.changes(&halved),
            "max_worker_hours_per_day = 50, max_cost_per_day = 5, max_workers = 4"
        );
        assert_eq!(
            single.simulate_flags(&halved).as_deref(),
            Some("--set max_worker_hours_per_day=50 --set max_cost_per_day=5 --set max_workers=4")
        );
        let off = point(vec![Knob::Budget { factor: 0.0 }]);
        assert_eq!(
            single.changes(&off),
            "no max_worker_hours_per_day, no max_cost_per_day"
        );
        assert_eq!(
            single.simulate_flags(&off).as_deref(),
            Some("--set max_worker_hours_per_day= --set max_cost_per_day=")
        );
        let pools = Names {
            pools: vec!["cpu".into()],
            single: false,
            budget,
        };
        let no_fallback = point(vec![
            Knob::NoFallback { pool: 0 },
            Knob::IdleSeconds { seconds: 60 },
        ]);
        assert_eq!(
            pools.changes(&no_fallback),
            "no cpu.fallback, worker.idle_seconds = 60"
        );
        assert_eq!(
            pools.simulate_flags(&no_fallback).as_deref(),
            Some("--set cpu.fallback= --worker-idle-seconds 60")
        );
        assert_eq!(pools.simulate_flags(&off), None);
    }
}
