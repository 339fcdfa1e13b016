//! The real [`serve`] on a listener of 127.0.0.1, with raw TCP clients that open connections
//! and send nothing (as a local user can, in any number). Every wait is for an event (a
//! connection closed by the server, an answer) under a generous bound that only turns a hang
//! into a failure.

use super::*;
use axum::routing::get;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Small limits, so that the idle connections are closed soon.
const LIMITS: Limits = Limits {
    connections: 4,
    per_peer: 4,
    first_byte: Duration::from_millis(300),
    header_read: Duration::from_millis(300),
    connection: Duration::from_secs(30),
};

/// A failure, not a measurement: nothing here should take a fraction of it.
const HANG: Duration = Duration::from_secs(60);

/// What a client saw, in the order it saw it.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// Idle connection `n` was closed by the server.
    Closed(usize),
    /// The probe got this answer.
    Answer(String),
}

async fn start(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, app, LIMITS));
    addr
}

/// Reads `stream` to its end and says what was read.
async fn read_to_end(mut stream: TcpStream) -> String {
    let mut bytes = Vec::new();
    // A reset counts as closed, like an orderly end.
    let _ = stream.read_to_end(&mut bytes).await;
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A GET of `path` with `host` on a new connection; the whole answer.
async fn get_with_host(addr: SocketAddr, path: &str, host: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::timeout(HANG, read_to_end(stream))
        .await
        .expect("no answer")
}

#[tokio::test]
async fn idle_connections_past_the_cap_give_way_and_every_idle_one_is_closed_by_the_server() {
    let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
    let addr = start(app).await;
    let (seen, mut events) = mpsc::unbounded_channel();
    let idle_count = LIMITS.connections + 2;
    for n in 0..idle_count {
        // Connected (in order) before the probe is.
        let stream = TcpStream::connect(addr).await.unwrap();
        let seen = seen.clone();
        tokio::spawn(async move {
            read_to_end(stream).await;
            let _ = seen.send(Seen::Closed(n));
        });
    }
    let mut probe = TcpStream::connect(addr).await.unwrap();
    probe
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = seen.send(Seen::Answer(read_to_end(probe).await));
    });
    let mut order = Vec::new();
    while order.len() < idle_count + 1 {
        let event = tokio::time::timeout(HANG, events.recv()).await;
        match event {
            Ok(Some(event)) => order.push(event),
            _ => panic!("not every connection ended; seen so far: {order:?}"),
        }
    }
    // The cap was full of idle connections: the oldest gave way to the probe (closed first),
    // and the probe was answered in full.
    assert!(matches!(order[0], Seen::Closed(_)), "{order:?}");
    let answer = order.iter().find_map(|e| match e {
        Seen::Answer(text) => Some(text),
        Seen::Closed(_) => None,
    });
    let answer = answer.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nok\n"), "{answer}");
}

#[tokio::test]
async fn a_connection_sending_its_head_too_slowly_is_closed() {
    let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
    let addr = start(app).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // Half a request head, and then nothing: closed by the server, without an answer.
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHo")
        .await
        .unwrap();
    let read = tokio::time::timeout(HANG, read_to_end(stream)).await;
    let answer = read.expect("the server never closed the connection");
    assert!(!answer.contains("200 OK"), "{answer}");
}

#[tokio::test]
async fn each_connection_serves_one_request() {
    let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
    let addr = start(app).await;
    let answer = get_with_host(addr, "/healthz", "127.0.0.1").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("connection: close\r\n"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_connection_whose_answer_never_comes_is_cut_after_the_connection_limit() {
    let hang = || std::future::pending::<&'static str>();
    let app = Router::new().route("/hang", get(hang));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = Limits {
        connection: Duration::from_millis(300),
        ..LIMITS
    };
    tokio::spawn(serve(listener, app, limits));
    // The head is read in time; the handler never answers: the server cuts the connection.
    let answer = get_with_host(addr, "/hang", "127.0.0.1").await;
    assert_eq!(answer, "");
}
