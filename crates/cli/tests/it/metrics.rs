//! `--listen`: the real `cl-worker-manager` binary against the in-process fake CodaLab server
//! (`codalab_wm_fake_codalab`) on the `local` backend, with a worker stand-in that waits. The
//! tests scrape `/metrics`, `/healthz` and `/status` and check them against what happened
//! (workers started, their records on disk, the outage of the server). Every wait polls an
//! endpoint, bounded; the manager listens on a port of 127.0.0.1 it picks itself (`:0`) and
//! logs.

use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

/// A worker stand-in that waits (bounded), so that its local job stays active.
fn stand_in(dir: &Path) -> PathBuf {
    let path = dir.join("cl-worker-stand-in.sh");
    std::fs::write(&path, "#!/bin/sh\nexec sleep 300\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Worker records (`*.json`) in a local state directory.
fn records(state: &Path) -> Vec<serde_json::Value> {
    std::fs::read_dir(state)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect()
}

/// A running manager; its stderr is collected, its workers are stopped when it is dropped.
struct Manager {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    state: PathBuf,
}

impl Manager {
    fn start(args: &[String], state: &Path) -> Self {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .env("CODALAB_USERNAME", "alice")
            .env("CODALAB_PASSWORD", "alicepw")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, _) in std::env::vars() {
            if key.starts_with("CODALAB_WM_") {
                command.env_remove(key);
            }
        }
        let mut child = command.spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            lines,
            state: state.to_owned(),
        }
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// `http://<addr>` from the "serving /metrics" log line (bounded: 30 s).
    async fn base_url(&mut self) -> String {
        for _ in 0..300 {
            let found = self.lines.lock().unwrap().iter().find_map(|l| {
                let rest = l.split("serving /metrics").nth(1)?;
                let addr = rest.split("addr=").nth(1)?.split_whitespace().next()?;
                Some(format!("http://{addr}"))
            });
            if let Some(url) = found {
                return url;
            }
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "manager exited:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the manager never said where it listens:\n{}", self.log());
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for record in records(&self.state) {
            if let Some(pid) = record["pid"].as_u64() {
                let _ = Command::new("kill")
                    .args(["-TERM", "--", &format!("-{pid}")])
                    .status();
            }
        }
    }
}

async fn get(url: &str) -> (u16, String) {
    match reqwest::get(url).await {
        Ok(reply) => {
            let code = reply.status().as_u16();
            (code, reply.text().await.unwrap_or_default())
        }
        Err(error) => (0, error.to_string()),
    }
}

/// Polls `url` (bounded: 60 s) until `done(code, body)`; returns the last body.
async fn poll(
    url: &str,
    what: &str,
    manager: &Manager,
    done: impl Fn(u16, &str) -> bool,
) -> String {
    let mut last = (0, String::new());
    for _ in 0..600 {
        last = get(url).await;
        if done(last.0, &last.1) {
            return last.1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "timed out waiting for {what} at {url}; last answer {} {}\nmanager log:\n{}",
        last.0,
        last.1,
        manager.log()
    );
}

/// The value of the sample `name` (with its labels, as printed) in a scrape.
fn sample(scrape: &str, name: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

fn args(server: &str, worker: &Path, state: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--server",
        server,
        "--listen",
        "127.0.0.1:0",
        "--min-workers",
        "0",
        "--min-seconds-between-workers",
        "0",
        "--sleep-time",
        "1",
        "--worker-executable",
        worker.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(
        ["local", "--cpus", "2", "--memory-mb", "4096", "--state-dir"]
            .iter()
            .map(|s| s.to_string()),
    );
    args.push(state.to_str().unwrap().to_owned());
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_the_launches_and_jobs_that_happened() {
    let server = FakeCodaLab::start().await.unwrap();
    // Five 1-CPU bundles fill three 2-CPU workers: more than --max-workers 2.
    server.set_bundles((1..=5).map(|n| FakeBundle::new("alice", n)).collect());
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let state = dir.path().join("state");
    let args = args(
        &server.url(),
        &worker,
        &state,
        &[
            "--max-workers",
            "2",
            "--launch-mode",
            "target",
            "--max-launches-per-tick",
            "5",
        ],
    );
    let mut manager = Manager::start(&args, &state);
    let base = manager.base_url().await;
    let metrics = format!("{base}/metrics");
    let active = r#"codalab_wm_worker_jobs{pool="local",state="active"}"#;
    let scrape = poll(&metrics, "two active workers", &manager, |code, body| {
        code == 200 && sample(body, active) == Some(2.0)
    })
    .await;

    let started = records(&state).len() as f64;
    assert_eq!(started, 2.0, "--max-workers 2 workers on disk");
    assert_eq!(
        sample(
            &scrape,
            r#"codalab_wm_launches_total{pool="local",result="started"}"#
        ),
        Some(started),
        "{scrape}"
    );
    assert_eq!(
        sample(&scrape, "codalab_wm_staged_bundles"),
        Some(5.0),
        "{scrape}"
    );
    assert_eq!(
        sample(
            &scrape,
            r#"codalab_wm_worker_jobs{pool="local",state="pending"}"#
        ),
        Some(0.0),
        "{scrape}"
    );
    assert_eq!(
        sample(
            &scrape,
            r#"codalab_wm_backend_request_duration_seconds_count{pool="local",op="start_worker_job"}"#
        ),
        Some(started),
        "every launch is timed: {scrape}"
    );
    assert!(
        sample(
            &scrape,
            r#"codalab_wm_backend_request_duration_seconds_count{pool="local",op="get_worker_jobs"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{scrape}"
    );
    assert!(
        sample(&scrape, "codalab_wm_tick_duration_seconds_count").is_some_and(|n| n >= 1.0),
        "{scrape}"
    );
    assert!(
        sample(
            &scrape,
            r#"codalab_wm_decisions_total{pool="local",reason="want_workers"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{scrape}"
    );
    assert!(
        scrape.contains("# TYPE codalab_wm_tick_duration_seconds histogram"),
        "{scrape}"
    );
    assert!(scrape.ends_with("# EOF\n"), "OpenMetrics text: {scrape}");

    // The bundles keep the pool at max: the decision says so, and no more workers start.
    let scrape = poll(&metrics, "a max_reached decision", &manager, |_, body| {
        sample(
            body,
            r#"codalab_wm_decisions_total{pool="local",reason="max_reached"}"#,
        )
        .is_some_and(|n| n >= 1.0)
    })
    .await;
    assert_eq!(
        sample(
            &scrape,
            r#"codalab_wm_launches_total{pool="local",result="started"}"#
        ),
        Some(2.0),
        "{scrape}"
    );
    assert_eq!(records(&state).len(), 2);

    let (code, body) = get(&format!("{base}/status")).await;
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["pools"][0]["name"], "local");
    assert_eq!(status["pools"][0]["active"], 2);
    assert_eq!(status["staged"], 5);
    let (code, body) = get(&format!("{base}/healthz")).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.starts_with("ok: last successful tick "), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_turns_503_while_the_server_is_down_and_200_when_it_is_back() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(dir.path());
    let state = dir.path().join("state");
    let args = args(&server.url(), &worker, &state, &["--max-workers", "1"]);
    let mut manager = Manager::start(&args, &state);
    let base = manager.base_url().await;
    let health = format!("{base}/healthz");
    poll(&health, "healthy", &manager, |code, _| code == 200).await;

    server.stop().await;
    let body = poll(&health, "unhealthy", &manager, |code, _| code == 503).await;
    assert!(body.starts_with("last successful tick "), "{body}");
    assert!(
        body.contains(&format!(
            "(limit 3 s): codalab server {} unreachable during",
            server.url()
        )),
        "{body}"
    );
    let scrape = get(&format!("{base}/metrics")).await.1;
    assert!(
        sample(
            &scrape,
            r#"codalab_wm_server_errors_total{kind="unreachable"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{scrape}"
    );

    server.restart().await.unwrap();
    let body = poll(&health, "healthy again", &manager, |code, _| code == 200).await;
    assert!(body.contains("(limit 3 s)"), "{body}");
}
