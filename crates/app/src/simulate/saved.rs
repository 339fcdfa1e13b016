//! `advise`'s last answer, left in the history's directory for the page at `/` of `--listen`
//! ([`crate::dashboard::render_with_advice`]).

use super::advice::{Names, answer};
use codalab_wm_core::simulate::advise::Advice;
use std::path::{Path, PathBuf};

/// The file, in the history's directory, where `advise` leaves its last answer for the page.
pub const SAVED_ADVICE: &str = "advice.json";

/// `advise`'s last answer as the page shows it: when, the short answer, the frontier's plot.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedAdvice {
    /// When `advise` ran, seconds since the Unix epoch.
    pub at_unix_seconds: u64,
    /// The short answer (what to change, what it gives against the settings in force).
    pub summary: String,
    /// The frontier ([`super::advice_svg`]).
    pub svg: String,
}

impl SavedAdvice {
    /// `advice` as the page shows it, made at `at_unix_seconds`.
    pub fn new(advice: &Advice, names: &Names, at_unix_seconds: u64) -> Self {
        Self {
            at_unix_seconds,
            summary: answer(advice, names).trim().to_owned(),
            svg: super::advice_svg(advice, names),
        }
    }

    /// Writes it into the history's directory `dir`; returns the file's path.
    pub fn save(&self, dir: &Path) -> Result<PathBuf, String> {
        let path = dir.join(SAVED_ADVICE);
        let text = serde_json::to_string(self).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }

    /// The answer saved in the history's directory `dir`, if one is there and reads.
    pub fn read(dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(dir.join(SAVED_ADVICE)).ok()?;
        serde_json::from_str(&text).ok()
    }
}
