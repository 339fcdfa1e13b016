//! README.md claims that drift when the code changes, checked against the source tree and the
//! real binary: the log targets it names, the flags of its tables against `--help` (global,
//! per backend, the operator's). Each assertion names what to fix.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The subcommands that are tools, not backends (every other subcommand is a backend, which
/// must have its row in the README's table "Backends and their flags").
const TOOLS: [&str; 8] = [
    "status",
    "simulate",
    "advise",
    "config",
    "down",
    "operator",
    "completions",
    "help",
];

/// Flags clap adds to every command; the README does not list them.
const CLAP_OWN: [&str; 2] = ["--help", "--version"];

/// Not flags: the "## Flags" section shows them as an unambiguous (`--max-w`) and an
/// ambiguous (`--max`) prefix of real ones.
const PREFIX_EXAMPLES: [&str; 2] = ["--max-w", "--max"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// The text from the line `heading` to the next heading of the same level (or the end).
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README.md has no section `{heading}`"))
        + 1;
    let level = heading.split(' ').next().unwrap_or("##");
    let rest = &text[start + heading.len()..];
    let end = rest
        .find(&format!("\n{level} "))
        .map_or(text.len(), |i| start + heading.len() + i + 1);
    &text[start..end]
}

/// `text` without its fenced code blocks (their flags are other programs' or examples).
fn outside_code(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every long flag (`--name`) written in `text`.
fn long_flags(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    let mut flags = BTreeSet::new();
    let mut i = 0;
    while let Some(at) = text[i..].find("--").map(|j| i + j) {
        i = at + 2;
        let starts = at == 0 || !word(bytes[at - 1]);
        if !starts || !bytes.get(i).is_some_and(u8::is_ascii_lowercase) {
            continue;
        }
        let end = (i..bytes.len())
            .find(|&k| {
                !(bytes[k].is_ascii_lowercase() || bytes[k].is_ascii_digit() || bytes[k] == b'-')
            })
            .unwrap_or(bytes.len());
        flags.insert(text[at..end].trim_end_matches('-').to_owned());
        i = end;
    }
    flags
}

/// `cl-worker-manager ARGS` (a `--help`): its standard output.
fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_cl-worker-manager"))
        .args(args)
        .env_remove("COLUMNS")
        .output()
        .expect("run cl-worker-manager");
    assert!(
        output.status.success(),
        "cl-worker-manager {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 help")
}

/// The flags of a `--help` text by its sections (`Options:`, `Manager process options:` …).
/// A flag's own line is indented by at most 6 spaces; its description, wrapped, by more.
fn help_flags(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut sections: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if indent == 0 && line.ends_with(':') {
            current = line.trim_end_matches(':').to_owned();
        } else if (1..=6).contains(&indent) && line.trim_start().starts_with('-') {
            let flag = line
                .trim_start()
                .split([' ', '[', '<', '='])
                .find(|w| w.starts_with("--"));
            if let Some(flag) = flag {
                sections
                    .entry(current.clone())
                    .or_default()
                    .insert(flag.trim_end_matches(',').to_owned());
            }
        }
    }
    sections
}

/// The subcommands of a `--help` text (its `Commands:` section).
fn help_commands(text: &str) -> BTreeSet<String> {
    let start = text.find("\nCommands:\n").expect("a Commands: section") + 11;
    text[start..]
        .lines()
        .take_while(|l| l.starts_with(' '))
        .filter(|l| l.starts_with("  ") && !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn without(set: BTreeSet<String>, drop: &[&str]) -> BTreeSet<String> {
    set.into_iter()
        .filter(|f| !drop.contains(&f.as_str()))
        .collect()
}

/// Asserts that `readme` and `help` hold the same flags, naming the difference both ways.
fn same_flags(what: &str, readme: &BTreeSet<String>, help: &BTreeSet<String>) {
    let missing: Vec<_> = help.difference(readme).collect();
    let unknown: Vec<_> = readme.difference(help).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{what}: README.md lacks {missing:?} (in --help) and names {unknown:?} (not in --help)"
    );
}

/// The crates a log target can start with, by the name `tracing` gives their modules: a
/// library by its package name, a binary by its own; with the directory of their sources.
fn crate_roots() -> BTreeMap<String, PathBuf> {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix('"')?.strip_suffix("\","))
        .filter(|m| m.starts_with("crates/"));
    let mut roots = BTreeMap::new();
    for member in members {
        let dir = repo().join(member);
        let text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("a member's Cargo.toml");
        let mut table = String::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                table = line.to_owned();
            }
            let Some(name) = line
                .strip_prefix("name = \"")
                .and_then(|n| n.strip_suffix('"'))
            else {
                continue;
            };
            let is_lib = table == "[package]" && dir.join("src/lib.rs").exists();
            if is_lib || table == "[[bin]]" {
                roots.insert(name.replace('-', "_"), dir.join("src"));
            }
        }
    }
    roots
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `a::b…` path the README names whose first part is a crate of this workspace or
/// starts with `codalab_wm` (the targets the source sets itself, such as `codalab_wm::event`).
fn named_targets(readme: &str, crates: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let bytes = readme.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let prefixes = crates.keys().map(String::as_str).chain(["codalab_wm"]);
    let mut found = BTreeSet::new();
    for prefix in prefixes {
        for (at, _) in readme.match_indices(prefix) {
            if at > 0 && (ident(bytes[at - 1]) || bytes[at - 1] == b':') {
                continue;
            }
            let end = (at..bytes.len())
                .find(|&k| !(ident(bytes[k]) || bytes[k] == b':'))
                .unwrap_or(bytes.len());
            let path = readme[at..end].trim_end_matches(':');
            if path.contains("::") {
                found.insert(path.to_owned());
            }
        }
    }
    found
}

/// Every log target the README names (`codalab_wm_core::manager::logs:` in a log line, "target
/// `codalab_wm::event`", a module it points to) is a module of the source tree, which is the
/// target of what that module logs, or a target the source sets itself (`target: "…"`). A
/// filter (`CODALAB_WM_LOG`) or a log-shipper rule copied from the README then matches.
#[test]
fn readme_log_targets_are_modules_or_targets_the_source_sets() {
    let readme = readme();
    let crates = crate_roots();
    let named = named_targets(&readme, &crates);
    assert!(
        !named.is_empty(),
        "found no log target in README.md (crates: {:?})",
        crates.keys().collect::<Vec<_>>()
    );
    let mut sources = Vec::new();
    rust_files(&repo().join("crates"), &mut sources);
    let sources: Vec<String> = sources
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    let unknown: Vec<&String> = named
        .iter()
        .filter(|target| {
            let mut parts = target.split("::");
            let root = crates.get(parts.next().unwrap_or_default());
            let module: PathBuf = parts.collect();
            let exists = root.is_some_and(|root| {
                root.join(&module).with_extension("rs").is_file()
                    || root.join(&module).join("mod.rs").is_file()
            });
            let set = format!("target: \"{target}\"");
            !exists && !sources.iter().any(|s| s.contains(&set))
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "README.md names log targets that are no module of the source tree and no `target: \"…\"` \
         of it: {unknown:?} (of {named:?})"
    );
}

/// The global flags the "## Flags" section names (its table and the paragraphs around it, up to
/// the backends' table) are exactly those of `cl-worker-manager --help`.
#[test]
fn readme_global_flags_are_those_of_help() {
    let readme = readme();
    let flags = section(&readme, "## Flags");
    let global = &flags[..flags
        .find("Backends and their flags")
        .expect("the backends' table in ## Flags")];
    let named = without(long_flags(&outside_code(global)), &PREFIX_EXAMPLES);
    let top = help(&["--help"]);
    let served: BTreeSet<String> = help_flags(&top).into_values().flatten().collect();
    let served = without(served, &CLAP_OWN);
    for prefix in PREFIX_EXAMPLES {
        assert!(
            !served.contains(prefix) && served.iter().any(|f| f.starts_with(prefix)),
            "{prefix} must stay a mere prefix of real flags, or leave PREFIX_EXAMPLES"
        );
    }
    same_flags("## Flags, global flags", &named, &served);
}

/// Each row of the table "Backends and their flags" lists exactly the flags of that backend's
/// own section of `cl-worker-manager BACKEND --help`, and every backend of the binary has a
/// row; each backend also takes the manager's process flags after its name, as the README says.
#[test]
fn readme_backend_table_matches_each_backends_help() {
    let readme = readme();
    let flags = section(&readme, "## Flags");
    let table = &flags[flags
        .find("Backends and their flags")
        .expect("the backends' table")..];
    let rows: BTreeMap<String, BTreeSet<String>> = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|row| {
            let name = row.strip_prefix("| `")?.split('`').next()?.to_owned();
            let cells = row.splitn(3, '|').nth(2)?;
            Some((name, long_flags(cells)))
        })
        .collect();
    let top = help(&["--help"]);
    let process = help_flags(&top)
        .remove("Manager process options")
        .expect("a Manager process options section in --help");
    let backends = without(help_commands(&top), &TOOLS);
    assert!(!backends.is_empty(), "no backend among {top}");
    for backend in &backends {
        let row = rows.get(backend).unwrap_or_else(|| {
            panic!("README.md's table \"Backends and their flags\" has no row `{backend}`")
        });
        let mut sections = help_flags(&help(&[backend, "--help"]));
        let own = without(sections.remove("Options").unwrap_or_default(), &CLAP_OWN);
        same_flags(&format!("the `{backend}` row"), row, &own);
        assert_eq!(
            sections.remove("Manager process options").as_ref(),
            Some(&process),
            "`{backend} --help`: the manager's process flags after the backend name"
        );
    }
    if cfg!(feature = "full") {
        let extra: Vec<_> = rows.keys().filter(|r| !backends.contains(*r)).collect();
        assert!(
            extra.is_empty(),
            "README.md has rows for no backend: {extra:?}"
        );
    }
}

/// The operator's flags the README names are those of `cl-worker-manager operator --help`, and
/// its table of them lists every one.
#[cfg(feature = "k8s")]
#[test]
fn readme_operator_flags_are_those_of_help() {
    let readme = readme();
    let text = outside_code(section(&readme, "## On Kubernetes: the operator"));
    let table: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("| `--"))
        .flat_map(|row| long_flags(&format!("--{}", row.split('|').next().unwrap_or_default())))
        .collect();
    let served = help_flags(&help(&["operator", "--help"]))
        .into_values()
        .flatten()
        .collect();
    let served = without(served, &CLAP_OWN);
    same_flags("the operator's flags table", &table, &served);
    let named = without(long_flags(&text), &CLAP_OWN);
    let unknown: Vec<_> = named.difference(&served).collect();
    assert!(
        unknown.is_empty(),
        "the operator section names flags `operator --help` lacks: {unknown:?}"
    );
}
