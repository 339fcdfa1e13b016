//! Table tests of the start-time estimates: each reads a decision as the pool policy makes it
//! and what the manager learned of the pool. Pure.

use super::*;
use crate::pools::{
    BundleAssignment, BundleOnWorker, Coverage, LaunchMode, PoolDecision, PoolVerdict,
    UnservedBundle,
};

fn pool(name: &str, launches: u32) -> PoolDecision {
    PoolDecision {
        pool: name.into(),
        launch_mode: LaunchMode::Target,
        launches,
        hedges: 0,
        stops: Vec::new(),
        target: None,
        demand: 0,
        workers_needed: 0,
        active: 0,
        pending: 0,
        stopping: 0,
        surplus: 0,
        watch: None,
        reasons: Vec::new(),
    }
}

fn assigned(uuid: &str, coverage: Coverage, worker: usize) -> BundleAssignment {
    BundleAssignment {
        uuid: uuid.into(),
        pool: "cpu".into(),
        coverage,
        worker,
        spill: None,
        overdue: false,
    }
}

fn unserved(uuid: &str, reason: Reason) -> UnservedBundle {
    UnservedBundle {
        uuid: uuid.into(),
        pools: vec![PoolVerdict {
            pool: "cpu".into(),
            reason: reason.clone(),
        }],
        reason,
    }
}

fn starting(job: &str, age: u64, pending: bool) -> Starting {
    Starting {
        job: job.into(),
        age,
        pending,
        reason: (pending && age >= 40).then(|| "Resources".into()),
        on_hold: false,
        forecast: None,
    }
}

fn times() -> PoolTimes {
    PoolTimes {
        checkin_seconds: 40,
        queued_seconds: None,
        run_seconds: Some(100),
        coming: vec![starting("job-7", 30, false), starting("job-9", 5, false)],
        run_ages: vec![10, 70],
        launch_interval: 60,
        room: None,
    }
}

fn seconds(estimates: &[BundleEstimate]) -> Vec<(&str, &'static str, Option<u64>)> {
    estimates
        .iter()
        .map(|e| (e.uuid.as_str(), e.estimate.kind(), e.estimate.seconds()))
        .collect()
}

#[test]
fn workers_with_room_starting_and_new_each_give_their_time() {
    let decision = PoolsDecision {
        pools: vec![pool("cpu", 1)],
        on_workers: vec![BundleOnWorker {
            uuid: "0xnow".into(),
            worker_id: "w1".into(),
        }],
        assignments: vec![
            // Two bundles packed on the older starting worker, one on the younger.
            assigned("0xa", Coverage::PendingWorker, 0),
            assigned("0xb", Coverage::PendingWorker, 0),
            assigned("0xc", Coverage::PendingWorker, 1),
            // New workers 0 (launched this tick) and 1 (paced: one interval later).
            assigned("0xd", Coverage::NewWorker, 2),
            assigned("0xe", Coverage::NewWorker, 3),
        ],
        ..PoolsDecision::default()
    };
    let estimates = estimate(&decision, &[times()]);
    assert_eq!(
        seconds(&estimates),
        [
            ("0xnow", "now", Some(0)),
            ("0xa", "worker_checkin", Some(10)),
            ("0xb", "worker_checkin", Some(10)),
            ("0xc", "worker_checkin", Some(35)),
            ("0xd", "worker_checkin", Some(40)),
            ("0xe", "worker_checkin", Some(100)),
        ]
    );
    assert_eq!(
        estimates[1].estimate.to_string(),
        "in ~10 s, when job job-7 of cpu checks in"
    );
    assert_eq!(
        estimates[5].estimate.to_string(),
        "in ~100 s, when a new worker of cpu checks in"
    );
}

#[test]
fn assignments_beyond_the_pools_room_wait_for_runs() {
    // A compat pool assigns every bundle (as upstream counts them): with room for one more
    // worker, the bundle of new worker 1 waits for a run to end, not for a launch.
    let decision = PoolsDecision {
        pools: vec![pool("cpu", 1)],
        assignments: vec![
            assigned("0xa", Coverage::NewWorker, 2),
            assigned("0xb", Coverage::NewWorker, 3),
            assigned("0xc", Coverage::NewWorker, 4),
        ],
        ..PoolsDecision::default()
    };
    let room = PoolTimes {
        room: Some(1),
        ..times()
    };
    assert_eq!(
        seconds(&estimate(&decision, &[room])),
        [
            ("0xa", "worker_checkin", Some(40)),
            ("0xb", "after_runs", Some(30)),
            ("0xc", "after_runs", Some(90)),
        ]
    );
}

#[test]
fn bundles_beyond_the_max_start_as_runs_end() {
    // Runs of 100 s aged 10 and 70 end in 90 and 30 s; the third waiting bundle takes the
    // place the first one freed, 100 s after it.
    let max = || Reason::MaxReached { jobs: 2, max: 2 };
    let decision = PoolsDecision {
        pools: vec![pool("cpu", 0)],
        unserved: vec![
            unserved("0x1", max()),
            unserved("0x2", max()),
            unserved("0x3", max()),
        ],
        ..PoolsDecision::default()
    };
    let estimates = estimate(&decision, &[times()]);
    assert_eq!(
        seconds(&estimates),
        [
            ("0x1", "after_runs", Some(30)),
            ("0x2", "after_runs", Some(90)),
            ("0x3", "after_runs", Some(130)),
        ]
    );
    // Nothing known to end: no time, and the words say why.
    let unknown = PoolTimes {
        run_seconds: None,
        ..times()
    };
    let estimates = estimate(&decision, &[unknown]);
    assert_eq!(estimates[0].estimate.seconds(), None);
    assert!(
        estimates[0]
            .estimate
            .to_string()
            .contains("no run time learned yet"),
        "{}",
        estimates[0].estimate
    );
}

#[test]
fn a_backing_off_pool_and_held_bundles() {
    let decision = PoolsDecision {
        pools: vec![pool("cpu", 0)],
        unserved: vec![
            unserved(
                "0xb",
                Reason::BackingOff {
                    until_seconds: 500,
                    remaining_seconds: 200,
                    failures: 1,
                },
            ),
            UnservedBundle {
                uuid: "0xq".into(),
                reason: Reason::Held {
                    code: crate::dispatch::Hold::QuotaExhausted,
                    owner: "7".into(),
                    detail: "7 has no parallel_run_quota left for shared workers (0 left)".into(),
                },
                pools: Vec::new(),
            },
        ],
        ..PoolsDecision::default()
    };
    let estimates = estimate(&decision, &[times()]);
    assert_eq!(
        seconds(&estimates),
        [
            ("0xb", "after_backoff", Some(240)),
            ("0xq", "not_while", None)
        ]
    );
    assert_eq!(
        estimates[1].estimate.to_string(),
        "not yet: 7 has no parallel_run_quota left for shared workers (0 left)"
    );
}

#[test]
fn a_job_pending_past_the_checkin_time_is_queued_and_new_workers_queue_behind_it() {
    // Check-in takes 40 s. Job q has been pending 100 s (Slurm: Resources): about as long
    // again; a new worker waits behind it. A running job past 40 s is booting: any moment.
    let queued = PoolTimes {
        coming: vec![starting("q", 100, true), starting("boot", 50, false)],
        ..times()
    };
    assert_eq!(queued.worker_wait(0), 100);
    assert_eq!(queued.worker_wait(1), 0);
    assert_eq!(queued.worker_wait(2), 100);
    assert_eq!(queued.wait_basis(0), "job q pending 100 s: Resources");
    assert_eq!(queued.wait_basis(2), "job q pending 100 s: Resources");
    assert_eq!(queued.wait_basis(1), "a worker checks in in ~40 s");
    // Once queued launches were seen to take 30 min, a held job waits the rest of that, and
    // a new launch behind it as long.
    let learned = PoolTimes {
        queued_seconds: Some(1800),
        ..queued.clone()
    };
    assert_eq!(
        (learned.worker_wait(0), learned.worker_wait(2)),
        (1700, 1700)
    );
    assert_eq!(
        learned.wait_basis(2),
        "job q pending 100 s: Resources; queued launches took ~30 min"
    );
    // Nothing queued: a new worker takes the check-in time; a young pending job the rest.
    let young = PoolTimes {
        coming: vec![starting("young", 10, true)],
        ..times()
    };
    assert_eq!((young.worker_wait(0), young.worker_wait(1)), (30, 40));
}

#[test]
fn a_young_pending_job_waits_behind_the_queued_job_launched_before_it() {
    // Job q has been pending 2700 s (Resources); job new was launched 10 s ago on the same
    // pool: a queue starts its jobs in order, so new does not check in in 30 s but behind q.
    // A running (placed) job and an older one are not behind anything.
    let pool = PoolTimes {
        coming: vec![
            starting("q", 2700, true),
            starting("new", 10, true),
            starting("boot", 20, false),
        ],
        ..times()
    };
    assert_eq!(
        (
            pool.worker_wait(0),
            pool.worker_wait(1),
            pool.worker_wait(2)
        ),
        (2700, 2700, 20)
    );
    assert_eq!(pool.wait_basis(1), "job q pending 45 min: Resources");
    assert_eq!(pool.wait_basis(2), "a worker checks in in ~40 s");
    // A job with its platform's own forecast keeps it: the platform knows the order.
    let forecast = PoolTimes {
        coming: vec![
            starting("q", 2700, true),
            Starting {
                forecast: Some(90),
                ..starting("new", 10, true)
            },
        ],
        ..times()
    };
    assert_eq!(forecast.worker_wait(1), 90 + 40);
    assert!(forecast.forecast_used(1));
}

#[test]
fn minutes_reads_as_a_person_would_say_it() {
    assert_eq!(minutes(45), "45 s");
    assert_eq!(minutes(119), "119 s");
    assert_eq!(minutes(121), "3 min");
    assert_eq!(minutes(2100), "35 min");
    assert_eq!(minutes(7500), "2 h 5 min");
    assert_eq!(minutes(7199), "2 h 0 min");
}

#[test]
fn a_job_on_hold_is_no_queue_a_new_worker_waits_behind() {
    // Review 2026-11-27 §7: job 3 is held by an admin for an hour (Slurm's `JobHeldAdmin`):
    // it is not capacity waiting in a queue. A new worker waits the pool's check-in time,
    // not "as long again" as the held job; the held job is no starting worker of the pool.
    let held = Starting {
        reason: Some("JobHeldAdmin".into()),
        on_hold: true,
        ..starting("job-3", 3600, true)
    };
    let times = PoolTimes {
        coming: vec![held, starting("job-9", 5, true)],
        ..times()
    };
    assert_eq!(
        times.worker_wait(0),
        35,
        "job-9, the pool's one starting worker"
    );
    assert_eq!(times.worker_wait(1), 40, "a new worker");
    assert!(
        !times.wait_basis(1).contains("job-3"),
        "{}",
        times.wait_basis(1)
    );
    assert_eq!(times.starting(), 1);
}

#[test]
fn a_worker_past_its_check_in_time_and_an_overdue_bundle_say_so_with_no_figure() {
    // Review 2026-11-27 §16: job-7 has run 100 s without checking in, the pool's workers
    // check in after 40 s: not "in ~0 s", but overdue, expected 60 s ago. Bundle 0xo is
    // overdue (the server did not start it on a checked-in worker that fits): its one new
    // worker gets no figure either, since the server may not start it there.
    let times = PoolTimes {
        coming: vec![starting("job-7", 100, false)],
        ..times()
    };
    let decision = PoolsDecision {
        pools: vec![pool("cpu", 1)],
        assignments: vec![
            assigned("0xa", Coverage::PendingWorker, 0),
            BundleAssignment {
                overdue: true,
                ..assigned("0xo", Coverage::NewWorker, 1)
            },
        ],
        ..PoolsDecision::default()
    };
    let estimates = estimate(&decision, &[times]);
    assert_eq!(
        seconds(&estimates),
        [("0xa", "worker_overdue", None), ("0xo", "overdue", None)]
    );
    assert_eq!(
        estimates[0].text,
        "overdue: job job-7 of cpu was expected to check in 60 s ago"
    );
    assert_eq!(
        estimates[1].text,
        "overdue: the server has not started it on a checked-in worker that fits; one new worker of cpu is launched for it, where it may not start either"
    );
}

#[test]
fn the_platforms_forecast_of_a_queued_job_sets_its_wait_and_the_new_workers_behind_it() {
    // Job q has been pending 100 s (Resources) and Slurm forecasts its start in 10 min (the
    // job ahead of it reaches its time limit then): it checks in 40 s after that, whatever
    // "as long again" would have said; a new worker waits behind it as long. Without the
    // forecast, the figure is the queue's age (see the test above).
    let forecast = Starting {
        forecast: Some(600),
        ..starting("q", 100, true)
    };
    let queued = PoolTimes {
        coming: vec![forecast.clone(), starting("boot", 50, false)],
        ..times()
    };
    assert_eq!(queued.worker_wait(0), 640);
    assert_eq!(queued.worker_wait(2), 640);
    assert!(queued.forecast_used(0) && queued.forecast_used(2));
    assert!(!queued.forecast_used(1), "the booting job has no forecast");
    assert_eq!(
        queued.wait_basis(0),
        "job q pending 100 s: Resources; its platform forecasts its start in ~10 min"
    );
    // A forecast sooner than the learned queue time wins too: the platform knows its queue.
    let learned = PoolTimes {
        queued_seconds: Some(1800),
        coming: vec![Starting {
            forecast: Some(60),
            ..forecast.clone()
        }],
        ..times()
    };
    assert_eq!(learned.worker_wait(0), 100);
    // The estimate says which figure it used, in words.
    let decision = PoolsDecision {
        assignments: vec![assigned("0xa", Coverage::PendingWorker, 0)],
        pools: vec![pool("cpu", 0)],
        ..PoolsDecision::default()
    };
    let estimates = estimate(&decision, std::slice::from_ref(&queued));
    assert_eq!(estimates[0].seconds, Some(640));
    assert_eq!(
        estimates[0].text,
        "in ~640 s, when job q of cpu checks in (by its platform's forecast of the start)"
    );
    // A forecast is of a pending job only: once it runs, the learned figures again.
    let running = PoolTimes {
        coming: vec![Starting {
            pending: false,
            ..forecast
        }],
        ..times()
    };
    assert!(!running.forecast_used(0));
    assert_eq!(running.worker_wait(0), 0);
}

#[test]
fn bundles_beyond_the_max_a_plan_fills_wait_for_the_planned_runs_and_say_so() {
    // #42 item 4: a pool with no job yet and room for 3, six bundles each filling a worker:
    // three go on the workers to launch, the other three wait for those runs to end. The
    // pool is not "at its max" (it has no job): its max is taken by the bundles planned.
    let decision = PoolsDecision {
        pools: vec![pool("local", 1)],
        assignments: (0..6)
            .map(|w| BundleAssignment {
                pool: "local".into(),
                ..assigned(&format!("0x{w}"), Coverage::NewWorker, w)
            })
            .collect(),
        ..PoolsDecision::default()
    };
    let fresh = PoolTimes {
        coming: Vec::new(),
        run_ages: Vec::new(),
        room: Some(3),
        run_seconds: None,
        ..times()
    };
    let estimates = estimate(&decision, std::slice::from_ref(&fresh));
    assert_eq!(
        estimates[3].text,
        "not yet: local's max is taken by the 3 bundles planned on its workers ahead of it, and no run time is learned yet to say when one ends"
    );
    // With a run time learned (100 s): the planned workers check in at 40, 100 and 160 s
    // (launches paced 60 s apart), their runs end 100 s later, and the bundles beyond take
    // those places in turn.
    let learned = PoolTimes {
        run_seconds: Some(100),
        ..fresh
    };
    assert_eq!(
        seconds(&estimate(&decision, &[learned])),
        [
            ("0x0", "worker_checkin", Some(40)),
            ("0x1", "worker_checkin", Some(100)),
            ("0x2", "worker_checkin", Some(160)),
            ("0x3", "after_runs", Some(140)),
            ("0x4", "after_runs", Some(200)),
            ("0x5", "after_runs", Some(240)),
        ]
    );
}
