//! The dashboard the `--listen` server shows at `/`: one server-rendered HTML page (no script,
//! no external file: works offline and refreshes itself) with the pools, the demand no worker
//! is coming for and why, the last decisions with their reasons, charts of the last hours
//! drawn as inline SVG ([`crate::chart`]), the budgets, the recent events and the server's health.
//!
//! Pure: the page is a function of a status snapshot ([`Status`]), the [`History`] built from
//! the snapshots, and the time ([`render`]). Its sections and their words are the
//! [presenter](crate::present)'s, the same as `cl-worker-manager status` prints (`html.rs` lays
//! them out). It shows nothing the `/status` JSON does not (no secrets, no actions), and
//! escapes everything that comes from outside (pool and bundle names, errors).

pub mod history;
mod html;
mod page;

pub use crate::present::utc;
pub use history::History;
pub use page::{render, render_with_advice};

use std::time::Duration;

#[cfg(doc)]
use codalab_wm_core::status::Status;

/// How the page is rendered beyond the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// The browser reloads the page after this long (`<meta http-equiv="refresh">`).
    pub refresh: Duration,
    /// Now, in seconds since the Unix epoch (how old the snapshot is).
    pub now_unix_seconds: u64,
}

impl Page {
    /// Refreshes every `sleep_time` (the manager's tick), between 5 s and 60 s.
    pub fn new(sleep_time: Duration, now_unix_seconds: u64) -> Self {
        Self {
            refresh: sleep_time.clamp(Duration::from_secs(5), Duration::from_secs(60)),
            now_unix_seconds,
        }
    }
}

#[cfg(test)]
mod tests;
