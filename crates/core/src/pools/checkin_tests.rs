//! Table tests of the check-in rules of the pool policy: idle checked-in workers are capacity,
//! busy ones are not, lost ones are stopped and the pool launches nothing that tick.

use super::*;
use crate::checkin::JobCheckin;
use crate::policy::Reason;

const S: fn(u64) -> Duration = Duration::from_secs;

fn cpu(max: u32) -> PoolPolicy {
    PoolPolicy {
        min_seconds_between_workers: 0,
        max_launches_per_tick: 100,
        max,
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(4, 0, 8192))
    }
}

fn active(id: &str, for_seconds: u64, checkin: JobCheckin) -> ObservedJob {
    ObservedJob {
        checkin,
        ..ObservedJob::new(id, JobState::Active, S(0), S(for_seconds))
    }
}

const IDLE: JobCheckin = JobCheckin::CheckedIn {
    runs: 0,
    terminating: false,
};
const BUSY: JobCheckin = JobCheckin::CheckedIn {
    runs: 1,
    terminating: false,
};
const TERMINATING: JobCheckin = JobCheckin::CheckedIn {
    runs: 0,
    terminating: true,
};

fn missing(seconds: u64, fresh: bool) -> JobCheckin {
    JobCheckin::Missing {
        unseen_for: S(seconds),
        was_seen: false,
        fresh,
    }
}

fn plan(jobs: Vec<ObservedJob>, bundles: u32, policy: &PoolPolicy) -> PoolDecision {
    let observed = PoolsObservation {
        bundles: (0..bundles)
            .map(|i| StagedBundle::new(format!("0x{i}")))
            .collect(),
        pools: vec![PoolObservation {
            jobs,
            ..PoolObservation::default()
        }],
    };
    plan_pools(&observed, std::slice::from_ref(policy), S(10_000))
        .pools
        .remove(0)
}

#[test]
fn idle_checked_in_workers_are_capacity_busy_ones_are_not() {
    // (case, jobs, staged bundles, launches)
    let cases: Vec<(&str, Vec<ObservedJob>, u32, u32)> = vec![
        (
            "an idle worker takes the one bundle: no launch",
            vec![active("a", 3600, IDLE)],
            1,
            0,
        ),
        (
            "two idle workers, three bundles: one launch",
            vec![active("a", 3600, IDLE), active("b", 3600, IDLE)],
            3,
            1,
        ),
        (
            "a busy worker is no capacity",
            vec![active("a", 5, BUSY)],
            1,
            1,
        ),
        (
            "a terminating worker takes nothing new",
            vec![active("a", 3600, TERMINATING)],
            1,
            1,
        ),
        (
            "not yet checked in, within the timeout: still starting",
            vec![active("a", 200, missing(200, true))],
            1,
            0,
        ),
        (
            "no check-in information: presumed busy after the grace",
            vec![active("a", 3600, JobCheckin::Unknown)],
            1,
            1,
        ),
        (
            "no bundles: nothing launched for idle workers",
            vec![active("a", 3600, IDLE)],
            0,
            0,
        ),
    ];
    for (case, jobs, bundles, want) in cases {
        let decision = plan(jobs, bundles, &cpu(10));
        assert_eq!(decision.launches, want, "{case}: {:?}", decision.reasons);
        assert!(decision.stops.is_empty(), "{case}");
    }
}

#[test]
fn lost_workers_are_stopped_and_the_pool_launches_nothing_that_tick() {
    let jobs = vec![
        active("ok", 3600, BUSY),
        active("lost", 400, missing(400, true)),
    ];
    let decision = plan(jobs, 2, &cpu(10));
    assert_eq!(decision.stops, ["lost"]);
    assert_eq!(decision.launches, 0);
    assert!(decision.reasons.contains(&Reason::WorkerLost {
        job_id: "lost".into(),
        unseen_seconds: 400,
        timeout_seconds: 300,
        was_seen: false,
    }));
    // A stale view (the workers-info call failed) never makes a lost verdict.
    let decision = plan(vec![active("a", 400, missing(400, false))], 2, &cpu(10));
    assert!(decision.stops.is_empty(), "{:?}", decision.reasons);
    // The pool's own timeout decides.
    let patient = PoolPolicy {
        checkin_timeout: S(600),
        ..cpu(10)
    };
    assert!(
        plan(vec![active("a", 400, missing(400, true))], 1, &patient)
            .stops
            .is_empty()
    );
    // Compat keeps upstream's rules: states are shown, nothing is stopped.
    let compat = PoolPolicy {
        launch_mode: LaunchMode::Compat,
        max_launches_per_tick: 1,
        ..cpu(10)
    };
    assert!(
        plan(vec![active("a", 400, missing(400, true))], 1, &compat)
            .stops
            .is_empty()
    );
}

#[test]
fn never_more_than_max_whatever_the_check_ins() {
    let checkins = [
        IDLE,
        BUSY,
        TERMINATING,
        missing(10, true),
        missing(1000, true),
        missing(1000, false),
        JobCheckin::Unknown,
    ];
    for max in 0..4u32 {
        for n in 0..=max as usize {
            for (k, checkin) in checkins.iter().enumerate() {
                let jobs: Vec<ObservedJob> = (0..n)
                    .map(|i| {
                        active(
                            &format!("j{i}"),
                            1000,
                            if i % 2 == 0 {
                                *checkin
                            } else {
                                checkins[(k + i) % checkins.len()]
                            },
                        )
                    })
                    .collect();
                for bundles in [0, 1, 5, 50] {
                    let decision = plan(jobs.clone(), bundles, &cpu(max));
                    assert!(
                        n + decision.launches as usize <= max as usize,
                        "max {max}, {n} jobs, {checkin:?}: {decision:?}"
                    );
                }
            }
        }
    }
}
