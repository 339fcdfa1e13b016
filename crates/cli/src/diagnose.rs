//! Configuration errors at start-up, as good as `config check`'s: every problem of the config
//! file with its `FILE:LINE` and a did-you-mean ([`file_problems`]). The other layers
//! (`CODALAB_WM_*`, flags) are named by `codalab_wm_core::settings::invalid`.

use codalab_wm_app::config::check::{self, Kind};
use std::path::Path;

/// The problems of the config file at `path` that no other layer can mend: syntax, unknown
/// keys and values of the wrong type (a missing or placeholder value may still come from a
/// flag, so those are left to the run). `Ok` when there are none.
pub fn file_problems(path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
    let file = path.display();
    let lines: Vec<String> = check::check(&text, &crate::backends::program())
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
