//! The operator's small HTTP server: `GET /healthz` ([`crate::health`]: 200 `ok`, or 503 with
//! what is wrong), `GET /metrics` ([`crate::metrics`]), anything else 404.
//!
//! It binds every address of the pod, so any pod of the cluster may connect. Connections are
//! taken as the manager's `--listen` takes them ([`codalab_wm_app::listen::accept`], review
//! 2026-11-27 §13): each must send its first byte within 2 s and its request within 5 s, one
//! address holds at most 8 of the [`LIMITS`] 32, and a new connection takes the place of the
//! oldest idle one, so a client holding idle connections never keeps kubelet's probe out.
//! Each connection gets one answer; a failing `accept` (out of file descriptors) backs off
//! instead of spinning.

use crate::health::Health;
use crate::metrics::OperatorMetrics;
use codalab_wm_app::listen::{Connection, Limits, accept};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// The limits of the health server's connections.
pub const LIMITS: Limits = Limits {
    connections: 32,
    per_peer: 8,
    first_byte: Duration::from_secs(2),
    header_read: Duration::from_secs(5),
    connection: Duration::from_secs(5),
};

/// What the server answers from.
#[derive(Debug, Clone)]
pub struct Vitals {
    /// `/healthz`.
    pub health: Arc<Health>,
    /// `/metrics`.
    pub metrics: Arc<OperatorMetrics>,
}

/// Serves `listener` for good.
pub async fn serve(listener: TcpListener, vitals: Vitals, limits: Limits) {
    accept(listener, limits, move |connection| {
        let vitals = vitals.clone();
        async move { answer_one(connection, &vitals).await }
    })
    .await;
}

async fn answer_one(mut connection: Connection, vitals: &Vitals) {
    let request = String::from_utf8_lossy(connection.head()).into_owned();
    let (status, kind, body) = answer(&request, vitals);
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = connection.write_all(response.as_bytes()).await;
    let _ = connection.shutdown().await;
}

/// The status line, content type and body for a request.
fn answer(request: &str, vitals: &Vitals) -> (&'static str, &'static str, String) {
    if request.starts_with("GET /healthz ") {
        match vitals.health.verdict(tokio::time::Instant::now()) {
            Ok(()) => ("200 OK", "text/plain", "ok\n".to_owned()),
            Err(why) => (
                "503 Service Unavailable",
                "text/plain",
                format!("unhealthy: {why}\n"),
            ),
        }
    } else if request.starts_with("GET /metrics ") {
        let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        ("200 OK", kind, vitals.metrics.render())
    } else {
        ("404 Not Found", "text/plain", "not found\n".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    /// A GET of `path`: the answer (empty when the connection was closed or reset first).
    async fn get(address: std::net::SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
        let _ = stream.write_all(request.as_bytes()).await;
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// A real server on a loopback port: an idle client holding the only connection slot is
    /// closed after the request timeout and the next client is served; `/healthz` says 503
    /// with the reason when the watcher never listed.
    #[tokio::test]
    async fn an_idle_connection_cannot_keep_others_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let now = tokio::time::Instant::now();
        let limits = crate::health::Limits {
            watch: Duration::ZERO,
            lease: Duration::from_secs(3600),
        };
        let vitals = Vitals {
            health: Arc::new(Health::new(limits, now - Duration::from_secs(1))),
            metrics: Arc::default(),
        };
        let server_limits = Limits {
            connections: 1,
            per_peer: 1,
            first_byte: Duration::from_millis(200),
            header_read: Duration::from_millis(200),
            connection: Duration::from_millis(200),
        };
        tokio::spawn(serve(listener, vitals.clone(), server_limits));
        let mut idle = TcpStream::connect(address).await.unwrap();
        // Served only once the idle one is dropped (without the request timeout: never).
        let answer = tokio::time::timeout(Duration::from_secs(30), get(address, "/healthz"))
            .await
            .expect("the idle connection must not hold the only slot for good");
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(answer.contains("has not listed the pools"), "{answer}");
        let mut rest = Vec::new();
        assert_eq!(
            idle.read_to_end(&mut rest).await.unwrap(),
            0,
            "closed unanswered"
        );
        vitals.health.pools_listed();
        let answer = get(address, "/healthz").await;
        assert!(
            answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("ok\n"),
            "{answer}"
        );
        assert!(
            get(address, "/metrics")
                .await
                .contains("codalab_wm_operator_leader")
        );
        assert!(get(address, "/nope").await.starts_with("HTTP/1.1 404 "));
    }

    /// Review 2026-11-27 §13: one client holding every slot with idle connections, reopened
    /// as they are cut, kept `/healthz` from answering (kubelet then restarts the operator).
    /// Now `/healthz` answers during the flood: a few attempts, each bounded only to turn a
    /// hang into a failure.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_client_holding_every_slot_does_not_starve_healthz() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = crate::health::Limits {
            watch: Duration::from_secs(3600),
            lease: Duration::from_secs(3600),
        };
        let vitals = Vitals {
            health: Arc::new(Health::new(limits, tokio::time::Instant::now())),
            metrics: Arc::default(),
        };
        vitals.health.pools_listed();
        tokio::spawn(serve(listener, vitals, LIMITS));
        let (closed, mut closures) = tokio::sync::mpsc::unbounded_channel::<()>();
        let mut holders = tokio::task::JoinSet::new();
        let open = async |holders: &mut tokio::task::JoinSet<()>| {
            let connect = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(address));
            let Ok(Ok(mut stream)) = connect.await else {
                return false;
            };
            let closed = closed.clone();
            holders.spawn(async move {
                let _ = stream.read(&mut [0_u8; 64]).await;
                let _ = closed.send(());
            });
            true
        };
        let mut opened = 0;
        while opened < 1000 && open(&mut holders).await {
            opened += 1;
        }
        assert!(opened > 32, "only {opened} connections opened");
        // The client reopens every connection the server cuts, while the probes run.
        let reopen = async {
            let mut holders = holders;
            while closures.recv().await.is_some() {
                open(&mut holders).await;
            }
        };
        // A probe closed unanswered (one of the client's own newer connections took its
        // place before it was read) is tried again; one left waiting (starved) fails at once.
        // The bound only turns a hang into a failure: kubelet gives up after 1 s, this after
        // ten times that.
        let probes = async {
            let mut answers = Vec::new();
            for _ in 0..3 {
                let answer =
                    tokio::time::timeout(Duration::from_secs(10), get(address, "/healthz"));
                match answer.await {
                    Ok(answer) if answer.starts_with("HTTP/1.1 200 OK") => return Ok(answer),
                    Ok(answer) => answers.push(answer),
                    Err(_) => {
                        answers.push("(no answer within 10 s)".to_owned());
                        break;
                    }
                }
            }
            Err(answers)
        };
        let answer = tokio::select! {
            answer = probes => answer,
            () = reopen => unreachable!("the flood ends only with the test"),
        };
        let answer = answer.unwrap_or_else(|a| panic!("/healthz during the flood: {a:?}"));
        assert!(answer.ends_with("ok\n"), "{answer}");
    }
}
