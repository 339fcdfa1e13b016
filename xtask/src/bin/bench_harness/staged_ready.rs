//! Time from staged to ready, for real: the REAL CodaLab 1.7.5 server (`services up codalab`),
//! the REAL Slurm cluster (`services up slurm`), whose jobs run the REAL `cl-worker` 1.7.5 that
//! runs each bundle in Docker (`services up docker`). Ours (`cl-worker-manager` built next to
//! this harness) and upstream's (`cl-worker-manager` of the codalab venv) start the workers
//! with the same `slurm-batch` shape and worker flags.
//!
//! One run: `stage.sh` stages N bundles as bob (`echo … > out.txt`, 1 CPU, 256m, tagged and
//! queued `Q`, unique per run); the clock starts when it returns (all staged); the manager
//! starts with `--worker-tag Q --worker-tag-exclusive` and a Slurm job name unique to the run;
//! every second the harness reads the bundles' states over REST (one search by tag) and the
//! queue (`squeue`), until all are `ready`, one fails, or the deadline passes. Then the manager
//! gets SIGTERM, every job with the run's name is cancelled, and bundles not ready are removed.
//! Figures: seconds to the first job submission seen in `squeue`, to the first and to the
//! last bundle `ready`, and the most jobs seen at once.

use crate::codalab_rest::{Rest, SERVER, USER};
use crate::real_run::{
    self, cancel_jobs, missing_service, ours_exe, peer_exe, run_jobs, secs, stop,
};
use crate::run::{publish, repo_root, results_path};
use anyhow::{Context, Result, bail};
use codalab_wm_core::backend::new_unique;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

/// `--max-workers` of every side.
const MAX_WORKERS: &str = "10";
/// `--max-launches-per-tick` of ours in target mode.
const BURST: &str = "10";
const FINAL_BAD: [&str; 3] = ["failed", "killed", "worker_offline"];

/// One measured configuration: who, how it is described, its own global flags.
struct Side {
    side: &'static str,
    mode: &'static str,
    flags: &'static [&'static str],
}

const SIDES: [Side; 4] = [
    Side {
        side: "ours",
        mode: "target, burst 10",
        flags: &["--launch-mode", "target", "--max-launches-per-tick", BURST],
    },
    Side {
        side: "ours",
        mode: "compat, defaults",
        flags: &[],
    },
    Side {
        side: "peer",
        mode: "defaults (min-seconds 60)",
        flags: &[],
    },
    Side {
        side: "peer",
        mode: "--min-seconds-between-workers 0",
        flags: &["--min-seconds-between-workers", "0"],
    },
];

/// (bundles, which of `SIDES`, deadline) of each run.
fn plan(quick: bool) -> Vec<(usize, usize, Duration)> {
    if quick {
        let limit = Duration::from_secs(180);
        return vec![(1, 0, limit), (1, 3, limit)];
    }
    let mut runs = Vec::new();
    for bundles in [1, 20] {
        for side in 0..SIDES.len() {
            runs.push((bundles, side, Duration::from_secs(900)));
        }
    }
    runs
}

/// `bench-harness staged-ready [--quick]`: only the staged→ready section, merged into the
/// results of the last run (the other sections keep their figures).
pub fn only(args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let path = results_path(quick)?;
    let mut results: Value = match std::fs::read_to_string(&path) {
        Ok(text) => {
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?
        }
        Err(_) => json!({ "quick": quick }),
    };
    results["staged_ready"] = json!(measure_all(quick)?);
    publish(quick, &results)
}

/// The rows, or none when a service is missing and the run may go without it (quick, not CI).
pub fn measure_all(quick: bool) -> Result<Vec<Value>> {
    if let Some(missing) = missing_service() {
        let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
        if quick && !in_ci {
            eprintln!("bench: staged→ready rows skipped ({missing})");
            return Ok(Vec::new());
        }
        bail!("staged→ready needs {missing}");
    }
    let mut rows = Vec::new();
    for (bundles, side, limit) in plan(quick) {
        let side = &SIDES[side];
        eprintln!(
            "bench: staged→ready, {} ({}), {bundles} bundle(s)",
            side.side, side.mode
        );
        let row = one_run(bundles, side, limit)?;
        eprintln!("bench:   {row}");
        rows.push(row);
    }
    Ok(rows)
}

/// What one run uses: its queue/tag/job name and directories.
struct RunDirs {
    tag: String,
    dir: PathBuf,
}

fn one_run(bundles: usize, side: &Side, limit: Duration) -> Result<Value> {
    let tag = format!("wmsr{}", &new_unique()[..10]);
    let dir = repo_root().join("target/bench/staged-ready").join(&tag);
    std::fs::create_dir_all(&dir)?;
    let run = RunDirs { tag, dir };
    let uuids = stage(&run, bundles)?;
    let t0 = Instant::now();
    let mut manager = start_manager(&run, side)?;
    let observed = observe(&run, bundles, limit, t0, &mut manager);
    stop(&mut manager);
    let cancelled = cancel_jobs(&run.tag);
    let removed = remove_unfinished(&run.tag, &uuids);
    let observed = observed?;
    cancelled.context("cancelling the run's Slurm jobs")?;
    removed.context("removing the run's unfinished bundles")?;
    let mut row = observed;
    row["side"] = json!(side.side);
    row["mode"] = json!(side.mode);
    row["bundles"] = json!(bundles);
    row["deadline_s"] = json!(limit.as_secs());
    row["log"] = json!(run.dir.join("manager.log").display().to_string());
    Ok(row)
}

/// Stages the run's bundles with `stage.sh`; returns their uuids once all are staged.
fn stage(run: &RunDirs, n: usize) -> Result<Vec<String>> {
    real_run::stage(USER.0, n, "1", &run.tag, "echo staged-ready-{i} > out.txt")
}

/// The flags both managers get: same server, limits, worker shape and worker flags.
fn common_args(run: &RunDirs) -> Vec<String> {
    let dir = |d: &str| run.dir.join(d).display().to_string();
    let worker = real_run::cl_worker();
    let mut args: Vec<String> = vec![
        "--server".into(),
        SERVER.into(),
        "--max-workers".into(),
        MAX_WORKERS.into(),
        "--search".into(),
        format!("tags={}", run.tag),
        "--worker-executable".into(),
        worker.display().to_string(),
        "--worker-tag".into(),
        run.tag.clone(),
        "--worker-tag-exclusive".into(),
        "--worker-work-dir-prefix".into(),
        dir("work"),
    ];
    args.extend(
        [
            "slurm-batch",
            "--partition",
            "cpu",
            "--gpus",
            "0",
            "--cpus",
            "1",
        ]
        .into_iter()
        .chain(["--memory-mb", "1024", "--job-name", &run.tag])
        .chain(["--slurm-work-dir", &dir("slurm")])
        .map(str::to_owned),
    );
    args
}

fn start_manager(run: &RunDirs, side: &Side) -> Result<Child> {
    let exe = if side.side == "ours" {
        ours_exe()?
    } else {
        peer_exe()?
    };
    let mut args: Vec<String> = side.flags.iter().map(|s| s.to_string()).collect();
    args.extend(common_args(run));
    real_run::start_manager(&exe, &args, USER, &run.dir)
}

/// Polls the bundles and the queue every second until all are ready, one fails, the manager
/// exits or `limit` passes.
fn observe(
    run: &RunDirs,
    bundles: usize,
    limit: Duration,
    t0: Instant,
    manager: &mut Child,
) -> Result<Value> {
    let rest = Rest::login()?;
    let (mut first_submit, mut first_ready, mut peak_jobs) = (None, None, 0);
    let (outcome, states) = loop {
        let jobs = run_jobs(&run.tag)?.len();
        if jobs > 0 && first_submit.is_none() {
            first_submit = Some(secs(t0));
        }
        peak_jobs = peak_jobs.max(jobs);
        let states = rest.states(&run.tag)?;
        let ready = states.iter().filter(|s| *s == "ready").count();
        if ready > 0 && first_ready.is_none() {
            first_ready = Some(secs(t0));
        }
        if ready == bundles {
            break ("all ready", states);
        }
        if states.iter().any(|s| FINAL_BAD.contains(&s.as_str())) {
            break ("a bundle failed", states);
        }
        if let Some(status) = manager.try_wait()? {
            bail!(
                "the manager exited ({status}) before all bundles were ready; see {}",
                run.dir.join("manager.log").display()
            );
        }
        if t0.elapsed() >= limit {
            break ("deadline", states);
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    let ready = states.iter().filter(|s| *s == "ready").count();
    Ok(json!({
        "outcome": outcome,
        "ready": ready,
        "all_ready_s": (ready == bundles).then(|| secs(t0)),
        "first_submit_s": first_submit,
        "first_ready_s": first_ready,
        "peak_jobs": peak_jobs,
        "end_states": states,
    }))
}

fn remove_unfinished(tag: &str, uuids: &[String]) -> Result<()> {
    let rest = Rest::login()?;
    let states = rest.states(tag)?;
    if states.iter().all(|s| s == "ready") {
        return Ok(());
    }
    rest.remove(uuids)
}

/// The section's table in Markdown (empty when the run has no rows).
pub fn render(out: &mut String, results: &Value) {
    use std::fmt::Write as _;
    let Some(rows) = results["staged_ready"].as_array().filter(|r| !r.is_empty()) else {
        return;
    };
    let _ = writeln!(
        out,
        "\n### Time from staged to ready (s): real server, real `cl-worker`s in Docker, real Slurm\n\n\
         Clock from all N bundles staged; `--max-workers {MAX_WORKERS}`, Slurm partition `cpu`, \
         1 CPU and 1024 MB per worker, `--worker-tag Q --worker-tag-exclusive`; polled every 1 s.\n\n\
         | N | manager | mode | first job submitted | first ready | all ready | ready / N | most jobs |\n\
         |---:|---|---|---:|---:|---:|---:|---:|"
    );
    let s = |v: &Value| v.as_f64().map_or("—".into(), |x| format!("{x:.1}"));
    for row in rows {
        let all = match row["all_ready_s"].as_f64() {
            Some(x) => format!("{x:.1}"),
            None => format!(
                "— ({} after {} s)",
                row["outcome"].as_str().unwrap_or("?"),
                row["deadline_s"]
            ),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            row["bundles"],
            row["side"].as_str().unwrap_or("?"),
            row["mode"].as_str().unwrap_or("?"),
            s(&row["first_submit_s"]),
            s(&row["first_ready_s"]),
            all,
            row["ready"],
            row["bundles"],
            row["peak_jobs"],
        );
    }
}
