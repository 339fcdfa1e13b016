use super::*;

const H: u64 = 3600;

fn s(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

#[test]
fn usage_counts_active_workers_times_the_gap_in_hourly_buckets() {
    let mut window = UsageWindow::default();
    window.add(s(600), 3, s(600)); // 3 workers × 10 min
    window.add(s(1200), 3, s(600));
    assert_eq!(window.worker_hours(s(1200)), 1.0);
    window.add(s(H + 60), 4, s(15 * 60)); // next bucket
    assert_eq!(window.worker_hours(s(H + 60)), 2.0);
    assert_eq!(window.buckets.len(), 2);
}

#[test]
fn a_gap_longer_than_the_cap_is_metered_as_the_cap() {
    let mut window = UsageWindow::default();
    window.add(s(5 * H), 4, s(5 * H));
    assert_eq!(window.worker_hours(s(5 * H)), 1.0, "4 workers × 15 min");
}

#[test]
fn the_window_rolls_bucket_by_bucket() {
    let mut window = UsageWindow::default();
    window.add(s(100), 6, s(600)); // bucket 0: 1 worker-hour
    window.add(s(H + 100), 12, s(600)); // bucket 1: 2 worker-hours
    assert_eq!(
        window.worker_hours(s(24 * H - 1)),
        3.0,
        "both in the window"
    );
    assert_eq!(window.worker_hours(s(25 * H)), 2.0, "bucket 0 has left");
    assert_eq!(window.worker_hours(s(26 * H)), 0.0, "both have left");
    window.add(s(26 * H), 0, s(60));
    assert_eq!(
        window.buckets.len(),
        1,
        "old buckets are dropped: memory is bounded"
    );
}

#[test]
fn below_at_says_when_the_window_has_room_again() {
    let mut window = UsageWindow::default();
    window.add(s(100), 6, s(600)); // 1 h in bucket 0
    window.add(s(H + 100), 12, s(600)); // 2 h in bucket 1
    let now = s(2 * H);
    assert_eq!(window.below_at(now, 4.0), None, "3 < 4: room now");
    assert_eq!(
        window.below_at(now, 3.0),
        Some(s(25 * H)),
        "bucket 0 leaves at 25 h"
    );
    assert_eq!(
        window.below_at(now, 1.0),
        Some(s(26 * H)),
        "both must leave"
    );
}

#[test]
fn judge_names_the_limit_reached() {
    let limits = BudgetLimits {
        max_worker_hours_per_day: Some(10.0),
        max_cost_per_day: Some(5.0),
    };
    let cases = [
        (9.9, None, None),
        (10.0, None, Some("max_worker_hours_per_day")),
        (1.0, Some(4.99), None),
        (1.0, Some(5.0), Some("max_cost_per_day")),
        (11.0, Some(6.0), Some("max_worker_hours_per_day")),
    ];
    for (worker_hours, cost, want) in cases {
        let status = judge("cpu", limits, Use { worker_hours, cost });
        match want {
            None => assert_eq!(status.reached, None, "{worker_hours} h, {cost:?}"),
            Some(key) => assert!(
                status.reached.as_deref().is_some_and(|r| r.contains(key)),
                "{worker_hours} h, {cost:?}: {:?}",
                status.reached
            ),
        }
    }
    let unlimited = judge(
        "cpu",
        BudgetLimits::default(),
        Use {
            worker_hours: 1e9,
            cost: None,
        },
    );
    assert_eq!(unlimited.reached, None, "no limit, never reached");
}

#[test]
fn validate_names_the_bad_key() {
    let bad = BudgetLimits {
        max_worker_hours_per_day: Some(-1.0),
        max_cost_per_day: None,
    };
    assert!(
        bad.validate(None)
            .unwrap_err()
            .contains("max_worker_hours_per_day")
    );
    let nan_cost = BudgetLimits::default().validate(Some(f64::NAN));
    assert!(nan_cost.unwrap_err().contains("cost_per_hour"));
    assert_eq!(BudgetLimits::default().validate(Some(2.5)), Ok(()));
}

/// The review's case (4.2): 10 worker-hours, 600 s of minimum life per worker: an empty day
/// has room for 60 launches, 50 running workers leave room for 10, 60 for none; the cost
/// limit and the tighter of the two.
#[test]
fn launch_room_reserves_each_workers_minimum_life() {
    let life = s(600);
    let hours = BudgetLimits {
        max_worker_hours_per_day: Some(10.0),
        max_cost_per_day: None,
    };
    let used = |worker_hours: f64, cost: Option<f64>| Use { worker_hours, cost };
    let room = |limits, used, committed, per_hour| {
        launch_room("cpu", limits, used, (committed, life), per_hour).map(|r| r.workers)
    };
    assert_eq!(room(hours, used(0.0, None), 0, None), Some(60));
    assert_eq!(room(hours, used(0.0, None), 50, None), Some(10));
    assert_eq!(room(hours, used(0.0, None), 60, None), Some(0));
    assert_eq!(room(hours, used(9.0, None), 0, None), Some(6));
    assert_eq!(room(hours, used(12.0, None), 0, None), Some(0), "over");
    let cost = BudgetLimits {
        max_worker_hours_per_day: None,
        max_cost_per_day: Some(3.0),
    };
    // 600 s at 2.0 an hour: 0.33 a worker.
    assert_eq!(room(cost, used(1.0, Some(2.0)), 0, Some(2.0)), Some(3));
    assert_eq!(
        room(cost, used(1.0, Some(2.0)), 0, None),
        None,
        "no price: no cost room"
    );
    let both = BudgetLimits {
        max_worker_hours_per_day: Some(10.0),
        max_cost_per_day: Some(3.0),
    };
    let tight = launch_room("cpu", both, used(0.0, Some(0.0)), (0, life), Some(2.0)).unwrap();
    assert_eq!(tight.workers, 9);
    assert!(
        tight.detail.starts_with("cost 0.00 of 3"),
        "{}",
        tight.detail
    );
    assert_eq!(
        room(BudgetLimits::default(), used(0.0, None), 0, None),
        None
    );
}
