//! Table tests of the pool policy, one group per rule.

use super::*;
use crate::backend::{JobState, PendingKind};
use crate::bundle::{StagedBundle, WorkerShape};
use crate::policy::Reason;
use std::time::Duration;

const S: fn(u64) -> Duration = Duration::from_secs;

fn cpu() -> PoolPolicy {
    PoolPolicy {
        min_seconds_between_workers: 0,
        max_launches_per_tick: 100,
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(4, 0, 8192))
    }
}

fn gpu() -> PoolPolicy {
    PoolPolicy {
        cost: 10.0,
        ..PoolPolicy {
            name: "gpu".into(),
            shape: WorkerShape::from_flags(8, 2, 32768),
            ..cpu()
        }
    }
}

fn bundle(n: u32, cpus: u32, gpus: u32, queue: &str) -> StagedBundle {
    StagedBundle {
        request_cpus: cpus,
        request_gpus: gpus,
        request_queue: queue.into(),
        ..StagedBundle::new(format!("0x{n}"))
    }
}

fn cpu_bundles(n: u32) -> Vec<StagedBundle> {
    (0..n).map(|i| bundle(i, 1, 0, "")).collect()
}

/// A job in `state` for `seconds` (pending: pending that long; active: active that long).
fn job(id: &str, state: JobState, seconds: u64) -> ObservedJob {
    let pending = state == JobState::Pending;
    ObservedJob {
        id: id.into(),
        state,
        pending_for: if pending { S(seconds) } else { S(0) },
        active_for: if pending { S(0) } else { S(seconds) },
        checkin: Default::default(),
        launched_here: true,
        pending: PendingKind::Queued,
    }
}

fn jobs(active: usize, pending: usize) -> PoolObservation {
    let mut list: Vec<ObservedJob> = (0..active)
        .map(|i| job(&format!("a{i}"), JobState::Active, 3600))
        .collect();
    list.extend((0..pending).map(|i| job(&format!("p{i}"), JobState::Pending, 1)));
    PoolObservation {
        jobs: list,
        ..PoolObservation::default()
    }
}

/// The plan of `policies` for `bundles` and `pools`, at 10,000 s of the manager clock.
pub(super) fn plan2(
    bundles: Vec<StagedBundle>,
    pools: Vec<PoolObservation>,
    policies: &[PoolPolicy],
) -> PoolsDecision {
    plan_pools(
        &PoolsObservation {
            times: Vec::new(),
            bundles,
            pools,
            server: None,
        },
        policies,
        S(10_000),
    )
}

fn codes(decision: &PoolDecision) -> Vec<&'static str> {
    decision.reasons.iter().map(Reason::code).collect()
}

fn pool_of(decision: &PoolsDecision, uuid: &str) -> Option<String> {
    decision
        .assignments
        .iter()
        .find(|a| a.uuid == uuid)
        .map(|a| a.pool.clone())
}

#[test]
fn assignment_prefers_the_cheapest_fitting_pool() {
    // (case, bundle, pools, expected pool or unserved reason)
    let tagged = PoolPolicy {
        tag: Some("gpuq".into()),
        ..gpu()
    };
    let exclusive = PoolPolicy {
        tag_exclusive: true,
        ..tagged.clone()
    };
    let cheap_gpu = PoolPolicy {
        cost: -1.0,
        ..gpu()
    };
    let second_cpu = PoolPolicy {
        name: "cpu2".into(),
        ..cpu()
    };
    // A compat pool later in preference order must not take bundles a cheaper target pool
    // has room for (found by `simulate`).
    let compat_overflow = PoolPolicy {
        name: "overflow".into(),
        cost: 5.0,
        launch_mode: LaunchMode::Compat,
        ..cpu()
    };
    let cheap_compat = PoolPolicy {
        cost: -5.0,
        ..compat_overflow.clone()
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, StagedBundle, Vec<PoolPolicy>, &str)> = vec![
        ("cpu bundle → cheap cpu pool", bundle(1, 1, 0, ""), vec![gpu(), cpu()], "cpu"),
        ("cost beats declaration order", bundle(1, 1, 0, ""), vec![cpu(), cheap_gpu], "gpu"),
        ("same cost: declaration order", bundle(1, 1, 0, ""), vec![second_cpu, cpu()], "cpu2"),
        ("gpu bundle → gpu pool", bundle(1, 1, 1, ""), vec![cpu(), gpu()], "gpu"),
        ("too many cpus for cpu pool", bundle(1, 6, 0, ""), vec![cpu(), gpu()], "gpu"),
        ("fits nothing", bundle(1, 1, 4, ""), vec![cpu(), gpu()], "no_fitting_pool"),
        ("queue needs the tag", bundle(1, 1, 0, "gpuq"), vec![cpu(), tagged.clone()], "gpu"),
        ("queue matches no pool", bundle(1, 1, 0, "other"), vec![cpu(), tagged.clone()], "no_fitting_pool"),
        ("untagged bundle on non-exclusive tagged pool", bundle(1, 1, 1, ""), vec![cpu(), tagged], "gpu"),
        ("untagged bundle not on exclusive pool", bundle(1, 1, 1, ""), vec![cpu(), exclusive.clone()], "no_fitting_pool"),
        ("tagged bundle on exclusive pool", bundle(1, 1, 1, "gpuq"), vec![cpu(), exclusive], "gpu"),
        ("cheaper target pool before a compat pool", bundle(1, 1, 0, ""), vec![compat_overflow, cpu()], "cpu"),
        ("cheaper compat pool before a target pool", bundle(1, 1, 0, ""), vec![cpu(), cheap_compat], "overflow"),
    ];
    for (case, bundle, policies, expected) in cases {
        let observed = vec![PoolObservation::default(); policies.len()];
        let decision = plan2(vec![bundle], observed, &policies);
        let got = pool_of(&decision, "0x1")
            .unwrap_or_else(|| decision.unserved[0].reason.code().to_owned());
        assert_eq!(got, expected, "{case}");
    }
}

#[test]
fn bundles_fitting_no_pool_say_why_per_pool() {
    let tagged = PoolPolicy {
        tag: Some("gpuq".into()),
        tag_exclusive: true,
        ..gpu()
    };
    let decision = plan2(
        vec![bundle(1, 1, 4, ""), bundle(2, 1, 0, "nlp")],
        vec![PoolObservation::default(); 2],
        &[cpu(), tagged],
    );
    let json = serde_json::to_value(&decision.unserved).unwrap();
    assert_eq!(
        json,
        serde_json::json!([
            {"uuid": "0x1", "reason": "no_fitting_pool", "pools": [
                {"pool": "cpu", "reason": "misfit", "detail": "request_gpus=4 > worker gpus=0"},
                {"pool": "gpu", "reason": "misfit", "detail": "no request_queue, and the pool is exclusive to tag gpuq"}]},
            {"uuid": "0x2", "reason": "no_fitting_pool", "pools": [
                {"pool": "cpu", "reason": "misfit", "detail": "request_queue=nlp does not match pool tag (none)"},
                {"pool": "gpu", "reason": "misfit", "detail": "request_queue=nlp does not match pool tag gpuq"}]},
        ])
    );
    assert_eq!(decision.launches(), 0);
}

#[test]
fn target_rules_table() {
    // (case, policy tweak, staged cpu bundles, active, pending, stopping, since last launch,
    //  launches, target, reason codes)
    type Tweak = fn(&mut PoolPolicy);
    fn none(_: &mut PoolPolicy) {}
    fn min2(p: &mut PoolPolicy) {
        p.min = 2;
    }
    fn max3(p: &mut PoolPolicy) {
        p.max = 3;
    }
    fn cap1(p: &mut PoolPolicy) {
        p.max_launches_per_tick = 1;
    }
    fn rate60(p: &mut PoolPolicy) {
        p.min_seconds_between_workers = 60;
    }
    fn min2_rate60(p: &mut PoolPolicy) {
        p.min = 2;
        p.min_seconds_between_workers = 60;
    }
    #[rustfmt::skip]
    type Case = (&'static str, Tweak, u32, usize, usize, usize, Option<u64>, u32, u32, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        (
            "nothing to do",
            none,
            0,
            0,
            0,
            0,
            None,
            0,
            0,
            vec!["no_staged_bundles", "target"],
        ),
        (
            "burst to demand",
            none,
            5,
            0,
            0,
            0,
            None,
            5,
            5,
            vec!["want_workers", "target"],
        ),
        (
            "active are busy: demand on top",
            none,
            3,
            2,
            0,
            0,
            None,
            3,
            5,
            vec!["want_workers", "target"],
        ),
        (
            "pending count as capacity",
            none,
            5,
            0,
            2,
            0,
            None,
            3,
            5,
            vec!["want_workers", "target"],
        ),
        (
            "pending covers demand, and the one too many is withdrawn",
            none,
            2,
            0,
            3,
            0,
            None,
            0,
            2,
            vec![
                "want_workers",
                "target",
                "pending_covers_demand",
                "withdrawn",
            ],
        ),
        (
            "min with nothing staged",
            min2,
            0,
            0,
            0,
            0,
            None,
            2,
            2,
            vec!["no_staged_bundles", "target", "below_min"],
        ),
        (
            "max clamps the target",
            max3,
            5,
            0,
            0,
            0,
            None,
            3,
            3,
            vec!["want_workers", "target", "max_reached"],
        ),
        (
            "max reached",
            max3,
            5,
            3,
            0,
            0,
            None,
            0,
            3,
            vec!["want_workers", "target", "max_reached"],
        ),
        (
            "stopping jobs count toward max",
            max3,
            5,
            1,
            0,
            2,
            None,
            0,
            3,
            vec!["want_workers", "target", "max_reached"],
        ),
        (
            "stopping jobs leave room",
            max3,
            5,
            0,
            0,
            1,
            None,
            2,
            3,
            vec!["want_workers", "target", "max_reached"],
        ),
        (
            "per-tick cap",
            cap1,
            5,
            0,
            0,
            0,
            None,
            1,
            5,
            vec!["want_workers", "target", "launch_cap_reached"],
        ),
        (
            "rate limited",
            rate60,
            5,
            0,
            0,
            0,
            Some(30),
            0,
            5,
            vec!["want_workers", "target", "rate_limited"],
        ),
        (
            "rate window passed",
            rate60,
            5,
            0,
            0,
            0,
            Some(60),
            5,
            5,
            vec!["want_workers", "target"],
        ),
        (
            "below min beats the rate limit",
            min2_rate60,
            5,
            0,
            0,
            0,
            Some(1),
            2,
            5,
            vec!["want_workers", "target", "below_min", "rate_limited"],
        ),
    ];
    for (case, tweak, staged, active, pending, stopping, since, launches, target, expected) in cases
    {
        let mut policy = cpu();
        tweak(&mut policy);
        let mut observed = jobs(active, pending);
        observed.stopping = stopping;
        observed.since_last_launch = since.map(S);
        let decision = plan2(cpu_bundles(staged), vec![observed], &[policy]);
        let pool = &decision.pools[0];
        assert_eq!(pool.launches, launches, "{case}");
        assert_eq!(pool.target, Some(target), "{case}");
        assert_eq!(codes(pool), expected, "{case}");
    }
}

#[test]
fn pending_workers_are_used_before_launching_and_by_the_most_constrained_bundles() {
    // The gpu pool has one pending worker; the cpu pool none. The cpu bundle comes first but
    // fits both; the gpu bundle fits only the gpu pool and gets the pending worker.
    let decision = plan2(
        vec![bundle(1, 1, 0, ""), bundle(2, 1, 1, "")],
        vec![jobs(0, 0), jobs(0, 1)],
        &[cpu(), gpu()],
    );
    assert_eq!(pool_of(&decision, "0x2").as_deref(), Some("gpu"));
    assert_eq!(
        decision
            .assignments
            .iter()
            .find(|a| a.uuid == "0x2")
            .unwrap()
            .coverage,
        Coverage::PendingWorker
    );
    assert_eq!(pool_of(&decision, "0x1").as_deref(), Some("cpu"));
    assert_eq!(
        (decision.pools[0].launches, decision.pools[1].launches),
        (1, 0)
    );
}

#[test]
fn overflow_falls_back_to_the_next_pool_then_is_unserved() {
    let small = PoolPolicy { max: 2, ..cpu() };
    let small_gpu = PoolPolicy { max: 1, ..gpu() };
    let decision = plan2(
        cpu_bundles(5),
        vec![jobs(0, 0), jobs(0, 0)],
        &[small, small_gpu],
    );
    assert_eq!(
        (decision.pools[0].launches, decision.pools[1].launches),
        (2, 1)
    );
    assert_eq!(decision.unserved.len(), 2);
    let json = serde_json::to_value(&decision.unserved[0]).unwrap();
    assert_eq!(json["reason"], "max_reached");
    assert_eq!(
        json["pools"][1],
        serde_json::json!({"pool": "gpu", "reason": "max_reached", "jobs": 0, "max": 1})
    );
}

#[test]
fn a_stuck_pending_job_is_stopped_and_its_demand_goes_to_the_next_pool() {
    let slurm = PoolPolicy {
        pending_timeout: Some(S(600)),
        max: 1,
        ..cpu()
    };
    let mut observed = PoolObservation::default();
    observed.jobs.push(job("17", JobState::Pending, 600));
    let decision = plan2(
        cpu_bundles(1),
        vec![observed.clone(), jobs(0, 0)],
        &[slurm.clone(), gpu()],
    );
    let stuck = &decision.pools[0];
    assert_eq!(stuck.stops, ["17"]);
    assert_eq!(stuck.launches, 0);
    assert_eq!(codes(stuck), ["pending_timeout"]);
    assert_eq!(
        stuck.reasons[0],
        Reason::PendingTimeout {
            job_id: "17".into(),
            pending_seconds: 600,
            timeout_seconds: 600
        }
    );
    assert_eq!(pool_of(&decision, "0x0").as_deref(), Some("gpu"));
    assert_eq!(decision.pools[1].launches, 1);

    // Not yet stuck: the pending job covers the bundle and nobody launches.
    observed.jobs[0].pending_for = S(599);
    let decision = plan2(
        cpu_bundles(1),
        vec![observed, jobs(0, 0)],
        &[slurm.clone(), gpu()],
    );
    assert!(decision.pools[0].stops.is_empty());
    assert_eq!(decision.launches(), 0);

    // Without a fallback pool the bundle is unserved with reason pending_timeout.
    let mut observed = PoolObservation::default();
    observed.jobs.push(job("17", JobState::Pending, 700));
    let decision = plan2(cpu_bundles(1), vec![observed], &[slurm]);
    assert_eq!(decision.unserved[0].reason.code(), "pending_timeout");

    // Compat pools never time out.
    let mut observed = PoolObservation::default();
    observed.jobs.push(job("17", JobState::Pending, 1_000_000));
    let compat = PoolPolicy {
        launch_mode: LaunchMode::Compat,
        pending_timeout: Some(S(1)),
        ..cpu()
    };
    assert!(
        plan2(cpu_bundles(1), vec![observed], &[compat]).pools[0]
            .stops
            .is_empty()
    );
}

#[test]
fn a_backing_off_pool_is_skipped_and_its_demand_falls_back() {
    let mut health = PoolHealth::default();
    health.record_failure(S(9_900), Failure::TRANSIENT);
    let backing_off = PoolObservation {
        health,
        ..PoolObservation::default()
    };
    let decision = plan2(
        cpu_bundles(2),
        vec![backing_off.clone(), jobs(0, 0)],
        &[cpu(), gpu()],
    );
    assert_eq!(codes(&decision.pools[0]), ["backing_off"]);
    assert_eq!(
        decision.pools[0].reasons[0],
        Reason::BackingOff {
            until_seconds: 10_200,
            remaining_seconds: 200,
            failures: 1
        }
    );
    assert_eq!(
        (decision.pools[0].launches, decision.pools[1].launches),
        (0, 2)
    );
    // Alone, the bundles are unserved with the pool's backoff as the reason.
    let decision = plan2(cpu_bundles(1), vec![backing_off.clone()], &[cpu()]);
    let json = serde_json::to_value(&decision.unserved[0]).unwrap();
    assert_eq!(json["reason"], "backing_off");
    assert_eq!(json["until_seconds"], 10_200);
    // Over: at 10_200 the pool is back.
    let decision = plan_pools(
        &PoolsObservation {
            times: Vec::new(),
            server: None,
            bundles: cpu_bundles(1),
            pools: vec![backing_off.clone()],
        },
        &[cpu()],
        S(10_200),
    );
    assert_eq!(decision.pools[0].launches, 1);
    // Compat pools do not back off.
    let compat = PoolPolicy {
        launch_mode: LaunchMode::Compat,
        max_launches_per_tick: 1,
        ..cpu()
    };
    assert_eq!(
        plan2(cpu_bundles(1), vec![backing_off], &[compat]).pools[0].launches,
        1
    );
}

#[test]
fn an_unobserved_pool_is_skipped_and_its_demand_falls_back() {
    let unobserved = PoolObservation {
        unobserved: Some("squeue timed out".into()),
        ..PoolObservation::default()
    };
    let decision = plan2(
        cpu_bundles(1),
        vec![unobserved.clone(), jobs(0, 0)],
        &[cpu(), gpu()],
    );
    assert_eq!(codes(&decision.pools[0]), ["unobserved"]);
    assert_eq!(
        (decision.pools[0].launches, decision.pools[1].launches),
        (0, 1)
    );
    // A missing observation counts as unobserved too; with no pool left the bundle waits.
    let decision = plan2(cpu_bundles(1), vec![unobserved], &[cpu(), gpu()]);
    assert_eq!(codes(&decision.pools[1]), ["unobserved"]);
    assert_eq!(decision.launches(), 0);
    assert_eq!(decision.unserved[0].reason.code(), "unobserved");
}

#[test]
fn compat_pools_follow_upstream_exactly() {
    use crate::policy::{Observation, PolicyConfig, plan};
    let compat = PoolPolicy {
        launch_mode: LaunchMode::Compat,
        min: 1,
        max: 3,
        min_seconds_between_workers: 60,
        max_launches_per_tick: 1,
        ..cpu()
    };
    let config = PolicyConfig {
        min_workers: 1,
        max_workers: 3,
        min_seconds_between_workers: 60,
    };
    for staged in 0..5u32 {
        for active in 0..4 {
            for pending in 0..4 {
                for since in [None, Some(1), Some(60)] {
                    let mut observed = jobs(active, pending);
                    observed.since_last_launch = since.map(S);
                    let got = &plan2(
                        cpu_bundles(staged),
                        vec![observed],
                        std::slice::from_ref(&compat),
                    )
                    .pools[0];
                    let want = plan(
                        &Observation {
                            staged: staged as usize,
                            pending,
                            active,
                            since_last_launch: since.map(S),
                        },
                        &config,
                    );
                    assert_eq!(
                        got.as_upstream(),
                        want,
                        "{staged} {active} {pending} {since:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn validation_names_the_pool_and_setting() {
    let cases: Vec<(PoolPolicy, &str)> = vec![
        (
            PoolPolicy {
                min: 3,
                max: 2,
                ..cpu()
            },
            "pool cpu: max (2) is less than min (3)",
        ),
        (
            PoolPolicy {
                max_launches_per_tick: 0,
                ..cpu()
            },
            "pool cpu: max_launches_per_tick must be at least 1",
        ),
        (
            PoolPolicy {
                launch_mode: LaunchMode::Compat,
                pending_timeout: Some(S(1)),
                max_launches_per_tick: 1,
                ..cpu()
            },
            "pool cpu: pending_timeout needs launch_mode = \"target\" (compat keeps upstream's rules)",
        ),
        (
            PoolPolicy {
                launch_mode: LaunchMode::Compat,
                max_launches_per_tick: 5,
                ..cpu()
            },
            "pool cpu: max_launches_per_tick 5 needs launch mode target (compat launches at most one worker per tick, as upstream)",
        ),
        (
            PoolPolicy {
                tag_exclusive: true,
                ..cpu()
            },
            "pool cpu: tag_exclusive needs a tag",
        ),
    ];
    for (policy, message) in cases {
        assert_eq!(policy.validate().unwrap_err(), message);
    }
    assert!(cpu().validate().is_ok());
    assert_eq!("target".parse::<LaunchMode>(), Ok(LaunchMode::Target));
    assert!(
        "burst"
            .parse::<LaunchMode>()
            .unwrap_err()
            .contains("compat or target")
    );
}

#[test]
fn decisions_serialise_in_snake_case() {
    let decision = plan2(cpu_bundles(1), vec![jobs(0, 0)], &[cpu()]);
    let json = serde_json::to_value(&decision).unwrap();
    assert_eq!(json["pools"][0]["launch_mode"], "target");
    assert_eq!(
        json["pools"][0]["reasons"][1],
        serde_json::json!({"reason": "target", "target": 1, "capacity": 0})
    );
    assert_eq!(
        json["assignments"][0],
        serde_json::json!({"uuid": "0x0", "pool": "cpu", "coverage": "new_worker", "worker": 0})
    );
}

#[test]
fn a_job_that_just_became_active_is_still_free_capacity() {
    // Active for 10 s of a 30 s grace: its worker has not taken a bundle yet.
    let mut observed = PoolObservation::default();
    observed.jobs.push(job("1", JobState::Active, 10));
    let decision = plan2(cpu_bundles(1), vec![observed.clone()], &[cpu()]);
    assert_eq!(decision.pools[0].launches, 0);
    assert_eq!(
        codes(&decision.pools[0]),
        ["want_workers", "target", "pending_covers_demand"]
    );
    assert_eq!(decision.assignments[0].coverage, Coverage::PendingWorker);
    // After the grace it is busy: the staged bundle needs another worker.
    observed.jobs[0].active_for = S(30);
    let decision = plan2(cpu_bundles(1), vec![observed], &[cpu()]);
    assert_eq!(decision.pools[0].launches, 1);
    assert_eq!(decision.pools[0].target, Some(2));
}
