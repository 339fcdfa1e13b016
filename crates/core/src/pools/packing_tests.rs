//! Table tests of the pool policy planning on the dispatch model ([`ServerView`]): workers
//! hold several bundles by the pool's shape, checked-in workers take bundles first, and
//! bundles the server would give no new worker of ours buy nothing. Each case says which
//! rule of the CodaLab 1.7.5 server (`codalab/server/bundle_manager.py`) it follows. Pure.

use super::*;
use crate::backend::JobState;
use crate::bundle::{StagedBundle, WorkerShape};
use crate::checkin::JobCheckin;
use crate::dispatch::{Owners, Resources, ServerWorker};
use crate::policy::Reason;
use std::time::Duration;

const S: fn(u64) -> Duration = Duration::from_secs;
const ROOT: &str = "0";
const GIB: u64 = 1 << 30;

/// A target pool of 4-CPU, 16 GiB workers, launching freely up to `max`.
fn pool(max: u32) -> PoolPolicy {
    PoolPolicy {
        max,
        min_seconds_between_workers: 0,
        max_launches_per_tick: 100,
        ..PoolPolicy::new("cpu4", WorkerShape::from_flags(4, 0, 16 * 1024))
    }
}

/// `n` bundles of `owner` asking for `cpus` CPUs and 1 GiB.
fn bundles(owner: &str, first: u32, n: u32, cpus: u32) -> Vec<StagedBundle> {
    (first..first + n)
        .map(|i| StagedBundle {
            owner_id: Some(owner.into()),
            request_cpus: cpus,
            request_memory: GIB,
            ..StagedBundle::new(format!("0x{i}"))
        })
        .collect()
}

/// The manager runs as root (the shared workers of a public server), no quota known.
fn as_root() -> ServerView {
    ServerView {
        owners: Owners {
            root: ROOT.into(),
            manager: ROOT.into(),
            ..Owners::default()
        },
        ..ServerView::default()
    }
}

fn worker(id: &str, owner: &str, cpus: i64, cpus_in_use: i64, runs: usize) -> ServerWorker {
    ServerWorker {
        worker_id: id.into(),
        owner: owner.into(),
        total: Resources {
            cpus,
            gpus: 0,
            memory_bytes: 16 << 30,
        },
        in_use: Resources {
            cpus: cpus_in_use,
            gpus: 0,
            memory_bytes: 0,
        },
        runs,
        ..ServerWorker::default()
    }
}

fn job(id: &str, state: JobState, checkin: JobCheckin) -> ObservedJob {
    ObservedJob {
        checkin,
        ..ObservedJob::new(id, state, S(5), S(5)).launched_here()
    }
}

fn plan(
    bundles: Vec<StagedBundle>,
    jobs: Vec<ObservedJob>,
    policy: &PoolPolicy,
    server: Option<ServerView>,
) -> PoolsDecision {
    let observed = PoolsObservation {
        times: Vec::new(),
        bundles,
        pools: vec![PoolObservation {
            jobs,
            checkins_seen: true,
            ..PoolObservation::default()
        }],
        server,
    };
    plan_pools(&observed, std::slice::from_ref(policy), S(10_000))
}

fn held(decision: &PoolsDecision) -> Vec<(&str, &str)> {
    decision
        .unserved
        .iter()
        .filter_map(|u| match &u.reason {
            Reason::Held { code, owner, .. } => Some((code.code(), owner.as_str())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_worker_holds_as_many_bundles_as_its_shape_allows() {
    // `_schedule_run_bundles_on_workers` starts bundles on a worker while its free CPUs,
    // GPUs and memory cover them: eight 1-CPU bundles fill two 4-CPU workers, not eight.
    let (cases, policy) = (
        [(8, 1, 2), (9, 1, 3), (3, 2, 2), (4, 3, 4), (2, 4, 2)],
        pool(10),
    );
    for (n, cpus, workers) in cases {
        let packed = plan(bundles("7", 0, n, cpus), vec![], &policy, Some(as_root()));
        let pool = &packed.pools[0];
        assert_eq!(
            (pool.launches, pool.workers_needed, pool.demand),
            (workers, workers as usize, n as usize),
            "{n} bundles of {cpus} CPUs"
        );
        let packed_reason = Reason::Packed {
            bundles: n as usize,
            workers: workers as usize,
        };
        assert_eq!(
            pool.reasons.contains(&packed_reason),
            workers < n,
            "{n} bundles of {cpus} CPUs: {}",
            pool.reason_codes()
        );
        // Without the server's side: one worker a bundle, as before.
        let one_each = plan(bundles("7", 0, n, cpus), vec![], &policy, None);
        assert_eq!(one_each.pools[0].launches, n);
        assert_eq!(one_each.pools[0].reason_codes(), "want_workers,target");
    }
}

#[test]
fn a_bundle_with_no_memory_request_holds_the_servers_default() {
    // `_compute_request_memory`: none asked → 2 GiB. Workers of 3 GiB hold one such bundle;
    // a worker with no bundle yet takes any bundle that fits the pool (as before).
    let policy = PoolPolicy {
        shape: WorkerShape::from_flags(4, 0, 3 * 1024),
        ..pool(10)
    };
    let mut staged = bundles("7", 0, 3, 1);
    for bundle in &mut staged {
        bundle.request_memory = 0;
    }
    let decision = plan(staged, vec![], &policy, Some(as_root()));
    assert_eq!(decision.pools[0].launches, 3);
}

#[test]
fn starting_workers_take_bundles_by_the_pools_shape_before_new_ones() {
    let policy = pool(10);
    let coming = vec![
        job("p1", JobState::Pending, JobCheckin::Unknown),
        job(
            "s1",
            JobState::Active,
            JobCheckin::NotYet { unseen_for: S(5) },
        ),
    ];
    for (n, launches, waiting) in [(8, 0, 8), (9, 1, 8), (12, 1, 8)] {
        let decision = plan(
            bundles("7", 0, n, 1),
            coming.clone(),
            &policy,
            Some(as_root()),
        );
        assert_eq!(decision.pools[0].launches, launches, "{n} bundles");
        let pending = decision
            .assignments
            .iter()
            .filter(|a| a.coverage == Coverage::PendingWorker)
            .count();
        assert_eq!(pending, waiting, "{n} bundles");
    }
}

#[test]
fn checked_in_workers_with_room_take_bundles_and_buy_nothing() {
    // The server starts a bundle on a checked-in worker whose free resources cover it
    // (`_deduct_worker_resources`); a ready idle job of the pool is such a worker.
    let policy = pool(10);
    let mut view = as_root();
    let unique = "0123456789abcdef0123456789abcdef";
    view.workers = vec![
        worker("other-busy", ROOT, 4, 3, 1),
        worker(&format!("host-{unique}"), ROOT, 4, 0, 0),
    ];
    let idle = job(
        unique,
        JobState::Active,
        JobCheckin::CheckedIn {
            runs: 0,
            terminating: false,
        },
    );
    let decision = plan(
        bundles("7", 0, 6, 1),
        vec![idle],
        &policy,
        Some(view.clone()),
    );
    assert_eq!(
        decision.on_workers.len(),
        5,
        "1 on the busy one, 4 on the idle one"
    );
    assert_eq!(
        decision.pools[0].launches, 1,
        "the sixth needs a new worker"
    );
    // The idle worker is full now: it is busy, not capacity for another bundle.
    assert_eq!(decision.pools[0].target, Some(2));
    // A bundle the model put on a worker that the server has not started for too long goes
    // to the pool instead.
    view.overdue = ["0x0".to_owned()].into();
    let overdue = plan(bundles("7", 0, 5, 1), vec![], &policy, Some(view));
    assert_eq!(overdue.on_workers.len(), 4);
    assert_eq!(overdue.pools[0].launches, 1);
}

#[test]
fn a_bundle_put_on_a_checked_in_worker_keeps_the_pools_pending_job_until_it_starts() {
    // The model puts the bundle on the busy worker with room; the server, which sees the
    // memory that worker uses (the model cannot), may not start it there. So the pool's
    // pending job is needed until the bundle leaves staged, then withdrawn.
    let policy = pool(10);
    let mut view = as_root();
    let unique = "0123456789abcdef0123456789abcdef";
    view.workers = vec![worker(&format!("host-{unique}"), ROOT, 4, 1, 1)];
    let busy = job(
        unique,
        JobState::Active,
        JobCheckin::CheckedIn {
            runs: 1,
            terminating: false,
        },
    );
    let pending = || job("p", JobState::Pending, JobCheckin::default());
    let jobs = vec![busy.clone(), pending()];
    let staged = plan(bundles("7", 0, 1, 1), jobs, &policy, Some(view.clone()));
    assert_eq!(staged.on_workers.len(), 1);
    assert!(staged.pools[0].stops.is_empty(), "{:?}", staged.pools[0]);
    let started = plan(Vec::new(), vec![busy, pending()], &policy, Some(view));
    assert_eq!(started.pools[0].stops, ["p"]);
}

#[test]
fn bundles_past_their_owners_quota_buy_nothing() {
    // `get_user_parallel_run_quota_left`: the manager runs as root, its workers are shared,
    // and bob (id 7) may run one more bundle on shared workers.
    let policy = pool(10);
    let mut view = as_root();
    view.owners.quota_left.insert("7".into(), 1);
    let decision = plan(bundles("7", 0, 3, 1), vec![], &policy, Some(view.clone()));
    assert_eq!(decision.pools[0].launches, 1);
    assert_eq!(
        held(&decision),
        [("quota_exhausted", "7"), ("quota_exhausted", "7")]
    );
    let words = decision.unserved[0].reason.to_string();
    assert!(words.contains("no parallel_run_quota left"), "{words}");
    let json = serde_json::to_value(&decision.unserved[0]).unwrap();
    assert_eq!(
        (&json["reason"], &json["code"], &json["owner"]),
        (&"held".into(), &"quota_exhausted".into(), &"7".into())
    );
    // A bundle on a shared worker already spends the quota: nothing is left for new ones.
    view.workers = vec![worker("shared", ROOT, 4, 3, 1)];
    let decision = plan(bundles("7", 0, 3, 1), vec![], &policy, Some(view.clone()));
    assert_eq!(decision.on_workers.len(), 1);
    assert_eq!(decision.pools[0].launches, 0);
    assert_eq!(held(&decision).len(), 2);
    // With bob's own worker that fits, the words say it will take them.
    view.workers.push(worker("bobs", "7", 4, 4, 1));
    let decision = plan(bundles("7", 0, 3, 1), vec![], &policy, Some(view));
    assert_eq!(held(&decision)[0], ("own_worker", "7"));
    assert_eq!(decision.pools[0].launches, 0);
    // The unmet demand says so, by reason.
    let codes: Vec<&str> = decision.unmet.iter().map(|u| u.reason.code()).collect();
    assert_eq!(codes, ["own_worker"]);
}

#[test]
fn workers_private_to_the_manager_take_only_its_users_bundles() {
    // As a normal user (alice, id 5) the manager's workers are alice's own: the server gives
    // them only alice's bundles (`WorkerInfoAccessor.get_user_workers`), unless they are
    // shared with a group.
    let policy = pool(10);
    let mut view = ServerView {
        owners: Owners {
            root: ROOT.into(),
            manager: "5".into(),
            ..Owners::default()
        },
        ..ServerView::default()
    };
    let mut staged = bundles("5", 0, 2, 4);
    staged.extend(bundles("7", 2, 2, 4));
    staged.push(StagedBundle::new("0xunknown-owner"));
    let decision = plan(staged.clone(), vec![], &policy, Some(view.clone()));
    assert_eq!(
        decision.pools[0].launches, 3,
        "alice's two, and the one of no known owner"
    );
    assert_eq!(held(&decision), [("not_ours", "7"), ("not_ours", "7")]);
    view.owners.group_shared = true;
    let shared = plan(staged, vec![], &policy, Some(view));
    assert_eq!(shared.pools[0].launches, 5);
}

#[test]
fn a_compat_pool_keeps_one_bundle_a_worker_but_buys_nothing_for_held_bundles() {
    let policy = PoolPolicy {
        launch_mode: LaunchMode::Compat,
        max_launches_per_tick: 1,
        ..pool(10)
    };
    let mut view = as_root();
    view.owners.quota_left.insert("7".into(), 0);
    let decision = plan(bundles("7", 0, 3, 1), vec![], &policy, Some(view));
    assert_eq!(decision.pools[0].launches, 0);
    assert_eq!(decision.pools[0].demand, 0);
    assert_eq!(held(&decision).len(), 3);
}

#[test]
fn a_worker_that_exits_after_n_runs_takes_at_most_n() {
    // `RunResources.dominates`: a worker with no runs left (`exit_after_num_runs`) takes none.
    for (runs, workers) in [(1, 8), (3, 3), (8, 2)] {
        let policy = PoolPolicy {
            runs_per_worker: Some(runs),
            ..pool(10)
        };
        let decision = plan(bundles("7", 0, 8, 1), vec![], &policy, Some(as_root()));
        assert_eq!(decision.pools[0].launches, workers, "{runs} runs a worker");
    }
}

#[test]
fn an_overdue_bundle_costs_one_launch_ever_then_waits_with_the_true_reason() {
    // Review 2026-11-27 §4. The server has not started 0x0 on the checked-in worker the model
    // gave it to (overdue): the pools launch one worker for it, once. Once that launch is
    // made (the manager remembers it: `launched_for`), it takes a starting worker of a pool
    // if one has room, never a new one; with none, it waits, saying why: an idle worker of
    // its shape does not start it, and another would not either.
    let policy = pool(10);
    let pending = || {
        job(
            "p1",
            JobState::Pending,
            JobCheckin::NotYet { unseen_for: S(5) },
        )
    };
    let idle = || {
        let checked_in = JobCheckin::CheckedIn {
            runs: 0,
            terminating: false,
        };
        job("a1", JobState::Active, checked_in)
    };
    // (launched for before, jobs) → (launches, coverage, launched for now)
    type Case = (bool, Vec<ObservedJob>, u32, Option<Coverage>, bool);
    let cases: [Case; 5] = [
        (false, vec![], 1, Some(Coverage::NewWorker), true),
        (false, vec![idle()], 1, Some(Coverage::NewWorker), true),
        (
            true,
            vec![pending()],
            0,
            Some(Coverage::PendingWorker),
            false,
        ),
        (true, vec![idle()], 0, None, false),
        (true, vec![], 0, None, false),
    ];
    for (i, (before, jobs, launches, coverage, now)) in cases.into_iter().enumerate() {
        let mut view = as_root();
        view.overdue = ["0x0".to_owned()].into();
        if before {
            view.launched_for = ["0x0".to_owned()].into();
        }
        let decision = plan(bundles("7", 0, 1, 1), jobs, &policy, Some(view));
        assert_eq!(
            decision.pools[0].launches, launches,
            "case {i}: {decision:?}"
        );
        let assigned = decision.assignments.first();
        assert_eq!(assigned.map(|a| a.coverage), coverage, "case {i}");
        assert!(assigned.is_none_or(|a| a.overdue), "case {i}");
        let expected: Vec<String> = now.then(|| "0x0".to_owned()).into_iter().collect();
        assert_eq!(decision.overdue_launches, expected, "case {i}");
        if coverage.is_none() {
            let unserved = &decision.unserved[0];
            assert_eq!(unserved.reason.code(), "not_started_by_server", "case {i}");
            let words = unserved.reason.to_string();
            assert!(
                words.starts_with("the server does not start it on an idle worker that fits"),
                "{words}"
            );
            assert_eq!(decision.unmet[0].reason.code(), "not_started_by_server");
        }
    }
}

#[test]
fn a_paced_pool_makes_no_launch_so_none_is_remembered_for_an_overdue_bundle() {
    let mut view = as_root();
    view.overdue = ["0x0".to_owned()].into();
    let paced = PoolPolicy {
        min_seconds_between_workers: 600,
        ..pool(10)
    };
    let observed = PoolsObservation {
        bundles: bundles("7", 0, 1, 1),
        pools: vec![PoolObservation {
            since_last_launch: Some(S(5)),
            checkins_seen: true,
            ..PoolObservation::default()
        }],
        server: Some(view),
        times: Vec::new(),
    };
    let decision = plan_pools(&observed, std::slice::from_ref(&paced), S(10_000));
    assert_eq!(decision.pools[0].launches, 0);
    assert!(decision.overdue_launches.is_empty());
}
