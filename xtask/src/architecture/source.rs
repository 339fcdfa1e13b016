//! What of a crate's source counts as production code, and which modules it names.
//!
//! Production code is every line outside a `#[cfg(test)]` item, wherever that item sits (a
//! one-line `mod x;` declaration does not end the count), and outside every file such a
//! declaration brings in. Imports are every `crate::`, `super::` and `self::` path of that code,
//! `use` groups (`crate::{a::B, c}`, over several lines) expanded and `super::` resolved against
//! the module that writes it.

use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its module name and its production lines (1-based number, text).
pub struct Source {
    pub module: String,
    pub lines: Vec<(usize, String)>,
    /// Every line of the file, tests included (`wc -l`).
    pub total: usize,
}

impl Source {
    /// The production code without comments, as one text.
    pub fn code(&self) -> String {
        code(&self.lines)
    }
}

/// Production lines as one text, comments left out.
pub fn code(lines: &[(usize, String)]) -> String {
    lines
        .iter()
        .map(|(_, line)| without_comment(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every production `.rs` file under `dir` (a crate's `src`), by path: files outside `tests/`,
/// `target/` and `fuzz/`, less those a `#[cfg(test)] mod x;` brings in (and their children).
pub fn sources(dir: &Path) -> Result<BTreeMap<PathBuf, Source>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() && !["tests", "target", "fuzz"].contains(&name) {
                stack.push(path);
            } else if name.ends_with(".rs") {
                files.insert(path.clone(), std::fs::read_to_string(&path)?);
            }
        }
    }
    let mut test_only: BTreeSet<PathBuf> = BTreeSet::new();
    let mut found = BTreeMap::new();
    for (path, text) in &files {
        let (lines, test_modules) = production(text);
        for name in test_modules {
            test_only.insert(child_dir(path).join(name));
        }
        let module = module_name(path);
        let total = text.lines().count();
        found.insert(
            path.clone(),
            Source {
                module,
                lines,
                total,
            },
        );
    }
    found.retain(|path, _| {
        !test_only
            .iter()
            .any(|module| path.starts_with(module) || *path == module.with_extension("rs"))
    });
    Ok(found)
}

/// Where the files of `path`'s child modules live: its own dir for `mod.rs`, `lib.rs` and
/// `main.rs`, else a dir named after it.
fn child_dir(path: &Path) -> PathBuf {
    let parent = path.parent().unwrap_or(Path::new(""));
    match path.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") | None => parent.to_path_buf(),
        Some(stem) => parent.join(stem),
    }
}

/// `commands::config` for `…/src/commands/config.rs` or `…/src/commands/config/mod.rs`; the
/// crate root (`lib.rs`, `main.rs`) is the empty name.
pub fn module_name(path: &Path) -> String {
    let text = path.to_string_lossy();
    let relative = text.rsplit_once("/src/").map_or(&*text, |(_, r)| r);
    let relative = relative.trim_end_matches(".rs").trim_end_matches("/mod");
    if relative == "lib" || relative == "main" {
        return String::new();
    }
    relative.replace('/', "::")
}

/// The lines of `text` outside `#[cfg(test)]` items (numbered from 1), and the names of the
/// modules such items declare in other files (`#[cfg(test)] mod props;`).
pub fn production(text: &str) -> (Vec<(usize, String)>, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let mut kept = Vec::new();
    let mut test_modules = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let line = lines[at];
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix("#[cfg(test)]") else {
            kept.push((at + 1, line.to_owned()));
            at += 1;
            continue;
        };
        let indent = line.len() - trimmed.len();
        // The item: the rest of this line, or the first line after further attributes.
        let mut item = at;
        let mut head = rest.trim();
        while head.is_empty() || head.starts_with("#[") {
            item += 1;
            match lines.get(item) {
                Some(next) => head = next.trim(),
                None => break,
            }
        }
        if let Some(name) = declared_module(head) {
            test_modules.push(name);
        }
        let balanced = head.matches('{').count() == head.matches('}').count();
        at = if head.ends_with(';') || (balanced && head.ends_with('}')) {
            item + 1
        } else {
            item + lines[item..]
                .iter()
                .position(|l| {
                    l.len() - l.trim_start().len() == indent && l.trim_start().starts_with('}')
                })
                .map_or(lines.len() - item, |end| end + 1)
        };
    }
    (kept, test_modules)
}

/// `props` for `mod props;` or `pub(crate) mod props;`.
fn declared_module(item: &str) -> Option<String> {
    let item = item.strip_suffix(';')?;
    let words: Vec<&str> = item.split_whitespace().collect();
    match words[..] {
        ["mod", name] => Some(name.to_owned()),
        [visibility, "mod", name] if visibility.starts_with("pub") => Some(name.to_owned()),
        _ => None,
    }
}

/// `line` up to a `//` comment (a `//` inside a string literal ends it too; good enough for
/// finding module paths).
fn without_comment(line: &str) -> &str {
    line.find("//").map_or(line, |at| &line[..at])
}

/// Every module path `code` (written in module `module`) names through `crate::`, `super::` or
/// `self::`, resolved from the crate root: `use super::{a::B, c}` in `x::y` gives `x::a::B` and
/// `x::c`.
pub fn named_paths(module: &str, code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for prefix in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(prefix) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue; // part of a longer path (`super::super::`, `a::self::`)
            }
            let (base, rest) = match resolve(module, &code[at..]) {
                Some(resolved) => resolved,
                None => continue,
            };
            for path in expand(rest) {
                found.insert(join(&base, &path));
            }
        }
    }
    found
}

/// The module a path starting at `text` is relative to, and the rest of the path:
/// `super::super::x` in `a::b::c` is `a` and `x`.
fn resolve<'a>(module: &str, text: &'a str) -> Option<(String, &'a str)> {
    if let Some(rest) = text.strip_prefix("crate::") {
        return Some((String::new(), rest));
    }
    if let Some(rest) = text.strip_prefix("self::") {
        return Some((module.to_owned(), rest));
    }
    let mut base = module.to_owned();
    let mut rest = text;
    while let Some(after) = rest.strip_prefix("super::") {
        if base.is_empty() {
            return None; // above the crate root: not ours
        }
        base = base
            .rsplit_once("::")
            .map_or(String::new(), |(p, _)| p.to_owned());
        rest = after;
    }
    Some((base, rest))
}

fn join(base: &str, path: &str) -> String {
    match (base.is_empty(), path.is_empty()) {
        (true, _) => path.to_owned(),
        (false, true) => base.to_owned(),
        (false, false) => format!("{base}::{path}"),
    }
}

/// The paths a use tree at the start of `text` names: `a::{b, c::{d, e}}` gives `a::b`,
/// `a::c::d`, `a::c::e`; `self` in a group is the group's own path; `as` renames are dropped.
fn expand(text: &str) -> Vec<String> {
    let taken = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let (path, after) = text.split_at(taken);
    let prefix = if path.is_empty() {
        ""
    } else if let Some(prefix) = path.strip_suffix("::") {
        prefix
    } else {
        return vec![path.to_owned()];
    };
    let Some(inner) = after.strip_prefix('{').and_then(matching_brace) else {
        return vec![prefix.to_owned()];
    };
    split_top_level(inner)
        .into_iter()
        .flat_map(|member| {
            let member = member.split(" as ").next().unwrap_or("").trim();
            match member {
                "self" => vec![prefix.to_owned()],
                "" | "*" => vec![],
                _ => expand(member).iter().map(|m| join(prefix, m)).collect(),
            }
        })
        .collect()
}

/// The text of `group` up to the `}` that closes an already opened `{`.
fn matching_brace(group: &str) -> Option<&str> {
    let mut depth = 1;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&group[..at]);
                }
            }
            _ => {}
        }
    }
    None
}

/// `inner` split at the commas outside braces, each part trimmed.
fn split_top_level(inner: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (at, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(inner[from..at].trim());
                from = at + 1;
            }
            _ => {}
        }
    }
    parts.push(inner[from..].trim());
    parts
}
