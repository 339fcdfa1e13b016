//! `cargo xtask chaos [--only NAME]`: fault scenarios against real services.
//!
//! Runs the real `cl-worker-manager` (built with `--features full`) with the Slurm backend
//! against the real CodaLab server (`services up codalab`) and the real Slurm cluster
//! (`services up slurm`). CodaLab is reached through a fault-injecting proxy on 127.0.0.1
//! ([`crate::proxy`]); Slurm faults are a stopped `slurmctld`; tokens are revoked in MariaDB;
//! the manager itself is killed. Outcomes are checked from the outside: `squeue` (launches,
//! never more than `--max-workers`), the JSON log (what was skipped and why), the process
//! (crashes). Every scenario cancels its jobs afterwards, whatever happened. The scenarios of
//! `scenarios::ALL` run one after another, those of `scenarios::BESIDE` beside them (each lane
//! through a proxy of its own). Exits non-zero
//! when a scenario fails, a manager crashed or more than `--max-workers` jobs ran at once.

mod auth;
mod dispatch;
mod event;
mod flood;
mod gce;
mod harness;
mod held;
mod hostile;
mod moto;
mod scenarios;
mod users;

use crate::proxy::FaultProxy;
use crate::services::repo_root;
use anyhow::{Context, Result, bail};
use harness::{JobWatch, MAX_WORKERS, ManagerSpec};
use std::process::Command;
use std::time::Instant;

struct Row {
    name: &'static str,
    injected: &'static str,
    faults: u64,
    crashed: bool,
    beyond_max: usize,
    seconds: u64,
    result: Result<Vec<String>>,
}

pub fn run(args: &[String]) -> Result<()> {
    let only = match args {
        [] => None,
        [flag, name] if flag == "--only" => Some(name.as_str()),
        _ => bail!(
            "usage: cargo xtask chaos [--only NAME] (names: {})",
            names().join(" ")
        ),
    };
    if let Some(name) = only
        && !names().contains(&name)
    {
        bail!("unknown scenario `{name}` (known: {})", names().join(" "));
    }
    preflight()?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let nonce = format!("{}{}", std::process::id(), nanos % 1000);
    let dir = repo_root().join(format!("target/chaos/{nonce}"));
    std::fs::create_dir_all(&dir)?;
    harness::copy_binary(&dir)?;
    let tag = format!("chaos-{nonce}");
    let started = Instant::now();
    eprintln!("chaos: staging 3 bundles of {} tagged {tag}", harness::USER);
    let uuids = harness::stage_bundles(3, &tag)?;
    let run = Run {
        nonce: &nonce,
        dir: &dir,
        tag: &tag,
        staged: uuids.len(),
        only,
    };
    let upstream = "127.0.0.1:2900".parse()?;
    let (proxy, beside_proxy) = (FaultProxy::start(upstream)?, FaultProxy::start(upstream)?);
    let rows = std::thread::scope(|scope| {
        let beside = scope.spawn(|| run.lane(scenarios::BESIDE, &beside_proxy));
        let mut rows = run.lane(scenarios::ALL, &proxy);
        rows.extend(
            beside
                .join()
                .expect("a scenario beside the others panicked"),
        );
        rows
    });
    drop((proxy, beside_proxy));
    harness::remove_bundles(&uuids);
    report(&rows, started.elapsed().as_secs());
    let failed = rows
        .iter()
        .filter(|r| r.result.is_err() || r.crashed || r.beyond_max > 0)
        .count();
    if failed > 0 {
        bail!(
            "{failed} chaos scenario(s) failed; logs under {}",
            dir.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn names() -> Vec<&'static str> {
    scenarios::ALL
        .iter()
        .chain(scenarios::BESIDE)
        .map(|(name, _, _)| *name)
        .collect()
}

/// What the scenarios of one run share.
struct Run<'a> {
    nonce: &'a str,
    /// The run's directory (the binary; a directory per scenario).
    dir: &'a std::path::Path,
    /// The tag of the staged bundles.
    tag: &'a str,
    staged: usize,
    only: Option<&'a str>,
}

impl Run<'_> {
    /// Runs `scenarios` one after another through `proxy`.
    fn lane(&self, scenarios: &[scenarios::Scenario], proxy: &FaultProxy) -> Vec<Row> {
        let mut rows = Vec::new();
        for (name, injected, scenario) in scenarios {
            if self.only.is_some_and(|o| o != *name) {
                continue;
            }
            rows.push(self.scenario(name, injected, *scenario, proxy));
        }
        rows
    }

    fn scenario(
        &self,
        name: &'static str,
        injected: &'static str,
        scenario: fn(&scenarios::Setup) -> Result<scenarios::Findings>,
        proxy: &FaultProxy,
    ) -> Row {
        let index = names()
            .iter()
            .position(|n| *n == name)
            .unwrap_or(usize::MAX);
        let job_name = format!("chaos{}s{index}", self.nonce);
        let spec = ManagerSpec {
            server: proxy.url(),
            tag: format!("tags={}", self.tag),
            job_name: job_name.clone(),
            dir: self.dir.join(name),
            backend: harness::Backend::Slurm,
        };
        eprintln!("chaos: scenario {name}: {injected}");
        let watch = {
            let job_name = job_name.clone();
            JobWatch::start(move || harness::slurm_jobs(&job_name))
        };
        let start = Instant::now();
        let setup = scenarios::Setup {
            proxy,
            spec,
            staged: self.staged,
            watch: &watch,
        };
        let result = std::fs::create_dir_all(&setup.spec.dir)
            .map_err(anyhow::Error::from)
            .and_then(|()| scenario(&setup));
        proxy.set(crate::proxy::Fault::Pass);
        let cleanup = harness::cancel_jobs(&job_name);
        let orphans = orphan_processes(&setup.spec.dir);
        let beyond_max = watch.max_at_once().saturating_sub(MAX_WORKERS)
            + result.as_ref().map_or(0, |f| f.beyond_max);
        let crashed = crashed(&setup.spec.dir, &result);
        let result = result.and_then(|findings| {
            cleanup?;
            if !orphans.is_empty() {
                bail!("stand-in workers still running after scancel: {orphans:?}");
            }
            Ok(findings)
        });
        if let Err(error) = &result {
            eprintln!("chaos: scenario {name} FAILED: {error:#}");
        }
        Row {
            name,
            injected,
            faults: result.as_ref().map_or(0, |f| f.faults),
            crashed,
            beyond_max,
            seconds: start.elapsed().as_secs(),
            result: result.map(|f| f.notes),
        }
    }
}

/// Builds the binary and checks that CodaLab and Slurm answer.
fn preflight() -> Result<()> {
    crate::services::build_manager("chaos")?;
    let codalab = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-m", "5", "-w", "%{http_code}"])
        .arg("http://127.0.0.1:2900/rest/bundles?keywords=.count")
        .output()
        .context("running curl")?;
    if codalab.stdout != b"200" {
        bail!("CodaLab does not answer on 127.0.0.1:2900: run `cargo xtask services up codalab`");
    }
    dispatch::resume_left_paused()?;
    if harness::slurm_jobs("none").is_none() {
        bail!("squeue fails: run `cargo xtask services up slurm`");
    }
    Ok(())
}

/// A crash: the manager exited on its own, or panicked, in any log of the scenario.
fn crashed(dir: &std::path::Path, result: &Result<scenarios::Findings>) -> bool {
    let exited = result
        .as_ref()
        .is_err_and(|e| format!("{e:#}").contains("exited on its own"));
    let panicked = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|e| e == "log"))
        .any(|entry| {
            harness::events(&entry.path(), 0)
                .iter()
                .any(harness::is_panic)
        });
    exited || panicked
}

/// Processes still running the scenario's stand-in worker (bounded wait for Slurm to kill them).
fn orphan_processes(dir: &std::path::Path) -> Vec<u32> {
    let marker = dir.join("stand-in-worker.sh").display().to_string();
    let mut found = Vec::new();
    for _ in 0..40 {
        found = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
            })
            .collect();
        if found.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    found
}

fn report(rows: &[Row], seconds: u64) {
    println!("\n## chaos report ({seconds} s)\n");
    println!("| scenario | injected | faults | crashed | beyond max | s | result |");
    println!("|---|---|---:|---:|---:|---:|---|");
    for row in rows {
        let result = match &row.result {
            Ok(notes) => format!("ok: {}", notes.join("; ")),
            Err(error) => format!("FAILED: {}", format!("{error:#}").replace('\n', " ")),
        };
        let beside = scenarios::BESIDE
            .iter()
            .any(|(name, _, _)| *name == row.name);
        println!(
            "| {}{} | {} | {} | {} | {} | {} | {} |",
            row.name,
            if beside { " (beside the others)" } else { "" },
            row.injected,
            row.faults,
            u8::from(row.crashed),
            row.beyond_max,
            row.seconds,
            result
        );
    }
    let faults: u64 = rows.iter().map(|r| r.faults).sum();
    let crashes = rows.iter().filter(|r| r.crashed).count();
    let beyond: usize = rows.iter().map(|r| r.beyond_max).sum();
    let passed = rows.iter().filter(|r| r.result.is_ok()).count();
    println!(
        "\nscenarios run: {} (passed {passed}), faults injected: {faults}, crashes: {crashes}, launches beyond --max-workers {MAX_WORKERS}: {beyond}",
        rows.len()
    );
}
