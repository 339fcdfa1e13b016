//! `cargo xtask dist [--features F]`: builds `cl-worker-manager` in release mode and writes
//! what a package needs beside it into `target/dist/`: the binary, the man page
//! (`cl-worker-manager.1`) and completions for bash, zsh and fish (`completions/`). The man page
//! and the completions come from the binary itself (`man`, `completions SHELL`), so they
//! match its flags exactly.

use crate::services::repo_root;
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// Completion scripts written, with the file name each shell looks for.
const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "cl-worker-manager.bash"),
    ("zsh", "_cl-worker-manager"),
    ("fish", "cl-worker-manager.fish"),
];

pub fn run(args: &[String]) -> Result<()> {
    let mut features = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--features" => features.push(
                args.next()
                    .context("--features needs a value, e.g. --features full")?
                    .clone(),
            ),
            other => {
                bail!("unknown dist option `{other}` (usage: cargo xtask dist [--features F])")
            }
        }
    }
    let root = repo_root();
    let mut build = vec![
        "build".to_owned(),
        "--release".into(),
        "--package".into(),
        "codalab-wm".into(),
        "--bin".into(),
        "cl-worker-manager".into(),
    ];
    for feature in &features {
        build.push("--features".into());
        build.push(feature.clone());
    }
    eprintln!("==> cargo {}", build.join(" "));
    let status = Command::new(env!("CARGO"))
        .args(&build)
        .current_dir(&root)
        .status()
        .context("building cl-worker-manager")?;
    if !status.success() {
        bail!("building cl-worker-manager failed ({status})");
    }
    let binary = crate::services::target_dir().join("release/cl-worker-manager");
    let dist = root.join("target/dist");
    std::fs::create_dir_all(dist.join("completions"))
        .with_context(|| format!("creating {}", dist.display()))?;
    std::fs::copy(&binary, dist.join("cl-worker-manager"))
        .with_context(|| format!("copying {}", binary.display()))?;
    write_output(&binary, &["man"], &dist.join("cl-worker-manager.1"))?;
    for (shell, file) in COMPLETIONS {
        write_output(
            &binary,
            &["completions", shell],
            &dist.join("completions").join(file),
        )?;
    }
    eprintln!("==> wrote {}", dist.display());
    Ok(())
}

/// Runs `binary args` and writes its standard output to `path` (which must not come out empty).
fn write_output(binary: &Path, args: &[&str], path: &Path) -> Result<()> {
    let output = Command::new(binary)
        .args(args)
        .output()
        .with_context(|| format!("running {} {}", binary.display(), args.join(" ")))?;
    if !output.status.success() || output.stdout.is_empty() {
        bail!(
            "{} {} failed ({}): {}",
            binary.display(),
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    std::fs::write(path, &output.stdout).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("    {}", path.display());
    Ok(())
}
