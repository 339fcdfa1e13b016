//! The compact text view of a status snapshot, as `cl-worker-manager status` prints it (like
//! `ray status`): the [presentation](crate::present) of the snapshot laid out in aligned
//! columns, with the same sections and words as the page. A pool is a card (a line for its
//! name and worker, then one per group of columns): its row is too wide for a terminal.
//!
//! `status` reads the `/status` document back into [`Status`] ([`read`]: missing fields take
//! their defaults), so that a snapshot read from a running manager, one from a tick run here
//! and the page's are one structure, presented once.

use crate::present::{DecisionRecord, Health, Look, Section, Span, TITLE, Table, Tone, present};
use codalab_wm_core::status::Status;
use serde::Deserialize;
use std::fmt::Write as _;

/// The `/status` document read back into the snapshot.
pub fn read(document: serde_json::Value) -> serde_json::Result<Status> {
    Status::deserialize(document)
}

/// The text view of `status`, with the decisions of its last tick.
pub fn render(status: &Status) -> String {
    let decisions = DecisionRecord::last_tick(status);
    let shown = present(status, decisions.iter());
    let mut out = String::new();
    health(&mut out, &shown.health);
    for section in &shown.sections {
        self::section(&mut out, section);
    }
    out
}

/// `cl-worker-manager: Up … · 41 ticks · …`, and the last tick's error.
fn health(out: &mut String, health: &Health) {
    let facts: Vec<String> = health.facts.iter().map(|fact| text(fact)).collect();
    let _ = writeln!(out, "{TITLE}: {}", facts.join(" · "));
    if let Some(error) = &health.error {
        let _ = writeln!(out, "{error}");
    }
}

/// A blank line, the heading (its note in parentheses), the table, the sentences.
fn section(out: &mut String, section: &Section) {
    let note = (section.note.as_ref()).map_or(String::new(), |note| format!(" ({note})"));
    let _ = writeln!(out, "\n{}{note}", section.heading);
    match &section.table {
        Some(table) if table.cards => cards(out, table),
        Some(table) => self::table(out, table),
        None => {}
    }
    for sentence in &section.sentences {
        let _ = writeln!(out, "  {}", text(&sentence.spans));
    }
}

/// The words of `spans`: a break starts a new line, a tip follows in parentheses.
fn text(spans: &[Span]) -> String {
    let mut out = String::new();
    for span in spans {
        match span.look {
            Look::Break => out.push('\n'),
            _ => out.push_str(&span.text),
        }
        if let Some(tip) = &span.tip {
            let _ = write!(out, " ({tip})");
        }
    }
    out
}

/// The titles, then a line per row (more when a cell has several), columns aligned (numbers
/// to the right); a row that needs attention is marked `!`.
fn table(out: &mut String, table: &Table) {
    let grid = grid(table);
    let numeric: Vec<bool> = (0..table.columns.len())
        .map(|i| (table.rows.iter()).any(|r| r.cells.get(i).is_some_and(|c| c.numeric)))
        .collect();
    let widths: Vec<usize> = (0..table.columns.len())
        .map(|i| {
            let lines = grid.iter().filter_map(|(_, cells)| cells.get(i)).flatten();
            lines.map(|line| line.chars().count()).max().unwrap_or(0)
        })
        .collect();
    for (tone, cells) in &grid {
        let mark = match tone {
            Tone::Warning | Tone::Bad => "!",
            _ => " ",
        };
        let height = cells.iter().map(Vec::len).max().unwrap_or(0).max(1);
        for line in 0..height {
            let mut text = format!("{mark} ");
            for (i, cell) in cells.iter().enumerate() {
                let words = cell.get(line).map_or("", String::as_str);
                let width = if i + 1 == cells.len() { 0 } else { widths[i] };
                let _ = match numeric[i] {
                    true => write!(text, "{words:>width$}  "),
                    false => write!(text, "{words:<width$}  "),
                };
            }
            let _ = writeln!(out, "{}", text.trim_end());
        }
    }
}

/// The titles, then each row with its tone: every cell as its lines.
fn grid(table: &Table) -> Vec<(Tone, Vec<Vec<String>>)> {
    let titles = (table.columns.iter()).map(|c| vec![c.title.to_owned()]);
    let rows = table.rows.iter().map(|row| {
        let cells = (row.cells.iter())
            .map(|cell| text(&cell.spans).lines().map(str::to_owned).collect())
            .collect();
        (row.tone, cells)
    });
    [(Tone::Plain, titles.collect())]
        .into_iter()
        .chain(rows)
        .collect()
}

/// Each row as a card: its first cell, then a line per group of columns (`Title: value`, or
/// `Group: Title value, …`).
fn cards(out: &mut String, table: &Table) {
    let whole = [("", table.columns.len())];
    let groups = match table.groups.is_empty() {
        true => &whole[..],
        false => &table.groups[..],
    };
    for row in &table.rows {
        let cell = |i: usize| row.cells.get(i).map_or(String::new(), |c| text(&c.spans));
        let _ = writeln!(out, "  {}", cell(0).replace('\n', "  "));
        let mut first = 0;
        for (group, count) in groups {
            let columns = (first..first + count).filter(|&i| i > 0);
            first += count;
            let items: Vec<String> = columns
                .map(|i| {
                    let (title, value) = (table.columns[i].title, cell(i).replace('\n', " "));
                    match group.is_empty() {
                        true => format!("{title}: {value}"),
                        false => format!("{title} {value}"),
                    }
                })
                .collect();
            let _ = match (items.is_empty(), group.is_empty()) {
                (true, _) => Ok(()),
                (false, true) => writeln!(out, "    {}", items.join(" · ")),
                (false, false) => writeln!(out, "    {group}: {}", items.join(", ")),
            };
        }
    }
}

#[cfg(test)]
mod tests;
