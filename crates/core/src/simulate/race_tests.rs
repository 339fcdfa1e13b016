//! The simulator with a pool that races its launches (`race`, issue #42): the manager looks
//! again every `race_watch` while a race is open, as its loop does, so the losers are
//! withdrawn before they start.

use super::*;
use crate::bundle::WorkerShape;

const S: fn(u64) -> Duration = Duration::from_secs;

/// A pool of 2-CPU workers racing `race` jobs per worker needed, watched every `watch`.
fn raced(race: f64, watch: u64) -> PoolPolicy {
    PoolPolicy {
        max: 10,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 10,
        race,
        race_watch: S(watch),
        ..PoolPolicy::new("slurm", WorkerShape::from_flags(2, 0, 4096))
    }
}

/// One 1-CPU bundle staged at 0 s that runs 100 s.
fn one_bundle() -> Workload {
    Workload::parse("time,cpus,duration\n0,1,100\n").unwrap()
}

/// The ticks follow the race: at 0 s the pool launches two jobs for the bundle's worker;
/// from the next tick (5 s) they pend until 60 s, so the manager ticks every second (its
/// `race_watch`) until then, and every 5 s (`sleep_time`) once the bundle runs and nothing
/// is raced. A pool that does not race ticks every 5 s throughout.
#[test]
fn the_manager_ticks_every_race_watch_while_a_race_is_open() {
    let config = SimConfig {
        start_latency: (S(60), S(60)),
        drain: S(80),
        ..SimConfig::default()
    };
    let ticks = |pool: PoolPolicy| -> Vec<u64> {
        let (_, trace) = simulate_traced(&one_bundle(), &[pool], &config).unwrap();
        trace.iter().map(|t| t.at.as_secs()).collect()
    };
    let racing = ticks(raced(2.0, 1));
    let (watched, after): (Vec<u64>, Vec<u64>) = racing.iter().partition(|at| **at < 60);
    let expected: Vec<u64> = std::iter::once(0).chain(5..60).collect();
    assert_eq!(watched, expected, "{racing:?}");
    assert_eq!(after.first(), Some(&60), "{racing:?}");
    assert!(
        after.windows(2).all(|w| w[1] - w[0] == 5),
        "back to sleep_time once the bundle runs: {racing:?}"
    );
    let plain = ticks(raced(PoolPolicy::NO_RACE, 1));
    assert!(plain.windows(2).all(|w| w[1] - w[0] == 5), "{plain:?}");
}

/// Two jobs race for one bundle, each starting 60–66 s after its launch (the seed draws
/// which). The first to start takes the bundle; the other is withdrawn at the next tick if
/// it has not started by then, else it boots a worker that finds nothing (unused). Over 40
/// seeds, 10 losers start in that gap when the race is watched every second, 33 at the 5 s
/// `sleep_time` (with the watch broken, 33 and 33).
#[test]
fn a_watched_race_withdraws_its_losers_before_they_start() {
    let unused = |watch: u64| -> (u64, u64) {
        (1..=40)
            .map(|seed| {
                let config = SimConfig {
                    start_latency: (S(60), S(66)),
                    seed,
                    ..SimConfig::default()
                };
                let report = simulate(&one_bundle(), &[raced(2.0, watch)], &config).unwrap();
                let pool = &report.pools[0];
                assert_eq!(pool.launches, 2, "seed {seed}");
                (pool.unused_launches, pool.withdrawn)
            })
            .fold((0, 0), |(u, w), (a, b)| (u + a, w + b))
    };
    let (watched, withdrawn) = unused(1);
    let (paced, _) = unused(5);
    assert_eq!(
        watched + withdrawn,
        40,
        "each seed's loser is withdrawn or unused"
    );
    assert!(
        watched * 3 < paced,
        "unused losers: {watched} of 40 watched every second, {paced} at 5 s"
    );
}
