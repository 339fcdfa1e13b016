//! The dashboard (`/` of `--listen`) in a real browser: headless Chromium (Debian's `chromium`)
//! loads the page of the real `cl-worker-manager` binary running against the REAL CodaLab 1.7.5
//! server (`cargo xtask services up codalab`; bundles staged by real `cl run`) and the REAL
//! Slurm cluster (`cargo xtask services up slurm`: partitions `cpu` and `gpu`). The test checks
//! the DOM Chromium built (each pool's row, its job counts equal to what `squeue` shows, the
//! reasons of the waiting bundles and of the last decisions) and saves a screenshot.
//!
//! Two pools, `cpu` (max 2) and `gpu` (max 1); staged: three 1-CPU bundles, one GPU bundle and
//! one asking for 64 CPUs that no pool fits. Workers are a stand-in that waits (the real
//! `cl-worker` needs docker), so every job stays RUNNING and starting. The bundles carry a
//! unique tag the manager searches and the jobs a unique name, so runs never see each other's.
//! Locally a missing service or browser skips the test; under `CI=true` it fails.

use crate::support;
use support::manager::Manager;
use support::{SERVER, codalab_running, slurm_running, stage, unique};

use codalab_wm_core::testing::require_service;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The pools: `(name, partition, gpus, max)`.
const POOLS: [(&str, &str, u32, u32); 2] = [("cpu", "cpu", 0, 2), ("gpu", "gpu", 1, 1)];

/// Whether headless Chromium can be started.
fn chromium_available() -> bool {
    Command::new("chromium")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether the test can use Chromium; like a missing service, a missing browser fails the
/// test under `CI=true` and skips it elsewhere.
fn browser_available() -> bool {
    if chromium_available() {
        return true;
    }
    let hint = "no `chromium` on PATH: install Debian's with `apt-get install chromium`";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{hint} (CI=true: tests that need it fail instead of skipping)");
    }
    eprintln!("skipping: {hint}");
    false
}

/// Runs headless Chromium with `args` on `url` (bounded: 90 s) and returns its stdout.
fn chromium(profile: &Path, args: &[&str], url: &str) -> String {
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium {args:?} {url} did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "chromium {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `(RUNNING, PENDING)` jobs of each pool, by job name `<user>-<prefix>_<pool>-…`.
fn squeue(prefix: &str) -> Vec<(usize, usize)> {
    let output = Command::new("squeue")
        .args(["-h", "-o", "%j|%T"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    POOLS
        .iter()
        .map(|(pool, ..)| {
            let mine = format!("{prefix}_{pool}-");
            let states: Vec<&str> = text
                .lines()
                .filter_map(|l| l.split_once('|'))
                .filter(|(name, _)| name.contains(&mine))
                .map(|(_, state)| state)
                .collect();
            let count = |s: &str| states.iter().filter(|t| **t == s).count();
            (count("RUNNING"), count("PENDING"))
        })
        .collect()
}

/// Cancels the test's jobs, whatever happens.
struct Cancel(String);

impl Drop for Cancel {
    fn drop(&mut self) {
        let output = Command::new("squeue").args(["-h", "-o", "%i|%j"]).output();
        let text = output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        for line in text.unwrap_or_default().lines() {
            if let Some((id, _)) = line.split_once('|').filter(|(_, n)| n.contains(&self.0)) {
                let _ = Command::new("scancel").arg(id).status();
            }
        }
    }
}

/// The config: the real server, one tick a second, `--listen` on a port it picks, two pools.
fn config(dir: &Path, tag: &str, prefix: &str) -> PathBuf {
    let worker = dir.join("cl-worker-stand-in.sh");
    std::fs::write(&worker, "#!/bin/sh\nexec sleep 600\n").unwrap();
    std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut text = format!(
        "server = \"{SERVER}\"\nsleep_time = 1\nlisten = \"127.0.0.1:0\"\nsearch = [\"tags={tag}\"]\n\
         [worker]\nexecutable = \"{}\"\n",
        worker.display()
    );
    for (cost, (name, partition, gpus, max)) in POOLS.iter().enumerate() {
        text += &format!(
            "[[pools]]\nname = \"{name}\"\nbackend = \"slurm-batch\"\nmax = {max}\ncost = {}\n\
             min_seconds_between_workers = 0\n[pools.slurm_batch]\njob_name = \"{prefix}_{name}\"\n\
             partition = \"{partition}\"\ncpus = 1\ngpus = {gpus}\nmemory_mb = 256\ntime = \"10\"\n\
             slurm_work_dir = \"{}\"\n",
            cost + 1,
            dir.join("slurm").display()
        );
    }
    let path = dir.join("wm.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `/status` as JSON, if it answers (one HTTP/1.0 request, bounded by 10 s timeouts).
fn status(base: &str) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let addr = base.strip_prefix("http://")?;
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET /status HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then_some(())?;
    serde_json::from_str(body).ok()
}

/// Whether `/status` shows every pool at its max with all its jobs running, as `squeue` does.
fn settled(status: &serde_json::Value, jobs: &[(usize, usize)]) -> bool {
    POOLS
        .iter()
        .zip(jobs)
        .all(|((name, _, _, max), (running, pending))| {
            let pool = status["pools"]
                .as_array()
                .and_then(|pools| pools.iter().find(|p| p["name"] == *name));
            pool.is_some_and(|p| {
                p["active"] == *running && p["pending"] == *pending && *running == *max as usize
            }) && *pending == 0
        })
}

/// The text of the first element after `start` (up to the next `<`).
fn text_after<'a>(html: &'a str, start: &str) -> &'a str {
    let from = html
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in the DOM"));
    let rest = &html[from + start.len()..];
    let rest = &rest[rest.find('>').unwrap() + 1..];
    &rest[..rest.find('<').unwrap()]
}

#[test]
fn chromium_shows_the_pools_as_squeue_and_the_reasons_as_status() {
    let _turn = support::turn(module_path!());
    if !require_service("codalab", codalab_running())
        || !require_service("slurm", slurm_running())
        || !browser_available()
    {
        return;
    }
    let tag = unique("dashboard-");
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    let prefix = unique("dash");
    let _cancel = Cancel(prefix.clone());
    let tags = format!("--tags={tag}");
    stage(
        3,
        &["--request-cpus", "1", "--request-memory", "256m", &tags],
    );
    let gpu = ["--request-gpus", "1", "--request-memory", "256m", &tags];
    stage(1, &gpu);
    stage(
        1,
        &["--request-cpus", "64", "--request-memory", "256m", &tags],
    );
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &tag, &prefix);
    let args = ["--config".to_owned(), config.display().to_string()];
    let mut manager = Manager::start(&args, ("alice", "alicepw"), &[]);
    manager.wait_until("the --listen line", Duration::from_secs(60), |m| {
        m.listen_address().is_some()
    });
    let base = manager.listen_address().unwrap();
    // Bounded (180 s): until /status and squeue agree on every pool at its max, all running.
    manager.wait_until("every pool at max", Duration::from_secs(180), |_| {
        status(&base).is_some_and(|s| settled(&s, &squeue(&format!("{user}-{prefix}"))))
    });
    let snapshot = status(&base).unwrap();
    let profile = dir.path().join("chromium");
    let dom = chromium(&profile, &["--dump-dom"], &format!("{base}/"));
    let jobs = squeue(&format!("{user}-{prefix}"));
    check_pools(&dom, &jobs);
    check_reasons(&dom, &snapshot);
    let png = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    let _ = std::fs::remove_file(&png);
    let shot = format!("--screenshot={}", png.display());
    chromium(
        &profile,
        &[&shot, "--window-size=1280,1600", "--hide-scrollbars"],
        &format!("{base}/"),
    );
    let bytes = std::fs::read(&png).expect("chromium saved the screenshot");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "{}",
        png.display()
    );
    eprintln!("screenshot of the dashboard: {}", png.display());
    // The book's picture of the page (docs/src/images/dashboard.png) is this one, taken
    // again with `UPDATE_GOLDEN=1` (its times differ at each run: it is not compared).
    // Likewise its `status` (docs/src/images/status.txt), the view of the same snapshot.
    let view = support::manager::command(&["status", "--url", &base])
        .output()
        .unwrap();
    assert!(
        view.status.success(),
        "{}",
        String::from_utf8_lossy(&view.stderr)
    );
    let view = String::from_utf8(view.stdout).unwrap();
    assert!(view.contains("Pools"), "{view}");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        let images = support::repo().join("docs/src/images");
        std::fs::copy(&png, images.join("dashboard.png")).unwrap();
        std::fs::write(images.join("status.txt"), &view).unwrap();
    }
}

/// Each pool's row shows `squeue`'s RUNNING jobs as active and PENDING ones as pending.
fn check_pools(dom: &str, jobs: &[(usize, usize)]) {
    for ((name, _, gpus, max), (running, pending)) in POOLS.iter().zip(jobs) {
        let row = format!("<tr data-pool=\"{name}\">");
        let row = &dom[dom
            .find(&row)
            .unwrap_or_else(|| panic!("no {row} in\n{dom}"))..];
        let field = |f: &str| text_after(row, &format!("data-field=\"{f}\""));
        assert_eq!(field("active"), running.to_string(), "{name}: {row}");
        assert_eq!(field("pending"), pending.to_string(), "{name}: {row}");
        assert_eq!(field("max"), max.to_string(), "{name}");
        let shape = format!("slurm-batch · target · 1 cpus, {gpus} gpus, 256 MiB");
        assert_eq!(field("backend"), shape, "{name}");
        // The stand-in never checks in: every running job is a starting worker.
        assert_eq!(field("starting"), running.to_string(), "{name}: {row}");
    }
}

/// The waiting bundles' reasons and the pools' decision reasons of `/status` are on the page.
fn check_reasons(dom: &str, status: &serde_json::Value) {
    let unmet = status["unmet"].as_array().unwrap();
    assert!(
        unmet.iter().any(|u| u["reason"] == "no_fitting_pool"),
        "the 64-CPU bundle: {unmet:?}"
    );
    for u in unmet {
        let reason = u["reason"].as_str().unwrap();
        let row = format!("<tr data-reason=\"{reason}\">");
        assert!(dom.contains(&row), "{row} missing:\n{dom}");
    }
    assert!(
        dom.contains("<tr data-bundle=") && dom.contains("data-reason=\"no_fitting_pool\""),
        "the unserved bundle is listed:\n{dom}"
    );
    let decisions = &dom[dom.find("id=\"decisions\"").expect("a decisions table")..];
    for pool in status["pools"].as_array().unwrap() {
        let name = pool["name"].as_str().unwrap();
        let row = format!("<tr data-pool=\"{name}\">");
        let row = &decisions[decisions.find(&row).unwrap_or_else(|| panic!("{row}"))..];
        let row = &row[..row.find("</tr>").unwrap()];
        for reason in pool["last_decision"]["reasons"].as_array().unwrap() {
            let code = reason["reason"].as_str().unwrap();
            assert!(
                row.contains(&format!("<code>{code}</code>")),
                "{code}: {row}"
            );
        }
    }
}
