//! The dispatch model (`codalab_wm_core::dispatch`) against the REAL bundle manager: the
//! REAL CodaLab 1.7.5 server (`cargo xtask services up codalab`) dispatching one staged set to
//! REAL `cl-worker` 1.7.5 processes of different shapes and owners, which run the bundles in
//! Docker (`services up docker`). No manager runs here: the test gives the model what the
//! server holds (every staged bundle as the manager parses them, the workers as
//! `GET /rest/workers/info` reports them, carol's quota) and checks that the server starts on
//! each worker the bundles the model puts there, and leaves staged the ones it puts nowhere.
//!
//! One staged set, one dispatch: every bundle of the scenario depends on a gate bundle that a
//! worker of its own starts only once the others have checked in, so the server stages them
//! all in one iteration of its bundle manager and dispatches them in one
//! `_schedule_run_bundles_on_workers` call. Workers and bundles use a tag of their own
//! (tag-exclusive), so no other worker takes them; the other staged bundles on the server
//! (other tests' leftovers) are part of the model's input all the same: a user's bundles take
//! the places in the dispatch order that user's bundles hold, leftovers included.
//!
//! What is compared, and why not more: no two workers tie in the server's preference (it
//! breaks ties at random), and bundles are compared by kind (owner and request), not by uuid:
//! which of two identical bundles runs is no planning question; how many of each kind each
//! worker runs is. The server hands a worker one message per check-in; upstream's wake-up
//! (the websocket ping that makes the worker check in at once) cannot run on Python 3.11, and
//! `xtask/services/codalab/launch.py` replaces it by waiting for the worker's next check-in,
//! so a second bundle for one worker is not offered to the next worker in the server's order.
//!
//! Locally a missing service skips the test; under `CI=true` it fails.

use crate::support;
use support::bundles::{Server, cl_worker, docker_host, docker_running};
use support::{SERVER, codalab_running, set_quota, stage_as, unique};

use codalab_wm_core::StagedBundle;
use codalab_wm_core::codalab::jsonapi::{parse_bundles, parse_user_identity};
use codalab_wm_core::codalab::parse_workers_reply;
use codalab_wm_core::dispatch::{
    DispatchInput, Owners, Placement, QueuedBundle, ServerWorker, dispatch,
};
use codalab_wm_core::testing::require_service;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Workers check in within seconds and a dispatch takes one iteration; a wide margin for a
/// loaded machine.
const WITHIN: Duration = Duration::from_secs(180);

const ROOT: (&str, &str) = ("codalab", "codalab");
const CAROL: (&str, &str) = ("carol", "carolpw");

fn services_up() -> bool {
    require_service("codalab", codalab_running()) && require_service("docker", docker_running())
}

/// A real `cl-worker` process, stopped (SIGTERM, then SIGKILL) when dropped.
struct Worker {
    id: String,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Worker {
    /// A worker of `user` with the CPUs of `cpus` and 3 GiB, tag-exclusive to `tag`. It runs
    /// under `taskset -c cpus`: `cl-worker` 1.7.5 reports the CPUs it may run on
    /// (`os.sched_getaffinity`, as in a Slurm job) and ignores its `--cpuset` on Linux.
    fn start(id: &str, user: (&str, &str), tag: &str, cpus: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("worker.log");
        let out = std::fs::File::create(&log).unwrap();
        let work_dir = dir.path().join("work");
        let child = Command::new("taskset")
            .args(["-c", cpus])
            .arg(cl_worker())
            .args([
                "--server",
                SERVER,
                "--id",
                id,
                "--tag",
                tag,
                "--tag-exclusive",
            ])
            .args(["--max-memory", "3g"])
            .args(["--network-prefix", &format!("cl_worker_{id}_network")])
            .args(["--checkin-frequency-seconds", "2", "--verbose"])
            .arg("--work-dir")
            .arg(&work_dir)
            .args(extra)
            .env("CODALAB_USERNAME", user.0)
            .env("CODALAB_PASSWORD", user.1)
            .env("DOCKER_HOST", docker_host())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Self {
            id: id.to_owned(),
            child,
            log,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        format!("--- worker {} (last lines) ---\n{}", self.id, {
            let mut lines = tail;
            lines.reverse();
            lines.join("\n")
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The id of `user` (`GET /rest/user`).
fn user_id(user: (&str, &str)) -> String {
    let document = Server::login(user.0, user.1).json("/rest/user");
    parse_user_identity(&document)
        .unwrap_or_else(|| panic!("no id for {}: {document}", user.0))
        .id
}

/// The checked-in workers tagged `tag`, as root sees them (every worker).
fn workers(root: &Server, tag: &str) -> Vec<ServerWorker> {
    let body = root.json("/rest/workers/info").to_string();
    parse_workers_reply(&body)
        .unwrap()
        .iter()
        .filter(|w| w.tag.as_deref() == Some(tag))
        .map(|w| ServerWorker::from_checkin(w, 0).expect("1.7.5 reports every field"))
        .collect()
}

/// Which of `uuids` each worker tagged `tag` runs (the server's `run_uuids`).
fn placements(root: &Server, tag: &str, uuids: &[String]) -> BTreeMap<String, String> {
    let body = root.json("/rest/workers/info").to_string();
    let mut placed = BTreeMap::new();
    for worker in parse_workers_reply(&body).unwrap() {
        if worker.tag.as_deref() != Some(tag) {
            continue;
        }
        for uuid in worker.run_uuids.iter().filter(|u| uuids.contains(u)) {
            placed.insert(uuid.clone(), worker.worker_id.clone());
        }
    }
    placed
}

/// `uuids` as the manager parses them from the server, in the order given.
fn bundles(server: &Server, uuids: &[String]) -> Vec<StagedBundle> {
    let specs: Vec<String> = uuids.iter().map(|u| format!("specs={u}")).collect();
    let document = server.json(&format!("/rest/bundles?{}", specs.join("&")));
    let (bundles, skipped) = parse_bundles(&document).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    bundles
}

/// Stages `n` bundles of `user` that wait for `gate` and then sleep until killed (or for 10
/// minutes, should a kill not reach them: none may finish while the test waits).
fn gated(user: &str, n: usize, tag: &str, gate: &str, flags: &[&str]) -> Vec<String> {
    let mut all = vec!["--request-queue", tag, "--tags", tag];
    all.extend(flags);
    let deps = format!("gate:{gate}");
    let env = [
        ("STAGE_WAIT", "0"),
        ("STAGE_DEPS", deps.as_str()),
        ("STAGE_COMMAND", "sleep 600"),
    ];
    stage_as(user, n, &all, &env)
}

/// Stages the scenario's bundles in this order (the server's order is by creation), each
/// with its kind. Dave and erin are this test's own users: no bundle of theirs staged before
/// moves theirs up in the dispatch order. Carol (quota 1) has a 2-CPU worker of her own;
/// root's shared workers have 1 and 2 CPUs; every worker has 3 GiB.
fn stage_scenario(tag: &str, gate: &str) -> Vec<(String, &'static str)> {
    // (user, bundles, kind, CPUs, memory, priority)
    let kinds = [
        ("carol", 4, "carol 1 CPU", "1", "512m", None),
        ("dave", 1, "dave 2 CPUs", "2", "512m", None),
        ("dave", 1, "dave 1 CPU priority 5", "1", "512m", Some("5")),
        ("dave", 1, "dave 1 CPU 3g", "1", "3g", None),
        ("erin", 1, "erin 1 CPU", "1", "512m", None),
        ("erin", 1, "erin 2 CPUs", "2", "512m", None),
    ];
    let mut bundles = Vec::new();
    for (user, n, kind, cpus, memory, priority) in kinds {
        let mut flags = vec!["--request-cpus", cpus, "--request-memory", memory];
        flags.extend(
            priority
                .map(|p| ["--request-priority", p])
                .into_iter()
                .flatten(),
        );
        let uuids = gated(user, n, tag, gate, &flags);
        bundles.extend(uuids.into_iter().map(|uuid| (uuid, kind)));
    }
    bundles
}

/// Every bundle the server has staged, in its order (the search's), as the manager parses
/// them.
fn all_staged(root: &Server) -> Vec<StagedBundle> {
    let document = root.json("/rest/bundles?keywords=state=staged&keywords=.limit=100000");
    let (bundles, skipped) = parse_bundles(&document).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    bundles
}

/// The kinds of bundles each worker runs (`placed`: uuid → worker id), sorted.
fn kinds_by_worker(
    placed: &BTreeMap<String, String>,
    kinds: &[(String, &'static str)],
    tag: &str,
) -> BTreeMap<String, Vec<&'static str>> {
    let mut by_worker: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    for (uuid, worker) in placed {
        let kind = kinds.iter().find(|(u, _)| u == uuid).map(|(_, k)| *k);
        let worker = worker.trim_start_matches(tag).to_owned();
        by_worker.entry(worker).or_default().push(kind.unwrap());
    }
    by_worker.values_mut().for_each(|kinds| kinds.sort());
    by_worker
}

/// Polls until the server has dispatched the staged set: at least `expected` of `uuids` run
/// on our workers, each acknowledged by its worker (a bundle whose "run" message gets no answer
/// goes from `starting` back to `staged`, and the worker's `run_uuids` lists it meanwhile).
fn wait_dispatch(
    root: &Server,
    tag: &str,
    uuids: &[String],
    expected: usize,
    context: impl Fn() -> String,
) -> BTreeMap<String, String> {
    let deadline = Instant::now() + WITHIN;
    loop {
        let states = root.states(uuids);
        let mut placed = placements(root, tag, uuids);
        placed.retain(|uuid, _| !["created", "staged", "starting"].contains(&&*states[uuid]));
        if placed.len() >= expected {
            return placed;
        }
        assert!(
            Instant::now() < deadline,
            "no dispatch after {WITHIN:?}: states {states:?}, placed {placed:?}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Polls until the workers tagged `tag` have all checked in; asserts the CPUs each reports
/// (the premise that no two tie).
fn wait_checked_in(root: &Server, tag: &str, running: &[Worker]) -> Vec<ServerWorker> {
    let deadline = Instant::now() + WITHIN;
    let seen = loop {
        let seen = workers(root, tag);
        if seen.len() == running.len() {
            break seen;
        }
        assert!(
            Instant::now() < deadline,
            "workers not checked in: {seen:?}\n{}",
            logs(running)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let cpus: BTreeMap<&str, i64> = seen
        .iter()
        .map(|w| (w.worker_id.trim_start_matches(tag), w.total.cpus))
        .collect();
    let want = BTreeMap::from([("-big", 2), ("-carol", 2), ("-small", 1)]);
    assert_eq!(cpus, want, "CPUs reported by the workers");
    seen
}

fn logs(workers: &[Worker]) -> String {
    let logs: Vec<String> = workers.iter().map(Worker::log).collect();
    logs.join("\n")
}

/// Where the model puts the bundles of `kinds` (uuid → worker id), given every staged bundle
/// and the scenario's (still `created`: they follow in the server's order), the workers, and
/// carol's quota of 1.
fn model_placements(
    root: &Server,
    kinds: &[(String, &'static str)],
    checked_in: Vec<ServerWorker>,
) -> BTreeMap<String, String> {
    let uuids: Vec<String> = kinds.iter().map(|(u, _)| u.clone()).collect();
    let mut staged = all_staged(root);
    staged.extend(bundles(root, &uuids));
    let root_id = user_id(ROOT);
    let input = DispatchInput {
        bundles: staged
            .into_iter()
            .map(|bundle| QueuedBundle { bundle })
            .collect(),
        workers: checked_in,
        pools: Vec::new(),
        owners: Owners {
            root: root_id.clone(),
            manager: root_id,
            quota_left: BTreeMap::from([(user_id(CAROL), 1)]),
            group_shared: false,
        },
    };
    dispatch(input)
        .bundles
        .into_iter()
        .filter_map(|b| match b.placement {
            Placement::Worker { worker_id } => Some((b.uuid, worker_id)),
            _ => None,
        })
        .filter(|(uuid, _)| uuids.contains(uuid))
        .collect()
}

#[test]
fn the_real_bundle_manager_places_the_bundles_where_the_model_does() {
    let _turn = support::turn(module_path!());
    if !services_up() {
        return;
    }
    let tag = unique("diff");
    let gate_tag = format!("{tag}-gate");
    set_quota("carol", 1);
    let root = Server::login(ROOT.0, ROOT.1);
    let gate = stage_as(
        "bob",
        1,
        &["--request-queue", &gate_tag, "--tags", &tag],
        &[("STAGE_COMMAND", "echo gate")],
    );
    let kinds = stage_scenario(&tag, &gate[0]);
    let uuids: Vec<String> = kinds.iter().map(|(u, _)| u.clone()).collect();
    let mut running = vec![
        Worker::start(&format!("{tag}-small"), ROOT, &tag, "0", &[]),
        Worker::start(&format!("{tag}-big"), ROOT, &tag, "0,1", &[]),
        Worker::start(&format!("{tag}-carol"), CAROL, &tag, "0,1", &[]),
    ];
    let checked_in = wait_checked_in(&root, &tag, &running);
    let expected = model_placements(&root, &kinds, checked_in);
    // Open the gate: a worker of its own runs it once, then exits.
    let once = ["--exit-after-num-runs", "1"];
    running.push(Worker::start(&gate_tag, ROOT, &gate_tag, "0", &once));
    let placed = wait_dispatch(&root, &tag, &uuids, expected.len(), || logs(&running));
    let states = root.states(&uuids);
    // Clean up before asserting: the staged ones first (so that none starts when runs end).
    let left: Vec<String> = uuids
        .iter()
        .filter(|u| !placed.contains_key(*u))
        .cloned()
        .collect();
    let started: Vec<String> = placed.keys().cloned().collect();
    root.remove(&left);
    root.kill(&started);
    root.wait_final(&started, WITHIN);
    set_quota("carol", 100);
    assert_eq!(
        kinds_by_worker(&placed, &kinds, &tag),
        kinds_by_worker(&expected, &kinds, &tag),
        "the kinds of bundles each worker runs: the real server (left), the model (right); \
         states {states:?}\n{}",
        logs(&running)
    );
    for uuid in &left {
        assert_eq!(states[uuid], "staged", "{uuid}: {states:?}");
    }
    // What the scenario is for: packing on a shared worker, a private worker taking what
    // carol's quota keeps off the shared ones, and bundles held for room, memory and quota.
    let want = BTreeMap::from([
        ("-small".to_owned(), vec!["carol 1 CPU"]),
        ("-carol".to_owned(), vec!["carol 1 CPU", "carol 1 CPU"]),
        (
            "-big".to_owned(),
            vec!["dave 1 CPU priority 5", "erin 1 CPU"],
        ),
    ]);
    assert_eq!(
        kinds_by_worker(&expected, &kinds, &tag),
        want,
        "the scenario as the model sees it"
    );
}
