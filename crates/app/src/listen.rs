//! What the `--listen` server promises, whatever serves it: the bounds of its connections
//! ([`Limits`], kept by [`accept`]), so that no client can take the manager's file
//! descriptors, and which `Host`
//! a request may name ([`HostRule`]), against DNS rebinding (a page the admin visits makes its
//! own name resolve to 127.0.0.1 and reads `/status` as if from the same site).
//!
//! A rebinding attack needs a name, so IP addresses and `localhost` (which no outside DNS
//! answers) are always accepted, with any port (`ssh -L` and `kubectl port-forward` change
//! it). Other names are accepted when listed in `--listen-hosts`; without that list, a server
//! on a loopback address accepts no other name, and one on another address (`0.0.0.0` behind
//! a scraper that uses the pod's IP or name) accepts any. A request without `Host` (HTTP/1.0
//! probes) is accepted: browsers always send one.

pub use codalab_wm_core::settings::is_host_name;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The bounds of the server's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; the next is accepted when one ends (until then it waits
    /// in the kernel's accept queue, holding none of the manager's descriptors).
    pub connections: usize,
    /// Time a connection has to send its request head.
    pub header_read: Duration,
    /// Time a connection may last in all: its one request (no keep-alive), the handler and
    /// the writing of the answer to a client that does not read it.
    pub connection: Duration,
}

impl Limits {
    /// The limits of `--listen`: ample for a browser, a scraper and `status`, a few dozen
    /// descriptors at most.
    pub const DEFAULT: Limits = Limits {
        connections: 64,
        header_read: Duration::from_secs(10),
        connection: Duration::from_secs(30),
    };
}

/// Wait after a failed accept (as when the process is out of descriptors), instead of trying
/// again in a hot loop.
pub const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Accepts connections on `listener` and runs `serve` on each, until the runtime ends: at
/// most [`Limits::connections`] at once (a slot is taken before `accept`, so the next waits in
/// the kernel's accept queue, which costs the manager no descriptor and serves a scraper that
/// comes during a burst late rather than not at all), each cut after [`Limits::connection`].
/// A slot is freed only once its connection is dropped.
pub async fn accept<F, Fut>(listener: TcpListener, limits: Limits, serve: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.connections));
    // The semaphore is never closed: acquiring cannot fail.
    while let Ok(slot) = slots.clone().acquire_owned().await {
        match listener.accept().await {
            Ok((stream, _)) => {
                let connection = serve(stream);
                tokio::spawn(async move {
                    if tokio::time::timeout(limits.connection, connection)
                        .await
                        .is_err()
                    {
                        tracing::debug!(limit = ?limits.connection, "a connection lasted too long; closed");
                    }
                    drop(slot);
                });
            }
            Err(error) => {
                tracing::warn!(%error, "cannot accept a connection; trying again in 1 s");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// The names a server accepts besides IP addresses and `localhost`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRule {
    /// Any name: a server on a non-loopback address without `--listen-hosts`.
    Any,
    /// These names (lower case, without a trailing dot).
    Names(Vec<String>),
}

impl HostRule {
    /// The rule of a server bound to `bound` with `--listen-hosts` `names`.
    pub fn new(bound: IpAddr, names: &[String]) -> Self {
        if names.is_empty() && !bound.is_loopback() {
            return HostRule::Any;
        }
        HostRule::Names(names.iter().map(|n| normalise(n)).collect())
    }

    /// Whether a request whose `Host` header is `host` (`None`: none) is answered.
    pub fn allows(&self, host: Option<&str>) -> bool {
        let (HostRule::Names(names), Some(host)) = (self, host) else {
            return true;
        };
        let name = normalise(name_of(host));
        let literal = name.parse::<IpAddr>().is_ok()
            || (name.strip_prefix('[').and_then(|n| n.strip_suffix(']')))
                .is_some_and(|n| n.parse::<Ipv6Addr>().is_ok());
        literal || name == "localhost" || names.contains(&name)
    }
}

/// `host` without its port (`[::1]:9464` → `[::1]`, `wm.example.org:80` → `wm.example.org`).
fn name_of(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Lower case, without the trailing dot of a fully qualified name.
fn normalise(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

#[cfg(test)]
mod tests;
