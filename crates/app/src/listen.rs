//! What the `--listen` server promises, whatever serves it: the bounds of its connections
//! ([`Limits`], kept by [`accept`]), so that no client can take the manager's file
//! descriptors nor keep probes and scrapes out, and which `Host`
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
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The bounds of the server's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once. When they are all taken, a new connection takes the place
    /// of the oldest one still waiting for its request head (of the address holding the
    /// most); only when every one is being answered is the new one closed at once.
    pub connections: usize,
    /// Connections one client address (an IPv6 client: its /64) may hold; past it, its own
    /// oldest connection still waiting for its head gives way.
    pub per_peer: usize,
    /// Time a new connection has to send its first byte.
    pub first_byte: Duration,
    /// Time a connection has to send its whole request head (at most [`MAX_HEAD`] bytes).
    pub header_read: Duration,
    /// Time a connection may last once its head is read: its one request (no keep-alive),
    /// the handler and the writing of the answer to a client that does not read it.
    pub connection: Duration,
}

impl Limits {
    /// The limits of `--listen`: ample for a browser, a scraper, kubelet and `status`, a few
    /// hundred descriptors at most.
    pub const DEFAULT: Limits = Limits {
        connections: 64,
        per_peer: 16,
        first_byte: Duration::from_secs(2),
        header_read: Duration::from_secs(10),
        connection: Duration::from_secs(30),
    };
}

/// The longest request head read; a longer one closes the connection (the server's
/// requests are a request line and a few headers).
pub const MAX_HEAD: usize = 16 * 1024;

/// Wait after a failed accept (as when the process is out of descriptors), instead of trying
/// again in a hot loop.
pub const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Accepts connections on `listener` and runs `serve` on each whose request head came in
/// time, until the runtime ends (review 2026-11-27 §13: probes are never starved by idle
/// connections, and no client takes the process's descriptors):
///
/// - every connection is accepted at once, so a probe never waits behind others in the
///   kernel's queue;
/// - a connection must send its first byte within [`Limits::first_byte`] and its whole head
///   within [`Limits::header_read`]; until then it may be evicted: past
///   [`Limits::per_peer`] connections of one address, the address's oldest waiting one
///   closes; past [`Limits::connections`], the oldest waiting one of the address holding
///   the most. A probe sends its head at once and is answered; a client holding idle
///   connections only pushes out its own. When none can give way (every connection is being
///   answered), the new one is closed at once;
/// - `serve` gets the connection with its head (read again from the start), cut after
///   [`Limits::connection`];
/// - at most twice [`Limits::connections`] descriptors are held (evicted connections until
///   their task has dropped them).
pub async fn accept<F, Fut>(listener: TcpListener, limits: Limits, serve: F)
where
    F: Fn(Connection) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let serve = Arc::new(serve);
    let gate = Arc::new(Mutex::new(Gate::default()));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                // What came with the connection: a probe's whole request, usually, which then
                // never gives way.
                let mut head = Vec::new();
                let mut buffer = [0u8; 2048];
                match stream.try_read(&mut buffer) {
                    Ok(0) => continue,
                    Ok(read) => head.extend_from_slice(&buffer[..read]),
                    Err(_) => {}
                }
                let Some(mut ticket) = Gate::admit(&gate, peer_key(peer.ip()), limits) else {
                    tracing::debug!(%peer, "every connection is being answered; one more closed");
                    continue;
                };
                if ends_head(&head) {
                    ticket.serving();
                }
                let serve = serve.clone();
                tokio::spawn(async move {
                    let mut ticket = ticket;
                    let mut stream = stream;
                    let head = tokio::select! {
                        biased;
                        // `Err`: the sender is gone because the head was already read.
                        Ok(()) = &mut ticket.evicted => None,
                        head = read_head(&mut stream, head, limits) => head,
                    };
                    let Some(head) = head else { return };
                    ticket.serving();
                    let connection = serve(Connection::new(stream, head));
                    if tokio::time::timeout(limits.connection, connection)
                        .await
                        .is_err()
                    {
                        tracing::debug!(limit = ?limits.connection, "a connection lasted too long; closed");
                    }
                    drop(ticket);
                });
            }
            Err(error) => {
                tracing::warn!(%error, "cannot accept a connection; trying again in 1 s");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// What the per-address cap counts: the address, or an IPv6 address's /64 (one host may
/// hold many addresses of it).
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

/// Reads the rest of the request head after `head` (what came with the connection): the
/// first byte within [`Limits::first_byte`], the whole head (up to the empty line) within
/// [`Limits::header_read`]. `None`: too slow, closed, or longer than [`MAX_HEAD`].
async fn read_head(stream: &mut TcpStream, head: Vec<u8>, limits: Limits) -> Option<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + limits.header_read;
    let mut head = head;
    let mut buffer = [0u8; 2048];
    if head.is_empty() {
        let first = tokio::time::timeout(limits.first_byte, stream.read(&mut buffer));
        let read = first.await.ok()?.ok()?;
        if read == 0 {
            return None;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    loop {
        if ends_head(&head) {
            return Some(head);
        }
        if head.len() > MAX_HEAD {
            return None;
        }
        let more = tokio::time::timeout_at(deadline, stream.read(&mut buffer));
        let read = more.await.ok()?.ok()?;
        if read == 0 {
            return None;
        }
        head.extend_from_slice(&buffer[..read]);
    }
}

/// Whether `head` holds a whole request head (an empty line: CRLF CRLF, or bare LF LF).
fn ends_head(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

/// An accepted connection whose request head was read: reading it gives the head again,
/// then whatever else the client sends.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    head: Vec<u8>,
    replayed: usize,
}

impl Connection {
    fn new(stream: TcpStream, head: Vec<u8>) -> Self {
        Self {
            stream,
            head,
            replayed: 0,
        }
    }

    /// The request head as read (with any bytes that came with it).
    pub fn head(&self) -> &[u8] {
        &self.head
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.replayed < this.head.len() {
            let rest = &this.head[this.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.replayed += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The open connections, oldest first: which may give way to a new one.
#[derive(Debug, Default)]
struct Gate {
    next: u64,
    open: BTreeMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    peer: IpAddr,
    /// Waiting for its head: sending evicts it. `None`: being answered, or already evicted.
    evict: Option<oneshot::Sender<()>>,
    evicted: bool,
}

/// A connection's place at the gate, given up when dropped.
struct Ticket {
    gate: Arc<Mutex<Gate>>,
    id: u64,
    /// Resolves when the connection is evicted.
    evicted: oneshot::Receiver<()>,
}

impl Gate {
    fn lock(gate: &Mutex<Gate>) -> std::sync::MutexGuard<'_, Gate> {
        gate.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A place for a new connection from `peer`, making room by eviction if need be;
    /// `None`: no room (close it).
    fn admit(gate: &Arc<Mutex<Gate>>, peer: IpAddr, limits: Limits) -> Option<Ticket> {
        let mut this = Self::lock(gate);
        if this.open.len() >= 2 * limits.connections.max(1) {
            return None;
        }
        let live = |g: &Gate, who: Option<IpAddr>| {
            g.open
                .values()
                .filter(|e| !e.evicted && who.is_none_or(|p| p == e.peer))
                .count()
        };
        if live(&this, Some(peer)) >= limits.per_peer.max(1) {
            if !this.evict_oldest_of(peer) {
                return None;
            }
        } else if live(&this, None) >= limits.connections.max(1) && !this.evict_for_room() {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let id = this.next;
        this.next += 1;
        this.open.insert(
            id,
            Entry {
                peer,
                evict: Some(tx),
                evicted: false,
            },
        );
        Some(Ticket {
            gate: gate.clone(),
            id,
            evicted: rx,
        })
    }

    /// Evicts `peer`'s oldest connection still waiting for its head; false: it has none.
    fn evict_oldest_of(&mut self, peer: IpAddr) -> bool {
        let oldest = self
            .open
            .values_mut()
            .find(|e| e.peer == peer && e.evict.is_some());
        match oldest {
            Some(entry) => {
                entry.evicted = true;
                if let Some(tx) = entry.evict.take() {
                    let _ = tx.send(());
                }
                true
            }
            None => false,
        }
    }

    /// Evicts the oldest waiting connection of the address with the most waiting ones;
    /// false: none is waiting.
    fn evict_for_room(&mut self) -> bool {
        let mut waiting: HashMap<IpAddr, usize> = HashMap::new();
        for entry in self.open.values().filter(|e| e.evict.is_some()) {
            *waiting.entry(entry.peer).or_default() += 1;
        }
        let most = waiting.into_iter().max_by_key(|(_, n)| *n);
        most.is_some_and(|(peer, _)| self.evict_oldest_of(peer))
    }
}

impl Ticket {
    /// The head is read: the connection is being answered and no longer gives way.
    fn serving(&mut self) {
        if let Some(entry) = Gate::lock(&self.gate).open.get_mut(&self.id) {
            entry.evict = None;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        Gate::lock(&self.gate).open.remove(&self.id);
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
