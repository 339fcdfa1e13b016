//! The tools besides running the manager: `status`, `simulate`, `config`, `down`,
//! `completions`.

pub mod completions;
pub mod config;
pub mod down;
pub mod simulate;
pub mod status;

/// Subcommand names that are not backends (so `--search a b status` stops at `status`).
pub const NAMES: [&str; 5] = ["status", "simulate", "config", "down", "completions"];
