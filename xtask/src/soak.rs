//! `cargo xtask soak [--minutes N]`: the real `cl-worker-manager` for N minutes (default 10)
//! at 1 s ticks against the fake CodaLab server (`soak-fake`, a process of its own) whose staged
//! bundles change every 2 s, with the `local` backend and a stand-in worker that exits after
//! 3 s, so bundles and jobs keep coming and going. Every 5 s the manager's resident memory
//! (`VmRSS`) and open file descriptors (`/proc/PID/fd`) are sampled. The manager runs with
//! `--listen` and its dashboard (`/`) is fetched every second, as a browser left open on it
//! would, so the flatness covers the dashboard's history and rendering too.
//!
//! Verdict "flat": the average RSS of the last window is within 10% of the average of the
//! second window, and the fewest open fds (between requests and children) are the same in both
//! windows, the most at most 2 above. A window is a minute, or a quarter of runs shorter than
//! 4 minutes; the first one is warm-up. Exits non-zero when not flat, or when the manager
//! exits, or when fewer than 5 workers a minute were started (the run did not churn).

use crate::services::repo_root;
use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const SAMPLE_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
struct Sample {
    seconds: u64,
    rss_kib: u64,
    fds: usize,
}

/// Kills and reaps a child when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let minutes: u64 = match args {
        [] => 10,
        [flag, n] if flag == "--minutes" => n
            .parse()
            .with_context(|| format!("--minutes `{n}` is not a number"))?,
        _ => bail!("usage: cargo xtask soak [--minutes N]"),
    };
    if minutes == 0 {
        bail!("--minutes must be at least 1");
    }
    build()?;
    let dir = repo_root().join(format!("target/soak/{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let total = Duration::from_secs(minutes * 60);
    let (fake, url) = start_fake(total + Duration::from_secs(60))?;
    let manager = start_manager(&url, &dir)?;
    eprintln!(
        "soak: manager pid {} against {url} for {minutes} min (log: {})",
        manager.0.id(),
        dir.join("manager.log").display()
    );
    let (samples, pages) = sample(manager, total, &dir)?;
    drop(fake);
    let verdict = report(&samples, minutes);
    println!("dashboard pages fetched during the soak: {pages}");
    if pages < minutes * 30 {
        bail!("only {pages} dashboard pages fetched in {minutes} min");
    }
    let launched = std::fs::read_to_string(dir.join("manager.log"))
        .unwrap_or_default()
        .matches("started a worker job")
        .count();
    println!("worker jobs started during the soak: {launched}");
    if launched < (minutes as usize) * 5 {
        bail!("only {launched} workers started in {minutes} min: the soak did not churn");
    }
    verdict?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn build() -> Result<()> {
    crate::services::build_manager("soak")?;
    let fake = [
        "build",
        "-p",
        "xtask",
        "--features",
        "soak",
        "--bin",
        "soak-fake",
    ];
    crate::services::cargo("soak", &fake)
}

fn start_fake(lifetime: Duration) -> Result<(Guard, String)> {
    let mut child = Command::new(crate::services::target_dir().join("debug/soak-fake"))
        .arg(lifetime.as_secs().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting soak-fake")?;
    let stdout = child.stdout.take().context("soak-fake stdout")?;
    let guard = Guard(child);
    let mut url = String::new();
    BufReader::new(stdout).read_line(&mut url)?;
    let url = url.trim().to_owned();
    if !url.starts_with("http://127.0.0.1:") {
        bail!("soak-fake printed `{url}` instead of its URL");
    }
    Ok((guard, url))
}

fn start_manager(url: &str, dir: &Path) -> Result<Guard> {
    let worker = dir.join("stand-in-worker.sh");
    std::fs::write(&worker, "#!/bin/sh\nsleep 3\n")?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755))?;
    }
    let log = std::fs::File::create(dir.join("manager.log"))?;
    // A copy: the shared target directory may be rebuilt while the soak runs.
    let binary = dir.join("cl-worker-manager");
    std::fs::copy(
        crate::services::target_dir().join("debug/cl-worker-manager"),
        &binary,
    )
    .context("copying target/debug/cl-worker-manager")?;
    let mut command = Command::new(binary);
    command
        .args(["--server", url, "--min-workers", "0", "--max-workers", "4"])
        .args(["--sleep-time", "1", "--min-seconds-between-workers", "0"])
        .args(["--listen", "127.0.0.1:0"])
        .args(["--worker-executable", &worker.display().to_string()])
        .args(["local", "--cpus", "1", "--memory-mb", "1024"])
        .args(["--state-dir", &dir.join("state").display().to_string()])
        .env("CODALAB_USERNAME", "alice")
        .env("CODALAB_PASSWORD", "alicepw")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    for (key, _) in std::env::vars() {
        if key.starts_with("CODALAB_WM_") {
            command.env_remove(key);
        }
    }
    Ok(Guard(
        command.spawn().context("starting cl-worker-manager")?,
    ))
}

/// Samples the manager every [`SAMPLE_EVERY`] and fetches its dashboard every second, for
/// `total`; returns the samples and the number of pages fetched.
fn sample(mut manager: Guard, total: Duration, dir: &Path) -> Result<(Vec<Sample>, u64)> {
    let pid = manager.0.id();
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut next = Duration::from_secs(1);
    let (mut pages, mut next_page) = (0, Duration::ZERO);
    let mut dashboard = None;
    while start.elapsed() < total {
        if let Some(status) = manager.0.try_wait()? {
            bail!(
                "the manager exited during the soak ({status}); see {}",
                dir.join("manager.log").display()
            );
        }
        if dashboard.is_none() {
            dashboard = listen_addr(&dir.join("manager.log"));
        }
        if let Some(addr) = &dashboard
            && start.elapsed() >= next_page
        {
            fetch_dashboard(addr)?;
            pages += 1;
            next_page = start.elapsed() + Duration::from_secs(1);
        }
        if start.elapsed() >= next {
            let sample = Sample {
                seconds: start.elapsed().as_secs(),
                rss_kib: rss_kib(pid)?,
                fds: std::fs::read_dir(format!("/proc/{pid}/fd"))?.count(),
            };
            if sample.seconds % 60 < 5 {
                eprintln!(
                    "soak: {:>4} s  rss {:>6} KiB  fds {}  dashboard pages {pages}",
                    sample.seconds, sample.rss_kib, sample.fds
                );
            }
            samples.push(sample);
            next += SAMPLE_EVERY;
        }
        thread::sleep(Duration::from_millis(200));
    }
    Ok((samples, pages))
}

/// The `--listen` address from the manager's "serving /metrics … addr=…" log line, once logged.
fn listen_addr(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let rest = text.split("serving /metrics").nth(1)?;
    let addr = rest.split("addr=").nth(1)?.split_whitespace().next()?;
    Some(addr.to_owned())
}

/// Fetches the dashboard (`GET /`, HTTP/1.0, 10 s timeouts); fails unless it is a 200 page
/// with the pool table.
fn fetch_dashboard(addr: &str) -> Result<()> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)
        .with_context(|| format!("connecting to the dashboard at {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET / HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .with_context(|| format!("reading the dashboard at {addr}"))?;
    if !reply.starts_with("HTTP/1.0 200") || !reply.contains("<table id=\"pools\">") {
        let head: String = reply.chars().take(200).collect();
        bail!("the dashboard at http://{addr}/ answered: {head}");
    }
    Ok(())
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/PID/status")
}

fn window(samples: &[Sample], from: u64, to: u64) -> Vec<Sample> {
    samples
        .iter()
        .filter(|s| s.seconds >= from && s.seconds < to)
        .copied()
        .collect()
}

fn report(samples: &[Sample], minutes: u64) -> Result<()> {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        bail!("no samples");
    };
    // A minute, or a quarter of a short run: the first window is warm-up.
    let width = (minutes * 60 / 4).min(60);
    let end = minutes * 60;
    let second = window(samples, width, 2 * width);
    let final_window = window(samples, end - width, end + 1);
    let average = |w: &[Sample]| w.iter().map(|s| s.rss_kib).sum::<u64>() / w.len().max(1) as u64;
    let fds = |w: &[Sample]| {
        (
            w.iter().map(|s| s.fds).min().unwrap_or(0),
            w.iter().map(|s| s.fds).max().unwrap_or(0),
        )
    };
    let max_rss = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    let max_fds = samples.iter().map(|s| s.fds).max().unwrap_or(0);
    let (rss_second, rss_last) = (average(&second), average(&final_window));
    let (fds_second, fds_last) = (fds(&second), fds(&final_window));
    println!(
        "\n## soak report ({minutes} min, {} samples every 5 s)\n",
        samples.len()
    );
    println!("| | first | last | max | window 2 | last window |");
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "| RSS KiB | {} | {} | {max_rss} | avg {rss_second} | avg {rss_last} |",
        first.rss_kib, last.rss_kib
    );
    println!(
        "| open fds | {} | {} | {max_fds} | {}..{} | {}..{} |",
        first.fds, last.fds, fds_second.0, fds_second.1, fds_last.0, fds_last.1
    );
    let rss_flat = rss_last as f64 <= rss_second as f64 * 1.10;
    let fds_flat = fds_last.0 == fds_second.0 && fds_last.1 <= fds_second.1 + 2;
    println!(
        "\nverdict: RSS {} (last-window average {:+.1}% vs window 2), fds {}",
        if rss_flat { "flat" } else { "GROWING" },
        (rss_last as f64 / rss_second.max(1) as f64 - 1.0) * 100.0,
        if fds_flat { "flat" } else { "GROWING" }
    );
    if !rss_flat || !fds_flat {
        bail!("the manager's memory or open files grew during the soak");
    }
    Ok(())
}
