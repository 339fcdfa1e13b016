//! `advise` on small histories made by hand (the simulator is the real one), and its frontier
//! and recommendation rules on points made by hand.

use super::*;
use crate::WorkerShape;
use crate::history::{BundleLine, Line, SettingsLine, UnmodelledLine, WorkerLine};
use crate::pools::PoolPolicy;

fn pool(max: u32) -> PoolPolicy {
    PoolPolicy {
        max,
        max_launches_per_tick: 10,
        min_seconds_between_workers: 0,
        cost_per_hour: Some(2.0),
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(1, 0, 4096))
    }
}

/// `hours` of history: a burst of `n` one-CPU bundles of 120 s every hour, workers checking
/// in 40–55 s after launch, one bundle deleted.
fn history(hours: u32, n: usize) -> String {
    let mut lines = vec![Line::Settings(SettingsLine {
        time: 0.0,
        sleep_time: 5.0,
        pools: vec![SettingsLine::pool(&pool(4))],
    })];
    for hour in 0..hours {
        let at = f64::from(hour) * 3600.0;
        for i in 0..n {
            lines.push(Line::Bundle(BundleLine {
                time: at + i as f64,
                uuid: format!("0x{hour}-{i}"),
                cpus: 1,
                gpus: 0,
                memory: 1 << 30,
                queue: String::new(),
                owner: "alice".into(),
                duration: 120.0,
                wait: 50.0 + (i / 4) as f64 * 120.0,
                pool: "cpu".into(),
                state: "ready".into(),
            }));
        }
        for w in 0..4 {
            lines.push(Line::Worker(WorkerLine {
                time: at + f64::from(w),
                pool: "cpu".into(),
                job: format!("{hour}-{w}"),
                placed: Some(20.0),
                checked_in: Some(40.0 + f64::from(w) * 5.0),
                active: 900.0,
                runs: 2,
                end: "gone".into(),
            }));
        }
    }
    lines.push(Line::Unmodelled(UnmodelledLine {
        time: f64::from(hours) * 3600.0 - 100.0,
        uuid: "0xdel".into(),
        why: "the server no longer lists it (deleted)".into(),
    }));
    (lines.iter())
        .map(|l| serde_json::to_string(l).unwrap() + "\n")
        .collect()
}

#[test]
fn a_history_is_read_with_its_figures_and_gaps() {
    let recorded = Recorded::parse(&history(24, 8)).unwrap();
    assert_eq!(recorded.bundles, 192);
    assert_eq!(recorded.workload.arrivals.len(), 192);
    assert_eq!(recorded.launches(), 96);
    assert_eq!(recorded.worker_hours(), 24.0);
    assert_eq!(recorded.wait.p50_seconds, Some(50.0));
    assert_eq!(recorded.wait.p90_seconds, Some(170.0));
    let latency = recorded.pools["cpu"].start_latency().unwrap();
    assert_eq!(latency, (Duration::from_secs(40), Duration::from_secs(55)));
    assert!(
        !recorded.pools["cpu"].runs_from_launch(),
        "placed 20 s of 40–55 s: a queue"
    );
    let local = PoolRecord {
        placed: vec![2.0, 1.0, 2.0],
        checkins: vec![9.0, 12.0, 10.0],
        ..PoolRecord::default()
    };
    assert!(
        local.runs_from_launch(),
        "running at once, checking in later: billed from launch"
    );
    assert_eq!(recorded.unmodelled.values().sum::<usize>(), 1);
    // The replay runs to its last line, here the deleted bundle's (an hour's end, less 100 s);
    // without it, to the end of the last worker (launched at 3 s, placed 20 s later, 900 s on
    // the platform), after its last run's (7 s + 170 s + 120 s).
    assert_eq!(recorded.until_seconds, 24.0 * 3600.0 - 100.0);
    let kept: String = (history(1, 8).lines())
        .filter(|l| !l.contains("0xdel"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(Recorded::parse(&kept).unwrap().until_seconds, 923.0);
    let err = Recorded::parse("{\"kind\":\"settings\",\"time\":0,\"sleep_time\":5,\"pools\":[]}\n")
        .unwrap_err();
    assert!(err.to_string().contains("no run that ended"), "{err}");
    let err = Recorded::parse("{\"kind\":\"bundle\",\"time\":0,\"duration\":1}\n").unwrap_err();
    assert!(
        err.to_string()
            .contains("line 1: not a line of the manager's history"),
        "{err}"
    );
}

/// Six hours of history (bursts of 8), replayed with workers that idle 600 s.
fn six_hours() -> (Recorded, SimConfig) {
    let config = SimConfig {
        worker_idle: Duration::from_secs(600),
        ..SimConfig::default()
    };
    (Recorded::parse(&history(6, 8)).unwrap(), config)
}

#[test]
fn the_replay_is_first_and_a_wait_target_is_met_at_the_least_cost() {
    let (recorded, config) = six_hours();
    let ask = Ask {
        p90: Some(Duration::from_secs(120)),
        max_cost_per_day: None,
    };
    let advice = advise(&recorded, &[pool(4)], &config, ask).unwrap();
    assert!(advice.replayed().changes.is_empty());
    assert!(advice.priced);
    assert!(
        advice.gaps.latency_unmeasured.is_empty(),
        "{:?}",
        advice.gaps
    );
    assert_eq!(advice.goal, Goal::P90);
    let best = &advice.points[advice.recommended.expect("a point meets 120 s")];
    assert!(best.on_frontier);
    assert!(best.figures.wait_p90_seconds.unwrap() <= 120.0, "{best:?}");
    let cheaper_meeting = (advice.points.iter()).filter(|p| {
        p.figures.wait_p90_seconds.unwrap_or(f64::MAX) <= 120.0
            && p.figures.spend() < best.figures.spend()
    });
    assert_eq!(cheaper_meeting.count(), 0, "the cheapest that meets it");
    assert!(
        best.changes
            .iter()
            .any(|k| matches!(k, Knob::Max { workers: 8, .. })),
        "8 bundles at once need max 8: {best:?}"
    );
}

/// The replay's spread: each figure's least and most over the replays with other seeds,
/// the replay shown among them, and wider than one draw where start times vary.
#[test]
fn the_replay_says_how_far_its_figures_move_with_its_draws() {
    let (recorded, config) = six_hours();
    let advice = advise(&recorded, &[pool(4)], &config, Ask::default()).unwrap();
    let (spread, shown) = (advice.spread, advice.replayed().figures);
    assert_eq!(spread.draws, REPLAY_DRAWS);
    let within = |least: f64, value: f64, most: f64| least <= value && value <= most;
    let p90 = |f: &Figures| f.wait_p90_seconds.unwrap();
    assert!(
        within(p90(&spread.least), p90(&shown), p90(&spread.most)),
        "{spread:?}"
    );
    let hours = |f: &Figures| f.worker_hours_per_day;
    assert!(within(
        hours(&spread.least),
        hours(&shown),
        hours(&spread.most)
    ));
    assert!(
        p90(&spread.least) < p90(&spread.most),
        "the draws differ: {spread:?}"
    );

    let one = Figures {
        wait_p90_seconds: Some(10.0),
        worker_hours_per_day: 2.0,
        ..Figures::default()
    };
    let other = Figures {
        wait_p90_seconds: Some(30.0),
        worker_hours_per_day: 1.0,
        cost_per_day: Some(5.0),
        ..Figures::default()
    };
    let spread = Spread::of(&[one, other]);
    assert_eq!(spread.draws, 2);
    assert_eq!(
        (spread.least.wait_p90_seconds, spread.most.wait_p90_seconds),
        (Some(10.0), Some(30.0))
    );
    assert_eq!(
        (
            spread.least.worker_hours_per_day,
            spread.most.worker_hours_per_day
        ),
        (1.0, 2.0)
    );
    assert_eq!(
        (spread.least.cost_per_day, spread.most.wait_p50_seconds),
        (Some(5.0), None)
    );
}

fn point(changes: usize, p90: f64, spend: f64) -> Point {
    Point {
        changes: vec![Knob::IdleSeconds { seconds: 60 }; changes],
        figures: Figures {
            wait_p90_seconds: Some(p90),
            worker_hours_per_day: spend,
            ..Figures::default()
        },
        unfinished: 0,
        on_frontier: false,
    }
}

#[test]
fn the_frontier_and_the_recommendation_follow_what_was_asked() {
    let mut points = vec![
        point(0, 100.0, 10.0),
        point(1, 50.0, 20.0),
        point(1, 200.0, 5.0),
        point(1, 120.0, 12.0),
        point(2, 40.0, 40.0),
        point(2, 50.0, 20.0),
    ];
    mark_frontier(&mut points);
    let frontier: Vec<bool> = points.iter().map(|p| p.on_frontier).collect();
    assert_eq!(
        frontier,
        [true, true, true, false, true, false],
        "a tie is stood for by the point with fewer changes"
    );
    let ask = |p90: Option<u64>, cap: Option<f64>| Ask {
        p90: p90.map(Duration::from_secs),
        max_cost_per_day: cap,
    };
    let cases = [
        (ask(Some(60), None), Goal::P90, Some(1)),
        (ask(Some(30), None), Goal::P90, None),
        (ask(None, Some(25.0)), Goal::Cost, Some(1)),
        (ask(Some(60), Some(15.0)), Goal::Both, None),
        (ask(Some(300), Some(15.0)), Goal::Both, Some(2)),
        (ask(None, None), Goal::NoWorse, Some(0)),
    ];
    for (ask, goal, index) in cases {
        assert_eq!(recommend(&points, ask), (goal, index), "{ask:?}");
    }
    points[2].unfinished = 3;
    mark_frontier(&mut points);
    assert!(!points[2].on_frontier, "leaves bundles unfinished");
}

#[test]
fn the_grid_is_full_while_small_and_one_knob_at_a_time_beyond() {
    let config = SimConfig::default();
    let one = grid(&[pool(4)], &config);
    // idle: 600 and 3 other values; max: 4, 2 and 8; min: 0 and 1; burst: 10 and 1.
    assert_eq!(one.len(), 4 * 3 * 2 * 2);
    assert!(one[0].is_empty());
    let mut pools: Vec<PoolPolicy> = (0..3).map(|_| pool(4)).collect();
    for (i, p) in pools.iter_mut().enumerate() {
        p.name = format!("p{i}");
        p.spill_after = Some(Duration::from_secs(300));
    }
    let many = grid(&pools, &config);
    assert!(many.len() <= MAX_GRID, "{}", many.len());
    assert!(many.iter().skip(1).all(|p| !p.is_empty() && p.len() <= 2));
    let budgeted = SimConfig {
        budget: crate::budget::BudgetLimits {
            max_worker_hours_per_day: Some(100.0),
            max_cost_per_day: None,
        },
        ..SimConfig::default()
    };
    let mut fallback = pool(4);
    fallback.fallback = Some(crate::pools::fallback::Fallback {
        pool: "od".into(),
        after: 1,
        window: Duration::from_secs(600),
        cooldown: Duration::from_secs(600),
        min_on_demand: 0,
    });
    let knobs: Vec<Knob> = grid(&[fallback], &budgeted).into_iter().flatten().collect();
    assert!(knobs.contains(&Knob::NoFallback { pool: 0 }));
    assert!(knobs.contains(&Knob::Budget { factor: 0.0 }));
    let (_, off) = apply(&[Knob::Budget { factor: 0.0 }], &[pool(4)], &budgeted);
    assert!(!off.budget.is_set());
    let (_, doubled) = apply(&[Knob::Budget { factor: 2.0 }], &[pool(4)], &budgeted);
    assert_eq!(doubled.budget.max_worker_hours_per_day, Some(200.0));
    let (policies, config) = apply(
        &[
            Knob::Max {
                pool: 1,
                workers: 9,
            },
            Knob::IdleSeconds { seconds: 60 },
        ],
        &pools,
        &config,
    );
    assert_eq!((policies[1].max, config.worker_idle.as_secs()), (9, 60));
}

#[test]
fn waits_are_read_as_admins_write_them() {
    let secs = |s: &str| parse_wait(s).map(|d| d.as_secs());
    assert_eq!(secs("90"), Ok(90));
    assert_eq!(secs("15m"), Ok(900));
    assert_eq!(secs(" 2h "), Ok(7200));
    assert_eq!(secs("1.5d"), Ok(129_600));
    for bad in ["", "m", "0", "-5m", "15 minutes", "15y", "inf"] {
        assert!(parse_wait(bad).is_err(), "{bad}");
    }
}

/// A history of `n` bundles of `cpus` CPUs each, run on 2-CPU workers of pool `cpu`, with the
/// settings lines `settings` (policies as they ran).
fn ran_on_two_cpus(n: usize, cpus: u32, settings: &[PoolPolicy]) -> String {
    let mut lines: Vec<Line> = (settings.iter())
        .map(|p| {
            Line::Settings(SettingsLine {
                time: 0.0,
                sleep_time: 5.0,
                pools: vec![SettingsLine::pool(p)],
            })
        })
        .collect();
    lines.extend((0..n).map(|i| {
        Line::Bundle(BundleLine {
            time: i as f64,
            uuid: format!("0x{i}"),
            cpus,
            gpus: 0,
            memory: 1 << 30,
            queue: String::new(),
            owner: "alice".into(),
            duration: 60.0,
            wait: 30.0,
            pool: "cpu".into(),
            state: "ready".into(),
        })
    }));
    (lines.iter())
        .map(|l| serde_json::to_string(l).unwrap() + "\n")
        .collect()
}

fn two_cpus() -> PoolPolicy {
    PoolPolicy {
        shape: WorkerShape::from_flags(2, 0, 4096),
        ..pool(4)
    }
}

#[test]
fn a_history_says_what_its_pools_ran_and_counts_changes_not_restarts() {
    let paced = PoolPolicy {
        min_seconds_between_workers: 60,
        ..two_cpus()
    };
    let cases: [(&[PoolPolicy], usize); 4] = [
        (&[two_cpus()], 0),
        (&[two_cpus(), two_cpus()], 0),
        (&[two_cpus(), paced.clone()], 1),
        (&[two_cpus(), paced, two_cpus()], 2),
    ];
    for (settings, changes) in cases {
        let recorded = Recorded::parse(&ran_on_two_cpus(4, 1, settings)).unwrap();
        assert_eq!(recorded.settings_changes, changes, "{settings:?}");
        assert_eq!(
            recorded.ran_shape("cpu"),
            Some(WorkerShape::from_flags(2, 0, 4096))
        );
        assert_eq!(recorded.ran_shape("gpu"), None);
    }
}

/// `advise` with flags alone (no backend to give the workers' size: a pool of 1-CPU
/// workers, as the default) replays the 2-CPU workers the history ran, and says so, and says
/// which settings given differ from those it ran with; a run no worker fits is counted.
#[test]
fn the_replay_runs_the_workers_the_history_ran_and_says_what_differs() {
    let text = ran_on_two_cpus(6, 2, &[two_cpus()]);
    let recorded = Recorded::parse(&text).unwrap();
    let given = PoolPolicy {
        min_seconds_between_workers: 60,
        ..pool(4)
    };
    let ask = Ask::default();
    let advice = advise(&recorded, &[given], &SimConfig::default(), ask).unwrap();
    let gaps = &advice.gaps;
    assert_eq!(
        gaps.unrunnable, 0,
        "2-CPU runs on the 2-CPU workers: {gaps:?}"
    );
    assert!(advice.replayed().figures.wait_p90_seconds.is_some());
    assert_eq!(
        gaps.shapes_from_history,
        [ShapeFromHistory {
            pool: "cpu".into(),
            given: WorkerShape::from_flags(1, 0, 4096).to_string(),
            ran: WorkerShape::from_flags(2, 0, 4096).to_string(),
        }]
    );
    assert_eq!(
        gaps.settings_differ,
        ["cpu.min_seconds_between_workers: 60 given, the history ran with 0"]
    );
    let same = advise(&recorded, &[two_cpus()], &SimConfig::default(), ask).unwrap();
    assert!(same.gaps.shapes_from_history.is_empty() && same.gaps.settings_differ.is_empty());
    let too_big = Recorded::parse(&ran_on_two_cpus(3, 4, &[two_cpus()])).unwrap();
    let advice = advise(&too_big, &[two_cpus()], &SimConfig::default(), ask).unwrap();
    assert_eq!(advice.gaps.unrunnable, 3, "4-CPU runs fit no 2-CPU worker");
}
