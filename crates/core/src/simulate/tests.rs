//! The simulator against hand-computed timelines, and the exactness of the policy view.

use super::rng::SplitMix64;
use super::*;
use crate::backend::{JobState, PendingKind};
use crate::bundle::{StagedBundle, WorkerShape};
use crate::pools::{LaunchMode, ObservedJob, PoolObservation, PoolsObservation, plan_pools};

fn pool(name: &str, max: u32) -> PoolPolicy {
    PoolPolicy {
        max,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 10,
        ..PoolPolicy::new(name, WorkerShape::from_flags(2, 0, 4096))
    }
}

/// A run whose workers all start `seconds` after their launch, as the timelines below draw them.
fn starting_in(seconds: u64) -> SimConfig {
    let latency = Duration::from_secs(seconds);
    SimConfig {
        start_latency: (latency, latency),
        ..SimConfig::default()
    }
}

/// `seconds` to tenths, as the timelines state them.
fn tenths(seconds: f64) -> f64 {
    (seconds * 10.0).round() / 10.0
}

fn trace(rows: &[(f64, f64)]) -> Workload {
    let mut csv = String::from("time,cpus,duration\n");
    for (time, duration) in rows {
        csv.push_str(&format!("{time},1,{duration}\n"));
    }
    Workload::parse(&csv).unwrap()
}

#[test]
fn one_bundle_waits_for_one_start_latency() {
    let config = SimConfig::default();
    let report = simulate(&trace(&[(0.0, 100.0)]), &[pool("cpu", 5)], &config).unwrap();
    let cpu = &report.pools[0];
    // Tick at 0 launches, the worker is active at 60 s and runs the bundle until 160 s.
    assert_eq!(cpu.launches, 1);
    assert_eq!(cpu.wait.max_seconds, Some(60.0));
    assert_eq!(report.simulated_seconds, 160.0);
    assert_eq!(
        cpu.worker_hours,
        (100.0f64 / 3600.0 * 1000.0).round() / 1000.0
    );
    assert_eq!(
        (report.finished, report.unfinished, report.drained),
        (1, 0, false)
    );
}

#[test]
fn a_platform_that_bills_the_start_bills_a_worker_from_its_place_and_a_withdrawn_one_too() {
    let bills = |on: bool| SimConfig {
        platforms: [(
            "cpu".to_owned(),
            Platform {
                bills_start: on,
                ..Platform::default()
            },
        )]
        .into(),
        ..SimConfig::default()
    };
    // Reports round worker-hours to thousandths.
    let worker_hours = |report: &SimReport| report.pools[0].worker_hours;
    let hours = |seconds: f64| (seconds / 3600.0 * 1000.0).round() / 1000.0;
    // One bundle: the worker is placed at 0, active at 60, done at 160.
    let one = trace(&[(0.0, 100.0)]);
    let free = simulate(&one, &[pool("cpu", 5)], &bills(false)).unwrap();
    let billed = simulate(&one, &[pool("cpu", 5)], &bills(true)).unwrap();
    assert_eq!(
        (worker_hours(&free), worker_hours(&billed)),
        (hours(100.0), hours(160.0))
    );
    // The second bundle comes at 85 s and launches job 2; job 1 takes it when its run ends at
    // 90 s, and the decision at 90 s withdraws job 2 while it starts: billed those 5 s.
    let two = trace(&[(0.0, 30.0), (85.0, 10.0)]);
    let one_cpu = [wide(1, 5)];
    let free = simulate(&two, &one_cpu, &bills(false)).unwrap();
    let billed = simulate(&two, &one_cpu, &bills(true)).unwrap();
    assert_eq!((free.pools[0].launches, free.pools[0].withdrawn), (2, 1));
    assert_eq!(
        worker_hours(&free),
        hours(40.0),
        "job 1 active from 60 s to 100 s"
    );
    assert_eq!(
        worker_hours(&billed),
        hours(100.0 + 5.0),
        "job 1 from 0 s, job 2 from 85 s to 90 s"
    );
}

#[test]
fn idle_workers_take_later_bundles_and_exit_when_idle() {
    let config = SimConfig {
        worker_idle: Duration::from_secs(30),
        ..SimConfig::default()
    };
    // The second bundle comes while the worker is idle: no launch, no wait. The third comes
    // after the worker exited (idle from 160 s, gone at 190 s): a new launch.
    let work = trace(&[(0.0, 100.0), (170.0, 10.0), (400.0, 10.0)]);
    let report = simulate(&work, &[pool("cpu", 5)], &config).unwrap();
    let cpu = &report.pools[0];
    assert_eq!(cpu.launches, 2);
    assert_eq!(cpu.bundles_run, 3);
    // Waits: 60 s, 0 s, and 400 → tick 400, active 460.
    assert_eq!(cpu.wait.p50_seconds, Some(60.0));
    assert_eq!(cpu.wait.max_seconds, Some(60.0));
    let mut waits = vec![60_000, 0, 60_000];
    assert_eq!(cpu.wait, WaitStats::of(&mut waits));
}

#[test]
fn stuck_jobs_are_replaced_by_the_next_pool_and_failures_back_off() {
    let mut first = pool("first", 3);
    first.pending_timeout = Some(Duration::from_secs(120));
    let second = PoolPolicy {
        cost: 1.0,
        ..pool("second", 3)
    };
    let config = SimConfig {
        stuck_rate: 1.0,
        drain: Duration::from_secs(3600),
        ..SimConfig::default()
    };
    let report = simulate(&trace(&[(0.0, 10.0)]), &[first, second], &config).unwrap();
    assert!(report.pools[0].stuck_stops >= 1, "{report:?}");
    assert!(report.pools[1].launches >= 1, "{report:?}");
    assert!(report.drained, "every job is stuck: nothing ever runs");
    let config = SimConfig {
        failure_rate: 1.0,
        drain: Duration::from_secs(3600),
        ..SimConfig::default()
    };
    let report = simulate(&trace(&[(0.0, 10.0)]), &[pool("cpu", 3)], &config).unwrap();
    let cpu = &report.pools[0];
    // Backoff 5, 10, 20, 30 min: far fewer launches than one per tick for an hour.
    assert!((3..=6).contains(&cpu.launches), "{cpu:?}");
    assert_eq!(cpu.failures, cpu.launches);
}

/// A pool of `cpus`-CPU workers (16 GiB: room for eight bundles of the server's 2 GiB default).
fn wide(cpus: u32, max: u32) -> PoolPolicy {
    PoolPolicy {
        max,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 10,
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(cpus, 0, 16 * 1024))
    }
}

#[test]
fn workers_hold_several_bundles_and_the_plan_buys_what_the_server_uses() {
    let work = trace(&[(0.0, 100.0); 4]);
    // Planned on the server's model: one 4-CPU worker, the server starts all four on it.
    let packed = simulate(&work, &[wide(4, 4)], &SimConfig::default()).unwrap();
    let cpu = &packed.pools[0];
    assert_eq!(
        (cpu.launches, cpu.unused_launches, cpu.bundles_run),
        (1, 0, 4)
    );
    assert_eq!(cpu.wait.max_seconds, Some(60.0));
    assert_eq!(cpu.peak_workers, 1);
    // Planned one bundle a worker (before #29): four bought, the first to check in takes all
    // four, three idle out having run nothing.
    let one_each = SimConfig {
        server_model: false,
        ..SimConfig::default()
    };
    let today = simulate(&work, &[wide(4, 4)], &one_each).unwrap();
    let cpu = &today.pools[0];
    assert_eq!(
        (cpu.launches, cpu.unused_launches, cpu.bundles_run),
        (4, 3, 4)
    );
}

#[test]
fn an_owner_runs_within_their_quota_and_no_worker_is_bought_for_the_rest() {
    let csv = "time,cpus,owner,duration\n0,1,carol,100\n0,1,carol,100\n0,1,carol,100\n";
    let work = Workload::parse(csv).unwrap();
    let config = SimConfig {
        quotas: [("carol".to_owned(), 1)].into(),
        ..SimConfig::default()
    };
    let report = simulate(&work, &[wide(1, 3)], &config).unwrap();
    let cpu = &report.pools[0];
    // One at a time on one worker: starts at 60, 160 and 260 s.
    assert_eq!(
        (cpu.launches, cpu.unused_launches, cpu.bundles_run),
        (1, 0, 3)
    );
    let mut waits = vec![60_000, 160_000, 260_000];
    assert_eq!(cpu.wait, WaitStats::of(&mut waits));
    assert_eq!(report.simulated_seconds, 360.0);
    // Without the model, three workers for bundles the server starts one at a time.
    let one_each = SimConfig {
        server_model: false,
        ..config
    };
    let today = simulate(&work, &[wide(1, 3)], &one_each).unwrap();
    assert_eq!(today.pools[0].launches, 3);
}

#[test]
fn estimates_are_scored_and_learn_the_check_in_time() {
    let config = SimConfig {
        worker_idle: Duration::from_secs(30),
        ..SimConfig::default()
    };
    // The first bundle's estimate is the prior (startup_grace, 30 s) for a 60 s start; the
    // second comes after that worker exited and is estimated with the 60 s learned.
    let work = trace(&[(0.0, 10.0), (1000.0, 10.0)]);
    let report = simulate(&work, &[pool("cpu", 2)], &config).unwrap();
    let all = &report.estimates[0];
    assert_eq!((all.kind.as_str(), all.scored), ("all", 2));
    let checkin = (report.estimates.iter())
        .find(|e| e.kind == "worker_checkin")
        .unwrap();
    assert_eq!(checkin.scored, 2);
    assert_eq!(
        (checkin.error.p50_seconds, checkin.error.max_seconds),
        (Some(0.0), Some(30.0))
    );
}

#[test]
fn unrunnable_bundles_do_not_hold_the_end() {
    let mut csv = String::from("time,gpus,duration\n0,1,10\n0,0,10\n");
    csv.push_str("5,0,10\n");
    let report = simulate(
        &Workload::parse(&csv).unwrap(),
        &[pool("cpu", 2)],
        &SimConfig::default(),
    )
    .unwrap();
    assert_eq!(
        (report.unrunnable, report.finished, report.drained),
        (1, 2, false)
    );
    assert_eq!(report.staged_for_no_pool, 1);
}

#[test]
fn invalid_settings_are_refused() {
    let work = trace(&[(0.0, 1.0)]);
    let bad = SimConfig {
        failure_rate: 1.5,
        ..SimConfig::default()
    };
    assert!(simulate(&work, &[pool("a", 1)], &bad).is_err());
    assert!(simulate(&work, &[], &SimConfig::default()).is_err());
    assert!(simulate(&work, &[pool("a", 1), pool("a", 2)], &SimConfig::default()).is_err());
}

/// The simulator shows the policy at most `Σ max·cpus + max(max·cpus) + 1` bundles of each
/// class; launches and stops must be those of the full list, over random pools, jobs and
/// queues, planning one bundle a worker or packed.
#[test]
fn policy_view_is_exact() {
    let mut rng = SplitMix64::new(99);
    for case in 0..2000 {
        let pools: Vec<PoolPolicy> = (0..1 + rng.between(0, 2))
            .map(|i| PoolPolicy {
                min: rng.between(0, 1) as u32,
                max: 1 + rng.between(0, 4) as u32,
                cost: rng.between(0, 2) as f64,
                launch_mode: if rng.between(0, 3) == 0 {
                    LaunchMode::Compat
                } else {
                    LaunchMode::Target
                },
                max_launches_per_tick: 1 + rng.between(0, 5) as u32,
                min_seconds_between_workers: 0,
                pending_timeout: None,
                tag: (i == 2).then(|| "gpu".to_owned()),
                ..PoolPolicy::new(
                    format!("p{i}"),
                    WorkerShape::from_flags(1 + i as u32, i as u32, 4096),
                )
            })
            .map(|p| PoolPolicy {
                max_launches_per_tick: if p.launch_mode == LaunchMode::Compat {
                    1
                } else {
                    p.max_launches_per_tick
                },
                ..p
            })
            .collect();
        let observations: Vec<PoolObservation> = pools
            .iter()
            .map(|p| PoolObservation {
                jobs: (0..rng.between(0, u64::from(p.max)))
                    .map(|j| ObservedJob {
                        id: format!("{}-{j}", p.name),
                        state: if rng.between(0, 1) == 0 {
                            JobState::Pending
                        } else {
                            JobState::Active
                        },
                        pending_for: Duration::ZERO,
                        active_for: Duration::from_secs(rng.between(0, 100)),
                        checkin: Default::default(),
                        launched_here: true,
                        pending: PendingKind::Queued,
                    })
                    .collect(),
                ..PoolObservation::default()
            })
            .collect();
        let kinds = [
            (1, 0, ""),
            (2, 0, ""),
            (1, 2, "gpu"),
            (3, 0, ""),
            (9, 0, ""),
        ];
        let sum_max: u64 = pools.iter().map(|p| u64::from(p.max)).sum();
        let bundles: Vec<(usize, StagedBundle)> = (0..rng.between(0, 6 * sum_max + 6))
            .map(|b| {
                let k = rng.between(0, kinds.len() as u64 - 1) as usize;
                let (cpus, gpus, queue) = kinds[k];
                (
                    k,
                    StagedBundle {
                        request_cpus: cpus,
                        request_gpus: gpus,
                        request_queue: queue.into(),
                        ..StagedBundle::new(format!("b{b}"))
                    },
                )
            })
            .collect();
        // The cap of a kind: Σ max·cpus + the largest max·cpus over the pools that fit it,
        // plus one (a worker of `cpus` CPUs holds at most that many bundles).
        let caps: Vec<usize> = kinds
            .iter()
            .map(|&(cpus, gpus, queue)| {
                let probe = StagedBundle {
                    request_cpus: cpus,
                    request_gpus: gpus,
                    request_queue: queue.into(),
                    ..StagedBundle::new("probe")
                };
                let maxes: Vec<usize> = pools
                    .iter()
                    .filter(|p| crate::pools::misfit(p, &probe).is_none())
                    .map(|p| p.max as usize * p.shape.cpus.max(1) as usize)
                    .collect();
                maxes.iter().sum::<usize>() + maxes.iter().max().unwrap_or(&0) + 1
            })
            .collect();
        let mut seen = [0usize; 5];
        let view: Vec<StagedBundle> = bundles
            .iter()
            .filter(|(k, _)| {
                seen[*k] += 1;
                seen[*k] <= caps[*k]
            })
            .map(|(_, b)| b.clone())
            .collect();
        // One bundle a worker, or packed on the server's model (as the simulator plans).
        let server = (rng.between(0, 1) == 0).then(|| crate::pools::ServerView {
            owners: crate::dispatch::Owners {
                root: "codalab".into(),
                manager: "codalab".into(),
                ..Default::default()
            },
            ..Default::default()
        });
        let plan = |bundles: Vec<StagedBundle>| {
            let decision = plan_pools(
                &PoolsObservation {
                    times: Vec::new(),
                    server: server.clone(),
                    bundles,
                    pools: observations.clone(),
                },
                &pools,
                Duration::from_secs(1000),
            );
            decision
                .pools
                .iter()
                .map(|d| (d.launches, d.stops.clone(), d.target))
                .collect::<Vec<_>>()
        };
        let full = plan(bundles.iter().map(|(_, b)| b.clone()).collect());
        assert_eq!(full, plan(view), "case {case}: {pools:?}");
    }
}

/// The speed figure of the simulator: `cargo test --release -p codalab-wm-core --lib
/// million_bundles -- --ignored --nocapture`.
#[test]
#[ignore = "a timing run; use --release"]
fn million_bundles() {
    let mix: Vec<BundleTemplate> = [
        "cpus=1,memory=2g,duration=40,weight=8",
        "cpus=4,memory=24g,duration=60,weight=1",
        "gpus=1,queue=gpu,memory=8g,duration=120,weight=1",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let started = std::time::Instant::now();
    let workload = Workload::poisson(PoissonRate { per_second: 2.0 }, 1_000_000, &mix, 1);
    let generated = started.elapsed();
    let target = |name: &str, max, cpus, gpus, memory_gb: u64| PoolPolicy {
        max,
        max_launches_per_tick: 10,
        min_seconds_between_workers: 0,
        pending_timeout: Some(Duration::from_secs(600)),
        ..PoolPolicy::new(name, WorkerShape::from_flags(cpus, gpus, memory_gb * 1024))
    };
    let pools = [
        target("cpu", 100, 4, 0, 16),
        PoolPolicy {
            cost: 5.0,
            ..target("overflow", 50, 8, 0, 32)
        },
        PoolPolicy {
            tag: Some("gpu".into()),
            ..target("gpu", 20, 8, 1, 64)
        },
    ];
    let config = SimConfig {
        failure_rate: 0.02,
        stuck_rate: 0.02,
        start_latency: (Duration::from_secs(20), Duration::from_secs(90)),
        worker_idle: Duration::from_secs(300),
        ..SimConfig::default()
    };
    let report = simulate(&workload, &pools, &config).unwrap();
    println!(
        "generated 1,000,000 arrivals in {generated:?}; simulated {} ticks in {:?} in all",
        report.ticks,
        started.elapsed()
    );
    println!("{:#?}", report.total_wait);
}

/// The simulator runs the manager's tick engine: a budget stops launches in a simulation as
/// it does in the manager (it used to simulate as if there were none).
#[test]
fn a_budget_caps_launches_in_the_simulation_as_in_the_manager() {
    let rows: Vec<(f64, f64)> = (0..40).map(|_| (0.0, 3600.0)).collect();
    let work = trace(&rows);
    let run = |budget: crate::budget::BudgetLimits, pool_budget| {
        let config = SimConfig {
            budget,
            drain: Duration::from_secs(4 * 3600),
            ..SimConfig::default()
        };
        let policy = PoolPolicy {
            budget: pool_budget,
            ..pool("cpu", 20)
        };
        simulate(&work, &[policy], &config).unwrap()
    };
    let two_hours = crate::budget::BudgetLimits {
        max_worker_hours_per_day: Some(2.0),
        max_cost_per_day: None,
    };
    let free = run(Default::default(), Default::default());
    let overall = run(two_hours, Default::default());
    let own = run(Default::default(), two_hours);
    let (free_cpu, free_end) = (&free.pools[0], free.simulated_seconds);
    assert_eq!(free_cpu.launches, 20, "{free_cpu:?}");
    for capped in [&overall, &own] {
        let cpu = &capped.pools[0];
        // Each launch reserves its minimum life (600 s idle) against the 2 h: 12 launches,
        // then none (the budget holds launches, not the workers running).
        assert_eq!((cpu.launches, cpu.peak_workers), (12, 12), "{cpu:?}");
        assert!(capped.simulated_seconds > free_end, "{cpu:?}");
    }
}

/// A worker that ended stays on the server's list for `ghost` (CodaLab 1.7.5 forgets it 60 s
/// after its last check-in): the server offers it the next bundle first, which waits for it to
/// go, and the manager, which sees it listed with room, launches for that bundle only then.
/// Timeline: A runs 10–30 s on a worker active at 10 s, which exits idle at 60 s; B arrives at
/// 70 s. Without ghosts a worker is launched at 70 s and B starts at 80 s. With a 60 s ghost
/// (listed until 120 s) the server offers B to it from 70.001 s, 1.2 s an offer and a round a
/// second after each, and forgets it at 120 s, between two offers: the manager's tick of
/// 120 s sees it gone and launches, and B starts at 130 s.
#[test]
fn an_exited_workers_ghost_holds_the_next_bundle_until_the_server_forgets_it() {
    let config = |ghost: Option<u64>| SimConfig {
        worker_idle: Duration::from_secs(30),
        ghost: ghost.map(Duration::from_secs),
        ..starting_in(10)
    };
    let workload = trace(&[(0.0, 20.0), (70.0, 20.0)]);
    let waits = |ghost| {
        let report = simulate(&workload, &[pool("cpu", 5)], &config(ghost)).unwrap();
        (report.total_wait.max_seconds, report.pools[0].launches)
    };
    assert_eq!(waits(None), (Some(10.0), 2));
    assert_eq!(waits(Some(60)), (Some(60.0), 2));
    // With min 1 the manager replaces the worker at once: A runs 10–30 s on a worker active at
    // 10 s, which exits idle (90 s) at 120 s; the next, launched at the tick of 120 s, is
    // active at 130 s; B arrives at 140 s. Without ghosts B starts at once. With one, the
    // server offers B to the ghost first (the dispatch model keeps ghosts first between equally
    // fit workers), which costs its dispatch 1.2 s, then to the next worker of its round, the
    // new one: B waits 1.2 s, on every seed (the waits are A's 10 s and B's, p50 is B's).
    let early = trace(&[(0.0, 20.0), (140.0, 20.0)]);
    let kept = |ghost, seed| {
        let policy = PoolPolicy {
            min: 1,
            ..pool("cpu", 5)
        };
        let config = SimConfig {
            seed,
            worker_idle: Duration::from_secs(90),
            ..config(ghost)
        };
        let report = simulate(&early, &[policy], &config).unwrap();
        let wait = &report.pools[0].wait;
        (
            report.finished,
            tenths(wait.p50_seconds.unwrap()),
            tenths(wait.max_seconds.unwrap()),
        )
    };
    for seed in 1..=8 {
        assert_eq!(kept(None, seed), (2, 0.0, 10.0), "A waits 10 s, B none");
        assert_eq!(
            kept(Some(60), seed),
            (2, 1.2, 10.0),
            "B waits for its offer to the ghost"
        );
    }
}

/// A pool whose workers wait longer for a run than the server lists an exited one
/// ([`crate::checkin::outlives_the_listing`]) launches at once for a bundle that the listed
/// worker would be offered, so the new worker boots while the server forgets it. Timeline
/// (workers start in 50 s, idle 90 s): A runs 50–70 s on a worker that exits idle at 160 s;
/// B arrives at 170 s; the ghost is listed until 220 s. Launched at 170 s, the new worker is up
/// at 220 s, as the server forgets the ghost between two of its 1.2 s offers of B, and B
/// starts on it then (220 s); launched when the ghost is gone, B would wait over 100 s. At
/// 30 s idle (a worker that would exit unused before the ghost goes) the launch waits.
#[test]
fn a_pool_whose_workers_outlive_the_listing_launches_while_an_exited_worker_is_listed() {
    let workload = trace(&[(0.0, 20.0), (170.0, 20.0)]);
    let b_waits = |idle: u64| {
        let mut policy = pool("cpu", 5);
        policy.min = 0;
        let config = SimConfig {
            worker_idle: Duration::from_secs(idle),
            ghost: Some(Duration::from_secs(60)),
            ..starting_in(50)
        };
        let report = simulate(&workload, &[policy], &config).unwrap();
        assert_eq!(report.pools[0].launches, 2, "idle {idle}");
        tenths(report.total_wait.max_seconds.unwrap())
    };
    assert_eq!(b_waits(90), 50.0);
    // At 30 s idle the pool counts the listed worker's room, as the server does: A's worker
    // exits at 100 s, B arrives at 110 s, the server forgets the ghost at 160 s (between two
    // of its offers of B), and the launch comes at that tick.
    let late = trace(&[(0.0, 20.0), (110.0, 20.0)]);
    let mut policy = pool("cpu", 5);
    policy.min = 0;
    let config = SimConfig {
        worker_idle: Duration::from_secs(30),
        ghost: Some(Duration::from_secs(60)),
        ..starting_in(50)
    };
    let report = simulate(&late, &[policy], &config).unwrap();
    assert_eq!(
        report.total_wait.max_seconds,
        Some(100.0),
        "B (110 s) waits for the server to forget the ghost (160 s, between two offers), the tick of 160 s and a launch (+50 s)"
    );
}

/// With `checkin_gap` a worker takes one bundle per check-in, and the server's dispatch waits
/// for the check-in of the worker it offers a bundle. Timeline (gap 5 s): three 1-CPU bundles
/// at 0 s, two 2-CPU workers active at 10 s. The first fills first: A at 10 s, B at its next
/// check-in (15.6 s: the check-in that brought A ends 0.6 s after it began, and the next comes
/// 5 s later); the round that began at 10 s had only the first worker (the second was not yet
/// listed), so C waits for the next round, 1 s later, and the second's next check-in (20 s).
/// Without it, A and B start at 10 s on the first worker, C at 10 s on the second.
#[test]
fn a_worker_takes_one_bundle_per_check_in_and_fills_before_the_next() {
    let workload = trace(&[(0.0, 100.0), (0.0, 100.0), (0.0, 100.0)]);
    let cases = [(None, (10.0, 10.0)), (Some(5), (15.6, 20.0))];
    for (gap, (p50, max)) in cases {
        let config = SimConfig {
            checkin_gap: gap.map(Duration::from_secs),
            ..starting_in(10)
        };
        let report = simulate(&workload, &[pool("cpu", 5)], &config).unwrap();
        let wait = &report.total_wait;
        assert_eq!(report.pools[0].launches, 2, "{gap:?}");
        assert_eq!(
            (wait.p50_seconds, wait.max_seconds),
            (Some(p50), Some(max)),
            "{gap:?}"
        );
    }
}

/// With `checkin_gap` the room of a run that ended comes back at the worker's next check-in,
/// which reports the run gone, not when its bundle is `ready`. Timeline (gap 5 s, one 2-CPU
/// worker, active at 10 s): A (33 s) starts at 10 s, B at the next check-in (15.6 s), which
/// ends at 16.2 s; the cycle's check-ins then begin at 21.2 s, 31.2 s, 41.2 s … A ends at 43 s,
/// inside the check-in that began at 41.2 s: the next, at 51.2 s, reports it, and C starts in
/// it. Counted free at A's end, C would start at 43 s, as it does without check-ins.
#[test]
fn a_runs_room_comes_back_at_the_check_in_that_reports_it_gone() {
    let workload = trace(&[(0.0, 33.0), (0.0, 100.0), (0.0, 100.0)]);
    let c_waits = |gap: Option<u64>| {
        let config = SimConfig {
            checkin_gap: gap.map(Duration::from_secs),
            ..starting_in(10)
        };
        let report = simulate(&workload, &[pool("cpu", 1)], &config).unwrap();
        assert_eq!(report.finished, 3, "{gap:?}");
        tenths(report.total_wait.max_seconds.unwrap())
    };
    assert_eq!(c_waits(None), 43.0, "C takes A's room as A ends");
    assert_eq!(
        c_waits(Some(5)),
        51.2,
        "C waits for the check-in after A's end"
    );
}

/// The server's dispatch round takes the workers listed at its start, and offers each bundle
/// to each listed ghost it fits, 1.2 s each, before a live worker. Timeline (min 1, idle
/// 90 s, workers start in 10 s): A runs 10–30 s on a worker that exits at 120 s, listed until
/// 180 s; its replacement, launched at the tick of 120 s, is active at 130 s. B and C arrive
/// at 121 s: the rounds that begin at 121 s, 124.4 s and 127.8 s (each 1 s after the last
/// ended) have no live worker, so each is offered to the ghost only; the new worker checks in
/// during the third, which ends at 130.2 s. The next round, at 131.2 s, has it, and offers
/// each to the ghost first again: B starts at 132.4 s (11.4 s), C at 133.6 s (12.6 s). (Were
/// the new worker taken as it checked in, C would start at 130.2 s.) Without ghosts both start
/// when the new worker is active (9 s).
#[test]
fn a_round_offers_each_bundle_to_the_ghosts_and_takes_the_workers_listed_at_its_start() {
    let workload = trace(&[(0.0, 20.0), (121.0, 20.0), (121.0, 20.0)]);
    let b_and_c = |ghost: Option<u64>| {
        let policy = PoolPolicy {
            min: 1,
            ..pool("cpu", 5)
        };
        let config = SimConfig {
            worker_idle: Duration::from_secs(90),
            ghost: ghost.map(Duration::from_secs),
            ..starting_in(10)
        };
        let report = simulate(&workload, &[policy], &config).unwrap();
        assert_eq!(report.finished, 3, "{ghost:?}");
        let wait = &report.pools[0].wait;
        (
            tenths(wait.p50_seconds.unwrap()),
            tenths(wait.max_seconds.unwrap()),
        )
    };
    assert_eq!(b_and_c(None), (9.0, 10.0), "A waits 10 s, B and C 9 s");
    assert_eq!(
        b_and_c(Some(60)),
        (11.4, 12.6),
        "B and C wait for a round that lists the worker"
    );
}

/// With `until` a run goes on past its last bundle, until then and until its workers have
/// left, billed as they wait for runs. Timeline (workers start in 10 s): A runs 10–30 s on the
/// first worker. Without `until` the run ends with A (20 s billed); until 50 s, a worker that
/// idles 100 s is billed until it exits at 130 s (120 s); one that never exits (idle 0) until
/// `until`, its idle seconds (0) and a minute after: to 110 s (100 s). (Worker-hours are
/// rounded to thousandths.)
#[test]
fn with_until_a_run_bills_its_workers_until_they_leave() {
    let workload = trace(&[(0.0, 20.0)]);
    let run = |until: Option<u64>, idle: u64| {
        let config = SimConfig {
            worker_idle: Duration::from_secs(idle),
            until: until.map(Duration::from_secs),
            ..starting_in(10)
        };
        let report = simulate(&workload, &[pool("cpu", 5)], &config).unwrap();
        (report.pools[0].worker_hours, report.simulated_seconds)
    };
    assert_eq!(run(None, 100), (0.006, 30.0));
    assert_eq!(run(Some(50), 100), (0.033, 130.0));
    assert_eq!(run(Some(50), 0), (0.028, 110.0));
}

/// `cl-worker` looks at its idle time between check-ins, from when its run is gone: with
/// `checkin_gap` its idle time counts from the check-in that reports its last run gone, and an
/// idle exit that falls in a check-in waits for its end. Timeline: a worker active at 10 s runs
/// A 10–20 s; its check-ins begin at 15.6 s (after the one that brought A) and every 10 s
/// after; A's end falls in the one of 15.6–20.6 s and the next (25.6 s) reports it, so the
/// worker is idle 31 s to 56.6 s, inside the check-in of 55.6–60.6 s, and exits at 60.6 s.
/// Without check-ins it is idle from 20 s and exits at 51 s. The run goes on to 30 s, then
/// until its worker has left (worker-hours are rounded to thousandths, so the run's end says
/// when).
#[test]
fn an_idle_exit_counts_from_the_report_and_waits_for_the_check_in_it_falls_in() {
    let workload = trace(&[(0.0, 10.0)]);
    // When the worker left: the run's end.
    let left = |gap: Option<u64>| {
        let config = SimConfig {
            worker_idle: Duration::from_secs(31),
            checkin_gap: gap.map(Duration::from_secs),
            until: Some(Duration::from_secs(30)),
            ..starting_in(10)
        };
        let report = simulate(&workload, &[pool("cpu", 5)], &config).unwrap();
        assert_eq!(report.pools[0].launches, 1);
        tenths(report.simulated_seconds)
    };
    assert_eq!(left(None), 51.0);
    assert_eq!(left(Some(5)), 60.6);
}
