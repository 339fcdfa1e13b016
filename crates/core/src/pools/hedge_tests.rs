//! The hedge rule in the plan (issue #42 item 2): a free, queued Slurm pool whose bundles are
//! hedged past `hedge_after` on a paid pool that takes a bounded number of hedges a day. The
//! rule itself is table-tested in `hedge.rs`.

use super::times::{PoolTimes, Starting};
use super::*;
use crate::backend::JobState;
use crate::bundle::{StagedBundle, WorkerShape};
use std::time::Duration;

const S: fn(u64) -> Duration = Duration::from_secs;

/// A free Slurm pool hedged after 2 minutes' expected wait, and a paid cloud pool that takes
/// hedges.
fn pools() -> Vec<PoolPolicy> {
    let base = PoolPolicy {
        min_seconds_between_workers: 0,
        max_launches_per_tick: 10,
        max: 4,
        ..PoolPolicy::new("cpu-slurm", WorkerShape::from_flags(4, 0, 8192))
    };
    vec![
        PoolPolicy {
            hedge_after: Some(S(120)),
            ..base.clone()
        },
        PoolPolicy {
            name: "gce".into(),
            cost_per_hour: Some(0.2),
            hedges_per_day: 5,
            ..base
        },
    ]
}

/// The Slurm pool with job 12 pending `age` seconds (`Resources`), checking in after 60 s
/// otherwise; the cloud's after 90 s. `gce_jobs`: the cloud pool's jobs; `hedge_room`: the
/// hedges it has left today.
fn plan(bundles: u32, age: u64, gce_jobs: Vec<ObservedJob>, hedge_room: usize) -> PoolsDecision {
    let pending = ObservedJob::new("12", JobState::Pending, S(age), S(0)).launched_here();
    let times = times(
        age,
        gce_jobs.iter().map(|j| j.pending_for.as_secs()).collect(),
    );
    let observed = PoolsObservation {
        bundles: (0..bundles)
            .map(|i| StagedBundle::new(format!("0x{i}")))
            .collect(),
        pools: vec![
            PoolObservation {
                jobs: vec![pending],
                ..PoolObservation::default()
            },
            PoolObservation {
                jobs: gce_jobs,
                hedge_room,
                ..PoolObservation::default()
            },
        ],
        server: None,
        times,
    };
    plan_pools(&observed, &pools(), S(10_000))
}

/// The pools' times: job 12 of the Slurm pool pending `age` seconds, the cloud's starting
/// jobs aged `gce` seconds.
fn times(age: u64, gce: Vec<u64>) -> Vec<PoolTimes> {
    let coming = |job: String, age: u64, pending: bool| Starting {
        job,
        age,
        pending,
        reason: pending.then(|| "Resources".into()),
        ..Starting::default()
    };
    let gce = gce.into_iter().enumerate();
    vec![
        PoolTimes {
            checkin_seconds: 60,
            coming: vec![coming("12".into(), age, true)],
            ..PoolTimes::default()
        },
        PoolTimes {
            checkin_seconds: 90,
            coming: gce
                .map(|(i, age)| coming(format!("g{i}"), age, false))
                .collect(),
            ..PoolTimes::default()
        },
    ]
}

fn placed(decision: &PoolsDecision) -> Vec<(&str, String)> {
    (decision.assignments.iter())
        .map(|a| {
            let spill = a.spill.as_ref().map(ToString::to_string);
            (a.pool.as_str(), spill.unwrap_or_default())
        })
        .collect()
}

fn launches(decision: &PoolsDecision) -> Vec<(u32, u32)> {
    (decision.pools.iter())
        .map(|p| (p.launches, p.hedges))
        .collect()
}

#[test]
fn past_hedge_after_a_queued_bundle_is_launched_for_on_the_paid_pool_too() {
    // Job 12 pending 5 min: about as long again, past the 2 minutes the admin accepts; the
    // cloud starts a worker in 90 s. The bundle keeps its place in Slurm's queue and gets a
    // cloud worker too: one launch there, counted as a hedge.
    let decision = plan(1, 300, Vec::new(), 5);
    let hedged = "hedged on gce (estimated 90 s): cpu-slurm estimated 5 min > hedge_after 2 min \
                  (job 12 pending 5 min: Resources); the first worker to check in takes it";
    assert_eq!(
        placed(&decision),
        [("cpu-slurm", String::new()), ("gce", hedged.into())]
    );
    assert_eq!(launches(&decision), [(0, 0), (1, 1)]);
    // Its estimate is the sooner of the two, and says it is a hedge.
    let estimates = crate::estimate::estimate(&decision, &times(300, Vec::new()));
    assert_eq!(estimates.len(), 1, "{estimates:?}");
    assert_eq!(estimates[0].seconds, Some(90));
    assert!(estimates[0].text.ends_with(hedged), "{}", estimates[0].text);
}

#[test]
fn no_hedge_within_hedge_after_nor_beyond_the_paying_pools_hedges() {
    // Pending 1 minute: checks in within the 2 minutes accepted.
    let decision = plan(1, 60, Vec::new(), 5);
    assert_eq!(placed(&decision), [("cpu-slurm", String::new())]);
    assert_eq!(launches(&decision), [(0, 0), (0, 0)]);
    // The cloud pool has spent its hedges for the day: none, and the bundle says why.
    let decision = plan(1, 300, Vec::new(), 0);
    let unhedged = "waiting on cpu-slurm: estimated 5 min > hedge_after 2 min, not hedged: no \
                    fitting pool that would start it sooner has a hedge left today (hedges_per_day)";
    assert_eq!(placed(&decision), [("cpu-slurm", unhedged.into())]);
    assert_eq!(launches(&decision), [(0, 0), (0, 0)]);
    // Two bundles, one hedge left: one of them is hedged.
    let decision = plan(2, 300, Vec::new(), 1);
    let pools: Vec<&str> = placed(&decision).into_iter().map(|(p, _)| p).collect();
    assert_eq!(pools, ["cpu-slurm", "gce", "cpu-slurm"]);
    assert!(
        placed(&decision)[2].1.contains("not hedged"),
        "{:?}",
        placed(&decision)
    );
    assert_eq!(launches(&decision), [(1, 0), (1, 1)]);
}

#[test]
fn a_hedge_already_launched_is_not_launched_again_and_costs_nothing_more() {
    // The tick after: the cloud's hedge job is starting (pending 20 s). The bundle is hedged
    // on it again, and nothing more is bought, even with no hedge left.
    let starting = ObservedJob::new("g1", JobState::Pending, S(20), S(0)).launched_here();
    let decision = plan(1, 320, vec![starting], 0);
    assert_eq!(placed(&decision)[1].0, "gce");
    assert_eq!(launches(&decision), [(0, 0), (0, 0)]);
    // Neither pool withdraws its job while the bundle waits: each is needed by it.
    assert!(decision.pools.iter().all(|p| p.stops.is_empty()));
    assert!(
        decision.pools.iter().all(|p| p.surplus == 0),
        "{:?}",
        decision.pools
    );
}

#[test]
fn once_the_bundle_is_gone_the_loser_still_pending_is_kept_as_the_pools_probe() {
    // The cloud worker took the bundle (it left staged): the Slurm job, still pending and
    // never started, is needed by nothing. It has pended past hedge_after, so it is the
    // pool's probe of its queue (withdraw_tests: what a probe is): kept, not surplus.
    let decision = plan(0, 330, Vec::new(), 5);
    let slurm = &decision.pools[0];
    assert_eq!((slurm.surplus, slurm.stops.len()), (0, 0), "{slurm:?}");
    assert!(slurm.reasons.iter().any(|r| r.code() == "kept_as_probe"));
    // Pending for less than hedge_after it is no probe: surplus, withdrawn after
    // withdraw_after.
    let decision = plan(0, 100, Vec::new(), 5);
    assert_eq!(decision.pools[0].surplus, 1, "{:?}", decision.pools[0]);
}
