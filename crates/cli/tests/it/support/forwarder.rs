//! A loopback TCP forwarder between workers and the CodaLab server that a test stops and
//! starts again: a network partition of the workers' path only (the manager talks to the
//! server directly). Plain `std` threads; every loop ends when the forwarder stops.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A forwarder from `127.0.0.1:<port>` to an upstream address.
#[derive(Debug)]
pub struct Forwarder {
    port: u16,
    upstream: SocketAddr,
    running: Option<Running>,
}

#[derive(Debug)]
struct Running {
    stop: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: JoinHandle<()>,
}

impl Forwarder {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut forwarder = Self {
            port,
            upstream,
            running: None,
        };
        forwarder.serve(listener);
        forwarder
    }

    /// The URL workers should use.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Cuts the path: closes the listening socket (new connections are refused) and every
    /// open connection.
    pub fn stop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        running.stop.store(true, Ordering::SeqCst);
        for stream in running.connections.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
        let _ = running.acceptor.join();
    }

    /// Restores the path on the same port.
    pub fn start_again(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).unwrap();
        self.serve(listener);
    }

    fn serve(&mut self, listener: TcpListener) {
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let (flag, open, upstream) = (stop.clone(), connections.clone(), self.upstream);
        let acceptor = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => forward(client, upstream, &open),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        self.running = Some(Running {
            stop,
            connections,
            acceptor,
        });
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Pipes `client` to a new connection to `upstream`, both ways, each direction on a thread
/// that ends when either side closes.
fn forward(client: TcpStream, upstream: SocketAddr, open: &Mutex<Vec<TcpStream>>) {
    let _ = client.set_nonblocking(false);
    let Ok(server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let mut open = open.lock().unwrap();
    for stream in [&client, &server] {
        open.push(stream.try_clone().unwrap());
    }
    for (from, to) in [(&client, &server), (&server, &client)] {
        let (mut from, mut to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
        std::thread::spawn(move || {
            let mut buffer = [0u8; 16 * 1024];
            while let Ok(n) = from.read(&mut buffer) {
                if n == 0 || to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        });
    }
}
