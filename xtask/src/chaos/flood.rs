//! The "`--listen` flood" scenario (issue 40, review 2026-11-27 §13): while the manager runs
//! its workers, one local client opens every `--listen` connection it can and reopens each
//! one the manager cuts, as the review's `listen-slot-starvation` probe did. Probes like
//! kubelet's must still be answered, the ticks go on, and no job is launched or stopped.

use super::harness::{self, MAX_WORKERS, hold_jobs, is_tick, wait_for_jobs};
use super::scenarios::{Findings, Setup};
use anyhow::{Context, Result, ensure};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

const RECOVER: Duration = Duration::from_secs(60);

/// How long the flood lasts.
const FLOOD: Duration = Duration::from_secs(30);

/// Connections the flooding client tries to hold (the manager serves 64 at once).
const CONNECTIONS: usize = 1000;

/// How long a probe may wait for its answer: ten times kubelet's default timeout. A bound
/// that turns a starved probe into a failure, not a measurement.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Between probe rounds (kubelet's period is longer; here faster, to probe often).
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// kubelet's probe timeout (`timeoutSeconds`, 1 by default; the manifest keeps it).
const KUBELET_TIMEOUT: Duration = Duration::from_secs(1);

/// One client holding idle connections to `addr` until `stop`; counts the ones the manager cut
/// (each is opened again).
fn flood(addr: SocketAddr, stop: Arc<AtomicBool>, cut: Arc<AtomicU64>) -> usize {
    let open = move || TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok();
    let mut held: Vec<TcpStream> = std::iter::from_fn(open).take(CONNECTIONS).collect();
    let opened = held.len();
    thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for slot in held.iter_mut() {
                let _ = slot.set_nonblocking(true);
                let mut byte = [0_u8; 1];
                // 0 bytes read: the manager closed it; reopen (an error other than
                // WouldBlock too).
                let closed = match slot.peek(&mut byte) {
                    Ok(0) => true,
                    Ok(_) => false,
                    Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                };
                if closed && let Some(again) = open() {
                    *slot = again;
                    cut.fetch_add(1, Ordering::Relaxed);
                }
            }
            thread::sleep(Duration::from_millis(100));
        }
    });
    opened
}

/// A GET of `path` on a new connection, as kubelet sends it; a connection closed before the
/// answer (a newer connection of the flood took its place) is tried again, three times.
fn probe(addr: SocketAddr, path: &str) -> Result<Duration> {
    let started = Instant::now();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
        stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let _ = stream.write_all(request.as_bytes());
        let mut answer = String::new();
        let read = stream.read_to_string(&mut answer);
        if answer.starts_with("HTTP/1.1 200 OK\r\n") {
            return Ok(started.elapsed());
        }
        answers.push(match read {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => "(starved)".to_owned(),
            _ => answer
                .lines()
                .next()
                .unwrap_or("(closed unanswered)")
                .to_owned(),
        });
    }
    anyhow::bail!("{path} not answered during the flood: {answers:?}")
}

/// The flood, on a manager that holds its workers.
pub fn listen_flood(setup: &Setup) -> Result<Findings> {
    let mut manager = setup
        .spec
        .spawn_with("listen-flood", &["--listen", "127.0.0.1:0"])?;
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    let serving = manager.wait_for_event(0, RECOVER, "the --listen address", |e| {
        e.get("addr").is_some() && e.message().contains("serving /metrics")
    })?;
    let addr: SocketAddr = (serving.get("addr").unwrap_or_default())
        .parse()
        .context("the logged --listen address")?;
    let (stop, cut) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let opened = flood(addr, stop.clone(), cut.clone());
    ensure!(opened > 64, "the client opened only {opened} connections");
    let cursor = manager.cursor();
    // kubelet gives a probe 1 s (the manifest's timeoutSeconds, the default) and restarts the
    // pod after 3 failed liveness probes in a row (its failureThreshold).
    let probes = thread::spawn(move || -> Result<(usize, Duration, usize)> {
        let (started, mut slowest, mut answered) = (Instant::now(), Duration::ZERO, 0);
        let (mut late, mut late_in_a_row) = (0, 0);
        while started.elapsed() < FLOOD {
            for path in ["/livez", "/healthz"] {
                let took = probe(addr, path)?;
                slowest = slowest.max(took);
                answered += 1;
                if path == "/livez" {
                    late_in_a_row = if took > KUBELET_TIMEOUT {
                        late_in_a_row + 1
                    } else {
                        0
                    };
                    late += usize::from(took > KUBELET_TIMEOUT);
                    ensure!(
                        late_in_a_row < 3,
                        "3 /livez probes in a row over kubelet's 1 s: the pod would be restarted"
                    );
                }
            }
            thread::sleep(PROBE_EVERY);
        }
        Ok((answered, slowest, late))
    });
    // Through the flood: alive, no launch, no stop.
    let held = hold_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, FLOOD);
    stop.store(true, Ordering::Relaxed);
    let (answered, slowest, late) = probes.join().expect("the probe thread")?;
    held?;
    let ticks = manager
        .events_since(cursor)
        .iter()
        .filter(|e| is_tick(e))
        .count();
    ensure!(
        ticks >= 5,
        "{ticks} ticks in the {} s flood (sleep time 1 s); log tail:\n{}",
        FLOOD.as_secs(),
        harness::tail(&manager.log)
    );
    manager.stop()?;
    let cut = cut.load(Ordering::Relaxed);
    Ok(Findings {
        faults: opened as u64 + cut,
        notes: vec![format!(
            "{opened} idle connections held, {cut} cut by the manager and reopened; {answered} probes answered (slowest {} ms; {late} /livez over kubelet's 1 s, never 3 in a row), {ticks} ticks",
            slowest.as_millis()
        )],
        beyond_max: 0,
    })
}
