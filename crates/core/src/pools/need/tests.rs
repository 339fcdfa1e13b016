//! The caps as a table, and the claim of the module doc checked on random cases: reading the
//! queue as the client does, until the need is met, changes no decision.

use super::*;
use crate::backend::{JobState, PendingKind};
use crate::bundle::WorkerShape;
use crate::codalab::staged::tests::read_list;
use crate::pools::{ObservedJob, PoolHealth, PoolsObservation, plan_pools};
use crate::simulate::rng::SplitMix64;

const NOW: Duration = Duration::from_secs(10_000);

fn job(id: usize, state: JobState, seconds: u64) -> ObservedJob {
    let pending = state == JobState::Pending;
    ObservedJob {
        id: format!("j{id}"),
        state,
        pending_for: Duration::from_secs(if pending { seconds } else { 0 }),
        active_for: Duration::from_secs(if pending { 0 } else { seconds }),
        checkin: Default::default(),
        launched_here: true,
        pending: PendingKind::Queued,
    }
}

/// `busy` active for an hour, `starting` active for 5 s, `pending` pending for 5 s.
fn jobs(busy: usize, starting: usize, pending: usize) -> PoolObservation {
    let mut list: Vec<ObservedJob> = (0..busy).map(|i| job(i, JobState::Active, 3600)).collect();
    list.extend((0..starting).map(|i| job(100 + i, JobState::Active, 5)));
    list.extend((0..pending).map(|i| job(200 + i, JobState::Pending, 5)));
    PoolObservation {
        jobs: list,
        ..PoolObservation::default()
    }
}

fn policy(mode: LaunchMode, max: u32) -> PoolPolicy {
    PoolPolicy {
        max,
        launch_mode: mode,
        ..PoolPolicy::new("cpu", WorkerShape::from_flags(4, 0, 8192))
    }
}

#[test]
fn caps_table() {
    let backing_off = PoolObservation {
        health: PoolHealth {
            failures: 1,
            last_failure: Some(NOW),
            backoff_until: Some(NOW + Duration::from_secs(60)),
            ..PoolHealth::default()
        },
        ..jobs(0, 0, 0)
    };
    let unobserved = PoolObservation {
        unobserved: Some("squeue: timed out".into()),
        ..jobs(0, 0, 0)
    };
    let stuck = PoolObservation {
        jobs: vec![job(1, JobState::Pending, 900)],
        ..PoolObservation::default()
    };
    let timeout = |mode, max| PoolPolicy {
        pending_timeout: Some(Duration::from_secs(600)),
        ..policy(mode, max)
    };
    use LaunchMode::{Compat, Target};
    let rows: Vec<(&str, PoolPolicy, PoolObservation, usize)> = vec![
        ("compat, idle", policy(Compat, 10), jobs(0, 0, 0), 1),
        ("compat: pending + 1", policy(Compat, 10), jobs(5, 0, 4), 5),
        ("compat at max", policy(Compat, 10), jobs(1, 0, 9), 10),
        (
            "target, idle: max + 1",
            policy(Target, 10),
            jobs(0, 0, 0),
            11,
        ),
        (
            "target: max - busy + 1",
            policy(Target, 10),
            jobs(6, 0, 0),
            5,
        ),
        (
            "target: starting jobs are free, not busy",
            policy(Target, 10),
            jobs(6, 3, 0),
            5,
        ),
        (
            "target: pending jobs are not busy",
            policy(Target, 10),
            jobs(2, 0, 3),
            9,
        ),
        ("target, all busy", policy(Target, 10), jobs(10, 0, 0), 1),
        (
            "target, more busy than max",
            policy(Target, 4),
            jobs(6, 0, 0),
            1,
        ),
        (
            "target, more free than max - busy",
            policy(Target, 4),
            jobs(0, 0, 7),
            8,
        ),
        (
            "target, backing off",
            policy(Target, 10),
            backing_off.clone(),
            0,
        ),
        ("compat ignores backoff", policy(Compat, 10), backing_off, 1),
        ("unobserved", policy(Compat, 10), unobserved, 0),
        ("target, stuck job", timeout(Target, 10), stuck.clone(), 0),
    ];
    for (what, policy, observed, cap) in rows {
        let policies = [policy];
        let need = Need::new(&policies, std::slice::from_ref(&observed), NOW);
        assert_eq!(need.caps(), [cap], "{what}");
        assert_eq!(need.total(), cap, "{what}");
        assert_eq!(need.missing(&[]), cap, "{what}");
    }
}

#[test]
fn missing_counts_what_each_pool_still_lacks() {
    let cpu = policy(LaunchMode::Target, 3);
    let gpu = PoolPolicy {
        name: "gpu".into(),
        shape: WorkerShape::from_flags(8, 1, 8192),
        ..policy(LaunchMode::Target, 1)
    };
    let policies = [cpu, gpu];
    let observed = [jobs(0, 0, 0), jobs(0, 0, 0)];
    let need = Need::new(&policies, &observed, NOW);
    assert_eq!(need.caps(), [4, 2]);
    let bundle = |n: usize, cpus, gpus| StagedBundle {
        request_cpus: cpus,
        request_gpus: gpus,
        ..StagedBundle::new(format!("0x{n}"))
    };
    let cpus: Vec<StagedBundle> = (0..6).map(|n| bundle(n, 1, 0)).collect();
    // 3 go to cpu, 1 overflows to gpu, 2 wait for cpu: cpu 5 ≥ 4, gpu 1 < 2.
    assert_eq!(need.missing(&cpus[..6]), 1);
    assert_eq!(need.missing(&cpus[..2]), 2 + 2);
    let mut with_gpu = cpus.clone();
    with_gpu.push(bundle(9, 1, 1));
    assert_eq!(need.missing(&with_gpu), 0);
    // Bundles that fit no pool add nothing.
    let misfits: Vec<StagedBundle> = (0..50).map(|n| bundle(n, 64, 0)).collect();
    assert_eq!(need.missing(&misfits), need.total());
}

/// The case: the first 500 staged bundles fit no pool; the read pages past them in a
/// few doubling pages and the pool launches for the fitting ones behind them.
#[test]
fn a_misfit_heavy_queue_still_finds_the_fitting_bundles() {
    let policies = [PoolPolicy {
        max_launches_per_tick: 10,
        min_seconds_between_workers: 0,
        ..policy(LaunchMode::Target, 10)
    }];
    let observed = [jobs(0, 0, 0)];
    let mut queue: Vec<StagedBundle> = (0..500)
        .map(|n| StagedBundle {
            request_cpus: 64,
            ..StagedBundle::new(format!("0xmisfit{n}"))
        })
        .collect();
    queue.extend((0..300).map(|n| StagedBundle {
        request_cpus: 1,
        ..StagedBundle::new(format!("0xfit{n}"))
    }));
    let need = Need::new(&policies, &observed, NOW);
    let (pages, read, complete) = read_list(&queue, &need, 1000);
    assert_eq!(pages.len(), 6, "{pages:?}");
    assert!(!complete);
    let fitting = read.iter().filter(|b| b.request_cpus == 1).count();
    assert!(fitting >= 11, "{fitting} fitting bundles read");
    let decision = plan_pools(
        &PoolsObservation {
            times: Vec::new(),
            server: None,
            bundles: read,
            pools: observed.to_vec(),
        },
        &policies,
        NOW,
    );
    assert_eq!(decision.pools[0].launches, 10);
    assert_eq!(decision.pools[0].target, Some(10));
}

/// What a decision is made of, per pool: launches, stops, target and the reason codes.
fn outcome(decision: &crate::pools::PoolsDecision) -> Vec<(u32, Vec<String>, Option<u32>, String)> {
    decision
        .pools
        .iter()
        .map(|d| (d.launches, d.stops.clone(), d.target, d.reason_codes()))
        .collect()
}

fn random_policy(rng: &mut SplitMix64, i: usize) -> PoolPolicy {
    let compat = rng.between(0, 3) == 0;
    let shapes = [(2, 0), (4, 0), (8, 2)];
    let (cpus, gpus) = shapes[i];
    PoolPolicy {
        min: rng.between(0, 1) as u32,
        max: 1 + rng.between(0, 5) as u32,
        cost: rng.between(0, 2) as f64,
        launch_mode: if compat {
            LaunchMode::Compat
        } else {
            LaunchMode::Target
        },
        max_launches_per_tick: if compat {
            1
        } else {
            1 + rng.between(0, 5) as u32
        },
        min_seconds_between_workers: rng.between(0, 1) * 60,
        pending_timeout: (!compat && rng.between(0, 3) == 0).then(|| Duration::from_secs(100)),
        tag: (i == 2).then(|| "gpu".to_owned()),
        tag_exclusive: i == 2 && rng.between(0, 1) == 0,
        ..PoolPolicy::new(format!("p{i}"), WorkerShape::from_flags(cpus, gpus, 8192))
    }
}

fn random_observation(rng: &mut SplitMix64, max: u32) -> PoolObservation {
    let jobs = (0..rng.between(0, u64::from(max) + 2))
        .map(|j| {
            let state = if rng.between(0, 1) == 0 {
                JobState::Pending
            } else {
                JobState::Active
            };
            job(j as usize, state, rng.between(0, 200))
        })
        .collect();
    let health = if rng.between(0, 7) == 0 {
        PoolHealth {
            failures: 1,
            last_failure: Some(NOW),
            backoff_until: Some(NOW + Duration::from_secs(60)),
            ..PoolHealth::default()
        }
    } else {
        PoolHealth::default()
    };
    PoolObservation {
        jobs,
        stopping: rng.between(0, 1) as usize,
        since_last_launch: Some(Duration::from_secs(rng.between(0, 120))),
        health,
        unobserved: (rng.between(0, 11) == 0).then(|| "listing failed".to_owned()),
        budget_reached: None,
        budget_room: None,
        checkins_seen: true,
        capacity: Default::default(),
        // Half the pools have had jobs to spare for an hour: their surplus is withdrawn.
        surplus_for: (rng.between(0, 1) == 0).then(|| Duration::from_secs(3600)),
        hedge_room: 0,
    }
}

fn random_queue(rng: &mut SplitMix64, len: u64) -> Vec<StagedBundle> {
    // (cpus, gpus, queue): fits p0..; fits p1 and p2; GPU (p2 only); tagged; fits nothing.
    let kinds = [
        (1, 0, ""),
        (3, 0, ""),
        (1, 1, "gpu"),
        (1, 0, "gpu"),
        (64, 0, ""),
    ];
    (0..len)
        .map(|n| {
            let (cpus, gpus, queue) = kinds[rng.between(0, kinds.len() as u64 - 1) as usize];
            StagedBundle {
                request_cpus: cpus,
                request_gpus: gpus,
                request_queue: queue.into(),
                ..StagedBundle::new(format!("0x{n:05}"))
            }
        })
        .collect()
}

/// Random pools (compat and target, tags, costs, timeouts), jobs (busy, starting, pending,
/// stuck, stopping), backoffs, unobserved pools and queues with misfits anywhere: the decision
/// on what the client reads equals the decision on the whole queue, reason codes included.
#[test]
fn policy_sees_enough() {
    let mut rng = SplitMix64::new(15);
    for case in 0..3000 {
        let policies: Vec<PoolPolicy> = (0..1 + rng.between(0, 2) as usize)
            .map(|i| random_policy(&mut rng, i))
            .collect();
        let observed: Vec<PoolObservation> = policies
            .iter()
            .map(|p| random_observation(&mut rng, p.max))
            .collect();
        let sum_max: u64 = policies.iter().map(|p| u64::from(p.max)).sum();
        let len = rng.between(0, 8 * sum_max + 40);
        let queue = random_queue(&mut rng, len);
        let max_page = [3, 10, 1000][rng.between(0, 2) as usize];
        let need = Need::new(&policies, &observed, NOW);
        let (_, read, complete) = read_list(&queue, &need, max_page);
        assert!(complete || need.missing(&read) == 0, "case {case}");
        let plan = |bundles: Vec<StagedBundle>| {
            outcome(&plan_pools(
                &PoolsObservation {
                    times: Vec::new(),
                    server: None,
                    bundles,
                    pools: observed.clone(),
                },
                &policies,
                NOW,
            ))
        };
        assert_eq!(
            plan(read),
            plan(queue),
            "case {case}: {policies:#?} {observed:#?}"
        );
    }
}
