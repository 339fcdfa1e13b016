//! Watches: every change the fake stores is an event in a log, and `?watch=1` streams the
//! events after the requested `resourceVersion` as the API server does (one JSON object per
//! line, `ADDED` / `MODIFIED` / `DELETED`, `BOOKMARK`s when asked for, an `ERROR` with a 410
//! `Expired` status when the version is older than the log keeps, the end at `timeoutSeconds`).

use super::world::World;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// One stored change.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    /// The resourceVersion the change made.
    pub(crate) rv: u64,
    /// The resource (`pods`, `codalab.org/codalabworkerpools` …).
    pub(crate) resource: String,
    /// Its namespace (empty for cluster-scoped objects).
    pub(crate) namespace: String,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub(crate) kind: &'static str,
    /// The object after the change (before it, for `DELETED`).
    pub(crate) object: Value,
}

/// What a watch wants.
#[derive(Clone)]
pub(crate) struct WatchFilter {
    pub(crate) resource: String,
    pub(crate) namespace: Option<String>,
    /// A test of the object (label and field selectors).
    pub(crate) matches: Arc<dyn Fn(&Value) -> bool + Send + Sync>,
}

impl std::fmt::Debug for WatchFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchFilter")
            .field("resource", &self.resource)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl WatchFilter {
    fn wants(&self, change: &Change) -> bool {
        change.resource == self.resource
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == change.namespace)
            && (self.matches)(&change.object)
    }
}

/// How long a watch idles before it sends a bookmark (when bookmarks are asked for).
const BOOKMARK_EVERY: Duration = Duration::from_millis(500);

/// Whether the query asks for a watch (`watch=1` or `watch=true`).
pub(crate) fn is_watch(query: &HashMap<String, String>) -> bool {
    query.get("watch").is_some_and(|w| w == "1" || w == "true")
}

/// The streamed answer to a watch of `filter` from the query's `resourceVersion`.
pub(crate) fn stream(
    world: Arc<Mutex<World>>,
    filter: WatchFilter,
    query: &HashMap<String, String>,
) -> Response {
    let (from, oldest, notify, kind) = {
        let w = world.lock().unwrap_or_else(|p| p.into_inner());
        let from = query
            .get("resourceVersion")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|v| *v > 0)
            .unwrap_or(w.resource_version);
        (
            from,
            w.oldest_watchable,
            w.notify.clone(),
            w.kind_of(&filter.resource),
        )
    };
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    let state = Streaming {
        world,
        filter,
        cursor: from,
        expired: from < oldest,
        deadline: Instant::now() + timeout,
        bookmarks,
        kind,
        notify,
        done: false,
    };
    let lines = futures_util::stream::unfold(state, |mut s| async move {
        let line = s.next().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(line), s))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(lines))
        .expect("a streaming response builds")
}

struct Streaming {
    world: Arc<Mutex<World>>,
    filter: WatchFilter,
    cursor: u64,
    expired: bool,
    deadline: Instant,
    bookmarks: bool,
    kind: (String, String),
    notify: Arc<tokio::sync::Notify>,
    done: bool,
}

impl Streaming {
    /// The next line to send; `None` ends the watch.
    async fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        if self.expired {
            self.done = true;
            let error = json!({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {} ", self.cursor),
                "reason": "Expired", "code": 410}});
            return Some(line(&error));
        }
        let notify = self.notify.clone();
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(change) = self.pending() {
                self.cursor = change.rv;
                return Some(line(&json!({"type": change.kind, "object": change.object})));
            }
            let idle = if self.bookmarks {
                BOOKMARK_EVERY
            } else {
                Duration::from_secs(3600)
            };
            let wake = (Instant::now() + idle).min(self.deadline);
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= self.deadline {
                        return None;
                    }
                    return Some(self.bookmark());
                }
            }
        }
    }

    /// The first change after the cursor this watch wants; moves the cursor over the others.
    fn pending(&mut self) -> Option<Change> {
        let w = self.world.lock().unwrap_or_else(|p| p.into_inner());
        let change = w
            .changes
            .iter()
            .filter(|c| c.rv > self.cursor)
            .find(|c| self.filter.wants(c))
            .cloned();
        if change.is_none() {
            self.cursor = self.cursor.max(w.resource_version);
        }
        change
    }

    fn bookmark(&self) -> Bytes {
        let (api_version, kind) = &self.kind;
        line(&json!({"type": "BOOKMARK", "object": {
            "kind": kind, "apiVersion": api_version,
            "metadata": {"resourceVersion": self.cursor.to_string()}}}))
    }
}

fn line(value: &Value) -> Bytes {
    let mut text = serde_json::to_vec(value).unwrap_or_default();
    text.push(b'\n');
    Bytes::from(text)
}
