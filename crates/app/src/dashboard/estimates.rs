//! The page's "When they start" section: the start-time estimate of each staged bundle read
//! at the last tick ([`codalab_wm_core::estimate`]), the counts per kind first.

use crate::chart::escape;
use codalab_wm_core::status::Status;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Bundles listed one by one (`/status` has every one).
const MAX_ROWS: usize = 20;

/// When the staged bundles read are expected to start, and why.
pub(super) fn estimates(out: &mut String, status: &Status) {
    if status.estimates.is_empty() {
        return;
    }
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for estimate in &status.estimates {
        *kinds.entry(estimate.estimate.kind()).or_default() += 1;
    }
    let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let _ = write!(
        out,
        "<h2 id=\"estimates\">When they start <span class=\"muted\">({})</span></h2>\
         <table id=\"estimate-rows\"><tr><th>Bundle</th><th>Expected</th></tr>",
        escape(&counts.join(", "))
    );
    for estimate in status.estimates.iter().take(MAX_ROWS) {
        let _ = write!(
            out,
            "<tr data-bundle=\"{0}\" data-kind=\"{1}\"><td><code>{0}</code></td><td>{2}</td></tr>",
            escape(&estimate.uuid),
            estimate.estimate.kind(),
            escape(&estimate.text)
        );
    }
    out.push_str("</table>");
    if let Some(more) = status.estimates.len().checked_sub(MAX_ROWS)
        && more > 0
    {
        let _ = write!(
            out,
            "<p class=\"muted\">… and {more} more in <a href=\"/status\">/status</a>.</p>"
        );
    }
}
