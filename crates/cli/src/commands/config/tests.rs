//! The template cannot drift from the code: every field of every config struct appears in it,
//! and every key it holds (set or commented out) is accepted by the parser `run` uses.

use super::check::{self, Kind};
use super::schema::{self, PLACEHOLDER};
use super::template;
use crate::backends::catalogue;
use codalab_wm_core::layout::Layout;
use codalab_wm_core::settings::Layers;
use figment::Figment;
use figment::providers::{Format, Toml};

/// Every backend compiled in.
fn backends() -> Vec<&'static str> {
    catalogue().kinds().map(|k| k.name()).collect()
}

fn filled(text: &str) -> String {
    text.replace(PLACEHOLDER, "filled")
}

/// Whether `text` has `key = …` or `# key = …` on a line of its own.
fn mentions(text: &str, key: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start_matches("# ");
        line.starts_with(&format!("{key} = "))
    })
}

#[test]
fn every_field_of_every_config_struct_is_in_the_template() {
    for kind in catalogue().kinds() {
        let backend = kind.name();
        let table = kind.schema();
        let single = super::template(backend, false).unwrap();
        let pools = super::template(backend, true).unwrap();
        for key in schema::options(&schema::top(), &[]) {
            assert!(mentions(&single, key), "{backend}: top-level `{key}`");
        }
        for key in schema::options(&schema::worker(), &[]) {
            assert!(mentions(&single, key), "{backend}: [worker] `{key}`");
        }
        for key in table.fields {
            assert!(
                mentions(&single, key) || single.contains(&format!("[{}.{key}]", table.name)),
                "{backend}: [{}] `{key}`",
                table.name
            );
            assert!(
                mentions(&pools, key) || pools.contains(&format!(".{key}]")),
                "{backend} pools: [pools.{}] `{key}`",
                table.name
            );
        }
        for key in schema::options(&schema::pools(), &[]) {
            assert!(mentions(&pools, key), "{backend}: [[pools]] `{key}`");
        }
        for key in schema::top().fields.iter().chain(schema::worker().fields) {
            assert!(
                schema::top().docs.contains_key(*key)
                    || schema::worker().docs.contains_key(*key)
                    || ["pools", "worker"].contains(key),
                "`{key}` has no doc"
            );
        }
        for key in table.fields.iter().chain(schema::pools().fields) {
            let documented =
                table.docs.contains_key(*key) || schema::pools().docs.contains_key(*key);
            assert!(documented, "{backend}: `{key}` has no doc");
        }
        for (name, fields) in kind.subtables() {
            for key in fields {
                assert!(mentions(&single, key), "[{}.{name}] `{key}`", table.name);
            }
        }
    }
}

#[test]
fn every_template_passes_the_parser_the_layout_and_the_check_once_filled() {
    let dir = tempfile::tempdir().unwrap();
    for backend in backends() {
        for pools in [false, true] {
            let text = filled(&super::template(backend, pools).unwrap());
            let path = dir.path().join(format!("{backend}-{pools}.toml"));
            std::fs::write(&path, &text).unwrap();
            let layers = Layers {
                file: Some(path),
                flags: Figment::new(),
                backend: None,
            };
            let settings = layers
                .settings(&catalogue())
                .unwrap_or_else(|e| panic!("{backend} pools={pools}: {e}\n{text}"));
            assert_eq!(settings.pools.len(), if pools { 2 } else { 0 });
            let layout = Layout::new(&settings, &layers, &catalogue())
                .unwrap_or_else(|e| panic!("{backend} pools={pools}: {e}"));
            assert_eq!(layout.pools.len(), if pools { 2 } else { 1 });
            let found = check::check(&text);
            assert!(
                found.is_empty(),
                "{backend} pools={pools}: {found:?}\n{text}"
            );
        }
    }
}

#[test]
fn every_commented_out_key_is_accepted_once_uncommented() {
    for backend in backends() {
        for pools in [false, true] {
            let text = filled(&super::template(backend, pools).unwrap());
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
                let edited = edited.join("\n");
                let bad: Vec<_> = check::check(&edited)
                    .into_iter()
                    .filter(|d| matches!(d.kind, Kind::UnknownKey | Kind::WrongType | Kind::Syntax))
                    .collect();
                assert!(
                    bad.is_empty(),
                    "{backend} pools={pools}: `{option}`: {bad:?}"
                );
            }
        }
    }
}

#[test]
fn placeholders_are_where_required_values_go() {
    let text = super::template("slurm-batch", false).unwrap();
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
    let diagnostics = check::check(&text);
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(
        (diagnostics[0].line, diagnostics[0].kind),
        (found[0], Kind::Placeholder)
    );
}

#[cfg(feature = "azure")]
#[test]
fn azure_defaults_in_the_template_are_the_code_s() {
    use codalab_wm_azure::AzureBatchConfig;
    use codalab_wm_core::secret::Secret;
    let text = filled(&super::template("azure-batch", false).unwrap());
    let figment = Figment::from(Toml::string(&text));
    let parsed: AzureBatchConfig = figment.focus("azure_batch").extract().unwrap();
    let mut expected = AzureBatchConfig::new(
        parsed.account_name.clone(),
        parsed.service_url.clone(),
        parsed.job_id.clone(),
        Secret::new(parsed.log_container_url.expose()),
    );
    expected.account_key = parsed.account_key.clone();
    assert_eq!(parsed, expected);
}

#[cfg(feature = "k8s")]
#[test]
fn kubernetes_defaults_in_the_template_are_the_code_s() {
    use codalab_wm_k8s::KubernetesConfig;
    let text = super::template("kubernetes", false).unwrap();
    let parsed: KubernetesConfig = Figment::from(Toml::string(&text))
        .focus("kubernetes")
        .extract()
        .unwrap();
    assert_eq!(
        format!("{parsed:?}"),
        format!("{:?}", KubernetesConfig::default())
    );
}

#[test]
fn values_render_as_toml() {
    use serde_json::json;
    let quoted = template::toml_value(&json!("a\"b")).unwrap();
    let parsed: toml_edit::Value = quoted.parse().unwrap();
    assert_eq!(parsed.as_str(), Some("a\"b"));
    assert_eq!(
        template::toml_value(&json!(["x", "y"])).unwrap(),
        r#"["x", "y"]"#
    );
    assert_eq!(template::toml_value(&json!(null)), None);
}
