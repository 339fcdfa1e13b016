use super::*;
use crate::chart::escape;
use crate::dashboard::{self, History, Page};
use crate::view;
use codalab_wm_core::budget::{BudgetLimits, BudgetStatus};
use codalab_wm_core::checkin::WorkerState;
use codalab_wm_core::estimate::{BundleEstimate, StartEstimate};
use codalab_wm_core::events::{CapacitySwitch, Event, EventKind};
use codalab_wm_core::policy::Reason;
use codalab_wm_core::pools::fallback::CapacityState;
use codalab_wm_core::pools::{
    BundleClass, LaunchMode, PoolDecision, PoolHealth, PoolVerdict, UnmetDemand, UnmetReason,
    UnservedBundle,
};
use codalab_wm_core::status::{Counter, FailureRecord, FallbackStatus, PoolStatus, ShapeStatus};
use std::time::Duration;

/// Manager clock of the fixture: an hour in.
const NOW: u64 = 3600;
/// When the fixture's manager started (Unix seconds).
const STARTED: u64 = 1_800_000_000;

fn decision(pool: &str, launches: u32, reasons: Vec<Reason>) -> PoolDecision {
    PoolDecision {
        pool: pool.into(),
        launch_mode: LaunchMode::Target,
        launches,
        hedges: 0,
        target: Some(3),
        demand: 2,
        reasons,
        ..PoolDecision::default()
    }
}

fn pool(name: &str, capacity: Option<CapacityState>) -> PoolStatus {
    PoolStatus {
        name: name.into(),
        backend: "slurm-batch".into(),
        launch_mode: LaunchMode::Target,
        shape: ShapeStatus {
            cpus: 4,
            gpus: 1,
            memory_bytes: 3 << 29,
        },
        min: 0,
        max: 3,
        fallback: capacity.map(|capacity| FallbackStatus {
            pool: "standard".into(),
            capacity,
        }),
        active: 2,
        pending: 1,
        workers: [(WorkerState::Starting, 1), (WorkerState::Busy, 2)].into(),
        last_decision: Some(decision(name, 1, vec![Reason::WantWorkers { staged: 2 }])),
        assigned: vec!["0x01".into()],
        ..PoolStatus::default()
    }
}

/// Pools in each capacity state, one backing off with a lost worker, one with a price, a
/// `spill_after`, a cost weight and an exclusive tag, one whose check-ins are unknown.
fn pools() -> Vec<PoolStatus> {
    let fallback = CapacityState::Fallback {
        since_seconds: 3000,
        retry_at_seconds: 4800,
        why: "2 capacity events in 30 min, the last: job 9 preempted".into(),
    };
    let spot = PoolStatus {
        cost_per_hour: Some(0.4),
        spill_after_seconds: Some(600),
        cost: 2.0,
        tag: Some("gpu".into()),
        tag_exclusive: true,
        ..pool("spot", Some(fallback))
    };
    let backing = PoolStatus {
        health: PoolHealth {
            failures: 2,
            last_failure: Some(Duration::from_secs(3500)),
            backoff_until: Some(Duration::from_secs(3900)),
            ..PoolHealth::default()
        },
        backing_off_until: Some(3900),
        suspended: None,
        workers: [(WorkerState::Lost, 1)].into(),
        last_decision: Some(decision(
            "retrying",
            0,
            vec![
                Reason::BackingOff {
                    until_seconds: 3900,
                    remaining_seconds: 300,
                    failures: 2,
                },
                Reason::MaxReached { jobs: 3, max: 3 },
            ],
        )),
        ..pool(
            "retrying",
            Some(CapacityState::Retrying {
                since_seconds: 3500,
            }),
        )
    };
    let unknown = PoolStatus {
        workers: Default::default(),
        health: PoolHealth {
            failures: 3,
            ..PoolHealth::suspended_after(3)
        },
        suspended: Some(codalab_wm_core::status::SuspensionStatus {
            since_unix_seconds: 1_800_000_000,
            failures: 3,
            error: "job 7: exit code 127".into(),
        }),
        ..pool("own", Some(CapacityState::Own))
    };
    vec![spot, backing, unknown]
}

fn budget(scope: &str, hours: f64, max: Option<f64>, reached: Option<&str>) -> BudgetStatus {
    BudgetStatus {
        scope: scope.into(),
        worker_hours: hours,
        cost: reached.map(|_| 9.6),
        limits: BudgetLimits {
            max_worker_hours_per_day: max,
            max_cost_per_day: reached.map(|_| 10.0),
        },
        reached: reached.map(str::to_owned),
        resumes_at_seconds: reached.map(|_| NOW + 3660),
    }
}

fn unserved() -> Vec<UnservedBundle> {
    let misfit = |pool: &str, detail: &str| PoolVerdict {
        pool: pool.into(),
        reason: Reason::Misfit {
            detail: detail.into(),
        },
    };
    vec![
        UnservedBundle {
            uuid: "0x<03>".into(),
            reason: Reason::NoFittingPool,
            pools: vec![
                misfit("spot", "request_cpus=64 > worker cpus=4"),
                misfit("own", "request_queue=q & <none>"),
            ],
        },
        UnservedBundle {
            uuid: "0x04".into(),
            reason: Reason::Unobserved {
                error: "squeue: \"timed out\"".into(),
            },
            pools: Vec::new(),
        },
    ]
}

fn unmet() -> Vec<UnmetDemand> {
    let class = |gpus, queue: &str| BundleClass {
        cpus: 1,
        gpus,
        memory_bytes: 1 << 30,
        queue: queue.into(),
    };
    vec![
        UnmetDemand {
            pool: None,
            class: class(64, "gpuq"),
            bundles: 1,
            reason: UnmetReason::NoFittingPool {
                detail: "spot: request_gpus=64 > worker gpus=1".into(),
            },
        },
        UnmetDemand {
            pool: Some("retrying".into()),
            class: class(0, ""),
            bundles: 12,
            reason: UnmetReason::MaxReached { jobs: 3, max: 3 },
        },
        UnmetDemand {
            pool: Some("spot".into()),
            class: class(1, ""),
            bundles: 2,
            reason: UnmetReason::Paced { by: "rate_limited" },
        },
    ]
}

fn events() -> Vec<Event> {
    let switch = CapacitySwitch {
        pool: "spot".into(),
        fallback: "standard".into(),
        switch: "to_fallback",
        why: Some("job 9 preempted".into()),
    };
    let kinds = [
        EventKind::WorkerLaunched {
            pool: "spot".into(),
            job_id: "41".into(),
        },
        EventKind::CapacitySwitched(switch),
        EventKind::PoolBackingOff {
            pool: "retrying".into(),
            failures: 2,
            until_seconds: 3900,
            for_seconds: 600,
        },
    ];
    (kinds.into_iter().enumerate())
        .map(|(i, kind)| Event::new(kind, 3000 + 100 * i as u64, STARTED))
        .collect()
}

/// A manager an hour in with a failed last tick and something in every section.
fn rich() -> Status {
    let estimate = |uuid: &str, estimate| BundleEstimate::new(uuid, estimate);
    Status {
        uptime_seconds: NOW,
        ticks: 720,
        last_error: Some("cannot reach the server: <timeout>".into()),
        last_success_seconds: Some(NOW - 10),
        last_tick_duration_seconds: 0.5,
        sleep_time_seconds: 5.0,
        staged: 17,
        pools: pools(),
        unserved: unserved(),
        unmet: unmet(),
        recent_failures: vec![FailureRecord {
            pool: "retrying".into(),
            at_seconds: 3500,
            kind: "submit_failed",
            class: codalab_wm_core::pools::FailureClass::Misconfiguration,
            detail: "sbatch: error: invalid partition".into(),
        }],
        events: events(),
        budgets: vec![
            budget("all pools", 30.25, None, None),
            budget("spot", 24.0, Some(24.0), Some("24.0 of 24 worker-hours")),
            budget("retrying", 2.0, Some(10.0), None),
        ],
        started_unix_seconds: STARTED,
        estimates: vec![
            estimate(
                "0x01",
                StartEstimate::WorkerCheckin {
                    pool: "spot".into(),
                    job: Some("41".into()),
                    seconds: 25,
                    forecast: false,
                },
            ),
            estimate(
                "0x02",
                StartEstimate::AfterBackoff {
                    pool: "retrying".into(),
                    seconds: 300,
                },
            ),
        ],
        counters: vec![Counter {
            metric: "stops",
            pool: "spot".into(),
            label: "withdrawn".into(),
            value: 4,
        }],
        ..Status::default()
    }
}

/// Every text of the presentation a person reads: facts, headings, notes, column and group
/// titles, cells with their tips, sentences (not the columns' tooltips: the page's help).
fn words(shown: &Presentation) -> Vec<String> {
    let mut words = Vec::new();
    let mut spans = |spans: &[Span]| {
        for span in spans {
            words.push(span.text.clone());
            words.extend(span.tip.clone());
        }
    };
    shown.health.facts.iter().for_each(|fact| spans(fact));
    for section in &shown.sections {
        if let Some(table) = &section.table {
            for row in &table.rows {
                row.cells.iter().for_each(|cell| spans(&cell.spans));
            }
        }
        section.sentences.iter().for_each(|s| spans(&s.spans));
    }
    words.extend(shown.health.error.clone());
    for section in &shown.sections {
        words.push(section.heading.clone());
        words.extend(section.note.clone());
        if let Some(table) = &section.table {
            words.extend(table.columns.iter().map(|c| c.title.to_owned()));
            words.extend(table.groups.iter().map(|(g, _)| g.to_string()));
        }
    }
    words.retain(|w| !w.trim().is_empty());
    words
}

/// The page and the view of one snapshot: the presentation they lay out.
fn both(status: &Status) -> (Presentation, String, String) {
    let mut history = History::new();
    history.observe(status);
    let shown = present(status, history.decisions());
    let page = Page::new(Duration::from_secs(5), STARTED + NOW);
    let html = dashboard::render(status, &history, &page);
    (shown, view::render(status), html)
}

/// One presentation, two layouts: every word of it is in what `status` prints and on the
/// page, in the same order of sections, and the view presents what the page does.
#[test]
fn the_view_and_the_page_say_the_same_words() {
    let status = rich();
    let (shown, text, html) = both(&status);
    let last_tick = DecisionRecord::last_tick(&status);
    assert_eq!(
        shown,
        present(&status, last_tick.iter()),
        "the same decisions"
    );
    let words = words(&shown);
    assert!(words.len() > 150, "{words:?}");
    for word in &words {
        assert!(
            text.contains(word.as_str()),
            "{word:?} not in the view:\n{text}"
        );
        assert!(
            html.contains(&escape(word)),
            "{word:?} not on the page:\n{html}"
        );
    }
    let at = |out: &str, heading: &str| out.find(heading).unwrap_or(usize::MAX);
    let headings: Vec<&str> = shown.sections.iter().map(|s| &s.heading[..]).collect();
    for pair in headings.windows(2) {
        assert!(at(&text, pair[0]) < at(&text, pair[1]), "{pair:?}");
        assert!(at(&html, &escape(pair[0])) < at(&html, &escape(pair[1])));
    }
    assert_eq!(headings.len(), 8, "every section shows: {headings:?}");
}

/// What the words of the rich snapshot are where they were unified.
#[test]
fn the_words_of_a_rich_snapshot() {
    let (_, text, html) = both(&rich());
    let said = [
        "cl-worker-manager: Up 1h 00m since 2027-01-15 08:00:00 UTC · 720 ticks · last successful tick 10s ago (took 0.50 s) · 17 staged bundles seen (3 assigned and 2 unserved among those read)\n\
         The last tick failed: cannot reach the server: <timeout>\n",
        "  spot  slurm-batch · target · 4 cpus, 1 gpus, 1.5 GiB · 0.4 an hour · spills after 10 min · cost weight 2 · tag gpu (exclusive) · launches go to standard (2 capacity events in 30 min, the last: job 9 preempted; for 10m 00s, one launch tries this pool again in 20m 00s)\n\
         \x20   Min / max: 0 / 3 · Target: 3\n\
         \x20   Workers, as the server sees them: Starting 1, Ready 0, Busy 2, Vanished 0, Lost 0\n\
         \x20   Jobs on the platform: Pending 1, Active 2, Withdrawn 4\n\
         \x20   Staged for it: 1 · Backoff: no · Budget (24 h): 24.00 / 24 worker-h: reached\n",
        "    Workers, as the server sees them: Starting –, Ready –, Busy –, Vanished –, Lost –\n",
        "    Staged for it: 1 · Backoff: backing off, 5m 00s left (2 failures) · Budget (24 h): 2.00 / 10 worker-h\n",
        "retrying; the rest go to standard (one launch tries this pool again (for 1m 40s) until its worker checks in)",
        "  Pool         Bundles  Asking for                          Why no worker is coming\n\
         \x20 (none fits)        1  1 cpus, 64 gpus, 1 GiB, queue gpuq  no pool fits them (spot: request_gpus=64 > worker gpus=1)\n\
         \x20 retrying          12  1 cpus, 0 gpus, 1 GiB               the pool is at its max (3 jobs, max 3)\n",
        "  0x<03>  no pool can run this bundle                                spot: request_cpus=64 > worker cpus=4; own: request_queue=q & <none>\n",
        "  spot        24.00 of 24  9.60 of 10  reached: 24.0 of 24 worker-hours; launches resume in 1h 01m\n",
        "! 2027-01-15 08:51:40 UTC (8m 20s ago)   capacity_switched  pool spot: new launches go to standard: job 9 preempted\n",
        "  10s ago  retrying       0     0  backing_off skipped: backing off for 300 more seconds after 2 failures\n\
         \x20                                  max_reached don't launch because too many workers already (3 >= 3)\n",
        "! 1m 40s ago  retrying  submit_failed  misconfiguration  sbatch: error: invalid partition\n",
        "Backoff: suspended after 3 failures in a row (job 7: exit code 127); fix the settings and reload",
    ];
    for words in said {
        assert!(text.contains(words), "{words}\nnot in\n{text}");
    }
    for tag in [
        "<tr data-bundle=\"0x&lt;03&gt;\" data-reason=\"no_fitting_pool\"><td><code>0x&lt;03&gt;</code></td>",
        "<td class=\"n bad\" data-field=\"lost\">1</td>",
        "<span data-field=\"tag\" class=\"muted\">tag gpu (exclusive)</span>",
    ] {
        assert!(html.contains(tag), "{tag}\n{html}");
    }
    assert!(
        !html.contains("… and") && !text.contains("… and"),
        "no row left out"
    );
}

/// Rows left out of a table are counted, in both, where `/status` has them.
#[test]
fn rows_left_out_are_counted_in_both() {
    let mut status = rich();
    status.events = (0..25)
        .map(|i| {
            let kind = EventKind::PoolRecovered {
                pool: "spot".into(),
            };
            Event::new(kind, 3000 + i, STARTED)
        })
        .collect();
    let (shown, text, html) = both(&status);
    let events = &shown
        .sections
        .iter()
        .find(|s| s.id == CHARTS_BEFORE)
        .unwrap();
    assert_eq!(events.table.as_ref().map(|t| t.rows.len()), Some(20));
    assert!(text.contains("\n  … and 5 more in /status.\n"), "{text}");
    assert!(
        html.contains("<p class=\"muted\">… and 5 more in <a href=\"/status\">/status</a>.</p>")
    );
}

/// `status` reads the `/status` document back into the snapshot (all but an estimate's
/// repeated `seconds`), codes included, and tolerates fields it does not know or miss.
#[test]
fn a_snapshot_reads_back_from_its_document() {
    let status = rich();
    let read = view::read(serde_json::to_value(&status).unwrap()).unwrap();
    let mut expected = status;
    for estimate in &mut expected.estimates {
        estimate.seconds = None;
    }
    assert_eq!(read, expected);
    let other = serde_json::json!({
        "uptime_seconds": 5,
        "from_a_newer_manager": true,
        "pools": [{"name": "cpu", "shape": {"cpus": 2}}],
    });
    let read = view::read(other).unwrap();
    assert_eq!((read.pools[0].shape.cpus, read.ticks), (2, 0));
}
