//! Webhooks: `[[notify]]` in the config file. Each entry gets the manager's events
//! ([`crate::events`]) it asks for, POSTed as JSON, in order:
//!
//! ```toml
//! [[notify]]
//! url = "https://hooks.slack.com/services/T000/B000/XXXX"   # a secret: never logged
//! events = ["launch_failed", "pool_backing_off", "budget_reached", "server_unreachable"]
//! format = "slack"    # {"text": "..."} (mrkdwn-escaped); "raw" posts the event itself
//! digest_seconds = 60 # events of one kind and pool within a minute: one message (0: off)
//! ```
//!
//! Delivery never blocks the manager: [`spawn`] follows the manager's event stream, and each
//! webhook has its own queue ([`QUEUE`] events; when it is full, as behind a receiver that is
//! down, new events are dropped and counted) and its own task, which tries each event up to
//! [`Retry::attempts`] times with exponential backoff (a 5xx, 429 or network error is tried
//! again; another 4xx is not), after folding them ([`digest`]). Logs name a webhook by its
//! place in the file (`notify[0]`) and its host, never its URL (which may hold a token).

pub mod digest;

use crate::events::{Event, EventKind, Severity};
use crate::secret::Secret;
use digest::{Digest, Folded, Message};
use serde::{Deserialize, Serialize, Serializer};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// Events waiting per webhook before new ones are dropped.
pub const QUEUE: usize = 256;

/// `digest_seconds` when an entry does not set it.
pub const DIGEST_SECONDS: u64 = 60;

/// The longest `digest_seconds`: an hour.
pub const MAX_DIGEST_SECONDS: u64 = 3600;

fn default_digest_seconds() -> u64 {
    DIGEST_SECONDS
}

/// One `[[notify]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifySettings {
    /// Where to POST. It may hold a token: it is a secret, never logged or shown.
    #[serde(default, serialize_with = "redacted")]
    pub url: Secret,
    /// The event codes to send (`worker_launched`, `launch_failed` …); empty: every event.
    #[serde(default)]
    pub events: Vec<String>,
    /// The body: `slack` (`{"text": "…"}`, mrkdwn-escaped, also what Mattermost and Teams'
    /// Slack-compatible hooks take) or `raw` (the event as `/status` shows it).
    #[serde(default)]
    pub format: NotifyFormat,
    /// Events of one kind and pool within this many seconds go out as one message (a
    /// warning after a quiet spell goes out at once); 0 sends every event at once.
    #[serde(default = "default_digest_seconds")]
    pub digest_seconds: u64,
}

fn redacted<S: Serializer>(_: &Secret, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str("***")
}

/// The body of a webhook call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyFormat {
    /// `{"text": "…"}`.
    #[default]
    Slack,
    /// The event's JSON.
    Raw,
}

impl NotifySettings {
    /// What is wrong with entry `index`, naming it and the key.
    pub fn validate(&self, index: usize) -> Result<(), String> {
        if self.url.is_empty() {
            return Err(format!(
                "notify[{index}].url is required (the webhook to POST events to)"
            ));
        }
        let url = reqwest::Url::parse(self.url.expose())
            .map_err(|e| format!("notify[{index}].url is not a URL ({e})"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!(
                "notify[{index}].url must be an http:// or https:// URL with a host"
            ));
        }
        if self.digest_seconds > MAX_DIGEST_SECONDS {
            return Err(format!(
                "notify[{index}].digest_seconds is {}; at most {MAX_DIGEST_SECONDS} (an hour), 0 for none",
                self.digest_seconds
            ));
        }
        if let Some(unknown) = self
            .events
            .iter()
            .find(|e| !EventKind::CODES.contains(&e.as_str()))
        {
            return Err(format!(
                "notify[{index}].events: unknown event {unknown:?}; known: {}",
                EventKind::CODES.join(", ")
            ));
        }
        Ok(())
    }

    fn wants(&self, event: &Event) -> bool {
        self.events.is_empty() || self.events.iter().any(|e| e == event.kind.code())
    }

    /// How logs name entry `index`: its place and host, never the URL.
    pub fn label(&self, index: usize) -> String {
        let host = reqwest::Url::parse(self.url.expose())
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_default();
        format!("notify[{index}] ({host})")
    }
}

/// The JSON body for `event`.
pub fn body(format: NotifyFormat, event: &Event) -> serde_json::Value {
    match format {
        NotifyFormat::Raw => serde_json::to_value(event).unwrap_or_default(),
        NotifyFormat::Slack => {
            let mark = match event.severity {
                Severity::Warning => ":warning: ",
                Severity::Info => "",
            };
            let text = slack_escape(&event.message);
            serde_json::json!({ "text": format!("{mark}codalab-wm: {text}") })
        }
    }
}

/// The JSON body for `message`: an event's as [`body`]; a folded one says how many events
/// of which kind and pool came in the window, with the first and the last.
pub fn message_body(format: NotifyFormat, message: &Message) -> serde_json::Value {
    let folded = match message {
        Message::One(event) => return body(format, event),
        Message::Folded(folded) => folded,
    };
    let Folded {
        count,
        first,
        last,
        window,
    } = folded;
    let code = first.kind.code();
    let pool = first.kind.pool();
    match format {
        NotifyFormat::Raw => serde_json::json!({
            "event": "digest",
            "kind": code,
            "pool": pool,
            "count": count,
            "window_seconds": window.as_secs(),
            "first": first,
            "last": last,
        }),
        NotifyFormat::Slack => {
            let mark = match first.severity {
                Severity::Warning => ":warning: ",
                Severity::Info => "",
            };
            let within = match pool {
                Some(pool) => format!(" in pool {pool}"),
                None => String::new(),
            };
            let text = format!(
                "{count} × {code}{within} within {} s; first: {}; last: {}",
                window.as_secs(),
                first.message,
                last.message
            );
            let text = slack_escape(&text);
            serde_json::json!({ "text": format!("{mark}codalab-wm: {text}") })
        }
    }
}

/// `text` as Slack mrkdwn shows it literally: `&`, `<` and `>` escaped as Slack documents
/// ("Escaping text"), so that a message quoting a server's error line cannot ping a channel
/// (`<!channel>`) or show a link under a text of its choice (`<https://a|b>`).
fn slack_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// How often and how patiently a call is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Tries per event.
    pub attempts: u32,
    /// Wait before the second try; doubled after each.
    pub first_delay: Duration,
    /// Time limit of one try.
    pub timeout: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: 4,
            first_delay: Duration::from_secs(2),
            timeout: Duration::from_secs(10),
        }
    }
}

/// Starts delivering `events` to every webhook of `settings` (already validated). Returns
/// when the tasks are started; they end when the event stream does.
pub fn spawn(
    settings: Vec<NotifySettings>,
    mut events: broadcast::Receiver<Event>,
    retry: Retry,
) -> reqwest::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(retry.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let mut queues = Vec::new();
    for (index, hook) in settings.into_iter().enumerate() {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let label = hook.label(index);
        let format = serde_json::to_value(hook.format).unwrap_or_default();
        let digest_seconds = hook.digest_seconds;
        tracing::info!(webhook = %label, events = ?hook.events, %format, digest_seconds, "sending events to a webhook");
        tokio::spawn(deliver(
            client.clone(),
            hook.clone(),
            label.clone(),
            receiver,
            retry,
        ));
        queues.push((hook, label, sender, 0_u64));
    }
    tokio::spawn(async move {
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(broadcast::error::RecvError::Lagged(lost)) => {
                    tracing::warn!(
                        lost,
                        "webhooks fell behind the manager's events; some were not sent"
                    );
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => break,
            };
            for (hook, label, sender, dropped) in &mut queues {
                if hook.wants(&event) && sender.try_send(event.clone()).is_err() {
                    *dropped += 1;
                    tracing::warn!(webhook = %label, event = event.kind.code(), dropped = *dropped, "webhook queue full (receiver down or slow): event dropped");
                }
            }
        }
    });
    Ok(())
}

/// Sends a webhook's events in order, folded by its digest; what is still folded when the
/// stream ends is sent then.
async fn deliver(
    client: reqwest::Client,
    hook: NotifySettings,
    label: String,
    mut queue: mpsc::Receiver<Event>,
    retry: Retry,
) {
    let started = tokio::time::Instant::now();
    let mut digest = Digest::new(Duration::from_secs(hook.digest_seconds));
    loop {
        let due = digest.next_due().map(|at| started + at);
        let messages = tokio::select! {
            event = queue.recv() => match event {
                Some(event) => digest.push(event, started.elapsed()).into_iter().collect(),
                None => break,
            },
            () = sleep_until(due), if due.is_some() => digest.due(started.elapsed()),
        };
        for message in messages {
            send(&client, &hook, &label, &message, retry).await;
        }
    }
    for message in digest.flush() {
        send(&client, &hook, &label, &message, retry).await;
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

/// Sends one message, retrying as `retry` says.
async fn send(
    client: &reqwest::Client,
    hook: &NotifySettings,
    label: &str,
    message: &Message,
    retry: Retry,
) {
    let body = message_body(hook.format, message);
    let mut delay = retry.first_delay;
    for attempt in 1..=retry.attempts {
        match post(client, &hook.url, &body).await {
            Ok(()) => return,
            Err((error, again)) if again && attempt < retry.attempts => {
                tracing::debug!(webhook = %label, attempt, %error, "webhook call failed; trying again");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err((error, _)) => {
                let (event, events) = (message.code(), message.events());
                tracing::warn!(webhook = %label, event, events, attempts = attempt, %error, "webhook call failed; not delivered");
                return;
            }
        }
    }
}

/// One POST. The error says whether to try again; it never holds the URL.
async fn post(
    client: &reqwest::Client,
    url: &Secret,
    body: &serde_json::Value,
) -> Result<(), (String, bool)> {
    match client.post(url.expose()).json(body).send().await {
        Ok(reply) if reply.status().is_success() => Ok(()),
        Ok(reply) => {
            let status = reply.status();
            let again = status.is_server_error() || status.as_u16() == 429;
            Err((format!("HTTP {status}"), again))
        }
        Err(error) => Err((error.without_url().to_string(), true)),
    }
}

#[cfg(test)]
mod tests;
