//! What the real packing section (`packing_real.rs`) observes of a run and reports: the jobs'
//! lifetimes (seen running in `squeue`, polled every second), each bundle's staged → running,
//! the workers that ran a bundle, our manager's start-time estimate errors (its `/metrics`
//! histogram `codalab_wm_start_estimate_error_seconds{kind}`), and the section's table.

use crate::packing_real::{IDLE_SECONDS, MAX_WORKERS, PRIVATE, QUOTA_USER, TRACE, WORKER_CPUS};
use anyhow::{Context, Result};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// A bundle state at or past `running`.
const RUNNING: [&str; 3] = ["running", "finalizing", "ready"];
const FAILED: [&str; 3] = ["failed", "killed", "worker_offline"];

/// A job's first sighting and the span it was seen running (s from the manager's start).
struct Job {
    running: Option<(f64, f64)>,
}

/// Everything a run's polls saw.
pub struct Seen {
    uuids: Vec<String>,
    private_id: String,
    states: BTreeMap<String, String>,
    running_at: BTreeMap<String, f64>,
    jobs: BTreeMap<String, Job>,
    peak_jobs: usize,
    workers: BTreeSet<String>,
    dispatched: BTreeSet<String>,
    on_private: BTreeSet<String>,
    last: f64,
}

impl Seen {
    pub fn new(uuids: Vec<String>, private_id: String) -> Self {
        Self {
            uuids,
            private_id,
            states: BTreeMap::new(),
            running_at: BTreeMap::new(),
            jobs: BTreeMap::new(),
            peak_jobs: 0,
            workers: BTreeSet::new(),
            dispatched: BTreeSet::new(),
            on_private: BTreeSet::new(),
            last: 0.0,
        }
    }

    /// One `squeue` listing of the run's jobs, (id, state), at `now`.
    pub fn jobs(&mut self, now: f64, jobs: &[(String, String)]) {
        self.last = now;
        self.peak_jobs = self.peak_jobs.max(jobs.len());
        for (id, state) in jobs {
            let job = (self.jobs.entry(id.clone())).or_insert(Job { running: None });
            if state == "RUNNING" || state == "COMPLETING" {
                let from = job.running.map_or(now, |(from, _)| from);
                job.running = Some((from, now));
            }
        }
    }

    /// One `workers/info` listing of the run's workers: (id, uuids of its runs).
    pub fn workers(&mut self, workers: &[(String, Vec<String>)]) {
        for (id, runs) in workers {
            if *id == self.private_id {
                self.on_private.extend(runs.iter().cloned());
                continue;
            }
            self.workers.insert(id.clone());
            if !runs.is_empty() {
                self.dispatched.insert(id.clone());
            }
        }
    }

    /// One search of the run's bundles: (uuid, state), at `now`.
    pub fn bundles(&mut self, now: f64, bundles: &[(String, String)]) {
        for (uuid, state) in bundles {
            if RUNNING.contains(&state.as_str()) {
                self.running_at.entry(uuid.clone()).or_insert(now);
            }
            self.states.insert(uuid.clone(), state.clone());
        }
    }

    pub fn all_ready(&self) -> bool {
        (self.uuids.iter()).all(|u| self.states.get(u).is_some_and(|s| s == "ready"))
    }

    pub fn any_failed(&self) -> bool {
        self.states.values().any(|s| FAILED.contains(&s.as_str()))
    }

    /// The side's figures.
    pub fn row(&self, outcome: &str, deadline: Duration) -> Value {
        let spans = self.jobs.values().filter_map(|j| j.running);
        let worker_seconds: f64 = spans.map(|(from, to)| to - from).sum();
        let mut waits: Vec<f64> = self.running_at.values().copied().collect();
        waits.sort_by(f64::total_cmp);
        let ready = self.states.values().filter(|s| *s == "ready").count();
        let launches = self.jobs.len();
        json!({
            "outcome": outcome,
            "deadline_s": deadline.as_secs(),
            "observed_s": self.last,
            "bundles": self.uuids.len(),
            "ready": ready,
            "running_by_end": waits.len(),
            "launches": launches,
            "worker_seconds": (worker_seconds * 10.0).round() / 10.0,
            "peak_jobs": self.peak_jobs,
            "workers_checked_in": self.workers.len(),
            "workers_dispatched_to": self.dispatched.len(),
            "never_dispatched": launches.saturating_sub(self.dispatched.len()),
            "on_private_worker": self.on_private.len(),
            "staged_running_p50_s": crate::stats::nearest_rank(&waits, 0.5),
            "staged_running_p90_s": crate::stats::nearest_rank(&waits, 0.9),
            "staged_running_s": waits,
        })
    }
}

/// Our manager's `/metrics`, from the `--listen` address its log names.
pub fn scrape(log: &Path) -> Result<String> {
    use std::io::{Read, Write};
    let text = std::fs::read_to_string(log)?;
    let addr = (text.lines())
        .filter(|l| l.contains("serving /metrics"))
        .find_map(|l| l.split("addr=").nth(1)?.split_whitespace().next())
        .context("no listen address in the manager's log")?;
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}

/// A histogram's count, sum and (upper bound, cumulative count) buckets.
type Histogram = (f64, f64, Vec<(f64, f64)>);

/// `{kind: {count, mean_s, p90_le_s}}` of `codalab_wm_start_estimate_error_seconds`; the
/// p90 is the upper bound of the histogram bucket that holds it.
pub fn estimate_errors(scrape: &str) -> Value {
    const NAME: &str = "codalab_wm_start_estimate_error_seconds";
    let mut kinds: BTreeMap<String, Histogram> = BTreeMap::new();
    for line in scrape.lines().filter(|l| l.starts_with(NAME)) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (Some(kind), Ok(value)) = (label(series, "kind"), value.parse::<f64>()) else {
            continue;
        };
        let entry = kinds.entry(kind.to_owned()).or_default();
        if series.starts_with(&format!("{NAME}_count")) {
            entry.0 = value;
        } else if series.starts_with(&format!("{NAME}_sum")) {
            entry.1 = value;
        } else if let Some(le) = label(series, "le").and_then(|le| le.parse().ok()) {
            entry.2.push((le, value));
        }
    }
    let rows: Map<String, Value> = (kinds.into_iter())
        .filter(|(_, (count, _, _))| *count > 0.0)
        .map(|(kind, (count, sum, mut buckets))| {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            let p90 = buckets.iter().find(|(_, n)| *n >= 0.9 * count).map(|b| b.0);
            let p90 = p90.filter(|le| le.is_finite());
            (
                kind,
                json!({"count": count, "mean_s": sum / count, "p90_le_s": p90}),
            )
        })
        .collect();
    Value::Object(rows)
}

/// The value of label `name` in a series `metric{a="x",b="y"}`.
fn label<'a>(series: &'a str, name: &str) -> Option<&'a str> {
    let rest = series.split(&format!("{name}=\"")).nth(1)?;
    rest.split('"').next()
}

/// The trace in words.
fn trace() -> String {
    let parts: Vec<String> = TRACE
        .iter()
        .map(|b| format!("{} × {} CPU ({})", b.n, b.cpus, b.user))
        .collect();
    parts.join(", ")
}

/// The section's table in Markdown (empty when the results have none).
pub fn render(out: &mut String, results: &Value) {
    let Some(rows) = results["packing_real"].as_array().filter(|r| !r.is_empty()) else {
        return;
    };
    let _ = writeln!(
        out,
        "\n### Packing on real workers (issue #29): real server, real `cl-worker`s in Docker, real Slurm\n\n\
         Scaled to this machine (2 cores): workers are {WORKER_CPUS}-CPU Slurm jobs (`cl-worker` \
         reports the CPUs it may use), at most {MAX_WORKERS} (the test node's 8 CPUs); bundles {}, \
         each `sleep 20`–`30`, staged before the manager starts (the clock's 0). The managers run \
         as the root user `codalab`; {QUOTA_USER}'s `parallel_run_quota` is 1; {} has a private \
         1-CPU `cl-worker` of their own, checked in before staging, and quota 0 (only that worker \
         takes their bundles: the first at once, the second after it). Every side: `--min-workers 0 \
         --min-seconds-between-workers 0 --worker-idle-seconds {IDLE_SECONDS}`; ours in target \
         mode with `--max-launches-per-tick {MAX_WORKERS}`. Worker-seconds = the jobs' time \
         seen RUNNING in `squeue` (polled every 1 s).\n\n\
         | manager | launches | worker-seconds | staged → running p50 / p90 (s) | launches never dispatched to | on the private worker | estimate error, new worker (n, mean, p90 ≤) | estimate error, other kinds | outcome |\n\
         |---|---:|---:|---:|---:|---:|---|---|---|",
        trace(),
        PRIVATE.0,
    );
    for row in rows {
        let _ = writeln!(out, "{}", table_row(row));
    }
    let _ = writeln!(out, "\n{}", targets(rows));
}

/// Issue #29's targets against ours today and ours before #29, as one paragraph.
fn targets(rows: &[Value]) -> String {
    let find = |prefix: &str| {
        (rows.iter()).find(|r| r["side"].as_str().is_some_and(|s| s.starts_with(prefix)))
    };
    let today = find("ours (today)").filter(|r| r["skipped"].is_null());
    let before = find("ours before").filter(|r| r["skipped"].is_null());
    let Some(today) = today else {
        return "Targets: ours (today) did not run.".into();
    };
    let f = |r: &Value, k: &str| r[k].as_f64();
    let mut parts = vec![format!(
        "launches the server never dispatched to: {} (target 0)",
        today["never_dispatched"]
    )];
    if let Some(before) = before {
        let ratio = f(today, "worker_seconds").zip(f(before, "worker_seconds"));
        let ratio = ratio.map_or("—".into(), |(a, b)| format!("{:.2}×", a / b));
        let p90 =
            |r: &Value| f(r, "staged_running_p90_s").map_or("—".into(), |x| format!("{x:.1} s"));
        parts.push(format!(
            "worker-seconds {ratio} of before #29's (target ≤ 0.6×), p90 staged → running {} against {} (target: no worse)",
            p90(today),
            p90(before)
        ));
    }
    let p90 = today["estimate_errors"]["worker_checkin"]["p90_le_s"].as_f64();
    parts.push(format!(
        "p90 estimate error for bundles that start on a worker launched for them: {} (target ≤ 30 s)",
        p90.map_or("—".into(), |x| format!("≤ {x:.0} s (histogram bucket)"))
    ));
    format!("Targets (issue #29, one run): {}.", parts.join("; "))
}

fn table_row(row: &Value) -> String {
    let side = row["side"].as_str().unwrap_or("?");
    if let Some(why) = row["skipped"].as_str() {
        return format!("| {side} | — | — | — | — | — | — | — | not run: {why} |");
    }
    let s = |v: &Value| v.as_f64().map_or("—".into(), |x| format!("{x:.1}"));
    let (checkin, others) = errors(&row["estimate_errors"]);
    format!(
        "| {side} | {} | {} | {} / {} | {} | {} | {checkin} | {others} | {} ({}/{} ready; observed {} s) |",
        row["launches"],
        s(&row["worker_seconds"]),
        s(&row["staged_running_p50_s"]),
        s(&row["staged_running_p90_s"]),
        row["never_dispatched"],
        row["on_private_worker"],
        row["outcome"].as_str().unwrap_or("?"),
        row["ready"],
        row["bundles"],
        s(&row["observed_s"]),
    )
}

/// (the `worker_checkin` estimates' error, the other kinds'), as table cells.
fn errors(errors: &Value) -> (String, String) {
    let Some(kinds) = errors.as_object() else {
        return ("—".into(), "—".into());
    };
    let cell = |v: &Value| {
        let p90 = v["p90_le_s"]
            .as_f64()
            .map_or("—".into(), |x| format!("{x:.0} s"));
        let mean = v["mean_s"].as_f64().unwrap_or(f64::NAN);
        let count = v["count"].as_f64().unwrap_or(0.0);
        format!("{count:.0}, {mean:.1} s, {p90}")
    };
    let checkin = kinds.get("worker_checkin").map_or("none".into(), cell);
    let others: Vec<String> = (kinds.iter())
        .filter(|(kind, _)| *kind != "worker_checkin")
        .map(|(kind, v)| format!("{kind}: {}", cell(v)))
        .collect();
    let others = if others.is_empty() {
        "none".into()
    } else {
        others.join("; ")
    };
    (checkin, others)
}
