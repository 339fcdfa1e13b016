//! A scripted HTTP/1.1 server on 127.0.0.1 for the hostile-server tests: every request is
//! recorded and answered by a closure, with replies no well-behaved framework would send
//! (redirects elsewhere, bodies nested 100,000 deep, chunked bodies that never end). One
//! request per connection (`Connection: close`); plain TCP or TLS.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub head: String,
    pub body: String,
}

/// What to answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete reply.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// `200`, chunked, `prefix` then spaces until the client hangs up (at most 1 GiB).
    Endless { prefix: Vec<u8> },
    /// `200` announcing `length` bytes, of which it sends the first MiB of spaces.
    Announced { length: u64 },
}

impl Reply {
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Reply::Full {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    pub fn redirect(status: u16, location: &str) -> Self {
        Reply::Full {
            status,
            headers: vec![("Location".into(), location.into())],
            body: Vec::new(),
        }
    }
}

type Handler = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// A running scripted server.
#[derive(Clone)]
pub struct Hostile {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Hostile {
    /// Serves plain HTTP on a free port of 127.0.0.1.
    pub async fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        Self::start_with(handler, None).await
    }

    /// Serves HTTPS with `tls` (or plain HTTP without).
    pub async fn start_with(
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Handler = Arc::new(handler);
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (handler, recorded, tls) = (handler.clone(), recorded.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                serve(stream, &handler, &recorded).await;
                            }
                        }
                        None => serve(stream, &handler, &recorded).await,
                    }
                });
            }
        });
        Self { addr, requests }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    handler: &Handler,
    recorded: &Mutex<Vec<Request>>,
) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    recorded.lock().unwrap().push(request.clone());
    let _ = write_reply(&mut stream, handler(&request)).await;
    let _ = stream.shutdown().await;
}

async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> Option<Request> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if data.len() > 1 << 20 {
            return None;
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while data.len() < head_end + length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
    }
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or_default().to_owned();
    let path = words.next().unwrap_or_default().to_owned();
    let body = String::from_utf8_lossy(&data[head_end..]).into_owned();
    Some(Request {
        method,
        path,
        head,
        body,
    })
}

async fn write_reply<S: AsyncWrite + Unpin>(stream: &mut S, reply: Reply) -> std::io::Result<()> {
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} X\r\nConnection: close\r\nContent-Length: {}\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(&body).await
        }
        Reply::Endless { prefix } => {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await?;
            stream
                .write_all(format!("{:x}\r\n", prefix.len()).as_bytes())
                .await?;
            stream.write_all(&prefix).await?;
            stream.write_all(b"\r\n").await?;
            let chunk = vec![b' '; 1 << 16];
            for _ in 0..(1 << 14) {
                stream.write_all(b"10000\r\n").await?;
                stream.write_all(&chunk).await?;
                stream.write_all(b"\r\n").await?;
            }
            Ok(())
        }
        Reply::Announced { length } => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(&vec![b' '; 1 << 20]).await
        }
    }
}

/// A token reply.
pub fn token_reply() -> Reply {
    Reply::json(
        200,
        r#"{"access_token": "tok", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "ref"}"#,
    )
}

/// A `/rest/user` reply for `alice`.
pub fn user_reply() -> Reply {
    Reply::json(
        200,
        r#"{"data": {"type": "users", "id": "0x1", "attributes": {"user_name": "alice"}}}"#,
    )
}

/// `prefix`, then `depth` nested arrays, then `suffix`.
pub fn deeply_nested(prefix: &str, depth: usize, suffix: &str) -> Vec<u8> {
    let mut body = prefix.as_bytes().to_vec();
    body.extend(std::iter::repeat_n(b'[', depth));
    body.extend(std::iter::repeat_n(b']', depth));
    body.extend_from_slice(suffix.as_bytes());
    body
}

/// Answers like a CodaLab server with no staged bundle: token, user, empty search.
pub fn well_behaved(request: &Request) -> Reply {
    match request.path.split('?').next().unwrap_or_default() {
        "/rest/oauth2/token" => token_reply(),
        "/rest/user" => user_reply(),
        _ => Reply::json(200, r#"{"data": []}"#),
    }
}
