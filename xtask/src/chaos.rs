//! `cargo xtask chaos` (placeholder).

use anyhow::{Result, bail};

pub fn run(_args: &[String]) -> Result<()> {
    bail!("`cargo xtask chaos` is not implemented yet")
}
