//! A small fault-injecting HTTP/1 proxy on 127.0.0.1, for `cargo xtask chaos`.
//!
//! One request per connection: the proxy reads a request from the client, then, according to
//! the current [`Fault`], forwards it to the upstream (with `Connection: close` both ways, so
//! that a fault switched on later also hits clients that pool connections), or answers it
//! itself with an error, a delay, a truncated reply, a reset or silence. [`Fault::Down`] closes
//! the listening socket, so clients get "connection refused" as from a stopped server.
//! Plain `std` threads; every wait is bounded.

use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// What the proxy does with the next requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    Pass,
    /// Not listening: connections are refused.
    Down,
    /// Read the request, then reset the connection (RST).
    Reset,
    /// Read the request, then close the connection without a reply.
    Drop,
    /// Forward after waiting this long.
    Delay(Duration),
    /// Read the request and never answer (until the fault changes or 60 s pass), then close.
    Stall,
    /// Forward, but relay only the headers and half of the body, then close.
    Truncate,
    /// Answer with this status and a body (e.g. an HTML 500 page, an AWS throttling error).
    Reply {
        /// HTTP status code.
        status: u16,
        /// `Content-Type` of the body.
        content_type: &'static str,
        /// The body.
        body: String,
    },
    /// Answer with a redirect (`status` 301/302/307/308) to `location`.
    Redirect {
        /// HTTP status code.
        status: u16,
        /// The `Location` header.
        location: String,
    },
    /// Answer `200`, chunked, with a body that never ends (until the client hangs up, or
    /// 4 GiB).
    Endless,
}

impl Fault {
    /// A short name for reports.
    pub fn label(&self) -> String {
        match self {
            Fault::Pass => "pass".into(),
            Fault::Down => "down (refused)".into(),
            Fault::Reset => "reset".into(),
            Fault::Drop => "drop".into(),
            Fault::Delay(d) => format!("delay {} s", d.as_secs()),
            Fault::Stall => "stall".into(),
            Fault::Truncate => "truncate".into(),
            Fault::Reply { status, .. } => format!("reply {status}"),
            Fault::Redirect { status, .. } => format!("redirect {status}"),
            Fault::Endless => "endless body".into(),
        }
    }

    /// An HTML 500 page, as a crashed WSGI app or a front proxy answers.
    pub fn html_500() -> Self {
        Fault::Reply {
            status: 500,
            content_type: "text/html; charset=UTF-8",
            body: "<!DOCTYPE html>\n<html><head><title>500 Internal Server Error</title></head>\n\
                   <body><h1>Internal Server Error</h1><pre>chaos: injected failure</pre></body></html>\n"
                .into(),
        }
    }
}

#[derive(Debug)]
struct Shared {
    fault: Mutex<Fault>,
    scope: Mutex<Option<String>>,
    upstream: SocketAddr,
    /// Requests answered with a fault (not forwarded unchanged).
    faulted: AtomicU64,
    stop: AtomicBool,
}

/// A running proxy; stopped when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on a free port of 127.0.0.1 that forwards to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the fault proxy")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            fault: Mutex::new(Fault::Pass),
            scope: Mutex::new(None),
            upstream,
            faulted: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let acceptor = {
            let shared = shared.clone();
            thread::spawn(move || accept_loop(Some(listener), addr, &shared))
        };
        Ok(Self {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Switches the fault for the next requests.
    pub fn set(&self, fault: Fault) {
        *lock(&self.shared.scope) = None;
        *lock(&self.shared.fault) = fault;
    }

    /// Switches the fault for the next requests whose request line contains `scope` (e.g. a
    /// path); the others are forwarded. Not for [`Fault::Down`] and [`Fault::Reset`], which act
    /// before a request is read.
    pub fn set_scoped(&self, fault: Fault, scope: &str) {
        *lock(&self.shared.scope) = Some(scope.to_owned());
        *lock(&self.shared.fault) = fault;
    }

    /// Requests answered with a fault so far.
    pub fn faulted(&self) -> u64 {
        self.shared.faulted.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Accepts connections (polling, so that `Down` and `stop` are noticed within 20 ms).
fn accept_loop(mut listener: Option<TcpListener>, addr: SocketAddr, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::Relaxed) {
        let down = *lock(&shared.fault) == Fault::Down;
        if down {
            listener = None;
        } else if listener.is_none() {
            // std sets SO_REUSEADDR, so the same port binds again at once.
            listener = TcpListener::bind(addr).ok();
        }
        let Some(active) = &listener else {
            thread::sleep(Duration::from_millis(20));
            continue;
        };
        let _ = active.set_nonblocking(true);
        match active.accept() {
            Ok((client, _)) => {
                let shared = shared.clone();
                thread::spawn(move || {
                    let _ = handle(client, &shared);
                });
            }
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn handle(mut client: TcpStream, shared: &Shared) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let fault = lock(&shared.fault).clone();
    if fault == Fault::Reset {
        // Closing a socket with unread input makes the kernel answer with RST.
        thread::sleep(Duration::from_millis(50));
        shared.faulted.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let request = read_request(&mut client)?;
    let request_line = request.split(|&b| b == b'\n').next().unwrap_or_default();
    let in_scope = lock(&shared.scope)
        .as_deref()
        .is_none_or(|scope| String::from_utf8_lossy(request_line).contains(scope));
    let fault = if in_scope { fault } else { Fault::Pass };
    match fault {
        Fault::Pass | Fault::Down => forward(&mut client, &request, shared.upstream, false),
        Fault::Reset => Ok(()),
        Fault::Drop => {
            shared.faulted.fetch_add(1, Ordering::Relaxed);
            client.shutdown(Shutdown::Both)
        }
        Fault::Delay(delay) => {
            shared.faulted.fetch_add(1, Ordering::Relaxed);
            thread::sleep(delay);
            forward(&mut client, &request, shared.upstream, false)
        }
        Fault::Stall => {
            shared.faulted.fetch_add(1, Ordering::Relaxed);
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(60)
                && *lock(&shared.fault) == Fault::Stall
                && !shared.stop.load(Ordering::Relaxed)
            {
                thread::sleep(Duration::from_millis(50));
            }
            client.shutdown(Shutdown::Both)
        }
        Fault::Truncate => {
            shared.faulted.fetch_add(1, Ordering::Relaxed);
            forward(&mut client, &request, shared.upstream, true)
        }
        Fault::Reply {
            status,
            content_type,
            body,
        } => {
            shared.faulted.fetch_add(1, Ordering::Relaxed);
            let head = format!(
                "HTTP/1.1 {status} Injected\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            client.write_all(head.as_bytes())?;
            client.write_all(body.as_bytes())?;
            client.shutdown(Shutdown::Both)
        }
        Fault::Redirect { status, location } => {
            shared.faulted.fetch_add(1, Ordering::Relaxed);
            let head = format!(
                "HTTP/1.1 {status} Injected\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            client.write_all(head.as_bytes())?;
            client.shutdown(Shutdown::Both)
        }
        Fault::Endless => {
            shared.faulted.fetch_add(1, Ordering::Relaxed);
            endless(&mut client)
        }
    }
}

/// A chunked `200` reply of `{"data": [` then spaces, until the client hangs up (bounded).
fn endless(client: &mut TcpStream) -> std::io::Result<()> {
    client.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nb\r\n{\"data\": [ \r\n",
    )?;
    let mut chunk = b"10000\r\n".to_vec();
    chunk.extend(std::iter::repeat_n(b' ', 1 << 16));
    chunk.extend_from_slice(b"\r\n");
    for _ in 0..(1 << 16) {
        client.write_all(&chunk)?;
    }
    client.shutdown(Shutdown::Both)
}

/// Reads one request: the head, then `Content-Length` bytes of body.
fn read_request(client: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut data = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = find(&data, b"\r\n\r\n") {
            break end + 4;
        }
        if data.len() > 1 << 20 {
            return Err(std::io::Error::other("request head too long"));
        }
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::other("client closed before a full request"));
        }
        data.extend_from_slice(&chunk[..n]);
    };
    let length = content_length(&data[..head_end]);
    while data.len() < head_end + length {
        let n = client.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&chunk[..n]);
    }
    Ok(with_connection_close(&data, head_end))
}

/// Sends `request` upstream and relays the reply (rewritten to `Connection: close`); with
/// `truncate`, only the head and half of the body.
fn forward(
    client: &mut TcpStream,
    request: &[u8],
    upstream: SocketAddr,
    truncate: bool,
) -> std::io::Result<()> {
    let mut server = TcpStream::connect_timeout(&upstream, Duration::from_secs(5))?;
    server.set_read_timeout(Some(Duration::from_secs(90)))?;
    server.write_all(request)?;
    let mut reply = Vec::new();
    server.read_to_end(&mut reply)?;
    let Some(head_end) = find(&reply, b"\r\n\r\n").map(|e| e + 4) else {
        return client.write_all(&reply);
    };
    let reply = with_connection_close(&reply, head_end);
    let head_end = find(&reply, b"\r\n\r\n").map_or(reply.len(), |e| e + 4);
    if truncate {
        let body = reply.len() - head_end;
        client.write_all(&reply[..head_end + body / 2])?;
    } else {
        client.write_all(&reply)?;
    }
    client.shutdown(Shutdown::Both)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// The message with its `Connection` header replaced by `Connection: close`.
fn with_connection_close(message: &[u8], head_end: usize) -> Vec<u8> {
    let head = String::from_utf8_lossy(&message[..head_end - 4]);
    let mut lines: Vec<&str> = head
        .split("\r\n")
        .filter(|line| {
            !line
                .split_once(':')
                .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("connection"))
        })
        .collect();
    lines.push("Connection: close");
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&message[head_end..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_header_is_replaced() {
        let message = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\nbody";
        let out = with_connection_close(message, find(message, b"\r\n\r\n").unwrap() + 4);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nbody"
        );
        assert_eq!(
            content_length(b"POST / HTTP/1.1\r\ncontent-length: 12\r\n\r\n"),
            12
        );
    }
}
