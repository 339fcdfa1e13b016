//! Folding a webhook's events so that a troubled hour is a few messages, not one per event
//! (`digest_seconds` of a `[[notify]]` entry; codalab-worksheets#3161 is 617 "worker offline"
//! mails).
//!
//! Events are folded by kind and pool. The first event of a kind and pool after a quiet
//! spell opens a window of `digest_seconds`: a warning goes out at once, an info event waits
//! for the window's end. Events of that kind and pool within the window are folded into one
//! message at its end: the count and the first and last of them (a window that folded one
//! event sends it as it is). While events keep coming, windows follow one another, so a
//! flood is one message a window; a window with nothing folded ends the spell. The clock is
//! the caller's (`now`: time since the webhook's task started), so the rule is pure.

use crate::events::{Event, Severity};
use std::collections::BTreeMap;
use std::time::Duration;

/// What a webhook sends: one event, or events of one kind and pool folded.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// One event, as it is.
    One(Event),
    /// `count` events of one kind and pool within `window`.
    Folded(Folded),
}

impl Message {
    /// The code of its events' kind.
    pub fn code(&self) -> &'static str {
        match self {
            Message::One(event) => event.kind.code(),
            Message::Folded(folded) => folded.first.kind.code(),
        }
    }

    /// How many events it stands for.
    pub fn events(&self) -> usize {
        match self {
            Message::One(_) => 1,
            Message::Folded(folded) => folded.count,
        }
    }
}

/// Events of one kind and pool folded into one message.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    /// How many.
    pub count: usize,
    /// The first of them.
    pub first: Event,
    /// The last of them.
    pub last: Event,
    /// The window they came in.
    pub window: Duration,
}

/// The kind's code and the pool (empty for none).
type Key = (&'static str, String);

/// One open window.
#[derive(Debug)]
struct Window {
    /// When it ends.
    until: Duration,
    /// The events folded so far: count, first, last.
    folded: Option<(usize, Event, Event)>,
}

/// The folding state of one webhook.
#[derive(Debug)]
pub struct Digest {
    window: Duration,
    open: BTreeMap<Key, Window>,
}

impl Digest {
    /// Folding over `window`; a zero window sends every event at once.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            open: BTreeMap::new(),
        }
    }

    /// `event` arrived at `now`: what to send at once, if anything.
    pub fn push(&mut self, event: Event, now: Duration) -> Option<Message> {
        if self.window.is_zero() {
            return Some(Message::One(event));
        }
        let key = (
            event.kind.code(),
            event.kind.pool().unwrap_or("").to_owned(),
        );
        if let Some(window) = self.open.get_mut(&key) {
            window.fold(event);
            return None;
        }
        let mut window = Window {
            until: now + self.window,
            folded: None,
        };
        let at_once = event.severity == Severity::Warning;
        let message = match at_once {
            true => Some(Message::One(event)),
            false => {
                window.fold(event);
                None
            }
        };
        self.open.insert(key, window);
        message
    }

    /// When the next window ends, if one is open.
    pub fn next_due(&self) -> Option<Duration> {
        self.open.values().map(|w| w.until).min()
    }

    /// The messages of the windows that ended by `now`. A window that folded events is
    /// followed by another; one that folded none closes.
    pub fn due(&mut self, now: Duration) -> Vec<Message> {
        let mut messages = Vec::new();
        let window = self.window;
        self.open.retain(|_, open| {
            if open.until > now {
                return true;
            }
            match open.take(window) {
                Some(message) => {
                    messages.push(message);
                    open.until += window;
                    true
                }
                None => false,
            }
        });
        messages
    }

    /// Every message still folded (the event stream ended).
    pub fn flush(&mut self) -> Vec<Message> {
        let window = self.window;
        let open = std::mem::take(&mut self.open);
        open.into_values()
            .filter_map(|mut w| w.take(window))
            .collect()
    }
}

impl Window {
    fn fold(&mut self, event: Event) {
        self.folded = Some(match self.folded.take() {
            None => (1, event.clone(), event),
            Some((count, first, _)) => (count + 1, first, event),
        });
    }

    fn take(&mut self, window: Duration) -> Option<Message> {
        let (count, first, last) = self.folded.take()?;
        Some(match count {
            1 => Message::One(first),
            _ => Message::Folded(Folded {
                count,
                first,
                last,
                window,
            }),
        })
    }
}

#[cfg(test)]
mod tests;
