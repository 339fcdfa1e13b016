//! Where the manager's [`Event`]s go: the log (target `codalab_wm::event`, warnings for what
//! an admin may act on; at debug for what the manager's own lines already say), the last [`RECENT_EVENTS`] for the status snapshot, and every
//! subscriber ([`Manager::subscribe_events`]: the webhooks, tests). A subscriber that falls
//! behind loses the oldest events (a broadcast channel); it never slows the loop.
//!
//! Besides the tick's own events (`from_tick` in `manager/tick.rs`), the journal notices the
//! server becoming unreachable and coming back: once per streak of failed ticks.

use super::Manager;
use crate::events::{Event, EventKind, RECENT_EVENTS, Severity};
use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

/// Events a slow subscriber may fall behind by before it loses the oldest.
const SUBSCRIBER_BACKLOG: usize = 1024;

/// The manager's event journal.
#[derive(Debug)]
pub(super) struct Journal {
    recent: VecDeque<Event>,
    started_unix: u64,
    sender: broadcast::Sender<Event>,
    /// Since when (manager clock) the server is unreachable, once that was announced.
    unreachable_since: Option<Duration>,
    /// The events since the history last took them (`None`: no history is kept).
    for_history: Option<Vec<Event>>,
}

impl Default for Journal {
    fn default() -> Self {
        let started_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self {
            recent: VecDeque::new(),
            started_unix,
            sender: broadcast::channel(SUBSCRIBER_BACKLOG).0,
            unreachable_since: None,
            for_history: None,
        }
    }
}

impl Journal {
    /// Records `kind` at `now` (manager clock): logs it, keeps it, hands it to subscribers.
    pub(super) fn record(&mut self, now: Duration, kind: EventKind) {
        let event = Event::new(kind, now.as_secs(), self.started_unix);
        let code = event.kind.code();
        match event.severity {
            _ if event.kind.logged_elsewhere() => {
                tracing::debug!(target: "codalab_wm::event", event = code, "{}", event.message)
            }
            Severity::Warning => {
                tracing::warn!(target: "codalab_wm::event", event = code, "{}", event.message)
            }
            Severity::Info => {
                tracing::info!(target: "codalab_wm::event", event = code, "{}", event.message)
            }
        }
        if self.recent.len() == RECENT_EVENTS {
            self.recent.pop_front();
        }
        self.recent.push_back(event.clone());
        if let Some(events) = &mut self.for_history {
            events.push(event.clone());
        }
        // No subscriber is not an error.
        let _ = self.sender.send(event);
    }

    /// A tick failed with a server error (`kind` from the error policy): the first of a
    /// streak is announced.
    pub(super) fn tick_failed(&mut self, now: Duration, kind: &str, error: String) {
        let server = matches!(
            kind,
            "unreachable" | "server_error" | "rate_limited" | "unauthenticated" | "invalid_reply"
        );
        if server && self.unreachable_since.is_none() {
            self.unreachable_since = Some(now);
            self.record(now, EventKind::ServerUnreachable { error });
        }
    }

    /// A tick succeeded: the server is back if it was announced unreachable.
    pub(super) fn tick_succeeded(&mut self, now: Duration) {
        if let Some(since) = self.unreachable_since.take() {
            let after_seconds = now.saturating_sub(since).as_secs();
            self.record(now, EventKind::ServerBack { after_seconds });
        }
    }

    pub(super) fn recent(&self) -> Vec<Event> {
        self.recent.iter().cloned().collect()
    }

    /// From now on, keeps the events for the history ([`Journal::take_for_history`]).
    pub(super) fn keep_for_history(&mut self) {
        self.for_history.get_or_insert_with(Vec::new);
    }

    /// The events since the last call.
    pub(super) fn take_for_history(&mut self) -> Vec<Event> {
        self.for_history
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    pub(super) fn started_unix(&self) -> u64 {
        self.started_unix
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }
}

impl Manager {
    /// Every event from now on (see [`crate::events`]). A receiver that falls more than 1,024
    /// events behind loses the oldest (`RecvError::Lagged`); the loop never waits for it.
    pub fn subscribe_events(&self) -> broadcast::Receiver<Event> {
        self.journal.subscribe()
    }
}
