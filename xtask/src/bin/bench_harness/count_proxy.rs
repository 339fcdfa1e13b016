//! `bench-harness count-proxy --upstream URL`: a plain HTTP reverse proxy on 127.0.0.1 that
//! forwards every request to `URL` unchanged (method, path, query, headers, body) and counts
//! them, so that the HTTP requests a backend sends per tick are counted on the wire, the same
//! way for our Rust client and for upstream's Python one.
//!
//! `GET /bench/requests` answers the counts so far as JSON, keyed `"METHOD /path"` (the AWS
//! Batch API is REST-JSON: one path per operation, e.g. `POST /v1/listjobs`). It prints its
//! URL on one line of stdout and serves until stdin is closed (see [`ServeChild::spawn`]).
//!
//! [`ServeChild::spawn`]: crate::serve::ServeChild::spawn

use crate::required;
use crate::serve::announce_and_wait;
use anyhow::Result;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Debug)]
struct Proxy {
    upstream: String,
    http: reqwest::Client,
    counts: Mutex<BTreeMap<String, u64>>,
}

pub fn run(args: &[String]) -> Result<()> {
    let upstream: String = required(args, "--upstream")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let proxy = Arc::new(Proxy {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            counts: Mutex::default(),
        });
        let app = axum::Router::new().fallback(handle).with_state(proxy);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        announce_and_wait(&url).await
    })
}

async fn handle(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    if path == "/bench/requests" {
        let counts = proxy.counts.lock().map(|c| c.clone()).unwrap_or_default();
        return axum::Json(counts).into_response();
    }
    if let Ok(mut counts) = proxy.counts.lock() {
        *counts
            .entry(format!("{} {path}", request.method()))
            .or_default() += 1;
    }
    match forward(&proxy, request).await {
        Ok(response) => response,
        Err(e) => (StatusCode::BAD_GATEWAY, format!("count-proxy: {e:#}")).into_response(),
    }
}

async fn forward(proxy: &Proxy, request: Request) -> Result<Response> {
    let path_and_query = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let method = request.method().clone();
    let mut headers = request.headers().clone();
    headers.remove("content-length");
    let body = axum::body::to_bytes(request.into_body(), usize::MAX).await?;
    let reply = proxy
        .http
        .request(method, format!("{}{path_and_query}", proxy.upstream))
        .headers(headers)
        .body(body)
        .send()
        .await?;
    let status = reply.status();
    let mut headers = reply.headers().clone();
    headers.remove("content-length");
    headers.remove("transfer-encoding");
    let body = reply.bytes().await?;
    let mut response = (status, body).into_response();
    response.headers_mut().extend(headers);
    Ok(response)
}

/// The number of requests in `counts` (from `GET /bench/requests`) whose key starts with
/// `prefix` (e.g. `"POST /v1/listjobs"`; `""` for all).
pub fn total(counts: &BTreeMap<String, u64>, prefix: &str) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, n)| n)
        .sum()
}
