//! The fallback's states as a timeline.

use super::*;

const S: fn(u64) -> Duration = Duration::from_secs;

fn rules() -> Fallback {
    Fallback {
        after: 3,
        window: S(600),
        cooldown: S(1800),
        ..Fallback::to("gpu-standard")
    }
}

#[test]
fn three_events_within_the_window_switch_and_older_ones_do_not_count() {
    let mut capacity = Capacity::default();
    assert_eq!(
        capacity.event(&rules(), S(0), "job 1 preempted".into()),
        None
    );
    assert_eq!(
        capacity.event(&rules(), S(200), "job 2 preempted".into()),
        None
    );
    // 700 s: the first event left the 600 s window; two count.
    assert_eq!(
        capacity.event(&rules(), S(700), "job 3 preempted".into()),
        None
    );
    let switch = capacity.event(&rules(), S(750), "no capacity in every zone".into());
    assert_eq!(
        switch,
        Some(Switch::ToFallback {
            why: "3 capacity events in 10 min, the last: no capacity in every zone".into()
        })
    );
    assert_eq!(
        capacity.state,
        CapacityState::Fallback {
            since_seconds: 750,
            retry_at_seconds: 2550,
            why: "3 capacity events in 10 min, the last: no capacity in every zone".into(),
        }
    );
}

#[test]
fn the_cooldown_restarts_with_each_event_then_one_launch_retries_and_a_checkin_restores() {
    let rules = Fallback {
        after: 1,
        ..rules()
    };
    let mut capacity = Capacity::default();
    assert!(capacity.event(&rules, S(0), "stockout".into()).is_some());
    assert_eq!(capacity.tick(S(1000)), None);
    // A preemption of a worker still running there restarts the cool-down.
    assert_eq!(
        capacity.event(&rules, S(1000), "job 4 preempted".into()),
        None
    );
    assert_eq!(capacity.tick(S(1800)), None);
    assert_eq!(capacity.tick(S(2800)), Some(Switch::Retry));
    assert_eq!(
        capacity.state,
        CapacityState::Retrying {
            since_seconds: 2800
        }
    );
    assert_eq!(capacity.checked_in(), Some(Switch::Restored));
    assert_eq!(capacity.state, CapacityState::Own);
    // Restored: a check-in changes nothing more.
    assert_eq!(capacity.checked_in(), None);
}

#[test]
fn a_retry_that_meets_a_capacity_event_goes_back_to_the_fallback() {
    let rules = Fallback {
        after: 1,
        ..rules()
    };
    let mut capacity = Capacity::default();
    capacity.event(&rules, S(0), "stockout".into());
    capacity.tick(S(1800));
    let switch = capacity.event(&rules, S(1900), "stockout again".into());
    assert_eq!(
        switch,
        Some(Switch::ToFallback {
            why: "the retry failed: stockout again".into()
        })
    );
    assert!(matches!(
        capacity.state,
        CapacityState::Fallback {
            retry_at_seconds: 3700,
            ..
        }
    ));
    // On its own capacity a check-in is nothing new.
    let mut own = Capacity::default();
    assert_eq!(own.checked_in(), None);
    assert_eq!(own.tick(S(99_999)), None);
}

mod plan {
    use super::*;
    use crate::bundle::{StagedBundle, WorkerShape};
    use crate::pools::{
        PoolObservation, PoolPolicy, PoolsObservation, plan_pools, preference_order, with_fallbacks,
    };

    fn pool(name: &str, price: f64) -> PoolPolicy {
        PoolPolicy {
            cost_per_hour: Some(price),
            min_seconds_between_workers: 0,
            max_launches_per_tick: 10,
            ..PoolPolicy::new(name, WorkerShape::from_flags(4, 0, 8192))
        }
    }

    fn spot(min_on_demand: u32) -> PoolPolicy {
        PoolPolicy {
            fallback: Some(Fallback {
                min_on_demand,
                ..Fallback::to("standard")
            }),
            ..pool("spot", 0.3)
        }
    }

    #[test]
    fn a_pools_fallback_comes_right_after_it_whatever_lies_between() {
        let policies = [spot(0), pool("middle", 0.5), pool("standard", 1.0)];
        assert_eq!(preference_order(&policies), [0, 1, 2]);
        assert_eq!(
            with_fallbacks(preference_order(&policies), &policies),
            [0, 2, 1]
        );
    }

    fn plan(policies: &[PoolPolicy], capacity: CapacityState, bundles: u32) -> Vec<(String, u32)> {
        let observed = PoolsObservation {
            bundles: (0..bundles)
                .map(|i| StagedBundle::new(format!("0x{i}")))
                .collect(),
            pools: vec![
                PoolObservation {
                    capacity,
                    ..PoolObservation::default()
                },
                PoolObservation::default(),
                PoolObservation::default(),
            ],
            server: None,
            times: Vec::new(),
        };
        let decision = plan_pools(&observed, policies, S(100));
        (decision.pools.iter())
            .map(|p| (p.pool.clone(), p.launches))
            .collect()
    }

    #[test]
    fn on_the_fallback_the_pool_launches_nothing_and_its_bundles_go_to_the_fallback() {
        let policies = [spot(0), pool("middle", 0.5), pool("standard", 1.0)];
        let fallback = CapacityState::Fallback {
            since_seconds: 0,
            retry_at_seconds: 1800,
            why: "stockouts".into(),
        };
        let launches = plan(&policies, fallback, 2);
        let expected = [("spot", 0), ("middle", 0), ("standard", 2)];
        assert_eq!(launches, expected.map(|(p, n)| (p.to_owned(), n)));
        // Retrying: one launch on the pool itself, the rest on the fallback.
        let retrying = CapacityState::Retrying {
            since_seconds: 1800,
        };
        let launches = plan(&policies, retrying, 3);
        let expected = [("spot", 1), ("middle", 0), ("standard", 2)];
        assert_eq!(launches, expected.map(|(p, n)| (p.to_owned(), n)));
    }

    #[test]
    fn min_on_demand_keeps_a_floor_of_workers_on_the_fallback() {
        let policies = [spot(1), pool("middle", 0.5), pool("standard", 1.0)];
        let launches = plan(&policies, CapacityState::Own, 3);
        let expected = [("spot", 2), ("middle", 0), ("standard", 1)];
        assert_eq!(launches, expected.map(|(p, n)| (p.to_owned(), n)));
        let policies = [spot(0), pool("middle", 0.5), pool("standard", 1.0)];
        let launches = plan(&policies, CapacityState::Own, 3);
        let expected = [("spot", 3), ("middle", 0), ("standard", 0)];
        assert_eq!(launches, expected.map(|(p, n)| (p.to_owned(), n)));
    }
}

#[test]
fn a_retry_whose_worker_does_not_check_in_within_its_bounds_is_a_failed_retry() {
    // Review 2026-11-27 §14: the retry launch stays queued (AWS Batch keeps a Spot job
    // RUNNABLE through a stockout) and no capacity event comes. Once its worker has not
    // checked in within the pool's bounds (here 900 s), the retry counts as failed: back to
    // the fallback, for another cool-down, and the bundles go there.
    let rules = Fallback {
        after: 1,
        ..rules()
    };
    let mut capacity = Capacity::default();
    capacity.event(&rules, S(0), "stockout".into());
    assert_eq!(capacity.tick(S(1800)), Some(Switch::Retry));
    assert_eq!(capacity.retry_overdue(&rules, S(2699), S(900)), None);
    let switch = capacity.retry_overdue(&rules, S(2700), S(900));
    assert_eq!(
        switch,
        Some(Switch::ToFallback {
            why: "the retry failed: its worker did not check in within 15 min".into()
        })
    );
    assert!(matches!(
        capacity.state,
        CapacityState::Fallback {
            retry_at_seconds: 4500,
            ..
        }
    ));
    // On the fallback or its own capacity the bound is nothing.
    assert_eq!(capacity.retry_overdue(&rules, S(9000), S(900)), None);
}
