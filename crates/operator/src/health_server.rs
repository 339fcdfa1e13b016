//! The operator's small HTTP server: `GET /healthz` ([`crate::health`]: 200 `ok`, or 503 with
//! what is wrong), `GET /metrics` ([`crate::metrics`]), anything else 404.
//!
//! It binds every address of the pod, so any pod of the cluster may connect: at most
//! [`ServerLimits::connections`] connections are served at once (more wait in the listen
//! backlog), each must send its request within [`ServerLimits::request_timeout`] and is
//! closed after one answer, and a failing `accept` (out of file descriptors) backs off instead
//! of spinning.

use crate::health::Health;
use crate::metrics::OperatorMetrics;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// What one client may hold.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// Connections served at once.
    pub connections: usize,
    /// Time to send the request (and to take the answer).
    pub request_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            connections: 32,
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// What the server answers from.
#[derive(Debug, Clone)]
pub struct Vitals {
    /// `/healthz`.
    pub health: Arc<Health>,
    /// `/metrics`.
    pub metrics: Arc<OperatorMetrics>,
}

/// Serves `listener` for good.
pub async fn serve(listener: TcpListener, vitals: Vitals, limits: ServerLimits) {
    let permits = Arc::new(Semaphore::new(limits.connections.max(1)));
    let mut failures = 0u32;
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                failures = failures.saturating_add(1);
                tracing::warn!(%error, "health server: cannot accept a connection");
                tokio::time::sleep(accept_backoff(failures)).await;
                continue;
            }
        };
        failures = 0;
        let vitals = vitals.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(limits.request_timeout, answer_one(stream, &vitals)).await;
        });
    }
}

/// The pause after the `failures`-th `accept` error in a row: 10 ms doubling up to 1 s.
fn accept_backoff(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(7);
    Duration::from_millis(10 << exponent).min(Duration::from_secs(1))
}

async fn answer_one(mut stream: TcpStream, vitals: &Vitals) {
    let mut buffer = [0u8; 1024];
    let read = stream.read(&mut buffer).await.unwrap_or(0);
    let request = String::from_utf8_lossy(&buffer[..read]);
    let (status, kind, body) = answer(&request, vitals);
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
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
    use crate::health::Limits;

    #[test]
    fn accept_errors_back_off_up_to_a_second() {
        let ms = Duration::from_millis;
        let cases = [
            (1, ms(10)),
            (2, ms(20)),
            (5, ms(160)),
            (8, ms(1000)),
            (1000, ms(1000)),
        ];
        for (failures, pause) in cases {
            assert_eq!(accept_backoff(failures), pause, "{failures}");
        }
    }

    async fn get(address: std::net::SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    /// A real server on a loopback port: an idle client holding the only connection slot is
    /// closed after the request timeout and the next client is served; `/healthz` says 503
    /// with the reason when the watcher never listed.
    #[tokio::test]
    async fn an_idle_connection_cannot_keep_others_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let now = tokio::time::Instant::now();
        let limits = Limits {
            watch: Duration::ZERO,
            lease: Duration::from_secs(3600),
        };
        let vitals = Vitals {
            health: Arc::new(Health::new(limits, now - Duration::from_secs(1))),
            metrics: Arc::default(),
        };
        let server_limits = ServerLimits {
            connections: 1,
            request_timeout: Duration::from_millis(200),
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
}
