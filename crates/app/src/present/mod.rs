//! The one presenter of a status snapshot ([`Status`]): [`present`] turns it into a
//! [`Presentation`], the sections with their headings, tables, rows, cells and sentences, every
//! word of them written here once. The terminal view ([`crate::view`], what
//! `cl-worker-manager status` prints) and the page ([`crate::dashboard`]) are formatters of that
//! model: the one lays it out in aligned columns, the other in headings and tables; neither
//! words anything of the snapshot itself.
//!
//! Pure: the presentation is a function of the snapshot and of the decisions shown (the last
//! tick's, or the page's [history](crate::dashboard::History) of them).

mod decisions;
mod pools;
mod sections;
mod words;

pub use decisions::{DecisionRecord, MAX_REASONS, MAX_TEXT};
pub use sections::stale;
pub use words::{duration, memory, utc};

use codalab_wm_core::status::Status;

/// The title of the view and of the page.
pub const TITLE: &str = "cl-worker-manager";

/// The `id` of the section the page draws its charts before (the events').
pub const CHARTS_BEFORE: &str = "events-heading";

/// A status snapshot as people see it: the health line, then the sections in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Presentation {
    /// Uptime, ticks, the last success and error.
    pub health: Health,
    /// Pools, waiting bundles, unserved bundles, estimates, budgets, events, decisions,
    /// failures (the empty ones that say nothing left out).
    pub sections: Vec<Section>,
}

/// The snapshot and `decisions` (oldest first), presented.
pub fn present<'a>(
    status: &Status,
    decisions: impl DoubleEndedIterator<Item = &'a DecisionRecord>,
) -> Presentation {
    let sections = [
        Some(pools::pools(status)),
        Some(sections::waiting(status)),
        sections::unserved(status),
        sections::estimates(status),
        Some(sections::budgets(status)),
        Some(sections::events(status)),
        Some(decisions::decisions(decisions, status)),
        sections::failures(status),
    ];
    Presentation {
        health: sections::health(status),
        sections: sections.into_iter().flatten().collect(),
    }
}

/// What the manager is doing, in facts, and the last tick's error.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// Ticks run (the page's `data-ticks`).
    pub ticks: u64,
    /// "Up 3m 20s since …", "41 ticks", "last successful tick 2s ago (took 0.25 s)" …
    pub facts: Vec<Vec<Span>>,
    /// "The last tick failed: …", if it did.
    pub error: Option<String>,
}

/// A heading and what follows it: a table, sentences, or both.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// The heading's `id` on the page (the `<details>`' when folded).
    pub id: &'static str,
    /// The heading.
    pub heading: String,
    /// Said after the heading, in parentheses (counts).
    pub note: Option<String>,
    /// The page folds it (`<details>`, the heading its summary).
    pub folded: bool,
    /// The rows.
    pub table: Option<Table>,
    /// Sentences after the table (or instead of it): "None yet.", "… and 3 more in /status."
    pub sentences: Vec<Sentence>,
}

/// Columns and rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The table's `id` on the page.
    pub id: &'static str,
    /// Titles over runs of columns (an empty title: none), covering every column; empty when
    /// the columns are not grouped.
    pub groups: Vec<(&'static str, usize)>,
    /// The columns.
    pub columns: &'static [Column],
    /// The rows, one cell per column.
    pub rows: Vec<Row>,
    /// A row is a card in the terminal (too many columns for a line): its first cell, then
    /// the others by group.
    pub cards: bool,
}

/// A column's title, and what it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// The title.
    pub title: &'static str,
    /// What it counts (the page's tooltip; empty: nothing more to say).
    pub tip: &'static str,
}

/// One row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Whether it needs attention.
    pub tone: Tone,
    /// Keys scrapers find it by (the page's `data-*` attributes: `("pool", "cpu")`).
    pub keys: Vec<(&'static str, String)>,
    /// The cells.
    pub cells: Vec<Cell>,
}

/// One cell.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cell {
    /// Its field, for scrapers (the page's `data-field`).
    pub field: Option<&'static str>,
    /// A number (aligned right).
    pub numeric: bool,
    /// Whether it needs attention.
    pub tone: Tone,
    /// The text.
    pub spans: Vec<Span>,
}

/// A sentence after a heading.
#[derive(Debug, Clone, PartialEq)]
pub struct Sentence {
    /// Its `id` on the page, if scrapers look for it.
    pub id: Option<&'static str>,
    /// Good news, a muted remark …
    pub tone: Tone,
    /// The text.
    pub spans: Vec<Span>,
}

/// A run of text.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The words.
    pub text: String,
    /// How it looks.
    pub look: Look,
    /// Its field, for scrapers (the page's `data-field`).
    pub field: Option<&'static str>,
    /// More words about it (the page's tooltip; the terminal's parentheses).
    pub tip: Option<String>,
}

/// How a [`Span`] looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// Plain text.
    Plain,
    /// Bold (a name, a key figure).
    Strong,
    /// A code or identifier (`max_reached`, a bundle uuid).
    Code,
    /// Secondary.
    Muted,
    /// A link to this address.
    Link(&'static str),
    /// A line break (no text).
    Break,
}

/// Whether something needs attention (the page's CSS class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tone {
    /// Nothing to say.
    #[default]
    Plain,
    /// As it should be.
    Ok,
    /// Secondary.
    Muted,
    /// For information.
    Info,
    /// Worth a look.
    Warning,
    /// Something is wrong.
    Bad,
}

impl Tone {
    /// The page's CSS class, if any.
    pub fn class(self) -> Option<&'static str> {
        match self {
            Tone::Plain => None,
            Tone::Ok => Some("ok"),
            Tone::Muted => Some("muted"),
            Tone::Info => Some("info"),
            Tone::Warning => Some("warning"),
            Tone::Bad => Some("bad"),
        }
    }
}

impl Span {
    /// Plain `text`.
    pub fn plain(text: impl Into<String>) -> Self {
        Self::with(Look::Plain, text)
    }

    /// `text` in the look `look`.
    pub fn with(look: Look, text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            look,
            field: None,
            tip: None,
        }
    }

    /// A line break.
    pub fn line_break() -> Self {
        Self::with(Look::Break, "")
    }

    /// This span, found by scrapers as `field`.
    pub fn field(mut self, field: &'static str) -> Self {
        self.field = Some(field);
        self
    }

    /// This span, with `tip` said about it.
    pub fn tip(mut self, tip: impl Into<String>) -> Self {
        self.tip = Some(tip.into());
        self
    }
}

impl Cell {
    /// A cell of plain `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self::spans(vec![Span::plain(text)])
    }

    /// A number.
    pub fn number(value: impl ToString) -> Self {
        Self {
            numeric: true,
            ..Self::text(value.to_string())
        }
    }

    /// A code or identifier.
    pub fn code(text: impl Into<String>) -> Self {
        Self::spans(vec![Span::with(Look::Code, text)])
    }

    /// A cell of `spans`.
    pub fn spans(spans: Vec<Span>) -> Self {
        Self {
            spans,
            ..Self::default()
        }
    }

    /// This cell, found by scrapers as `field`.
    pub fn field(mut self, field: &'static str) -> Self {
        self.field = Some(field);
        self
    }

    /// This cell in `tone`.
    pub fn tone(mut self, tone: Tone) -> Self {
        self.tone = tone;
        self
    }
}

impl Sentence {
    /// A sentence of `spans` in `tone`.
    pub fn new(tone: Tone, spans: Vec<Span>) -> Self {
        Self {
            id: None,
            tone,
            spans,
        }
    }

    /// "… and 3 more in /status.": rows left out of a table.
    pub fn more(left_out: usize) -> Self {
        let spans = vec![
            Span::plain(format!("… and {left_out} more in ")),
            Span::with(Look::Link("/status"), "/status"),
            Span::plain("."),
        ];
        Self::new(Tone::Muted, spans)
    }
}

impl Section {
    /// A section headed `heading` at `id`, with nothing under it yet.
    pub fn new(id: &'static str, heading: impl Into<String>) -> Self {
        Self {
            id,
            heading: heading.into(),
            note: None,
            folded: false,
            table: None,
            sentences: Vec::new(),
        }
    }

    /// This section with `table`, and "… and N more" when `left_out` rows are not in it.
    pub fn with_table(mut self, table: Table, left_out: usize) -> Self {
        self.table = Some(table);
        if left_out > 0 {
            self.sentences.push(Sentence::more(left_out));
        }
        self
    }

    /// This section with one sentence: plain `text` in `tone`.
    pub fn saying(mut self, tone: Tone, text: &str) -> Self {
        self.sentences
            .push(Sentence::new(tone, vec![Span::plain(text)]));
        self
    }
}

impl Table {
    /// A table at `id` with `columns` and `rows`, not grouped.
    pub fn new(id: &'static str, columns: &'static [Column], rows: Vec<Row>) -> Self {
        Self {
            id,
            groups: Vec::new(),
            columns,
            rows,
            cards: false,
        }
    }
}

impl Row {
    /// A row of `cells`, found by `keys`.
    pub fn new(keys: Vec<(&'static str, String)>, cells: Vec<Cell>) -> Self {
        Self {
            tone: Tone::Plain,
            keys,
            cells,
        }
    }
}

/// Columns without tooltips, by title.
const fn titled<const N: usize>(titles: [&'static str; N]) -> [Column; N] {
    let mut columns = [Column { title: "", tip: "" }; N];
    let mut i = 0;
    while i < N {
        columns[i].title = titles[i];
        i += 1;
    }
    columns
}

#[cfg(test)]
mod tests;
