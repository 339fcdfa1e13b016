//! The book's reference pages of the codes the manager gives (`docs/src/reference/reasons.md`,
//! `docs/src/reference/events.md`), generated from this crate's source: each code is read from
//! the enum's `code()` (or `kind()`) and explained by its variant's doc comment, so the page
//! says what the code says. `UPDATE_GOLDEN=1` rewrites the pages.
//!
//! Against: the source files; the codes are checked against the lists the program uses at run
//! time where it has one (`EventKind::CODES`, `WorkerState::ALL`, `FailureClass::ALL`).

use codalab_wm_core::checkin::WorkerState;
use codalab_wm_core::events::EventKind;
use codalab_wm_core::pools::FailureClass;
use codalab_wm_core::testing::check_generated;
use std::fmt::Write;
use std::path::PathBuf;

const REGENERATE: &str = "cargo test -p codalab-wm-core --test it -- reference::";

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn source(file: &str) -> String {
    let path = crate_dir().join("src").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The variants of `pub enum name` in `source` (those at the enum's indentation), each with
/// its doc comment joined into one line.
fn variants(source: &str, name: &str) -> Vec<(String, String)> {
    let start = format!("pub enum {name} {{");
    let mut lines = source.lines().skip_while(|l| l.trim() != start).skip(1);
    let mut found = Vec::new();
    let mut doc: Vec<&str> = Vec::new();
    for line in lines.by_ref() {
        if line.starts_with('}') {
            break;
        }
        let Some(rest) = line.strip_prefix("    ").filter(|r| !r.starts_with(' ')) else {
            continue;
        };
        if let Some(text) = rest.strip_prefix("///") {
            doc.push(text.trim());
        } else if rest.starts_with("#[") || rest.starts_with('}') || rest.starts_with(')') {
            continue;
        } else {
            let variant: String = (rest.chars())
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(!variant.is_empty(), "{name}: cannot read `{line}`");
            found.push((variant, plain(&doc.join(" "))));
            doc.clear();
        }
    }
    assert!(!found.is_empty(), "no `{start}` in the source");
    found
}

/// The code `fn method` of `impl name` gives each variant: `name::Variant … => "code"`;
/// `None` for an arm that delegates (`code.code()`).
fn codes(source: &str, name: &str, method: &str) -> Vec<(String, Option<String>)> {
    let start = format!("impl {name} {{");
    let signature = format!("pub fn {method}(");
    let body = (source.lines())
        .skip_while(|l| l.trim() != start)
        .skip_while(|l| !l.trim().starts_with(&signature))
        .skip(1)
        .take_while(|l| l.trim() != "}");
    let prefix = format!("{name}::");
    let arms: Vec<(String, Option<String>)> = body
        .filter_map(|l| l.trim().strip_prefix(&prefix))
        .map(|arm| {
            let variant: String = (arm.chars())
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let value = arm.split_once("=> ").unwrap().1;
            let code = (value.strip_prefix('"'))
                .and_then(|v| v.split_once('"'))
                .map(|(c, _)| c.to_owned());
            (variant, code)
        })
        .collect();
    assert!(!arms.is_empty(), "no `{name}::{method}` arms in the source");
    arms
}

/// A doc comment as plain Markdown: intra-doc links become their text.
fn plain(doc: &str) -> String {
    let mut out = String::new();
    let mut rest = doc;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let text = &after[..close];
        let mut tail = &after[close + 1..];
        if let Some(link) = tail.strip_prefix('(')
            && let Some(end) = link.find(')')
        {
            tail = &link[end + 1..];
        }
        out.push_str(text);
        rest = tail;
    }
    out.push_str(rest);
    for pointer in [" (see `crate::", " (`crate::", "; see `crate::"] {
        while let Some(at) = out.find(pointer) {
            let close = if pointer.starts_with(';') { '.' } else { ')' };
            let end = out[at..].find(close).map_or(out.len(), |e| at + e);
            let end = if close == ')' { end + 1 } else { end };
            out.replace_range(at..end.min(out.len()), "");
        }
    }
    while let Some(at) = out.find("`crate::") {
        let end = out[at + 1..].find('`').map_or(out.len(), |e| at + 1 + e);
        let last = out[at + 1..end]
            .rsplit("::")
            .next()
            .unwrap_or_default()
            .to_owned();
        out.replace_range(at + 1..end, &last);
    }
    let out = out.strip_prefix("Pool policy: ").unwrap_or(&out);
    let mut chars = out.chars();
    let out: String = (chars.next().into_iter())
        .flat_map(char::to_uppercase)
        .chain(chars)
        .collect();
    out.replace('|', "\\|")
}

/// Rows `code | meaning` of enum `name` in `file`, its codes from `method`; an arm that
/// delegates takes the rows of `delegate` (an enum in `delegate_file`), each prefixed with the
/// variant's doc.
fn rows(file: &str, name: &str, method: &str) -> Vec<(String, String)> {
    let text = source(file);
    let docs = variants(&text, name);
    let codes = codes(&text, name, method);
    let mut rows = Vec::new();
    for (variant, doc) in &docs {
        let code = (codes.iter())
            .find(|(v, _)| v == variant)
            .unwrap_or_else(|| panic!("{name}::{variant} has no `{method}` arm"));
        match &code.1 {
            Some(code) => rows.push((code.clone(), doc.clone())),
            None => {
                let held = rows_of_delegate(name, variant);
                rows.extend(held.into_iter().map(|(c, d)| (c, format!("{doc} {d}"))));
            }
        }
    }
    rows
}

/// `Reason::Held { code, .. } => code.code()`: the rows of the held code's enum
/// (`dispatch::Hold`), the only arm that delegates.
fn rows_of_delegate(name: &str, variant: &str) -> Vec<(String, String)> {
    assert_eq!((name, variant), ("Reason", "Held"), "a new delegating arm");
    rows("dispatch.rs", "Hold", "code")
}

fn table(page: &mut String, title: &str, about: &str, rows: &[(String, String)]) {
    let _ = write!(
        page,
        "\n## {title}\n\n{about}\n\n| code | meaning |\n|---|---|\n"
    );
    for (code, meaning) in rows {
        let _ = writeln!(page, "| `{code}` | {meaning} |");
    }
}

fn header(title: &str, about: &str) -> String {
    format!(
        "# {title}\n\n<!-- Generated from the doc comments of crates/core/src by `{REGENERATE}` \
         (UPDATE_GOLDEN=1 rewrites it): do not edit. -->\n\n{about}\n"
    )
}

fn page_path(name: &str) -> PathBuf {
    crate_dir().join("../../docs/src/reference").join(name)
}

/// Asserts that `rows` hold exactly the codes of `listed`, the list the program uses at run
/// time (`what` names it).
fn assert_codes<'a>(
    rows: &[(String, String)],
    listed: impl IntoIterator<Item = &'a str>,
    what: &str,
) {
    let mut read: Vec<&str> = rows.iter().map(|(c, _)| c.as_str()).collect();
    let mut listed: Vec<&str> = listed.into_iter().collect();
    read.sort_unstable();
    listed.sort_unstable();
    assert_eq!(read, listed, "{what}");
}

#[test]
fn the_reasons_reference_is_the_sources_docs() {
    let mut page = header(
        "Reasons",
        "The codes the manager gives for what it decided and for what waits. Each is the \
         machine-readable name that the log (`reasons=`), `status --json`, the page, the \
         events and the metrics' labels carry; the meaning is the code's own documentation.",
    );
    table(
        &mut page,
        "Decision reasons",
        "Every rule that fired in a pool's decision, in the order they are checked: the log's \
         `reasons=` and `codalab_wm_decisions_total{reason}`.",
        &rows("policy.rs", "Reason", "code"),
    );
    table(
        &mut page,
        "Why staged bundles wait",
        "The staged bundles no launch of this tick serves, by why: `status`, the page and \
         `codalab_wm_unmet_bundles{reason}`.",
        &rows("pools/unmet.rs", "UnmetReason", "code"),
    );
    table(
        &mut page,
        "Start-time estimates",
        "The kind of each staged bundle's estimate of when it starts: `status`, the page and \
         `codalab_wm_start_estimates{kind}`.",
        &rows("estimate.rs", "StartEstimate", "kind"),
    );
    let states = rows("checkin.rs", "WorkerState", "code");
    assert_codes(
        &states,
        WorkerState::ALL.map(WorkerState::code),
        "WorkerState::ALL",
    );
    table(
        &mut page,
        "Worker states",
        "Each worker job of a pool, seen from the platform and the server: `status`, the page \
         and `codalab_wm_workers{state}`.",
        &states,
    );
    let classes = rows("pools/backoff.rs", "FailureClass", "code");
    assert_codes(
        &classes,
        FailureClass::ALL.map(FailureClass::code),
        "FailureClass::ALL",
    );
    table(
        &mut page,
        "Failure classes",
        "What a failed launch or a worker that failed before it checked in is taken for, and \
         what the pool does about it: `codalab_wm_pool_failures_total{class}`.",
        &classes,
    );
    check_generated(&page_path("reasons.md"), &page, REGENERATE);
}

#[test]
fn the_events_reference_is_the_sources_docs() {
    let events = rows("events.rs", "EventKind", "code");
    assert_codes(
        &events,
        EventKind::CODES.iter().copied(),
        "EventKind::CODES",
    );
    let mut page = header(
        "Event kinds",
        "What the manager reports as events: in the log, in `status --json` and on the page \
         (the last ones), and POSTed to each `[[notify]]` webhook whose `events` lists the \
         code (every event when `events` is unset).",
    );
    table(
        &mut page,
        "Events",
        "By code, in the order the source declares them.",
        &events,
    );
    check_generated(&page_path("events.md"), &page, REGENERATE);
}

/// The source reader on the shapes it meets.
#[test]
fn variants_and_codes_are_read_with_their_docs() {
    let source = "pub enum E {\n    /// One [`x`](crate::x) and\n    /// [`y`].\n    A {\n        \
                  /// Field.\n        f: u8,\n    },\n    #[serde(skip)]\n    /// Two.\n    B,\n}\n\
                  impl E {\n    pub fn code(&self) -> &'static str {\n        match self {\n            \
                  E::A { .. } => \"a\",\n            E::B => \"b\",\n        }\n    }\n}\n";
    assert_eq!(
        variants(source, "E"),
        [
            ("A".to_owned(), "One `x` and `y`.".to_owned()),
            ("B".to_owned(), "Two.".to_owned())
        ]
    );
    assert_eq!(
        plain("Pool policy: it waits (see [`crate::pools`]); the limit [`crate::pools::MAX`]."),
        "It waits; the limit `MAX`."
    );
    assert_eq!(
        codes(source, "E", "code"),
        [
            ("A".to_owned(), Some("a".to_owned())),
            ("B".to_owned(), Some("b".to_owned()))
        ]
    );
}
