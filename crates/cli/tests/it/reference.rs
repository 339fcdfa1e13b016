//! The book's reference pages that the program itself makes, generated here from the real
//! binary and compared with the files checked in (`UPDATE_GOLDEN=1` rewrites them):
//! - `docs/src/reference/flags.md`: the `--help` of every command (with every backend built in);
//! - `docs/src/reference/config.md`: every config key, its default and its help, read from what
//!   `config init` writes (itself generated from the types `run` deserializes).
//!
//! Against: the real `cl-worker-manager` binary; no service.

#![cfg(all(
    feature = "slurm",
    feature = "aws",
    feature = "azure",
    feature = "k8s",
    feature = "gce"
))]

use super::support::repo;
use super::usage::{helps, manager, run};
use codalab_wm_core::testing::check_generated;
use std::fmt::Write;

const REGENERATE: &str = "cargo test -p codalab-wm --features full --test it -- reference::";

/// Every backend compiled in, as `config init --backend` names them (its `--help`'s possible
/// values).
fn backends() -> Vec<String> {
    let help = stdout(&["config", "init", "--help"]);
    let values = help
        .split("[possible values: ")
        .nth(1)
        .expect("possible values");
    let values = values.split(']').next().unwrap_or_default();
    values.split(',').map(|v| v.trim().to_owned()).collect()
}

fn stdout(args: &[&str]) -> String {
    let output = run(&mut manager(args));
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn generated_note(what: &str) -> String {
    format!(
        "<!-- Generated from {what} by `{REGENERATE}` (UPDATE_GOLDEN=1 rewrites it): do not edit. -->\n\n"
    )
}

#[test]
fn the_flags_reference_is_every_commands_help() {
    let mut page = String::from("# Flags\n\n");
    page += &generated_note("`cl-worker-manager … --help`");
    page += "Every command's `--help`, as the program prints it. Every flag of the manager can \
             also be set in the config file ([Configuration keys](config.md)) or as a \
             `CODALAB_WM_*` environment variable; flags win over the environment, which wins \
             over the file. The log filter that `--verbose` sets can be replaced by \
             `CODALAB_WM_LOG`, a tracing filter directive (`CODALAB_WM_LOG=codalab_wm_core=debug`).\n";
    for (path, help) in helps() {
        let title = std::iter::once("cl-worker-manager")
            .chain(path.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        let _ = write!(page, "\n## `{title}`\n\n```text\n{help}```\n");
    }
    let path = repo().join("docs/src/reference/flags.md");
    check_generated(&path, &page, REGENERATE);
}

/// One key of a config table, as `config init` writes it.
#[derive(Debug, PartialEq)]
struct Key {
    name: String,
    /// `required`, the default, or how it is unset.
    default: String,
    help: String,
}

/// A table of the config file: its header (`[worker]`, or empty for the top level), what
/// `config init` says of it, its keys.
#[derive(Debug, Default)]
struct Table {
    header: String,
    about: String,
    keys: Vec<Key>,
}

/// The tables of a template `config init` wrote: a comment line (or lines) of help, then
/// `key = value` (a default), `# key = example` (unset) or `key = XXX-…` (required);
/// `# ---- about ----` and a `[table]` or `# [table]` header open a table.
fn tables(template: &str) -> Vec<Table> {
    let mut tables = vec![Table::default()];
    let mut help: Vec<&str> = Vec::new();
    for line in template.lines() {
        let uncommented = line.strip_prefix("# ").unwrap_or(line);
        if let Some(about) = line.strip_prefix("# ---- ") {
            let about = about.trim_end_matches(" ----").to_owned();
            tables.push(Table {
                about,
                ..Table::default()
            });
            help.clear();
        } else if uncommented.starts_with('[') {
            let table = tables.last_mut().unwrap();
            if !table.header.is_empty() || !table.keys.is_empty() {
                tables.push(Table::default());
            }
            let table = tables.last_mut().unwrap();
            table.header = uncommented.to_owned();
            if table.about.is_empty() {
                table.about = help.join(" ").trim_end_matches(':').to_owned();
            }
            help.clear();
        } else if let Some((name, value)) = key_line(uncommented) {
            let commented = line.starts_with('#');
            let text = help.join(" ");
            help.clear();
            tables
                .last_mut()
                .unwrap()
                .keys
                .push(key(name, value, commented, &text));
        } else if line.starts_with('#') {
            help.push(line.trim_start_matches('#').trim());
        } else {
            help.clear();
        }
    }
    tables.retain(|t| !t.keys.is_empty());
    tables
}

/// `name = value` with a lowercase key.
fn key_line(line: &str) -> Option<(&str, &str)> {
    let (name, value) = line.split_once(" = ")?;
    let is_key = !name.is_empty()
        && (name.bytes()).all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    is_key.then_some((name, value))
}

fn key(name: &str, value: &str, commented: bool, help: &str) -> Key {
    let (help, given) = match help.split_once(" [default: ") {
        Some((text, rest)) => (text, rest.split_once(']').map(|(d, _)| d)),
        None => (help, None),
    };
    let help = (help.trim_end_matches(" (unset by default)"))
        .trim_end_matches(" (required)")
        .trim_end_matches(':')
        .to_owned();
    let default = if value.contains(codalab_wm_app::config::schema::PLACEHOLDER) {
        "required".to_owned()
    } else if !commented {
        format!("`{value}`")
    } else {
        match given {
            Some(default) => format!("{default} (e.g. `{value}`)"),
            None => format!("unset (e.g. `{value}`)"),
        }
    };
    Key {
        name: name.to_owned(),
        default,
        help,
    }
}

fn write_table(page: &mut String, table: &Table) {
    let header = match table.header.as_str() {
        "" => "top level".to_owned(),
        header => format!("`{header}`"),
    };
    let _ = write!(page, "\n## {header}\n\n");
    if !table.about.is_empty() {
        let _ = writeln!(page, "{}.\n", capitalised(&table.about));
    }
    page.push_str("| key | default | meaning |\n|---|---|---|\n");
    for key in &table.keys {
        let _ = writeln!(
            page,
            "| `{}` | {} | {} |",
            key.name,
            key.default.replace('|', "\\|"),
            key.help.replace('|', "\\|")
        );
    }
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    (chars.next().into_iter())
        .flat_map(char::to_uppercase)
        .chain(chars)
        .collect()
}

#[test]
fn the_config_reference_is_what_config_init_writes() {
    let mut page = String::from("# Configuration keys\n\n");
    page += &generated_note("`cl-worker-manager config init`");
    page += "Every key of the config file (`--config FILE`), with its default and its help. \
             Settings are layered: built-in defaults, then the file, then `CODALAB_WM_*` \
             environment variables, then flags. `cl-worker-manager config init --backend NAME` \
             writes a commented template of them; `config check FILE` checks one.\n";
    let mut written = std::collections::BTreeSet::new();
    let backends = backends();
    assert!(backends.len() >= 6, "{backends:?}");
    let mut templates: Vec<String> = (backends.iter())
        .map(|b| stdout(&["config", "init", "--backend", b]))
        .collect();
    templates.push(stdout(&["config", "init", "--pools"]));
    let every = templates.iter().flat_map(|t| tables(t));
    for table in every {
        if table.header.starts_with("[pools.") || !written.insert(table.header.clone()) {
            continue;
        }
        write_table(&mut page, &table);
    }
    for table in [
        "",
        "[worker]",
        "[[pools]]",
        "[[notify]]",
        "[slurm_batch]",
        "[gce]",
    ] {
        assert!(written.contains(table), "no table `{table}` in {written:?}");
    }
    let path = repo().join("docs/src/reference/config.md");
    check_generated(&path, &page, REGENERATE);
}

/// The parser of the template, on the shapes `config init` writes.
#[test]
fn a_templates_keys_are_read_with_their_defaults() {
    let template = "# ---- global settings ----\n\
                    # URL of the server\nserver = \"https://x\"\n\
                    # The worker's URL [default: --server]\n# worker_server = \"http://y\"\n\
                    # Its name (required)\nname = \"XXX-CUSTOMIZE-THIS-XXX\"\n\n\
                    # Entra auth instead of the key:\n# [azure_batch.entra]\n\
                    # The tenant\n# tenant_id = \"\"\n";
    let tables = tables(template);
    assert_eq!(tables.len(), 2, "{tables:?}");
    assert_eq!(
        (tables[0].about.as_str(), tables[1].header.as_str()),
        ("global settings", "[azure_batch.entra]")
    );
    assert_eq!(tables[1].about, "Entra auth instead of the key");
    let defaults: Vec<(&str, &str)> = (tables[0].keys.iter())
        .map(|k| (k.name.as_str(), k.default.as_str()))
        .collect();
    assert_eq!(
        defaults,
        [
            ("server", "`\"https://x\"`"),
            ("worker_server", "--server (e.g. `\"http://y\"`)"),
            ("name", "required")
        ]
    );
    assert_eq!(tables[0].keys[1].help, "The worker's URL");
}
