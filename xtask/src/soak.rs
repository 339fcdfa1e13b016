//! `cargo xtask soak` (placeholder).

use anyhow::{Result, bail};

pub fn run(_args: &[String]) -> Result<()> {
    bail!("`cargo xtask soak` is not implemented yet")
}
