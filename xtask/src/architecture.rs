//! `cargo xtask architecture`: the shape ARCHITECTURE.md promises, checked on the source: the
//! binary stays thin (`crates/cli/src` at most [`CLI_MAX_LINES`] lines); the modules of the
//! binary, of core, of the application crate and of the operator import one another without a
//! cycle ([`CYCLE_FREE`]); core is what an embedder wants and nothing it renders for people: no
//! `<svg`/`<html` in its sources, and none of [`NOT_IN_CORE`] among its normal dependencies
//! (`cargo tree`, as object_store's CI guards its base build); and no non-test source file of a
//! crate is over [`MAX_FILE_LINES`] lines nor any function over [`MAX_FN_LINES`] (test modules
//! and `tests/` excluded).

use anyhow::{Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lines `crates/cli/src` may have in all (`wc -l`).
pub const CLI_MAX_LINES: usize = 2_500;
/// Lines a non-test source file may have.
pub const MAX_FILE_LINES: usize = 600;
/// Lines a function outside tests may have.
pub const MAX_FN_LINES: usize = 80;
/// The crates whose modules must not import each other in a cycle.
pub const CYCLE_FREE: [&str; 4] = ["cli", "core", "app", "operator"];
/// Packages core's normal dependencies must not include: the metrics registry, the HTTP server
/// and the shell completions belong to the application (`crates/app`, `crates/cli`).
pub const NOT_IN_CORE: [&str; 3] = ["prometheus-client", "axum", "clap_complete"];
/// What core's sources must not contain: pages and charts are the application's.
const MARKUP: [&str; 2] = ["<svg", "<html"];

/// Runs every check on the workspace; fails listing every breach.
pub fn run(_args: &[String]) -> Result<()> {
    let root = crate::services::repo_root();
    let mut breaches = Vec::new();
    let cli = sources(&root.join("crates/cli/src"))?;
    let total: usize = cli.values().map(|text| text.lines().count()).sum();
    if total > CLI_MAX_LINES {
        breaches.push(format!(
            "crates/cli/src has {total} lines (at most {CLI_MAX_LINES})"
        ));
    }
    for name in CYCLE_FREE {
        let modules: BTreeMap<String, String> = sources(&root.join(format!("crates/{name}/src")))?
            .iter()
            .map(|(path, text)| (module_name(path), text.clone()))
            .collect();
        if let Some(cycle) = cycle(&imports(&modules)) {
            breaches.push(format!(
                "crates/{name} modules import each other: {}",
                cycle.join(" → ")
            ));
        }
    }
    breaches.extend(core_is_lean(&root)?);
    for (path, text) in sources(&root.join("crates"))? {
        breaches.extend(
            sizes(&text)
                .into_iter()
                .map(|b| format!("{}: {b}", path.display())),
        );
    }
    if !breaches.is_empty() {
        bail!(
            "{} architecture breach(es):\n  {}",
            breaches.len(),
            breaches.join("\n  ")
        );
    }
    eprintln!(
        "architecture: crates/cli/src {total} lines, no import cycle, core without markup or \
         {NOT_IN_CORE:?}, sizes within limits"
    );
    Ok(())
}

/// Core's sources with markup, and the packages of [`NOT_IN_CORE`] among its normal
/// dependencies (`cargo tree -p codalab-wm-core -e normal`, its default features).
fn core_is_lean(root: &Path) -> Result<Vec<String>> {
    let mut breaches: Vec<String> = sources(&root.join("crates/core/src"))?
        .iter()
        .flat_map(|(path, text)| {
            markup(text).into_iter().map(move |m| {
                format!(
                    "{}: `{m}` (pages and charts belong in crates/app)",
                    path.display()
                )
            })
        })
        .collect();
    let args = [
        "tree",
        "-p",
        "codalab-wm-core",
        "-e",
        "normal",
        "--prefix",
        "none",
    ];
    let output = std::process::Command::new(env!("CARGO"))
        .args(args)
        .current_dir(root)
        .output()?;
    if !output.status.success() {
        bail!("cargo {} failed ({})", args.join(" "), output.status);
    }
    breaches.extend(
        forbidden(&String::from_utf8_lossy(&output.stdout))
            .into_iter()
            .map(|p| {
                format!("codalab-wm-core depends on {p} (it belongs in crates/app or crates/cli)")
            }),
    );
    Ok(breaches)
}

/// Which of [`MARKUP`] the production part of `text` (before its test module) contains.
fn markup(text: &str) -> Vec<&'static str> {
    let code = production(text).join("\n");
    MARKUP.into_iter().filter(|m| code.contains(m)).collect()
}

/// The packages of [`NOT_IN_CORE`] a `cargo tree --prefix none` listing names.
fn forbidden(tree: &str) -> BTreeSet<&str> {
    tree.lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|package| NOT_IN_CORE.contains(package))
        .collect()
}

/// Every `.rs` file under `dir` outside `tests/`, `target/` and `fuzz/`, by path.
fn sources(dir: &Path) -> Result<BTreeMap<PathBuf, String>> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() && !["tests", "target", "fuzz"].contains(&name) {
                stack.push(path);
            } else if name.ends_with(".rs") && name != "tests.rs" {
                let text = std::fs::read_to_string(&path)?;
                found.insert(path, text);
            }
        }
    }
    Ok(found)
}

/// `commands::config` for `…/src/commands/config.rs` or `…/src/commands/config/mod.rs`.
fn module_name(path: &Path) -> String {
    let text = path.to_string_lossy();
    let relative = text.rsplit_once("/src/").map_or(&*text, |(_, r)| r);
    let relative = relative.trim_end_matches(".rs").trim_end_matches("/mod");
    relative.replace('/', "::")
}

/// The code before the first `#[cfg(test)]`, without comment lines.
fn production(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect()
}

/// Which modules each module names with `crate::…` (parents and children do not count).
fn imports(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (name, text) in modules {
        let mut uses = BTreeSet::new();
        for line in production(text) {
            for (at, _) in line.match_indices("crate::") {
                let path: String = line[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let target = longest_module(modules, &path);
                let related = target.starts_with(&format!("{name}::"))
                    || name.starts_with(&format!("{target}::"));
                if let Some(target) =
                    Some(target).filter(|t| !t.is_empty() && t != name && !related)
                {
                    uses.insert(target);
                }
            }
        }
        graph.insert(name.clone(), uses);
    }
    graph
}

/// The longest module name that `path` (`commands::config::program`) starts with.
fn longest_module(modules: &BTreeMap<String, String>, path: &str) -> String {
    modules
        .keys()
        .filter(|m| path == m.as_str() || path.starts_with(&format!("{m}::")))
        .max_by_key(|m| m.len())
        .cloned()
        .unwrap_or_default()
}

/// A cycle of `graph`, if it has one (depth-first search).
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// A file over [`MAX_FILE_LINES`] or a function over [`MAX_FN_LINES`] (both before the test
/// module): each as `what, at which line`.
fn sizes(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text
        .lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .collect();
    let mut found = Vec::new();
    if lines.len() > MAX_FILE_LINES {
        found.push(format!("{} lines (at most {MAX_FILE_LINES})", lines.len()));
    }
    let mut start: Option<(usize, usize)> = None;
    for (number, line) in lines.iter().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let body = line.trim_start();
        let opens = [
            "fn ",
            "pub fn ",
            "async fn ",
            "pub async fn ",
            "pub(crate) fn ",
            "pub(super) fn ",
        ]
        .iter()
        .any(|p| body.starts_with(p));
        if start.is_none() && opens && !line.trim_end().ends_with(';') {
            start = Some((number, indent));
        } else if let Some((from, at)) = start
            && indent == at
            && body.starts_with('}')
        {
            let length = number - from + 1;
            if length > MAX_FN_LINES {
                found.push(format!(
                    "line {}: a function of {length} lines (at most {MAX_FN_LINES})",
                    from + 1
                ));
            }
            start = None;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        edges
            .iter()
            .map(|(n, to)| {
                (
                    (*n).to_owned(),
                    to.iter().map(|t| (*t).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn cycles_are_found_and_a_tree_has_none() {
        let tree = graph(&[
            ("run", &["setup", "reload"]),
            ("reload", &["setup"]),
            ("setup", &[]),
        ]);
        assert_eq!(cycle(&tree), None);
        let looped = graph(&[
            ("run", &["reload"]),
            ("reload", &["setup"]),
            ("setup", &["run"]),
        ]);
        assert_eq!(
            cycle(&looped).unwrap(),
            ["reload", "setup", "run", "reload"]
        );
    }

    #[test]
    fn imports_name_modules_not_items_and_skip_parents_children_and_comments() {
        let modules: BTreeMap<String, String> = [
            (
                "run",
                "use crate::setup::{layers, settings};\n// crate::cli::parse\n",
            ),
            ("setup", "use crate::commands::config::program;\n"),
            ("commands", "pub mod config;\n"),
            (
                "commands::config",
                "use crate::commands::x;\nfn f() { crate::args::Y; }\n",
            ),
            ("args", ""),
            ("cli", ""),
        ]
        .into_iter()
        .map(|(n, t)| (n.to_owned(), t.to_owned()))
        .collect();
        let graph = imports(&modules);
        assert_eq!(graph["run"], ["setup".to_owned()].into());
        assert_eq!(graph["setup"], ["commands::config".to_owned()].into());
        assert_eq!(graph["commands::config"], ["args".to_owned()].into());
        assert_eq!(
            module_name(Path::new("/w/crates/cli/src/commands/config/mod.rs")),
            "commands::config"
        );
    }

    #[test]
    fn markup_and_application_dependencies_are_found_in_core() {
        assert_eq!(markup("let s = \"<svg x>\";\n"), ["<svg"]);
        assert!(
            markup("// <html> in a comment\n#[cfg(test)]\nconst T: &str = \"<svg\";\n").is_empty()
        );
        let tree = "codalab-wm-core v0.1.0 (/r/crates/core)\ntokio v1.54.0\nprometheus-client v0.24.0\naxum-core v0.5.0\n";
        assert_eq!(forbidden(tree), ["prometheus-client"].into());
        assert!(forbidden("codalab-wm-core v0.1.0\nclap v4.6.0\n").is_empty());
    }

    #[test]
    fn long_functions_and_files_are_named_tests_are_not() {
        let body = "    let x = 1;\n".repeat(MAX_FN_LINES);
        let text = format!(
            "fn short() {{\n}}\n\npub fn long() {{\n{body}}}\n#[cfg(test)]\nfn t() {{\n{body}}}\n"
        );
        assert_eq!(
            sizes(&text),
            [format!(
                "line 4: a function of {} lines (at most {MAX_FN_LINES})",
                MAX_FN_LINES + 2
            )]
        );
        let big = "const A: u8 = 0;\n".repeat(MAX_FILE_LINES + 1);
        assert_eq!(
            sizes(&big),
            [format!(
                "{} lines (at most {MAX_FILE_LINES})",
                MAX_FILE_LINES + 1
            )]
        );
    }
}
