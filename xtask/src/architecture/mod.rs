//! `cargo xtask architecture`: the shape ARCHITECTURE.md promises, checked on the source: the
//! binary stays thin (`crates/cli/src` at most [`CLI_MAX_LINES`] lines); the modules of the
//! binary, of core, of the application crate and of the operator import one another without a
//! cycle ([`CYCLE_FREE`]); core is what an embedder wants and nothing it renders for people: no
//! `<svg`/`<html` in its sources, and none of [`NOT_IN_CORE`] among its normal dependencies
//! (`cargo tree`, as object_store's CI guards its base build); and no non-test source file of a
//! crate is over [`MAX_FILE_LINES`] lines nor any function over [`MAX_FN_LINES`]. What counts as
//! production code and which modules a module names is [`source`]'s to say: every
//! `#[cfg(test)]` item is left out wherever it sits, and `super::` paths and `use` groups count.

mod source;

use anyhow::{Result, bail};
use source::{named_paths, sources};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Lines `crates/cli/src` may have in all (`wc -l`).
pub const CLI_MAX_LINES: usize = 2_500;
/// Lines a non-test source file may have.
pub const MAX_FILE_LINES: usize = 600;
/// Lines a function outside tests may have.
pub const MAX_FN_LINES: usize = 80;
/// The crates whose modules must not import each other in a cycle.
pub const CYCLE_FREE: [&str; 5] = ["cli", "core", "backend", "app", "operator"];
/// Packages core's normal dependencies must not include: the metrics registry, the HTTP server
/// and the shell completions belong to the application (`crates/app`, `crates/cli`).
pub const NOT_IN_CORE: [&str; 3] = ["prometheus-client", "axum", "clap_complete"];
/// The backend crates: through their normal dependencies they reach the backend contract
/// (`codalab-wm-backend`), never the manager (`codalab-wm-core`).
pub const BACKENDS: [&str; 5] = [
    "codalab-wm-aws",
    "codalab-wm-azure",
    "codalab-wm-gce",
    "codalab-wm-k8s",
    "codalab-wm-slurm",
];
/// What core's sources must not contain: pages and charts are the application's.
const MARKUP: [&str; 2] = ["<svg", "<html"];

/// Runs every check on the workspace; fails listing every breach.
pub fn run(_args: &[String]) -> Result<()> {
    let root = crate::services::repo_root();
    let mut breaches = Vec::new();
    let cli = sources(&root.join("crates/cli/src"))?;
    let total: usize = cli.values().map(|source| source.total).sum();
    if total > CLI_MAX_LINES {
        breaches.push(format!(
            "crates/cli/src has {total} lines (at most {CLI_MAX_LINES})"
        ));
    }
    for name in CYCLE_FREE {
        let modules: BTreeMap<String, String> = sources(&root.join(format!("crates/{name}/src")))?
            .into_values()
            .map(|source| (source.module.clone(), source.code()))
            .collect();
        let graph = imports(&modules);
        for graph in [top_level(&graph), graph] {
            for circle in circles(&graph) {
                let example = cycle(&circle_graph(&graph, &circle)).unwrap_or_default();
                breaches.push(format!(
                    "crates/{name} modules import each other: {} ({} modules in the circle)",
                    example.join(" → "),
                    circle.len()
                ));
            }
        }
    }
    breaches.extend(core_is_lean(&root)?);
    for backend in BACKENDS {
        let tree = normal_dependencies(&root, backend)?;
        if packages(&tree).any(|p| p == "codalab-wm-core") {
            breaches.push(format!(
                "{backend} depends on codalab-wm-core (a backend depends on the contract, \
                 codalab-wm-backend, only)"
            ));
        }
    }
    for (path, source) in sources(&root.join("crates"))? {
        breaches.extend(
            sizes(&source.lines)
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
         {NOT_IN_CORE:?}, backends on the contract alone, sizes within limits"
    );
    Ok(())
}

/// Core's sources with markup, and the packages of [`NOT_IN_CORE`] among its normal
/// dependencies (`cargo tree -p codalab-wm-core -e normal`, its default features).
fn core_is_lean(root: &Path) -> Result<Vec<String>> {
    let mut breaches: Vec<String> = sources(&root.join("crates/core/src"))?
        .iter()
        .flat_map(|(path, source)| {
            markup(&source.code()).into_iter().map(move |m| {
                format!(
                    "{}: `{m}` (pages and charts belong in crates/app)",
                    path.display()
                )
            })
        })
        .collect();
    breaches.extend(
        forbidden(&normal_dependencies(root, "codalab-wm-core")?)
            .into_iter()
            .map(|p| {
                format!("codalab-wm-core depends on {p} (it belongs in crates/app or crates/cli)")
            }),
    );
    Ok(breaches)
}

/// `cargo tree -p PACKAGE -e normal --prefix none` (its default features).
fn normal_dependencies(root: &Path, package: &str) -> Result<String> {
    let args = ["tree", "-p", package, "-e", "normal", "--prefix", "none"];
    let output = std::process::Command::new(env!("CARGO"))
        .args(args)
        .current_dir(root)
        .output()?;
    if !output.status.success() {
        bail!("cargo {} failed ({})", args.join(" "), output.status);
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The packages a `cargo tree --prefix none` listing names.
fn packages(tree: &str) -> impl Iterator<Item = &str> {
    tree.lines()
        .filter_map(|line| line.split_whitespace().next())
}

/// Which of [`MARKUP`] production code (comments and tests left out) contains.
fn markup(code: &str) -> Vec<&'static str> {
    MARKUP.into_iter().filter(|m| code.contains(m)).collect()
}

/// The packages of [`NOT_IN_CORE`] a `cargo tree --prefix none` listing names.
fn forbidden(tree: &str) -> BTreeSet<&str> {
    packages(tree)
        .filter(|package| NOT_IN_CORE.contains(package))
        .collect()
}

/// Which modules each module (by name, with its production code) names; a module's parents
/// and children do not count (`mod.rs` re-exporting its children, a child using its parent's
/// types is how a module is written).
fn imports(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (name, code) in modules {
        let uses = named_paths(name, code)
            .iter()
            .map(|path| longest_module(modules, path))
            .filter(|target| !related(name, target))
            .collect();
        graph.insert(name.clone(), uses);
    }
    graph
}

/// `graph` between the crate's top-level modules: `manager::act → layout` is `manager →
/// layout`, so a module that names `manager` while one of manager's children names it back is a
/// circle too.
fn top_level(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |module: &str| module.split("::").next().unwrap_or("").to_owned();
    let mut collapsed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in graph {
        let entry = collapsed.entry(top(from)).or_default();
        entry.extend(targets.iter().map(|t| top(t)).filter(|t| *t != top(from)));
    }
    collapsed
}

/// Whether `a` and `b` are one module, or one holds the other (the crate root holds all).
fn related(a: &str, b: &str) -> bool {
    a == b
        || a.is_empty()
        || b.is_empty()
        || a.starts_with(&format!("{b}::"))
        || b.starts_with(&format!("{a}::"))
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

/// Every set of modules that reach one another (a strongly connected component of more than
/// one module), so one run names every circle, not just the first.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(node) = stack.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|node| (node, reach(node))).collect();
    let mut found: Vec<BTreeSet<String>> = Vec::new();
    for (node, reached) in &reaches {
        if !reached.contains(*node) || found.iter().any(|c| c.contains(*node)) {
            continue;
        }
        let circle = reached
            .iter()
            .filter(|other| reaches.get(other).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        found.push(circle);
    }
    found
}

/// `graph` restricted to the modules of `circle`.
fn circle_graph(
    graph: &BTreeMap<String, BTreeSet<String>>,
    circle: &BTreeSet<String>,
) -> BTreeMap<String, BTreeSet<String>> {
    circle
        .iter()
        .map(|node| {
            let inside = graph[node].intersection(circle).cloned().collect();
            (node.clone(), inside)
        })
        .collect()
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

/// A file over [`MAX_FILE_LINES`] production lines or a function over [`MAX_FN_LINES`]: each
/// as `what, at which line`.
fn sizes(lines: &[(usize, String)]) -> Vec<String> {
    let mut found = Vec::new();
    if lines.len() > MAX_FILE_LINES {
        found.push(format!(
            "{} non-test lines (at most {MAX_FILE_LINES})",
            lines.len()
        ));
    }
    let mut start: Option<(usize, usize, usize)> = None;
    for (index, (number, line)) in lines.iter().enumerate() {
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
            start = Some((index, *number, indent));
        } else if let Some((from, first, at)) = start
            && indent == at
            && body.starts_with('}')
        {
            let length = index - from + 1;
            if length > MAX_FN_LINES {
                found.push(format!(
                    "line {first}: a function of {length} lines (at most {MAX_FN_LINES})"
                ));
            }
            start = None;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::source::{module_name, production};
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

    fn code(text: &str) -> String {
        source::code(&production(text).0)
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
        assert!(circles(&tree).is_empty());
        let two = graph(&[
            ("a", &["b"]),
            ("b", &["a", "c"]),
            ("c", &["d"]),
            ("d", &["c"]),
            ("e", &["a"]),
        ]);
        let names = |c: &[&str]| c.iter().map(|n| (*n).to_owned()).collect::<BTreeSet<_>>();
        assert_eq!(circles(&two), [names(&["a", "b"]), names(&["c", "d"])]);
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
        .map(|(n, t)| (n.to_owned(), code(t)))
        .collect();
        let graph = imports(&modules);
        assert_eq!(graph["run"], ["setup".to_owned()].into());
        assert_eq!(graph["setup"], ["commands::config".to_owned()].into());
        assert_eq!(graph["commands::config"], ["args".to_owned()].into());
        assert_eq!(
            module_name(Path::new("/w/crates/cli/src/commands/config/mod.rs")),
            "commands::config"
        );
        assert_eq!(module_name(Path::new("/w/crates/cli/src/lib.rs")), "");
    }

    #[test]
    fn super_paths_and_use_groups_over_lines_are_followed() {
        // `manager::act` and `manager::plan` name each other through `super::`, one of them in
        // a group that rustfmt spread over lines: a cycle the old line scan could not see.
        let modules: BTreeMap<String, String> = [
            ("manager", "mod act;\nmod plan;\n"),
            ("manager::act", "use super::plan::Plan;\n"),
            (
                "manager::plan",
                "use super::{\n    act::{self, Act as A},\n    Other,\n};\n",
            ),
            ("estimate", "use crate::{\n    pools::Pool,\n};\n"),
            ("pools", "fn f() { crate::estimate::Estimate::new() }\n"),
        ]
        .into_iter()
        .map(|(n, t)| (n.to_owned(), code(t)))
        .collect();
        let graph = imports(&modules);
        assert_eq!(graph["manager::act"], ["manager::plan".to_owned()].into());
        assert_eq!(graph["manager::plan"], ["manager::act".to_owned()].into());
        assert_eq!(graph["estimate"], ["pools".to_owned()].into());
        assert!(cycle(&graph).is_some());
        assert_eq!(
            named_paths("a::b", "use super::super::x::{y, z::{self, W}};"),
            ["x::y".to_owned(), "x::z".to_owned(), "x::z::W".to_owned()].into()
        );
    }

    #[test]
    fn markup_and_application_dependencies_are_found_in_core() {
        assert_eq!(markup(&code("let s = \"<svg x>\";\n")), ["<svg"]);
        assert!(markup(&code("#[cfg(test)]\nconst T: &str = \"<svg\";\n")).is_empty());
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
            sizes(&production(&text).0),
            [format!(
                "line 4: a function of {} lines (at most {MAX_FN_LINES})",
                MAX_FN_LINES + 2
            )]
        );
        let big = "const A: u8 = 0;\n".repeat(MAX_FILE_LINES + 1);
        assert_eq!(
            sizes(&production(&big).0),
            [format!(
                "{} non-test lines (at most {MAX_FILE_LINES})",
                MAX_FILE_LINES + 1
            )]
        );
    }

    #[test]
    fn a_test_module_declaration_does_not_end_the_count() {
        // A one-line `#[cfg(test)] mod props;` near the top used to end the count there: the
        // 600 lines after it went unseen.
        let long = "const A: u8 = 0;\n".repeat(MAX_FILE_LINES);
        let text = format!(
            "#[cfg(test)]\nmod props;\n{long}#[cfg(test)]\nmod tests {{\n    fn t() {{}}\n}}\nconst B: u8 = 1;\n"
        );
        let (lines, test_modules) = production(&text);
        assert_eq!(lines.len(), MAX_FILE_LINES + 1);
        assert_eq!(test_modules, ["props"]);
        assert_eq!(
            lines.last().unwrap(),
            &(MAX_FILE_LINES + 7, "const B: u8 = 1;".to_owned())
        );
        assert_eq!(sizes(&lines).len(), 1);
        // A one-line test item ends where it ends: the next item counts.
        let (lines, _) = production("#[cfg(test)]\nfn t() {}\nfn f() {\n}\n");
        assert_eq!(lines.len(), 2, "{lines:?}");
    }
}
