//! Table tests of the check-in rules of the pool policy: idle checked-in workers are capacity,
//! busy and vanished ones are not, lost ones (never checked in) are stopped when this manager
//! launched them and the pool's check-ins are visible, and the pool launches nothing that tick.

use super::*;
use crate::backend::JobState;
use crate::bundle::{StagedBundle, WorkerShape};
use crate::checkin::JobCheckin;
use crate::policy::{NotStoppedWhy, Reason};
use std::time::Duration;

const S: fn(u64) -> Duration = Duration::from_secs;

fn cpu(max: u32) -> PoolPolicy {
    PoolPolicy {
        min_seconds_between_workers: 0,
        max_launches_per_tick: 100,
        max,
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(4, 0, 8192))
    }
}

/// A running job this manager launched.
fn active(id: &str, for_seconds: u64, checkin: JobCheckin) -> ObservedJob {
    ObservedJob {
        checkin,
        ..ObservedJob::new(id, JobState::Active, S(0), S(for_seconds)).launched_here()
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

fn not_yet(seconds: u64) -> JobCheckin {
    JobCheckin::NotYet {
        unseen_for: S(seconds),
    }
}

fn vanished(seconds: u64) -> JobCheckin {
    JobCheckin::Vanished {
        unseen_for: S(seconds),
    }
}

/// The plan for one pool whose check-ins have been seen.
fn plan(jobs: Vec<ObservedJob>, bundles: u32, policy: &PoolPolicy) -> PoolDecision {
    plan_seen(jobs, bundles, policy, true)
}

fn plan_seen(
    jobs: Vec<ObservedJob>,
    bundles: u32,
    policy: &PoolPolicy,
    checkins_seen: bool,
) -> PoolDecision {
    let observed = PoolsObservation {
        times: Vec::new(),
        server: None,
        bundles: (0..bundles)
            .map(|i| StagedBundle::new(format!("0x{i}")))
            .collect(),
        pools: vec![PoolObservation {
            jobs,
            checkins_seen,
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
            vec![active("a", 200, not_yet(200))],
            1,
            0,
        ),
        (
            "checked in, vanished: presumed busy",
            vec![active("a", 3600, vanished(3000))],
            1,
            1,
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
    let jobs = vec![active("ok", 3600, BUSY), active("lost", 400, not_yet(400))];
    let decision = plan(jobs, 2, &cpu(10));
    assert_eq!(decision.stops, ["lost"]);
    assert_eq!(decision.launches, 0);
    assert!(decision.reasons.contains(&Reason::WorkerLost {
        job_id: "lost".into(),
        unseen_seconds: 400,
        timeout_seconds: 300,
    }));
    // The pool's own timeout decides.
    let patient = PoolPolicy {
        checkin_timeout: S(600),
        ..cpu(10)
    };
    assert!(
        plan(vec![active("a", 400, not_yet(400))], 1, &patient)
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
        plan(vec![active("a", 400, not_yet(400))], 1, &compat)
            .stops
            .is_empty()
    );
}

#[test]
fn what_the_manager_may_not_prove_broken_or_did_not_launch_is_kept() {
    let pending = |id: &str, secs: u64| ObservedJob::new(id, JobState::Pending, S(secs), S(0));
    let stuck_policy = PoolPolicy {
        pending_timeout: Some(S(900)),
        ..cpu(10)
    };
    let not_ours = |job: ObservedJob| ObservedJob {
        launched_here: false,
        ..job
    };
    // (case, job, checkins seen, the rule that would stop it, why it is kept)
    let cases: Vec<(&str, ObservedJob, bool, &str, NotStoppedWhy)> = vec![
        (
            "another manager's (or a person's) job that never checks in",
            not_ours(active("other", 4000, not_yet(4000))),
            true,
            "worker_lost",
            NotStoppedWhy::NotLaunchedHere,
        ),
        (
            "no worker of the pool seen yet: maybe another account",
            active("invisible", 4000, not_yet(4000)),
            false,
            "worker_lost",
            NotStoppedWhy::NoCheckinSeen,
        ),
        (
            "another manager's job pending long",
            pending("queued", 5000),
            true,
            "pending_timeout",
            NotStoppedWhy::NotLaunchedHere,
        ),
    ];
    for (case, job, seen, rule, why) in cases {
        let decision = plan_seen(vec![job.clone()], 1, &stuck_policy, seen);
        assert!(decision.stops.is_empty(), "{case}: {decision:?}");
        let kept = decision.reasons.iter().find_map(|r| match r {
            Reason::NotStopped {
                job_id, rule, why, ..
            } if *job_id == job.id => Some((*rule, *why)),
            _ => None,
        });
        assert_eq!(kept, Some((rule, why)), "{case}: {:?}", decision.reasons);
    }
    // A worker that checked in is never stopped, however long it is gone, and a pending job
    // the server lists is not stuck.
    let gone = active("gone", 90_000, vanished(86_000));
    assert!(plan(vec![gone], 1, &stuck_policy).stops.is_empty());
    let listed = ObservedJob {
        checkin: IDLE,
        ..pending("listed", 5000).launched_here()
    };
    assert!(plan(vec![listed], 1, &stuck_policy).stops.is_empty());
    // Ours, pending past the timeout: stopped.
    let decision = plan(
        vec![pending("stuck", 5000).launched_here()],
        1,
        &stuck_policy,
    );
    assert_eq!(decision.stops, ["stuck"]);
}

#[test]
fn never_more_than_max_whatever_the_check_ins() {
    let checkins = [
        IDLE,
        BUSY,
        TERMINATING,
        not_yet(10),
        not_yet(1000),
        vanished(1000),
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
