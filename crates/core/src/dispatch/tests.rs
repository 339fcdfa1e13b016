//! Table tests of the dispatch model, each written from the CodaLab 1.7.5 server's code it
//! names (`codalab/server/bundle_manager.py` unless said otherwise). Pure: no server; the
//! worker entries of the last test are a real server's `GET /rest/workers/info` reply.

use super::*;
use crate::codalab::parse_workers_reply;

const ROOT: &str = "codalab";
const GIB: u64 = 1 << 30;

fn bundle(uuid: &str, owner: &str, cpus: u32, gpus: u32, memory_gib: u64) -> QueuedBundle {
    QueuedBundle {
        bundle: StagedBundle {
            owner_id: Some(owner.to_owned()),
            request_cpus: cpus,
            request_gpus: gpus,
            request_memory: memory_gib * GIB,
            ..StagedBundle::new(uuid)
        },
    }
}

fn prio(mut b: QueuedBundle, priority: i64) -> QueuedBundle {
    b.bundle.priority = Some(priority);
    b
}

fn queue(mut b: QueuedBundle, queue: &str) -> QueuedBundle {
    b.bundle.request_queue = queue.to_owned();
    b
}

fn worker(id: &str, owner: &str, cpus: i64, gpus: i64, memory_gib: i64) -> ServerWorker {
    ServerWorker {
        worker_id: id.to_owned(),
        owner: owner.to_owned(),
        total: Resources {
            cpus,
            gpus,
            memory_bytes: memory_gib << 30,
        },
        ..ServerWorker::default()
    }
}

fn tagged(mut w: ServerWorker, tag: &str, exclusive: bool) -> ServerWorker {
    w.tag = tag.to_owned();
    w.tag_exclusive = exclusive;
    w
}

fn pool(name: &str, cpus: u32, gpus: u32, memory_gib: u64, room: usize) -> PoolShape {
    PoolShape {
        pool: name.to_owned(),
        shape: WorkerShape::from_flags(cpus, gpus, memory_gib * 1024),
        tag: String::new(),
        tag_exclusive: false,
        runs_per_worker: None,
        room,
    }
}

/// A manager running as the root user (shared workers), no quota limits.
fn input(
    bundles: Vec<QueuedBundle>,
    workers: Vec<ServerWorker>,
    pools: Vec<PoolShape>,
) -> DispatchInput {
    DispatchInput {
        bundles,
        workers,
        pools,
        owners: Owners {
            root: ROOT.into(),
            manager: ROOT.into(),
            quota_left: BTreeMap::new(),
            group_shared: false,
        },
    }
}

fn with_quota(mut input: DispatchInput, owner: &str, left: i64) -> DispatchInput {
    input.owners.quota_left.insert(owner.into(), left);
    input
}

/// Each bundle in dispatch order, with where it goes in short: `w1`, `new:cpu#0`,
/// `unmet:quota_exhausted`.
fn placements(input: DispatchInput) -> Vec<(String, String)> {
    dispatch(input)
        .bundles
        .into_iter()
        .map(|b| {
            let short = match b.placement {
                Placement::Worker { worker_id } => worker_id,
                Placement::NewWorker { pool, worker } => format!("new:{pool}#{worker}"),
                Placement::Unmet(unmet) => format!("unmet:{}", unmet.code()),
            };
            (b.uuid, short)
        })
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn uuids(bundles: &[QueuedBundle]) -> Vec<&str> {
    bundles.iter().map(|b| b.bundle.uuid.as_str()).collect()
}

#[test]
fn order_is_the_servers_example_users_keep_their_positions() {
    // The example in `_schedule_run_bundles_on_workers`' comment: users [A, B, A, B, A],
    // priorities [1, 2, 3, 1, 1], B5 asks for a queue → [B3, B2, B5, B4, B1].
    let staged = vec![
        prio(bundle("b1", "a", 1, 0, 1), 1),
        prio(bundle("b2", "b", 1, 0, 1), 2),
        prio(bundle("b3", "a", 1, 0, 1), 3),
        prio(bundle("b4", "b", 1, 0, 1), 1),
        queue(prio(bundle("b5", "a", 1, 0, 1), 1), "q"),
    ];
    assert_eq!(uuids(&server_order(staged)), ["b3", "b2", "b5", "b4", "b1"]);
}

#[test]
fn order_puts_no_priority_after_the_others_and_before_negatives() {
    // The sort key: (priority >= 0, priority is None, priority, request_queue given),
    // reversed, stable.
    let staged = vec![
        bundle("none", "a", 1, 0, 1),
        prio(bundle("minus1", "a", 1, 0, 1), -1),
        prio(bundle("zero", "a", 1, 0, 1), 0),
        queue(bundle("none-q", "a", 1, 0, 1), "q"),
        prio(bundle("five", "a", 1, 0, 1), 5),
        prio(bundle("minus2", "a", 1, 0, 1), -2),
        bundle("none-2", "a", 1, 0, 1),
    ];
    assert_eq!(
        uuids(&server_order(staged)),
        [
            "five", "zero", "none-q", "none", "none-2", "minus1", "minus2"
        ]
    );
}

#[test]
fn priority_decides_who_gets_the_one_free_worker() {
    let staged = vec![
        bundle("low", "a", 1, 0, 1),
        prio(bundle("high", "a", 1, 0, 1), 1),
    ];
    let got = placements(input(staged, vec![worker("w1", ROOT, 1, 0, 8)], vec![]));
    assert_eq!(
        got,
        pairs(&[("high", "w1"), ("low", "unmet:no_fitting_pool")])
    );
}

#[test]
fn shared_workers_only_while_the_owner_has_quota_left() {
    // `get_user_parallel_run_quota_left` and the decrement after a start on a root worker.
    let staged = (0..3)
        .map(|i| bundle(&format!("bob{i}"), "bob", 1, 0, 1))
        .collect();
    let on_worker = with_quota(
        input(
            staged,
            vec![worker("w1", ROOT, 4, 0, 8)],
            vec![pool("cpu", 4, 0, 8, 5)],
        ),
        "bob",
        1,
    );
    let expected = [
        ("bob0", "w1"),
        ("bob1", "unmet:quota_exhausted"),
        ("bob2", "unmet:quota_exhausted"),
    ];
    assert_eq!(placements(on_worker), pairs(&expected));

    // The issue's measured case: no worker yet, quota 1 → one new worker, not seven; it runs
    // one of bob's bundles though it has room for four.
    let staged = (0..3)
        .map(|i| bundle(&format!("bob{i}"), "bob", 1, 0, 1))
        .collect();
    let plan = dispatch(with_quota(
        input(staged, vec![], vec![pool("cpu", 4, 0, 8, 5)]),
        "bob",
        1,
    ));
    assert_eq!(plan.new_workers_of("cpu"), 1);
    assert_eq!(plan.new_workers[0].bundles, ["bob0"]);
    let unmet = plan.placement("bob2").unwrap();
    let Placement::Unmet(reason) = unmet else {
        panic!("{unmet:?}")
    };
    assert_eq!(
        reason.to_string(),
        "bob has no parallel_run_quota left for shared workers (0 left)"
    );
}

#[test]
fn an_own_worker_runs_bundles_without_quota_and_takes_them_later() {
    // Without quota the owner's bundles see only their own workers; a busy own worker that fits
    // will take them: no new worker is needed.
    let own = worker("bobs", "bob", 2, 0, 8);
    let mut busy = own.clone();
    busy.in_use.cpus = 2;
    let staged = || vec![bundle("b0", "bob", 1, 0, 1), bundle("b1", "bob", 1, 0, 1)];
    let shared = worker("w1", ROOT, 4, 0, 8);
    let cases = [
        (vec![own, shared.clone()], ["bobs", "bobs"]),
        (vec![busy, shared], ["unmet:own_worker", "unmet:own_worker"]),
    ];
    for (workers, expected) in cases {
        let got = placements(with_quota(
            input(staged(), workers, vec![pool("cpu", 4, 0, 8, 5)]),
            "bob",
            0,
        ));
        let got: Vec<_> = got.into_iter().map(|(_, p)| p).collect();
        assert_eq!(got, expected);
    }
}

#[test]
fn with_quota_left_the_servers_sort_not_ownership_picks_the_worker() {
    // `_filter_and_sort_workers` sorts the owner's and the shared workers together: the one
    // with fewer free CPUs wins, even when it is shared (the docstring's "private first" is
    // not what the code does).
    let workers = vec![
        worker("bobs", "bob", 4, 0, 8),
        worker("shared", ROOT, 2, 0, 8),
    ];
    let got = placements(input(vec![bundle("b", "bob", 1, 0, 1)], workers, vec![]));
    assert_eq!(got, pairs(&[("b", "shared")]));
}

#[test]
fn resources_cpus_gpus_memory_and_the_servers_defaults() {
    // `RunResources.dominates` (worker/bundle_state.py) after `_deduct_worker_resources`;
    // `_compute_request_cpus` (0 → 1) and `_compute_request_memory` (none → 2g).
    let mut w = worker("w1", ROOT, 4, 1, 4);
    w.in_use.cpus = 1;
    let cases: [(QueuedBundle, &str); 5] = [
        (bundle("cpus", "a", 4, 0, 1), "unmet:no_fitting_pool"),
        (bundle("gpus", "a", 1, 2, 1), "unmet:no_fitting_pool"),
        (bundle("memory", "a", 1, 0, 5), "unmet:no_fitting_pool"),
        (bundle("fits", "a", 3, 1, 4), "w1"),
        (bundle("defaults", "a", 0, 0, 0), "w1"),
    ];
    for (b, expected) in cases {
        let uuid = b.bundle.uuid.clone();
        let got = placements(input(vec![b], vec![w.clone()], vec![]));
        assert_eq!(got, pairs(&[(uuid.as_str(), expected)]));
    }
    // Two default bundles hold 2 GiB each: a third does not fit in 4 GiB, though CPUs are free.
    let staged = (0..3)
        .map(|i| bundle(&format!("d{i}"), "a", 0, 0, 0))
        .collect();
    let got = placements(input(staged, vec![worker("w1", ROOT, 8, 0, 4)], vec![]));
    let expected = [("d0", "w1"), ("d1", "w1"), ("d2", "unmet:no_fitting_pool")];
    assert_eq!(got, pairs(&expected));
}

#[test]
fn tags_queues_and_exclusive_workers() {
    // `has_tag_match` (an optional `tag=` prefix) and the tag rules of `dominates`; among
    // fitting workers a tag-exclusive one is preferred.
    let workers = vec![
        tagged(worker("open", ROOT, 4, 0, 8), "q", false),
        tagged(worker("excl", ROOT, 4, 0, 8), "q", true),
        tagged(worker("other", ROOT, 4, 0, 8), "r", true),
    ];
    let cases = [
        (queue(bundle("q", "a", 1, 0, 1), "q"), "excl"),
        (queue(bundle("tag=q", "a", 1, 0, 1), "tag=q"), "excl"),
        (queue(bundle("r", "a", 1, 0, 1), "r"), "other"),
        (bundle("none", "a", 1, 0, 1), "open"),
        (
            queue(bundle("s", "a", 1, 0, 1), "s"),
            "unmet:no_fitting_pool",
        ),
    ];
    for (b, expected) in cases {
        let uuid = b.bundle.uuid.clone();
        let got = placements(input(vec![b], workers.clone(), vec![]));
        assert_eq!(got, pairs(&[(uuid.as_str(), expected)]), "{uuid}");
    }
}

#[test]
fn runs_left_and_terminating_workers() {
    // `dominates` refuses a worker with 0 runs left and the dispatch counts one per start;
    // `transition_bundle_starting` (model/bundle_model.py) refuses a terminating worker.
    let mut one_run = worker("w1", ROOT, 4, 0, 8);
    one_run.runs_left = Some(1);
    let mut ending = worker("w2", ROOT, 4, 0, 8);
    ending.terminating = true;
    let staged = vec![bundle("b0", "a", 1, 0, 1), bundle("b1", "a", 1, 0, 1)];
    let got = placements(input(staged, vec![one_run, ending], vec![]));
    assert_eq!(got, pairs(&[("b0", "w1"), ("b1", "unmet:no_fitting_pool")]));

    let mut pool = pool("cpu", 4, 0, 8, 10);
    pool.runs_per_worker = Some(1);
    let staged = (0..3)
        .map(|i| bundle(&format!("b{i}"), "a", 1, 0, 1))
        .collect();
    assert_eq!(
        dispatch(input(staged, vec![], vec![pool])).new_workers_of("cpu"),
        3
    );
}

#[test]
fn cpu_bundles_prefer_cpu_only_workers_and_tight_fits() {
    // The sort key: fewer free GPUs (CPU-only first), then fewer free CPUs.
    let workers = vec![
        worker("gpu", ROOT, 2, 1, 8),
        worker("big", ROOT, 8, 0, 8),
        worker("small", ROOT, 2, 0, 8),
    ];
    let got = placements(input(
        vec![bundle("b", "a", 1, 0, 1)],
        workers.clone(),
        vec![],
    ));
    assert_eq!(got, pairs(&[("b", "small")]));
    let got = placements(input(vec![bundle("g", "a", 1, 1, 1)], workers, vec![]));
    assert_eq!(got, pairs(&[("g", "gpu")]));
}

#[test]
fn new_workers_are_packed_as_the_server_fills_them() {
    // N small bundles need ceil(N / k) new workers of a pool whose shape holds k: the issue's
    // measured case (4 one-CPU bundles, 2-CPU workers → 2, not 4) and GPU VMs.
    let cases = [
        ((1, 0, 1), pool("cpu", 2, 0, 8, 10), 4, 2),
        ((1, 1, 1), pool("gpu", 8, 4, 64, 10), 7, 2),
        ((2, 0, 1), pool("cpu", 4, 0, 8, 10), 5, 3),
        // Memory: the server's default of 2 GiB each, in 4 GiB workers.
        ((1, 0, 0), pool("cpu", 8, 0, 4, 10), 5, 3),
    ];
    for ((cpus, gpus, memory_gib), pool, n, workers) in cases {
        let name = pool.pool.clone();
        let staged = (0..n)
            .map(|i| bundle(&format!("b{i}"), "a", cpus, gpus, memory_gib))
            .collect();
        let plan = dispatch(input(staged, vec![], vec![pool]));
        let what = format!("{n} bundles of {cpus} cpus, {gpus} gpus, {memory_gib} GiB");
        assert_eq!(plan.new_workers_of(&name), workers, "{what}");
        let taken: usize = plan.new_workers.iter().map(|w| w.bundles.len()).sum();
        assert_eq!(taken, n, "{what}");
    }
}

#[test]
fn checked_in_workers_first_then_new_ones_then_room() {
    let staged = (0..6)
        .map(|i| bundle(&format!("b{i}"), "a", 1, 0, 1))
        .collect();
    let got = placements(input(
        staged,
        vec![worker("w1", ROOT, 2, 0, 8)],
        vec![pool("cpu", 2, 0, 8, 1)],
    ));
    let expected = [
        ("b0", "w1"),
        ("b1", "w1"),
        ("b2", "new:cpu#0"),
        ("b3", "new:cpu#0"),
        ("b4", "unmet:no_room"),
        ("b5", "unmet:no_room"),
    ];
    assert_eq!(got, pairs(&expected));
}

#[test]
fn pools_are_tried_in_order_and_misfits_are_named() {
    let gpu = PoolShape {
        tag: "gpuq".into(),
        tag_exclusive: true,
        ..pool("gpu", 8, 4, 64, 1)
    };
    let cpu = pool("cpu", 2, 0, 4, 1);
    let staged = vec![
        queue(bundle("g", "a", 1, 1, 1), "gpuq"),
        bundle("c", "a", 1, 0, 1),
        bundle("huge", "a", 16, 0, 1),
    ];
    let plan = dispatch(input(staged, vec![], vec![gpu, cpu]));
    assert_eq!(
        plan.placement("g"),
        Some(&Placement::NewWorker {
            pool: "gpu".into(),
            worker: 0
        })
    );
    assert_eq!(
        plan.placement("c"),
        Some(&Placement::NewWorker {
            pool: "cpu".into(),
            worker: 1
        })
    );
    let Some(Placement::Unmet(reason)) = plan.placement("huge") else {
        panic!("{plan:?}")
    };
    assert_eq!(
        reason.to_string(),
        "no pool's workers can run it: gpu: no request_queue, and the workers are exclusive to \
         tag gpuq; cpu: request_cpus=16 > worker cpus=2"
    );
}

#[test]
fn a_manager_of_one_user_buys_private_workers_for_that_user_only() {
    // As a normal user the manager's workers are private: quota does not apply to them, and
    // another owner's bundles never run on them.
    let staged = vec![
        bundle("mine", "alice", 1, 0, 1),
        bundle("bobs", "bob", 1, 0, 1),
    ];
    let mut input = with_quota(
        input(staged, vec![], vec![pool("cpu", 2, 0, 8, 5)]),
        "alice",
        0,
    );
    input.owners.manager = "alice".into();
    let plan = dispatch(input);
    assert_eq!(
        plan.placement("mine"),
        Some(&Placement::NewWorker {
            pool: "cpu".into(),
            worker: 0
        })
    );
    let Some(Placement::Unmet(reason)) = plan.placement("bobs") else {
        panic!("{plan:?}")
    };
    assert_eq!(
        reason.to_string(),
        "owned by bob, and the manager's workers are private to alice"
    );
}

#[test]
fn the_root_users_own_bundles_use_shared_workers_under_its_quota() {
    // The root user's own-worker list is skipped: its bundles see the shared workers, and only
    // with quota left.
    let staged = vec![bundle("r0", ROOT, 1, 0, 1), bundle("r1", ROOT, 1, 0, 1)];
    let got = placements(with_quota(
        input(staged, vec![worker("w1", ROOT, 4, 0, 8)], vec![]),
        ROOT,
        1,
    ));
    assert_eq!(got, pairs(&[("r0", "w1"), ("r1", "unmet:quota_exhausted")]));
}

#[test]
fn workers_of_a_real_reply_become_server_workers() {
    // Two entries of a real CodaLab 1.7.5 `GET /rest/workers/info` reply (as in
    // codalab/workers.rs), one with 1 of 2 CPUs in use, one terminating.
    let body = r#"{"data": [{"user_id": "0", "worker_id": "w-a", "group_uuid": null, "tag": "dispatchq3", "cpus": 2, "gpus": 0, "memory_bytes": 4294967296, "free_disk_bytes": 53687091200, "checkin_time": 1795295461, "socket_id": 4, "run_uuids": ["0xe5a98b06fdc7463faf560b56bf7783c3"], "shared_file_system": false, "tag_exclusive": true, "exit_after_num_runs": 999999999, "is_terminating": false, "preemptible": false, "cpus_in_use": 1, "gpus_in_use": 0}, {"user_id": "0", "worker_id": "w-b", "group_uuid": null, "tag": null, "cpus": 2, "gpus": 0, "memory_bytes": 4294967296, "free_disk_bytes": 53687091200, "checkin_time": 1795295475, "socket_id": 5, "run_uuids": [], "shared_file_system": false, "tag_exclusive": false, "exit_after_num_runs": 999999999, "is_terminating": true, "preemptible": false, "cpus_in_use": 0, "gpus_in_use": 0}]}"#;
    let reply = parse_workers_reply(body).unwrap();
    let workers: Vec<ServerWorker> = reply
        .iter()
        .map(|w| ServerWorker::from_checkin(w, 2 * GIB).unwrap())
        .collect();
    assert_eq!(workers[0].owner, "0");
    assert_eq!(workers[0].tag, "dispatchq3");
    assert!(workers[0].tag_exclusive && !workers[0].terminating);
    assert_eq!(
        workers[0].total.minus(workers[0].in_use),
        Resources {
            cpus: 1,
            gpus: 0,
            memory_bytes: 2 << 30
        }
    );
    assert_eq!(workers[0].runs_left, Some(999_999_999));
    assert_eq!(workers[1].tag, "");

    let staged = vec![
        queue(bundle("b0", "alice", 1, 0, 0), "dispatchq3"),
        bundle("b1", "alice", 1, 0, 0),
    ];
    let mut input = input(staged, workers, vec![]);
    input.owners.root = "0".into();
    input.owners.manager = "0".into();
    let got = placements(input);
    assert_eq!(
        got,
        pairs(&[("b0", "w-a"), ("b1", "unmet:no_fitting_pool")])
    );

    let old = parse_workers_reply(r#"{"data": [{"worker_id": "w-c", "run_uuids": []}]}"#).unwrap();
    assert_eq!(ServerWorker::from_checkin(&old[0], 0), Err("cpus"));
}
