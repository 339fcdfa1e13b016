//! The templates of `config init` cannot drift from the code: every key of every table (read
//! from the backends' own config types) appears in them with its help, every key a template
//! holds (set or commented out) is accepted, and a filled template lays out (settings, pools,
//! backend tables checked by each backend) exactly as `run` would. Templates come from the
//! real binary; the tables' keys from the backend crates.

use codalab_wm_app::config::check::{self, Kind};
use codalab_wm_app::config::schema::{self, Program};
use codalab_wm_app::config::template;
use codalab_wm_core::describe::{BackendKind, Catalogue, Entry, PLACEHOLDER};
use codalab_wm_core::layout::Layout;
use codalab_wm_core::settings::Layers;
use std::collections::HashMap;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

/// The backends compiled into the binary under test (each crate's own description).
fn kinds() -> Vec<&'static dyn BackendKind> {
    #[allow(unused_mut)]
    let mut kinds: Vec<&'static dyn BackendKind> = vec![&codalab_wm_core::local::KIND];
    #[cfg(feature = "slurm")]
    kinds.push(&codalab_wm_slurm::KIND);
    #[cfg(feature = "aws")]
    kinds.push(&codalab_wm_aws::KIND);
    #[cfg(feature = "azure")]
    kinds.push(&codalab_wm_azure::KIND);
    #[cfg(feature = "k8s")]
    kinds.push(&codalab_wm_k8s::KIND);
    #[cfg(feature = "gce")]
    kinds.push(&codalab_wm_gce::KIND);
    kinds
}

fn program() -> Program {
    let entries = kinds()
        .into_iter()
        .map(|kind| Entry {
            name: kind.name(),
            table: kind.table(),
            feature: "",
            kind: Some(kind),
        })
        .collect();
    Program {
        catalogue: Catalogue::new(entries),
        top_docs: HashMap::new(),
        worker_docs: HashMap::new(),
    }
}

fn init(backend: &str, pools: bool) -> String {
    let mut command = Command::new(BIN);
    command.args(["config", "init", "--backend", backend]);
    if pools {
        command.arg("--pools");
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

fn filled(text: &str) -> String {
    text.replace(PLACEHOLDER, "filled")
}

/// The help line above `key = …` or `# key = …`, when the key is there.
fn doc_of<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|line| {
        line.trim_start_matches("# ")
            .starts_with(&format!("{key} = "))
    })?;
    Some(lines[at.checked_sub(1)?].trim_start_matches('#').trim())
}

#[test]
fn every_key_of_every_table_is_in_the_template_with_its_help() {
    let program = program();
    for kind in kinds() {
        let backend = kind.name();
        let (single, pools) = (init(backend, false), init(backend, true));
        let own = [schema::top(&program), schema::worker(&program)];
        for table in &own {
            for key in schema::options(table, &[]) {
                let doc = doc_of(&single, key).unwrap_or_else(|| panic!("{backend}: `{key}`"));
                assert!(!doc.is_empty(), "{backend}: `{key}` has no help");
            }
        }
        for key in schema::options(&schema::pools(), &[]) {
            assert!(
                doc_of(&pools, key).is_some(),
                "{backend}: [[pools]] `{key}`"
            );
        }
        let table = kind.schema();
        let nested: Vec<&str> = kind.subtables().iter().map(|(n, _)| *n).collect();
        for key in schema::options(&table, &nested) {
            let doc = doc_of(&single, key).unwrap_or_else(|| panic!("{backend}: `{key}`"));
            assert!(
                !doc.is_empty(),
                "{backend}: [{}] `{key}` has no help",
                table.name
            );
            assert!(doc_of(&pools, key).is_some(), "{backend} pools: `{key}`");
        }
        for (name, fields) in kind.subtables() {
            assert!(single.contains(&format!("# [{}.{name}]", table.name)));
            for key in fields {
                assert!(doc_of(&single, key).is_some(), "[{name}] `{key}`");
            }
        }
    }
}

#[test]
fn every_filled_template_lays_out_as_run_would_and_passes_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let program = program();
    for kind in kinds() {
        for pools in [false, true] {
            let text = filled(&init(kind.name(), pools));
            let path = dir.path().join(format!("{}-{pools}.toml", kind.name()));
            std::fs::write(&path, &text).unwrap();
            let layers = Layers {
                file: Some(path),
                flags: figment::Figment::new(),
                backend: None,
            };
            let what = format!("{} pools={pools}", kind.name());
            let settings = layers
                .settings(&program.catalogue)
                .unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
            let layout = Layout::new(&settings, &layers, &program.catalogue)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(layout.pools.len(), if pools { 2 } else { 1 }, "{what}");
            let found = check::check(&text, &program);
            assert!(found.is_empty(), "{what}: {found:?}\n{text}");
        }
    }
}

#[test]
fn every_commented_out_key_is_accepted_once_uncommented() {
    let program = program();
    for kind in kinds() {
        for pools in [false, true] {
            let text = filled(&init(kind.name(), pools));
            let lines: Vec<&str> = text.lines().collect();
            for (index, line) in lines.iter().enumerate() {
                let Some(option) = line.strip_prefix("# ") else {
                    continue;
                };
                let Some((key, _)) = option.split_once(" = ") else {
                    continue;
                };
                if !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                    continue;
                }
                let mut edited = lines.clone();
                edited[index] = option;
                // A key of a commented-out sub-table needs its header too.
                let header = lines[..index]
                    .iter()
                    .rposition(|l| l.starts_with('[') || l.starts_with("# ["));
                if let Some(at) = header.filter(|at| lines[*at].starts_with("# [")) {
                    edited[at] = &lines[at][2..];
                }
                let bad: Vec<_> = check::check(&edited.join("\n"), &program)
                    .into_iter()
                    .filter(|d| matches!(d.kind, Kind::UnknownKey | Kind::WrongType | Kind::Syntax))
                    .collect();
                assert!(
                    bad.is_empty(),
                    "{} pools={pools}: `{option}`: {bad:?}",
                    kind.name()
                );
            }
        }
    }
}

#[test]
fn placeholders_are_where_required_values_go() {
    let kind = kinds().into_iter().find(|k| k.name() == "slurm-batch");
    let Some(kind) = kind else { return };
    let text = template::render(kind, false, &program());
    let found: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(PLACEHOLDER) && !l.starts_with('#'))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(found.len(), 1);
    assert_eq!(
        text.lines().nth(found[0] - 1),
        Some("partition = \"XXX-CUSTOMIZE-THIS-XXX\"")
    );
    let diagnostics = check::check(&text, &program());
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(
        (diagnostics[0].line, diagnostics[0].kind),
        (found[0], Kind::Placeholder)
    );
}

/// The defaults a template writes are the ones the code gives when the key is absent.
#[test]
fn template_defaults_are_the_code_s() {
    use figment::providers::{Format, Serialized, Toml};
    for kind in kinds() {
        let text = filled(&init(kind.name(), false));
        let from_template = kind
            .read(&figment::Figment::from(Toml::string(&text)), true)
            .unwrap();
        let required: serde_json::Map<String, serde_json::Value> = kind
            .required()
            .iter()
            .map(|(k, _)| ((*k).to_owned(), from_template.get(k).cloned().unwrap()))
            .collect();
        let bare = figment::Figment::from(Serialized::default(kind.table(), required));
        let from_code = kind.read(&bare, true).unwrap();
        assert_eq!(
            from_template.values(),
            from_code.values(),
            "{}",
            kind.name()
        );
    }
}

#[test]
fn values_render_as_toml() {
    use figment::providers::{Format, Toml};
    use serde_json::json;
    let quoted = template::toml_value(&json!("a\"b")).unwrap();
    let read: String = figment::Figment::from(Toml::string(&format!("x = {quoted}")))
        .extract_inner("x")
        .unwrap();
    assert_eq!(read, "a\"b");
    assert_eq!(
        template::toml_value(&json!(["x", "y"])).unwrap(),
        r#"["x", "y"]"#
    );
    assert_eq!(template::toml_value(&json!(null)), None);
}
