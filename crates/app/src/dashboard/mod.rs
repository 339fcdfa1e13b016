//! The dashboard the `--listen` server shows at `/`: one server-rendered HTML page (no script,
//! no external file: works offline and refreshes itself) with the pools, the demand no worker
//! is coming for and why, the last decisions with their reasons, charts of the last hours
//! drawn as inline SVG ([`crate::chart`]), the budgets, the recent events and the server's health.
//!
//! Pure: the page is a function of a status snapshot ([`Status`]), the [`History`] built from
//! the snapshots, and the time ([`render`]). It shows nothing the `/status` JSON does not (no
//! secrets, no actions), and escapes everything that comes from outside (pool and bundle
//! names, errors).

mod estimates;
pub mod history;
mod page;
mod sections;

pub use history::History;
pub use page::render;

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

/// `2026-11-23 17:05:09 UTC` for seconds since the Unix epoch.
pub fn utc(unix_seconds: u64) -> String {
    let (days, rest) = (unix_seconds / 86_400, unix_seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// The date of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
