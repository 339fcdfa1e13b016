//! The simulator with a free, queued Slurm partition beside a paid pool (issue #32): the
//! platform model and `spill_after` together, against hand-computed timelines.

use super::*;
use crate::bundle::WorkerShape;

const S: fn(u64) -> Duration = Duration::from_secs;

/// A free Slurm pool (accepting a 10-minute wait when `spill_after`) and a paid one.
fn pools(spill_after: Option<u64>) -> Vec<PoolPolicy> {
    let base = PoolPolicy {
        max: 5,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 10,
        ..PoolPolicy::new("slurm", WorkerShape::from_flags(2, 0, 4096))
    };
    vec![
        PoolPolicy {
            spill_after: spill_after.map(S),
            ..base.clone()
        },
        PoolPolicy {
            name: "cloud".into(),
            cost_per_hour: Some(1.0),
            ..base
        },
    ]
}

/// Slurm starts jobs in 30 s but is full for the first hour of every two.
fn config() -> SimConfig {
    let slurm = Platform {
        start_latency: Some((S(30), S(30))),
        busy: Some((S(7200), S(3600))),
        ..Platform::default()
    };
    SimConfig {
        platforms: [("slurm".to_owned(), slurm)].into(),
        ..SimConfig::default()
    }
}

/// The first pool as Spot on `platform`, falling back to the paid pool at its first
/// capacity event.
fn spot_and_fallback(platform: Platform) -> (Vec<PoolPolicy>, SimConfig) {
    let mut pools = pools(None);
    pools[0].fallback = Some(crate::pools::fallback::Fallback {
        after: 1,
        ..crate::pools::fallback::Fallback::to("cloud")
    });
    let config = SimConfig {
        platforms: [("slurm".to_owned(), platform)].into(),
        ..SimConfig::default()
    };
    (pools, config)
}

fn one_bundle() -> Workload {
    Workload::parse("time,cpus,duration\n0,1,100\n").unwrap()
}

#[test]
fn without_spill_after_the_bundle_waits_out_the_busy_hour_on_the_free_pool() {
    let report = simulate(&one_bundle(), &pools(None), &config()).unwrap();
    let (slurm, cloud) = (&report.pools[0], &report.pools[1]);
    assert_eq!((slurm.launches, cloud.launches), (1, 0));
    // Pending behind the busy spell until 3600 s, then placed and active 30 s later.
    assert_eq!(slurm.wait.max_seconds, Some(3630.0));
}

#[test]
fn past_spill_after_it_spills_to_the_paid_pool() {
    let report = simulate(&one_bundle(), &pools(Some(600)), &config()).unwrap();
    let (slurm, cloud) = (&report.pools[0], &report.pools[1]);
    assert_eq!((slurm.launches, cloud.launches), (1, 1));
    assert_eq!(cloud.bundles_run, 1, "the paid pool's worker runs it");
    // The Slurm job is queued once it has pended past its check-in time; its wait reads
    // as its age, past 600 s at the tick of 605 s: cloud launches, active 60 s later.
    assert_eq!(cloud.wait.max_seconds, Some(665.0));
}

#[test]
fn a_check_in_on_one_pool_is_not_taken_for_another_pools_queued_job() {
    let two = Workload::parse("time,cpus,duration\n0,1,100\n2000,1,100\n").unwrap();
    let report = simulate(&two, &pools(Some(600)), &config()).unwrap();
    let (slurm, cloud) = (&report.pools[0], &report.pools[1]);
    // The first spills; its cloud worker checks in at 665 s (launch uniques differ across
    // pools, so that check-in is not the Slurm job's) and takes it. The Slurm job, still
    // queued and no longer needed, has pended past spill_after: it is kept as the pool's
    // probe, not withdrawn. The second bundle at 2000 s is planned on it, reads its wait
    // (2000 s, past 600 s) and spills at once, to a second cloud worker active 60 s later.
    assert_eq!((slurm.launches, cloud.launches), (1, 2));
    assert_eq!((slurm.bundles_run, cloud.bundles_run), (0, 2));
    assert_eq!(slurm.withdrawn, 0);
    assert!(
        cloud.wait.p50_seconds.is_some_and(|w| w < 70.0),
        "{cloud:?}"
    );
}

#[test]
fn with_slurms_forecast_the_first_bundle_of_a_busy_spell_spills_at_once() {
    // #42 item 4: Slurm forecasts the queued job's start at the spell's end (3600 s). The
    // estimate reads it at the first listing, past spill_after: the bundle spills then,
    // not once the job's age has passed 600 s (665 s without it, above).
    let mut config = config();
    config.platforms.get_mut("slurm").unwrap().forecast = true;
    let report = simulate(&one_bundle(), &pools(Some(600)), &config).unwrap();
    let cloud = &report.pools[1];
    assert_eq!(cloud.bundles_run, 1, "{cloud:?}");
    assert_eq!(cloud.wait.max_seconds, Some(65.0), "{cloud:?}");
}

/// Issue #42's withdraw made every burst in a busy spell wait `spill_after` again: the queued
/// job that knew the queue was withdrawn once its bundle spilled. The probe keeps it.
#[test]
fn each_burst_of_a_busy_spell_after_the_first_spills_at_once() {
    let csv: String = std::iter::once("time,cpus,duration\n".to_owned())
        .chain((0..4).map(|i| format!("{},1,100\n", i * 900)))
        .collect();
    let workload = Workload::parse(&csv).unwrap();
    let report = simulate(&workload, &pools(Some(300)), &config()).unwrap();
    let (slurm, cloud) = (&report.pools[0], &report.pools[1]);
    assert_eq!((slurm.launches, cloud.bundles_run), (1, 4), "{slurm:?}");
    // The first waits spill_after and a cloud start; the other three at most a cloud start
    // (one lands on the first cloud worker, still idle).
    assert_eq!(cloud.wait.max_seconds, Some(365.0), "{cloud:?}");
    assert!(
        cloud.wait.p50_seconds.is_some_and(|w| w < 70.0),
        "{cloud:?}"
    );
}

#[test]
fn a_job_placed_when_the_spell_ends_runs_so_a_new_bundle_waits_for_it() {
    let two = Workload::parse("time,cpus,duration\n0,1,100\n3605,1,100\n").unwrap();
    // `min = 1` keeps the Slurm job once the first bundle is taken (else it is withdrawn).
    let mut pools = pools(Some(600));
    pools[0].min = 1;
    let report = simulate(&two, &pools, &config()).unwrap();
    let (slurm, cloud) = (&report.pools[0], &report.pools[1]);
    // The first spills (as above). Its Slurm job gets a place when the spell ends at 3600 s
    // and is listed running, as Slurm lists it, while its worker starts: no longer queued,
    // so the second bundle is expected on it within the check-in time and does not spill.
    // Its worker is active at 3630 s: a 25 s wait.
    assert_eq!((slurm.launches, cloud.launches), (1, 1));
    assert_eq!((slurm.bundles_run, cloud.bundles_run), (1, 1));
    assert_eq!(slurm.wait.max_seconds, Some(25.0));
}

#[test]
fn slots_hold_jobs_beyond_them_pending_in_launch_order() {
    let one_slot = SimConfig {
        platforms: [(
            "slurm".to_owned(),
            Platform {
                slots: Some(1),
                ..Platform::default()
            },
        )]
        .into(),
        worker_max_runs: Some(1),
        ..SimConfig::default()
    };
    let two = Workload::parse("time,cpus,duration\n0,2,100\n0,2,100\n").unwrap();
    let report = simulate(&two, &pools(None)[..1], &one_slot).unwrap();
    // One slot: the second job gets it when the first exits after its run (60 + 100 s), and
    // its worker is active a start latency (60 s) later.
    assert_eq!(report.pools[0].wait.max_seconds, Some(220.0));
    let free = SimConfig {
        platforms: Default::default(),
        ..one_slot
    };
    let report = simulate(&two, &pools(None)[..1], &free).unwrap();
    assert_eq!(report.pools[0].wait.max_seconds, Some(60.0));
}

#[test]
fn a_stocked_out_spot_pool_sends_its_launches_to_its_fallback() {
    let (pools, config) = spot_and_fallback(Platform {
        stockout: Some((S(7200), S(3600))),
        ..Platform::default()
    });
    let report = simulate(&one_bundle(), &pools, &config).unwrap();
    let (spot, cloud) = (&report.pools[0], &report.pools[1]);
    // The tick at 0 s meets the stockout (a capacity event: on the fallback at once); the
    // tick at 5 s launches on the fallback, whose worker is active 60 s later.
    assert_eq!((spot.failures, spot.launches, spot.bundles_run), (1, 0, 0));
    assert_eq!((cloud.launches, cloud.bundles_run), (1, 1));
    assert_eq!(cloud.wait.max_seconds, Some(65.0));
}

#[test]
fn a_reclaimed_worker_loses_its_runs_and_sends_the_next_launches_to_the_fallback() {
    // Spot VMs live about a second once active: the first bundle's run (an hour) is lost
    // with its worker; the second, arriving after that, goes to the fallback.
    let (pools, config) = spot_and_fallback(Platform {
        reclaim: Some(S(1)),
        ..Platform::default()
    });
    let two = Workload::parse("time,cpus,duration\n0,1,3600\n600,1,100\n").unwrap();
    let report = simulate(&two, &pools, &config).unwrap();
    let (spot, cloud) = (&report.pools[0], &report.pools[1]);
    assert_eq!((spot.launches, spot.bundles_run, spot.lost_runs), (1, 1, 1));
    assert_eq!(
        (cloud.launches, cloud.bundles_run, cloud.lost_runs),
        (1, 1, 0)
    );
    assert_eq!((report.lost, report.finished, report.unfinished), (1, 1, 0));
    assert!(!report.drained, "a lost run does not hold the run open");
}

#[test]
fn a_reclaimed_preemptible_workers_run_is_staged_again_and_finishes_on_the_fallback() {
    // The Spot pool's workers start as `cl-worker --preemptible` (what the manager gives a
    // pool with a fallback): the server stages the runs of a reclaimed worker again, and they
    // run anew (here on the fallback, the Spot pool having failed once), none lost. The same
    // workload without `preemptible` loses them.
    let platform = Platform {
        reclaim: Some(S(600)),
        ..Platform::default()
    };
    let two = Workload::parse("time,cpus,duration\n0,1,3600\n600,1,100\n").unwrap();
    let (pools, mut config) = spot_and_fallback(platform);
    let lossy = simulate(&two, &pools, &config).unwrap();
    assert!(lossy.lost > 0 && lossy.pools[0].restaged_runs == 0);

    config.preemptible = ["slurm".to_owned()].into();
    let report = simulate(&two, &pools, &config).unwrap();
    let (spot, cloud) = (&report.pools[0], &report.pools[1]);
    assert_eq!(spot.lost_runs, 0);
    assert_eq!(spot.restaged_runs, lossy.pools[0].lost_runs);
    assert!(spot.rerun_hours > 0.0, "the reclaimed run had run a while");
    assert!(cloud.launches > 0, "the restaged run went nowhere");
    // A restaged run is no new start: two bundles started, both finished.
    assert_eq!(
        (
            report.started,
            report.lost,
            report.finished,
            report.unfinished
        ),
        (2, 0, 2, 0)
    );
}

/// `pools(None)` with the free pool hedged after `hedge_after` seconds on the paid one, which
/// takes `per_day` hedges a day.
fn hedged(hedge_after: u64, per_day: u32) -> Vec<PoolPolicy> {
    let mut pools = pools(None);
    pools[0].hedge_after = Some(S(hedge_after));
    pools[1].hedges_per_day = per_day;
    pools
}

#[test]
fn past_hedge_after_the_paid_pool_launches_too_and_its_worker_runs_the_bundle() {
    // #42 item 2. The bundle pends on Slurm's busy hour; past its check-in time its wait
    // reads as its age, past the 60 s accepted: the cloud launches for it too, and its worker
    // runs it. Slurm's job, still pending and needed by nothing, has pended past hedge_after:
    // it is kept as the pool's probe of its queue, not withdrawn.
    let report = simulate(&one_bundle(), &hedged(60, 5), &config()).unwrap();
    let (slurm, cloud) = (&report.pools[0], &report.pools[1]);
    assert_eq!((slurm.launches, cloud.launches), (1, 1));
    assert_eq!(cloud.bundles_run, 1, "the paid pool's worker runs it");
    assert_eq!(slurm.withdrawn, 0, "the free pool's launch is its probe");
    // Without a hedge the bundle waits out the hour (the first test): hedged, it starts
    // minutes in.
    assert!(
        cloud.wait.max_seconds.is_some_and(|w| w < 300.0),
        "{cloud:?}"
    );
    // With no hedge to spend, the bundle waits on Slurm as before.
    let report = simulate(&one_bundle(), &hedged(60, 0), &config()).unwrap();
    assert_eq!(report.pools[1].launches, 0);
    assert_eq!(report.pools[0].wait.max_seconds, Some(3630.0));
}

#[test]
fn the_paying_pool_launches_no_more_hedges_a_day_than_it_takes() {
    // Twenty hour-long bundles a few minutes apart in Slurm's busy hour, each filling a
    // worker, three hedges a day: the cloud launches for three of them; the rest wait for
    // Slurm.
    let csv: String = std::iter::once("time,cpus,duration\n".to_owned())
        .chain((0..20).map(|i| format!("{},2,3600\n", i * 150)))
        .collect();
    let workload = Workload::parse(&csv).unwrap();
    let mut pools = hedged(60, 3);
    pools[0].max = 20;
    let report = simulate(&workload, &pools, &config()).unwrap();
    assert_eq!(report.pools[1].launches, 3, "{:?}", report.pools[1]);
    assert_eq!(report.finished, 20);
}

/// `SimConfig::route` (a bench's clairvoyant router): the plan sends a bundle to the pool its
/// route names; the server dispatches it by its own queue, to any worker idle.
#[test]
fn a_routed_bundle_is_planned_on_its_pool_and_dispatched_as_the_server_does() {
    let mut tagged = pools(None);
    for pool in &mut tagged {
        pool.tag = Some(pool.name.clone());
    }
    let routed = SimConfig {
        route: vec!["cloud".into()],
        ..SimConfig::default()
    };
    // Config order launches on `slurm`; routed, on `cloud`, which runs it.
    let report = simulate(&one_bundle(), &tagged, &SimConfig::default()).unwrap();
    assert_eq!((report.pools[0].launches, report.pools[1].launches), (1, 0));
    let report = simulate(&one_bundle(), &tagged, &routed).unwrap();
    let (slurm, cloud) = (&report.pools[0], &report.pools[1]);
    assert_eq!((slurm.launches, cloud.launches), (0, 1));
    assert_eq!(cloud.bundles_run, 1);
    // The second bundle, routed to `cloud`, arrives when the first one's `slurm` worker is
    // idle: the server gives it that worker, and `cloud` buys nothing.
    let two = Workload::parse("time,cpus,duration\n0,1,100\n300,1,100\n").unwrap();
    let routed = SimConfig {
        route: vec!["slurm".into(), "cloud".into()],
        ..SimConfig::default()
    };
    let report = simulate(&two, &tagged, &routed).unwrap();
    let (slurm, cloud) = (&report.pools[0], &report.pools[1]);
    assert_eq!((slurm.bundles_run, cloud.launches), (2, 0), "{cloud:?}");
}
