//! The spill rule in the plan (issue #32): a free, queued pool and a paid one. The times are
//! what the manager learned ([`PoolTimes`]); the rule itself is table-tested in `spill.rs`.

use super::times::{PoolTimes, Starting};
use super::*;
use crate::backend::{JobState, PendingKind};
use crate::bundle::{StagedBundle, WorkerShape};
use std::time::Duration;

const S: fn(u64) -> Duration = Duration::from_secs;

/// A free Slurm pool that accepts a 10-minute wait, and a paid cloud pool.
fn pools() -> Vec<PoolPolicy> {
    let shape = WorkerShape::from_flags(4, 0, 8192);
    let base = PoolPolicy {
        min_seconds_between_workers: 0,
        max_launches_per_tick: 10,
        max: 4,
        ..PoolPolicy::new("cpu-slurm", shape)
    };
    vec![
        PoolPolicy {
            spill_after: Some(S(600)),
            ..base.clone()
        },
        PoolPolicy {
            name: "gce".into(),
            cost_per_hour: Some(0.2),
            ..base
        },
    ]
}

/// The Slurm pool with one job of ours pending `age` seconds (Slurm says `Resources`), and
/// its launches checking in after 120 s; the cloud's after 90 s.
fn plan(bundles: u32, age: u64) -> PoolsDecision {
    let pending = ObservedJob {
        launched_here: true,
        ..ObservedJob::new("12", JobState::Pending, S(age), S(0))
    };
    let slurm = PoolTimes {
        checkin_seconds: 120,
        coming: vec![Starting {
            job: "12".into(),
            age,
            pending: true,
            reason: Some("Resources".into()),
            on_hold: false,
            forecast: None,
        }],
        ..PoolTimes::default()
    };
    let gce = PoolTimes {
        checkin_seconds: 90,
        ..PoolTimes::default()
    };
    let observed = PoolsObservation {
        bundles: (0..bundles)
            .map(|i| StagedBundle::new(format!("0x{i}")))
            .collect(),
        pools: vec![
            PoolObservation {
                jobs: vec![pending],
                ..PoolObservation::default()
            },
            PoolObservation::default(),
        ],
        server: None,
        times: vec![slurm, gce],
    };
    plan_pools(&observed, &pools(), S(10_000))
}

fn placed(decision: &PoolsDecision) -> Vec<(&str, String)> {
    (decision.assignments.iter())
        .map(|a| {
            let spill = a.spill.as_ref().map(ToString::to_string);
            (a.pool.as_str(), spill.unwrap_or_default())
        })
        .collect()
}

#[test]
fn within_spill_after_the_free_pool_keeps_its_bundles() {
    // Job 12 pending 4 min, under the 2-minute check-in: no, past it; 240 s ≤ 600 s.
    let decision = plan(2, 240);
    assert_eq!(
        placed(&decision),
        [
            (
                "cpu-slurm",
                "waiting on cpu-slurm: estimated 4 min ≤ spill_after 10 min".into()
            ),
            (
                "cpu-slurm",
                "waiting on cpu-slurm: estimated 4 min ≤ spill_after 10 min".into()
            ),
        ]
    );
    let launches: Vec<u32> = decision.pools.iter().map(|p| p.launches).collect();
    assert_eq!(
        launches,
        [1, 0],
        "the pending job takes one; a new one the other"
    );
}

#[test]
fn past_spill_after_bundles_spill_to_the_paid_pool_that_starts_them_sooner() {
    // Job 12 pending 35 min: the queue says about as long again, for it and behind it.
    let decision = plan(2, 2100);
    let why = "spilled to gce (estimated 90 s): cpu-slurm estimated 35 min > spill_after 10 min \
               (job 12 pending 35 min: Resources)";
    assert_eq!(
        placed(&decision),
        [("gce", why.into()), ("gce", why.into())]
    );
    let launches: Vec<u32> = decision.pools.iter().map(|p| p.launches).collect();
    assert_eq!(
        launches,
        [0, 2],
        "nothing more is bought on the queued pool"
    );
    // The estimate says where it went and why.
    let estimates = crate::estimate::estimate(&decision, &[PoolTimes::default(), gce_times()]);
    assert!(estimates[0].text.ends_with(why), "{}", estimates[0].text);
}

fn gce_times() -> PoolTimes {
    PoolTimes {
        checkin_seconds: 90,
        ..PoolTimes::default()
    }
}

#[test]
fn without_spill_after_or_times_nothing_spills() {
    let mut policies = pools();
    policies[0].spill_after = None;
    let observed = PoolsObservation {
        bundles: vec![StagedBundle::new("0x1")],
        pools: vec![PoolObservation::default(), PoolObservation::default()],
        server: None,
        times: Vec::new(),
    };
    let decision = plan_pools(&observed, &policies, S(10_000));
    assert_eq!(placed(&decision), [("cpu-slurm", String::new())]);
    // spill_after but no times learned: a wait of 0 is within it.
    let decision = plan_pools(&observed, &pools(), S(10_000));
    assert_eq!(decision.assignments[0].pool, "cpu-slurm");
}

#[test]
fn the_price_orders_pools_before_cost_and_declaration() {
    let mut policies = pools();
    policies.swap(0, 1);
    policies[1].cost = 5.0;
    // gce is declared first and has the lower `cost`, but cpu-slurm is free.
    assert_eq!(preference_order(&policies), [1, 0]);
}

#[test]
fn a_job_on_hold_neither_stretches_the_wait_nor_spills() {
    // Review 2026-11-27 §7: Slurm holds job 12 (`JobHeldAdmin`) for an hour, far past
    // spill_after; Slurm would start a new job at once. The free pool launches for the
    // bundle (the held job counts toward max, not as a starting worker) and nothing spills.
    let pending = ObservedJob {
        launched_here: true,
        pending: PendingKind::Held,
        ..ObservedJob::new("12", JobState::Pending, S(3600), S(0))
    };
    let slurm = PoolTimes {
        checkin_seconds: 120,
        coming: vec![Starting {
            job: "12".into(),
            age: 3600,
            pending: true,
            reason: Some("JobHeldAdmin".into()),
            on_hold: true,
            forecast: None,
        }],
        ..PoolTimes::default()
    };
    let observed = PoolsObservation {
        bundles: vec![StagedBundle::new("0x0"), StagedBundle::new("0x1")],
        pools: vec![
            PoolObservation {
                jobs: vec![pending],
                ..PoolObservation::default()
            },
            PoolObservation::default(),
        ],
        server: None,
        times: vec![slurm, PoolTimes::default()],
    };
    let decision = plan_pools(&observed, &pools(), S(10_000));
    let spilled = (decision.assignments.iter()).filter(|a| a.pool != "cpu-slurm");
    assert_eq!(spilled.count(), 0, "{:?}", decision.assignments);
    assert!(
        (decision.assignments.iter()).all(|a| a.coverage == Coverage::NewWorker),
        "{:?}",
        decision.assignments
    );
    assert_eq!(decision.pools[0].launches, 2);
    assert_eq!(decision.pools[0].pending, 1, "still reported pending");
}
