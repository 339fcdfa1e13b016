//! `cargo xtask docs [--check-only]`: the book (`docs/`, mdBook) built into `target/book`, and
//! every link of the Markdown documents checked: the book's pages, the README and the other
//! documents at the root. A relative link must name a file that exists and, with `#anchor`, a
//! heading of that file; every page of the book must be in its `SUMMARY.md`. Links to the web
//! are not followed (CI has no network beyond the package registries).
//!
//! mdBook is installed with `cargo install` (its default features off: no server, no
//! watcher) when `mdbook` is not on `PATH`.

use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The mdBook release the book is built with.
const MDBOOK: &str = "0.4.40";

/// The documents at the root whose links are checked besides the book's pages.
const ROOT_DOCUMENTS: [&str; 5] = [
    "README.md",
    "ARCHITECTURE.md",
    "BENCH.md",
    "CHANGELOG.md",
    "SECURITY.md",
];

pub fn run(args: &[String]) -> Result<()> {
    let build = match args {
        [] => true,
        [flag] if flag == "--check-only" => false,
        _ => bail!("usage: cargo xtask docs [--check-only]"),
    };
    let root = crate::services::repo_root();
    let problems = check_links(&root)?;
    if !problems.is_empty() {
        bail!(
            "{} broken link(s) in the documents:\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    eprintln!("==> docs: every relative link and anchor resolves");
    if build {
        let mdbook = ensure_mdbook()?;
        let out = root.join("target/book");
        let output = Command::new(&mdbook)
            .args(["build", "--dest-dir"])
            .arg(&out)
            .arg(root.join("docs"))
            .output()
            .with_context(|| format!("running {}", mdbook.display()))?;
        let log = String::from_utf8_lossy(&output.stderr);
        eprint!("{log}");
        // mdBook logs a page it could not render (an `{{#include}}` of a missing file) and
        // still exits 0: its errors and warnings fail the build here.
        let problems: Vec<&str> = (log.lines())
            .filter(|l| l.contains("[ERROR]") || l.contains("[WARN]"))
            .collect();
        if !output.status.success() || !problems.is_empty() {
            bail!(
                "mdbook build failed ({}): {}",
                output.status,
                problems.join("; ")
            );
        }
        eprintln!("==> the book: {}", out.join("index.html").display());
    }
    Ok(())
}

/// `mdbook` on `PATH`, else in cargo's bin directory after `cargo install`.
fn ensure_mdbook() -> Result<PathBuf> {
    let works = |p: &Path| {
        Command::new(p).arg("--version").output().is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains(MDBOOK)
        })
    };
    let on_path = PathBuf::from("mdbook");
    if works(&on_path) {
        return Ok(on_path);
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    let installed = home.join("bin/mdbook");
    if works(&installed) {
        return Ok(installed);
    }
    eprintln!("==> cargo install --locked mdbook@{MDBOOK} --no-default-features");
    let status = Command::new(env!("CARGO"))
        .args(["install", "--locked", "--no-default-features", "--force"])
        .arg(format!("mdbook@{MDBOOK}"))
        .status()
        .context("running cargo install mdbook")?;
    if !status.success() || !works(&installed) {
        bail!("cargo install mdbook@{MDBOOK} failed ({status})");
    }
    Ok(installed)
}

/// Every broken link of the documents under `root`, as `file:line: why`.
pub fn check_links(root: &Path) -> Result<Vec<String>> {
    let src = root.join("docs/src");
    let mut files: Vec<PathBuf> = ROOT_DOCUMENTS.iter().map(|d| root.join(d)).collect();
    files.extend(markdown_under(&src)?);
    let mut problems = Vec::new();
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for (line, target) in links(&text) {
            if let Err(why) = resolve(file, &target) {
                let shown = file.strip_prefix(root).unwrap_or(file);
                problems.push(format!("{}:{line}: `{target}`: {why}", shown.display()));
            }
        }
    }
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).context("docs/src/SUMMARY.md")?;
    let listed: BTreeSet<PathBuf> = (links(&summary).into_iter())
        .map(|(_, target)| src.join(target))
        .collect();
    for page in markdown_under(&src)? {
        if page.file_name().is_some_and(|n| n != "SUMMARY.md") && !listed.contains(&page) {
            let shown = page.strip_prefix(root).unwrap_or(&page);
            problems.push(format!("{}: not in SUMMARY.md", shown.display()));
        }
    }
    Ok(problems)
}

fn markdown_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The targets of the inline links `[text](target)` of a Markdown `text`, with their line
/// numbers (1-based), outside code blocks and code spans.
pub fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut fenced = false;
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'`' => in_code = !in_code,
                b']' if !in_code && bytes.get(i + 1) == Some(&b'(') => {
                    let rest = &line[i + 2..];
                    if let Some(end) = rest.find(')') {
                        let target = rest[..end].split_whitespace().next().unwrap_or_default();
                        found.push((index + 1, target.to_owned()));
                        i += end + 2;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
    found
}

/// Whether `target`, linked from `file`, resolves.
fn resolve(file: &Path, target: &str) -> Result<(), String> {
    if target.is_empty() {
        return Err("empty link".into());
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return Ok(());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let linked = match path {
        "" => file.to_path_buf(),
        path => file.parent().unwrap_or(Path::new(".")).join(path),
    };
    if !linked.exists() {
        return Err(format!("{} does not exist", linked.display()));
    }
    let Some(anchor) = anchor else {
        return Ok(());
    };
    if linked.extension().is_none_or(|e| e != "md") {
        return Ok(());
    }
    let text = std::fs::read_to_string(&linked).map_err(|e| e.to_string())?;
    match anchors(&text).contains(anchor) {
        true => Ok(()),
        false => Err(format!("no heading #{anchor} in {}", linked.display())),
    }
}

/// The anchors of the headings of a Markdown `text`, as GitHub and mdBook make them: lower
/// case, spaces to `-`, every other character but letters, digits, `-` and `_` dropped; a
/// repeated one gets `-1`, `-2` …
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let Some(heading) = line.strip_prefix('#').filter(|_| !fenced) else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = (heading.trim().to_lowercase().chars())
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_outside_code_are_found() {
        let text = "See [a](a.md#x) and `[b](b.md)`.\n```\n[c](c.md)\n```\n[d](../d.md \"t\")";
        assert_eq!(
            links(text),
            [(1, "a.md#x".to_owned()), (5, "../d.md".to_owned())]
        );
    }

    #[test]
    fn anchors_are_made_as_github_and_mdbook_make_them() {
        let text = "# Spill, fallback: and `budgets`\n## FAQ\n## FAQ\n```\n# not\n```";
        let anchors: Vec<String> = anchors(text).into_iter().collect();
        assert_eq!(anchors, ["faq", "faq-1", "spill-fallback-and-budgets"]);
    }

    /// The documents of this repository, as CI checks them.
    #[test]
    fn every_link_of_the_documents_resolves() {
        let problems = check_links(&crate::services::repo_root()).unwrap();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
