//! `cargo xtask bench` (placeholder).

use anyhow::{Result, bail};

pub fn run(_args: &[String]) -> Result<()> {
    bail!("`cargo xtask bench` is not implemented yet")
}
