//! Configuration errors at start-up, as good as `config check`'s: every problem of the config
//! file with its `FILE:LINE` and a did-you-mean ([`file_problems`]), and for the other layers
//! (`CODALAB_WM_*`, flags) an error that names the key as the file spells it (`local.cpu`, not
//! figment's internal `default.cpu`) and where it came from ([`settings_error`]).

use crate::commands::config::check::{self, Kind};
use std::path::Path;

/// The problems of the config file at `path` that no other layer can mend: syntax, unknown
/// keys and values of the wrong type (a missing or placeholder value may still come from a
/// flag, so those are left to the run). `Ok` when there are none.
pub fn file_problems(path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
    let file = path.display();
    let lines: Vec<String> = check::check(&text)
        .into_iter()
        .filter(|d| matches!(d.kind, Kind::Syntax | Kind::UnknownKey | Kind::WrongType))
        .map(|d| format!("  {file}:{d}"))
        .collect();
    if lines.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "invalid config file {file}: {} problem(s) (`cl-worker-manager config check {file}` checks more):\n{}",
        lines.len(),
        lines.join("\n")
    )
}

/// Every error of a figment extraction, one a line, each naming the key under `table` (the
/// backend table being read, or `None` for the top level) and its source.
pub fn settings_error(error: figment::Error, table: Option<&str>) -> anyhow::Error {
    let lines: Vec<String> = error.into_iter().map(|e| one(&e, table)).collect();
    let what = table.map_or_else(|| "configuration".to_owned(), |t| format!("[{t}] settings"));
    match lines.as_slice() {
        [line] => anyhow::anyhow!("invalid {what}: {line}"),
        _ => anyhow::anyhow!("invalid {what}:\n  {}", lines.join("\n  ")),
    }
}

fn one(error: &figment::Error, table: Option<&str>) -> String {
    let mut path: Vec<&str> = table.into_iter().collect();
    path.extend(error.path.iter().map(String::as_str));
    let key = path.join(".");
    let what = match &error.kind {
        figment::error::Kind::UnknownField(field, expected) => {
            let mut key = path.clone();
            if key.last() != Some(&field.as_str()) {
                key.push(field);
            }
            format!(
                "`{}` is not a setting{}",
                key.join("."),
                check::suggestion(field, expected)
            )
        }
        kind if key.is_empty() => kind.to_string(),
        kind => format!("`{key}`: {kind}"),
    };
    format!("{what}{}", source(error, &path))
}

/// ` (in FILE)`, ` (from CODALAB_WM_X__Y)` for the key at `path`, or nothing (flags, defaults).
fn source(error: &figment::Error, path: &[&str]) -> String {
    let Some(metadata) = &error.metadata else {
        return String::new();
    };
    if let Some(figment::Source::File(path)) = &metadata.source {
        return format!(" (in {})", path.display());
    }
    if metadata.name.contains("environment") {
        let name: Vec<String> = path.iter().map(|k| k.to_ascii_uppercase()).collect();
        return format!(" (from {}{})", crate::run::ENV_PREFIX, name.join("__"));
    }
    String::new()
}
