//! `bench-harness serve --bundles N [--default-limit L]`: the fake CodaLab server for both
//! sides, in its own process so that its CPU is not charged to the manager being measured.
//!
//! `FakeCodaLab` (`crates/testkit/codalab`) serves `N` staged bundles of `alice` (real-shaped,
//! `.limit` honoured, default limit 10 like the real server). In front of it sits a small proxy
//! that
//! - appends `.limit=L` to a bundle search that has no `.limit` (upstream's manager sends
//!   none and would otherwise see 10 bundles; the bench gives both sides every bundle);
//! - caches bundle search replies by query string (the bundles do not change during a run),
//!   so that the server's own JSON rendering does not dominate the wall time of either side;
//! - counts requests per path, served at `GET /bench/requests`.
//!
//! It prints its URL on one line of stdout and serves until stdin is closed.

use crate::args::{USER, flag, required};
use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

#[derive(Debug)]
struct Front {
    inner: String,
    http: reqwest::Client,
    default_limit: usize,
    cache: Mutex<HashMap<String, (HeaderValue, Bytes)>>,
    counts: Mutex<BTreeMap<String, u64>>,
}

pub fn run(args: &[String]) -> Result<()> {
    let bundles: usize = required(args, "--bundles")?;
    let default_limit: usize = flag(args, "--default-limit")?.unwrap_or(1_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(serve(bundles, default_limit))
}

async fn serve(bundles: usize, default_limit: usize) -> Result<()> {
    let fake = FakeCodaLab::start().await.context("starting the fake")?;
    fake.set_bundles(
        (0..bundles as u64)
            .map(|n| FakeBundle::new(USER, n + 1))
            .collect(),
    );
    let front = Arc::new(Front {
        inner: fake.url(),
        http: reqwest::Client::new(),
        default_limit,
        cache: Mutex::default(),
        counts: Mutex::default(),
    });
    let app = axum::Router::new().fallback(handle).with_state(front);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    announce_and_wait(&url).await
}

/// Prints `url` on stdout (what [`ServeChild::spawn`] reads), then waits until the parent
/// closes our stdin (or dies) while the runtime serves.
pub async fn announce_and_wait(url: &str) -> Result<()> {
    println!("{url}");
    std::io::stdout().flush()?;
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
            line.clear();
        }
    })
    .await?;
    Ok(())
}

/// The query with `.limit=<default>` appended when the search carries no `.limit`.
fn with_limit(query: &str, default_limit: usize) -> String {
    if query.contains("keywords=.limit%3D") || query.contains("keywords=.limit=") {
        return query.to_owned();
    }
    format!("{query}&keywords=.limit%3D{default_limit}")
}

async fn handle(State(front): State<Arc<Front>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    if path == "/bench/requests" {
        let counts = front.counts.lock().map(|c| c.clone()).unwrap_or_default();
        return axum::Json(counts).into_response();
    }
    if let Ok(mut counts) = front.counts.lock() {
        *counts.entry(path.clone()).or_default() += 1;
    }
    let query = request.uri().query().unwrap_or_default().to_owned();
    let is_search = path == "/rest/bundles" && request.method() == "GET";
    let query = if is_search {
        with_limit(&query, front.default_limit)
    } else {
        query
    };
    let authorized = request.headers().contains_key("authorization");
    if is_search
        && authorized
        && let Some((content_type, body)) =
            front.cache.lock().ok().and_then(|c| c.get(&query).cloned())
    {
        return ([("content-type", content_type)], body).into_response();
    }
    match forward(&front, request, &path, &query).await {
        Ok((status, headers, body)) => {
            let content_type = headers
                .get("content-type")
                .cloned()
                .unwrap_or(HeaderValue::from_static("application/json"));
            if is_search
                && authorized
                && status == StatusCode::OK
                && let Ok(mut cache) = front.cache.lock()
            {
                cache.insert(query, (content_type.clone(), body.clone()));
            }
            (status, [("content-type", content_type)], body).into_response()
        }
        Err(e) => (StatusCode::BAD_GATEWAY, format!("bench front: {e:#}")).into_response(),
    }
}

async fn forward(
    front: &Front,
    request: Request,
    path: &str,
    query: &str,
) -> Result<(StatusCode, HeaderMap, Bytes)> {
    let url = if query.is_empty() {
        format!("{}{path}", front.inner)
    } else {
        format!("{}{path}?{query}", front.inner)
    };
    let method = request.method().clone();
    let mut headers = request.headers().clone();
    headers.remove("host");
    headers.remove("content-length");
    let body = axum::body::to_bytes(request.into_body(), usize::MAX).await?;
    let reply = front
        .http
        .request(method, url)
        .headers(headers)
        .body(body)
        .send()
        .await?;
    let status = reply.status();
    let headers = reply.headers().clone();
    let body = reply.bytes().await?;
    Ok((status, headers, body))
}

/// A running server child of this harness (`serve`, `count-proxy`): its URL; killed when
/// dropped.
#[derive(Debug)]
pub struct ServeChild {
    pub url: String,
    child: std::process::Child,
}

impl ServeChild {
    /// The fake CodaLab server with `bundles` staged bundles.
    pub fn start(bundles: usize) -> Result<Self> {
        Self::spawn(&["serve", "--bundles", &bundles.to_string()])
    }

    /// `bench-harness ARGS…`, which prints its URL on the first line of stdout and serves
    /// until its stdin closes.
    pub fn spawn(args: &[&str]) -> Result<Self> {
        let exe = std::env::current_exe()?;
        let mut child = std::process::Command::new(exe)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("starting bench-harness {}", args.join(" ")))?;
        let stdout = child.stdout.take().context("server child stdout")?;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let url = line.trim().to_owned();
        anyhow::ensure!(
            url.starts_with("http://127.0.0.1:"),
            "bench-harness {} printed {url:?}",
            args.join(" ")
        );
        Ok(Self { url, child })
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_a_limit_only_when_missing() {
        let q = "include=owner&worksheet=None&keywords=state%3Dstaged&keywords=.mine";
        assert_eq!(with_limit(q, 7), format!("{q}&keywords=.limit%3D7"));
        let ours = format!("{q}&keywords=.limit%3D5000");
        assert_eq!(with_limit(&ours, 7), ours);
    }
}
