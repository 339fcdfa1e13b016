//! Advice from the manager's own history, proved on real things (#43 item 3): the REAL CodaLab
//! 1.7.5 server (`services up codalab`), the REAL `cl-worker` 1.7.5 run by our manager's
//! `local` backend, its bundles in Docker (`services up docker`). Not in `--quick`.
//!
//! 1. **Recorded**: ours runs with [`FIRST`] (a pool of 2-CPU local workers, at most 2, idle
//!    exit after 30 s) and its history in a record dir of its own, while the harness stages
//!    [`BURSTS`] of bundles of several shapes at their times (a burst every 150 s: the workers
//!    exit between bursts). The run ends when every bundle is ready and no worker job is left.
//! 2. **Replay**: `cl-worker-manager advise --json` reads that history under the same flags; its
//!    first point is the replay of the settings it ran with, held against what the history
//!    says happened (wait p90, worker-seconds; target within 10 %).
//! 3. **Advised**: `advise --p90` asks for [`TARGET_SHARE`] of the recorded p90; the settings
//!    it recommends (or, when none meets it, the nearest) run the same bursts again, and what
//!    their history says happened is held against the prediction (target within 15 %).
//!
//! Both runs' directories (manager log, history, advice) stay in `target/bench/advise-real/`.

use crate::codalab_rest::{Rest, SERVER, USER};
use crate::real_run::{self, ours_exe, secs, stop};
use crate::run::repo_root;
use anyhow::{Context, Result, bail};
use codalab_wm_core::backend::new_unique;
use codalab_wm_core::simulate::advise::Recorded;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Bundles staged at once: when (seconds after the manager's start), how many, their CPUs, how
/// long each sleeps.
struct Burst {
    at: u64,
    n: usize,
    cpus: &'static str,
    sleep: u64,
}

const BURSTS: [Burst; 6] = [
    Burst {
        at: 0,
        n: 4,
        cpus: "1",
        sleep: 40,
    },
    Burst {
        at: 0,
        n: 1,
        cpus: "2",
        sleep: 30,
    },
    Burst {
        at: 150,
        n: 3,
        cpus: "1",
        sleep: 60,
    },
    Burst {
        at: 300,
        n: 2,
        cpus: "2",
        sleep: 30,
    },
    Burst {
        at: 300,
        n: 2,
        cpus: "1",
        sleep: 20,
    },
    Burst {
        at: 450,
        n: 6,
        cpus: "1",
        sleep: 30,
    },
];

/// The settings of the recorded run (global flags of the single `local` pool).
const FIRST: [(&str, &str); 5] = [
    ("--min-workers", "0"),
    ("--max-workers", "2"),
    ("--worker-idle-seconds", "30"),
    ("--launch-mode", "target"),
    ("--max-launches-per-tick", "4"),
];

/// The flags every run and every `advise` of its history share (the bench's tick, no pause
/// between launches), beside the settings compared.
const COMMON: [&str; 4] = ["--sleep-time", "2", "--min-seconds-between-workers", "0"];

/// The advised run asks for this share of the recorded run's wait p90.
const TARGET_SHARE: f64 = 0.5;

/// A run's deadline after its last burst.
const DRAIN: Duration = Duration::from_secs(600);

/// `bench-harness advise-real [--reuse RECORDED_DIR [ADVISED_DIR]]`: only this section, merged
/// into the results of the last full run (the other sections keep their figures). `--reuse`
/// reads the histories earlier runs left (their directories under
/// `target/bench/advise-real/`) and asks `advise` again: with both, without running anything
/// real (for a change of `advise` alone, when the advised settings it names are still those
/// the advised run ran with, else it says so and stops); with the recorded run's alone, the
/// advised settings are run for real.
pub fn only(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--quick") {
        bail!("advise-real has no --quick: it takes about 25 minutes of real bundles");
    }
    let reuse = match args.iter().position(|a| a == "--reuse") {
        Some(at) => match (args.get(at + 1), args.get(at + 2)) {
            (Some(a), b) => Some((PathBuf::from(a), b.map(PathBuf::from))),
            _ => bail!("--reuse RECORDED_DIR [ADVISED_DIR]"),
        },
        None => None,
    };
    crate::report::merge_section("advise_real", measure(reuse)?)
}

/// The rows (none in `--quick`).
pub fn measure_all(quick: bool) -> Result<Vec<Value>> {
    match quick {
        true => Ok(Vec::new()),
        false => measure(None),
    }
}

/// The two runs (or, with `reuse`, their histories) and the rows.
fn measure(reuse: Option<(PathBuf, Option<PathBuf>)>) -> Result<Vec<Value>> {
    if let Some(missing) = real_run::missing_service_of(&["codalab", "docker"]) {
        bail!("the advise section needs {missing}");
    }
    let settings: Vec<(String, String)> = (FIRST.iter())
        .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
        .collect();
    let first = match &reuse {
        Some((recorded, _)) => Outcome::read(recorded)?,
        None => Run::new("recorded")?.run(&settings)?,
    };
    let target = first.recorded.wait.p90_seconds.unwrap_or(60.0) * TARGET_SHARE;
    let advice = first.advise(&settings, target)?;
    let replay = &advice["points"][0]["figures"];
    let mut replayed = compare(
        "replay of the settings it ran with",
        &first,
        replay,
        &settings,
        0.10,
    );
    let spread = &advice["spread"];
    let seconds = first.recorded.days() * 3600.0;
    let of = |end: &str, key: &str, scale: f64| spread[end][key].as_f64().map(|v| v * scale);
    replayed["spread"] = json!({
        "draws": spread["draws"],
        "wait_p90_s": [of("least", "wait_p90_seconds", 1.0), of("most", "wait_p90_seconds", 1.0)],
        "worker_seconds": [of("least", "worker_hours_per_day", seconds), of("most", "worker_hours_per_day", seconds)],
    });
    let mut rows = vec![replayed];
    let (index, how) = match advice["recommended"].as_u64() {
        Some(index) => (index as usize, "recommended"),
        None => (nearest(&advice), "nearest (none met the target)"),
    };
    let point = &advice["points"][index];
    let advised = with_changes(&settings, &point["changes"])?;
    let second = match &reuse {
        Some((_, Some(dir))) => Outcome::read(dir)?.ran_with(&advised)?,
        _ => Run::new("advised")?.run(&advised)?,
    };
    let mut row = compare(
        "advised settings, run again",
        &second,
        &point["figures"],
        &advised,
        0.15,
    );
    row["advice"] = json!({"p90_target_s": target, "chosen": how, "changes": point["changes"]});
    rows.push(row);
    Ok(rows)
}

/// One run of the bursts.
struct Run {
    name: &'static str,
    tag: String,
    dir: PathBuf,
    port: u16,
}

/// What a run left: its history, read.
struct Outcome {
    tag: String,
    dir: PathBuf,
    history: PathBuf,
    recorded: Recorded,
    wall_s: f64,
    /// The manager's command line.
    command: String,
}

impl Run {
    fn new(name: &'static str) -> Result<Self> {
        let tag = format!("wmadv{}", &new_unique()[..10]);
        let dir = repo_root().join("target/bench/advise-real").join(&tag);
        std::fs::create_dir_all(&dir)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        Ok(Run {
            name,
            tag,
            dir,
            port,
        })
    }

    /// The manager's arguments: `settings`, the run's tag, record dir and listen port, the
    /// `local` backend.
    fn args(&self, settings: &[(String, String)]) -> Vec<String> {
        let dir = self.dir.display();
        let mut args: Vec<String> = settings
            .iter()
            .flat_map(|(f, v)| [f.clone(), v.clone()])
            .chain(COMMON.map(str::to_owned))
            .collect();
        args.extend(
            [
                "--server",
                SERVER,
                "--search",
                &format!("tags={}", self.tag),
                "--worker-tag",
                &self.tag,
                "--worker-tag-exclusive",
                "--worker-executable",
                &real_run::cl_worker().display().to_string(),
                "--worker-work-dir-prefix",
                &format!("{dir}/work"),
                "--record-dir",
                &format!("{dir}/records"),
                "--listen",
                &format!("127.0.0.1:{}", self.port),
                "local",
                "--cpus",
                "2",
                "--memory-mb",
                "2048",
                "--state-dir",
                &format!("{dir}/local"),
            ]
            .map(str::to_owned),
        );
        args
    }

    /// Starts the manager, stages the bursts at their times, waits until every bundle is
    /// ready and no worker job is left, stops the manager and reads its history.
    fn run(self, settings: &[(String, String)]) -> Result<Outcome> {
        eprintln!("bench: advise-real: the {} run ({})", self.name, self.tag);
        let t0 = Instant::now();
        let mut manager =
            real_run::start_manager(&ours_exe()?, &self.args(settings), USER, &self.dir)?;
        let result = self.drive(t0, &mut manager);
        stop(&mut manager);
        let _ = Command::new(ours_exe()?)
            .args([
                "down",
                "local",
                "--state-dir",
                &format!("{}/local", self.dir.display()),
            ])
            .env("CODALAB_USERNAME", USER.0)
            .env("CODALAB_PASSWORD", USER.1)
            .output();
        result?;
        std::fs::write(self.dir.join("wall_s.txt"), secs(t0).to_string())?;
        Outcome::read(&self.dir)
    }

    fn drive(&self, t0: Instant, manager: &mut Child) -> Result<()> {
        let mut staged = 0;
        for burst in &BURSTS {
            let at = Duration::from_secs(burst.at);
            // The arrivals' schedule (the workload), not a synchronisation.
            std::thread::sleep(at.saturating_sub(t0.elapsed()));
            let command = format!("sleep {}; echo advise-{{i}} > out.txt", burst.sleep);
            staged += real_run::stage(USER.0, burst.n, burst.cpus, &self.tag, &command)?.len();
        }
        let rest = Rest::login()?;
        let status = real_run::StatusReader::new(self.port)?;
        let deadline = Instant::now() + DRAIN;
        loop {
            if let Some(status) = manager.try_wait()? {
                bail!(
                    "the manager exited ({status}); see {}/manager.log",
                    self.dir.display()
                );
            }
            let states = rest.states(&self.tag)?;
            let done =
                states.len() == staged && states.iter().all(|s| s == "ready" || s == "failed");
            if done && jobs(&status)? == Some(0) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the run did not end within {} s of its last burst: {states:?}",
                    DRAIN.as_secs()
                );
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

/// The worker jobs (active + pending) the manager's `/status` shows; `None` before it answers.
fn jobs(status: &real_run::StatusReader) -> Result<Option<u64>> {
    let Ok(status) = status.read() else {
        return Ok(None);
    };
    let pools = status["pools"].as_array().context("no pools in /status")?;
    let jobs = |p: &Value| p["active"].as_u64().unwrap_or(0) + p["pending"].as_u64().unwrap_or(0);
    Ok(Some(pools.iter().map(jobs).sum()))
}

impl Outcome {
    /// What the run in `dir` (`target/bench/advise-real/<tag>`) left: its history.
    fn read(dir: &std::path::Path) -> Result<Self> {
        let tag = (dir.file_name().and_then(|n| n.to_str()))
            .context("a run's directory is named after its tag")?
            .to_owned();
        let history = dir.join("records/history");
        let text = codalab_wm_core::history::read_dir(&history)?;
        let recorded = Recorded::parse(&text).context("the run's history")?;
        let command = std::fs::read_to_string(dir.join("command.txt")).unwrap_or_default();
        let wall_s = std::fs::read_to_string(dir.join("wall_s.txt"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(f64::NAN);
        Ok(Outcome {
            tag,
            dir: dir.to_owned(),
            history,
            recorded,
            wall_s,
            command,
        })
    }

    /// This run, if it ran with `settings` (its `command.txt` has each flag and value).
    fn ran_with(self, settings: &[(String, String)]) -> Result<Self> {
        for (flag, value) in settings {
            if !self.command.contains(&format!("{flag} {value}")) {
                bail!(
                    "the advised run in {} did not run with {flag} {value}: run the section again",
                    self.dir.display()
                );
            }
        }
        Ok(self)
    }

    /// `advise --json --p90 target` on this run's history, under `settings`.
    fn advise(&self, settings: &[(String, String)], target: f64) -> Result<Value> {
        let mut command = Command::new(ours_exe()?);
        command.args(settings.iter().flat_map(|(f, v)| [f.as_str(), v.as_str()]));
        command.args(COMMON);
        command.args(["--server", SERVER]);
        command.args([
            "--worker-tag",
            &self.tag,
            "--worker-tag-exclusive",
            "advise",
            "--json",
        ]);
        command
            .args(["--p90", &format!("{target:.0}"), "--history"])
            .arg(&self.history);
        let out = command.output().context("running advise")?;
        if !out.status.success() {
            bail!("advise failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::fs::write(self.dir.join("advice.json"), &out.stdout)?;
        Ok(serde_json::from_slice(&out.stdout)?)
    }
}

/// The frontier's point with the shortest wait p90.
fn nearest(advice: &Value) -> usize {
    let points = advice["points"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let p90 = |p: &Value| {
        p["figures"]["wait_p90_seconds"]
            .as_f64()
            .unwrap_or(f64::INFINITY)
    };
    (0..points.len())
        .filter(|i| points[*i]["on_frontier"] == true)
        .min_by(|a, b| p90(&points[*a]).total_cmp(&p90(&points[*b])))
        .unwrap_or(0)
}

/// `settings` with a point's changes (`advise`'s knobs) as the single pool's flags.
fn with_changes(settings: &[(String, String)], changes: &Value) -> Result<Vec<(String, String)>> {
    let mut settings = settings.to_vec();
    for change in changes.as_array().map(Vec::as_slice).unwrap_or_default() {
        let (flag, value) = match change["key"].as_str() {
            Some("idle_seconds") => ("--worker-idle-seconds", &change["seconds"]),
            Some("max") => ("--max-workers", &change["workers"]),
            Some("min") => ("--min-workers", &change["workers"]),
            Some("burst") => ("--max-launches-per-tick", &change["launches"]),
            other => bail!("a change this bench cannot make: {other:?}"),
        };
        let value = value
            .as_u64()
            .context("a change without its value")?
            .to_string();
        match settings.iter_mut().find(|(f, _)| f == flag) {
            Some(slot) => slot.1 = value,
            None => settings.push((flag.to_owned(), value)),
        }
    }
    Ok(settings)
}

/// A row: what the run's history says happened against what `advise` predicted.
fn compare(
    case: &str,
    run: &Outcome,
    predicted: &Value,
    settings: &[(String, String)],
    target: f64,
) -> Value {
    let days = run.recorded.days();
    let happened_ws = run.recorded.worker_hours() * 3600.0;
    let predicted_ws = predicted["worker_hours_per_day"].as_f64().unwrap_or(0.0) * days * 3600.0;
    let happened_p90 = run.recorded.wait.p90_seconds.unwrap_or(0.0);
    let predicted_p90 = predicted["wait_p90_seconds"].as_f64().unwrap_or(0.0);
    let error = |a: f64, b: f64| if b > 0.0 { (a - b).abs() / b } else { f64::NAN };
    json!({
        "case": case,
        "settings": settings.iter().map(|(f, v)| format!("{f} {v}")).collect::<Vec<_>>(),
        "bundles": run.recorded.bundles,
        "launches": run.recorded.launches(),
        "wall_s": run.wall_s,
        "happened": {"wait_p50_s": run.recorded.wait.p50_seconds, "wait_p90_s": happened_p90, "worker_seconds": happened_ws},
        "predicted": {"wait_p50_s": predicted["wait_p50_seconds"], "wait_p90_s": predicted_p90, "worker_seconds": predicted_ws},
        "p90_error": error(predicted_p90, happened_p90),
        "worker_seconds_error": error(predicted_ws, happened_ws),
        "target": target,
        "dir": run.dir.display().to_string(),
    })
}

/// The section's table in BENCH.md.
pub fn render(out: &mut String, results: &Value) {
    use std::fmt::Write as _;
    let Some(rows) = results["advise_real"].as_array().filter(|r| !r.is_empty()) else {
        return;
    };
    let _ = writeln!(
        out,
        "\n### Advice from the manager's history, on the real server (#43)\n\n\
         Real CodaLab 1.7.5, real `cl-worker`s (local backend, bundles in Docker); {} bundles in \
         bursts of several shapes, workers idling out between them. Each row: what the run's own \
         history says happened, against what `advise` predicted from the recorded run's history \
         (its replay models the history's start times and workers, and the server's dispatch \
         as the bench's server ran it: rounds that take the workers listed at their start, one \
         offer at a time, each waiting for its worker's check-in, one run a check-in, a run's \
         room back at the check-in that reports it gone, and a worker that ended listed for \
         60 s, to which each bundle is offered first, 1.2 s an \
         offer, as upstream's server fails a send to a worker that has gone).\n\n\
         | case | settings | wait p90 happened / predicted | worker-seconds happened / predicted | within target |\n|---|---|---:|---:|---|",
        rows[0]["bundles"]
    );
    for row in rows {
        let pct = |k: &str| {
            row[k]
                .as_f64()
                .map_or("—".into(), |e| format!("{:.0} %", e * 100.0))
        };
        let met = ["p90_error", "worker_seconds_error"].iter().all(|k| {
            row[*k]
                .as_f64()
                .is_some_and(|e| e <= row["target"].as_f64().unwrap_or(0.0))
        });
        let _ = writeln!(
            out,
            "| {} | `{}` | {:.0} s / {:.0} s ({}) | {:.0} / {:.0} ({}) | {} (≤ {:.0} %) |",
            row["case"].as_str().unwrap_or("?"),
            row["settings"]
                .as_array()
                .map(|s| s
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" "))
                .unwrap_or_default(),
            row["happened"]["wait_p90_s"].as_f64().unwrap_or(0.0),
            row["predicted"]["wait_p90_s"].as_f64().unwrap_or(0.0),
            pct("p90_error"),
            row["happened"]["worker_seconds"].as_f64().unwrap_or(0.0),
            row["predicted"]["worker_seconds"].as_f64().unwrap_or(0.0),
            pct("worker_seconds_error"),
            if met { "met" } else { "not met" },
            row["target"].as_f64().unwrap_or(0.0) * 100.0,
        );
    }
    if let Some(spread) = rows.first().map(|r| &r["spread"]).filter(|s| s.is_object()) {
        let range = |key: &str| {
            let end = |i: usize| {
                spread[key][i]
                    .as_f64()
                    .map_or("—".into(), |v| format!("{v:.0}"))
            };
            format!("{}–{}", end(0), end(1))
        };
        let _ = writeln!(
            out,
            "\nThe recorded run replayed {} times, each drawing its own start times: wait p90 {} s, \
             worker-seconds {}.",
            spread["draws"],
            range("wait_p90_s"),
            range("worker_seconds"),
        );
    }
    if let (Some(first), Some(second)) = (rows.first(), rows.get(1)) {
        let advice = &second["advice"];
        let _ = writeln!(
            out,
            "\nAsked for wait p90 ≤ {:.0} s (half the recorded run's), `advise` named {} point: {}. \
             Run again with it, p90 went from {:.0} s to {:.0} s; worker-seconds from {:.0} to {:.0}.",
            advice["p90_target_s"].as_f64().unwrap_or(0.0),
            advice["chosen"].as_str().unwrap_or("?"),
            serde_json::to_string(&advice["changes"]).unwrap_or_default(),
            first["happened"]["wait_p90_s"].as_f64().unwrap_or(0.0),
            second["happened"]["wait_p90_s"].as_f64().unwrap_or(0.0),
            first["happened"]["worker_seconds"].as_f64().unwrap_or(0.0),
            second["happened"]["worker_seconds"].as_f64().unwrap_or(0.0),
        );
    }
}
