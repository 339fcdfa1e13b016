//! How the text log is written for a person: control characters escaped ([`escape`]), and
//! blocks of text (a dry run's batch script) shown as blocks on stdout ([`blocks`]) instead of
//! one escaped line.

pub mod blocks;
pub mod escape;

pub use blocks::BlockPrinter;
pub use escape::{Escaping, escape, escape_lines};
