//! Table tests of the withdraw rule of the pool policy (rule 5 of the module doc): a pending
//! job of this manager that never checked in is cancelled once the pool's capacity stands
//! above what its busy workers, its `min` and the waiting bundles it could run need; the
//! newest first; never a job on hold, another manager's, or one whose worker checked in.

use super::tests::plan2 as decide;
use super::*;
use crate::backend::{JobState, PendingKind};
use crate::bundle::{StagedBundle, WorkerShape};
use crate::checkin::JobCheckin;
use crate::policy::Reason;
use std::time::Duration;

const S: fn(u64) -> Duration = Duration::from_secs;

fn pool(name: &str, min: u32, max: u32) -> PoolPolicy {
    PoolPolicy {
        min,
        max,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 100,
        ..PoolPolicy::new(name, WorkerShape::from_flags(1, 0, 4096))
    }
}

fn bundles(n: u32) -> Vec<StagedBundle> {
    (0..n)
        .map(|i| StagedBundle {
            request_cpus: 1,
            ..StagedBundle::new(format!("0x{i}"))
        })
        .collect()
}

/// A pending job of this manager, pending for `seconds`.
fn pending(id: &str, seconds: u64) -> ObservedJob {
    ObservedJob::new(id, JobState::Pending, S(seconds), S(0)).launched_here()
}

/// A running job of this manager, busy with a bundle.
fn busy(id: &str) -> ObservedJob {
    ObservedJob {
        checkin: JobCheckin::CheckedIn {
            runs: 1,
            terminating: false,
        },
        ..ObservedJob::new(id, JobState::Active, S(0), S(600)).launched_here()
    }
}

/// The pool's jobs, its decisions having found a surplus for an hour.
fn observed(jobs: Vec<ObservedJob>) -> PoolObservation {
    PoolObservation {
        jobs,
        checkins_seen: true,
        surplus_for: Some(S(3600)),
        ..PoolObservation::default()
    }
}

/// The jobs withdrawn, from the reasons; checks that each is among the stops.
fn withdrawn(decision: &PoolDecision) -> Vec<String> {
    let ids: Vec<String> = (decision.reasons.iter())
        .filter_map(|r| match r {
            Reason::Withdrawn { job_id, .. } => Some(job_id.clone()),
            _ => None,
        })
        .collect();
    for id in &ids {
        assert!(decision.stops.contains(id), "{id} withdrawn, not stopped");
    }
    ids
}

#[test]
fn withdraw_rules_table() {
    let on_hold = |id: &str| ObservedJob {
        pending: PendingKind::Held,
        ..pending(id, 500)
    };
    let foreign = |id: &str| ObservedJob::new(id, JobState::Pending, S(500), S(0));
    let requeued = |id: &str| ObservedJob {
        checkin: JobCheckin::Vanished { unseen_for: S(30) },
        ..pending(id, 500)
    };
    // (case, staged bundles, min, max, jobs, withdrawn)
    type Case = (
        &'static str,
        u32,
        u32,
        u32,
        Vec<ObservedJob>,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "as many pending as bundles: none",
            2,
            0,
            5,
            vec![pending("old", 300), pending("new", 10)],
            vec![],
        ),
        (
            "one bundle left: the newest goes",
            1,
            0,
            5,
            vec![pending("old", 300), pending("new", 10)],
            vec!["new"],
        ),
        (
            "no bundle: every pending job goes",
            0,
            0,
            5,
            vec![pending("old", 300), pending("new", 10)],
            vec!["new", "old"],
        ),
        (
            "min keeps its workers",
            0,
            1,
            5,
            vec![pending("old", 300), pending("new", 10)],
            vec!["new"],
        ),
        (
            "a busy worker is not capacity for the bundles",
            1,
            0,
            5,
            vec![busy("b"), pending("p", 10)],
            vec![],
        ),
        (
            "above max after a reload: the surplus goes",
            2,
            0,
            1,
            vec![pending("old", 300), pending("new", 10)],
            vec!["new"],
        ),
        (
            "held by the platform: left alone",
            0,
            0,
            5,
            vec![on_hold("held")],
            vec![],
        ),
        (
            "another manager's: left alone",
            0,
            0,
            5,
            vec![foreign("theirs")],
            vec![],
        ),
        (
            "its worker checked in before a requeue: left alone",
            0,
            0,
            5,
            vec![requeued("ran")],
            vec![],
        ),
    ];
    for (case, staged, min, max, jobs, expected) in cases {
        let decision = decide(
            bundles(staged),
            vec![observed(jobs)],
            &[pool("cpu", min, max)],
        );
        let pool = &decision.pools[0];
        assert_eq!(withdrawn(pool), expected, "{case}");
        assert_eq!(pool.stops.len(), expected.len(), "{case}: {:?}", pool.stops);
    }
}

/// A surplus is withdrawn only once the pool's decisions have found one for its
/// `withdraw_after` (60 s here): the decision says how many jobs are not needed meanwhile.
/// By default (none), at the first decision that finds it.
#[test]
fn a_surplus_is_withdrawn_once_it_lasted_withdraw_after() {
    let jobs = || vec![pending("old", 300), pending("new", 10)];
    let minute = PoolPolicy {
        withdraw_after: S(60),
        ..pool("cpu", 0, 5)
    };
    let cases = [
        (&minute, None, 0),
        (&minute, Some(0), 0),
        (&minute, Some(59), 0),
        (&minute, Some(60), 2),
        (&pool("cpu", 0, 5), None, 2),
        (&pool("cpu", 0, 5), Some(0), 2),
    ];
    for (policy, lasted, withdrawn_now) in cases {
        let pools = vec![PoolObservation {
            surplus_for: lasted.map(S),
            ..observed(jobs())
        }];
        let decision = decide(bundles(0), pools, std::slice::from_ref(policy));
        let pool = &decision.pools[0];
        assert_eq!(pool.surplus, 2, "after {lasted:?} s");
        assert_eq!(withdrawn(pool).len(), withdrawn_now, "after {lasted:?} s");
    }
}

/// A bundle spilled to a second pool keeps the first pool's pending job: whichever worker
/// checks in first takes it. Once the bundle is gone, the job is withdrawn.
#[test]
fn a_spilled_bundle_keeps_its_first_pools_job_until_it_is_taken() {
    let pools = [pool("free", 0, 5), pool("paid", 0, 5)];
    let both = || {
        vec![
            observed(vec![pending("queued", 900)]),
            observed(vec![pending("booting", 30)]),
        ]
    };
    let decision = decide(bundles(1), both(), &pools);
    assert!(withdrawn(&decision.pools[0]).is_empty());
    assert!(withdrawn(&decision.pools[1]).is_empty());
    let taken = decide(bundles(0), both(), &pools);
    assert_eq!(withdrawn(&taken.pools[0]), ["queued"]);
    assert_eq!(withdrawn(&taken.pools[1]), ["booting"]);
}

/// The probe: a pool that sends bundles elsewhere by their wait keeps its oldest pending job
/// once it has pended past `spill_after` or `hedge_after` (the sooner), though nothing needs
/// it: its wait is what sends the next bundles elsewhere at once.
#[test]
fn the_oldest_job_pending_past_spill_after_is_kept_as_the_pools_probe() {
    let with = |spill: Option<u64>, hedge: Option<u64>| PoolPolicy {
        spill_after: spill.map(S),
        hedge_after: hedge.map(S),
        ..pool("cpu", 0, 5)
    };
    // (case, policy, jobs, withdrawn, kept)
    let cases = [
        (
            "past spill_after: the oldest is kept, the rest go",
            with(Some(300), None),
            vec![pending("old", 900), pending("mid", 400), pending("new", 10)],
            vec!["new", "mid"],
            Some("old"),
        ),
        (
            "not yet past spill_after: every one goes",
            with(Some(300), None),
            vec![pending("old", 200), pending("new", 10)],
            vec!["new", "old"],
            None,
        ),
        (
            "hedge_after is the sooner",
            with(Some(600), Some(120)),
            vec![pending("old", 200)],
            vec![],
            Some("old"),
        ),
        (
            "a pool that sends nothing elsewhere keeps none",
            with(None, None),
            vec![pending("old", 5000)],
            vec!["old"],
            None,
        ),
        (
            "another manager's older job is not ours to keep or withdraw",
            with(Some(300), None),
            vec![
                ObservedJob::new("theirs", JobState::Pending, S(5000), S(0)),
                pending("ours", 400),
            ],
            vec![],
            Some("ours"),
        ),
    ];
    for (case, policy, jobs, expected, kept) in cases {
        let decision = decide(bundles(0), vec![observed(jobs)], &[policy]);
        let pool = &decision.pools[0];
        assert_eq!(withdrawn(pool), expected, "{case}");
        assert_eq!(
            pool.surplus,
            expected.len(),
            "{case}: the probe is no surplus"
        );
        let probe = pool.reasons.iter().find_map(|r| match r {
            Reason::KeptAsProbe { job_id, .. } => Some(job_id.as_str()),
            _ => None,
        });
        assert_eq!(probe, kept, "{case}");
        assert!(
            !pool.stops.iter().any(|s| Some(s.as_str()) == kept),
            "{case}"
        );
    }
    let decision = decide(
        bundles(0),
        vec![observed(vec![pending("old", 900)])],
        &[with(Some(300), Some(600))],
    );
    let said = decision.pools[0].reasons.iter().map(|r| r.to_string());
    assert!(
        said.clone().any(|s| s
            == "keep job old though not needed: pending 900 s, past spill_after 300 s, its wait \
                sends the next bundles elsewhere at once and its start will say the queue has \
                moved (pending costs nothing)"),
        "{:?}",
        said.collect::<Vec<_>>()
    );
}

/// A withdrawal is said with its figures, true of the decision beside it.
#[test]
fn the_reason_says_what_was_needed_and_counted() {
    let decision = decide(
        bundles(1),
        vec![observed(vec![
            busy("b"),
            pending("p1", 40),
            pending("p2", 20),
        ])],
        &[pool("cpu", 0, 5)],
    );
    let pool = &decision.pools[0];
    let reason = (pool.reasons.iter())
        .find(|r| r.code() == "withdrawn")
        .expect("one withdrawn");
    assert_eq!(
        reason.to_string(),
        "withdraw job p2: pending 20 s, not needed (3 jobs count as capacity, 2 needed)"
    );
    assert_eq!(pool.target, Some(2));
    assert_eq!(pool.launches, 0);
}

/// The jobs stopped as blocked, with whether each was misconfigured.
fn blocked(decision: &PoolDecision) -> Vec<(String, bool)> {
    let found: Vec<(String, bool)> = (decision.reasons.iter())
        .filter_map(|r| match r {
            Reason::Blocked {
                job_id,
                misconfigured,
                ..
            } => Some((job_id.clone(), *misconfigured)),
            _ => None,
        })
        .collect();
    for (id, _) in &found {
        assert!(decision.stops.contains(id), "{id} blocked, not stopped");
    }
    found
}

#[test]
fn a_pending_job_its_platform_says_will_not_start_is_stopped_at_once_when_it_may_be() {
    // #42 item 4: the platform says so (an AWS Batch `MISCONFIGURATION:` or `CAPACITY:`
    // reason, a pod whose image cannot be pulled, cluster-autoscaler's NotTriggerScaleUp):
    // stopped whatever `pending_timeout` (none here) and however needed (two bundles wait).
    let kind = |id: &str, pending: PendingKind| ObservedJob {
        pending,
        ..self::pending(id, 20)
    };
    let cases = [
        (
            "misconfigured: stopped",
            vec![kind("bad", PendingKind::Misconfigured)],
            LaunchMode::Target,
            vec![("bad".to_owned(), true)],
        ),
        (
            "no capacity to be had: stopped",
            vec![kind("full", PendingKind::NoCapacity)],
            LaunchMode::Target,
            vec![("full".to_owned(), false)],
        ),
        (
            "queued or held: left alone",
            vec![kind("q", PendingKind::Queued), kind("h", PendingKind::Held)],
            LaunchMode::Target,
            vec![],
        ),
        (
            "another manager's: left alone",
            vec![ObservedJob {
                pending: PendingKind::Misconfigured,
                ..ObservedJob::new("theirs", JobState::Pending, S(20), S(0))
            }],
            LaunchMode::Target,
            vec![],
        ),
        (
            "its worker checked in before (a requeue): left alone",
            vec![ObservedJob {
                checkin: JobCheckin::Vanished { unseen_for: S(30) },
                ..kind("ran", PendingKind::Misconfigured)
            }],
            LaunchMode::Target,
            vec![],
        ),
        (
            "compat mode: upstream's rules, nothing stopped",
            vec![kind("bad", PendingKind::Misconfigured)],
            LaunchMode::Compat,
            vec![],
        ),
    ];
    for (case, jobs, launch_mode, expected) in cases {
        let policy = PoolPolicy {
            launch_mode,
            ..pool("cpu", 0, 5)
        };
        let decision = decide(bundles(2), vec![observed(jobs)], &[policy]);
        assert_eq!(blocked(&decision.pools[0]), expected, "{case}");
        if let [(id, _)] = expected.as_slice() {
            // The pool takes nothing this tick: its demand goes to the next fitting pool.
            assert_eq!(decision.pools[0].launches, 0, "{case}");
            let text = decision.pools[0].reasons.iter().map(|r| r.to_string());
            let said: Vec<String> = text.filter(|t| t.contains(id.as_str())).collect();
            assert!(said[0].contains("its platform says it"), "{case}: {said:?}");
        }
    }
}

/// `race` (rule 2): a pool keeps `ceil(race × workers)` jobs launched or pending for the
/// workers its staged bundles need, says so (`raced`), never launches beyond `max` (nor says
/// `max_reached` while the bundles' own workers fit), withdraws the surplus once bundles
/// are gone, the newest first, and asks for the next tick after its `race_watch` while some
/// of its jobs pend (this tick's launches pend from the next tick on; a pool at its max with
/// none pending has nothing to watch).
#[test]
fn race_rules_table() {
    let ages = |n: u64| {
        (1..=n)
            .map(|i| pending(&format!("p{i}"), 100 * i))
            .collect()
    };
    struct Case {
        case: &'static str,
        race: f64,
        staged: u32,
        max: u32,
        jobs: Vec<ObservedJob>,
        launches: u32,
        withdrawn: Vec<&'static str>,
        /// `raced` as (workers, jobs).
        raced: Option<(usize, usize)>,
        watched: bool,
    }
    let case = |case, race, (staged, max), jobs: Vec<ObservedJob>, launches, raced: Option<_>| {
        let pending = jobs.iter().any(|job| job.state == JobState::Pending);
        Case {
            case,
            race,
            staged,
            max,
            jobs,
            launches,
            withdrawn: vec![],
            watched: raced.is_some() && pending,
            raced,
        }
    };
    let cases = [
        case("no race", 1.0, (3, 10), vec![], 3, None),
        case("two jobs a worker", 2.0, (3, 10), vec![], 6, Some((3, 6))),
        case("rounded up", 2.5, (3, 10), vec![], 8, Some((3, 8))),
        case("already pending", 2.0, (3, 10), ages(6), 0, Some((3, 6))),
        case(
            "pending covers the bundles, not the race",
            2.0,
            (3, 10),
            ages(3),
            3,
            Some((3, 6)),
        ),
        Case {
            withdrawn: vec!["p1", "p2", "p3", "p4"],
            ..case(
                "two bundles started elsewhere: the newest go",
                2.0,
                (1, 10),
                ages(6),
                0,
                Some((1, 2)),
            )
        },
        case("within max", 2.0, (3, 4), vec![], 4, Some((3, 4))),
        case(
            "max below the workers",
            2.0,
            (3, 2),
            vec![],
            2,
            Some((3, 2)),
        ),
        Case {
            watched: false,
            ..case(
                "at max, every worker busy: nothing pends",
                2.0,
                (3, 2),
                vec![busy("b1"), busy("b2")],
                0,
                Some((3, 0)),
            )
        },
    ];
    for c in cases {
        let case = c.case;
        let policy = PoolPolicy {
            race: c.race,
            race_watch: S(2),
            ..pool("cpu", 0, c.max)
        };
        let decision = decide(bundles(c.staged), vec![observed(c.jobs)], &[policy]);
        let pool = &decision.pools[0];
        assert_eq!(pool.launches, c.launches, "{case}: {:?}", pool.reasons);
        assert_eq!(withdrawn(pool), c.withdrawn, "{case}");
        let said = (pool.reasons.iter()).find_map(|r| match r {
            Reason::Raced { workers, jobs } => Some((*workers, *jobs)),
            _ => None,
        });
        assert_eq!(said, c.raced, "{case}");
        let covers = (pool.reasons.iter()).any(|r| matches!(r, Reason::PendingCoversDemand { .. }));
        assert!(
            !covers || c.launches == 0,
            "{case}: \"don't launch\" while launching"
        );
        let at_max = (pool.reasons.iter()).any(|r| matches!(r, Reason::MaxReached { .. }));
        assert_eq!(
            at_max,
            c.staged > c.max,
            "{case}: max_reached only when the bundles' own workers exceed max"
        );
        assert_eq!(pool.watch, c.watched.then_some(S(2)), "{case}");
        let next = decision.next_tick(S(5));
        assert_eq!(next, if c.watched { S(2) } else { S(5) }, "{case}");
    }
}

/// The next tick is the soonest `race_watch` among the pools that watch their race, and the
/// pool named for it (in the loop's log) is that pool; none before `sleep_time`: `sleep_time`.
#[test]
fn the_next_tick_is_the_soonest_race_watch() {
    let watching = |pool: &str, watch: Option<u64>| PoolDecision {
        pool: pool.into(),
        watch: watch.map(S),
        ..PoolDecision::default()
    };
    let decision = PoolsDecision {
        pools: vec![
            watching("a", Some(3)),
            watching("b", Some(2)),
            watching("c", None),
        ],
        ..PoolsDecision::default()
    };
    assert_eq!(decision.watched_by(S(5)), Some(("b", S(2))));
    assert_eq!(decision.next_tick(S(5)), S(2));
    assert_eq!(decision.watched_by(S(2)), None);
    assert_eq!(decision.next_tick(S(2)), S(2));
    assert_eq!(decision.next_tick(S(1)), S(1));
}

#[test]
fn race_is_refused_outside_one_to_four_in_compat_mode_and_watched_below_a_second() {
    for (race, mode, says) in [
        (
            0.5,
            LaunchMode::Target,
            "race 0.5 is not between 1 (no race) and 4",
        ),
        (f64::NAN, LaunchMode::Target, "race NaN is not between 1"),
        (5.0, LaunchMode::Target, "race 5 is not between 1"),
        (
            2.0,
            LaunchMode::Compat,
            "race needs launch_mode = \"target\"",
        ),
    ] {
        let policy = PoolPolicy {
            race,
            launch_mode: mode,
            max_launches_per_tick: 1,
            ..pool("cpu", 0, 5)
        };
        let error = policy.validate().unwrap_err();
        assert!(error.contains(says), "{race}: {error}");
    }
    let fine = PoolPolicy {
        race: 2.5,
        ..pool("cpu", 0, 5)
    };
    assert_eq!(fine.validate(), Ok(()));
    let flat_out = PoolPolicy {
        race_watch: Duration::ZERO,
        ..fine
    };
    let error = flat_out.validate().unwrap_err();
    assert!(
        error.contains("race_watch must be at least 1 second"),
        "{error}"
    );
}
