//! The page's formatter of the [presentation](crate::present): a section is a heading (or a
//! folded `<details>`), a table and sentences; rows and cells carry their keys and fields as
//! `data-*` attributes for tests and scrapers, and every text is escaped.

use crate::chart::escape;
use crate::present::{Cell, Health, Look, Row, Section, Sentence, Span, TITLE, Table, Tone};
use std::fmt::Write as _;

/// The title, the health line, the last error, and whether the snapshot is `stale`.
pub(super) fn health(out: &mut String, health: &Health, stale: Option<&str>) {
    let _ = write!(
        out,
        "<h1>{TITLE}</h1><p id=\"health\" data-ticks=\"{}\">",
        health.ticks
    );
    for (i, fact) in health.facts.iter().enumerate() {
        if i > 0 {
            out.push_str(" · ");
        }
        spans(out, fact);
    }
    out.push_str(
        "</p><p class=\"muted\">What the worker manager saw and decided at its last tick. Hover a \
         column's title for what it counts.</p>",
    );
    let boxes = [("last-error", health.error.as_deref()), ("stale", stale)];
    for (id, text) in boxes {
        if let Some(text) = text {
            let _ = write!(
                out,
                "<div class=\"error\" id=\"{id}\">{}</div>",
                escape(text)
            );
        }
    }
}

/// A section: its heading (or, folded, a `<details>` with the heading as its summary), its
/// table and its sentences.
pub(super) fn section(out: &mut String, section: &Section) {
    let note = section.note.as_ref().map_or(String::new(), |note| {
        format!(" <span class=\"muted\">({})</span>", escape(note))
    });
    let heading = escape(&section.heading);
    let id = section.id;
    let _ = match section.folded {
        true => write!(
            out,
            "<details id=\"{id}\"><summary>{heading}{note}</summary>"
        ),
        false => write!(out, "<h2 id=\"{id}\">{heading}{note}</h2>"),
    };
    if let Some(table) = &section.table {
        self::table(out, table);
    }
    for sentence in &section.sentences {
        self::sentence(out, sentence);
    }
    if section.folded {
        out.push_str("</details>");
    }
}

fn table(out: &mut String, table: &Table) {
    let _ = write!(out, "<table id=\"{}\">", table.id);
    if !table.groups.is_empty() {
        out.push_str("<tr>");
        for (title, columns) in &table.groups {
            let _ = match title.is_empty() {
                true => write!(out, "<th colspan=\"{columns}\"></th>"),
                false => write!(
                    out,
                    "<th colspan=\"{columns}\" class=\"group\">{}</th>",
                    escape(title)
                ),
            };
        }
        out.push_str("</tr>");
    }
    out.push_str("<tr>");
    for column in table.columns {
        let title = escape(column.title);
        let _ = match column.tip.is_empty() {
            true => write!(out, "<th>{title}</th>"),
            false => write!(out, "<th title=\"{}\">{title}</th>", escape(column.tip)),
        };
    }
    out.push_str("</tr>");
    for row in &table.rows {
        self::row(out, row);
    }
    out.push_str("</table>");
}

fn row(out: &mut String, row: &Row) {
    out.push_str("<tr");
    class(out, [row.tone.class()]);
    for (key, value) in &row.keys {
        let _ = write!(out, " data-{key}=\"{}\"", escape(value));
    }
    out.push('>');
    for cell in &row.cells {
        self::cell(out, cell);
    }
    out.push_str("</tr>");
}

fn cell(out: &mut String, cell: &Cell) {
    out.push_str("<td");
    class(out, [cell.numeric.then_some("n"), cell.tone.class()]);
    field(out, cell.field);
    out.push('>');
    spans(out, &cell.spans);
    out.push_str("</td>");
}

fn sentence(out: &mut String, sentence: &Sentence) {
    out.push_str("<p");
    class(out, [sentence.tone.class()]);
    if let Some(id) = sentence.id {
        let _ = write!(out, " id=\"{id}\"");
    }
    out.push('>');
    spans(out, &sentence.spans);
    out.push_str("</p>");
}

fn spans(out: &mut String, spans: &[Span]) {
    for span in spans {
        self::span(out, span);
    }
}

/// A span: `<br>`, bare text, or an element with its field, look and tip.
fn span(out: &mut String, span: &Span) {
    let text = escape(&span.text);
    let (open, close) = match span.look {
        Look::Break => return out.push_str("<br>"),
        Look::Plain if span.field.is_none() && span.tip.is_none() => return out.push_str(&text),
        Look::Plain | Look::Muted => ("<span", "</span>"),
        Look::Strong => ("<b", "</b>"),
        Look::Code => ("<code", "</code>"),
        Look::Link(href) => {
            let _ = write!(out, "<a href=\"{}\"", escape(href));
            ("", "</a>")
        }
    };
    out.push_str(open);
    field(out, span.field);
    class(
        out,
        [Tone::Muted.class().filter(|_| span.look == Look::Muted)],
    );
    if let Some(tip) = &span.tip {
        let _ = write!(out, " title=\"{}\"", escape(tip));
    }
    let _ = write!(out, ">{text}{close}");
}

/// ` class="n bad"`: the classes given, if any.
fn class<const N: usize>(out: &mut String, classes: [Option<&str>; N]) {
    let classes: Vec<&str> = classes.into_iter().flatten().collect();
    if !classes.is_empty() {
        let _ = write!(out, " class=\"{}\"", classes.join(" "));
    }
}

/// ` data-field="…"`, if there is a field.
fn field(out: &mut String, field: Option<&str>) {
    if let Some(field) = field {
        let _ = write!(out, " data-field=\"{field}\"");
    }
}
