//! A flood of idle `--listen` connections and a kubelet-like probe through it (review
//! 2026-11-27 §13): one client opens every connection it can and reopens each one the server
//! cuts; a probe must still be answered.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// How long a probe may wait for its answer during a flood: ten times kubelet's timeout. The
/// bound only turns a hang into a failure.
pub const PROBE: Duration = Duration::from_secs(10);

/// Idle connections one client keeps open to `addr`, reopening each one the server closes,
/// until dropped (as the review's probe `listen-slot-starvation` did).
pub struct Flood {
    task: tokio::task::JoinHandle<()>,
}

impl Flood {
    /// Opens up to `count` idle connections (fewer when the kernel's queue is full: a connect
    /// that does not complete within a few seconds ends the opening), then keeps them open;
    /// returns once they are open, with how many were.
    pub async fn start(addr: SocketAddr, count: usize) -> (Self, usize) {
        let (opened_tx, opened_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let (closed, mut closures) = mpsc::unbounded_channel::<()>();
            let mut holders = tokio::task::JoinSet::new();
            let open = async |holders: &mut tokio::task::JoinSet<()>| {
                let connect =
                    tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(addr));
                let Ok(Ok(mut stream)) = connect.await else {
                    return false;
                };
                let closed = closed.clone();
                holders.spawn(async move {
                    let mut buffer = [0_u8; 64];
                    let _ = stream.read(&mut buffer).await;
                    let _ = closed.send(());
                });
                true
            };
            let mut opened = 0;
            while opened < count && open(&mut holders).await {
                opened += 1;
            }
            let _ = opened_tx.send(opened);
            // Each connection the server closes is opened again, for as long as the test runs.
            while closures.recv().await.is_some() {
                open(&mut holders).await;
            }
        });
        let opened = opened_rx.await.unwrap();
        (Self { task }, opened)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A GET of `path` naming `host`, on a new connection; a connection closed or reset before
/// the answer gives what was read (empty).
pub async fn get_or_closed(addr: SocketAddr, path: &str, host: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let _ = stream.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Probes `path` as kubelet does, during a flood: a probe closed unanswered (one of the
/// flooding client's newer connections took its place before it was read) is tried again, up
/// to three times; one left waiting past [`PROBE`] (starved) ends the probing. The answers, the
/// last one a `200 OK` when the probe succeeded.
pub async fn probe(addr: SocketAddr, path: &str) -> Vec<String> {
    let mut answers = Vec::new();
    for _ in 0..3 {
        let answer =
            tokio::time::timeout(PROBE, get_or_closed(addr, path, &addr.to_string())).await;
        match answer {
            Ok(answer) if answer.starts_with("HTTP/1.1 200 OK\r\n") => {
                answers.push(answer);
                break;
            }
            Ok(answer) => answers.push(answer),
            Err(_) => {
                answers.push("(no answer within the bound)".to_owned());
                break;
            }
        }
    }
    answers
}

/// Whether [`probe`]'s answers end in a `200 OK`.
pub fn answered(answers: &[String]) -> bool {
    answers
        .last()
        .is_some_and(|a| a.starts_with("HTTP/1.1 200 OK\r\n"))
}
