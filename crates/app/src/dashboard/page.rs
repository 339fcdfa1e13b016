//! The page: its head (title, refresh, inline CSS), the sections of the
//! [presentation](crate::present) in order ([`super::html`]), and the charts.

use super::history::{BUCKET_SECONDS, Bucket, History};
use super::{Page, html};
use crate::chart::{self, Series, escape};
use crate::present::{self, CHARTS_BEFORE, duration, utc};
use crate::simulate::SavedAdvice;
use codalab_wm_core::status::Status;
use std::fmt::Write as _;

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 6px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:4px 0}th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
th{background:#f3f3f3;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#777}.warning{background:#fff4e0}.bad{background:#fde8e8;color:#900}.ok{color:#276738}
.error{background:#fde8e8;border:1px solid #e99;padding:6px 10px;margin:6px 0;white-space:pre-wrap}
.charts{display:flex;flex-wrap:wrap;gap:16px}.charts figure{margin:0;width:400px;max-width:100%}
th.group{text-align:center;font-weight:normal;color:#555;background:#fafafa}
figcaption{font-weight:600;margin:4px 0}summary{cursor:pointer;color:#444;margin:6px 0}.chart{width:100%;height:auto}
.chart text{font:11px system-ui,sans-serif;fill:#555}code{font-size:12px}
";

/// The dashboard page for `status` and `history` (see the [module](super) doc).
pub fn render(status: &Status, history: &History, page: &Page) -> String {
    render_with_advice(status, history, page, None)
}

/// [`render`], with `advise`'s last answer when there is one.
pub fn render_with_advice(
    status: &Status,
    history: &History,
    page: &Page,
    advice: Option<&SavedAdvice>,
) -> String {
    let mut out = String::with_capacity(32 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{}\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>cl-worker-manager: {} pools, {} staged</title><style>{STYLE}</style></head><body>",
        page.refresh.as_secs(),
        status.pools.len(),
        status.staged
    );
    let shown = present::present(status, history.decisions());
    let stale = present::stale(status, page.now_unix_seconds, page.refresh.as_secs());
    html::health(&mut out, &shown.health, stale.as_deref());
    for section in &shown.sections {
        if section.id == CHARTS_BEFORE {
            charts(&mut out, status, history);
        }
        html::section(&mut out, section);
    }
    if let Some(advice) = advice {
        advice_section(&mut out, advice);
    }
    let _ = writeln!(
        out,
        "<p class=\"muted\">Read-only. Rendered at {}; reloads every {} s. \
         The same data as JSON: <a href=\"/status\">/status</a>; metrics: \
         <a href=\"/metrics\">/metrics</a>.</p></body></html>",
        escape(&utc(page.now_unix_seconds)),
        page.refresh.as_secs()
    );
    out
}

/// `advise`'s last answer: when, the short answer, and its frontier as an image (an SVG read
/// from the state dir is shown as an image, where no script of it can run).
fn advice_section(out: &mut String, advice: &SavedAdvice) {
    use base64::Engine as _;
    let svg = base64::engine::general_purpose::STANDARD.encode(&advice.svg);
    let _ = write!(
        out,
        "<h2 id=\"advice\">Advice</h2><p class=\"muted\">From <code>cl-worker-manager advise</code> \
         at {}, on the manager's history (run it again for today's).</p><p style=\"white-space:pre-wrap\">{}</p>\
         <img class=\"chart\" style=\"max-width:760px\" alt=\"wait p90 against cost a day of each setting replayed\" \
         src=\"data:image/svg+xml;base64,{svg}\">",
        escape(&utc(advice.at_unix_seconds)),
        escape(&advice.summary)
    );
}

/// Three charts of the history: workers by state, staged bundles, launches and failures.
fn charts(out: &mut String, status: &Status, history: &History) {
    let now = status.uptime_seconds as f64;
    let oldest = history.buckets().next().map_or(now, |b| start(b) as f64);
    let x_range = (oldest.min(now - 600.0), now);
    let label = |x: f64| match (now - x).round() as u64 {
        0 => "now".to_owned(),
        ago => format!("-{}", duration(ago)),
    };
    let line = |name, color, value: fn(&Bucket) -> u32| Series {
        name,
        color,
        points: history
            .buckets()
            .map(|b| (at(b, now), f64::from(value(b))))
            .collect(),
    };
    let workers = [
        line("starting", "#e69f00", |b| b.starting),
        line("ready", "#009e73", |b| b.ready),
        line("busy", "#0072b2", |b| b.busy),
        line("vanished", "#56b4e9", |b| b.vanished),
        line("lost", "#d55e00", |b| b.lost),
        line("pending", "#999999", |b| b.pending),
    ];
    let staged = [
        line("staged", "#cc79a7", |b| b.staged),
        line("active jobs", "#0072b2", |b| b.active),
    ];
    let launches = [
        line("launches", "#009e73", |b| b.launches),
        line("failures", "#d55e00", |b| b.failures),
    ];
    let _ = write!(
        out,
        "<h2 id=\"history\">History <span class=\"muted\">(all pools, one point a minute, up to \
         6 hours; in memory: a restarted manager starts again)</span></h2>{}<div class=\"charts\">",
        match history.buckets().len() {
            0 | 1 => "<p class=\"muted\">The lines start after the first minute.</p>",
            _ => "",
        }
    );
    let figures = [
        ("chart-workers", "Workers by state", &workers[..]),
        (
            "chart-staged",
            "Staged bundles and active jobs",
            &staged[..],
        ),
        (
            "chart-launches",
            "Launches and failures per minute",
            &launches[..],
        ),
    ];
    for (id, title, series) in figures {
        let _ = write!(
            out,
            "<figure><figcaption>{title}</figcaption>{}</figure>",
            chart::line_chart(id, title, series, x_range, &label)
        );
    }
    out.push_str("</div>");
}

/// When a bucket starts (manager clock, seconds).
fn start(bucket: &Bucket) -> u64 {
    bucket.minute * BUCKET_SECONDS
}

/// Where a bucket is drawn: at its last second, or now for the running minute.
fn at(bucket: &Bucket, now: f64) -> f64 {
    ((start(bucket) + BUCKET_SECONDS - 1) as f64).min(now)
}
