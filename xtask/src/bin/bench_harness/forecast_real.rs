//! Slurm's own forecast, measured (#42 item 4): the REAL CodaLab 1.7.5 server (`services up
//! codalab`), the REAL Slurm cluster (`services up slurm`) whose jobs run the REAL `cl-worker`
//! 1.7.5 (bundles in Docker, `services up docker`). Not in `--quick`.
//!
//! Estimate runs: another job (the blocker) fills the cluster's one node; one bundle is staged
//! (bob, tagged and queued `T`); ours starts with one Slurm pool (`--config`, one tick every
//! 2 s, `--listen` on a free loopback port). Its job pends behind the blocker (`Resources`).
//! Every second the harness reads the manager's `/status` (at each new tick, the bundle's
//! estimate: seconds from then, and whether it rests on Slurm's forecast) and the bundle's state
//! (REST) until it leaves `staged`: that is when it started, the moment the estimate predicts.
//! Each tick's error is |tick time + estimate − start|. The blocker either has a time limit
//! (Slurm's backfill pass then forecasts the queued job's start: `squeue --start`), running to
//! it or ending at half of it, or none (no forecast: the estimate rests on the job's age).
//!
//! Held run: a held job named as the pool's (`sbatch --hold`, reason `JobHeldUser`) sits in
//! the free Slurm pool's queue, which has `spill_after` 60 s, beside a paid local pool; one
//! bundle is staged. It should run on Slurm, beside the held job: no spill, no paid worker.
//!
//! Then (always) the manager is stopped, the run's jobs and the blocker cancelled, and the
//! bundle removed unless it is ready.

use crate::codalab_rest::{Rest, SERVER, USER};
use crate::real_run::{self, cancel_jobs, missing_service, ours_exe, secs, stop};
use crate::run::repo_root;
use crate::slurm_real::output;
use crate::stats::nearest_rank;
use anyhow::{Context, Result, bail};
use codalab_wm_core::backend::new_unique;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One estimate run: the blocker's time limit (minutes; none: no forecast) and how long it
/// sleeps (a blocker past its limit is ended by Slurm at it).
struct Blocker {
    name: &'static str,
    limit_minutes: Option<u32>,
    sleeps: u64,
}

const BLOCKERS: [Blocker; 3] = [
    Blocker {
        name: "blocker runs to its 3-min limit (Slurm forecasts)",
        limit_minutes: Some(3),
        sleeps: 900,
    },
    Blocker {
        name: "blocker ends at half its 6-min limit (Slurm forecasts)",
        limit_minutes: Some(6),
        sleeps: 180,
    },
    Blocker {
        name: "blocker has no limit (no forecast)",
        limit_minutes: None,
        sleeps: 180,
    },
];

/// How long a run may take past its blocker's sleep (or limit) before it is abandoned.
const SLACK: Duration = Duration::from_secs(300);

/// `bench-harness slurm-forecast`: only this section, merged into the results of the last
/// full run (the other sections keep their figures).
pub fn only(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--quick") {
        bail!("slurm-forecast has no --quick: it takes about 15 minutes of real jobs");
    }
    crate::report::merge_section("slurm_forecast", measure_all(false)?)
}

/// The rows (none in `--quick`).
pub fn measure_all(quick: bool) -> Result<Vec<Value>> {
    if quick {
        return Ok(Vec::new());
    }
    if let Some(missing) = missing_service() {
        bail!("the Slurm forecast section needs {missing}");
    }
    let mut rows = Vec::new();
    for blocker in &BLOCKERS {
        eprintln!("bench: slurm forecast, {}", blocker.name);
        let row = Run::new()?.estimates(blocker)?;
        eprintln!("bench:   {row}");
        rows.push(row);
    }
    eprintln!("bench: slurm forecast, a held job in the free pool");
    let row = Run::new()?.held()?;
    eprintln!("bench:   {row}");
    rows.push(row);
    Ok(rows)
}

/// One run's tag (its queue, its Slurm job name), directory and `--listen` port.
struct Run {
    tag: String,
    dir: PathBuf,
    port: u16,
}

impl Run {
    fn new() -> Result<Self> {
        let tag = format!("wmfc{}", &new_unique()[..10]);
        let dir = repo_root().join("target/bench/slurm-forecast").join(&tag);
        std::fs::create_dir_all(&dir)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        Ok(Run { tag, dir, port })
    }

    /// The manager's config: the real server, the run's bundles and worker tag, the free
    /// Slurm pool (`extra` keys) and any `more` pools.
    fn config(&self, extra: &str, more: &str) -> Result<PathBuf> {
        let (tag, dir) = (&self.tag, self.dir.display());
        let text = format!(
            "server = \"{SERVER}\"\nsearch = [\"tags={tag}\"]\nsleep_time = 2\n\
             listen = \"127.0.0.1:{port}\"\n\
             [worker]\nexecutable = \"{worker}\"\nwork_dir_prefix = \"{dir}/work\"\n\
             [[pools]]\nname = \"slurm\"\nbackend = \"slurm-batch\"\nmax = 2\n\
             min_seconds_between_workers = 0\ntag = \"{tag}\"\ntag_exclusive = true\n{extra}\n\
             [pools.slurm_batch]\njob_name = \"{tag}\"\npartition = \"cpu\"\ncpus = 1\ngpus = 0\n\
             memory_mb = 1024\nslurm_work_dir = \"{dir}/slurm\"\n{more}",
            port = self.port,
            worker = real_run::cl_worker().display(),
        );
        let path = self.dir.join("wm.toml");
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Stages the run's one bundle; its uuid.
    fn stage(&self) -> Result<String> {
        let uuids = real_run::stage(USER.0, 1, "1", &self.tag, "echo forecast > out.txt")?;
        Ok(uuids[0].clone())
    }

    fn start(&self, config: &Path) -> Result<std::process::Child> {
        let args = vec!["--config".to_owned(), config.display().to_string()];
        real_run::start_manager(&ours_exe()?, &args, USER, &self.dir)
    }

    /// The run's estimate row: the blocker fills the node, the bundle is staged, the manager
    /// runs until the bundle leaves `staged`.
    fn estimates(self, blocker: &Blocker) -> Result<Value> {
        let blocker_id = fill_the_node(&self.tag, blocker)?;
        let result = self.run_once(("", ""), blocker_deadline(blocker));
        let cancelled = output("scancel", &[&blocker_id]);
        let mut row = result?;
        cancelled.context("cancelling the blocker")?;
        row["case"] = json!(blocker.name);
        row["kind"] = json!("estimate");
        Ok(row)
    }

    /// Writes every tick's (seconds since the start, estimate, rests on the forecast) to the
    /// run's `samples.json`; its path.
    fn keep_samples(&self, samples: &[(f64, f64, bool, String)]) -> Result<String> {
        let rows: Vec<Value> = samples.iter().map(|s| json!([s.0, s.1, s.2])).collect();
        let path = self.dir.join("samples.json");
        std::fs::write(&path, serde_json::to_string(&rows)?)?;
        Ok(path.display().to_string())
    }

    /// Stages the bundle and runs the manager on the config `(extra, more)` makes
    /// ([`Run::config`]) until the bundle leaves `staged` or `limit` passes; then stops it and
    /// cleans up.
    fn run_once(&self, (extra, more): (&str, &str), limit: Duration) -> Result<Value> {
        let config = self.config(extra, more)?;
        let uuid = self.stage()?;
        let t0 = Instant::now();
        let mut manager = self.start(&config)?;
        let watched = self.watch(&uuid, t0, limit, &mut manager);
        stop(&mut manager);
        self.clean_up(&uuid)?;
        watched
    }

    /// Reads `/status` and the bundle's state every second until it leaves `staged`.
    fn watch(
        &self,
        uuid: &str,
        t0: Instant,
        limit: Duration,
        manager: &mut std::process::Child,
    ) -> Result<Value> {
        let rest = Rest::login()?;
        let reader = real_run::StatusReader::new(self.port)?;
        let status = || reader.read();
        // (seconds since t0 at the tick, estimate seconds, rests on the forecast, words)
        let mut samples: Vec<(f64, f64, bool, String)> = Vec::new();
        let mut last_tick = None;
        let started = loop {
            if let Some(status) = manager.try_wait()? {
                bail!(
                    "the manager exited ({status}); see {}",
                    self.dir.join("manager.log").display()
                );
            }
            if t0.elapsed() >= limit {
                // A finding, not a failure of the bench: the row says so.
                eprintln!(
                    "bench:   the bundle did not start within {} s",
                    limit.as_secs()
                );
                break None;
            }
            if let Ok(status) = status() {
                let tick = status["ticks"].as_u64();
                if tick != last_tick {
                    last_tick = tick;
                    if let Some(sample) = estimate_of(&status, uuid) {
                        samples.push((secs(t0), sample.0, sample.1, sample.2));
                    }
                }
            }
            let state = rest.bundles(&self.tag)?;
            if state.iter().any(|(id, s)| id == uuid && s != "staged") {
                break Some(secs(t0));
            }
            std::thread::sleep(Duration::from_secs(1));
        };
        let error = |(at, estimate, ..): &(f64, f64, bool, String)| {
            // Not started by the deadline: the error is at least the time still to come.
            (at + estimate - started.unwrap_or(limit.as_secs_f64())).abs()
        };
        let errors = |forecast: Option<bool>| {
            let mut errors: Vec<f64> = (samples.iter())
                .filter(|s| forecast.is_none_or(|f| s.2 == f))
                .map(error)
                .collect();
            errors.sort_by(f64::total_cmp);
            json!({
                "n": errors.len(),
                "p50_s": nearest_rank(&errors, 0.5),
                "p90_s": nearest_rank(&errors, 0.9),
                "max_s": errors.last(),
            })
        };
        Ok(json!({
            "started_s": started,
            "deadline_s": limit.as_secs(),
            "all": errors(None),
            "forecast": errors(Some(true)),
            "age": errors(Some(false)),
            "first_error_s": samples.first().map(error),
            "first_estimate": samples.first().map(|s| s.3.clone()),
            "first_forecast_s": samples.iter().find(|s| s.2).map(|s| s.0),
            "samples": self.keep_samples(&samples)?,
            "log": self.dir.join("manager.log").display().to_string(),
        }))
    }

    /// The held run: a held job of the pool's name in its queue, `spill_after` 60 s and a
    /// paid local pool beside it.
    fn held(self) -> Result<Value> {
        let user = output("id", &["-un"])?;
        let name = format!("{user}-{}-{}", self.tag, new_unique());
        let held_id = output(
            "sbatch",
            &[
                "--parsable",
                "--hold",
                "-p",
                "cpu",
                "-o",
                "/dev/null",
                "-J",
                &name,
                "--wrap",
                "sleep 600",
            ],
        )?;
        let paid = format!(
            "[[pools]]\nname = \"paid\"\nbackend = \"local\"\ncost_per_hour = 1.0\nmax = 1\n\
             min_seconds_between_workers = 0\ntag = \"{tag}\"\ntag_exclusive = true\n[pools.local]\ncpus = 1\nmemory_mb = 1024\n\
             state_dir = \"{}\"\n",
            self.dir.join("local").display(),
            tag = self.tag,
        );
        let result = self.run_once(("spill_after = 60", &paid), SLACK);
        let cancelled = output("scancel", &[&held_id]);
        let mut row = result?;
        cancelled.context("cancelling the held job")?;
        let log = std::fs::read_to_string(self.dir.join("manager.log")).unwrap_or_default();
        row["case"] = json!("a held job in the free pool (spill_after 60 s, a paid pool beside)");
        row["kind"] = json!("held");
        row["spilled"] = json!(log.matches("spilled to paid").count());
        row["paid_launches"] = json!(paid_launches(&log));
        Ok(row)
    }

    /// Cancels the run's jobs and removes its bundle unless it is ready (after up to a minute
    /// for it to finish).
    fn clean_up(&self, uuid: &str) -> Result<()> {
        let rest = Rest::login()?;
        for _ in 0..60 {
            let states = rest.bundles(&self.tag)?;
            if states.iter().any(|(id, s)| id == uuid && s == "ready") {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        let cancelled = cancel_jobs(&self.tag);
        let states = rest.bundles(&self.tag)?;
        if !states.iter().any(|(id, s)| id == uuid && s == "ready") {
            rest.remove(&[uuid.to_owned()])?;
        }
        cancelled
    }
}

/// The launches the paid pool's decision lines say it made (`pool paid: … ): launch N, …`).
fn paid_launches(log: &str) -> u64 {
    let launched = |line: &str| {
        let after = line
            .split_once("pool paid: ")?
            .1
            .split_once("): launch ")?
            .1;
        after.split(',').next()?.trim().parse::<u64>().ok()
    };
    log.lines().filter_map(launched).sum()
}

/// The bundle's estimate in a `/status` document: (seconds, rests on the platform's forecast,
/// its words), when it has a figure.
fn estimate_of(status: &Value, uuid: &str) -> Option<(f64, bool, String)> {
    let estimates = status["estimates"].as_array()?;
    let estimate = estimates.iter().find(|e| e["uuid"] == uuid)?;
    let seconds = estimate["seconds"].as_f64()?;
    let forecast = estimate["forecast"].as_bool().unwrap_or(false);
    let text = estimate["text"].as_str().unwrap_or("").to_owned();
    Some((seconds, forecast, text))
}

/// Submits the blocker (the whole node, its limit if any) and waits until it runs; its id.
fn fill_the_node(tag: &str, blocker: &Blocker) -> Result<String> {
    let name = format!("{tag}_blocker");
    let sleep = format!("sleep {}", blocker.sleeps);
    let limit = blocker.limit_minutes.map(|m| format!("--time={m}"));
    let mut args = vec!["--parsable", "-p", "cpu", "--exclusive", "-o", "/dev/null"];
    args.extend(limit.as_deref());
    args.extend(["-J", &name, "--wrap", &sleep]);
    let id = output("sbatch", &args)?;
    for _ in 0..60 {
        if output("squeue", &["--noheader", "-j", &id, "-o", "%T"])? == "RUNNING" {
            return Ok(id);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let _ = output("scancel", &[&id]);
    bail!("the blocker {id} did not start within a minute")
}

/// How long an estimate run may take: the blocker's end (its sleep or its limit) and slack.
fn blocker_deadline(blocker: &Blocker) -> Duration {
    let ends = (blocker.limit_minutes.map(|m| u64::from(m) * 60))
        .map_or(blocker.sleeps, |limit| limit.min(blocker.sleeps));
    Duration::from_secs(ends) + SLACK
}

/// The section of BENCH.md.
pub fn render(out: &mut String, results: &Value) {
    let Some(rows) = results["slurm_forecast"]
        .as_array()
        .filter(|r| !r.is_empty())
    else {
        return;
    };
    let _ = writeln!(
        out,
        "\n### Slurm's forecast against the queue's age (#42): real server, real `cl-worker`s in \
         Docker, real Slurm\n\n\
         One bundle staged behind another job that fills the cluster's node; ours (one Slurm \
         pool, a tick every 2 s) estimates when it starts. Error: |tick + estimate − the moment \
         it left `staged`|, over the ticks until then: those whose estimate rests on Slurm's \
         forecast (`squeue --start`, once the backfill pass has computed it) and the others (the \
         pool's launch → check-in time, then the job's age in the queue).\n\n\
         | case | started after | first forecast read after | error p50 / p90 with the forecast (ticks) | \
         error p50 / p90 without (ticks) |\n|---|---:|---:|---:|---:|"
    );
    let s = |v: &Value| v.as_f64().map_or("—".into(), |x| format!("{x:.0} s"));
    let errors = |v: &Value| match v["n"].as_u64() {
        Some(n) if n > 0 => format!("{} / {} ({n})", s(&v["p50_s"]), s(&v["p90_s"])),
        _ => "— (0)".into(),
    };
    for row in rows.iter().filter(|r| r["kind"] == "estimate") {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            row["case"].as_str().unwrap_or("?"),
            s(&row["started_s"]),
            s(&row["first_forecast_s"]),
            errors(&row["forecast"]),
            errors(&row["age"]),
        );
    }
    let _ = writeln!(
        out,
        "\nSlurm's forecast rests on the time limits of the jobs ahead: right to seconds when they \
         run to them, late by what they leave unused when they end sooner. Without one, the \
         estimate is the pool's launch → check-in time, then the job's age."
    );
    for row in rows.iter().filter(|r| r["kind"] == "held") {
        let started = match row["started_s"].as_f64() {
            Some(at) => format!("started after {at:.0} s"),
            None => format!("had not started after {} s", row["deadline_s"]),
        };
        let _ = writeln!(
            out,
            "\nA held job (`sbatch --hold`, named as the pool's) in the free pool's queue, \
             `spill_after` 60 s, a paid pool beside it: the bundle {started}; spills {}, paid \
             launches {}.",
            row["spilled"], row["paid_launches"],
        );
    }
}
