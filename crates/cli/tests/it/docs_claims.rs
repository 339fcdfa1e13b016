//! The documents' claims that drift when the code changes (README.md and the book's pages,
//! `docs/src`), checked against the source tree and the real binary: the log targets they name
//! are modules or targets of the source, every flag they name is one the binary takes (or
//! another program's, listed here), and every config file they show passes `config check`. The reference pages themselves are generated
//! (`reference.rs`). Each assertion names what to fix.
//!
//! Against: the real `cl-worker-manager` binary and the source tree; no service.

// The flags' check needs every backend's --help; without them its helpers are unused.
#![cfg_attr(
    not(all(
        feature = "slurm",
        feature = "aws",
        feature = "azure",
        feature = "k8s",
        feature = "gce"
    )),
    allow(dead_code)
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Flags clap adds to every command; the README does not list them.
const CLAP_OWN: [&str; 2] = ["--help", "--version"];

/// Not flags: the documents show them as an unambiguous (`--max-w`) and an ambiguous
/// (`--max`) prefix of real ones.
const PREFIX_EXAMPLES: [&str; 2] = ["--max-w", "--max"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every page of the book, each with its path.
fn documents() -> Vec<(PathBuf, String)> {
    let mut paths = vec![repo().join("README.md")];
    let mut dirs = vec![repo().join("docs/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs/src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                paths.push(path);
            }
        }
    }
    paths.sort();
    (paths.into_iter())
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect()
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
        // `--worker-*` names a family of flags, not one.
        if bytes.get(end) != Some(&b'*') {
            flags.insert(text[at..end].trim_end_matches('-').to_owned());
        }
        i = end;
    }
    flags
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

/// Every `a::b…` path the documents name whose first part is a crate of this workspace or
/// starts with `codalab_wm` (the targets the source sets itself, such as `codalab_wm::event`).
fn named_targets(text: &str, crates: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let prefixes = crates.keys().map(String::as_str).chain(["codalab_wm"]);
    let mut found = BTreeSet::new();
    for prefix in prefixes {
        for (at, _) in text.match_indices(prefix) {
            if at > 0 && (ident(bytes[at - 1]) || bytes[at - 1] == b':') {
                continue;
            }
            let end = (at..bytes.len())
                .find(|&k| !(ident(bytes[k]) || bytes[k] == b':'))
                .unwrap_or(bytes.len());
            let path = text[at..end].trim_end_matches(':');
            if path.contains("::") {
                found.insert(path.to_owned());
            }
        }
    }
    found
}

/// Every log target the documents name (`codalab_wm_core::manager::logs:` in a log line, "target
/// `codalab_wm::event`", a module it points to) is a module of the source tree, which is the
/// target of what that module logs, or a target the source sets itself (`target: "…"`). A
/// filter (`CODALAB_WM_LOG`) or a log-shipper rule copied from them then matches.
#[test]
fn log_targets_the_documents_name_are_modules_or_targets_the_source_sets() {
    let text: String = documents().into_iter().map(|(_, t)| t).collect();
    let crates = crate_roots();
    let named = named_targets(&text, &crates);
    assert!(
        !named.is_empty(),
        "found no log target in the documents (crates: {:?})",
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
        "the documents name log targets that are no module of the source tree and no `target: \"…\"` \
         of it: {unknown:?} (of {named:?})"
    );
}

/// Flags of other programs that the documents name in their prose (`cl`, `cl-worker`,
/// `sbatch`, `kubectl`, `docker`, `cargo` …), each with whose it is.
const OTHERS: &[(&str, &str)] = &[
    ("--all-targets", "cargo"),
    ("--check", "cargo fmt"),
    ("--lib", "cargo test"),
    ("--features", "cargo"),
    ("--locked", "cargo"),
    ("--open", "cargo doc"),
    ("--test", "cargo test"),
    ("--binary", "cargo xtask image"),
    ("--exit-when-done", "cargo xtask demo"),
    ("--minutes", "cargo xtask soak"),
    ("--quick", "cargo xtask bench"),
    ("--seconds", "cargo xtask fuzz"),
    ("--id", "cl-worker"),
    ("--preemptible", "cl-worker"),
    ("--request-gpus", "cl run"),
    ("--request-queue", "cl run"),
    ("--parallel-run-quota", "cl uedit"),
    ("--worker-timeout-seconds", "cl-bundle-manager"),
    ("--comment", "sbatch"),
    ("--gres", "sbatch"),
    ("--export", "sbatch"),
    ("--start", "squeue"),
    ("--jobs", "aws batch describe-jobs"),
    ("--read-only", "docker run"),
    ("--now", "systemctl enable"),
    ("--since", "journalctl"),
    ("--home-dir", "useradd"),
    ("--no-create-home", "useradd"),
    ("--shell", "useradd"),
    ("--system", "useradd"),
    ("--user-group", "useradd"),
];

/// Every long flag the documents name is one the binary takes (some command's `--help`) or
/// another program's ([`OTHERS`]): in their prose, and on the `cl-worker-manager` lines of
/// their code blocks (with the lines a `\` continues). A flag renamed in the code, or a typo
/// in a page, fails here with the page that names it.
#[cfg(all(
    feature = "slurm",
    feature = "aws",
    feature = "azure",
    feature = "k8s",
    feature = "gce"
))]
#[test]
fn every_flag_the_documents_name_is_the_binarys_or_another_programs() {
    let mut served: BTreeSet<String> = BTreeSet::new();
    for (_, help) in super::usage::helps() {
        served.extend(help_flags(&help).into_values().flatten());
    }
    served.extend(CLAP_OWN.map(str::to_owned));
    for prefix in PREFIX_EXAMPLES {
        assert!(
            !served.contains(prefix) && served.iter().any(|f| f.starts_with(prefix)),
            "{prefix} must stay a mere prefix of real flags, or leave PREFIX_EXAMPLES"
        );
    }
    let others: BTreeSet<&str> = OTHERS.iter().map(|(f, _)| *f).collect();
    let mut unknown = Vec::new();
    for (path, text) in documents() {
        let named = long_flags(&outside_code(&text));
        let ours = long_flags(&manager_lines(&text));
        for flag in named.union(&ours) {
            let known = served.contains(flag)
                || (!ours.contains(flag) && others.contains(flag.as_str()))
                || PREFIX_EXAMPLES.contains(&flag.as_str());
            if !known {
                let shown = path
                    .strip_prefix(repo())
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                unknown.push(format!("{shown}: {flag}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "flags no `cl-worker-manager … --help` offers (fix the page, or list another \
         program's flag in OTHERS):\n  {}",
        unknown.join("\n  ")
    );
}

/// Whether a shell `line` runs `cl-worker-manager` (after variable assignments, `sudo` or
/// `exec`): not one that names it as an argument (`journalctl -u cl-worker-manager`).
fn runs_the_manager(line: &str) -> bool {
    let assignment = |word: &str| word.contains('=') && !word.starts_with('-');
    let program = (line.split_whitespace())
        .find(|word| !assignment(word) && !["$", "sudo", "exec"].contains(word));
    program.is_some_and(|p| p == "cl-worker-manager" || p.ends_with("/cl-worker-manager"))
}

/// The lines of `text`'s code blocks that run `cl-worker-manager`, with the lines a `\`
/// continues.
fn manager_lines(text: &str) -> String {
    let mut fenced = false;
    let mut continued = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continued = false;
            continue;
        }
        let runs = fenced && (continued || runs_the_manager(line));
        if runs {
            let command = line.split(" | ").next().unwrap_or_default();
            let command = command.split('#').next().unwrap_or_default();
            out.push_str(command);
            out.push('\n');
        }
        continued = runs && line.trim_end().ends_with('\\');
    }
    out
}

/// Config files the documents show that `config check FILE` cannot pass as they are, with why
/// (the page says where the rest comes from).
const CONFIG_NOT_WHOLE: &[(&str, &str)] = &[(
    "platforms/azure-batch.md",
    "the account key comes from CODALAB_WM_AZURE_BATCH__ACCOUNT_KEY, which `config check` \
     does not read",
)];

/// Every ```toml block of the documents is a config file `config check` passes (the real
/// binary, contacting nothing): an admin who copies one gets a file that runs.
#[test]
fn every_config_file_the_documents_show_passes_config_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    let mut checked = 0;
    for (path, text) in documents() {
        let shown = path
            .strip_prefix(repo())
            .unwrap_or(&path)
            .display()
            .to_string();
        let excused = CONFIG_NOT_WHOLE
            .iter()
            .any(|(page, _)| shown.ends_with(page));
        for (n, block) in toml_blocks(&text).into_iter().enumerate() {
            let file = dir.path().join(format!("{checked}.toml"));
            std::fs::write(&file, &block).unwrap();
            checked += 1;
            let output = Command::new(env!("CARGO_BIN_EXE_cl-worker-manager"))
                .args(["config", "check"])
                .arg(&file)
                .env("CODALAB_USERNAME", "codalab")
                .env_remove("CODALAB_WM_CONFIG")
                .output()
                .expect("run cl-worker-manager");
            if output.status.success() == excused {
                let verdict = String::from_utf8_lossy(&output.stdout).to_string()
                    + &String::from_utf8_lossy(&output.stderr);
                failed.push(format!("{shown}, toml block {}: {verdict}\n{block}", n + 1));
            }
        }
    }
    assert!(
        checked >= 10,
        "only {checked} config files found in the documents"
    );
    assert!(
        failed.is_empty(),
        "config files in the documents that `config check` refuses (or an excused one it \
         passes: leave CONFIG_NOT_WHOLE):\n{}",
        failed.join("\n")
    );
}

/// The ```toml blocks of a Markdown `text`.
fn toml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```");
        match (&mut current, fence) {
            (None, true) if line.trim_start().starts_with("```toml") => {
                current = Some(String::new())
            }
            (Some(_), true) => blocks.extend(current.take()),
            (Some(block), false) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    blocks
}
