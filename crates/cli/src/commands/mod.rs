//! The tools besides running the manager: `status`, `simulate`, `config`, `down`,
//! `completions`.

pub mod completions;
pub mod config;
pub mod down;
pub mod simulate;
pub mod status;
