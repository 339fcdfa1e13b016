//! `cargo xtask demo [--exit-when-done]`: the README's first command. The work is in
//! `xtask/demo.sh`; this process replaces itself with it (exec), so that Ctrl-C reaches the
//! script's clean-up and the terminal gets its prompt back only when everything is stopped.

use crate::services::repo_root;
use anyhow::{Result, bail};
use std::os::unix::process::CommandExt;
use std::process::Command;

pub fn run(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a != "--exit-when-done") {
        bail!("usage: cargo xtask demo [--exit-when-done]");
    }
    let root = repo_root();
    let error = Command::new("bash")
        .arg(root.join("xtask/demo.sh"))
        .args(args)
        .current_dir(&root)
        .env("CARGO", env!("CARGO"))
        .exec();
    bail!("could not run xtask/demo.sh: {error}")
}
