//! `gce-throttled`: the real manager with the `gce` backend against the in-repo fake Compute
//! Engine API (`bench-harness gce-fake`, in its own process; no Compute Engine emulator exists,
//! the fake checks every request against Google's discovery document), reached through a
//! fault proxy that answers 429 to the Compute API calls (the token passes), then 503 to
//! everything (the metadata token included), then passes. Checked from the outside: the fake's instances (never more than `--max-workers`,
//! none while the API fails, `--max-workers` once it recovers) and the JSON log (ticks
//! skipped, not crashed).

use super::harness::{Backend, JobWatch, MAX_WORKERS, ManagerSpec, is_skipped_tick};
use super::scenarios::{Findings, Setup};
use crate::proxy::{Fault, FaultProxy};
use crate::services::{repo_root, target_dir};
use anyhow::{Context, Result, bail, ensure};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The project the manager uses: the one `bench-harness gce-fake` serves.
pub const PROJECT: &str = "wmbench";

/// The fake Compute Engine API in its own process; stopped when dropped.
struct FakeProcess {
    child: Child,
    url: String,
}

impl FakeProcess {
    fn start() -> Result<Self> {
        let status = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "xtask",
                "--features",
                "bench",
                "--bin",
                "bench-harness",
            ])
            .current_dir(repo_root())
            .status()
            .context("building bench-harness")?;
        ensure!(
            status.success(),
            "cargo build --features bench --bin bench-harness failed"
        );
        let mut child = Command::new(target_dir().join("debug/bench-harness"))
            .args(["gce-fake", "--instances", "0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting bench-harness gce-fake")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut url = String::new();
        BufReader::new(stdout).read_line(&mut url)?;
        let url = url.trim().to_owned();
        if !url.starts_with("http://127.0.0.1:") {
            let _ = child.kill();
            bail!("gce-fake announced `{url}`");
        }
        Ok(Self { child, url })
    }
}

impl Drop for FakeProcess {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn curl(args: &[&str]) -> Option<String> {
    let output = Command::new("curl")
        .args(["-s", "-f", "-m", "5"])
        .args(args)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The fake's instances labelled with manager id `manager`, as `(name, name)`.
fn instances(url: &str, manager: &str) -> Option<Vec<(String, String)>> {
    let token_url = format!("{url}/computeMetadata/v1/instance/service-accounts/default/token");
    let token = curl(&["-H", "Metadata-Flavor: Google", &token_url])?;
    let token = token
        .split("\"access_token\":\"")
        .nth(1)?
        .split('"')
        .next()?;
    let filter = format!("filter=labels.codalab-wm-manager = \"{manager}\"");
    let list_url = format!("{url}/compute/v1/projects/{PROJECT}/aggregated/instances");
    let auth = format!("Authorization: Bearer {token}");
    let listing = curl(&["-G", "--data-urlencode", &filter, "-H", &auth, &list_url])?;
    let names = listing.split("\"name\":\"").skip(1);
    let names = names.filter_map(|rest| rest.split('"').next());
    Some(
        names
            .filter(|n| n.starts_with("cl-worker-"))
            .map(|n| (n.to_owned(), n.to_owned()))
            .collect(),
    )
}

fn json_error(status: u16, reason: &str) -> Fault {
    let body = format!(
        r#"{{"error":{{"code":{status},"message":"chaos","errors":[{{"reason":"{reason}"}}]}}}}"#
    );
    Fault::Reply {
        status,
        content_type: "application/json",
        body,
    }
}

pub fn gce_throttled(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    let fake = FakeProcess::start()?;
    let upstream = fake.url.trim_start_matches("http://").parse()?;
    let proxy = FaultProxy::start(upstream)?;
    let spec = ManagerSpec {
        backend: Backend::Gce { api: proxy.url() },
        ..setup.spec.clone()
    };
    let manager_id = spec.job_name.clone();
    let watch = {
        let url = fake.url.clone();
        JobWatch::start(move || instances(&url, &manager_id))
    };
    proxy.set_scoped(json_error(429, "rateLimitExceeded"), "/compute/v1/");
    let mut manager = spec.spawn("gce-throttled")?;
    for (fault, next) in [
        ("429", Some(json_error(503, "backendError"))),
        ("503", None),
    ] {
        let cursor = manager.cursor();
        let skipped = manager.wait_for_event(
            cursor,
            Duration::from_secs(30),
            &format!("tick skipped (Compute API {fault})"),
            is_skipped_tick,
        )?;
        ensure!(manager.alive()?, "manager gone");
        ensure!(
            watch.ids().is_empty(),
            "an instance was inserted through a failing API"
        );
        let error = skipped
            .get("error")
            .unwrap_or_default()
            .chars()
            .take(120)
            .collect::<String>();
        findings.notes.push(format!("{fault}: `{error}`"));
        if let Some(next) = next {
            proxy.set(next);
        }
    }
    proxy.set(Fault::Pass);
    let start = Instant::now();
    while instances(&fake.url, &spec.job_name).is_none_or(|i| i.len() < MAX_WORKERS) {
        ensure!(
            start.elapsed() < Duration::from_secs(60),
            "no {MAX_WORKERS} instances after the faults"
        );
        ensure!(manager.alive()?, "manager gone");
        thread::sleep(Duration::from_millis(250));
    }
    thread::sleep(Duration::from_secs(3));
    findings.notes.push(format!(
        "recovered: {} instances in all, at most {} at once",
        watch.ids().len(),
        watch.max_at_once()
    ));
    manager.stop()?;
    findings.faults = proxy.faulted();
    findings.beyond_max = watch.max_at_once().saturating_sub(MAX_WORKERS);
    Ok(findings)
}
