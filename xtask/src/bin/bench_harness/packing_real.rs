//! Planning as the server dispatches (issue #29), measured: the REAL CodaLab 1.7.5 server
//! (`services up codalab`), the REAL Slurm cluster (`services up slurm`) whose jobs run the REAL
//! `cl-worker` 1.7.5 (bundles in Docker, `services up docker`). Not in `--quick`.
//!
//! One run per side, each with a tag and queue `T` of its own: the bench user's private worker
//! (a `cl-worker` under their credentials, outside the manager, 1 CPU by `taskset`,
//! tag-exclusive to `T`) is started and checked in; carol's `parallel_run_quota` is set to 1 and
//! the bench user's to 0 (only their own worker runs their bundles); [`TRACE`] is staged (alice,
//! carol, bench; 1- and 2-CPU bundles that sleep 20–30 s, queued and tagged `T`); then the
//! side's manager starts as the root user `codalab` (its workers are shared: carol's quota
//! applies to them) with 2-CPU Slurm workers, at most [`MAX_WORKERS`]. Every second the harness
//! reads the run's bundles and the checked-in workers (REST, as root) and the run's jobs
//! (`squeue`), until every bundle is ready and every job has ended, or the side's deadline.
//! Then (always) the manager is stopped, the run's jobs cancelled, the private worker stopped,
//! unfinished bundles removed and both quotas set back to 100. Ours (today) is scraped for
//! its start-time estimates' errors (`--listen`, `/metrics`) before it stops.

use crate::codalab_rest::{Rest, SERVER};
use crate::packing_real_report::{Seen, estimate_errors, scrape};
use crate::real_run::{self, cancel_jobs, missing_service, ours_exe, peer_exe, secs, stop};
use crate::run::{publish, repo_root, results_path};
use anyhow::{Context, Result, bail};
use codalab_wm_core::backend::new_unique;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::packing_real_report::render;

/// `--max-workers` of every side: four 2-CPU jobs fill the test cluster's node (8 CPUs).
pub const MAX_WORKERS: &str = "4";
/// CPUs of a worker job (`slurm-batch --cpus`): this machine has 2 cores.
pub const WORKER_CPUS: &str = "2";
/// `--worker-idle-seconds` of every side: a worker with nothing to run leaves after this.
pub const IDLE_SECONDS: &str = "20";
/// Each side's deadline, from its manager's start.
const DEADLINE: Duration = Duration::from_secs(480);
const ROOT: (&str, &str) = ("codalab", "codalab");
/// The user with a private worker; their `parallel_run_quota` is 0 during the runs, so that
/// only that worker takes their bundles (a user who brings their own machines).
pub const PRIVATE: (&str, &str) = ("bench", "benchpw");
/// The user whose `parallel_run_quota` is 1 during the runs.
pub const QUOTA_USER: &str = "carol";

/// Bundles of one user, alike.
pub struct Batch {
    pub user: &'static str,
    pub n: usize,
    pub cpus: &'static str,
    pub command: &'static str,
}

/// The mixed trace, staged in this order (8 bundles).
pub const TRACE: [Batch; 4] = [
    Batch {
        user: "alice",
        n: 3,
        cpus: "1",
        command: "sleep 30; echo packing-{i} > out.txt",
    },
    Batch {
        user: "alice",
        n: 1,
        cpus: "2",
        command: "sleep 30; echo packing-wide-{i} > out.txt",
    },
    Batch {
        user: QUOTA_USER,
        n: 2,
        cpus: "1",
        command: "sleep 20; echo packing-quota-{i} > out.txt",
    },
    Batch {
        user: PRIVATE.0,
        n: 2,
        cpus: "1",
        command: "sleep 20; echo packing-private-{i} > out.txt",
    },
];

#[derive(Clone, Copy, PartialEq)]
enum Exe {
    Peer,
    Before29,
    Ours,
}

/// One side: its name in the table, its manager, its own flags.
struct Side {
    side: &'static str,
    exe: Exe,
    flags: &'static [&'static str],
}

const TARGET: [&str; 4] = [
    "--launch-mode",
    "target",
    "--max-launches-per-tick",
    MAX_WORKERS,
];

const SIDES: [Side; 3] = [
    Side {
        side: "upstream 1.7.5",
        exe: Exe::Peer,
        flags: &[],
    },
    Side {
        side: "ours before #29 (66efaef^)",
        exe: Exe::Before29,
        flags: &TARGET,
    },
    Side {
        side: "ours (today)",
        exe: Exe::Ours,
        flags: &TARGET,
    },
];

/// `bench-harness packing-real [--before PATH]`: only this section, merged into the results
/// of the last full run (the other sections keep their figures).
pub fn only(args: &[String]) -> Result<()> {
    let path = results_path(false)?;
    let mut results: Value = match std::fs::read_to_string(&path) {
        Ok(text) => {
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?
        }
        Err(_) => json!({ "quick": false }),
    };
    results["packing_real"] = json!(measure_all(before29(args))?);
    if results["packing_model"].is_null() {
        // The simulated section above this one in BENCH.md (seeded: the same rows every run).
        results["packing_model"] = json!(crate::packing::measure(false));
    }
    publish(false, &results)
}

/// The binary of our manager before #29: `--before PATH`, else `BENCH_BEFORE29_MANAGER`,
/// else `target/bench/before29/cl-worker-manager`.
pub fn before29(args: &[String]) -> PathBuf {
    let flag = args.iter().position(|a| a == "--before");
    let from_flag = flag.and_then(|i| args.get(i + 1)).map(PathBuf::from);
    let from_env = std::env::var_os("BENCH_BEFORE29_MANAGER").map(PathBuf::from);
    let default = repo_root().join("target/bench/before29/cl-worker-manager");
    from_flag.or(from_env).unwrap_or(default)
}

/// The section in `bench-harness run`: none in `--quick` (CI's time budget), every side
/// otherwise.
pub fn measure_full(quick: bool, args: &[String]) -> Result<Vec<Value>> {
    if quick {
        return Ok(Vec::new());
    }
    measure_all(before29(args))
}

/// Every side's row (full runs only: `cargo xtask bench` without `--quick`).
pub fn measure_all(before29: PathBuf) -> Result<Vec<Value>> {
    if let Some(missing) = missing_service() {
        bail!("the real packing section needs {missing}");
    }
    let mut rows = Vec::new();
    for side in &SIDES {
        eprintln!("bench: packing on real workers, {}", side.side);
        let exe = match side.exe {
            Exe::Peer => peer_exe()?,
            Exe::Ours => ours_exe()?,
            Exe::Before29 if before29.exists() => before29.clone(),
            Exe::Before29 => {
                rows.push(skipped(side, &before29));
                continue;
            }
        };
        let row = one_side(side, &exe)?;
        eprintln!("bench:   {row}");
        rows.push(row);
    }
    Ok(rows)
}

fn skipped(side: &Side, path: &Path) -> Value {
    let how = "git worktree add /tmp/wm-before29 66efaef^ && (cd /tmp/wm-before29 && \
               cargo build --release -p codalab-wm --features slurm), then copy its \
               cl-worker-manager there or pass --before PATH";
    json!({
        "side": side.side,
        "skipped": format!("{} is missing: {how}", path.display()),
    })
}

/// What one side's run uses: its tag (queue, search, job name) and directory.
struct RunDirs {
    tag: String,
    dir: PathBuf,
}

fn one_side(side: &Side, exe: &Path) -> Result<Value> {
    let tag = format!("wmpk{}", &new_unique()[..10]);
    let dir = repo_root().join("target/bench/packing-real").join(&tag);
    std::fs::create_dir_all(&dir)?;
    let run = RunDirs { tag, dir };
    let mut private = None;
    let mut manager = None;
    let measured = measure_side(side, exe, &run, &mut private, &mut manager);
    if let Some(manager) = manager.as_mut() {
        stop(manager);
    }
    let cancelled = cancel_jobs(&run.tag);
    if let Some(worker) = private.as_mut() {
        stop(worker);
    }
    let removed = remove_unfinished(&run.tag);
    let quota =
        real_run::set_quota(QUOTA_USER, 100).and_then(|()| real_run::set_quota(PRIVATE.0, 100));
    let mut row = measured?;
    cancelled.context("cancelling the run's Slurm jobs")?;
    removed.context("removing the run's unfinished bundles")?;
    quota.context("setting the quotas back")?;
    row["side"] = json!(side.side);
    row["log"] = json!(run.dir.join("manager.log").display().to_string());
    Ok(row)
}

/// Sets the stage up, starts the manager, observes until done or the deadline.
fn measure_side(
    side: &Side,
    exe: &Path,
    run: &RunDirs,
    private: &mut Option<Child>,
    manager: &mut Option<Child>,
) -> Result<Value> {
    let root = Rest::login_as(ROOT)?;
    real_run::set_quota(QUOTA_USER, 1)?;
    real_run::set_quota(PRIVATE.0, 0)?;
    let private_id = format!("{}-private", run.tag);
    *private = Some(start_private_worker(run, &private_id)?);
    wait_checked_in(&root, run, &private_id)?;
    let mut uuids = Vec::new();
    for batch in &TRACE {
        uuids.extend(real_run::stage(
            batch.user,
            batch.n,
            batch.cpus,
            &run.tag,
            batch.command,
        )?);
    }
    let t0 = Instant::now();
    let mut args: Vec<String> = side.flags.iter().map(|s| s.to_string()).collect();
    if side.exe == Exe::Ours {
        args.extend(["--listen".to_owned(), "127.0.0.1:0".to_owned()]);
    }
    args.extend(common_args(run));
    let child = manager.insert(real_run::start_manager(exe, &args, ROOT, &run.dir)?);
    let mut seen = Seen::new(uuids, private_id);
    let outcome = observe(&root, run, t0, child, &mut seen)?;
    let mut row = seen.row(outcome, DEADLINE);
    if side.exe == Exe::Ours {
        row["estimate_errors"] = estimate_errors(&scrape(&run.dir.join("manager.log"))?);
    }
    Ok(row)
}

/// The private user's own `cl-worker`, outside any manager: 1 CPU (`taskset -c 0`; `cl-worker` reports the
/// CPUs it may run on), tag-exclusive to the run's tag.
fn start_private_worker(run: &RunDirs, id: &str) -> Result<Child> {
    let log = std::fs::File::create(run.dir.join("private-worker.log"))?;
    let work = run.dir.join("private-work");
    Command::new("taskset")
        .args(["-c", "0"])
        .arg(real_run::cl_worker())
        .args(["--server", SERVER, "--id", id, "--tag", &run.tag])
        .args(["--tag-exclusive", "--max-memory", "2g"])
        .args(["--network-prefix", &format!("cl_worker_{id}_network")])
        .arg("--work-dir")
        .arg(&work)
        .env("CODALAB_USERNAME", PRIVATE.0)
        .env("CODALAB_PASSWORD", PRIVATE.1)
        .env("DOCKER_HOST", real_run::docker_host())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the private cl-worker")
}

fn wait_checked_in(root: &Rest, run: &RunDirs, id: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        if root.workers(&run.tag)?.iter().any(|(w, _)| w == id) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    bail!(
        "the private worker did not check in within 90 s; see {}",
        run.dir.join("private-worker.log").display()
    )
}

/// The flags every side gets: same server, limits, pacing, worker shape and worker flags.
fn common_args(run: &RunDirs) -> Vec<String> {
    let dir = |d: &str| run.dir.join(d).display().to_string();
    let worker = real_run::cl_worker().display().to_string();
    let search = format!("tags={}", run.tag);
    let global = [
        ["--server", SERVER, "--min-workers", "0"].as_slice(),
        &[
            "--max-workers",
            MAX_WORKERS,
            "--worker-idle-seconds",
            IDLE_SECONDS,
        ],
        &["--min-seconds-between-workers", "0", "--search", &search],
        &["--worker-executable", &worker, "--worker-tag", &run.tag],
        &[
            "--worker-tag-exclusive",
            "--worker-work-dir-prefix",
            &dir("work"),
        ],
    ];
    let slurm = [
        ["slurm-batch", "--partition", "cpu", "--gpus", "0"].as_slice(),
        &["--cpus", WORKER_CPUS, "--memory-mb", "2048"],
        &["--job-name", &run.tag, "--slurm-work-dir", &dir("slurm")],
    ];
    let all = global.iter().chain(&slurm).flat_map(|part| part.iter());
    all.map(|s| s.to_string()).collect()
}

/// Polls bundles, workers and jobs every second until every bundle is ready and every job
/// has ended, a bundle fails, the manager exits, or the deadline.
fn observe(
    root: &Rest,
    run: &RunDirs,
    t0: Instant,
    manager: &mut Child,
    seen: &mut Seen,
) -> Result<&'static str> {
    loop {
        let now = secs(t0);
        let jobs = real_run::run_job_states(&run.tag)?;
        seen.jobs(now, &jobs);
        seen.workers(&root.workers(&run.tag)?);
        let bundles = root.bundles(&run.tag)?;
        seen.bundles(now, &bundles);
        if seen.all_ready() && jobs.is_empty() {
            return Ok("all ready, every job ended");
        }
        if seen.any_failed() {
            return Ok("a bundle failed");
        }
        if let Some(status) = manager.try_wait()? {
            bail!(
                "the manager exited ({status}); see {}",
                run.dir.join("manager.log").display()
            );
        }
        if t0.elapsed() >= DEADLINE {
            return Ok("deadline");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Removes the run's bundles that are not ready (as root: every user's).
fn remove_unfinished(tag: &str) -> Result<()> {
    let root = Rest::login_as(ROOT)?;
    let unfinished: Vec<String> = (root.bundles(tag)?.into_iter())
        .filter(|(_, state)| state != "ready")
        .map(|(uuid, _)| uuid)
        .collect();
    if unfinished.is_empty() {
        return Ok(());
    }
    root.remove(&unfinished)
}
