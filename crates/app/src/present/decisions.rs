//! The pools' decisions with their reasons: one record per pool and decision, with how long
//! it has held ([`DecisionRecord`]), and their section, newest first.

use super::words::duration;
use super::{Cell, Column, Look, Row, Section, Span, Table, Tone, titled};
use codalab_wm_core::pools::PoolDecision;
use codalab_wm_core::status::Status;

/// Reasons kept per decision (a tick that stops many jobs has one reason per job).
pub const MAX_REASONS: usize = 8;
/// Longest reason text kept, in bytes (errors can be long).
pub const MAX_TEXT: usize = 300;

/// One decision of one pool, with how long it has held (an unchanged decision is one record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    /// The pool.
    pub pool: String,
    /// First tick with this decision (manager clock, seconds).
    pub since_seconds: u64,
    /// Last tick with this decision (manager clock, seconds).
    pub last_seconds: u64,
    /// Workers launched by it.
    pub launches: u32,
    /// Jobs it stopped.
    pub stops: usize,
    /// The target (target mode).
    pub target: Option<u32>,
    /// Each reason's code and its text (the latest tick's: figures such as seconds left move on).
    pub reasons: Vec<(&'static str, String)>,
}

impl DecisionRecord {
    /// `decision`, made at `at` (manager clock), its first [`MAX_REASONS`] reasons kept.
    pub fn from_decision(decision: &PoolDecision, at: u64) -> Self {
        Self {
            pool: decision.pool.clone(),
            since_seconds: at,
            last_seconds: at,
            launches: decision.launches,
            stops: decision.stops.len(),
            target: decision.target,
            reasons: decision
                .reasons
                .iter()
                .take(MAX_REASONS)
                .map(|r| (r.code(), cut(r.to_string())))
                .collect(),
        }
    }

    /// The decisions of the snapshot's last tick, one per pool that made one.
    pub fn last_tick(status: &Status) -> Vec<Self> {
        let at = status.last_success_seconds.unwrap_or(status.uptime_seconds);
        (status.pools.iter())
            .filter_map(|p| p.last_decision.as_ref())
            .map(|decision| Self::from_decision(decision, at))
            .collect()
    }
}

/// `text` cut at [`MAX_TEXT`] bytes (on a character boundary), with `…` when cut.
fn cut(mut text: String) -> String {
    if text.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

const COLUMNS: &[Column] = &titled(["When", "Pool", "Launch", "Stop", "Why"]);

/// `records` (oldest first), newest first, each reason's code with its words.
pub(super) fn decisions<'a>(
    records: impl DoubleEndedIterator<Item = &'a DecisionRecord>,
    status: &Status,
) -> Section {
    let rows: Vec<Row> = records
        .rev()
        .map(|record| {
            let mut why = Vec::new();
            for (code, text) in &record.reasons {
                if !why.is_empty() {
                    why.push(Span::line_break());
                }
                why.push(Span::with(Look::Code, *code));
                why.push(Span::plain(format!(" {text}")));
            }
            let cells = vec![
                Cell::text(when(record, status)),
                Cell::text(&record.pool),
                Cell::number(record.launches),
                Cell::number(record.stops),
                Cell::spans(why).field("reasons"),
            ];
            Row::new(vec![("pool", record.pool.clone())], cells)
        })
        .collect();
    let section = Section::new("decisions-heading", "Last decisions (newest first)");
    match rows.is_empty() {
        true => section.saying(Tone::Muted, "None yet."),
        false => section.with_table(Table::new("decisions", COLUMNS, rows), 0),
    }
}

/// `since 3m 02s ago (current)` for a decision the last tick still made, `7m 31s ago, for
/// 21s` for one held over several ticks, `9m 07s ago` for one tick's.
fn when(record: &DecisionRecord, status: &Status) -> String {
    let ago = duration(status.uptime_seconds.saturating_sub(record.since_seconds));
    let current = status
        .last_success_seconds
        .is_some_and(|at| record.last_seconds >= at);
    match record.last_seconds.saturating_sub(record.since_seconds) {
        _ if current && record.last_seconds > record.since_seconds => {
            format!("since {ago} ago (current)")
        }
        0 => format!("{ago} ago"),
        held => format!("{ago} ago, for {}", duration(held)),
    }
}
