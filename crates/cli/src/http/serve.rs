//! How the `--listen` server takes connections: [`codalab_wm_app::listen::accept`] caps
//! them (per address too), reads each request head within its timeouts, lets an idle
//! connection give way to a new one, and cuts each after [`Limits::connection`] (review
//! 2026-11-24 §2.1: axum's own `serve` has none of it; review 2026-11-27 §13: probes are
//! never starved); hyper serves one request on each, with tokio's timer for its
//! `header_read_timeout`.

use axum::Router;
use codalab_wm_app::listen::{Connection, Limits, accept};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Serves `app` on `listener` within `limits`, until the runtime ends.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits) {
    accept(listener, limits, move |stream| {
        serve_connection(stream, app.clone(), limits)
    })
    .await;
}

/// Serves one request on `stream` (its head already read, so hyper's header timeout is only
/// a second guard).
async fn serve_connection(stream: Connection, app: Router, limits: Limits) {
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    if let Err(error) = connection.await {
        tracing::debug!(%error, "--listen: a connection ended in error");
    }
}

#[cfg(test)]
mod tests;
