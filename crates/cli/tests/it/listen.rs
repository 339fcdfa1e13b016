//! `--listen` under a local user's abuse (review 2026-11-24 §2.1, §2.2): the real
//! `cl-worker-manager` binary against the in-process fake CodaLab server
//! (`codalab_wm_fake_codalab`) on the `local` backend, started under a soft limit of 128 open
//! files (a small stand-in for the 1024 of a systemd unit or a login shell), listening on
//! 127.0.0.1. Every wait is for an event (a log line, a connection closed by the manager, an
//! answer), bounded so that a hang fails instead of blocking.

use codalab_wm_fake_codalab::FakeCodaLab;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::support;
use support::flood::{Flood, answered, probe};
use support::manager::{BIN, Manager, record_dir};

/// Soft limit of open files the manager is started with.
const SOFT_LIMIT: usize = 128;

/// Idle connections opened: more than [`SOFT_LIMIT`], fewer than the manager serves at once
/// (64) and its accept queue holds (128) together, so that each `connect` returns at once.
const IDLE: usize = 160;

/// A failure, not a measurement.
const HANG: Duration = Duration::from_secs(120);

/// The manager under `ulimit -Sn` [`SOFT_LIMIT`], its stderr collected.
struct Limited(Manager);

impl Limited {
    fn start(server: &str, state: &str) -> Self {
        let args = [
            "--server",
            server,
            "--listen",
            "127.0.0.1:0",
            "--sleep-time",
            "1",
            "--min-workers",
            "0",
            "local",
            "--state-dir",
            state,
        ];
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!(r#"ulimit -Sn {SOFT_LIMIT} && exec "$0" "$@""#))
            .arg(BIN)
            .args(args)
            .env("CODALAB_USERNAME", "alice")
            .env("CODALAB_PASSWORD", "alicepw")
            .env("NO_COLOR", "1")
            .env("CODALAB_WM_RECORD_DIR", record_dir());
        Self(Manager::spawn(command))
    }

    fn log(&self) -> String {
        self.0.log()
    }

    fn count(&self, needle: &str) -> usize {
        self.0.count(needle)
    }

    /// Waits (polling its log, bounded) until `done`.
    async fn wait_for(&mut self, what: &str, done: impl Fn(&Self) -> bool) {
        for _ in 0..1200 {
            if done(self) {
                return;
            }
            assert!(!self.0.exited(), "manager exited:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("timed out waiting for {what}:\n{}", self.log());
    }

    /// Where it listens, from its "serving /metrics" line.
    async fn addr(&mut self) -> SocketAddr {
        self.wait_for("the --listen address", |m| m.count("serving /metrics") > 0)
            .await;
        let base = self.0.listen_address().unwrap();
        base.trim_start_matches("http://").parse().unwrap()
    }

    /// The soft and hard limits of open files of the running manager.
    fn open_files_limits(&self) -> String {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.0.id()));
        let limits = limits.unwrap();
        let line = limits.lines().find(|l| l.starts_with("Max open files"));
        line.unwrap().to_owned()
    }
}

/// A GET of `path` naming `host`, on a new connection: the whole answer.
async fn get(addr: SocketAddr, path: &str, host: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    tokio::time::timeout(HANG, read).await.unwrap().unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_neither_starve_the_ticks_nor_stay_open() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut manager = Limited::start(&server.url(), state.to_str().unwrap());
    let addr = manager.addr().await;
    // Started under a soft limit of 128, it raised it to the hard limit.
    let limits = manager.open_files_limits();
    let numbers: Vec<&str> = limits.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers[0], numbers[1], "{limits}");

    // A local user opens more idle connections than the soft limit was, and sends nothing.
    let (closed, mut closures) = mpsc::unbounded_channel();
    let mut holders = Vec::new();
    for _ in 0..IDLE {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let closed = closed.clone();
        let (give_up, mut told) = tokio::sync::oneshot::channel::<()>();
        holders.push(give_up);
        tokio::spawn(async move {
            let mut buffer = [0_u8; 64];
            tokio::select! {
                // The manager closed it (an end or a reset).
                _ = stream.read(&mut buffer) => { let _ = closed.send(()); }
                // The test lets it go.
                _ = &mut told => {}
            }
        });
    }
    // The manager's ticks go on: two status lines after the connections were opened, and no
    // descriptor ran out.
    let ticks = manager.count(" worker jobs (min=");
    manager
        .wait_for("two more ticks", |m| {
            m.count(" worker jobs (min=") >= ticks + 2
        })
        .await;
    // The manager closes idle connections by itself (after its header timeout).
    tokio::time::timeout(HANG, closures.recv())
        .await
        .expect("the manager never closed an idle connection")
        .unwrap();
    // Once the idle clients give up, /healthz answers (200 after a good tick).
    drop(holders);
    let answer = get(addr, "/healthz", &addr.to_string()).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    let log = manager.log();
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(!log.contains("os error 24"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_other_than_loopback_gets_421_on_a_loopback_listener() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut manager = Limited::start(&server.url(), state.to_str().unwrap());
    let addr = manager.addr().await;
    let port = addr.port();
    let refused = get(addr, "/status", &format!("rebind.attacker.example:{port}")).await;
    assert!(refused.starts_with("HTTP/1.1 421 "), "{refused}");
    assert!(refused.contains("--listen-hosts"), "{refused}");
    for host in [format!("localhost:{port}"), addr.to_string()] {
        let answer = get(addr, "/status", &host).await;
        assert!(
            answer.starts_with("HTTP/1.1 200 OK\r\n"),
            "{host}: {answer}"
        );
    }
}

/// Review 2026-11-27 §13: one client holding every `--listen` connection slot with idle
/// connections, reopened as they are cut, kept `/livez` from answering (kubelet then restarts
/// the manager). Now an idle connection gives way to a new one, and one address holds only
/// part of the slots: `/livez` answers during the flood, and the ticks go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holding_every_slot_does_not_starve_livez() {
    let server = FakeCodaLab::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut manager = Limited::start(&server.url(), state.to_str().unwrap());
    let addr = manager.addr().await;
    let (flood, opened) = Flood::start(addr, 1000).await;
    assert!(opened > 64, "only {opened} connections opened");
    // Before the fix the answer came only once the server had cut idle connections after
    // their 10 s header timeout, twice over; kubelet gives up after 1 s.
    let answers = probe(addr, "/livez").await;
    assert!(answered(&answers), "/livez during the flood: {answers:?}");
    let ticks = manager.count(" worker jobs (min=");
    manager
        .wait_for("two more ticks during the flood", |m| {
            m.count(" worker jobs (min=") >= ticks + 2
        })
        .await;
    drop(flood);
}
