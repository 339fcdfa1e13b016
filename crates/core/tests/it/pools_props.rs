//! Property tests of the pure pool policy (`pools::plan_pools`): over random pools and random
//! sequences of observations, no pool ever exceeds its `max` (jobs being stopped included),
//! every reason is true of its figures, no bundle that fits a pool is left without a
//! worker when capacity and rate allow, and a bundle the server does not start on the
//! worker the model gives it (overdue) costs one launch at most, ever.

use codalab_wm_core::budget::LaunchRoom;
use codalab_wm_core::checkin::JobCheckin;
use codalab_wm_core::dispatch::Owners;
use codalab_wm_core::policy::Reason;
use codalab_wm_core::pools::fallback::{CapacityState, Fallback};
use codalab_wm_core::pools::{
    Coverage, LaunchMode, ObservedJob, PoolHealth, PoolObservation, PoolPolicy, PoolsObservation,
    ServerView, misfit, plan_pools,
};
use codalab_wm_core::{JobState, PendingKind, StagedBundle, WorkerShape};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::time::Duration;

const TAGS: [&str; 3] = ["", "gpuq", "nlp"];

fn policy_strategy(index: usize) -> impl Strategy<Value = PoolPolicy> {
    (
        (0u32..4, 0u32..6, 0u32..3, 0usize..3, any::<bool>()),
        (
            0u32..4,
            1u32..6,
            0u64..90,
            prop::option::of(1u64..900),
            any::<bool>(),
            0usize..3,
        ),
    )
        .prop_map(
            move |(
                (min, extra, gpus, tag, exclusive),
                (cost, cap, rate, timeout, target, race),
            )| {
                let tag = TAGS[tag];
                let launch_mode = if target {
                    LaunchMode::Target
                } else {
                    LaunchMode::Compat
                };
                PoolPolicy {
                    min,
                    max: min + extra,
                    tag: (!tag.is_empty()).then(|| tag.to_owned()),
                    tag_exclusive: exclusive && !tag.is_empty(),
                    cost: f64::from(cost),
                    pending_timeout: timeout.map(Duration::from_secs).filter(|_| target),
                    launch_mode,
                    max_launches_per_tick: if target { cap } else { 1 },
                    race: if target { [1.0, 2.0, 2.5][race] } else { 1.0 },
                    min_seconds_between_workers: rate,
                    ..PoolPolicy::new(
                        format!("pool{index}"),
                        WorkerShape::from_flags(2 + 2 * gpus, gpus, 4096),
                    )
                }
            },
        )
}

/// Every target pool but the first falls back to the first.
fn with_fallbacks(mut policies: Vec<PoolPolicy>) -> Vec<PoolPolicy> {
    for policy in policies.iter_mut().skip(1) {
        if policy.launch_mode == LaunchMode::Target {
            policy.fallback = Some(Fallback::to("pool0"));
        }
    }
    policies
}

fn policies_strategy() -> impl Strategy<Value = Vec<PoolPolicy>> {
    (1usize..4).prop_flat_map(|n| (0..n).map(policy_strategy).collect::<Vec<_>>())
}

fn bundles_strategy() -> impl Strategy<Value = Vec<StagedBundle>> {
    prop::collection::vec((1u32..8, 0u32..4, 0usize..3), 0..12).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (cpus, gpus, queue))| StagedBundle {
                request_cpus: cpus,
                request_gpus: gpus,
                request_queue: TAGS[queue].to_owned(),
                ..StagedBundle::new(format!("0x{i}"))
            })
            .collect()
    })
}

/// What happens to one pool's jobs between two ticks.
#[derive(Debug, Clone)]
struct Churn {
    activate: usize,
    end: usize,
    gone_stopping: usize,
    fail_submit: bool,
    unobserved: bool,
    over_budget: bool,
    /// The budget's room for launches this tick, when it has a limit.
    budget_room: Option<u32>,
    /// Where a pool with a `fallback` takes its launches: 0 its own, 1 the fallback, 2 a retry.
    capacity: u8,
}

fn churn_strategy() -> impl Strategy<Value = Churn> {
    (
        0usize..3,
        0usize..3,
        0usize..3,
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.05),
        prop::bool::weighted(0.1),
        prop::option::weighted(0.3, 0u32..4),
        0u8..3,
    )
        .prop_map(
            |(
                activate,
                end,
                gone_stopping,
                fail_submit,
                unobserved,
                over_budget,
                budget_room,
                capacity,
            )| {
                Churn {
                    activate,
                    end,
                    gone_stopping,
                    fail_submit,
                    unobserved,
                    over_budget,
                    budget_room,
                    capacity,
                }
            },
        )
}

/// A simulated platform for one pool.
#[derive(Debug, Default, Clone)]
struct SimPool {
    /// (id, state, pending since)
    jobs: Vec<(u64, JobState, Duration)>,
    stopping: Vec<u64>,
    last_launch: Option<Duration>,
    health: PoolHealth,
}

impl SimPool {
    fn counted(&self) -> usize {
        self.jobs.len() + self.stopping.len()
    }

    fn churn(&mut self, churn: &Churn) {
        for job in self
            .jobs
            .iter_mut()
            .filter(|j| j.1 == JobState::Pending)
            .take(churn.activate)
        {
            job.1 = JobState::Active;
        }
        let ended = churn.end.min(self.jobs.len());
        self.jobs.drain(..ended);
        let gone = churn.gone_stopping.min(self.stopping.len());
        self.stopping.drain(..gone);
    }

    fn observe(&self, now: Duration, churn: &Churn) -> PoolObservation {
        PoolObservation {
            jobs: self
                .jobs
                .iter()
                .map(|(id, state, since)| ObservedJob {
                    id: id.to_string(),
                    state: *state,
                    active_for: if *state == JobState::Active {
                        now - *since
                    } else {
                        Duration::ZERO
                    },
                    pending_for: if *state == JobState::Pending {
                        now - *since
                    } else {
                        Duration::ZERO
                    },
                    checkin: Default::default(),
                    launched_here: true,
                    pending: PendingKind::Queued,
                })
                .collect(),
            stopping: self.stopping.len(),
            since_last_launch: self.last_launch.map(|t| now - t),
            health: self.health,
            unobserved: churn.unobserved.then(|| "listing failed".to_owned()),
            budget_reached: churn.over_budget.then(|| Reason::BudgetReached {
                scope: "all pools".into(),
                detail: "10 of 10 worker-hours".into(),
                resumes_at_seconds: None,
            }),
            budget_room: churn.budget_room.map(|workers| LaunchRoom {
                scope: "cpu".into(),
                workers,
                detail: "room".into(),
            }),
            checkins_seen: true,
            // Any surplus is withdrawn at once.
            surplus_for: Some(Duration::from_secs(3600)),
            capacity: match churn.capacity {
                0 => CapacityState::Own,
                1 => CapacityState::Fallback {
                    since_seconds: 0,
                    retry_at_seconds: now.as_secs() + 600,
                    why: "stockouts".into(),
                },
                _ => CapacityState::Retrying { since_seconds: 0 },
            },
            hedge_room: 0,
        }
    }
}

/// Every inequality a reason prints (`2 >= 4`, `30 < 60`) holds, and the figures are the
/// pool's: `max_reached` names the jobs the pool holds and says "already" only at its max.
fn reasons_are_true_of_their_figures(
    pool: &codalab_wm_core::pools::PoolDecision,
    jobs: usize,
) -> Result<(), TestCaseError> {
    for reason in &pool.reasons {
        let text = reason.to_string();
        for (a, op, b) in inequalities(&text) {
            let holds = match op {
                ">=" => a >= b,
                ">" => a > b,
                _ => a < b,
            };
            prop_assert!(holds, "`{}` is false ({:?})", text, pool);
        }
        if let Reason::MaxReached { jobs: said, max } = reason {
            prop_assert_eq!(*said, jobs, "{}", text);
            prop_assert_eq!(text.contains("already"), jobs >= *max as usize, "{}", text);
        }
    }
    Ok(())
}

/// The `a OP b` comparisons of integers in `text`.
fn inequalities(text: &str) -> Vec<(u64, &str, u64)> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || "(),:;".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(3)
        .filter(|w| matches!(w[1], ">=" | ">" | "<"))
        .filter_map(|w| Some((w[0].parse().ok()?, w[1], w[2].parse().ok()?)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Whatever is observed, tick after tick, a pool's jobs (pending, active, stuck and being
    /// stopped) never exceed its max, launches never exceed the per-tick cap, a pool that
    /// is backing off or over its budget launches nothing (in either launch mode), and a
    /// target pool with a `fallback` launches nothing on the fallback and at most one in a
    /// retry.
    #[test]
    fn no_pool_ever_exceeds_its_max(
        policies in policies_strategy().prop_map(with_fallbacks),
        steps in prop::collection::vec(
            (bundles_strategy(), prop::collection::vec(churn_strategy(), 3), 1u64..400),
            1..25,
        ),
    ) {
        let mut sims = vec![SimPool::default(); policies.len()];
        let mut now = Duration::ZERO;
        let mut next_id = 0u64;
        for (bundles, churns, advance) in steps {
            now += Duration::from_secs(advance);
            for (sim, churn) in sims.iter_mut().zip(&churns) {
                sim.churn(churn);
            }
            let observed = PoolsObservation { times: Vec::new(),
server: None,
                bundles,
                pools: sims.iter().zip(&churns).map(|(s, c)| s.observe(now, c)).collect(),
            };
            let decision = plan_pools(&observed, &policies, now);
            for (i, (pool, policy)) in decision.pools.iter().zip(&policies).enumerate() {
                let sim = &mut sims[i];
                prop_assert!(pool.launches <= policy.max_launches_per_tick.max(1), "{pool:?}");
                if churns[i].over_budget {
                    prop_assert_eq!(pool.launches, 0, "over budget: {:?}", pool);
                    let unobserved = churns[i].unobserved;
                    // Said as the reason, unless an earlier one (unobserved, backing off) made the pool skip.
                    prop_assert!(unobserved || pool.reasons.iter().any(|r| matches!(r.code(), "budget_reached" | "backing_off")), "{:?}", pool);
                }
                reasons_are_true_of_their_figures(pool, sim.counted())?;
                if let Some(room) = churns[i].budget_room {
                    prop_assert!(pool.launches <= room, "budget room {}: {:?}", room, pool);
                }
                if policy.launch_mode == LaunchMode::Target && sim.health.backing_off(now).is_some() {
                    prop_assert_eq!(pool.launches, 0, "backing off: {:?}", pool);
                }
                if policy.fallback.is_some() {
                    let most = [u32::MAX, 0, 1][usize::from(churns[i].capacity)];
                    prop_assert!(pool.launches <= most, "capacity {}: {:?}", churns[i].capacity, pool);
                }
                for id in &pool.stops {
                    let id: u64 = id.parse().unwrap();
                    sim.jobs.retain(|j| j.0 != id);
                    sim.stopping.push(id);
                }
                if !pool.stops.is_empty() {
                    sim.health.record_failure(now, codalab_wm_core::pools::Failure::TRANSIENT);
                }
                for _ in 0..pool.launches {
                    if churns[i].fail_submit {
                        sim.health.record_failure(now, codalab_wm_core::pools::Failure::TRANSIENT);
                        break;
                    }
                    next_id += 1;
                    sim.jobs.push((next_id, JobState::Pending, now));
                    sim.last_launch = Some(now);
                }
                prop_assert!(
                    sim.counted() <= policy.max as usize,
                    "pool {} has {} jobs > max {} after {:?}", policy.name, sim.counted(), policy.max, pool
                );
            }
        }
    }

    /// With no rate limit, a large per-tick cap, no backoff and every pool observed, every
    /// bundle that fits a pool gets a pending worker or a launch, unless every pool it fits is
    /// full; the pending jobs withdrawn are none of the ones the bundles are given to.
    #[test]
    fn fitting_bundles_get_a_worker_when_capacity_and_rate_allow(
        policies in policies_strategy(),
        bundles in bundles_strategy(),
        load in prop::collection::vec((0usize..4, 0usize..4, 0usize..2), 3),
    ) {
        let policies: Vec<PoolPolicy> = policies
            .into_iter()
            .map(|p| PoolPolicy {
                launch_mode: LaunchMode::Target,
                max_launches_per_tick: 1000,
                pending_timeout: None,
                ..p
            })
            .collect();
        let pools: Vec<PoolObservation> = policies
            .iter()
            .zip(&load)
            .map(|(policy, (active, pending, stopping))| {
                // Start within max.
                let mut left = policy.max as usize;
                let stopping = (*stopping).min(left);
                left -= stopping;
                let active = (*active).min(left);
                left -= active;
                let pending = (*pending).min(left);
                let mut jobs: Vec<ObservedJob> = (0..active)
                    .map(|i| ObservedJob { id: format!("a{i}"), state: JobState::Active, pending_for: Duration::ZERO, active_for: Duration::from_secs(30 * (i as u64)), checkin: Default::default(), launched_here: true, pending: PendingKind::Queued })
                    .collect();
                jobs.extend((0..pending).map(|i| ObservedJob {
                    id: format!("p{i}"),
                    state: JobState::Pending,
                    pending_for: Duration::from_secs(1),
                    active_for: Duration::ZERO,
                    checkin: Default::default(),
                    launched_here: true,
                    pending: PendingKind::Queued,
                }));
                // Any surplus is withdrawn at once.
                PoolObservation { jobs, stopping, surplus_for: Some(Duration::from_secs(3600)), ..PoolObservation::default() }
            })
            .collect();
        let observed = PoolsObservation { times: Vec::new(), bundles: bundles.clone(), pools: pools.clone(), server: None };
        let decision = plan_pools(&observed, &policies, Duration::from_secs(1000));
        for (i, pool) in decision.pools.iter().enumerate() {
            let new_workers = decision
                .assignments
                .iter()
                .filter(|a| a.pool == pool.pool && a.coverage == Coverage::NewWorker)
                .count();
            prop_assert!(pool.launches as usize >= new_workers, "{pool:?} has {new_workers} bundles needing a launch");
            // The only stops here withdraw pending jobs, none a bundle is given to (a bundle is
            // given to a pending or starting one: `Coverage::PendingWorker`).
            let jobs = pools[i].jobs.len();
            let on_pending = decision
                .assignments
                .iter()
                .filter(|a| a.pool == pool.pool && a.coverage == Coverage::PendingWorker)
                .count();
            prop_assert!(pool.stops.iter().all(|id| id.starts_with('p')), "{pool:?} stops a job that is not pending");
            prop_assert!(
                on_pending + pool.stops.len() <= jobs,
                "{pool:?} withdraws a job a bundle waits for ({on_pending} bundles on {jobs} jobs)"
            );
            let jobs = pools[i].jobs.len() + pools[i].stopping;
            prop_assert!(jobs + pool.launches as usize <= policies[i].max as usize);
        }
        for bundle in &bundles {
            let fitting: Vec<usize> = (0..policies.len()).filter(|&p| misfit(&policies[p], bundle).is_none()).collect();
            if let Some(assignment) = decision.assignments.iter().find(|a| a.uuid == bundle.uuid) {
                let p = policies.iter().position(|p| p.name == assignment.pool).unwrap();
                prop_assert!(fitting.contains(&p), "assigned to a pool it does not fit");
                continue;
            }
            let unserved = decision.unserved.iter().find(|u| u.uuid == bundle.uuid);
            prop_assert!(unserved.is_some(), "bundle {} neither assigned nor unserved", bundle.uuid);
            let unserved = unserved.unwrap();
            if fitting.is_empty() {
                prop_assert_eq!(&unserved.reason, &Reason::NoFittingPool);
            } else {
                prop_assert!(matches!(unserved.reason, Reason::MaxReached { .. }), "{unserved:?}");
                for p in fitting {
                    let jobs = pools[p].jobs.len() + pools[p].stopping;
                    prop_assert_eq!(
                        jobs + decision.pools[p].launches as usize,
                        policies[p].max as usize,
                        "bundle {} waits although pool {} has room", bundle.uuid, policies[p].name
                    );
                }
            }
        }
    }

    /// Review 2026-11-27 §4. Every staged bundle is overdue: the server starts none of them,
    /// on any worker. Workers are launched, check in and stay idle, and some exit idle (as
    /// `--worker-idle-seconds` ends them); the manager remembers each tick's
    /// `overdue_launches` as the `launched_for` of the next (`engine::server_view`).
    /// However long it goes on, the pools launch at most one worker per overdue bundle.
    #[test]
    fn an_overdue_bundle_costs_one_launch_at_most_ever(
        policies in policies_strategy(),
        bundles in bundles_strategy(),
        steps in prop::collection::vec((0usize..3, 0usize..3, 1u64..400), 1..30),
    ) {
        let policies: Vec<PoolPolicy> = policies
            .into_iter()
            .map(|p| PoolPolicy {
                launch_mode: LaunchMode::Target,
                min: 0,
                max_launches_per_tick: p.max_launches_per_tick.max(1),
                pending_timeout: None,
                ..p
            })
            .collect();
        let overdue: BTreeSet<String> = bundles.iter().map(|b| b.uuid.clone()).collect();
        let mut launched_for = BTreeSet::new();
        // Per pool: (id, active, since).
        let mut jobs: Vec<Vec<(u64, bool, Duration)>> = vec![Vec::new(); policies.len()];
        let (mut now, mut next_id, mut launches) = (Duration::ZERO, 0u64, 0usize);
        for (activate, exit, advance) in steps {
            now += Duration::from_secs(advance);
            for pool in &mut jobs {
                for job in pool.iter_mut().filter(|j| !j.1).take(activate) {
                    *job = (job.0, true, now);
                }
                let mut exited = 0;
                pool.retain(|j| !(j.1 && exited < exit && { exited += 1; true }));
            }
            let pools = jobs
                .iter()
                .map(|pool| PoolObservation {
                    jobs: pool
                        .iter()
                        .map(|&(id, active, since)| {
                            let (state, checkin) = match active {
                                true => (JobState::Active, JobCheckin::CheckedIn { runs: 0, terminating: false }),
                                false => (JobState::Pending, JobCheckin::NotYet { unseen_for: now - since }),
                            };
                            ObservedJob {
                                checkin,
                                ..ObservedJob::new(id.to_string(), state, now - since, now - since).launched_here()
                            }
                        })
                        .collect(),
                    checkins_seen: true,
                    ..PoolObservation::default()
                })
                .collect();
            let server = ServerView {
                owners: Owners { root: "0".into(), manager: "0".into(), ..Owners::default() },
                overdue: overdue.clone(),
                launched_for: launched_for.clone(),
                ..ServerView::default()
            };
            let observed = PoolsObservation {
                bundles: bundles.clone(),
                pools,
                server: Some(server),
                times: Vec::new(),
            };
            let decision = plan_pools(&observed, &policies, now);
            launched_for.extend(decision.overdue_launches.iter().cloned());
            for (pool, decided) in jobs.iter_mut().zip(&decision.pools) {
                for _ in 0..decided.launches {
                    next_id += 1;
                    pool.push((next_id, false, now));
                    launches += 1;
                }
            }
            prop_assert!(
                launches <= launched_for.len(),
                "{} launches for {} overdue bundles launched for ({} staged): {:?}",
                launches, launched_for.len(), bundles.len(), decision
            );
        }
    }
}
